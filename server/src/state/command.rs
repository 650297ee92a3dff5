//! The commands that change the durable state, and the reply each kind
//! has.
//!
//! Each kind of command is a struct that implements [`Kind`], whose
//! `Reply` is what applying it answers: the master applies a kind with
//! [`State::apply_kind`] and gets that reply, so a command cannot be
//! paired with another kind's reply. [`Command`] is the sum of the kinds,
//! as the log holds them; [`State::apply`] applies one of those through
//! the same code and answers with [`Applied`], for replay and for a
//! cell's members.

use std::time::Duration;

use leasehold_protocol::access::Rule;

use crate::access::Owner;
use leasehold_protocol::{
    Behavior, CheckStatus, Error, LockMode, Sequencer, SessionId, SessionSecret,
};

use super::{State, StateEvent};
use crate::namespace::Put;
use crate::session::{EndCause, Session};
use crate::time::Millis;

/// A change to the durable state, as the log holds it. Each variant
/// carries one kind of command; the log's bytes are those of the fields
/// in order, as when the variants held the fields themselves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Command {
    /// Create a session.
    CreateSession(NewSession),
    /// End a session, because its lease ran out or someone destroyed it.
    /// Its ephemeral nodes are deleted (`NS-4`).
    EndSession(EndSession),
    /// Write a node.
    Put(Put),
    /// Delete a node, and optionally every node below it.
    Delete(Delete),
    /// Take, or wait in line for, a node's lock. A waiter's ticket is the
    /// index of this command.
    Acquire(Acquire),
    /// Give a lock back, whichever acquire its client last heard of:
    /// protocol 7's release, and format 4's logs (`LOCK-4`).
    Release(Release),
    /// Take a waiter out of line: it stopped waiting.
    CancelWait(CancelWait),
    /// Grant a lock to its waiters if they can have it now (its lock-delay
    /// has ended).
    GrantWaiters(GrantWaiters),
    /// Create or update a health check.
    SetCheck(SetCheck),
    /// Remove a health check.
    DeleteCheck(DeleteCheck),
    /// Mark a session as one that may cache nodes (`CACHE-7`).
    MayCache(MayCache),
    /// Give a lock back if no later acquire renewed the holding (`LOCK-4`).
    ReleaseAcquired(ReleaseAcquired),
    /// Give back a grant nobody was there to hear (`LOCK-9`).
    GiveBack(GiveBack),
    /// From now on each holding keeps the index of its latest acquire
    /// (`LOCK-4`, `STORE-6`). A master logs it first thing, once, on a
    /// state that does not keep them yet.
    KeepAcquires,
    /// Set the rule for a prefix and a principal (`ACL-1`).
    SetRule(SetRule),
    /// Remove the rule for a prefix and a principal (`ACL-1`).
    RemoveRule(RemoveRule),
    /// Turn access control on or off (`ACL-5`).
    SetAccessControl(SetAccessControl),
    /// Create a bearer token, by the hash of its secret (`TOK-1`).
    CreateToken(CreateToken),
    /// Revoke a bearer token (`TOK-3`).
    RevokeToken(RevokeToken),
    /// Create a session that belongs to a principal as well as to its
    /// secret (`ID-5`).
    CreateOwnedSession(OwnedSession),
    /// Create a health check that belongs to a principal (`CHK-6`).
    SetOwnedCheck(OwnedCheck),
}

/// A kind of command, and the reply applying it answers with.
///
/// ```
/// use leasehold_protocol::{LockMode, SessionId};
/// use leasehold_server::command::Acquire;
/// use leasehold_server::{Acquisition, Bounds, Config, Millis, State};
///
/// let mut state = State::new(Bounds::from(&Config::default()));
/// let acquire = Acquire {
///     key: "locks/a".into(),
///     session: SessionId::from_u128(1),
///     mode: LockMode::Exclusive,
///     contents: None,
///     transient: false,
///     wait: false,
/// };
/// // No such session: refused, but the reply is an acquire's all the same.
/// let (reply, _events): (Result<Acquisition, _>, _) = state.apply_kind(acquire, Millis::ZERO);
/// assert!(reply.is_err());
/// ```
///
/// The same acquire taken for a write does not compile:
///
/// ```compile_fail
/// use leasehold_protocol::{LockMode, SessionId};
/// use leasehold_server::command::Acquire;
/// use leasehold_server::{Acquisition, Bounds, Config, Millis, State};
///
/// let mut state = State::new(Bounds::from(&Config::default()));
/// let acquire = Acquire {
///     key: "locks/a".into(),
///     session: SessionId::from_u128(1),
///     mode: LockMode::Exclusive,
///     contents: None,
///     transient: false,
///     wait: false,
/// };
/// // A write's reply is the index it was written at: not an acquire's.
/// let (reply, _events): (Result<u64, _>, _) = state.apply_kind(acquire, Millis::ZERO);
/// assert!(reply.is_err());
/// ```
pub trait Kind: Into<Command> {
    type Reply;
    /// Applies it to `state` as the command at `index`, at `now`; a
    /// refusal must change nothing.
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<Self::Reply, Error>;
    /// The reply as [`State::apply`] answers it.
    fn applied(reply: Self::Reply) -> Applied;
}

