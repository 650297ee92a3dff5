//! Every server default in one place; SPEC.md quotes these values.

use std::time::Duration;

use leasehold_protocol::{Limits, DEFAULT_MAX_FRAME, MAX_FRAME_CAP};

use crate::observe::MasterObserver;
use crate::time::Span;

/// Lease a session gets when it asks for none (`SES-2`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(12);
/// Shortest lease accepted unless the server is started with other bounds.
pub const DEFAULT_MIN_LEASE: Duration = Duration::from_secs(1);
/// Longest lease accepted unless the server is started with other bounds.
pub const DEFAULT_MAX_LEASE: Duration = Duration::from_secs(60);
/// Lock-delay a session gets when it asks for none (`SES-3`).
pub const DEFAULT_LOCK_DELAY: Duration = Duration::from_secs(15);
/// Longest lock-delay accepted (`SES-3`).
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);
/// How long before a lease ends a held KeepAlive is answered, at most (`KA-2`).
pub const DEFAULT_KEEPALIVE_MARGIN: Duration = Duration::from_secs(2);
/// Subscriptions one master holds at most, over all sessions (`EV-5`).
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1_000_000;
/// Health checks one peer address may create (`QUOTA-1`).
pub const DEFAULT_MAX_CHECKS_PER_PEER: usize = 1_000;
/// Live sessions one peer address may have created (`QUOTA-2`): a tenth
/// of the master's cap.
pub const DEFAULT_MAX_SESSIONS_PER_PEER: usize = 100_000;
/// Subscriptions one peer address may have made (`QUOTA-3`): a tenth of
/// the master's cap.
pub const DEFAULT_MAX_SUBSCRIPTIONS_PER_PEER: usize = 100_000;
/// Bytes of events that may wait for the sessions one peer address
/// created (`EV-4`).
pub const DEFAULT_EVENT_BYTES_PER_PEER: usize = 64 << 20;
/// Bytes of events that may wait for all sessions (`EV-4`).
pub const DEFAULT_ALL_EVENT_BYTES: usize = 256 << 20;
/// Bytes the master's records of which sessions cache which keys may take
/// (`CACHE-8`).
pub const DEFAULT_ALL_CACHE_BYTES: usize = 256 << 20;
/// Acquires one peer address may have waiting (`QUOTA-4`).
pub const DEFAULT_MAX_WAITERS_PER_PEER: usize = 100_000;
/// Bytes of nodes (keys and contents) one peer address may have written
/// (`QUOTA-5`).
pub const DEFAULT_MAX_BYTES_PER_PEER: usize = 256 << 20;
/// Sessions one master holds at most (`ERR-6`).
pub const DEFAULT_MAX_SESSIONS: usize = 1_000_000;
/// Requests one connection may have outstanding at once (`CONN-3`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4096;
/// Ended sessions remembered so that their KeepAlives get `SessionExpired`
/// rather than `UnknownSession` (`ERR-2`).
pub const ENDED_SESSIONS_REMEMBERED: usize = 65_536;
/// Time a new connection has to send its Hello (`HS-4`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time one frame may take to write before the peer is taken as not reading
/// and the connection is closed (`CONN-5`).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one master serves at once (`CONN-8`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// Connections one peer address may hold at once (`CONN-8`).
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 4_096;
/// Bytes of replies one connection may have waiting for its peer to read
/// them before the master stops serving it (`CONN-9`).
pub const DEFAULT_REPLY_BUDGET: usize = 8 << 20;
/// Bytes of unread replies all connections together may hold before those
/// holding more than a frame are served as if over their own budget
/// (`CONN-9`).
pub const DEFAULT_ALL_REPLY_BUDGET: usize = 256 << 20;
/// Time a frame that has started to arrive has to arrive whole (`CONN-10`).
pub const FRAME_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a connection with no request in flight may stay silent (`CONN-11`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest session name, in bytes (`SES-1`).
pub const MAX_NAME_LEN: usize = 256;
/// How often an idle master shows its figures again once someone reads
/// its metrics (`OPS-1`): the most a gauge that walks the state lags.
pub const FIGURES_EVERY: Duration = Duration::from_secs(1);
/// How long the status page waits for each answer of the master
/// (`OPS-5`).
pub const STATUS_PAGE_ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// Holders `ListLocks` shows of each lock, in session order; it says how
/// many hold it in all (`LOCK-16`).
pub const LISTED_HOLDERS: usize = 64;
/// Waiters `ListLocks` shows of each lock, first in line first; it says
/// how many wait in all (`LOCK-16`).
pub const LISTED_WAITERS: usize = 8;
/// Sessions per `ListSessions` page, at most (`SES-10`).
pub const MAX_LIST_PAGE: u32 = 1000;
/// Shortest KeepAlive margin a server accepts (`KA-2`).
pub const MIN_KEEPALIVE_MARGIN: Duration = Duration::from_millis(100);
/// How long a Watch waits when it names no timeout (`NS-8`).
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest a Watch may wait (`NS-8`).
pub const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(600);
/// Log records between snapshots taken while serving (`STORE-2`).
pub const DEFAULT_COMPACT_EVERY: u64 = 1_000_000;
/// Log bytes below which the log is never compacted for its size
/// (`STORE-2`).
pub const DEFAULT_COMPACT_MIN_LOG_BYTES: u64 = 16 << 20;
/// Disk set aside for a full disk (`STORE-5`): room for about a million
/// small log records.
pub const DEFAULT_DISK_RESERVE: u64 = 64 << 20;
/// Smallest maximum frame a server accepts: every reply but a page of
/// sessions fits in it (`WIRE-2`).
pub const MIN_FRAME: usize = 1024;
/// Keys one session may cache, by default (`CACHE-8`).
pub const CACHED_KEYS_PER_SESSION: usize = 4096;
/// Keys one `GetCached` may name as dropped (`CACHE-2`), whatever the cap.
pub const DROPPED_PER_READ: usize = 4096;
/// Subscriptions the master looks at in one slice of fan-out, between its
/// timers and requests (`EV-9`): a millisecond or a few of work.
pub const FANOUT_SLICE: usize = 1024;
/// Deliveries the master may owe before it refuses writes (`EV-9`).
pub const FANOUT_BACKLOG: usize = 1 << 18;
/// Deliveries the master may owe one address's subscriptions before it
/// cuts their fan-out off with `EventsLost` (`EV-9`): more than one change
/// can cost at an address's default quota of subscriptions, and half the
/// backlog, so that no one address's subscribers make writers wait.
pub const FANOUT_PER_PAYER: usize = 1 << 17;
const _: () = assert!(FANOUT_PER_PAYER > DEFAULT_MAX_SUBSCRIPTIONS_PER_PEER);
/// Connections being told they are refused at once, at most (`CONN-8`):
/// each holds a descriptor and about 2 KiB until its peer closes or for
/// `LINGER` at most, so a burst of a thousand costs 2 MiB; past it a
/// connection is dropped without a word.
pub(crate) const MAX_REFUSING: usize = 1024;
/// What a refused connection's peer may still send, read and discarded
/// so that it reads the `Close` rather than a reset: its Hello, and more.
pub(crate) const REFUSAL_DRAIN_BYTES: usize = 64 << 10;
/// The buffer that discards it.
pub(crate) const REFUSAL_DRAIN_BUFFER: usize = 512;
/// How many characters of a name or address a peer gave a refusal or a
/// log line repeats (`CELL-4`): never the whole of unbounded input.
pub(crate) const SHOWN_CHARS: usize = 64;
/// Connections the kernel queues for the accept loop (`CONN-8`; the
/// kernel caps it at `net.core.somaxconn`). Every client comes back at
/// once after a restart or a fail-over: a connection past a full queue
/// loses its SYN and waits a second for the retransmission.
pub const LISTEN_BACKLOG: u32 = 4096;
/// How long the accept loop first waits after accepting failed (out of
/// file descriptors, typically), doubling up to [`ACCEPT_BACKOFF_MAX`].
pub(crate) const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest the accept loop waits before trying again.
pub(crate) const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A log record's body may not claim more than this; bigger means damage.
pub(crate) const MAX_RECORD: usize = 64 << 20;
/// Decoding allocates at most this much for one length field, whatever
/// damaged or hostile bytes announce.
pub(crate) const MAX_DECODED: usize = 1 << 34;

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

/// How the master chooses session ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSource {
    /// Random version-4 UUIDs.
    Random,
    /// A deterministic sequence from a seed, for simulations that must
    /// replay byte for byte.
    Seeded(u64),
}

