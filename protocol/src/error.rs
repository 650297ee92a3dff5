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
    /// The master carried the request out, then stopped (or its storage,
    /// or the cell's log, failed) before it knew the change durable: it
    /// may or may not have taken effect (`ERR-18`). A cell's next master
    /// has it if the log kept it.
    OutcomeUnknown,
    /// The release names an acquire older than the latest the session was
    /// answered for that lock: it was sent before its client heard of that
    /// answer, and the lock stays held (`ERR-19`, `LOCK-4`).
    StaleRelease {
        /// The index of the holding's latest acquire.
        acquired: u64,
    },
}

/// What the caller should do about an error: SPEC's "retry?" column, for
/// programs. Errors are sorted by this, not by where they come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remedy {
    /// Send the request again now: nothing was done (after `WrongEpoch`,
    /// naming the epoch it gave).
    Retry,
    /// Send it again after this long: nothing was done, and the server
    /// said when it will be (lock-delay, a fail-over, congestion).
    RetryAfter(std::time::Duration),
    /// Send it again later, or ask for less: a limit, a held lock or a full
    /// disk stands in the way for a while nobody can tell.
    RetryLater,
    /// Read the current state, then decide: the request lost a race
    /// (compare-and-set).
    Reread,
    /// Try again on another connection, or another member of the cell:
    /// this one could not be reached.
    Reconnect,
    /// The request may or may not have been carried out (the connection
    /// broke, no reply came in time, or the master stopped before its
    /// change was durable): find out before repeating one that is not
    /// idempotent.
    OutcomeUnknown,
    /// The session is gone: create a new one.
    NewSession,
    /// Do not repeat it: it is wrong, or not allowed, and stays so.
    GiveUp,
}

impl ErrorCode {
    /// What to do about it (SPEC "Errors", the retry column).
    ///
    /// ```
    /// use leasehold_protocol::{ErrorCode, Remedy};
    /// use std::time::Duration;
    ///
    /// let delayed = ErrorCode::LockDelayed { remaining_ms: 250 };
    /// assert_eq!(delayed.remedy(), Remedy::RetryAfter(Duration::from_millis(250)));
    /// assert_eq!(ErrorCode::SessionExpired.remedy(), Remedy::NewSession);
    /// ```
    pub fn remedy(self) -> Remedy {
        use std::time::Duration;
        match self {
            ErrorCode::WrongEpoch { .. } | ErrorCode::Internal => Remedy::Retry,
            ErrorCode::LockDelayed { remaining_ms: ms }
            | ErrorCode::FailoverInProgress { retry_after_ms: ms }
            | ErrorCode::Congested { retry_after_ms: ms } => {
                Remedy::RetryAfter(Duration::from_millis(ms))
            }
            ErrorCode::LimitReached | ErrorCode::LockHeld | ErrorCode::StorageFull => {
                Remedy::RetryLater
            }
            ErrorCode::CasMismatch { .. } | ErrorCode::StaleRelease { .. } => Remedy::Reread,
            ErrorCode::OutcomeUnknown => Remedy::OutcomeUnknown,
            ErrorCode::SessionExpired => Remedy::NewSession,
            ErrorCode::UnknownSession
            | ErrorCode::Malformed
            | ErrorCode::FrameTooLarge
            | ErrorCode::VersionMismatch { .. }
            | ErrorCode::InvalidArgument
            | ErrorCode::LockNotHeld
            | ErrorCode::PermissionDenied => Remedy::GiveUp,
        }
    }
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

/// How a refusal or a log line shows text it was given: quoted and
/// escaped, and cut to its first `max_chars` characters with the whole
/// length said, so that no input, however long, comes back whole.
///
/// ```
/// use leasehold_protocol::excerpt;
/// assert_eq!(excerpt("jobs/x", 16), "\"jobs/x\"");
/// let long = "a".repeat(512 * 1024);
/// assert_eq!(excerpt(&long, 4), "\"aaaa\"... (524288 bytes)");
/// ```
pub fn excerpt(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // SPEC "Errors": the retry column, code by code.
    #[test]
    fn each_code_has_the_remedy_the_spec_table_gives() {
        let table = [
            (ErrorCode::UnknownSession, Remedy::GiveUp),
            (ErrorCode::SessionExpired, Remedy::NewSession),
            (ErrorCode::WrongEpoch { current: 3 }, Remedy::Retry),
            (ErrorCode::Malformed, Remedy::GiveUp),
            (ErrorCode::FrameTooLarge, Remedy::GiveUp),
            (ErrorCode::LimitReached, Remedy::RetryLater),
            (ErrorCode::Internal, Remedy::Retry),
            (ErrorCode::VersionMismatch { supported: 4 }, Remedy::GiveUp),
            (ErrorCode::InvalidArgument, Remedy::GiveUp),
            (ErrorCode::CasMismatch { current: 7 }, Remedy::Reread),
            (ErrorCode::LockHeld, Remedy::RetryLater),
            (
                ErrorCode::LockDelayed { remaining_ms: 40 },
                Remedy::RetryAfter(Duration::from_millis(40)),
            ),
            (ErrorCode::LockNotHeld, Remedy::GiveUp),
            (
                ErrorCode::FailoverInProgress { retry_after_ms: 50 },
                Remedy::RetryAfter(Duration::from_millis(50)),
            ),
            (ErrorCode::PermissionDenied, Remedy::GiveUp),
            (
                ErrorCode::Congested { retry_after_ms: 10 },
                Remedy::RetryAfter(Duration::from_millis(10)),
            ),
            (ErrorCode::StorageFull, Remedy::RetryLater),
            (ErrorCode::OutcomeUnknown, Remedy::OutcomeUnknown),
            (ErrorCode::StaleRelease { acquired: 9 }, Remedy::Reread),
        ];
        for (code, remedy) in table {
            assert_eq!(code.remedy(), remedy, "{code:?}");
        }
    }
}
