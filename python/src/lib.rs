//! `leasehold._leasehold`: the Leasehold client for Python, over the Rust
//! client library, so Python gets the session machine, locks and cache the
//! simulations check. The package `leasehold` (python/leasehold) wraps it.

mod client;
mod config;
mod dispatch;
mod errors;
mod held;
mod lock;
mod recipes;
mod runtime;
mod session;
mod states;
mod subscription;
mod values;

use pyo3::prelude::*;

/// Stops the callbacks' threads, then the runtime: registered with
/// `atexit`, so nothing of ours runs once the interpreter finalizes.
#[pyfunction]
fn _shutdown(py: Python<'_>) {
    dispatch::stop_all(py);
    runtime::shutdown(py);
}

/// With `LEASEHOLD_LOG` set (a filter such as `leasehold=debug`), the
/// client library's own log goes to standard error.
fn log_if_asked() {
    if let Ok(filter) = std::env::var("LEASEHOLD_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

#[pymodule]
fn _leasehold(module: &Bound<'_, PyModule>) -> PyResult<()> {
    log_if_asked();
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_class::<client::Client>()?;
    module.add_class::<session::Session>()?;
    module.add_class::<lock::LockGuard>()?;
    module.add_class::<recipes::Election>()?;
    module.add_class::<recipes::Term>()?;
    module.add_class::<recipes::Semaphore>()?;
    module.add_class::<recipes::Permit>()?;
    module.add_class::<recipes::SessionKeeper>()?;
    module.add_class::<subscription::Subscription>()?;
    module.add_class::<subscription::Event>()?;
    module.add_class::<values::Node>()?;
    module.add_class::<values::Stat>()?;
    module.add_function(wrap_pyfunction!(_shutdown, module)?)?;
    Ok(())
}