// The namespace.

/// Deleted keys remembered, so a watcher that saw a node learns it is gone
/// (`NS-8`).
pub const DELETIONS_REMEMBERED: usize = 65_536;

// Keys and contents.

/// Longest key, in bytes (`NS-1`).
pub const MAX_KEY_LEN: usize = 512;
/// Most segments in a key (`NS-1`).
pub const MAX_KEY_DEPTH: usize = 32;
/// Largest contents of one node, in bytes (`NS-3`).
pub const MAX_CONTENTS: usize = 256 * 1024;

// Events (`EV-3`, `EV-4`, `EV-5`).

/// Events one session may have waiting; past it they are dropped for one
/// `EventsLost` (`EV-4`).
pub const EVENT_QUEUE: usize = 1024;
/// Events one KeepAlive reply carries at most (`EV-3`).
pub const EVENTS_PER_REPLY: usize = 256;
/// Subscriptions one session may have (`EV-5`).
pub const SUBSCRIPTIONS_PER_SESSION: usize = 1024;

// Health checks (`CHK-1`..).

/// Checks one master holds at most.
pub const MAX_CHECKS: usize = 10_000;
/// Checks one session may be bound to.
pub const MAX_CHECKS_PER_SESSION: usize = 32;
/// Longest check name, in bytes.
pub const MAX_CHECK_NAME: usize = 128;
/// Longest check note, in bytes.
pub const MAX_CHECK_NOTE: usize = 1024;

