//! Errors of the client library, sorted by what the caller should do.

use std::io;

use leasehold_protocol::ErrorCode;

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
    /// The server closed the connection, saying why.
    #[error("server closed the connection: {0}")]
    Closed(leasehold_protocol::Error),
    /// The peer sent something this library cannot read.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The session has expired; it can no longer be used.
    #[error("the session has expired")]
    SessionExpired,
    /// Participants of a recipe disagree about its shared state (a
    /// semaphore's limit), or the state is not the recipe's.
    #[error("{0}")]
    Conflict(String),
}

impl ClientError {
    /// Whether trying again (on a new connection) may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Connect { .. } | ClientError::Disconnected | ClientError::Timeout(_) => {
                true
            }
            ClientError::Server(e) | ClientError::Closed(e) => {
                matches!(
                    e.code,
                    ErrorCode::Internal | ErrorCode::WrongEpoch { .. } | ErrorCode::StorageFull
                )
            }
            ClientError::Protocol(_) | ClientError::SessionExpired | ClientError::Conflict(_) => {
                false
            }
        }
    }

    /// Whether the master refused a lock because someone else holds it, or
    /// it is in lock-delay: try again later, or wait in line.
    pub fn is_lock_refusal(&self) -> bool {
        matches!(
            self.code(),
            Some(ErrorCode::LockHeld | ErrorCode::LockDelayed { .. })
        )
    }

    /// The server's error code, when the server answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server(e) | ClientError::Closed(e) => Some(e.code),
            _ => None,
        }
    }
}
