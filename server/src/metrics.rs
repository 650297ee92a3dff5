//! What a master counts for its operators (SPEC "Operating", `OPS-1`..):
//! counters that connections, the master task and the writer bump as
//! things happen, and gauges the master task sets from its engine after
//! each turn. A scrape of `/metrics` (`http.rs`) reads them all as
//! Prometheus' OpenMetrics text.
//!
//! Counting decides nothing: every figure is an atomic a task bumps
//! beside what it does, so the engine's decisions stay a function of
//! its inputs and the time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_protocol::ErrorCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::tally::{
    how_label, let_go_label, Answered, Limit, Tally, END_CAUSES, HOW_GRANTED, LET_GO,
};

/// The content type a scrape is answered with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

/// The figures of the master's engine after a turn, as gauges show them,
/// and the totals it keeps that counters show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EngineFigures {
    pub(crate) sessions: u64,
    /// By `SESSION_STATES`.
    pub(crate) sessions_by_state: [u64; 4],
    pub(crate) lock_holders: u64,
    pub(crate) locks_held: u64,
    pub(crate) locks_in_delay: u64,
    pub(crate) lock_waiters: u64,
    pub(crate) keepalives_held: u64,
    pub(crate) subscriptions: u64,
    pub(crate) events_queued_bytes: u64,
    pub(crate) writes_held_now: u64,
    pub(crate) epoch: u64,
    pub(crate) index: u64,
    pub(crate) stored_bytes: Option<u64>,
}

/// What a cell's member shows of itself and its cell (`OPS-1`, `CELL-8`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CellFigures {
    /// Index into `CELL_ROLES`.
    pub(crate) role: usize,
    pub(crate) master: bool,
    pub(crate) term: u64,
    pub(crate) log_index: u64,
    pub(crate) commit_index: u64,
    pub(crate) applied_index: u64,
    /// On the leader: how many entries each other member is behind.
    pub(crate) lag: Vec<(u64, u64)>,
    pub(crate) master_lease_left: Duration,
    pub(crate) leader: Option<u64>,
}

