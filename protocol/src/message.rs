//! Every frame and message of the protocol (SPEC "Messages").
//!
//! Durations travel as whole milliseconds (`*_ms` fields). Optional fields use
//! `Option` so that an explicit zero is never mistaken for "use the default".

use serde::{Deserialize, Serialize};

use crate::access::{BearerToken, Identity, Rule, TokenInfo};
use crate::auth::{Authority, SessionSecret, SessionToken};
use crate::error::Error;

/// The first eight bytes of every handshake (`HS-1`).
pub const MAGIC: [u8; 8] = *b"LEASEHLD";

/// The protocol version this crate speaks (`HS-2`).
pub const PROTOCOL_VERSION: u32 = 10;

/// The oldest protocol version a server still serves (`HS-2`): protocol 7
/// differs only in its release, which names no acquire
/// ([`Request::ReleaseUnfenced`]).
pub const OLDEST_PROTOCOL_VERSION: u32 = 7;

pub use crate::auth::SessionId;

/// A frame sent by a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientFrame {
    /// The first frame on every connection.
    Hello(Hello),
    /// A request; `id` is echoed in its reply.
    Request {
        /// Chosen by the client, unique among its requests in flight.
        id: u64,
        /// What is asked.
        body: Request,
    },
}

/// A frame sent by the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerFrame {
    /// The answer to [`Hello`].
    Welcome(Welcome),
    /// The answer to the request with the same `id`.
    Reply {
        /// The id of the request answered.
        id: u64,
        /// Its answer, or why it failed.
        body: Result<Response, Error>,
    },
    /// A connection-level error; the server closes the connection after it.
    Close(Error),
    /// The answer to [`Hello`] from a member of a cell that is not its
    /// master: where the master is, if the member knows (`CELL-7`). The
    /// member closes the connection after it.
    Redirect {
        /// The master's address, as the cell's configuration names it.
        master: Option<String>,
    },
}

/// The client's handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// `LEASEHLD` ([`MAGIC`]): this is the Leasehold protocol.
    pub magic: [u8; 8],
    /// The protocol version the client speaks.
    pub version: u32,
}

impl Hello {
    /// The handshake of this crate's protocol version.
    pub fn current() -> Self {
        Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
        }
    }
}

/// The server's handshake answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The protocol version the server speaks (the client's, or the handshake fails).
    pub version: u32,
    /// The master's epoch: KeepAlives name it.
    pub epoch: u64,
    /// What the server accepts.
    pub limits: Limits,
}

/// The server's limits, announced in [`Welcome`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest frame body accepted, in bytes.
    pub max_frame: u32,
    /// Shortest lease a session may ask for.
    pub min_lease_ms: u64,
    /// Longest lease a session may ask for.
    pub max_lease_ms: u64,
    /// Longest lock-delay a session may ask for.
    pub max_lock_delay_ms: u64,
    /// How long before a lease ends the master answers a held KeepAlive.
    pub keepalive_margin_ms: u64,
    /// Requests one connection may have outstanding; a client queues beyond
    /// this rather than be refused.
    pub max_in_flight: u32,
}

/// What happens to a session's locks and ephemeral nodes when it is
/// invalidated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Behavior {
    /// Release its locks (the default, as in Consul).
    #[default]
    Release,
    /// Delete the nodes it holds locks on or created as ephemeral.
    Delete,
}

/// A health check's status (`CHK-1`). Only `Critical` invalidates the
/// sessions bound to the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckStatus {
    /// All is well.
    Passing,
    /// Something needs attention; bound sessions live on.
    Warning,
    /// Bound sessions are invalidated.
    Critical,
}

impl CheckStatus {
    /// How the status reads in messages and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Passing => "passing",
            CheckStatus::Warning => "warning",
            CheckStatus::Critical => "critical",
        }
    }
}

/// How a lock is held (`LOCK-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LockMode {
    /// One holder at a time.
    Exclusive,
    /// Any number of holders, and no exclusive one.
    Shared,
}

