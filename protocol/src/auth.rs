//! The right to act for a session (SPEC "Ownership").
//!
//! A session id is public: `ListSessions` lists it and a lock's holders name
//! it. What lets a client act for a session is its secret, which the master
//! hands to the session's creator alone, in `SessionCreated`. Requests that
//! act for a session carry a [`SessionToken`], the id with its secret.
//!
//! # Example
//! ```
//! use leasehold_protocol::{SessionSecret, SessionToken};
//!
//! let token = SessionToken {
//!     id: uuid::Uuid::from_u128(7),
//!     secret: SessionSecret::from_bytes([0xab; 16]),
//! };
//! let text = token.to_string();
//! assert_eq!(text.parse::<SessionToken>().unwrap(), token);
//! // Debug output never shows the secret.
//! assert!(!format!("{token:?}").contains("abab"));
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A session's identity, chosen by the master. Anyone may know it; the
/// right to act for the session is its secret's.
pub type SessionId = uuid::Uuid;

/// 128 random bits that prove the right to act for one session
/// (`AUTH-1`). Its `Debug` form hides the bits, so a log line never leaks
/// it.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSecret([u8; 16]);

impl SessionSecret {
    /// A secret made of these bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        SessionSecret(bytes)
    }

    /// The secret's bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Whether `other` is this secret, in time that does not depend on
    /// where they differ, so a guesser learns nothing from timing.
    pub fn matches(&self, other: &SessionSecret) -> bool {
        same_bytes(&self.0, &other.0)
    }
}

/// Whether two byte strings are equal, in time that depends only on their
/// lengths: for comparing secrets and tokens.
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(..)")
    }
}

/// A session id with its secret: what a request acting for the session
/// carries (`AUTH-2`). Its text form, `<id>:<32 hex digits>`, is what
/// `leasehold session create` prints for another process to use.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionToken {
    /// The session.
    pub id: SessionId,
    /// The proof of the right to act for it.
    pub secret: SessionSecret,
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.id)?;
        for b in self.secret.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Why text is not a [`SessionToken`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenParseError {
    #[error("a session token is '<session id>:<32 hex digits>'; this has no ':'")]
    /// There is no `:` between the id and the secret.
    NoSeparator,
    #[error("'{0}' is not a session id")]
    /// The part before the `:` is not a session id.
    BadId(String),
    #[error("a session token's secret is 32 hex digits")]
    /// The part after the `:` is not 32 hex digits.
    BadSecret,
}

impl FromStr for SessionToken {
    type Err = TokenParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (id, secret) = s
            .trim()
            .split_once(':')
            .ok_or(TokenParseError::NoSeparator)?;
        let id = id
            .parse::<SessionId>()
            .map_err(|_| TokenParseError::BadId(id.escape_debug().to_string()))?;
        if secret.len() != 32 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(TokenParseError::BadSecret);
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&secret[2 * i..2 * i + 2], 16)
                .map_err(|_| TokenParseError::BadSecret)?;
        }
        Ok(SessionToken {
            id,
            secret: SessionSecret(bytes),
        })
    }
}

/// On whose authority a request ends or takes away what belongs to a
/// session: `DestroySession`, and a `Delete` that would remove a locked
/// node (`AUTH-3`, `AUTH-4`). A master without an operator token accepts
/// any authority, as it always did.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Authority {
    /// No one in particular.
    #[default]
    Anonymous,
    /// The session this token proves.
    Session(SessionToken),
    /// The operator, with the master's operator token.
    Operator(String),
}

impl fmt::Debug for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Authority::Anonymous => f.write_str("Anonymous"),
            Authority::Session(token) => f.debug_tuple("Session").field(token).finish(),
            Authority::Operator(_) => f.write_str("Operator(..)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_from_its_text() {
        let token = SessionToken {
            id: SessionId::from_u128(0x1234),
            secret: SessionSecret([0x0f; 16]),
        };
        assert_eq!(token.to_string().parse::<SessionToken>(), Ok(token));
    }

    #[test]
    fn text_without_a_full_secret_is_no_token() {
        let id = SessionId::from_u128(1);
        for text in [
            id.to_string(),
            format!("{id}:abc"),
            format!("{id}:{}", "zz".repeat(16)),
            format!("{id}:{}", "é".repeat(16)),
        ] {
            assert!(text.parse::<SessionToken>().is_err(), "{text}");
        }
    }

    #[test]
    fn byte_strings_are_the_same_only_when_equal() {
        assert!(same_bytes(b"operator-token-1", b"operator-token-1"));
        assert!(!same_bytes(b"operator-token-1", b"operator-token-2"));
        assert!(!same_bytes(b"operator-token", b"operator-token-1"));
    }

    #[test]
    fn secrets_match_only_themselves() {
        let a = SessionSecret([1; 16]);
        let mut b = [1; 16];
        b[15] = 2;
        assert!(a.matches(&a));
        assert!(!a.matches(&SessionSecret(b)));
    }
}
