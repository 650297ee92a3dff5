//! Something held (a lock, an election's term, a semaphore's slot), with
//! the `threading.Event` set the moment it can no longer be relied on.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use tokio::task::JoinHandle;

use crate::runtime;

/// `T`, with a task that waits for it to be lost and then sets `lost`;
/// taken back whole to be released.
pub struct Held<T: Send + Sync + 'static> {
    value: Mutex<Option<Arc<T>>>,
    watcher: Mutex<Option<JoinHandle<()>>>,
    lost: Py<PyAny>,
    /// `asyncio` futures to complete when `lost` is set, each with its
    /// loop: touched only with the interpreter held.
    awaiting: Arc<Mutex<Awaiting>>,
}

/// Futures awaiting a loss, each with its loop.
type Awaiting = Vec<(Py<PyAny>, Py<PyAny>)>;

/// Sets `lost` and completes every future awaiting it.
fn mark_lost(py: Python<'_>, lost: &Py<PyAny>, awaiting: &Mutex<Awaiting>) {
    let _ = lost.call_method0(py, "set");
    let waiting = std::mem::take(&mut *awaiting.lock().unwrap_or_else(|e| e.into_inner()));
    if waiting.is_empty() {
        return;
    }
    let Ok(settle) = py.import("leasehold._settle") else {
        return;
    };
    for (on_loop, future) in waiting {
        let _ = settle.call_method1("settle", (on_loop, future, "set_result", true));
    }
}

impl<T: Send + Sync + 'static> Held<T> {
    /// Holds `value`; `lost` resolves when it can no longer be relied on.
    /// It must not hold a share of `value` (the library's `lost_owned`
    /// does not): a release takes the value back whole, at once, without
    /// waiting for the watcher to be dropped.
    pub fn new<Fut>(py: Python<'_>, lost: Fut, value: T) -> PyResult<Held<T>>
    where
        Fut: Future<Output = ()> + Send + 'static,
    {
        let event = py.import("threading")?.getattr("Event")?.call0()?.unbind();
        let set = event.clone_ref(py);
        let awaiting: Arc<Mutex<Awaiting>> = Arc::default();
        let waiters = awaiting.clone();
        let watcher = runtime::handle()?.spawn(async move {
            lost.await;
            Python::attach(|py| mark_lost(py, &set, &waiters));
        });
        Ok(Held {
            value: Mutex::new(Some(Arc::new(value))),
            watcher: Mutex::new(Some(watcher)),
            lost: event,
            awaiting,
        })
    }

    /// `f` of the value, unless it was taken.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let value = self.value.lock().unwrap_or_else(|e| e.into_inner());
        value.as_deref().map(f)
    }

    /// The value, shared, for a call that does not give it up.
    pub fn shared(&self) -> Option<Arc<T>> {
        self.value.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The value, to be released: from now on it is not to be relied on,
    /// and `lost` is set. `None` if taken already, or if a call shares it
    /// still: it is given back in the background once that call ends.
    pub fn take(&self, py: Python<'_>) -> Option<T> {
        let value = self
            .value
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
        }
        mark_lost(py, &self.lost, &self.awaiting);
        Arc::try_unwrap(value).ok()
    }

    /// The event set when it can no longer be relied on.
    pub fn lost(&self, py: Python<'_>) -> Py<PyAny> {
        self.lost.clone_ref(py)
    }

    /// A future of the running `asyncio` loop, done when `lost` is set.
    pub fn lost_future(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let on_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let future = on_loop.call_method0("create_future")?;
        // The watcher sets the event with the interpreter held, as this
        // runs: it has either set it already, or will find this future.
        if self.lost.call_method0(py, "is_set")?.extract::<bool>(py)? {
            future.call_method1("set_result", (true,))?;
        } else {
            let mut awaiting = self.awaiting.lock().unwrap_or_else(|e| e.into_inner());
            awaiting.push((on_loop.unbind(), future.clone().unbind()));
        }
        Ok(future.unbind())
    }
}

impl<T: Send + Sync + 'static> Drop for Held<T> {
    fn drop(&mut self) {
        // Dropped without a release: the client gives it back in the
        // background, which needs the runtime.
        if let Some(watcher) = self
            .watcher
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            watcher.abort();
        }
        let value = self
            .value
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let (Some(value), Ok(handle)) = (value, runtime::handle()) {
            let _entered = handle.enter();
            drop(value);
        }
    }
}