/// A request, answered by one [`Response`] or one [`Error`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Create a session (`SES-1`).
    CreateSession(CreateSession),
    /// Keep a session alive and collect its events (`KA-1`).
    KeepAlive(KeepAlive),
    /// End a session; with an operator token configured, only its owner
    /// or the operator may (`AUTH-3`).
    DestroySession {
        /// The session to end.
        session: SessionId,
        /// Who asks: the session itself (its token) or the operator.
        authority: Authority,
    },
    /// A session's record: name, lease, lock-delay, lease left.
    SessionInfo {
        /// The session asked about.
        session: SessionId,
    },
    /// One page of live sessions in id order, starting after `after`.
    /// `limit` 0 means the server's page size.
    ListSessions {
        /// Start after this session; `None`: from the first.
        after: Option<SessionId>,
        /// At most this many; 0: the server's page size.
        limit: u32,
    },
    /// A node's contents and metadata, or metadata alone (`NS-9`).
    Get {
        /// The node's key.
        key: String,
        /// Leave the contents out.
        stat_only: bool,
    },
    /// One page of the keys below a prefix, in key order, starting after
    /// `after` (`NS-5`). `limit` 0 means the server's page size.
    List {
        /// Where to list; empty: the root.
        prefix: String,
        /// Every key below the prefix, not only its children.
        recursive: bool,
        /// Start after this key; `None`: from the first.
        after: Option<String>,
        /// At most this many; 0: the server's page size.
        limit: u32,
    },
    /// Write a node (`NS-6`).
    Put(Put),
    /// Delete a node, and optionally every node below it (`NS-7`).
    /// With an operator token configured, a locked node is deleted only
    /// on the authority of its sole holder or of the operator (`AUTH-4`).
    Delete {
        /// The node's key.
        key: String,
        /// Delete only if the node's modify index is this.
        cas: Option<u64>,
        /// Every node below the key too.
        recursive: bool,
        /// Who asks, where a locked node is concerned.
        authority: Authority,
    },
    /// Answer when the node's index exceeds `after_index` (it was created,
    /// written or deleted), or after `timeout_ms` (`NS-8`).
    Watch {
        /// The key watched.
        key: String,
        /// Answer once the key's index is past this.
        after_index: u64,
        /// Answer anyway after this long.
        timeout_ms: u64,
    },
    /// Take a node's lock for a session (`LOCK-2`).
    Acquire(Acquire),
    /// Protocol 7's release: gives the lock back whichever acquire its
    /// client last heard of, so a copy delivered late can undo a later
    /// acquire's answer (`LOCK-4`). Served for protocol 7's clients;
    /// [`Request::Release`] is the one to send.
    ReleaseUnfenced {
        /// The locked key.
        key: String,
        /// The holder.
        session: SessionToken,
    },
    /// The sequencer of a lock the session holds (`LOCK-7`).
    GetSequencer {
        /// The locked key.
        key: String,
        /// The holder.
        session: SessionToken,
    },
    /// Whether a sequencer is still valid: its session still holds that
    /// lock, in that mode, on that node, and the lock has not been freed
    /// and taken again since (`LOCK-7`).
    CheckSequencer {
        /// The sequencer's opaque bytes.
        #[serde(with = "serde_bytes")]
        sequencer: Vec<u8>,
    },
    /// Hear about changes to `key`, or with `prefix` to every key at or
    /// below it (`prefix` and an empty key: everything), as events on the
    /// session's KeepAlive replies (`EV-5`).
    Subscribe {
        /// The session that hears the events.
        session: SessionToken,
        /// The key, or with `prefix` the prefix, covered.
        key: String,
        /// Cover every key at or below `key`.
        prefix: bool,
        /// Which changes, from [`event_mask`].
        mask: u32,
    },
    /// Stop a subscription.
    Unsubscribe {
        /// The session that made it.
        session: SessionToken,
        /// The id `Subscribed` gave.
        subscription: u64,
    },
    /// Create or update a named health check (`CHK-1`); `Critical` ends
    /// every session bound to it (`CHK-3`).
    SetCheck {
        /// The check's name.
        name: String,
        /// Its new status.
        status: CheckStatus,
        /// Why, for people.
        note: String,
    },
    /// Remove a health check, ending every session bound to it (`CHK-4`).
    DeleteCheck {
        /// The check's name.
        name: String,
    },
    /// One page of checks in name order, starting after `after` (`CHK-5`).
    /// `limit` 0 means the server's page size.
    ListChecks {
        /// Start after this name; `None`: from the first.
        after: Option<String>,
        /// At most this many; 0: the server's page size.
        limit: u32,
    },
    /// Keep several sessions alive in one request, each answered at once
    /// whatever its `hold` (`KA-10`): what a client sends for the sessions
    /// it must renew together, after a reconnection or a fail-over. At
    /// most [`keepalive_all_limit`] of them.
    KeepAliveAll(Vec<KeepAlive>),
    /// A node read for a session's cache (`CACHE-2`): answered as `Get`,
    /// and the master records the session as a cacher of the key when the
    /// answer says `cacheable`.
    GetCached(GetCached),
    /// Give a lock back (`LOCK-4`): only the holding `acquired` names.
    Release {
        /// The locked key.
        key: String,
        /// The holder.
        session: SessionToken,
        /// The `index` of the latest `Acquired` answer the client heard
        /// for this lock. If the session asked for it again since and was
        /// answered, the release was sent before its client heard of that
        /// and is refused with `StaleRelease`.
        acquired: u64,
    },
    /// Who holds the lock of `key`, who waits for it, and how long its
    /// lock-delay lasts (`LOCK-14`).
    LockInfo {
        /// The locked key.
        key: String,
    },
    /// The locks `session` holds and waits for (`SES-11`).
    SessionLocks {
        /// The session asked about.
        session: SessionId,
    },
    /// From protocol 9: act as the principal of this bearer token, or as
    /// the operator with the master's operator token, for the rest of the
    /// connection (`ID-2`). Answered with [`Response::Identity`].
    Authenticate {
        /// A bearer token's text, or the operator token.
        token: String,
    },
    /// Who this connection acts as (`ID-3`).
    WhoAmI,
    /// Set the rule for a prefix and a principal, replacing the one it had
    /// (`ACL-1`); needs `admin` on the prefix.
    SetRule(Rule),
    /// Remove the rule for a prefix and a principal (`ACL-1`).
    RemoveRule {
        /// The rule's prefix.
        prefix: String,
        /// The rule's principal.
        principal: String,
    },
    /// Every rule, and whether access control is on (`ACL-6`).
    ListRules,
    /// Turn access control on or off (`ACL-5`); needs `admin` on every key.
    SetAccessControl {
        /// On: default deny, the rules decide.
        enabled: bool,
    },
    /// Create a bearer token for `principal` (`TOK-1`); needs `admin` on
    /// every key. Its secret is in the answer and nowhere else.
    CreateToken {
        /// The principal it authenticates as.
        principal: String,
        /// What it is for, for people.
        note: String,
    },
    /// Revoke a bearer token: connections that authenticated with it lose
    /// its rights at once (`TOK-3`).
    RevokeToken {
        /// The token's id.
        id: u64,
    },
    /// Every bearer token, without secrets (`TOK-4`).
    ListTokens,
    /// From protocol 10: one page of the locks at or below `prefix` that
    /// are held, awaited or in lock-delay, in key order, starting after
    /// `after`, each with its holders, the first of its waiters and its
    /// lock-delay (`LOCK-16`). `limit` 0 means the server's page size.
    ListLocks {
        /// Where to look; empty: every key.
        prefix: String,
        /// Start after this key; `None`: from the first.
        after: Option<String>,
        /// At most this many; 0: the server's page size.
        limit: u32,
    },
    /// From protocol 10: what the master serves, in figures (`OPS-4`).
    Status,
    /// From protocol 10: take a consistent snapshot of the whole state for
    /// a backup (`OPS-6`); its bytes are then read with
    /// [`Request::ReadSnapshot`]. Answered once the state it holds is
    /// durable.
    SaveSnapshot,
    /// From protocol 10: bytes of the snapshot `SaveSnapshot` took, from
    /// `offset` (`OPS-6`).
    ReadSnapshot {
        /// The snapshot's id, as `SnapshotSaved` gave it.
        id: u64,
        /// Where to read from.
        offset: u64,
    },
}