// Retry hints.

/// The retry hint of `Congested`: a moment for the peer to read.
pub(crate) const CONGESTED_RETRY_MS: u64 = 20;
/// The retry hint of `FailoverInProgress`: about one KeepAlive round trip.
pub(crate) const FAILOVER_RETRY_MS: u64 = 100;

// The master task.

/// KeepAlives the master takes in a row before anything else gets a turn.
pub(crate) const KEEPALIVE_RUN: u32 = 64;
/// A connection's first KeepAlives the master takes in a row while others
/// wait (`KA-11`): a flood of new connections still leaves the rest a turn.
pub(crate) const RETURNING_RUN: u32 = 8;

// KeepAliveAll answers (`KA-10`).

/// The longest refusal message a KeepAliveAll carries for one session.
pub(crate) const ANSWER_MESSAGE: usize = 64;

// Shutting down.

/// How long a shutting-down server waits for its connections to close.
pub(crate) const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

// The writer (`STORE-1`..).

/// How long the writer waits, idle, before it makes the last batch's end
/// marker durable on its own (`STORE-3`).
pub(crate) const SEAL_AFTER: Duration = Duration::from_millis(50);
/// The log may grow to this multiple of the snapshot before the master
/// snapshots again (`STORE-2`).
pub(crate) const LOG_TO_SNAPSHOT: u64 = 4;
/// How often a writer on a full disk tries to set its reserve aside again
/// (`STORE-5`).
pub(crate) const RETRY_SPACE: Duration = Duration::from_secs(1);
/// Outbox slots kept once it empties after a burst.
pub(crate) const OUTBOX_KEPT: usize = 1024;
/// How long a replicated master lets records nobody waits for sit before
/// it replicates them anyway, so followers stay close behind.
pub(crate) const REPLICATE_IDLE: Duration = Duration::from_millis(20);

