//! What the `failover` scenario hands a peer's adapter (`etcd`,
//! `zookeeper`) and asks of it. Kept apart from the scenario, which calls
//! the adapters, so that the adapters need nothing of it in return.

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use std::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub sessions: usize,
    pub nodes: u64,
    pub connections: usize,
    /// Leasehold's sessions held over the raw protocol, renewed together
    /// in `KeepAliveAll` requests, rather than by the client library.
    pub keepalive_all: bool,
}

/// What the failover scenario needs of a peer.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub trait Peer {
    /// Sessions kept alive by the peer's client library; dropping it ends
    /// them.
    type Sessions;

    /// Writes `nodes` small nodes.
    async fn preload(&self, nodes: u64) -> anyhow::Result<()>;

    /// Opens `shape.sessions` sessions over `shape.connections`
    /// connections. Once `restarted` is set, each counts itself in `back`
    /// the first time it is renewed, and in `expired` if it is lost.
    async fn open(&self, shape: Shape, tally: Arc<Tally>) -> anyhow::Result<Self::Sessions>;

    /// A new connection and session take a lock and release it.
    async fn lock_once(&self) -> anyhow::Result<()>;

    /// Whether the cluster member at `member` says it leads now and
    /// serves; `false` when it cannot be asked.
    async fn leads(&self, member: &str) -> bool;
}

/// Counters a peer's sessions share.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
#[derive(Default)]
pub struct Tally {
    pub restarted: AtomicBool,
    pub back: AtomicU64,
    pub expired: AtomicU64,
}