/// A read for a session's cache (`CACHE-2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetCached {
    /// The node's key.
    pub key: String,
    /// The session whose cache the answer goes to (`AUTH-2`).
    pub session: SessionToken,
    /// Keys the session's cache no longer holds: the master stops counting
    /// them against its cap and sends them no invalidation (`CACHE-8`).
    pub dropped: Vec<String>,
}

/// The most sessions one [`Request::KeepAliveAll`] may name on a
/// connection whose frames are at most `max_frame` bytes (`KA-10`): few
/// enough that their answers, each with a short refusal at most, fill half
/// a frame, and their events the other half.
pub fn keepalive_all_limit(max_frame: usize) -> usize {
    (max_frame / 256).clamp(1, 1024)
}

/// Take a node's lock (`LOCK-2`, `LOCK-3`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquire {
    /// The key whose lock is taken (the node is created if missing).
    pub key: String,
    /// The session that takes it.
    pub session: SessionToken,
    /// Exclusive or shared.
    pub mode: LockMode,
    /// Contents to write in the same step as the acquisition, as Consul's
    /// `acquire=` does (the leader's address into the leader key).
    #[serde(with = "serde_bytes")]
    pub contents: Option<Vec<u8>>,
    /// `None`: try once and answer at once. `Some(ms)`: wait in line up to
    /// `ms` (0 means the longest a request may wait, 10 minutes).
    pub wait_ms: Option<u64>,
    /// The node exists for its lock alone: if this acquire creates it, the
    /// master deletes it once the lock is free and nobody waits (`LOCK-12`).
    pub transient: bool,
}

