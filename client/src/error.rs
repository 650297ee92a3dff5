//! Errors of the client library. Each has a [`Remedy`]: what the caller
//! should do about it, which is how programs should sort them.

use std::io;

use leasehold_protocol::{ErrorCode, Remedy};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server could not be reached.
    #[error("cannot connect to {addr}")]
    Connect {
        /// The address tried.
        addr: String,
        /// Why it failed.
        source: io::Error,
    },
    /// The connection broke before the reply arrived; the request may or
    /// may not have been carried out.
    #[error("connection lost before the reply arrived")]
    Disconnected,
    /// No reply within the time allowed.
    #[error("no reply within {0:?}")]
    Timeout(std::time::Duration),
    /// The server answered with an error; its message says what happened
    /// and [`ClientError::code`] gives the code.
    #[error(transparent)]
    Server(#[from] leasehold_protocol::Error),
    /// The server closed the connection, saying why, before the request
    /// went out on it: nothing was carried out.
    #[error("server closed the connection: {0}")]
    Closed(leasehold_protocol::Error),
    /// The server closed the connection, saying why, while the request was
    /// in flight on it: the request may or may not have been carried out.
    #[error("server closed the connection with the request in flight: {0}")]
    Interrupted(leasehold_protocol::Error),
    /// The peer sent something this library cannot read.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// TLS could not be set up: a file named in `TlsOptions` is missing or
    /// wrong, or the master refused this client's certificate.
    #[error("{0}")]
    Tls(String),
    /// The member reached is not the cell's master; `master` is where it
    /// said the master is, if it knew (`CELL-7`). Nothing was sent.
    #[error("not the cell's master (the master is {})", .master.as_deref().unwrap_or("not known now"))]
    Redirected {
        /// The master's address.
        master: Option<String>,
    },
    /// The session has expired; it can no longer be used.
    #[error("the session has expired")]
    SessionExpired,
    /// Participants of a recipe disagree about its shared state (a
    /// semaphore's limit), or the state is not the recipe's.
    #[error("{0}")]
    Conflict(String),
    /// What the master sent could not be written where the caller said
    /// (a snapshot to a full disk).
    #[error("writing {what}: {source}")]
    Write {
        /// What was being written.
        what: &'static str,
        /// Why it failed.
        source: io::Error,
    },
}

impl ClientError {
    /// What to do about it: the server's code's [`Remedy`] (SPEC
    /// "Errors"), or for what happened on this side, `Reconnect` when the
    /// server could not be reached and `OutcomeUnknown` when the request
    /// may or may not have been carried out.
    ///
    /// ```
    /// use leasehold::{ClientError, Remedy};
    ///
    /// assert_eq!(ClientError::Disconnected.remedy(), Remedy::OutcomeUnknown);
    /// assert!(!ClientError::Disconnected.is_retryable());
    /// ```
    pub fn remedy(&self) -> Remedy {
        match self {
            ClientError::Connect { .. } | ClientError::Redirected { .. } => Remedy::Reconnect,
            ClientError::Disconnected | ClientError::Timeout(_) | ClientError::Interrupted(_) => {
                Remedy::OutcomeUnknown
            }
            ClientError::Server(e) => e.code.remedy(),
            // A closed connection takes a new one before anything is sent
            // again.
            ClientError::Closed(e) => match e.code.remedy() {
                Remedy::Retry => Remedy::Reconnect,
                other => other,
            },
            ClientError::SessionExpired => Remedy::NewSession,
            ClientError::Protocol(_) | ClientError::Conflict(_) | ClientError::Tls(_) => {
                Remedy::GiveUp
            }
            // Nothing changed on the master: try again once there is room.
            ClientError::Write { .. } => Remedy::RetryLater,
        }
    }

    /// Whether sending the same request again, now or later, may succeed
    /// and cannot do it twice: nothing was carried out.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.remedy(),
            Remedy::Retry | Remedy::RetryAfter(_) | Remedy::RetryLater | Remedy::Reconnect
        )
    }

    /// Whether the request may or may not have been carried out: read
    /// before repeating one that is not idempotent.
    pub fn outcome_unknown(&self) -> bool {
        self.remedy() == Remedy::OutcomeUnknown
    }

    /// Whether the master refused a lock because someone else holds it, or
    /// it is in lock-delay: try again later, or wait in line.
    pub fn is_lock_refusal(&self) -> bool {
        matches!(
            self.code(),
            Some(ErrorCode::LockHeld | ErrorCode::LockDelayed { .. })
        )
    }

    /// Whether the master may be gone, changing or too busy for now, and
    /// an idempotent request rides through it: asked again once the
    /// session is back in contact (`LOCK-15`).
    pub(crate) fn rides_through(&self) -> bool {
        match self.remedy() {
            Remedy::Reconnect | Remedy::OutcomeUnknown | Remedy::Retry => true,
            Remedy::RetryAfter(_) => matches!(
                self.code(),
                Some(ErrorCode::FailoverInProgress { .. } | ErrorCode::Congested { .. })
            ),
            _ => false,
        }
    }

    /// The server's error code, when the server answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server(e) | ClientError::Closed(e) | ClientError::Interrupted(e) => {
                Some(e.code)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn server(code: ErrorCode) -> ClientError {
        ClientError::Server(leasehold_protocol::Error::new(code, "test"))
    }

    // SPEC "Errors": the table's "retry?" column, through the library.
    #[test]
    fn retryable_follows_the_spec_table() {
        assert!(server(ErrorCode::LimitReached).is_retryable());
        assert!(server(ErrorCode::FailoverInProgress { retry_after_ms: 5 }).is_retryable());
        assert!(server(ErrorCode::Congested { retry_after_ms: 5 }).is_retryable());
        assert!(server(ErrorCode::StorageFull).is_retryable());
        assert!(!server(ErrorCode::InvalidArgument).is_retryable());
        assert!(!server(ErrorCode::PermissionDenied).is_retryable());
        assert!(!server(ErrorCode::CasMismatch { current: 2 }).is_retryable());
    }

    #[test]
    fn a_lost_reply_is_neither_retryable_nor_failed_but_unknown() {
        for e in [
            ClientError::Disconnected,
            ClientError::Timeout(Duration::from_secs(1)),
            ClientError::Interrupted(leasehold_protocol::Error::new(
                ErrorCode::Malformed,
                "a frame after this one could not be read",
            )),
        ] {
            assert!(!e.is_retryable(), "{e:?}");
            assert!(e.outcome_unknown(), "{e:?}");
        }
    }

    #[test]
    fn a_refused_connection_is_a_reconnect() {
        let refused = ClientError::Connect {
            addr: "127.0.0.1:1".into(),
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(refused.remedy(), Remedy::Reconnect);
        let closed =
            ClientError::Closed(leasehold_protocol::Error::new(ErrorCode::Internal, "bye"));
        assert_eq!(closed.remedy(), Remedy::Reconnect);
        assert_eq!(ClientError::SessionExpired.remedy(), Remedy::NewSession);
    }
}
