//! What crosses between Python and the client: durations, contents, and
//! the read-only records of nodes.

use std::time::Duration;

use leasehold::{NodeStat, NodeView};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// Seconds as a float or an int, or a `datetime.timedelta`.
pub fn seconds(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let secs: f64 = if let Ok(secs) = value.extract::<f64>() {
        secs
    } else if let Ok(total) = value.call_method0("total_seconds") {
        total.extract()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be seconds (a float) or a datetime.timedelta"
        )));
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must be a finite number of seconds, 0 or more"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `seconds` of an optional argument.
pub fn maybe_seconds(value: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Duration>> {
    value.map(|v| seconds(v, what)).transpose()
}

/// Contents as bytes, or a str taken as UTF-8.
pub fn contents(value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_cow()?.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err("contents must be bytes or str"))
}

/// A node's metadata (Chubby's counters).
#[pyclass(module = "leasehold._leasehold", name = "Stat", frozen, get_all)]
#[derive(Clone)]
pub struct Stat {
    /// Opaque to the server.
    pub flags: u64,
    /// Greater than that of any earlier node of the same name.
    pub instance: u64,
    /// Rises on every write of the contents.
    pub content_generation: u64,
    /// Rises when the node's lock goes from free to held.
    pub lock_generation: u64,
    /// The index of the node's last change: what `cas=` compares.
    pub modify_index: u64,
    /// 64-bit FNV-1a of the contents.
    pub checksum: u64,
    /// The contents' length in bytes.
    pub size: u64,
}

#[pymethods]
impl Stat {
    fn __repr__(&self) -> String {
        format!(
            "Stat(modify_index={}, content_generation={}, lock_generation={}, instance={}, size={}, flags={})",
            self.modify_index,
            self.content_generation,
            self.lock_generation,
            self.instance,
            self.size,
            self.flags
        )
    }
}

impl From<NodeStat> for Stat {
    fn from(stat: NodeStat) -> Stat {
        Stat {
            flags: stat.flags,
            instance: stat.instance,
            content_generation: stat.content_generation,
            lock_generation: stat.lock_generation,
            modify_index: stat.modify_index,
            checksum: stat.checksum,
            size: stat.contents_len,
        }
    }
}

/// A node: its key, contents and metadata.
#[pyclass(module = "leasehold._leasehold", name = "Node", frozen)]
pub struct Node {
    key: String,
    value: Vec<u8>,
    stat: Stat,
}

#[pymethods]
impl Node {
    /// The node's key.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// The contents, as bytes.
    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.value)
    }

    /// The metadata.
    #[getter]
    fn stat(&self) -> Stat {
        self.stat.clone()
    }

    fn __repr__(&self) -> String {
        format!("Node(key={:?}, size={})", self.key, self.value.len())
    }
}

impl From<NodeView> for Node {
    fn from(node: NodeView) -> Node {
        Node {
            key: node.key,
            value: node.contents.unwrap_or_default(),
            stat: node.stat.into(),
        }
    }
}