// Connections.

/// How long a closing connection keeps reading (and discarding) what the
/// peer still sends, so the peer reads our `Close` frame instead of a reset.
pub(crate) const LINGER: Duration = Duration::from_secs(1);
/// How long a closing connection lingers once the master shuts down: its
/// peer has the Close, and nothing else waits for it (`CONN-6`).
pub(crate) const SHUTDOWN_LINGER: Duration = Duration::from_millis(100);
/// At most this much is discarded while lingering.
pub(crate) const LINGER_BYTES: usize = 64 << 20;
/// Requests the master holds, by connection, to take them in turns
/// (`CONN-13`); past it, it takes no more from its queue.
pub(crate) const REQUESTS_IN_TURNS: usize = 1024;
/// Bytes of requests a connection holds while the master's queue has no
/// room for them, reading on so that its KeepAlives are not stuck behind
/// them (`CONN-13`); past it (by one request at most), reading pauses.
/// Each counts its frame and its place in the list.
pub(crate) const CONNECTION_HELD_BYTES: usize = 16 << 10;
/// Replies waiting for the writer; when full, reading pauses.
pub(crate) const CONNECTION_WRITE_QUEUE: usize = 256;
/// Initial read and write buffer of a connection, in bytes.
pub(crate) const CONNECTION_BUFFER: usize = 1024;
/// A connection's read or write buffer that grew past this for a large
/// frame goes back to `CONNECTION_BUFFER` once it is empty: a master
/// holds thousands of connections, each renewing its sessions in one
/// `KeepAliveAll` of a few kilobytes every few seconds and idle in
/// between (a buffer kept at 4 KiB cost 50 bytes a session at a hundred
/// sessions a connection). A pipelining client keeps its buffer: it is
/// not empty between frames.
pub(crate) const CONNECTION_BUFFER_KEPT: usize = CONNECTION_BUFFER;
/// Replies written before a flush at most; the codec also flushes on its
/// own whenever its buffer fills.
pub(crate) const CONNECTION_WRITE_BATCH: usize = 64;

// Memory.

/// How long after a connection ends the master gives memory back: closes
/// come in bursts, and one trim after the burst does for all of them.
pub(crate) const TRIM_DELAY: Duration = Duration::from_secs(2);

// The cell's peers.

/// The largest peer frame: a batch of entries or a snapshot chunk.
pub const MAX_PEER_FRAME: usize = 64 << 20;

// Membership changes (`CELL-9`).

/// How long a new member may take to catch up as a learner.
#[cfg(not(test))]
pub(crate) const CATCH_UP: Duration = Duration::from_secs(60);
/// Short, for tests of a member that never catches up.
#[cfg(test)]
pub(crate) const CATCH_UP: Duration = Duration::from_secs(5);

/// How long the joint and the final configuration may take to commit.
pub(crate) const MEMBERSHIP_COMMIT: Duration = Duration::from_secs(10);
/// The longest request a member reads.
pub(crate) const MAX_MEMBERSHIP_REQUEST: usize = 64 << 10;

// The cell's Raft log.

/// A frame's body may not claim more than this; bigger means damage.
pub(crate) const MAX_RAFT_LOG_FRAME: usize = 256 << 20;
/// The file is rewritten once it is this many times the live log's size
/// (and past [`RAFT_LOG_REWRITE_MIN`]).
pub(crate) const RAFT_LOG_REWRITE_RATIO: u64 = 4;
pub(crate) const RAFT_LOG_REWRITE_MIN: u64 = 4 << 20;

// The cell's master.

/// A proposal carries at most about this many bytes of commands, so that
/// a batch of entries fits a peer frame.
pub(crate) const PROPOSAL_BYTES: usize = 1 << 20;

