//! The recipes: an election, a counting semaphore, and a keeper that hands
//! out one live session at a time.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::errors;
use crate::held::Held;
use crate::runtime;
use crate::session::Session;
use crate::values::{contents, maybe_seconds};

/// An election on ``key`` for ``session``: the leader is whoever holds the
/// key's lock, and its value is the key's contents.
#[pyclass(module = "leasehold._leasehold", name = "Election", frozen)]
pub struct Election {
    session: leasehold::Session,
    key: String,
}

impl Election {
    fn election(&self) -> leasehold::Election {
        leasehold::Election::new(&self.session, self.key.clone())
    }
}

#[pymethods]
impl Election {
    #[new]
    fn new(session: PyRef<'_, Session>, key: String) -> Election {
        Election {
            session: session.inner.clone(),
            key,
        }
    }

    /// The election's key.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// Waits until this session leads (Ctrl-C or ``timeout`` gives up and
    /// leaves the line), publishing ``value``; returns the term.
    #[pyo3(signature = (value, *, timeout=None, _aio=false))]
    fn campaign(
        &self,
        py: Python<'_>,
        value: Bound<'_, PyAny>,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let value = contents(&value)?;
        let election = self.election();
        let campaigning = async move { election.campaign(value).await };
        runtime::run(py, campaigning, timeout, _aio, |py, term| {
            Ok(Py::new(py, Term::new(py, term)?)?.into_any())
        })
    }

    /// Leads at once if nobody else does; None if someone does.
    #[pyo3(signature = (value, *, _aio=false))]
    fn try_campaign(
        &self,
        py: Python<'_>,
        value: Bound<'_, PyAny>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let value = contents(&value)?;
        let election = self.election();
        let campaigning = async move { election.try_campaign(value).await };
        runtime::run(py, campaigning, None, _aio, |py, term| match term {
            Some(term) => Ok(Py::new(py, Term::new(py, term)?)?.into_any()),
            None => Ok(py.None()),
        })
    }

    /// The leader now: ``(session id, value)``, or None.
    #[pyo3(signature = (*, _aio=false))]
    fn leader(&self, py: Python<'_>, _aio: bool) -> PyResult<Py<PyAny>> {
        let election = self.election();
        let reading = async move { election.leader().await };
        runtime::run(py, reading, None, _aio, |py, leader| {
            leader
                .map(|l| (l.session.to_string(), PyBytes::new(py, &l.value)))
                .into_py_any(py)
        })
    }
}

/// A term of leadership. Leaving a ``with`` block resigns.
#[pyclass(module = "leasehold._leasehold", name = "Term", frozen)]
pub struct Term {
    sequencer: Vec<u8>,
    sequencer_hex: String,
    held: Held<leasehold::Term>,
}

impl Term {
    fn new(py: Python<'_>, term: leasehold::Term) -> PyResult<Term> {
        Ok(Term {
            sequencer: term.sequencer_bytes().to_vec(),
            sequencer_hex: term.sequencer().to_hex(),
            held: Held::new(py, term.lost_owned(), term)?,
        })
    }
}