/// A member's roles, as Raft names them.
pub(crate) const CELL_ROLES: [&str; 5] = ["leader", "follower", "candidate", "learner", "shutdown"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Role {
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabel {
    member: u64,
}

/// A cell member's gauges and counters.
#[derive(Debug)]
struct CellGauges {
    role: [Gauge; CELL_ROLES.len()],
    master: Gauge,
    term: Gauge,
    log_index: Gauge,
    commit_index: Gauge,
    applied_index: Gauge,
    lag: Family<MemberLabel, Gauge>,
    master_lease_seconds: Gauge<f64, AtomicU64>,
    leader_changes: Counter,
    elections: Counter,
    /// What the last figures said, to count changes.
    last: std::sync::Mutex<(Option<u64>, usize)>,
}

impl CellGauges {
    fn register(r: &mut Registry) -> CellGauges {
        let role = {
            let family = Family::<Role, Gauge>::default();
            r.register(
                "cell_role",
                "1 for this member's Raft role now: leader, follower, candidate, learner or shutdown",
                family.clone(),
            );
            CELL_ROLES.map(|role| family.get_or_create(&Role { role }).clone())
        };
        let lag = Family::<MemberLabel, Gauge>::default();
        r.register(
            "cell_follower_lag_entries",
            "On the leader: how many log entries each other member is behind its log",
            lag.clone(),
        );
        let master_lease_seconds = Gauge::<f64, AtomicU64>::default();
        r.register_with_unit(
            "cell_master_lease_left",
            "Time left of the master lease this member holds; 0 when it holds none (CELL-6)",
            Unit::Seconds,
            master_lease_seconds.clone(),
        );
        CellGauges {
            role,
            master: gauge(
                r,
                "cell_master",
                "1 while this member serves clients as the cell's master",
            ),
            term: gauge(r, "cell_term", "The Raft term this member is in"),
            log_index: gauge(r, "cell_log_index", "The last entry of this member's log"),
            commit_index: gauge(
                r,
                "cell_commit_index",
                "On the leader, the last entry a quorum holds; on the others, the last they applied, \
                 which a quorum holds",
            ),
            applied_index: gauge(
                r,
                "cell_applied_index",
                "The last entry this member applied to its replica",
            ),
            lag,
            master_lease_seconds,
            leader_changes: counter(
                r,
                "cell_leader_changes_seen",
                "Times this member saw the cell's leader change, to another member or to none",
            ),
            elections: counter(
                r,
                "cell_elections",
                "Times this member stood for election (became a candidate)",
            ),
            last: std::sync::Mutex::new((None, 1)),
        }
    }
}

/// A live session as the master sees it: its KeepAlive held (its client
/// is in touch), waiting for its next KeepAlive (between two, or its
/// client out of touch: in jeopardy, or gone), recovered by this master
/// and yet to acknowledge the fail-over (`FO-5`), or with its lease over
/// and its end waiting for caches (`CACHE-5`).
const SESSION_STATES: [&str; 4] = ["keepalive_held", "waiting", "recovering", "ending"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct State {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct When {
    when: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Cause {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct How {
    how: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Why {
    why: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: &'static str,
}

/// A master's metrics: cheap to clone, every clone counting into the
/// same figures.
#[derive(Clone, Debug)]
pub struct Metrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    requests: Family<Request, Counter>,
    request_seconds: Family<Kind, Histogram>,
    connections: Gauge,
    connections_accepted: Counter,
    refusals: Family<LimitLabel, Counter>,
    gauges: Gauges,
    totals: Totals,
    fsync_seconds: Histogram,
    commit_batch_records: Histogram,
    snapshot_age_seconds: Gauge<f64, AtomicU64>,
    /// When this master last wrote a snapshot, in milliseconds since the
    /// Unix epoch; 0 before it wrote one.
    snapshot_written_ms: AtomicU64,
    /// Someone read the figures: from then on the master shows them each
    /// second even when idle.
    read: AtomicBool,
    /// A cell member's own figures; `None` on a single master.
    cell: Option<CellGauges>,
}

/// What the engine's figures set after each turn.
#[derive(Debug)]
struct Gauges {
    sessions: Gauge,
    sessions_by_state: [Gauge; SESSION_STATES.len()],
    lock_holders: Gauge,
    locks_held: Gauge,
    locks_in_delay: Gauge,
    lock_waiters: Gauge,
    keepalives_held: Gauge,
    subscriptions: Gauge,
    events_queued_bytes: Gauge,
    writes_held: Gauge,
    epoch: Gauge,
    index: Gauge,
    store_bytes: Gauge,
}

/// Counters the engine's totals set after each turn: each label's counter
/// made once, so a turn stores into it without looking it up.
#[derive(Debug)]
struct Totals {
    keepalives: Counter,
    answered: [Counter; Answered::ALL.len()],
    ended: [Counter; END_CAUSES.len()],
    granted: [Counter; HOW_GRANTED.len()],
    let_go: [Counter; LET_GO.len()],
    refused: [Counter; Limit::ALL.len()],
    cache_grants: Counter,
    writes_held: Counter,
    events_queued: Counter,
    events_dropped: Counter,
    invalidations: Counter,
    fanout_cut_offs: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn gauge(registry: &mut Registry, name: &str, help: &str) -> Gauge {
    let gauge = Gauge::default();
    registry.register(name, help, gauge.clone());
    gauge
}

fn counter(registry: &mut Registry, name: &str, help: &str) -> Counter {
    let counter = Counter::default();
    registry.register(name, help, counter.clone());
    counter
}

/// A family of counters by `labels`, registered as `name`, and the
/// counter of each label, in order.
fn counters<L, const N: usize>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    labels: [L; N],
) -> [Counter; N]
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    let family = Family::<L, Counter>::default();
    registry.register(name, help, family.clone());
    labels.map(|label| family.get_or_create(&label).clone())
}

impl Metrics {
    /// A new set of figures, every one at zero.
    pub fn new() -> Metrics {
        Metrics::build(false)
    }

    /// A cell member's figures: a master's, as each master it runs counts
    /// them, and the member's own (role, term, log positions, lag, the
    /// master lease, leader changes and elections).
    pub fn for_member() -> Metrics {
        Metrics::build(true)
    }

    fn build(member: bool) -> Metrics {
        let mut registry = Registry::with_prefix("leasehold");
        let r = &mut registry;
        let requests = Family::<Request, Counter>::default();
        r.register(
            "requests",
            "Requests answered, by kind and outcome (ok, or the error code)",
            requests.clone(),
        );
        // From a request's arrival to its reply, 100 us to about 6.5 s.
        let request_seconds = Family::<Kind, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 17))
        });
        r.register_with_unit(
            "request_duration",
            "Time from a request's arrival to its reply, by kind; held KeepAlives are left out",
            Unit::Seconds,
            request_seconds.clone(),
        );
        let connections = gauge(r, "connections", "Client connections open");
        let connections_accepted =
            counter(r, "connections_accepted", "Client connections accepted");
        let refusals = Family::<LimitLabel, Counter>::default();
        r.register(
            "refusals",
            "Requests and connections refused at a limit or quota, by limit",
            refusals.clone(),
        );
        let refused = Limit::ALL.map(|limit| {
            refusals
                .get_or_create(&LimitLabel {
                    limit: limit.label(),
                })
                .clone()
        });
        let gauges = Gauges {
            sessions: gauge(r, "sessions", "Live sessions"),
            sessions_by_state: {
                let family = Family::<State, Gauge>::default();
                r.register(
                    "sessions_by_state",
                    "Live sessions by what the master sees of them: keepalive_held (a KeepAlive \
                     is held: in touch), waiting (for the next KeepAlive), recovering (yet to \
                     acknowledge a fail-over), ending (lease over, end waits for caches)",
                    family.clone(),
                );
                SESSION_STATES.map(|state| family.get_or_create(&State { state }).clone())
            },
            lock_holders: gauge(r, "lock_holders", "Sessions holding at least one lock"),
            locks_held: gauge(r, "locks_held", "Locks held by at least one session"),
            locks_in_delay: gauge(
                r,
                "locks_in_lock_delay",
                "Locks whose holder's session ended and which nobody may take until its lock-delay ends",
            ),
            lock_waiters: gauge(r, "lock_waiters", "Blocking acquires waiting in a lock's line"),
            keepalives_held: gauge(
                r,
                "keepalives_held",
                "KeepAlives the master holds until their lease is nearly over",
            ),
            subscriptions: gauge(r, "subscriptions", "Subscriptions open"),
            events_queued_bytes: {
                let g = Gauge::default();
                r.register_with_unit(
                    "events_queued",
                    "Events waiting for their sessions' KeepAlives",
                    Unit::Bytes,
                    g.clone(),
                );
                g
            },
            writes_held: gauge(
                r,
                "cache_writes_held",
                "Writes held until every session caching what they change is told",
            ),
            epoch: gauge(r, "epoch", "The master's epoch"),
            index: gauge(r, "index", "The index of the last change applied"),
            store_bytes: {
                let g = Gauge::default();
                r.register_with_unit(
                    "store_size",
                    "Bytes a single master's data directory's log and snapshot take (0 on a \
                     cell's members)",
                    Unit::Bytes,
                    g.clone(),
                );
                g
            },
        };
        let totals = Totals {
            keepalives: counter(
                r,
                "keepalives_received",
                "KeepAlives received, a KeepAliveAll counting one per session",
            ),
            answered: counters(
                r,
                "keepalive_answers",
                "KeepAlives answered: at_once (not held), early (held, answered for events or \
                 a newer KeepAlive), due (at their time) or late (after it by more than a \
                 quarter of the KeepAlive margin)",
                Answered::ALL.map(|a| When { when: a.label() }),
            ),
            ended: counters(
                r,
                "sessions_ended",
                "Sessions ended, by cause",
                END_CAUSES.map(|c| Cause { cause: c.label() }),
            ),
            granted: counters(
                r,
                "lock_grants",
                "Lock holdings begun: at_once (the lock was free), again (asked again by its \
                 holder) or from_line (a hand-off to a waiter)",
                HOW_GRANTED.map(|h| How { how: how_label(h) }),
            ),
            let_go: counters(
                r,
                "lock_releases",
                "Lock holdings ended, by why",
                LET_GO.map(|w| Why {
                    why: let_go_label(w),
                }),
            ),
            refused,
            cache_grants: counter(
                r,
                "cache_grants",
                "Reads answered as cacheable: each a key a session's cache may serve",
            ),
            writes_held: counter(
                r,
                "cache_held_writes",
                "Writes held until the sessions caching what they change were told",
            ),
            events_queued: counter(r, "events_queued", "Events queued for sessions"),
            events_dropped: counter(
                r,
                "events_dropped",
                "Events dropped for an EventsLost, their session's queue or its budget full",
            ),
            invalidations: counter(
                r,
                "cache_invalidations",
                "Invalidation events queued for caching sessions",
            ),
            fanout_cut_offs: counter(
                r,
                "fanout_cut_offs",
                "Times one address's subscriptions owed more than their share of fan-out \
                 and heard EventsLost instead",
            ),
        };
        // etcd's WAL fsync buckets: 1 ms to about 8 s.
        let fsync_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        r.register_with_unit(
            "fsync_duration",
            "Time one fsync of the log took",
            Unit::Seconds,
            fsync_seconds.clone(),
        );
        let commit_batch_records = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        r.register(
            "commit_batch_records",
            "Records made durable by one fsync (group commit)",
            commit_batch_records.clone(),
        );
        // Not a number until a snapshot is written: 0 would read as fresh.
        let snapshot_age_seconds = Gauge::<f64, AtomicU64>::default();
        snapshot_age_seconds.set(f64::NAN);
        r.register_with_unit(
            "snapshot_age",
            "Time since the snapshot in the data directory was written; NaN while it has none, \
             and on a cell's members, whose snapshots are the log's",
            Unit::Seconds,
            snapshot_age_seconds.clone(),
        );
        let cell = member.then(|| CellGauges::register(r));
        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                request_seconds,
                connections,
                connections_accepted,
                refusals,
                gauges,
                totals,
                fsync_seconds,
                commit_batch_records,
                snapshot_age_seconds,
                snapshot_written_ms: AtomicU64::new(0),
                read: AtomicBool::new(false),
                cell,
            }),
        }
    }

    /// Every figure, as OpenMetrics text ending in `# EOF`.
    pub fn encode(&self) -> String {
        self.inner.read.store(true, Ordering::Relaxed);
        let written = self.inner.snapshot_written_ms.load(Ordering::Acquire);
        if written > 0 {
            let age = unix_ms().saturating_sub(written) as f64 / 1000.0;
            self.inner.snapshot_age_seconds.set(age);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.inner.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// A request of `kind` answered with `outcome` after `took` (`None`
    /// for a held KeepAlive, whose wait is the lease's, not the master's).
    pub(crate) fn answered(
        &self,
        kind: &'static str,
        outcome: Result<(), ErrorCode>,
        took: Option<Duration>,
    ) {
        let outcome = match outcome {
            Ok(()) => "ok",
            Err(code) => code_label(code),
        };
        self.inner
            .requests
            .get_or_create(&Request { kind, outcome })
            .inc();
        if let Some(took) = took {
            self.inner
                .request_seconds
                .get_or_create(&Kind { kind })
                .observe(took.as_secs_f64());
        }
    }

    pub(crate) fn connection_opened(&self) {
        self.inner.connections.inc();
        self.inner.connections_accepted.inc();
    }

    pub(crate) fn connection_closed(&self) {
        self.inner.connections.dec();
    }

    /// A connection or request refused at `limit`, outside the engine.
    pub(crate) fn refused_at(&self, limit: &'static str) {
        self.inner
            .refusals
            .get_or_create(&LimitLabel { limit })
            .inc();
    }

    /// The engine's figures and totals after a turn; `shown` is what of
    /// the totals was shown before, and becomes `tally`.
    pub(crate) fn engine(&self, figures: &EngineFigures, tally: &Tally, shown: &mut Tally) {
        let set = |gauge: &Gauge, value: u64| {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        let g = &self.inner.gauges;
        set(&g.sessions, figures.sessions);
        for (gauge, n) in g.sessions_by_state.iter().zip(figures.sessions_by_state) {
            set(gauge, n);
        }
        set(&g.lock_holders, figures.lock_holders);
        set(&g.locks_held, figures.locks_held);
        set(&g.locks_in_delay, figures.locks_in_delay);
        set(&g.lock_waiters, figures.lock_waiters);
        set(&g.keepalives_held, figures.keepalives_held);
        set(&g.subscriptions, figures.subscriptions);
        set(&g.events_queued_bytes, figures.events_queued_bytes);
        set(&g.writes_held, figures.writes_held_now);
        set(&g.epoch, figures.epoch);
        set(&g.index, figures.index);
        if let Some(bytes) = figures.stored_bytes {
            set(&g.store_bytes, bytes);
        }
        // Each counter grows by what the engine counted since it was last
        // shown: a member that runs one master after another counts on
        // from where the last left off.
        let add = |counter: &Counter, total: u64, shown: &mut u64| {
            if total > *shown {
                counter.inc_by(total - *shown);
                *shown = total;
            }
        };
        let t = &self.inner.totals;
        add(&t.keepalives, tally.keepalives, &mut shown.keepalives);
        let arrays: [(&[Counter], &[u64], &mut [u64]); 5] = [
            (&t.answered, &tally.answered, &mut shown.answered),
            (&t.ended, &tally.ended, &mut shown.ended),
            (&t.granted, &tally.granted, &mut shown.granted),
            (&t.let_go, &tally.let_go, &mut shown.let_go),
            (&t.refused, &tally.refused, &mut shown.refused),
        ];
        for (counters, totals, shown) in arrays {
            for ((counter, total), shown) in counters.iter().zip(totals).zip(shown) {
                add(counter, *total, shown);
            }
        }
        add(&t.cache_grants, tally.cache_grants, &mut shown.cache_grants);
        add(&t.writes_held, tally.writes_held, &mut shown.writes_held);
        add(
            &t.events_queued,
            tally.events_queued,
            &mut shown.events_queued,
        );
        add(
            &t.events_dropped,
            tally.events_dropped,
            &mut shown.events_dropped,
        );
        add(
            &t.invalidations,
            tally.invalidations,
            &mut shown.invalidations,
        );
        add(
            &t.fanout_cut_offs,
            tally.fanout_cut_offs,
            &mut shown.fanout_cut_offs,
        );
    }

    /// A cell member's figures now; nothing on metrics not made
    /// `for_member`.
    pub(crate) fn member(&self, figures: &CellFigures) {
        let Some(cell) = &self.inner.cell else {
            return;
        };
        let set = |gauge: &Gauge, value: u64| {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        for (i, gauge) in cell.role.iter().enumerate() {
            gauge.set(i64::from(i == figures.role));
        }
        set(&cell.master, u64::from(figures.master));
        set(&cell.term, figures.term);
        set(&cell.log_index, figures.log_index);
        set(&cell.commit_index, figures.commit_index);
        set(&cell.applied_index, figures.applied_index);
        cell.lag.clear();
        for (member, behind) in &figures.lag {
            set(
                &cell.lag.get_or_create(&MemberLabel { member: *member }),
                *behind,
            );
        }
        cell.master_lease_seconds
            .set(figures.master_lease_left.as_secs_f64());
        let mut last = cell.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.0 != figures.leader {
            cell.leader_changes.inc();
        }
        let candidate = 2;
        if figures.role == candidate && last.1 != candidate {
            cell.elections.inc();
        }
        *last = (figures.leader, figures.role);
    }

    /// No master runs here now (a cell's member that follows): the
    /// master's gauges say nothing is served, but the epoch, which is the
    /// cell's as this member's replica has it; its counters keep what
    /// they counted.
    pub(crate) fn no_master(&self, epoch: u64) {
        self.inner
            .gauges
            .epoch
            .set(i64::try_from(epoch).unwrap_or(i64::MAX));
        let g = &self.inner.gauges;
        let mut gauges = vec![
            &g.sessions,
            &g.lock_holders,
            &g.locks_held,
            &g.locks_in_delay,
            &g.lock_waiters,
            &g.keepalives_held,
            &g.subscriptions,
            &g.events_queued_bytes,
            &g.writes_held,
            &g.index,
        ];
        gauges.extend(&g.sessions_by_state);
        for gauge in gauges {
            gauge.set(0);
        }
    }

    /// Whether anyone has read the figures yet.
    pub(crate) fn read(&self) -> bool {
        self.inner.read.load(Ordering::Relaxed)
    }

    /// This master wrote a snapshot of its state now.
    pub(crate) fn snapshot_written(&self) {
        self.inner
            .snapshot_written_ms
            .store(unix_ms().max(1), Ordering::Release);
    }

    /// The data directory's snapshot, which this master recovered from and
    /// did not rewrite, was written at `at`.
    pub(crate) fn snapshot_found(&self, at: std::time::SystemTime) {
        self.inner
            .snapshot_written_ms
            .store(unix_ms_of(at).max(1), Ordering::Release);
    }

    /// One fsync of `records` records, which took `took`.
    pub(crate) fn synced(&self, records: usize, took: Duration) {
        self.inner.fsync_seconds.observe(took.as_secs_f64());
        self.inner.commit_batch_records.observe(records as f64);
    }
}

/// Milliseconds since the Unix epoch, by the wall clock: ages shown to
/// operators are wall-clock ages.
fn unix_ms() -> u64 {
    unix_ms_of(std::time::SystemTime::now())
}

fn unix_ms_of(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An error code as a label value: lower case, words joined by `_`.
fn code_label(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::UnknownSession => "unknown_session",
        ErrorCode::SessionExpired => "session_expired",
        ErrorCode::WrongEpoch { .. } => "wrong_epoch",
        ErrorCode::Malformed => "malformed",
        ErrorCode::FrameTooLarge => "frame_too_large",
        ErrorCode::LimitReached => "limit_reached",
        ErrorCode::Internal => "internal",
        ErrorCode::VersionMismatch { .. } => "version_mismatch",
        ErrorCode::InvalidArgument => "invalid_argument",
        ErrorCode::CasMismatch { .. } => "cas_mismatch",
        ErrorCode::LockHeld => "lock_held",
        ErrorCode::LockDelayed { .. } => "lock_delayed",
        ErrorCode::LockNotHeld => "lock_not_held",
        ErrorCode::FailoverInProgress { .. } => "failover_in_progress",
        ErrorCode::PermissionDenied => "permission_denied",
        ErrorCode::Congested { .. } => "congested",
        ErrorCode::StorageFull => "storage_full",
        ErrorCode::OutcomeUnknown => "outcome_unknown",
        ErrorCode::StaleRelease { .. } => "stale_release",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_counted_by_kind_and_outcome() {
        let metrics = Metrics::new();
        metrics.answered("get", Ok(()), Some(Duration::from_millis(2)));
        metrics.answered("get", Err(ErrorCode::PermissionDenied), None);
        let text = metrics.encode();
        assert!(
            text.contains("leasehold_requests_total{kind=\"get\",outcome=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_requests_total{kind=\"get\",outcome=\"permission_denied\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_request_duration_seconds_count{kind=\"get\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn the_snapshot_age_is_not_a_number_until_a_snapshot_is_written() {
        let metrics = Metrics::new();
        assert!(
            metrics
                .encode()
                .contains("leasehold_snapshot_age_seconds NaN\n"),
            "{}",
            metrics.encode()
        );
        metrics.snapshot_written();
        let text = metrics.encode();
        let age = text
            .lines()
            .find_map(|l| l.strip_prefix("leasehold_snapshot_age_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("an age");
        assert!((0.0..60.0).contains(&age), "{text}");
    }

    #[test]
    fn the_engines_figures_are_gauges() {
        let metrics = Metrics::new();
        let figures = EngineFigures {
            sessions: 3,
            lock_holders: 2,
            epoch: 7,
            ..EngineFigures::default()
        };
        metrics.engine(&figures, &Tally::default(), &mut Tally::default());
        let text = metrics.encode();
        assert!(text.contains("leasehold_sessions 3\n"), "{text}");
        assert!(text.contains("leasehold_lock_holders 2\n"), "{text}");
        assert!(text.contains("leasehold_epoch 7\n"), "{text}");
    }
}
