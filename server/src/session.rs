//! A session: the durable record of one client's relationship with the
//! master. Its lease is not here: leases are the master's soft state
//! ([`crate::lease`]).

use std::time::Duration;

use leasehold_protocol::{Behavior, SessionId, SessionSecret};

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum EndCause {
    /// Its lease ran out (`SES-6`).
    Expired,
    /// Someone destroyed it (`SES-7`).
    Destroyed,
    /// A health check it is bound to went critical or was deleted (`CHK-3`).
    CheckFailed,
}

impl EndCause {
    /// How the cause reads in messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            EndCause::Expired => "its lease ran out",
            EndCause::Destroyed => "it was destroyed",
            EndCause::CheckFailed => "a health check it is bound to failed",
        }
    }

    /// The cause as one word, for figures (`OPS-4`).
    pub fn label(self) -> &'static str {
        match self {
            EndCause::Expired => "expired",
            EndCause::Destroyed => "destroyed",
            EndCause::CheckFailed => "check-failed",
        }
    }
}

/// The durable part of a session.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
///
/// A master holds one for every live session: the name and the checks are
/// boxed rather than growable, which keeps each entry 16 bytes smaller
/// (they are written to the store exactly as a `String` and a `Vec` are).
pub struct Session {
    pub id: SessionId,
    pub name: Box<str>,
    pub lease: Duration,
    pub lock_delay: Duration,
    pub behavior: Behavior,
    /// Health checks it is bound to (`CHK-2`).
    pub checks: Box<[String]>,
    /// The right to act for it, known to its creator alone (`AUTH-1`).
    pub secret: SessionSecret,
}
