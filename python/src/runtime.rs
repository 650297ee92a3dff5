//! The threads the client runs on, and the one way a blocking call waits.
//!
//! The runtime starts on first use and stops at interpreter exit (the
//! package registers [`shutdown`] with `atexit`), before the interpreter
//! finalizes: no task of ours may touch Python objects once it has begun
//! (the trap pyo3-async-runtimes falls into, its issue #40).

use std::future::Future;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::ClientError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::{Handle, Runtime};
use tokio::task::AbortHandle;

use crate::config::{SHUTDOWN_WAIT, SIGNAL_CHECK};
use crate::errors;

/// The runtime: `None` before first use and after shutdown.
static RUNTIME: Mutex<State> = Mutex::new(State::NotStarted);

enum State {
    NotStarted,
    Running(Arc<Runtime>),
    Stopped,
}

/// The runtime's handle, starting it on first use.
pub(crate) fn handle() -> PyResult<Handle> {
    let mut state = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    match &*state {
        State::Running(runtime) => Ok(runtime.handle().clone()),
        State::Stopped => Err(PyRuntimeError::new_err(
            "the leasehold client's runtime has stopped: the interpreter is exiting",
        )),
        State::NotStarted => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("leasehold")
                .enable_all()
                .build()
                .map_err(|e| PyRuntimeError::new_err(format!("cannot start the runtime: {e}")))?;
            let runtime = Arc::new(runtime);
            let handle = runtime.handle().clone();
            *state = State::Running(runtime);
            Ok(handle)
        }
    }
}

/// Stops the runtime: every session's tasks end (the master lets their
/// sessions expire unless closed first). Called at interpreter exit.
pub(crate) fn shutdown(py: Python<'_>) {
    let taken = {
        let mut state = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *state, State::Stopped)
    };
    if let State::Running(runtime) = taken {
        // Tasks finishing now may want the interpreter (a callback, an
        // event set): let them have it while this thread waits.
        py.detach(move || match Arc::try_unwrap(runtime) {
            Ok(runtime) => runtime.shutdown_timeout(SHUTDOWN_WAIT),
            Err(shared) => drop(shared),
        });
    }
}

/// Runs `future` on the runtime and waits for it with the interpreter
/// free for other threads. Ctrl-C (`KeyboardInterrupt`) or `timeout`
/// ends the wait and drops the future, which undoes what it started: a
/// lock wait is withdrawn from the line on the master.
///
/// The answer comes back over a channel of the standard library, whose
/// timed wait needs no timer of the runtime: registering one from this
/// thread, sooner than every timer the runtime has, wakes the runtime's
/// driver on every call.
pub(crate) fn wait<T, F>(py: Python<'_>, future: F, timeout: Option<Duration>) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let handle = handle()?;
    let (answer, mut answered) = std::sync::mpsc::sync_channel(1);
    let task = handle.spawn(async move {
        let _ = answer.send(future.await);
    });
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let slice = match deadline {
            Some(deadline) => deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_CHECK),
            None => SIGNAL_CHECK,
        };
        // Moved in and back: a receiver cannot be shared between threads.
        let (outcome, back) = py.detach(move || (answered.recv_timeout(slice), answered));
        answered = back;
        match outcome {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Disconnected) => {
                let e = py.detach(|| handle.block_on(task)).err();
                return Err(PyRuntimeError::new_err(format!(
                    "the leasehold client's task failed: {e:?}"
                )));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        let interrupted = py.check_signals();
        let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        if interrupted.is_err() || timed_out {
            task.abort();
            let _ = py.detach(|| handle.block_on(task));
            interrupted?;
            return Err(errors::timeout(timeout.unwrap_or_default()));
        }
    }
}

/// Runs `future` for a call: blocking (`aio` false: [`wait`]) or as a
/// future of the running `asyncio` loop, which `convert` fills in on the
/// client's thread, with the interpreter. Cancelling that future drops
/// `future`, as Ctrl-C does for a blocking call.
pub(crate) fn run<T, F, C>(
    py: Python<'_>,
    future: F,
    timeout: Option<Duration>,
    aio: bool,
    convert: C,
) -> PyResult<Py<PyAny>>
where
    T: Send + 'static,
    F: Future<Output = Result<T, ClientError>> + Send + 'static,
    C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    if !aio {
        let value = wait(py, future, timeout)?.map_err(errors::to_py)?;
        return convert(py, value);
    }
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let awaited = event_loop.call_method0("create_future")?;
    let (to_settle, on_loop) = (awaited.clone().unbind(), event_loop.unbind());
    let task = handle()?.spawn(async move {
        let outcome = match timeout {
            Some(limit) => tokio::time::timeout(limit, future).await.ok(),
            None => Some(future.await),
        };
        Python::attach(|py| {
            let (method, value) = match outcome {
                Some(Ok(value)) => match convert(py, value) {
                    Ok(made) => ("set_result", made),
                    Err(e) => ("set_exception", e.into_value(py).into_any()),
                },
                Some(Err(e)) => ("set_exception", errors::to_py(e).into_value(py).into_any()),
                None => {
                    let e = errors::timeout(timeout.unwrap_or_default());
                    ("set_exception", e.into_value(py).into_any())
                }
            };
            let settled = py
                .import("leasehold._settle")
                .and_then(|m| m.call_method1("settle", (on_loop, to_settle, method, value)));
            if let Err(e) = settled {
                e.print(py);
            }
        });
    });
    awaited.call_method1("add_done_callback", (Abort(task.abort_handle()),))?;
    Ok(awaited.unbind())
}

/// Called with an `asyncio` future when it is done: if it was cancelled,
/// stops the client's task for it.
#[pyclass(module = "leasehold._leasehold", frozen)]
struct Abort(AbortHandle);

#[pymethods]
impl Abort {
    fn __call__(&self, done: &Bound<'_, PyAny>) -> PyResult<()> {
        if done.call_method0("cancelled")?.extract::<bool>()? {
            self.0.abort();
        }
        Ok(())
    }
}