/// What a successfully applied command produced, whatever its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    SessionCreated(Session),
    SessionEnded,
    /// The session is marked as one that may cache (`CACHE-7`).
    MayCache,
    /// Holdings keep the index of their latest acquire from now on.
    KeepingAcquires,
    /// A node was written at this global index.
    Written {
        index: u64,
    },
    /// These nodes were deleted at this global index.
    Deleted {
        index: u64,
        keys: Vec<String>,
    },
    /// The lock is held, as `sequencer` names.
    Acquired {
        index: u64,
        sequencer: Sequencer,
    },
    /// The acquire waits in line as `ticket`.
    Queued {
        ticket: u64,
    },
    /// The lock was released.
    Released {
        index: u64,
    },
    /// A waiter left the line; `refusal` says why the lock was not had.
    WaitCancelled {
        refusal: Error,
    },
    /// Waiters were granted whatever they could have.
    WaitersChecked,
    /// A check was written; these sessions ended because of it.
    CheckSet {
        index: u64,
        invalidated: Vec<SessionId>,
    },
    /// A check was removed; these sessions ended because of it.
    CheckDeleted {
        index: u64,
        invalidated: Vec<SessionId>,
    },
    /// A rule, a token or access control changed at this global index.
    AccessChanged {
        index: u64,
    },
    /// A token was created.
    TokenCreated(TokenCreated),
}

/// A session to create. The id and secret are chosen before the command
/// is applied, so that applying it is deterministic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewSession {
    pub id: SessionId,
    /// Chosen with the id; durable, so the owner keeps its right to act for
    /// the session across restarts (`AUTH-1`).
    pub secret: SessionSecret,
    pub name: String,
    /// `None` takes the master's default.
    pub lease: Option<Duration>,
    /// `None` takes the master's default; zero means none.
    pub lock_delay: Option<Duration>,
    pub behavior: Behavior,
    pub checks: Vec<String>,
}

impl NewSession {
    /// The session `request` asks for, under the id and secret the master
    /// chose for it.
    pub fn requested(
        request: leasehold_protocol::CreateSession,
        id: SessionId,
        secret: SessionSecret,
    ) -> NewSession {
        NewSession {
            id,
            secret,
            name: request.name,
            lease: request.lease_ms.map(Duration::from_millis),
            lock_delay: request.lock_delay_ms.map(Duration::from_millis),
            behavior: request.behavior,
            checks: request.checks,
        }
    }
}

/// End session `id`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndSession {
    pub id: SessionId,
    pub cause: EndCause,
}

/// Delete the node at `key`, and every node below it if `recursive`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Delete {
    pub key: String,
    pub cas: Option<u64>,
    pub recursive: bool,
    /// Which locked nodes it may remove, as the request's authority
    /// allows (`AUTH-4`).
    pub locked: LockedNodes,
}

/// Which locked nodes a `Delete` may remove (`AUTH-4`). The master decides
/// it from the request's authority, which it checks before logging: the
/// secret and the operator token never reach the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LockedNodes {
    /// Any: the operator asked, or the master has no operator token.
    Any,
    /// Only those whose lock this session, proven by its secret, holds
    /// alone; `None`: no locked node at all.
    HeldOnlyBy(Option<SessionId>),
}

/// `session` takes, or waits in line for, the lock of `key`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Acquire {
    pub key: String,
    pub session: SessionId,
    pub mode: LockMode,
    #[serde(with = "serde_bytes")]
    pub contents: Option<Vec<u8>>,
    /// Create the node, if missing, for the lock alone (`LOCK-12`).
    pub transient: bool,
    pub wait: bool,
}

/// `session` lets go of the lock of `key`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Release {
    pub key: String,
    pub session: SessionId,
}

/// Waiter `ticket` leaves the line of `key`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CancelWait {
    pub key: String,
    pub ticket: u64,
}

/// The waiters of `key` get the lock if they can have it now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GrantWaiters {
    pub key: String,
}

/// Create or update health check `name`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SetCheck {
    pub name: String,
    pub status: CheckStatus,
    pub note: String,
}

/// Remove health check `name`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeleteCheck {
    pub name: String,
}

/// `session` may cache nodes: a new master waits for it to flush its
/// cache before it changes anything (`CACHE-7`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MayCache {
    pub session: SessionId,
}