/// Write a node (`NS-6`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    /// The node's key.
    pub key: String,
    /// The new contents (at most 256 KiB).
    #[serde(with = "serde_bytes")]
    pub contents: Vec<u8>,
    /// Opaque to the server.
    pub flags: u64,
    /// Write only if the node's modify index equals this; 0 means create
    /// only.
    pub cas: Option<u64>,
    /// Bind a new node to this session: it is deleted when the session ends.
    pub ephemeral: Option<SessionToken>,
}

/// Create a session (`SES-1`..`SES-4`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateSession {
    /// A label for people; need not be unique.
    pub name: String,
    /// Requested lease; `None` takes the server default.
    pub lease_ms: Option<u64>,
    /// Requested lock-delay; `None` takes the default, `Some(0)` means none.
    pub lock_delay_ms: Option<u64>,
    /// What invalidation does to its locks and ephemeral nodes.
    pub behavior: Behavior,
    /// Health checks the session is bound to (`CHK-2`).
    pub checks: Vec<String>,
}

/// Keep a session alive (`KA-1`..`KA-7`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepAlive {
    /// The session kept alive.
    pub session: SessionToken,
    /// The epoch the client believes the master has.
    pub epoch: u64,
    /// The highest event sequence number the client has received.
    pub acked_seq: u64,
    /// `true`: the master may hold the request until the lease nears its end.
    /// `false`: answer at once (a client in jeopardy, or just reconnected).
    pub hold: bool,
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// `secret` is the right to act for the session (`AUTH-1`): this reply
    /// is the only place the master ever shows it.
    SessionCreated {
        /// The new session.
        session: SessionId,
        /// Its secret.
        secret: SessionSecret,
        /// The master's epoch.
        epoch: u64,
        /// The lease granted.
        lease: LeaseGrant,
    },
    /// The answer to a KeepAlive: the lease renewed, and events.
    KeepAlive {
        /// The master's epoch.
        epoch: u64,
        /// The lease granted.
        lease: LeaseGrant,
        /// Events not yet acknowledged, oldest first.
        events: Vec<Event>,
    },
    /// The session was destroyed.
    Destroyed,
    /// A session's record.
    SessionInfo(SessionInfo),
    /// A page of sessions; `more` says whether sessions follow the last one.
    Sessions {
        /// The sessions, in id order.
        sessions: Vec<SessionInfo>,
        /// Whether more follow.
        more: bool,
    },
    /// A node as of global index `index`; `None` if it does not exist.
    Node {
        /// The key's index (`NS-8`).
        index: u64,
        /// The node, if it exists.
        node: Option<NodeView>,
    },
    /// A page of keys, as of global index `index`; `more` says whether
    /// keys follow the last one.
    Keys {
        /// The index the listing is as of.
        index: u64,
        /// The keys, in key order.
        keys: Vec<String>,
        /// Whether more follow.
        more: bool,
    },
    /// A write was applied at global index `index`.
    Written {
        /// The index of the write.
        index: u64,
    },
    /// The keys a delete removed, at global index `index`.
    Deleted {
        /// The index of the delete.
        index: u64,
        /// The first 1000 keys deleted, in key order.
        keys: Vec<String>,
        /// How many were deleted.
        deleted_total: u64,
    },
    /// The lock is held: the node's modify index after the acquisition, and
    /// the sequencer of this holding.
    Acquired {
        /// The node's modify index after the acquisition.
        index: u64,
        /// The holding's sequencer, as opaque bytes.
        #[serde(with = "serde_bytes")]
        sequencer: Vec<u8>,
    },
    /// The lock was released.
    Released {
        /// The node's modify index after the release.
        index: u64,
    },
    /// The sequencer of a holding.
    Sequencer {
        /// The holding's sequencer, as opaque bytes.
        #[serde(with = "serde_bytes")]
        sequencer: Vec<u8>,
    },
    /// Whether a sequencer names a current holding.
    SequencerChecked {
        /// Whether it is still valid.
        valid: bool,
    },
    /// A subscription was made.
    Subscribed {
        /// Its id, unique on this master.
        subscription: u64,
    },
    /// A subscription was stopped.
    Unsubscribed,
    /// A check was written at global index `index`; the sessions it ended.
    CheckSet {
        /// The index of the write.
        index: u64,
        /// The first 1000 sessions it ended.
        invalidated: Vec<SessionId>,
        /// How many it ended.
        invalidated_total: u64,
    },
    /// A check was removed at global index `index`; the sessions it ended.
    CheckDeleted {
        /// The index of the removal.
        index: u64,
        /// The first 1000 sessions it ended.
        invalidated: Vec<SessionId>,
        /// How many it ended.
        invalidated_total: u64,
    },
    /// A page of checks; `more` says whether checks follow the last one.
    Checks {
        /// The checks, in name order.
        checks: Vec<CheckInfo>,
        /// Whether more follow.
        more: bool,
    },
    /// The answer to a [`Request::KeepAliveAll`]: one per session it named,
    /// in its order (`KA-10`).
    KeepAliveAll {
        /// Each session's renewal, or why it was refused.
        answers: Vec<Result<KeepAliveGrant, Error>>,
    },
    /// The answer to a [`Request::GetCached`]: a node as `Node` gives it,
    /// and whether the session may keep it in its cache (`CACHE-2`).
    Cached {
        /// The key's index (`NS-8`).
        index: u64,
        /// The node with its contents, if it exists.
        node: Option<NodeView>,
        /// Whether the master recorded the session as a cacher of the key,
        /// so that it will be told before the key changes.
        cacheable: bool,
    },
    /// The answer to a [`Request::LockInfo`].
    LockInfo(LockInfo),
    /// The answer to a [`Request::SessionLocks`].
    SessionLocks(SessionLocks),
    /// Who the connection acts as: the answer to [`Request::WhoAmI`] and
    /// [`Request::Authenticate`].
    Identity(Identity),
    /// A rule, a token or access control changed at global index `index`.
    AccessChanged {
        /// The index of the change.
        index: u64,
    },
    /// The answer to [`Request::ListRules`].
    Rules {
        /// Every rule, by prefix then principal.
        rules: Vec<Rule>,
        /// Whether access control is on.
        enabled: bool,
    },
    /// A new bearer token: the only place its secret is ever shown.
    TokenCreated {
        /// The token, secret included.
        token: BearerToken,
        /// The global index at which it was created.
        index: u64,
    },
    /// The answer to [`Request::ListTokens`].
    Tokens(Vec<TokenInfo>),
    /// The answer to [`Request::ListLocks`].
    Locks {
        /// The locks, in key order.
        locks: Vec<LockListing>,
        /// Whether more follow the last one.
        more: bool,
    },
    /// The answer to [`Request::Status`].
    Status(MasterStatus),
    /// The answer to [`Request::SaveSnapshot`].
    SnapshotSaved {
        /// What [`Request::ReadSnapshot`] names it by.
        id: u64,
        /// Its length in bytes.
        bytes: u64,
        /// The state's global index it holds (`NS-2`).
        index: u64,
        /// The master's epoch.
        epoch: u64,
    },
    /// The answer to [`Request::ReadSnapshot`]: the bytes from `offset`,
    /// at most half a frame of them; none past the end.
    SnapshotBytes {
        /// Where they start.
        offset: u64,
        /// The bytes.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
}

