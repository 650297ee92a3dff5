//! A held lock: its sequencer, whether it can still be relied on, and the
//! event set the moment it cannot.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::task::JoinHandle;

use crate::errors;
use crate::runtime;

/// A lock this session holds. Use it as a context manager: leaving the
/// block releases the lock.
///
/// ``lost`` is a ``threading.Event`` set as soon as the lock can no longer
/// be relied on (the session left the normal state, the master took the
/// lock away, or events were lost; or it was released): stop acting as the
/// holder then.
#[pyclass(module = "leasehold._leasehold", name = "LockGuard", frozen)]
pub struct LockGuard {
    key: String,
    sequencer: Vec<u8>,
    sequencer_hex: String,
    guard: Mutex<Option<Arc<leasehold::LockGuard>>>,
    watcher: Mutex<Option<JoinHandle<()>>>,
    lost: Py<PyAny>,
}

impl LockGuard {
    /// Wraps `guard`, with a task that sets the `lost` event.
    pub fn new(py: Python<'_>, guard: leasehold::LockGuard) -> PyResult<LockGuard> {
        let lost = py.import("threading")?.getattr("Event")?.call0()?.unbind();
        let guard = Arc::new(guard);
        let watched = guard.clone();
        let event = lost.clone_ref(py);
        let watcher = runtime::handle()?.spawn(async move {
            watched.lost().await;
            Python::attach(|py| {
                let _ = event.call_method0(py, "set");
            });
        });
        Ok(LockGuard {
            key: guard.key().to_string(),
            sequencer: guard.sequencer_bytes().to_vec(),
            sequencer_hex: guard.sequencer().to_hex(),
            guard: Mutex::new(Some(guard)),
            watcher: Mutex::new(Some(watcher)),
            lost,
        })
    }

    /// The Rust guard, once the watcher no longer shares it. Once taken
    /// (to be released) the lock is not to be relied on: `lost` is set.
    fn take(&self, py: Python<'_>) -> Option<leasehold::LockGuard> {
        let guard = self
            .guard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        if let Some(watcher) = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            watcher.abort();
            if let Ok(handle) = runtime::handle() {
                let _ = py.detach(|| handle.block_on(watcher));
            }
        }
        let _ = self.lost.call_method0(py, "set");
        Arc::try_unwrap(guard).ok()
    }
}

#[pymethods]
impl LockGuard {
    /// The locked key.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// The sequencer, as the opaque bytes the master checks: pass it to the
    /// servers the lock protects (``Client.check_sequencer``).
    #[getter]
    fn sequencer<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.sequencer)
    }

    /// The sequencer as text (hex), as the CLI prints it.
    #[getter]
    fn sequencer_hex(&self) -> &str {
        &self.sequencer_hex
    }

    /// Whether the lock can still be relied on now.
    fn is_held(&self) -> bool {
        let guard = self.guard.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().is_some_and(|g| g.is_held())
    }

    /// Set as soon as the lock can no longer be relied on.
    #[getter]
    fn lost(&self, py: Python<'_>) -> Py<PyAny> {
        self.lost.clone_ref(py)
    }

    /// Releases the lock (the last guard of the key gives it back). Safe
    /// to call twice.
    #[pyo3(signature = (timeout=None))]
    fn release(&self, py: Python<'_>, timeout: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let timeout = crate::values::maybe_seconds(timeout.as_ref(), "timeout")?;
        let Some(guard) = self.take(py) else {
            return Ok(());
        };
        runtime::wait(py, guard.release(), timeout)?.map_err(errors::to_py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.release(py, None)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "LockGuard(key={:?}, sequencer={:?})",
            self.key, self.sequencer_hex
        )
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Dropped without release: the client gives the lock back in the
        // background, which needs the runtime.
        let guard = self
            .guard
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(watcher) = self
            .watcher
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            watcher.abort();
        }
        if let (Some(guard), Ok(handle)) = (guard, runtime::handle()) {
            let _entered = handle.enter();
            drop(guard);
        }
    }
}