#[pymethods]
impl Term {
    /// The term's sequencer: servers the leader writes to refuse older ones.
    #[getter]
    fn sequencer<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.sequencer)
    }

    /// The sequencer as hex.
    #[getter]
    fn sequencer_hex(&self) -> &str {
        &self.sequencer_hex
    }

    /// Whether leadership can still be relied on now.
    fn is_leader(&self) -> bool {
        self.held.with(|t| t.is_leader()).unwrap_or(false)
    }

    /// Set as soon as leadership can no longer be relied on.
    #[getter]
    fn lost(&self, py: Python<'_>) -> Py<PyAny> {
        self.held.lost(py)
    }

    /// For `leasehold.aio`: a future of the running loop, done when
    /// `lost` is set.
    fn _lost_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.held.lost_future(py)
    }

    /// Publishes a new value without giving up the term.
    #[pyo3(signature = (value, *, _aio=false))]
    fn proclaim(&self, py: Python<'_>, value: Bound<'_, PyAny>, _aio: bool) -> PyResult<Py<PyAny>> {
        let value = contents(&value)?;
        let Some(term) = self.held.shared() else {
            return Err(errors::raise(
                "RequestRefused",
                "the term has ended".into(),
                &[],
            ));
        };
        let proclaiming = async move { term.proclaim(value).await };
        runtime::run(py, proclaiming, None, _aio, |py, ()| Ok(py.None()))
    }

    /// Steps down: the next in line leads at once. Safe to call twice.
    #[pyo3(signature = (*, _aio=false))]
    fn resign(&self, py: Python<'_>, _aio: bool) -> PyResult<Py<PyAny>> {
        let term = self.held.take(py);
        let resigning = async move {
            match term {
                Some(term) => term.resign().await,
                None => Ok(()),
            }
        };
        runtime::run(py, resigning, None, _aio, |py, ()| Ok(py.None()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.resign(py, false)?;
        Ok(false)
    }
}

/// A counting semaphore of ``limit`` slots under ``prefix`` (Consul's
/// recipe): each holder's session owns a contender key.
#[pyclass(module = "leasehold._leasehold", name = "Semaphore", frozen)]
pub struct Semaphore {
    session: leasehold::Session,
    prefix: String,
    limit: u32,
}

#[pymethods]
impl Semaphore {
    #[new]
    fn new(session: PyRef<'_, Session>, prefix: String, limit: u32) -> Semaphore {
        Semaphore {
            session: session.inner.clone(),
            prefix,
            limit,
        }
    }

    /// Waits for a slot, up to ``timeout`` seconds (None: as long as the
    /// session lives); ``value`` goes into the contender key, for people.
    #[pyo3(signature = (value="", *, timeout=None, _aio=false))]
    fn acquire(
        &self,
        py: Python<'_>,
        value: &str,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = maybe_seconds(timeout.as_ref(), "timeout")?;
        let semaphore = leasehold::Semaphore::new(&self.session, self.prefix.clone(), self.limit);
        let value = value.as_bytes().to_vec();
        let acquiring = async move { semaphore.acquire(value, timeout).await };
        runtime::run(py, acquiring, None, _aio, |py, permit| {
            Ok(Py::new(py, Permit::new(py, permit)?)?.into_any())
        })
    }
}

/// One slot of a semaphore. Leaving a ``with`` block releases it.
#[pyclass(module = "leasehold._leasehold", name = "Permit", frozen)]
pub struct Permit {
    held: Held<leasehold::Permit>,
}

impl Permit {
    fn new(py: Python<'_>, permit: leasehold::Permit) -> PyResult<Permit> {
        Ok(Permit {
            held: Held::new(py, permit.lost_owned(), permit)?,
        })
    }
}

#[pymethods]
impl Permit {
    /// Whether the slot can still be relied on now.
    fn is_held(&self) -> bool {
        self.held.with(|p| p.is_held()).unwrap_or(false)
    }

    /// Set as soon as the slot can no longer be relied on.
    #[getter]
    fn lost(&self, py: Python<'_>) -> Py<PyAny> {
        self.held.lost(py)
    }

    /// For `leasehold.aio`: a future of the running loop, done when
    /// `lost` is set.
    fn _lost_async(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.held.lost_future(py)
    }

    /// Gives the slot back. Safe to call twice.
    #[pyo3(signature = (*, _aio=false))]
    fn release(&self, py: Python<'_>, _aio: bool) -> PyResult<Py<PyAny>> {
        let permit = self.held.take(py);
        let releasing = async move {
            match permit {
                Some(permit) => permit.release().await,
                None => Ok(()),
            }
        };
        runtime::run(py, releasing, None, _aio, |py, ()| Ok(py.None()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.release(py, false)?;
        Ok(false)
    }
}

/// Hands out one live session at a time, creating a new one after the
/// last expired (the recipe for a service that must always have one).
#[pyclass(module = "leasehold._leasehold", name = "SessionKeeper", frozen)]
pub struct SessionKeeper {
    inner: std::sync::Arc<leasehold::SessionKeeper>,
}

#[pymethods]
impl SessionKeeper {
    #[new]
    #[pyo3(signature = (client, name, *, lease=None, grace=None, lock_delay=None, cache_keys=None))]
    fn new(
        client: PyRef<'_, crate::client::Client>,
        name: String,
        lease: Option<Bound<'_, PyAny>>,
        grace: Option<Bound<'_, PyAny>>,
        lock_delay: Option<Bound<'_, PyAny>>,
        cache_keys: Option<usize>,
    ) -> PyResult<SessionKeeper> {
        let options = crate::client::session_options(name, lease, grace, lock_delay, cache_keys)?;
        let keeper = leasehold::SessionKeeper::new(client.client()?, options);
        Ok(SessionKeeper {
            inner: std::sync::Arc::new(keeper),
        })
    }

    /// The live session, created if there is none or the last one ended.
    #[pyo3(signature = (*, _aio=false))]
    fn session(&self, py: Python<'_>, _aio: bool) -> PyResult<Py<PyAny>> {
        let keeper = self.inner.clone();
        let getting = async move { keeper.session().await };
        runtime::run(py, getting, None, _aio, |py, session| {
            Ok(Py::new(py, Session::new(session))?.into_any())
        })
    }

    /// Closes the current session, if any.
    #[pyo3(signature = (*, _aio=false))]
    fn close(&self, py: Python<'_>, _aio: bool) -> PyResult<Py<PyAny>> {
        let keeper = self.inner.clone();
        let closing = async move { keeper.close().await };
        runtime::run(py, closing, None, _aio, |py, ()| Ok(py.None()))
    }
}
