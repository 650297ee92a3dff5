//! Session states as the Python enum `leasehold.SessionState`.

use leasehold::SessionState;
use pyo3::prelude::*;

/// The enum member for `state`.
pub fn to_py(py: Python<'_>, state: SessionState) -> PyResult<Py<PyAny>> {
    let name = match state {
        SessionState::Normal => "normal",
        SessionState::Jeopardy => "jeopardy",
        SessionState::Safe => "safe",
        SessionState::Failover => "failover",
        SessionState::Expired => "expired",
        SessionState::Closed => "closed",
        other => {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "a session state this package does not know: {other:?}"
            )))
        }
    };
    let class = py.import("leasehold.states")?.getattr("SessionState")?;
    Ok(class.call1((name,))?.unbind())
}