/// `session` lets go of the lock of `key`, unless an acquire answered
/// after the one at index `acquired` renewed the holding (`LOCK-4`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseAcquired {
    pub key: String,
    pub session: SessionId,
    pub acquired: u64,
}

/// Give back `session`'s holding of `key` at lock generation
/// `generation`, whose grant nobody was there to hear (`LOCK-9`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GiveBack {
    pub key: String,
    pub session: SessionId,
    pub generation: u64,
}

/// Holdings keep the index of their latest acquire from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepAcquires;

/// Set `rule`, replacing the one its prefix and principal had.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SetRule {
    pub rule: Rule,
}

/// Remove the rule of `prefix` and `principal`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoveRule {
    pub prefix: String,
    pub principal: String,
}

/// Turn access control on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SetAccessControl {
    pub enabled: bool,
}

/// Create a token for `principal`. The master chose its secret and logs
/// only the secret's hash: the secret never reaches the log (`TOK-1`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CreateToken {
    pub principal: String,
    pub note: String,
    pub hash: [u8; 32],
}

/// Revoke token `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RevokeToken {
    pub id: u64,
}

/// Create `session`, owned by principal `owner` (`ID-5`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OwnedSession {
    pub session: NewSession,
    pub owner: Owner,
}

/// Create health check `check`, owned by principal `owner` (`CHK-6`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OwnedCheck {
    pub check: SetCheck,
    pub owner: Owner,
}

/// The id a new token got, and the index it was created at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenCreated {
    pub id: u64,
    pub index: u64,
}

/// What an acquire got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// The lock is held, as `sequencer` names.
    Acquired { index: u64, sequencer: Sequencer },
    /// It waits in line as `ticket`.
    Queued { ticket: u64 },
}

/// Nodes a delete removed, at global index `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    pub index: u64,
    pub keys: Vec<String>,
}

/// A check written or removed at `index`, and the sessions that ended
/// because of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckChanged {
    pub index: u64,
    pub invalidated: Vec<SessionId>,
}

/// Why a waiter that left the line did not get the lock: the answer its
/// request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitCancelled {
    pub refusal: Error,
}

macro_rules! into_command {
    ($($kind:ident),*) => {$(
        impl From<$kind> for Command {
            fn from(command: $kind) -> Command {
                Command::$kind(command)
            }
        }
    )*};
}

into_command!(
    EndSession,
    Delete,
    Acquire,
    Release,
    CancelWait,
    GrantWaiters,
    SetCheck,
    DeleteCheck,
    MayCache,
    ReleaseAcquired,
    GiveBack,
    SetRule,
    RemoveRule,
    SetAccessControl,
    CreateToken,
    RevokeToken
);

impl From<OwnedCheck> for Command {
    fn from(command: OwnedCheck) -> Command {
        Command::SetOwnedCheck(command)
    }
}

impl From<OwnedSession> for Command {
    fn from(command: OwnedSession) -> Command {
        Command::CreateOwnedSession(command)
    }
}

impl From<NewSession> for Command {
    fn from(command: NewSession) -> Command {
        Command::CreateSession(command)
    }
}

impl From<Put> for Command {
    fn from(command: Put) -> Command {
        Command::Put(command)
    }
}

impl From<KeepAcquires> for Command {
    fn from(_: KeepAcquires) -> Command {
        Command::KeepAcquires
    }
}

