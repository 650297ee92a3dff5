//! Error codes a request or a connection can be answered with (SPEC "Errors").

use serde::{Deserialize, Serialize};

/// What went wrong, in a form a program can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// No session with that id exists, and none expired recently (`ERR-1`).
    UnknownSession,
    /// The session existed and has ended: its lease ran out or it was
    /// destroyed (`ERR-2`).
    SessionExpired,
    /// The request named an epoch other than the master's (`ERR-3`).
    WrongEpoch {
        /// The master's epoch, for the client to adopt.
        current: u64,
    },
    /// A frame or request could not be understood (`ERR-4`).
    Malformed,
    /// A frame exceeded the maximum frame size (`ERR-5`).
    FrameTooLarge,
    /// A server limit (sessions, connections, requests in flight) was reached
    /// (`ERR-6`).
    LimitReached,
    /// The server failed; the request may be retried (`ERR-7`).
    Internal,
    /// The handshake named a protocol version or magic the server does not
    /// speak (`ERR-8`).
    VersionMismatch {
        /// The version the server speaks.
        supported: u32,
    },
    /// A field was out of its allowed range, such as a lease outside the
    /// server's bounds (`ERR-9`).
    InvalidArgument,
    /// A compare-and-set found another modify index (`ERR-10`).
    CasMismatch {
        /// The node's modify index now; 0 if it does not exist.
        current: u64,
    },
    /// The lock is held by another session, or others wait for it first
    /// (`ERR-11`).
    LockHeld,
    /// The lock is in lock-delay after its holder's session was invalidated
    /// (`ERR-12`).
    LockDelayed {
        /// Time until the lock-delay ends.
        remaining_ms: u64,
    },
    /// The session does not hold that lock (`ERR-13`).
    LockNotHeld,
    /// A new master waits for the session to acknowledge the fail-over
    /// event on its next KeepAlive; retry after the hint (`ERR-14`,
    /// `FO-5`).
    FailoverInProgress {
        /// When a retry is likely to succeed.
        retry_after_ms: u64,
    },
    /// The request acts for a session without its secret, or ends what
    /// belongs to another session without the operator token (`ERR-15`,
    /// `AUTH-2`..`AUTH-4`).
    PermissionDenied,
    /// The connection's replies wait unread past its budget: the request
    /// was not carried out; send it again once they are read (`ERR-16`,
    /// `CONN-9`).
    Congested {
        /// When a retry is likely to succeed.
        retry_after_ms: u64,
    },
    /// The master's disk is full: the request, which would have written,
    /// was not carried out; reads and KeepAlives are still served
    /// (`ERR-17`, `STORE-5`).
    StorageFull,
}

/// An error code with a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// What a program should act on.
    pub code: ErrorCode,
    /// What a person should read.
    pub message: String,
}

impl Error {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
        }
    }
}