/// A lock as [`Request::ListLocks`] lists it (`LOCK-16`): who holds it and
/// since when, who waits, and how long its lock-delay lasts still.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockListing {
    /// The locked key.
    pub key: String,
    /// The node's lock generation (`NS-2`); 0 if the node is gone.
    pub lock_generation: u64,
    /// Its first holders, in session order.
    pub holders: Vec<LockHolder>,
    /// How many hold it in all: more than `holders` lists when a shared
    /// lock has many holders.
    pub holders_total: u64,
    /// Its first waiters, first in line first.
    pub waiters: Vec<LockWaiter>,
    /// How many wait in all.
    pub waiters_total: u64,
    /// How long its lock-delay lasts still (`LOCK-6`); `None`: it is in
    /// none.
    pub delay_remaining_ms: Option<u64>,
}

/// A holder of a lock, as [`LockListing`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// The holding session.
    pub session: SessionId,
    /// Its name, as it was created with.
    pub name: String,
    /// How it holds the lock.
    pub mode: LockMode,
    /// For how long, on the master's clock; `None` for a holding from a
    /// data directory that did not keep the time (`STORE-6`).
    pub held_ms: Option<u64>,
}

/// A waiter for a lock, as [`LockListing`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockWaiter {
    /// The waiting session.
    pub session: SessionId,
    /// Its name.
    pub name: String,
    /// The mode it asked for.
    pub mode: LockMode,
}