// Raft's timers in a cell (`CELL-5`). A follower refuses rivals for the
// longest election timeout after it heard the leader, and stands once it
// heard nothing for that and a timeout drawn between the two more: a
// master killed is followed 400-600 ms after its last heartbeat. Clients
// notice a silent master before their lease runs out (`CS-9`), so a new
// master's lease, counted from its promotion (`FO-2`), leaves them time to
// find it. Members whose timers differ so that a lease could outlast a
// refusal window refuse each other (`CELL-4`).

/// How often a cell's leader sends its followers a heartbeat.
pub const CELL_HEARTBEAT: Duration = Duration::from_millis(50);
/// The shortest election timeout a cell's member draws.
pub const CELL_ELECTION_MIN: Duration = Duration::from_millis(100);
/// The longest election timeout: also how long a follower refuses rivals
/// after it heard the leader, so the master lease's length (`CELL-6`).
pub const CELL_ELECTION_MAX: Duration = Duration::from_millis(300);
/// The longest election timeout of the version before the hello carried
/// the timers (`CELL-4`): a member restarted on a data directory that
/// version wrote may have promised to refuse rivals for this long, so it
/// waits at least this long before its Raft starts (`CELL-5`).
pub const CELL_EARLIER_ELECTION_MAX: Duration = Duration::from_millis(500);
/// A master whose proposal the log has not taken in this long, or twice
/// the longest election timeout if that is longer, gives up on the quorum
/// and stops (`CELL-7`): the lease already keeps the cell safe, so this
/// only bounds the wait, and it is kept long enough that a loaded disk
/// does not stop a master the quorum still follows.
pub const CELL_PROPOSAL_PATIENCE: Duration = Duration::from_secs(1);

// The master lease (`CELL-6`).

/// How far apart members' clock rates may be: the SPEC's clock-rate
/// allowance, 1%, as for clients.
pub const CELL_CLOCK_DRIFT: f64 = 0.01;

// A cell's member.

/// Entries applied between a member's snapshots, by default.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 1024;

