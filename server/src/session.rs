//! A session: the durable record of one client's relationship with the
//! master. Its lease is not here: leases are the master's soft state
//! ([`crate::lease`]).

use leasehold_protocol::{Behavior, SessionId, SessionSecret};

use crate::time::Span;

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
/// A master holds one for every live session, so it is kept small: the
/// name is boxed rather than growable, the checks (most sessions have
/// none) are behind one thin pointer, and the lease and lock-delay are
/// [`Span`]s. The store holds each exactly as it held the `String`, the
/// `Vec` and the `Duration`s of earlier versions.
pub struct Session {
    pub id: SessionId,
    pub name: Box<str>,
    pub lease: Span,
    pub lock_delay: Span,
    pub behavior: Behavior,
    /// Health checks it is bound to (`CHK-2`).
    pub checks: CheckNames,
    /// The right to act for it, known to its creator alone (`AUTH-1`).
    pub secret: SessionSecret,
}

/// The names of the health checks a session is bound to: a pointer's
/// width in the session, and no allocation when there are none. Stored as
/// a sequence of strings, as a `Vec<String>` is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckNames(Option<Box<Box<[String]>>>);

impl From<Vec<String>> for CheckNames {
    fn from(names: Vec<String>) -> CheckNames {
        CheckNames((!names.is_empty()).then(|| Box::new(names.into_boxed_slice())))
    }
}

impl std::ops::Deref for CheckNames {
    type Target = [String];

    fn deref(&self) -> &[String] {
        self.0.as_deref().map_or(&[], |names| names)
    }
}

impl serde::Serialize for CheckNames {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for CheckNames {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<CheckNames, D::Error> {
        Vec::<String>::deserialize(deserializer).map(CheckNames::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    // A master holds a million of these: a regression here costs every
    // session.
    #[test]
    fn a_session_record_takes_at_most_80_bytes() {
        assert!(
            std::mem::size_of::<Session>() <= 80,
            "{}",
            std::mem::size_of::<Session>()
        );
        assert_eq!(std::mem::size_of::<CheckNames>(), 8);
    }

    // STORE-6: check names are stored as the `Vec<String>` earlier versions
    // stored, and read back from those bytes.
    #[test]
    fn check_names_are_stored_as_a_list_of_strings_was() {
        for names in [vec![], vec!["disk".to_string(), "ping".to_string()]] {
            let thin = CheckNames::from(names.clone());
            assert_eq!(encode(&thin), encode(&names));
            assert_eq!(decode::<CheckNames>(&encode(&names)).unwrap(), thin);
            assert_eq!(&*thin, names.as_slice());
        }
    }
}