/// What a master serves, in figures (`OPS-4`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterStatus {
    /// The server's version, e.g. `0.1.0`.
    pub version: String,
    /// The master's epoch (`FO-1`).
    pub epoch: u64,
    /// The state's global index (`NS-2`).
    pub index: u64,
    /// Live sessions.
    pub sessions: u64,
    /// Live sessions whose KeepAlive the master holds: their clients are
    /// connected and keeping them.
    pub keepalives_held: u64,
    /// Of the ended sessions the master remembers (`SES-7`), how many
    /// ended for each cause, by cause: `destroyed`, `expired`,
    /// `check-failed`.
    pub recently_ended: Vec<(String, u64)>,
    /// Nodes in the namespace.
    pub nodes: u64,
    /// Keys whose lock is held.
    pub locks_held: u64,
    /// Holdings: a shared lock counts once per holder.
    pub holdings: u64,
    /// Sessions waiting in line for a lock.
    pub waiters: u64,
    /// Keys in lock-delay (`LOCK-6`).
    pub locks_in_delay: u64,
    /// Health checks (`CHK-1`).
    pub checks: u64,
    /// Whether access control is on (`ACL-5`).
    pub access_control: bool,
    /// Bytes the data directory's log and snapshot hold; `None` for a
    /// master in memory, or a cell's (its members say their own).
    pub stored_bytes: Option<u64>,
}

/// The locks a session holds and waits for (`SES-11`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLocks {
    /// The locks it holds, by key, with the mode of each.
    pub held: Vec<(String, LockMode)>,
    /// The locks it waits for, by key, with the mode it asked for.
    pub waiting: Vec<(String, LockMode)>,
    /// More were left out, so that the answer fits a frame.
    pub more: bool,
}

