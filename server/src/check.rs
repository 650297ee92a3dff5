//! Health checks bound to sessions, as Consul's session `Checks`: a session
//! lives only while every check it names is not critical (SPEC `CHK-1`..).
//!
//! Checks are durable state: they change only through the state machine
//! (`state/checks.rs`), so a replica that applies the same commands
//! invalidates the same sessions.

use std::collections::{BTreeMap, BTreeSet};

pub use crate::config::{MAX_CHECKS, MAX_CHECKS_PER_SESSION, MAX_CHECK_NAME, MAX_CHECK_NOTE};
use leasehold_protocol::{CheckInfo, CheckStatus, SessionId};

/// One named check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Check {
    pub status: CheckStatus,
    pub note: String,
    pub modify_index: u64,
}

/// Every check, and which sessions are bound to each.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Checks {
    pub(crate) checks: BTreeMap<String, Check>,
    bound: BTreeMap<String, BTreeSet<SessionId>>,
}

/// Whether `name` may name a check: 1 to 128 bytes of ASCII letters,
/// digits and `-_.:/`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_CHECK_NAME {
        return Err(format!(
            "a check name must have 1 to {MAX_CHECK_NAME} bytes, not {}",
            name.len()
        ));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:/".contains(*c)))
    {
        Some(c) => Err(format!(
            "check name '{}' holds {c:?}: only ASCII letters, digits and -_.:/ are allowed",
            name.escape_debug()
        )),
        None => Ok(()),
    }
}

impl Checks {
    /// How many checks there are.
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// Whether there is no check.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// The check called `name`.
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.get(name)
    }

    /// Checks with names after `after`, in name order, as replies carry them.
    pub fn after<'a>(&'a self, after: Option<&str>) -> impl Iterator<Item = CheckInfo> + 'a {
        use std::ops::Bound::{Excluded, Unbounded};
        let start = after.map_or(Unbounded, |a| Excluded(a.to_string()));
        self.checks
            .range::<String, _>((start, Unbounded))
            .map(|(name, check)| CheckInfo {
                name: name.clone(),
                status: check.status,
                note: check.note.clone(),
                modify_index: check.modify_index,
                sessions: self.bound.get(name).map_or(0, |s| s.len() as u64),
            })
    }

    pub(crate) fn bind(&mut self, session: SessionId, names: &[String]) {
        for name in names {
            self.bound.entry(name.clone()).or_default().insert(session);
        }
    }

    pub(crate) fn unbind(&mut self, session: SessionId, names: &[String]) {
        for name in names {
            if let Some(sessions) = self.bound.get_mut(name) {
                sessions.remove(&session);
                if sessions.is_empty() {
                    self.bound.remove(name);
                }
            }
        }
    }

    pub(crate) fn bound_to(&self, name: &str) -> Vec<SessionId> {
        self.bound
            .get(name)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}
