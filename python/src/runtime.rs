//! The threads the client runs on, and the one way a blocking call waits.
//!
//! The runtime starts on first use and stops at interpreter exit (the
//! package registers [`shutdown`] with `atexit`), before the interpreter
//! finalizes: no task of ours may touch Python objects once it has begun
//! (the trap pyo3-async-runtimes falls into, its issue #40).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::{Handle, Runtime};

use crate::errors;

/// How often a blocking wait looks for Ctrl-C.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// How long interpreter exit waits for the client's tasks to stop.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

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
pub(crate) fn wait<T, F>(py: Python<'_>, future: F, timeout: Option<Duration>) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let handle = handle()?;
    let mut task = handle.spawn(future);
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let slice = match deadline {
            Some(deadline) => deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_CHECK),
            None => SIGNAL_CHECK,
        };
        let done =
            py.detach(|| handle.block_on(async { tokio::time::timeout(slice, &mut task).await }));
        match done {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => {
                return Err(PyRuntimeError::new_err(format!(
                    "the leasehold client's task failed: {e}"
                )))
            }
            Err(_) => {}
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
