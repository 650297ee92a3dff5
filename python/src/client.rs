//! A connection to a master or a cell, and the calls that need no session.

use std::sync::Mutex;

use leasehold::{ClientConfig, DeleteOptions, PutOptions, SessionOptions};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::IntoPyObjectExt;

use crate::config::WATCH_DEFAULT;
use crate::errors;
use crate::runtime;
use crate::session::{positive, Session};
use crate::values::{contents, maybe_seconds, seconds, Node, Stat};

/// A client of a Leasehold master, or of the master of the cell whose
/// members ``addr`` lists (``"a:7171,b:7171,c:7171"``). Safe to share
/// between threads. Use it as a context manager: leaving the block closes
/// its connections.
#[pyclass(module = "leasehold._leasehold", name = "Client", frozen)]
pub struct Client {
    inner: Mutex<Option<leasehold::Client>>,
    addr: String,
}

impl Client {
    pub(crate) fn client(&self) -> PyResult<leasehold::Client> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .clone()
            .ok_or_else(|| errors::raise("RequestRefused", "the client is closed".into(), &[]))
    }
}

/// The sequencer's bytes, from bytes or the hex the CLI prints.
fn sequencer_bytes(value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(text) = value.cast::<PyString>() {
        let text = text.to_cow()?;
        return leasehold::Sequencer::from_hex(text.trim())
            .map(|s| s.to_bytes())
            .ok_or_else(|| PyValueError::new_err("not a sequencer's hex"));
    }
    Err(PyTypeError::new_err(
        "a sequencer is bytes, or its hex as str",
    ))
}

#[pymethods]
impl Client {
    /// Connects, failing at once if no master can be reached.
    /// ``timeout``: seconds allowed for connecting and for each request's
    /// answer; ``token``: a bearer token the connection acts with.
    #[staticmethod]
    #[pyo3(signature = (addr, *, timeout=None, token=None, operator_token=None, _aio=false))]
    fn connect(
        py: Python<'_>,
        addr: String,
        timeout: Option<Bound<'_, PyAny>>,
        token: Option<String>,
        operator_token: Option<String>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut config = ClientConfig::default();
        if let Some(timeout) = maybe_seconds(timeout.as_ref(), "timeout")? {
            let timeout = positive(timeout, "timeout")?;
            config.connect_timeout = timeout;
            config.request_timeout = timeout;
        }
        config.token = token;
        config.operator_token = operator_token;
        let to = addr.clone();
        let connecting = leasehold::Client::connect_with(to, config);
        runtime::run(py, connecting, None, _aio, move |py, client| {
            let made = Client {
                inner: Mutex::new(Some(client)),
                addr,
            };
            Ok(Py::new(py, made)?.into_any())
        })
    }

    /// Creates a session. ``lease``, ``grace`` and ``lock_delay`` are
    /// seconds (floats) or ``datetime.timedelta``; None takes the master's
    /// lease (12 s), a 45 s grace period and a 15 s lock-delay.
    #[pyo3(signature = (name, *, lease=None, grace=None, lock_delay=None, cache_keys=None, _aio=false))]
    #[allow(clippy::too_many_arguments)]
    fn session(
        &self,
        py: Python<'_>,
        name: String,
        lease: Option<Bound<'_, PyAny>>,
        grace: Option<Bound<'_, PyAny>>,
        lock_delay: Option<Bound<'_, PyAny>>,
        cache_keys: Option<usize>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let options = session_options(name, lease, grace, lock_delay, cache_keys)?;
        let client = self.client()?;
        let creating = async move { client.create_session(options).await };
        runtime::run(py, creating, None, _aio, |py, session| {
            Ok(Py::new(py, Session::new(session))?.into_any())
        })
    }

    /// The node at ``key``, or None.
    #[pyo3(signature = (key, *, timeout=None, _aio=false))]
    fn get(
        &self,
        py: Python<'_>,
        key: String,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let client = self.client()?;
        let reading = async move { client.get(&key).await };
        runtime::run(py, reading, timeout, _aio, |py, node| {
            node.map(Node::from).into_py_any(py)
        })
    }

    /// The metadata of the node at ``key``, or None.
    #[pyo3(signature = (key, *, timeout=None, _aio=false))]
    fn stat(
        &self,
        py: Python<'_>,
        key: String,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let client = self.client()?;
        let reading = async move { client.stat(&key).await };
        runtime::run(py, reading, timeout, _aio, |py, stat| {
            stat.map(Stat::from).into_py_any(py)
        })
    }