/// A lock as the master sees it (`LOCK-14`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The key's index (`NS-8`).
    pub index: u64,
    /// Its holders, with the mode each holds it in.
    pub holders: Vec<(SessionId, LockMode)>,
    /// Its waiters, first in line first, with the mode each asked for.
    pub waiters: Vec<(SessionId, LockMode)>,
    /// How many wait in all: more than `waiters` lists when the line is
    /// longer than a page.
    pub waiters_total: u64,
    /// How long its lock-delay lasts still (`LOCK-6`); `None`: it is in
    /// none.
    pub delay_remaining_ms: Option<u64>,
}

/// One session's answer in a [`Response::KeepAliveAll`]: what
/// [`Response::KeepAlive`] carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepAliveGrant {
    /// The master's epoch.
    pub epoch: u64,
    /// The lease granted.
    pub lease: LeaseGrant,
    /// Events not yet acknowledged, oldest first; the rest follow on the
    /// session's next KeepAlive, answered at once while any wait.
    pub events: Vec<Event>,
}

impl From<KeepAliveGrant> for Response {
    fn from(grant: KeepAliveGrant) -> Self {
        Response::KeepAlive {
            epoch: grant.epoch,
            lease: grant.lease,
            events: grant.events,
        }
    }
}

/// A health check as a reply carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckInfo {
    /// The check's name.
    pub name: String,
    /// Its status.
    pub status: CheckStatus,
    /// Why, for people.
    pub note: String,
    /// The global index at which it was last set.
    pub modify_index: u64,
    /// How many live sessions are bound to it.
    pub sessions: u64,
}

/// A node as a reply carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// The node's key.
    pub key: String,
    /// Its metadata.
    pub stat: NodeStat,
    /// `None` when only the metadata was asked for.
    #[serde(with = "serde_bytes")]
    pub contents: Option<Vec<u8>>,
}

/// A node's metadata (`NS-2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStat {
    /// Opaque to the server.
    pub flags: u64,
    /// Greater than that of any earlier node of the same name.
    pub instance: u64,
    /// Rises on every write of the contents.
    pub content_generation: u64,
    /// Rises when the node's lock goes from free to held.
    pub lock_generation: u64,
    /// Global index of the node's last change.
    pub modify_index: u64,
    /// 64-bit FNV-1a of the contents.
    pub checksum: u64,
    /// The length of the contents, in bytes.
    pub contents_len: u64,
    /// The session the node is bound to, if it is ephemeral.
    pub ephemeral_owner: Option<SessionId>,
    /// The sessions holding the node's lock, and how.
    pub lock_holders: Vec<(SessionId, LockMode)>,
    /// The node goes away when its lock is free and nobody waits
    /// (`LOCK-12`).
    pub transient: bool,
}

/// The lease a reply grants, as the master measured it (`LEASE-4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    /// Lease left when the reply was sent.
    pub remaining_ms: u64,
    /// How long the master held the request before replying. A client adds
    /// it to the time it sent the request to bound when the reply was sent.
    pub held_ms: u64,
}

impl LeaseGrant {
    /// A grant measured on a millisecond clock, rounded so that it never
    /// overstates: each reading may be up to 1 ms late, so each figure is
    /// reduced by 1 ms (`KA-4`).
    pub fn conservative(remaining_ms: u64, held_ms: u64) -> Self {
        LeaseGrant {
            remaining_ms: remaining_ms.saturating_sub(1),
            held_ms: held_ms.saturating_sub(1),
        }
    }
}

/// A session as the master sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The session's id.
    pub session: SessionId,
    /// Its label.
    pub name: String,
    /// The lease it was granted.
    pub lease_ms: u64,
    /// Its lock-delay.
    pub lock_delay_ms: u64,
    /// What invalidation does to its locks and ephemeral nodes.
    pub behavior: Behavior,
    /// Lease left now, at the master.
    pub lease_remaining_ms: u64,
    /// Whether a KeepAlive is being held for it.
    pub keepalive_held: bool,
    /// Health checks it is bound to.
    pub checks: Vec<String>,
}

/// A notification piggybacked on a KeepAlive reply. Sequence numbers of one
/// session are consecutive from 1 (`EV-1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Consecutive from 1 for each session on each master.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
}

