//! A held lock: its sequencer, whether it can still be relied on, and the
//! event set the moment it cannot.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::held::Held;
use crate::runtime;
use crate::values::maybe_seconds;

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
    held: Held<leasehold::LockGuard>,
}

impl LockGuard {
    pub fn new(py: Python<'_>, guard: leasehold::LockGuard) -> PyResult<LockGuard> {
        Ok(LockGuard {
            key: guard.key().to_string(),
            sequencer: guard.sequencer_bytes().to_vec(),
            sequencer_hex: guard.sequencer().to_hex(),
            held: Held::new(py, guard.lost_owned(), guard)?,
        })
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
        self.held.with(|g| g.is_held()).unwrap_or(false)
    }

    /// Set as soon as the lock can no longer be relied on.
    #[getter]
    fn lost(&self, py: Python<'_>) -> Py<PyAny> {
        self.held.lost(py)
    }

    /// For `leasehold.aio`: a future of the running loop, done when
    /// `lost` is set.
    fn _lost_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.held.lost_future(py)
    }

    /// Releases the lock (the last guard of the key gives it back). Safe
    /// to call twice.
    #[pyo3(signature = (timeout=None, *, _aio=false))]
    fn release(
        &self,
        py: Python<'_>,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let guard = self.held.take(py);
        let releasing = async move {
            match guard {
                Some(guard) => guard.release().await,
                None => Ok(()),
            }
        };
        runtime::run(py, releasing, timeout, _aio, |py, ()| Ok(py.None()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.release(py, None, false)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "LockGuard(key={:?}, sequencer={:?})",
            self.key, self.sequencer_hex
        )
    }
}