/// Configuration of a master.
#[derive(Debug, Clone)]
pub struct Config {
    /// The master's epoch, announced in Welcome and checked on KeepAlive.
    pub epoch: u64,
    pub max_frame: usize,
    pub default_lease: Duration,
    pub min_lease: Duration,
    pub max_lease: Duration,
    pub default_lock_delay: Duration,
    pub max_lock_delay: Duration,
    pub keepalive_margin: Duration,
    pub max_sessions: usize,
    /// Subscriptions over all sessions (`EV-5`).
    pub max_subscriptions: usize,
    /// Event deliveries the master may owe before it refuses writes
    /// (`EV-9`).
    pub fanout_backlog: usize,
    /// Event deliveries the master may owe the subscriptions one peer
    /// address made before it replaces them with `EventsLost` (`EV-9`).
    pub fanout_per_payer: usize,
    /// Bytes of events that may wait for the sessions one peer address
    /// created, and for all sessions (`EV-4`).
    pub event_bytes_per_peer: usize,
    pub all_event_bytes: usize,
    /// Keys one session may cache, and bytes the master's records of all
    /// cachers may take (`CACHE-8`).
    pub cached_keys_per_session: usize,
    pub all_cache_bytes: usize,
    /// Health checks one peer address may create (`QUOTA-1`).
    pub max_checks_per_peer: usize,
    /// Live sessions one peer address may have created (`QUOTA-2`).
    pub max_sessions_per_peer: usize,
    /// Subscriptions one peer address may have made (`QUOTA-3`).
    pub max_subscriptions_per_peer: usize,
    /// Acquires one peer address may have waiting (`QUOTA-4`).
    pub max_waiters_per_peer: usize,
    /// Bytes of nodes one peer address may have written (`QUOTA-5`).
    pub max_bytes_per_peer: usize,
    pub max_in_flight: usize,
    pub handshake_timeout: Duration,
    pub write_timeout: Duration,
    /// Connections served at once, in all and from one peer address
    /// (`CONN-8`).
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    /// Bytes of unread replies one connection may hold (`CONN-9`).
    pub reply_budget: usize,
    /// Bytes of unread replies all connections may hold together
    /// (`CONN-9`).
    pub all_reply_budget: usize,
    /// Time a started frame has to arrive whole (`CONN-10`).
    pub frame_read_timeout: Duration,
    /// Time a connection with nothing in flight may stay silent (`CONN-11`).
    pub idle_timeout: Duration,
    pub ids: IdSource,
    /// Log records between snapshots taken while serving (`STORE-2`):
    /// recovery replays at most about this many.
    pub compact_every: u64,
    /// The log is also compacted once it outgrows both this and four times
    /// the snapshot (`STORE-2`).
    pub compact_min_log_bytes: u64,
    /// Disk set aside in the data directory for when the disk fills
    /// (`STORE-5`); 0 sets none aside.
    pub disk_reserve: u64,
    /// The operator's token (`AUTH-3`): with one, only a session's owner or
    /// a request carrying this token may destroy the session or delete a
    /// node another session has locked; without one, anyone may.
    pub operator_token: Option<String>,
    /// TLS on the client port (`TLS-1`); `None` speaks plaintext.
    pub tls: Option<crate::tls::ServerTls>,
    /// The audit log, opened (`AUDIT-1`); `None` keeps none.
    pub audit: Option<crate::audit::AuditLog>,
    /// What the master counts for operators (`OPS-1`): every clone of a
    /// config counts into the same figures.
    pub metrics: crate::metrics::Metrics,
    /// Host names the HTTP port answers its data to, besides IP addresses
    /// and `localhost` (`OPS-5`): a page another site's script reaches
    /// through a name it made resolve to this machine is refused.
    pub http_hosts: Vec<String>,
    /// How fast this master's clock runs against true time: 1.0 on a real
    /// machine, whose clock's error clients' drift allowance covers
    /// (`LEASE-4`). Simulations give each host a rate of its own. Between
    /// 0.5 and 2.0.
    pub clock_rate: f64,
    /// Told of every lease the master grants, every session it ends and
    /// every holding of a lock it begins or ends, in master time; `None`
    /// tells no one. Simulations check with it that clients' beliefs stay
    /// inside the master's leases, and trace why each lock changed hands.
    pub observer: Option<MasterObserver>,
    /// Unsafe, for simulations that show the cache check fires: grant
    /// cacheable reads but never hold a change for their cachers
    /// (`CACHE-3`), so caches serve values writes replaced.
    pub unsafe_unheld_cache_writes: bool,
    /// Unsafe, for simulations that show the exclusion check fires: carry
    /// out every release whichever acquire it names (`LOCK-4`), so a
    /// release delivered late undoes the answer to an acquire sent after
    /// it.
    pub unsafe_unfenced_releases: bool,
    /// Unsafe, for simulations that show the access check fires: tell
    /// every subscriber of every change, whatever the rules let its
    /// principal read (`ACL-4`).
    pub unsafe_unfiltered_events: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            epoch: 1,
            max_frame: DEFAULT_MAX_FRAME,
            default_lease: DEFAULT_LEASE,
            min_lease: DEFAULT_MIN_LEASE,
            max_lease: DEFAULT_MAX_LEASE,
            default_lock_delay: DEFAULT_LOCK_DELAY,
            max_lock_delay: MAX_LOCK_DELAY,
            keepalive_margin: DEFAULT_KEEPALIVE_MARGIN,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            fanout_backlog: FANOUT_BACKLOG,
            fanout_per_payer: FANOUT_PER_PAYER,
            event_bytes_per_peer: DEFAULT_EVENT_BYTES_PER_PEER,
            all_event_bytes: DEFAULT_ALL_EVENT_BYTES,
            cached_keys_per_session: CACHED_KEYS_PER_SESSION,
            all_cache_bytes: DEFAULT_ALL_CACHE_BYTES,
            max_checks_per_peer: DEFAULT_MAX_CHECKS_PER_PEER,
            max_sessions_per_peer: DEFAULT_MAX_SESSIONS_PER_PEER,
            max_subscriptions_per_peer: DEFAULT_MAX_SUBSCRIPTIONS_PER_PEER,
            max_waiters_per_peer: DEFAULT_MAX_WAITERS_PER_PEER,
            max_bytes_per_peer: DEFAULT_MAX_BYTES_PER_PEER,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            reply_budget: DEFAULT_REPLY_BUDGET,
            all_reply_budget: DEFAULT_ALL_REPLY_BUDGET,
            frame_read_timeout: FRAME_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            ids: IdSource::Random,
            compact_every: DEFAULT_COMPACT_EVERY,
            compact_min_log_bytes: DEFAULT_COMPACT_MIN_LOG_BYTES,
            disk_reserve: DEFAULT_DISK_RESERVE,
            operator_token: None,
            tls: None,
            audit: None,
            metrics: crate::metrics::Metrics::new(),
            http_hosts: Vec::new(),
            clock_rate: 1.0,
            observer: None,
            unsafe_unheld_cache_writes: false,
            unsafe_unfenced_releases: false,
            unsafe_unfiltered_events: false,
        }
    }
}