    /// Writes ``value`` (bytes, or str as UTF-8) at ``key``; returns the
    /// node's new modify index. ``cas``: only if the node's modify index is
    /// still this (0: only if there is no node), else ``Conflict``;
    /// ``ephemeral``: a session whose end deletes the node.
    #[pyo3(signature = (key, value, *, cas=None, flags=None, ephemeral=None, timeout=None, _aio=false))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        key: String,
        value: Bound<'_, PyAny>,
        cas: Option<u64>,
        flags: Option<u64>,
        ephemeral: Option<PyRef<'_, Session>>,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let value = contents(&value)?;
        let mut options = PutOptions::new();
        if let Some(cas) = cas {
            options = options.cas(cas);
        }
        if let Some(flags) = flags {
            options = options.flags(flags);
        }
        if let Some(session) = ephemeral.as_ref() {
            options = options.ephemeral(&session.inner);
        }
        let client = self.client()?;
        let writing = async move { client.put(&key, value, options).await };
        runtime::run(py, writing, timeout, _aio, |py, index| {
            index.into_py_any(py)
        })
    }

    /// Deletes the node at ``key`` (``recursive``: and everything below);
    /// returns how many nodes were deleted.
    #[pyo3(signature = (key, *, cas=None, recursive=false, timeout=None, _aio=false))]
    fn delete(
        &self,
        py: Python<'_>,
        key: String,
        cas: Option<u64>,
        recursive: bool,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let mut options = DeleteOptions::new();
        if let Some(cas) = cas {
            options = options.cas(cas);
        }
        if recursive {
            options = options.recursive();
        }
        let client = self.client()?;
        let deleting = async move { client.delete(&key, options).await };
        runtime::run(py, deleting, timeout, _aio, |py, deleted| {
            deleted.total.into_py_any(py)
        })
    }

    /// The keys under ``prefix``, one level down unless ``recursive``.
    #[pyo3(signature = (prefix, *, recursive=false, timeout=None, _aio=false))]
    fn list(
        &self,
        py: Python<'_>,
        prefix: String,
        recursive: bool,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let client = self.client()?;
        let listing = async move { client.list(&prefix, recursive).await };
        runtime::run(py, listing, timeout, _aio, |py, keys| keys.into_py_any(py))
    }

    /// Whether ``sequencer`` (bytes, or its hex) still names a lock its
    /// session holds, not freed and taken again since.
    #[pyo3(signature = (sequencer, *, timeout=None, _aio=false))]
    fn check_sequencer(
        &self,
        py: Python<'_>,
        sequencer: Bound<'_, PyAny>,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let bytes = sequencer_bytes(&sequencer)?;
        let client = self.client()?;
        let checking = async move { client.check_sequencer(&bytes).await };
        runtime::run(py, checking, timeout, _aio, |py, valid| {
            valid.into_py_any(py)
        })
    }

    /// The leader of the election on ``key``: ``(session id, value)``, or
    /// None.
    #[pyo3(signature = (key, *, timeout=None, _aio=false))]
    fn leader(
        &self,
        py: Python<'_>,
        key: String,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let client = self.client()?;
        let reading = async move { client.leader(&key).await };
        runtime::run(py, reading, timeout, _aio, |py, leader| {
            leader
                .map(|l| (l.session.to_string(), PyBytes::new(py, &l.value)))
                .into_py_any(py)
        })
    }

    /// Waits until the node at ``key`` changes after ``after_index`` (it
    /// was created, written or deleted), or ``timeout`` seconds pass (at
    /// most 600; None: 60); returns ``(index, node or None)``: pass the index to the
    /// next watch.
    #[pyo3(signature = (key, after_index=0, *, timeout=None, _aio=false))]
    fn watch(
        &self,
        py: Python<'_>,
        key: String,
        after_index: u64,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let timeout = positive(timeout.unwrap_or(WATCH_DEFAULT), "timeout")?;
        let client = self.client()?;
        let watching = async move { client.watch(&key, after_index, timeout).await };
        runtime::run(py, watching, None, _aio, |py, seen| {
            (seen.index, seen.node.map(Node::from)).into_py_any(py)
        })
    }

    /// Closes the client's connections. Sessions made with it stop being
    /// kept alive.
    fn close(&self) {
        let client = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let (Some(client), Ok(handle)) = (client, runtime::handle()) {
            let _entered = handle.enter();
            drop(client);
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        format!("Client({:?})", self.addr)
    }
}

/// A session's options from the arguments Python gives.
pub(crate) fn session_options(
    name: String,
    lease: Option<Bound<'_, PyAny>>,
    grace: Option<Bound<'_, PyAny>>,
    lock_delay: Option<Bound<'_, PyAny>>,
    cache_keys: Option<usize>,
) -> PyResult<SessionOptions> {
    let mut options = SessionOptions::new(name);
    if let Some(lease) = lease.as_ref() {
        options.lease = Some(positive(seconds(lease, "lease")?, "lease")?);
    }
    if let Some(grace) = grace.as_ref() {
        options.grace = positive(seconds(grace, "grace")?, "grace")?;
    }
    options.lock_delay = maybe_seconds(lock_delay.as_ref(), "lock_delay")?;
    if let Some(keys) = cache_keys {
        options.cache_keys = keys;
    }
    Ok(options)
}