impl Command {
    /// Applies this command, whatever its kind, to `state`.
    pub(super) fn apply_to(
        self,
        state: &mut State,
        now: Millis,
    ) -> (Result<Applied, Error>, Vec<StateEvent>) {
        fn kind<K: Kind>(
            command: K,
            state: &mut State,
            now: Millis,
        ) -> (Result<Applied, Error>, Vec<StateEvent>) {
            let (reply, events) = state.apply_kind(command, now);
            (reply.map(K::applied), events)
        }
        match self {
            Command::CreateSession(c) => kind(c, state, now),
            Command::EndSession(c) => kind(c, state, now),
            Command::Put(c) => kind(c, state, now),
            Command::Delete(c) => kind(c, state, now),
            Command::Acquire(c) => kind(c, state, now),
            Command::Release(c) => kind(c, state, now),
            Command::CancelWait(c) => kind(c, state, now),
            Command::GrantWaiters(c) => kind(c, state, now),
            Command::SetCheck(c) => kind(c, state, now),
            Command::DeleteCheck(c) => kind(c, state, now),
            Command::MayCache(c) => kind(c, state, now),
            Command::ReleaseAcquired(c) => kind(c, state, now),
            Command::GiveBack(c) => kind(c, state, now),
            Command::KeepAcquires => kind(KeepAcquires, state, now),
            Command::SetRule(c) => kind(c, state, now),
            Command::RemoveRule(c) => kind(c, state, now),
            Command::SetAccessControl(c) => kind(c, state, now),
            Command::CreateToken(c) => kind(c, state, now),
            Command::RevokeToken(c) => kind(c, state, now),
            Command::CreateOwnedSession(c) => kind(c, state, now),
            Command::SetOwnedCheck(c) => kind(c, state, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use leasehold_protocol::{CheckStatus, LockMode, SessionId};

    use super::*;
    use crate::codec::{decode, encode};

    /// `Command` as format 5 logs were written before each kind became a
    /// struct of its own: the variants held their fields.
    #[derive(serde::Serialize)]
    #[allow(dead_code)]
    enum Before {
        CreateSession(NewSession),
        EndSession {
            id: SessionId,
            cause: EndCause,
        },
        Put(Put),
        Delete {
            key: String,
            cas: Option<u64>,
            recursive: bool,
            locked: LockedNodes,
        },
        Acquire {
            key: String,
            session: SessionId,
            mode: LockMode,
            #[serde(with = "serde_bytes")]
            contents: Option<Vec<u8>>,
            transient: bool,
            wait: bool,
        },
        Release {
            key: String,
            session: SessionId,
        },
        CancelWait {
            key: String,
            ticket: u64,
        },
        GrantWaiters {
            key: String,
        },
        SetCheck {
            name: String,
            status: CheckStatus,
            note: String,
        },
        DeleteCheck {
            name: String,
        },
        MayCache {
            session: SessionId,
        },
        ReleaseAcquired {
            key: String,
            session: SessionId,
            acquired: u64,
        },
        GiveBack {
            key: String,
            session: SessionId,
            generation: u64,
        },
        KeepAcquires,
    }

    // STORE-6: a log written before reads as it was written.
    #[test]
    fn every_kind_is_logged_in_the_bytes_of_the_previous_shape() {
        let (key, session) = ("locks/a".to_string(), SessionId::from_u128(7));
        let pairs: Vec<(Before, Command)> = vec![
            (
                Before::EndSession {
                    id: session,
                    cause: EndCause::Expired,
                },
                Command::EndSession(EndSession {
                    id: session,
                    cause: EndCause::Expired,
                }),
            ),
            (
                Before::Delete {
                    key: key.clone(),
                    cas: Some(3),
                    recursive: true,
                    locked: LockedNodes::HeldOnlyBy(Some(session)),
                },
                Command::Delete(Delete {
                    key: key.clone(),
                    cas: Some(3),
                    recursive: true,
                    locked: LockedNodes::HeldOnlyBy(Some(session)),
                }),
            ),
            (
                Before::Acquire {
                    key: key.clone(),
                    session,
                    mode: LockMode::Shared,
                    contents: Some(b"x".to_vec()),
                    transient: true,
                    wait: true,
                },
                Command::Acquire(Acquire {
                    key: key.clone(),
                    session,
                    mode: LockMode::Shared,
                    contents: Some(b"x".to_vec()),
                    transient: true,
                    wait: true,
                }),
            ),
            (
                Before::Release {
                    key: key.clone(),
                    session,
                },
                Command::Release(Release {
                    key: key.clone(),
                    session,
                }),
            ),
            (
                Before::CancelWait {
                    key: key.clone(),
                    ticket: 9,
                },
                Command::CancelWait(CancelWait {
                    key: key.clone(),
                    ticket: 9,
                }),
            ),
            (
                Before::GrantWaiters { key: key.clone() },
                Command::GrantWaiters(GrantWaiters { key: key.clone() }),
            ),
            (
                Before::SetCheck {
                    name: "db".into(),
                    status: CheckStatus::Critical,
                    note: "down".into(),
                },
                Command::SetCheck(SetCheck {
                    name: "db".into(),
                    status: CheckStatus::Critical,
                    note: "down".into(),
                }),
            ),
            (
                Before::DeleteCheck { name: "db".into() },
                Command::DeleteCheck(DeleteCheck { name: "db".into() }),
            ),
            (
                Before::MayCache { session },
                Command::MayCache(MayCache { session }),
            ),
            (
                Before::ReleaseAcquired {
                    key: key.clone(),
                    session,
                    acquired: 12,
                },
                Command::ReleaseAcquired(ReleaseAcquired {
                    key: key.clone(),
                    session,
                    acquired: 12,
                }),
            ),
            (
                Before::GiveBack {
                    key: key.clone(),
                    session,
                    generation: 4,
                },
                Command::GiveBack(GiveBack {
                    key,
                    session,
                    generation: 4,
                }),
            ),
            (Before::KeepAcquires, Command::KeepAcquires),
        ];
        for (before, now) in pairs {
            let bytes = encode(&before);
            assert_eq!(bytes, encode(&now), "{now:?}");
            assert_eq!(decode::<Command>(&bytes), Ok(now));
        }
    }
}
