//! Every default and limit of the library, and the settings a program
//! passes in: [`ClientConfig`] for a [`Client`](crate::Client),
//! [`SessionOptions`] for a session.

use std::time::Duration;

use leasehold_protocol::{Behavior, DEFAULT_MAX_FRAME};

/// Default time a session may spend in jeopardy (its local lease ran out
/// with no KeepAlive reply) while the client keeps retrying, before the
/// client takes it as `Expired`: 45 s (`CS-3`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(45);

// The local lease (`LEASE-4`).

/// Default allowance for the master's clock running faster than the
/// client's: 1% (`LEASE-4`).
pub const DEFAULT_CLOCK_DRIFT: f64 = 0.01;
/// Longest grant a client believes, whatever a server says: a day, Consul's
/// longest session TTL. Keeps a hostile reply from overflowing the clock.
pub const MAX_GRANT: Duration = Duration::from_secs(86_400);

// The session machine.

/// KeepAlives in flight at most; timeouts keep them draining.
pub(crate) const MAX_IN_FLIGHT: usize = 8;

// The keeper task.

/// How long a KeepAlive that asks for an immediate answer waits while its
/// connection delivers nothing at all.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The least time a held KeepAlive's answer may be late before it counts
/// as overdue (`CS-9`), whatever half the margin is: a short lease's
/// margin is tens of milliseconds, about what a loaded machine may delay
/// a task, and an answer taken for overdue costs a probe and may cost a
/// connection.
pub(crate) const OVERDUE_AFTER_AT_LEAST: Duration = Duration::from_millis(250);
/// Time allowed for the DestroySession sent on close.
pub(crate) const DESTROY_TIMEOUT: Duration = Duration::from_secs(2);
/// KeepAlives a close sends at most to acknowledge what the master may not
/// hold yet: one on a connection its master closed, one with the session's
/// epoch answered with `WrongEpoch`, one with the new master's bringing its
/// fail-over event, and one acknowledging that event.
pub(crate) const CLOSE_ACKS: u32 = 4;

// The session's cache (`CACHE-8`).

/// Keys a session caches at most, by default (`CACHE-8`).
pub const DEFAULT_CACHE_KEYS: usize = 4096;
/// Bytes of keys and contents a session caches at most, by default.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;
/// Dropped keys one read tells the master of at most; the rest go with
/// the next.
pub(crate) const DROPPED_PER_READ: usize = 1024;
/// What an entry costs besides its key and contents.
pub(crate) const ENTRY_BYTES: usize = 128;

// Subscriptions (`EV-7`).

/// Events a subscription buffers for the application; past that it reports
/// `EventsLost` (`EV-7`).
pub(crate) const SUBSCRIPTION_BUFFER: usize = 1024;
/// Events kept for subscriptions whose `Subscribed` reply has not arrived.
pub(crate) const ORPHANS: usize = 1024;

// A connection.

/// Time allowed for connecting plus the handshake, by default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a request waits for its reply, by default (KeepAlives excepted).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests written before a flush at most; the codec also flushes on its
/// own whenever its buffer fills.
pub(crate) const WRITE_BATCH: usize = 64;
/// Requests a connection queues for its writer.
pub(crate) const QUEUE: usize = 256;
/// How often a connection with no handles left looks for abandoned requests.
pub(crate) const PRUNE_EVERY: Duration = Duration::from_secs(1);
/// How long a closing connection waits for its last write and for the server
/// to close its side.
pub(crate) const CLOSE_WAIT: Duration = Duration::from_secs(1);

// The client's clock (`ClientConfig::clock_rate`).

/// The slowest and fastest clock rates taken; a rate outside them is taken
/// as the nearer bound.
pub(crate) const MIN_RATE: f64 = 0.5;
pub(crate) const MAX_RATE: f64 = 2.0;

// Locks.

/// The longest a blocking acquire may wait at the master.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(600);

// Releases (`LOCK-4`).

/// Releases sent for one give-back refused as stale at most (one more for
/// each later acquire it turns out the session was answered for since);
/// and, while a session closes, releases that failed for want of a master
/// (otherwise those ride through a fail-over, `RELEASE_RIDES`).
pub(crate) const RELEASE_TRIES: u32 = 3;
/// Releases of one give-back that failed for want of a master, in all,
/// past which a failure is the answer once a request timeout has passed
/// since the release began (`LOCK-15`): a master away for less is ridden
/// through however often the release fails, and a master that keeps
/// failing over does not keep a release going for ever.
pub(crate) const RELEASE_RIDES: u32 = 8;

// Elections.

/// How long one blocking read of the leader key waits at the master.
pub(crate) const OBSERVE_WAIT: Duration = Duration::from_secs(300);

// Semaphores (`SEM-4`).

/// Attempts to delete a contender key before leaving it to the session's
/// end (about 10 s with the backoff).
pub(crate) const LEAVE_TRIES: u32 = 12;

