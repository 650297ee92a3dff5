//! What a master counts for its operators (SPEC "Operating", `OPS-1`..):
//! counters that connections, the master task and the writer bump as
//! things happen, and gauges the master task sets from its engine after
//! each turn. A scrape of `/metrics` (`http.rs`) reads them all as
//! Prometheus' OpenMetrics text.
//!
//! Counting decides nothing: every figure is an atomic a task bumps
//! beside what it does, so the engine's decisions stay a function of
//! its inputs and the time.

use std::sync::Arc;
use std::time::Duration;

use leasehold_protocol::ErrorCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

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

/// The figures of the master's engine after a turn, as gauges show them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EngineFigures {
    pub(crate) sessions: u64,
    pub(crate) lock_holders: u64,
    pub(crate) lock_waiters: u64,
    pub(crate) keepalives_held: u64,
    pub(crate) subscriptions: u64,
    pub(crate) epoch: u64,
    pub(crate) index: u64,
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
    sessions: Gauge,
    lock_holders: Gauge,
    lock_waiters: Gauge,
    keepalives_held: Gauge,
    subscriptions: Gauge,
    epoch: Gauge,
    index: Gauge,
    fsync_seconds: Histogram,
    commit_batch_records: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A new set of figures, every one at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("leasehold");
        let requests = Family::<Request, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by kind and outcome (ok, or the error code)",
            requests.clone(),
        );
        // From a request's arrival to its reply, 100 us to about 6.5 s.
        let request_seconds = Family::<Kind, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 17))
        });
        registry.register_with_unit(
            "request_duration",
            "Time from a request's arrival to its reply, by kind; held KeepAlives are left out",
            Unit::Seconds,
            request_seconds.clone(),
        );
        let connections = Gauge::default();
        registry.register(
            "connections",
            "Client connections open",
            connections.clone(),
        );
        let connections_accepted = Counter::default();
        registry.register(
            "connections_accepted",
            "Client connections accepted",
            connections_accepted.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let gauge = Gauge::default();
            registry.register(name, help, gauge.clone());
            gauge
        };
        let sessions = gauge(&mut registry, "sessions", "Live sessions");
        let lock_holders = gauge(
            &mut registry,
            "lock_holders",
            "Sessions holding at least one lock",
        );
        let lock_waiters = gauge(
            &mut registry,
            "lock_waiters",
            "Blocking acquires waiting in a lock's line",
        );
        let keepalives_held = gauge(
            &mut registry,
            "keepalives_held",
            "KeepAlives the master holds until their lease is nearly over",
        );
        let subscriptions = gauge(&mut registry, "subscriptions", "Subscriptions open");
        let epoch = gauge(&mut registry, "epoch", "The master's epoch");
        let index = gauge(
            &mut registry,
            "index",
            "The index of the last change applied",
        );
        // etcd's WAL fsync buckets: 1 ms to about 8 s.
        let fsync_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register_with_unit(
            "fsync_duration",
            "Time one fsync of the log took",
            Unit::Seconds,
            fsync_seconds.clone(),
        );
        let commit_batch_records = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        registry.register(
            "commit_batch_records",
            "Records made durable by one fsync (group commit)",
            commit_batch_records.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                request_seconds,
                connections,
                connections_accepted,
                sessions,
                lock_holders,
                lock_waiters,
                keepalives_held,
                subscriptions,
                epoch,
                index,
                fsync_seconds,
                commit_batch_records,
            }),
        }
    }

    /// Every figure, as OpenMetrics text ending in `# EOF`.
    pub fn encode(&self) -> String {
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

    /// The engine's figures after a turn.
    pub(crate) fn engine(&self, figures: EngineFigures) {
        let set = |gauge: &Gauge, value: u64| {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        let inner = &self.inner;
        set(&inner.sessions, figures.sessions);
        set(&inner.lock_holders, figures.lock_holders);
        set(&inner.lock_waiters, figures.lock_waiters);
        set(&inner.keepalives_held, figures.keepalives_held);
        set(&inner.subscriptions, figures.subscriptions);
        set(&inner.epoch, figures.epoch);
        set(&inner.index, figures.index);
    }

    /// One fsync of `records` records, which took `took`.
    pub(crate) fn synced(&self, records: usize, took: Duration) {
        self.inner.fsync_seconds.observe(took.as_secs_f64());
        self.inner.commit_batch_records.observe(records as f64);
    }
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
    fn the_engines_figures_are_gauges() {
        let metrics = Metrics::new();
        metrics.engine(EngineFigures {
            sessions: 3,
            lock_holders: 2,
            epoch: 7,
            ..EngineFigures::default()
        });
        let text = metrics.encode();
        assert!(text.contains("leasehold_sessions 3\n"), "{text}");
        assert!(text.contains("leasehold_lock_holders 2\n"), "{text}");
        assert!(text.contains("leasehold_epoch 7\n"), "{text}");
    }
}