impl Config {
    /// Checks that the settings make sense together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |what: String| Err(ConfigError(what));
        if !(self.min_lease <= self.default_lease && self.default_lease <= self.max_lease) {
            return fail(format!(
                "the default lease {:?} must lie between the minimum {:?} and the maximum {:?}",
                self.default_lease, self.min_lease, self.max_lease
            ));
        }
        if self.min_lease.is_zero() {
            return fail("the minimum lease must be more than zero".into());
        }
        if self.max_lease > Span::MAX || self.max_lock_delay > Span::MAX {
            return fail(format!(
                "the maximum lease and lock-delay must be at most {:?} (about 49 days)",
                Span::MAX
            ));
        }
        if self.default_lock_delay > self.max_lock_delay {
            return fail(format!(
                "the default lock-delay {:?} exceeds the maximum {:?}",
                self.default_lock_delay, self.max_lock_delay
            ));
        }
        if self.keepalive_margin < MIN_KEEPALIVE_MARGIN {
            return fail(format!(
                "the KeepAlive margin must be at least {MIN_KEEPALIVE_MARGIN:?}"
            ));
        }
        if !(MIN_FRAME..=MAX_FRAME_CAP).contains(&self.max_frame) {
            return fail(format!(
                "the maximum frame must lie between {MIN_FRAME} and {MAX_FRAME_CAP} bytes"
            ));
        }
        if !(0.5..=2.0).contains(&self.clock_rate) {
            return fail(format!(
                "the clock rate {} must lie between 0.5 and 2.0",
                self.clock_rate
            ));
        }
        if self.operator_token.as_ref().is_some_and(|t| t.len() < 16) {
            return fail("an operator token must be at least 16 bytes long".into());
        }
        if self.max_in_flight == 0 || self.max_sessions == 0 {
            return fail("the in-flight and session limits must be at least 1".into());
        }
        if self.max_connections == 0 || self.max_connections_per_peer == 0 {
            return fail("the connection limits must be at least 1".into());
        }
        let quotas = [
            self.max_checks_per_peer,
            self.max_sessions_per_peer,
            self.max_subscriptions_per_peer,
            self.max_waiters_per_peer,
            self.max_bytes_per_peer,
        ];
        if quotas.contains(&0) {
            return fail("every quota must be at least 1".into());
        }
        if self.reply_budget < self.max_frame {
            return fail(format!(
                "the reply budget of {} bytes must hold at least one frame of {} bytes",
                self.reply_budget, self.max_frame
            ));
        }
        if self.all_reply_budget < self.reply_budget {
            return fail("the reply budget of all connections must hold one connection's".into());
        }
        if self.frame_read_timeout.is_zero() || self.idle_timeout.is_zero() {
            return fail("the frame read and idle timeouts must be more than zero".into());
        }
        Ok(())
    }

    /// The limits announced to clients in Welcome.
    pub fn limits(&self) -> Limits {
        Limits {
            max_frame: self.max_frame as u32,
            min_lease_ms: self.min_lease.as_millis() as u64,
            max_lease_ms: self.max_lease.as_millis() as u64,
            max_lock_delay_ms: self.max_lock_delay.as_millis() as u64,
            keepalive_margin_ms: self.keepalive_margin.as_millis() as u64,
            max_in_flight: self.max_in_flight as u32,
        }
    }
}