/// What an [`Event`] reports (`EV-5`, `EV-6`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// Something a subscription asked to hear about happened at `key`.
    Node {
        /// The subscription that asked for it.
        subscription: u64,
        /// The key it concerns (for a child change, the subscribed key).
        key: String,
        /// What happened.
        change: Change,
        /// The index of the command that made the change: after `Created`
        /// or `Modified`, the node's new modify index (`EV-10`).
        index: u64,
        /// With `Created` and `Modified`, the node's new contents if they
        /// are at most [`EVENT_CONTENTS_MAX`] bytes; otherwise absent, and
        /// a reader who needs them reads the node (`EV-10`).
        #[serde(with = "serde_bytes")]
        contents: Option<Vec<u8>>,
    },
    /// This session's lock on `key` was taken away: the node was deleted
    /// under it (`LOCK-8`). Sent to the holder without a subscription.
    LockLost {
        /// The key whose lock was lost.
        key: String,
        /// The lock generation of the holding taken away, as its sequencer
        /// names it. A key's generations only rise (`NS-2`), so an event
        /// that arrives after the session locked the key again is told
        /// from a loss of the new holding (`LOCK-13`).
        lock_generation: u64,
    },
    /// `waiter` waits for the lock of `key` this session holds: hand it over
    /// if you can. Sent to every holder without a subscription.
    LockConflict {
        /// The key whose lock is wanted.
        key: String,
        /// The session waiting for it (the head of the line).
        waiter: SessionId,
    },
    /// Events were dropped because the session's queue or the master's event
    /// budget overflowed: re-read what you watch and assume any lock may be
    /// lost (`EV-4`).
    EventsLost,
    /// A new master, of `epoch`, took over: subscriptions and events queued
    /// at the old one are gone, so subscribe again and re-read what you
    /// cache (`FO-5`). The session, its locks and its nodes survive.
    Failover {
        /// The new master's epoch.
        epoch: u64,
    },
    /// Drop `keys` from the session's cache: a change to them waits for
    /// this event's acknowledgement (`CACHE-3`).
    Invalidate {
        /// The keys to drop.
        keys: Vec<String>,
    },
}

/// What happened to a node a subscription covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Change {
    /// The node was created.
    Created,
    /// Its contents were written.
    Modified,
    /// The node was deleted.
    Deleted,
    /// A direct child of the subscribed key came into being.
    ChildAdded {
        /// The child's key.
        child: String,
    },
    /// A direct child of the subscribed key was deleted.
    ChildRemoved {
        /// The child's key.
        child: String,
    },
    /// A direct child of the subscribed key was written.
    ChildModified {
        /// The child's key.
        child: String,
    },
    /// `holder` took the node's lock.
    LockAcquired {
        /// The session that took it.
        holder: SessionId,
    },
    /// `holder` no longer holds the node's lock.
    LockReleased {
        /// The session that no longer holds it.
        holder: SessionId,
    },
}

/// The largest contents a `Created` or `Modified` event carries (`EV-10`).
pub const EVENT_CONTENTS_MAX: usize = 1024;

/// Bits of a subscription's event mask (`EV-5`).
pub mod event_mask {
    /// The node was created, written or deleted.
    pub const CONTENTS: u32 = 1;
    /// A direct child was created (exact-key subscriptions).
    pub const CHILD_ADDED: u32 = 1 << 1;
    /// A direct child was deleted (exact-key subscriptions).
    pub const CHILD_REMOVED: u32 = 1 << 2;
    /// A direct child was written (exact-key subscriptions).
    pub const CHILD_MODIFIED: u32 = 1 << 3;
    /// Someone took the node's lock.
    pub const LOCK_ACQUIRED: u32 = 1 << 4;
    /// A holder no longer holds the node's lock.
    pub const LOCK_RELEASED: u32 = 1 << 5;
    /// The client library's session state transitions, reported in the
    /// subscription's stream; the master sends nothing for this bit.
    pub const SESSION_STATE: u32 = 1 << 6;
    /// Every kind.
    pub const ALL: u32 = (1 << 7) - 1;
}