/// Settings of a [`Client`](crate::Client).
#[derive(Clone)]
pub struct ClientConfig {
    /// Largest frame body accepted from the server.
    pub max_frame: usize,
    /// Time allowed for connecting plus the handshake.
    pub connect_timeout: Duration,
    /// Time allowed for a reply to any request but a KeepAlive (whose reply
    /// the master holds on purpose).
    pub request_timeout: Duration,
    /// The master's operator token (`AUTH-3`): with it, this client may
    /// destroy any session and delete nodes other sessions have locked.
    pub operator_token: Option<String>,
    /// How fast this client's clock runs against true time: 1.0 on a real
    /// machine, whose clock's error the session's drift allowance covers
    /// (`SessionOptions::clock_drift`, SPEC `LEASE-4`). Simulations give
    /// each host a rate of its own. Taken within 0.5..=2.0 (the nearest
    /// bound outside it), and as 1.0 if it is not a number.
    pub clock_rate: f64,
    /// TLS to the master (`TLS-2`); `None` speaks plaintext.
    pub tls: Option<crate::tls::TlsOptions>,
    /// A bearer token (`leasehold token create`), or the operator token,
    /// that every connection authenticates with before anything else
    /// (`ID-2`): the connection then acts as the token's principal. A
    /// token the master does not accept fails the connect with
    /// `PermissionDenied`.
    pub token: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_frame: DEFAULT_MAX_FRAME,
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            operator_token: None,
            clock_rate: 1.0,
            tls: None,
            token: None,
        }
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Tokens are secrets: a log line shows only their presence.
        f.debug_struct("ClientConfig")
            .field("max_frame", &self.max_frame)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("clock_rate", &self.clock_rate)
            .field("tls", &self.tls)
            .field(
                "operator_token",
                &self.operator_token.as_ref().map(|_| ".."),
            )
            .field("token", &self.token.as_ref().map(|_| ".."))
            .finish()
    }
}

/// How to create a session.
///
/// ```
/// use std::time::Duration;
/// use leasehold::SessionOptions;
///
/// let options = SessionOptions::new("indexer")
///     .lease(Duration::from_secs(10))
///     .lock_delay(Duration::ZERO)
///     .grace(Duration::from_secs(30));
/// assert_eq!(options.lock_delay, Some(Duration::ZERO));
/// ```
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// A label for people.
    pub name: String,
    /// Requested lease; `None` takes the master's default (12 s).
    pub lease: Option<Duration>,
    /// Requested lock-delay; `None` takes the default (15 s), zero means none.
    pub lock_delay: Option<Duration>,
    /// What the master does with the session's locks when it is invalidated.
    pub behavior: Behavior,
    /// How long jeopardy lasts before the session is taken as expired.
    pub grace: Duration,
    /// Allowance for the master's clock running faster than this one's, as a
    /// fraction (0.01 = 1%).
    pub clock_drift: f64,
    /// Health checks the session lives by: when one goes critical the master
    /// ends the session (`CHK-3`).
    pub checks: Vec<String>,
    /// Keys [`Session::get`](crate::Session::get) may keep in the session's cache; 0 turns the
    /// cache off (`CACHE-1`, `CACHE-8`).
    pub cache_keys: usize,
    /// Bytes of keys and contents the cache may hold.
    pub cache_bytes: usize,
}

impl SessionOptions {
    /// Options with every default and the given name.
    pub fn new(name: impl Into<String>) -> Self {
        SessionOptions {
            name: name.into(),
            lease: None,
            lock_delay: None,
            behavior: Behavior::Release,
            grace: DEFAULT_GRACE,
            clock_drift: DEFAULT_CLOCK_DRIFT,
            checks: Vec::new(),
            cache_keys: DEFAULT_CACHE_KEYS,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }

    /// Turns the session's cache on (the default) or off: off, every
    /// [`Session::get`](crate::Session::get) asks the master (`CACHE-1`).
    pub fn cache(mut self, on: bool) -> Self {
        self.cache_keys = if on { DEFAULT_CACHE_KEYS } else { 0 };
        self
    }

    /// Caps the session's cache at `keys` entries and `bytes` bytes; the
    /// least recently used entry goes first (`CACHE-8`).
    pub fn cache_capacity(mut self, keys: usize, bytes: usize) -> Self {
        self.cache_keys = keys;
        self.cache_bytes = bytes;
        self
    }

    /// Binds the session to a health check, which must exist and not be
    /// critical (`CHK-2`); may be called for several checks.
    pub fn check(mut self, name: impl Into<String>) -> Self {
        self.checks.push(name.into());
        self
    }

    /// Sets the requested lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets the lock-delay; zero disables it.
    pub fn lock_delay(mut self, lock_delay: Duration) -> Self {
        self.lock_delay = Some(lock_delay);
        self
    }

    /// Sets the behaviour on invalidation.
    pub fn behavior(mut self, behavior: Behavior) -> Self {
        self.behavior = behavior;
        self
    }

    /// Sets the grace period.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets the clock-rate allowance.
    pub fn clock_drift(mut self, drift: f64) -> Self {
        self.clock_drift = drift;
        self
    }
}