/// An audit log file is rotated once it would grow past this (`AUDIT-4`).
pub const DEFAULT_AUDIT_MAX_BYTES: u64 = 64 << 20;
/// Rotated audit log files kept (`AUDIT-4`).
pub const DEFAULT_AUDIT_KEEP: u32 = 4;
/// Audit records the writer may fall behind by before the newest are
/// counted and dropped (`AUDIT-3`).
pub(crate) const AUDIT_QUEUE: usize = 65_536;

impl crate::audit::AuditConfig {
    /// The audit log at `path`, with the default size, rotation and queue.
    pub fn at(path: impl Into<std::path::PathBuf>) -> crate::audit::AuditConfig {
        crate::audit::AuditConfig {
            path: path.into(),
            max_bytes: DEFAULT_AUDIT_MAX_BYTES,
            keep: DEFAULT_AUDIT_KEEP,
            queue: AUDIT_QUEUE,
        }
    }
}

/// The most access rules a state holds (`ACL-1`).
pub const MAX_RULES: usize = 10_000;
/// The most live bearer tokens a state holds (`TOK-1`).
pub const MAX_TOKENS: usize = 10_000;
/// Failed authentications one peer address may make in
/// [`AUTH_FAILURE_WINDOW`] before the master refuses its next attempts
/// unheard until the window ends (`ID-6`).
pub(crate) const AUTH_FAILURES_ALLOWED: u32 = 5;
pub(crate) const AUTH_FAILURE_WINDOW: Duration = Duration::from_secs(10);
/// Addresses whose failed authentications the master remembers; beyond
/// this the oldest are forgotten.
pub(crate) const AUTH_FAILURES_REMEMBERED: usize = 4096;
/// The most keys one `List` looks at past those its principal may not
/// read, looking for ones it may (`ACL-4`).
pub(crate) const MAX_LIST_SCAN: usize = 100_000;

/// Connections the operator's HTTP port serves at once (`OPS-2`); more are
/// closed unanswered: scrapers and probes need few.
pub(crate) const HTTP_MAX_CONNECTIONS: usize = 64;
/// How long an HTTP client may take to send its request's headers.
pub(crate) const HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes an HTTP connection may buffer: a request to this port is a line
/// and a few headers.
pub(crate) const HTTP_MAX_BUFFER: usize = 16 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let bad = [
            Config {
                default_lease: Duration::from_secs(90),
                ..Config::default()
            },
            Config {
                keepalive_margin: Duration::from_millis(10),
                ..Config::default()
            },
            Config {
                max_frame: 60,
                ..Config::default()
            },
            Config {
                max_lease: Duration::from_secs(50 * 86_400),
                ..Config::default()
            },
            Config {
                max_lock_delay: Duration::from_secs(50 * 86_400),
                ..Config::default()
            },
            Config {
                max_in_flight: 0,
                ..Config::default()
            },
            Config {
                clock_rate: 0.0,
                ..Config::default()
            },
            Config {
                clock_rate: f64::NAN,
                ..Config::default()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
    }
}
