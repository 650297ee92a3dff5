//! A session: its lease kept alive by the client, its state, its locks and
//! its cached reads.

use std::sync::Mutex;

use leasehold::LockOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::dispatch::Callbacks;
use crate::lock::LockGuard;
use crate::runtime;
use crate::states;
use crate::values::{maybe_seconds, Node};

/// A session with the master. Use it as a context manager: leaving the
/// block closes it, releasing its locks at once (no lock-delay).
#[pyclass(module = "leasehold._leasehold", name = "Session", frozen)]
pub struct Session {
    pub(crate) inner: leasehold::Session,
    callbacks: Mutex<Option<Callbacks>>,
}

impl Session {
    pub fn new(inner: leasehold::Session) -> Session {
        Session {
            inner,
            callbacks: Mutex::new(None),
        }
    }
}

/// The options of a lock request.
fn lock_options(
    shared: bool,
    timeout: Option<std::time::Duration>,
    contents: Option<Vec<u8>>,
) -> LockOptions {
    let mut options = if shared {
        LockOptions::shared()
    } else {
        LockOptions::exclusive()
    };
    if let Some(timeout) = timeout {
        options = options.timeout(timeout);
    }
    if let Some(contents) = contents {
        options = options.contents(contents);
    }
    options
}

#[pymethods]
impl Session {
    /// The session's id, as lock holders and ``leasehold sessions`` show it.
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_string()
    }

    /// The session's token: whoever holds it can act for the session.
    #[getter]
    fn token(&self) -> String {
        self.inner.token().to_string()
    }

    /// The state now (``leasehold.SessionState``).
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        states::to_py(py, self.inner.state())
    }

    /// Calls ``callback(state)`` with every state the session enters from
    /// now on, in order, one call at a time, on a thread of the session's
    /// own. An exception in a callback is logged (logger ``leasehold``) and
    /// does not stop later calls.
    fn on_state_change(&self, callback: Py<PyAny>) {
        let mut callbacks = self.callbacks.lock().unwrap_or_else(|e| e.into_inner());
        let callbacks = callbacks.get_or_insert_with(|| {
            let started = Callbacks::start();
            let feed = started.clone();
            self.inner.on_state_change(move |state| feed.entered(state));
            started
        });
        callbacks.add(callback);
    }

    /// Takes the lock of ``key`` (``shared=True``: a shared lock), waiting
    /// in line up to ``timeout`` seconds (None: as long as the client
    /// allows). Raises ``LockBusy`` if the wait ends first. Ctrl-C ends the
    /// wait and leaves the line.
    #[pyo3(signature = (key, *, shared=false, timeout=None, contents=None, _aio=false))]
    fn lock(
        &self,
        py: Python<'_>,
        key: String,
        shared: bool,
        timeout: Option<Bound<'_, PyAny>>,
        contents: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let contents = contents.as_ref().map(crate::values::contents).transpose()?;
        let options = lock_options(shared, timeout, contents);
        let session = self.inner.clone();
        let locking = async move { session.lock(&key, options).await };
        runtime::run(py, locking, None, _aio, guarded)
    }

    /// Takes the lock of ``key`` only if it is free now; raises
    /// ``LockBusy`` (with ``lock_delay_left``) otherwise.
    #[pyo3(signature = (key, *, shared=false, contents=None, _aio=false))]
    fn try_lock(
        &self,
        py: Python<'_>,
        key: String,
        shared: bool,
        contents: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let contents = contents.as_ref().map(crate::values::contents).transpose()?;
        let options = lock_options(shared, None, contents);
        let session = self.inner.clone();
        let locking = async move { session.try_lock(&key, options).await };
        runtime::run(py, locking, None, _aio, guarded)
    }

    /// Reads ``key`` through the session's cache (Chubby's consistent
    /// cache: a cached read is never older than a write it could miss).
    #[pyo3(signature = (key, *, timeout=None, _aio=false))]
    fn get(
        &self,
        py: Python<'_>,
        key: String,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let session = self.inner.clone();
        let reading = async move { session.get(&key).await };
        runtime::run(py, reading, timeout, _aio, |py, node| {
            node.map(Node::from).into_py_any(py)
        })
    }

    /// Subscribes to changes at ``key`` and its direct children
    /// (``prefix=True``: at every key at or below it), and to this
    /// session's states; an iterator of ``Event``.
    #[pyo3(signature = (key, *, prefix=false, _aio=false))]
    fn subscribe(
        &self,
        py: Python<'_>,
        key: String,
        prefix: bool,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let session = self.inner.clone();
        let options = crate::subscription::options(prefix);
        let subscribing = async move { session.subscribe(&key, options).await };
        runtime::run(py, subscribing, None, _aio, |py, subscribed| {
            let made = crate::subscription::Subscription::new(subscribed);
            Ok(Py::new(py, made)?.into_any())
        })
    }

    /// Closes the session: its locks are released first, so they pass on
    /// without lock-delay. Closing twice, or after expiry, succeeds.
    #[pyo3(signature = (*, timeout=None, _aio=false))]
    fn close(
        &self,
        py: Python<'_>,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let session = self.inner.clone();
        runtime::run(py, session.close(), timeout, _aio, |py, ()| Ok(py.None()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py, None, false)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Session(id={}, state={:?})",
            self.inner.id(),
            self.inner.state()
        )
    }
}

/// A guard for `guard`, as Python sees it.
fn guarded(py: Python<'_>, guard: leasehold::LockGuard) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, LockGuard::new(py, guard)?)?.into_any())
}

/// Seconds given for a lease or a grace period, which must be above 0.
pub fn positive(value: std::time::Duration, what: &str) -> PyResult<std::time::Duration> {
    if value.is_zero() {
        return Err(PyValueError::new_err(format!(
            "{what} must be more than 0 seconds"
        )));
    }
    Ok(value)
}
