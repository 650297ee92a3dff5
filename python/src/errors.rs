//! Raising the package's exceptions (defined in `leasehold/errors.py`,
//! sorted by what the caller should do, the Rust client's `Remedy`).

use leasehold::{ClientError, ErrorCode, Remedy};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// An instance of `leasehold.errors.<class>` with `message` and the
/// keyword attributes `attrs`, as a `PyErr`.
pub fn raise(class: &str, message: String, attrs: &[(&str, Option<f64>)]) -> PyErr {
    Python::attach(|py| {
        let made = (|| -> PyResult<PyErr> {
            let module = py.import("leasehold.errors")?;
            let kwargs = PyDict::new(py);
            for (name, value) in attrs {
                kwargs.set_item(*name, *value)?;
            }
            let value = module
                .getattr(class)?
                .call((message.clone(),), Some(&kwargs))?;
            Ok(PyErr::from_value(value))
        })();
        made.unwrap_or_else(|e| e)
    })
}

/// The exception for `error`.
pub fn to_py(error: ClientError) -> PyErr {
    let message = error.to_string();
    let code = error.code();
    let class = match (code, error.remedy()) {
        (Some(ErrorCode::PermissionDenied), _) => "NotAuthorized",
        (Some(ErrorCode::LockHeld | ErrorCode::LockDelayed { .. }), _) => "LockBusy",
        (_, Remedy::Reconnect) => "Unavailable",
        (_, Remedy::Retry | Remedy::RetryLater | Remedy::RetryAfter(_)) => "RetryableError",
        (_, Remedy::Reread) => "Conflict",
        (_, Remedy::OutcomeUnknown) => "OutcomeUnknown",
        (_, Remedy::NewSession) => "SessionExpired",
        (_, _) => "RequestRefused",
    };
    let retry_after = match error.remedy() {
        Remedy::RetryAfter(after) => Some(after.as_secs_f64()),
        _ => None,
    };
    let lock_delay_left = match code {
        Some(ErrorCode::LockDelayed { remaining_ms }) => Some(remaining_ms as f64 / 1000.0),
        _ => None,
    };
    match class {
        "LockBusy" => raise(class, message, &[("lock_delay_left", lock_delay_left)]),
        "RetryableError" | "Unavailable" => raise(class, message, &[("retry_after", retry_after)]),
        _ => raise(class, message, &[]),
    }
}

/// A blocking call's `timeout=` ran out.
pub fn timeout(after: std::time::Duration) -> PyErr {
    let message = format!("no answer within {:.3} s", after.as_secs_f64());
    raise("Timeout", message, &[])
}
