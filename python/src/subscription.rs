//! A session's subscription to changes at a key or below a prefix, as a
//! Python iterator of events.

use std::sync::Arc;

use leasehold::{Change, SubscribeOptions, SubscriptionEvent};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::runtime;
use crate::states;

/// Events as they happen, in order: iterate over it (each step waits; Ctrl-C
/// ends the wait); the iteration ends when the session does.
#[pyclass(module = "leasehold._leasehold", name = "Subscription", frozen)]
pub struct Subscription {
    inner: Arc<tokio::sync::Mutex<Option<leasehold::Subscription>>>,
}

impl Subscription {
    pub fn new(inner: leasehold::Subscription) -> Subscription {
        Subscription {
            inner: Arc::new(tokio::sync::Mutex::new(Some(inner))),
        }
    }
}

#[pymethods]
impl Subscription {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let event = self.next(py, None, false)?;
        if event.is_none(py) {
            return Err(PyStopIteration::new_err(()));
        }
        Ok(event)
    }

    /// The next event, waiting up to ``timeout`` seconds (``Timeout`` if
    /// none came); None once the subscription has ended.
    #[pyo3(signature = (timeout=None, *, _aio=false))]
    fn next(
        &self,
        py: Python<'_>,
        timeout: Option<Bound<'_, PyAny>>,
        _aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = crate::values::maybe_seconds(timeout.as_ref(), "timeout")?;
        let inner = self.inner.clone();
        let next = async move {
            let mut subscription = inner.lock().await;
            Ok(match subscription.as_mut() {
                Some(subscription) => subscription.next().await,
                None => None,
            })
        };
        runtime::run(py, next, timeout, _aio, |py, event| match event {
            Some(event) => Ok(Py::new(py, Event::of(py, event)?)?.into_any()),
            None => Ok(py.None()),
        })
    }

    /// Ends the subscription on the master.
    #[pyo3(signature = (*, _aio=false))]
    fn cancel(&self, py: Python<'_>, _aio: bool) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        let cancelling = async move {
            match inner.lock().await.take() {
                Some(subscription) => subscription.cancel().await,
                None => Ok(()),
            }
        };
        runtime::run(py, cancelling, None, _aio, |py, ()| Ok(py.None()))
    }
}

/// One event: ``kind`` is ``"changed"`` (with ``key``, ``change``, ``index``
/// and, for small contents, ``value``), ``"events_lost"`` (re-read what you
/// watch) or ``"session"`` (with ``state``).
#[pyclass(module = "leasehold._leasehold", name = "Event", frozen, get_all)]
pub struct Event {
    kind: &'static str,
    key: Option<String>,
    /// ``created``, ``modified``, ``deleted``, ``child_added``,
    /// ``child_removed``, ``child_modified``, ``lock_acquired`` or
    /// ``lock_released``.
    change: Option<&'static str>,
    /// The child's key, or the lock's holder (its session id).
    about: Option<String>,
    index: Option<u64>,
    value: Option<Py<PyBytes>>,
    state: Option<Py<PyAny>>,
}

impl Event {
    fn of(py: Python<'_>, event: SubscriptionEvent) -> PyResult<Event> {
        let mut made = Event {
            kind: "changed",
            key: None,
            change: None,
            about: None,
            index: None,
            value: None,
            state: None,
        };
        match event {
            SubscriptionEvent::Changed {
                key,
                change,
                index,
                contents,
            } => {
                let (name, about) = match change {
                    Change::Created => ("created", None),
                    Change::Modified => ("modified", None),
                    Change::Deleted => ("deleted", None),
                    Change::ChildAdded { child } => ("child_added", Some(child)),
                    Change::ChildRemoved { child } => ("child_removed", Some(child)),
                    Change::ChildModified { child } => ("child_modified", Some(child)),
                    Change::LockAcquired { holder } => ("lock_acquired", Some(holder.to_string())),
                    Change::LockReleased { holder } => ("lock_released", Some(holder.to_string())),
                    _ => ("other", None),
                };
                made.key = Some(key);
                made.change = Some(name);
                made.about = about;
                made.index = Some(index);
                made.value = contents.map(|c| PyBytes::new(py, &c).unbind());
            }
            SubscriptionEvent::EventsLost => made.kind = "events_lost",
            SubscriptionEvent::Session(state) => {
                made.kind = "session";
                made.state = Some(states::to_py(py, state)?);
            }
            _ => made.kind = "other",
        }
        Ok(made)
    }
}

#[pymethods]
impl Event {
    fn __repr__(&self) -> String {
        match self.kind {
            "changed" => format!(
                "Event(changed, key={:?}, change={}, index={})",
                self.key.as_deref().unwrap_or_default(),
                self.change.unwrap_or_default(),
                self.index.unwrap_or_default()
            ),
            other => format!("Event({other})"),
        }
    }
}

/// The options of a subscription.
pub fn options(prefix: bool) -> SubscribeOptions {
    if prefix {
        SubscribeOptions::prefix()
    } else {
        SubscribeOptions::exact()
    }
}
