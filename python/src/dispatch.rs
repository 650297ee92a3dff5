//! Session state callbacks: called on a thread of the session's own, in
//! order and never two at once, away from the client's runtime (a slow
//! callback must not hold up the KeepAlives), and stopped at interpreter
//! exit before the interpreter finalizes.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use leasehold::SessionState;
use pyo3::prelude::*;

use crate::states;

/// What a callbacks' thread is sent: a state to deliver, or `None` to stop.
type Feed = mpsc::Sender<Option<SessionState>>;

/// The callbacks' threads, to stop at exit.
static THREADS: Mutex<Vec<(Feed, JoinHandle<()>)>> = Mutex::new(Vec::new());

/// One session's callbacks and the thread that calls them.
#[derive(Clone)]
pub struct Callbacks {
    callbacks: Arc<Mutex<Vec<Py<PyAny>>>>,
    sender: Feed,
}

impl Callbacks {
    /// Starts the thread.
    pub fn start() -> Callbacks {
        let (sender, receiver) = mpsc::channel::<Option<SessionState>>();
        let callbacks: Arc<Mutex<Vec<Py<PyAny>>>> = Arc::default();
        let called = callbacks.clone();
        let thread = std::thread::Builder::new()
            .name("leasehold-callbacks".into())
            .spawn(move || {
                while let Ok(Some(state)) = receiver.recv() {
                    Python::attach(|py| deliver(py, &called, state));
                }
            })
            .expect("start the callbacks' thread");
        THREADS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((sender.clone(), thread));
        Callbacks { callbacks, sender }
    }

    /// Adds `callback`.
    pub fn add(&self, callback: Py<PyAny>) {
        self.callbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(callback);
    }

    /// Queues `state` for the callbacks (from the session's task: quick).
    pub fn entered(&self, state: SessionState) {
        let _ = self.sender.send(Some(state));
    }
}

/// Calls every callback with `state`; one that raises is logged (logger
/// `leasehold`, with its traceback) and the others are still called.
fn deliver(py: Python<'_>, callbacks: &Mutex<Vec<Py<PyAny>>>, state: SessionState) {
    let called: Vec<Py<PyAny>> = {
        let callbacks = callbacks.lock().unwrap_or_else(|e| e.into_inner());
        callbacks.iter().map(|c| c.clone_ref(py)).collect()
    };
    let Ok(state) = states::to_py(py, state) else {
        return;
    };
    for callback in called {
        if let Err(e) = callback.call1(py, (state.clone_ref(py),)) {
            log(py, &e);
        }
    }
}

fn log(py: Python<'_>, error: &PyErr) {
    let logged = (|| -> PyResult<()> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("leasehold",))?;
        let info = (error.get_type(py), error.value(py), error.traceback(py));
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("exc_info", info)?;
        logger.call_method(
            "error",
            ("a session state callback raised an exception",),
            Some(&kwargs),
        )?;
        Ok(())
    })();
    if logged.is_err() {
        error.clone_ref(py).print(py);
    }
}

/// Stops every callbacks' thread, after the states already queued.
pub fn stop_all(py: Python<'_>) {
    let threads = std::mem::take(&mut *THREADS.lock().unwrap_or_else(|e| e.into_inner()));
    for (sender, thread) in threads {
        let _ = sender.send(None);
        py.detach(|| {
            let _ = thread.join();
        });
    }
}
