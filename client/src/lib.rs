//! Client library of Leasehold, a lock service with Chubby's session
//! semantics.
//!
//! A [`Client`] talks to one master. A [`Session`] created through it is kept
//! alive in the background with KeepAlives that the master holds until the
//! lease is nearly over. The session reports where it stands as a
//! [`SessionState`]: `Normal` while its local lease is valid, `Jeopardy` when
//! the local lease ran out without a reply (a grace period starts), `Safe`
//! when contact came back within the grace period, `Failover` when a new
//! master took over while the lease was valid, `Expired` when the grace
//! period ran out or the master says the session is gone, and `Closed` when
//! this client closed it.
//!
//! ```no_run
//! use leasehold::{Client, SessionOptions, SessionState};
//!
//! # async fn example() -> Result<(), leasehold::ClientError> {
//! let client = Client::connect("127.0.0.1:7171").await?;
//! let session = client.create_session(SessionOptions::new("worker")).await?;
//! session.on_state_change(|state| {
//!     if state == SessionState::Jeopardy {
//!         eprintln!("lost contact with the master; pausing work");
//!     }
//! });
//! session.expired().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! From the wire up; no file imports one above it.
//! - `config.rs`: [`ClientConfig`], [`SessionOptions`] and every default and
//!   limit of the library; `error.rs`: [`ClientError`], sorted by
//!   [`Remedy`]; `clock.rs`: the client's clock, at a rate of its own in a
//!   simulation.
//! - `transport.rs`: [`Connector`]s; `tls.rs`: [`TlsOptions`] and the
//!   handshake's failures explained; `connection.rs`: one multiplexed
//!   connection; `client.rs`: [`Client`], requests and the connection to
//!   the master.
//! - `lease.rs`: the local lease formula; `session_machine.rs`: the session
//!   states ([`SessionState`]) as a pure machine, fed replies and the time;
//!   `cache.rs`: the session's consistent cache, pure as well.
//! - `events.rs`: where a session's events go (streams and lock guards) and
//!   the event types; `shared.rs`: what a session's handles and its keeper
//!   share; `release.rs`: giving a lock back, naming the acquire it ends.
//! - `keepalive.rs`: the keeper task, which executes the session machine,
//!   sends the KeepAlives and makes subscriptions again after a fail-over.
//! - `session.rs`: [`Session`], made by [`Client::create_session`] or
//!   [`Client::attach_session`]; `subscription.rs`: [`Subscription`]s.
//! - `kv.rs`: get, list, put, delete and watch on the namespace;
//!   `check.rs`: health checks sessions can be bound to; `access.rs`: who
//!   the client acts as, access rules and bearer tokens.
//! - `lock.rs`: [`LockGuard`]s from `Session::lock` and `Session::try_lock`;
//!   `election.rs`: [`Election`], leader election on a lock;
//!   `semaphore.rs`: [`Semaphore`], N slots from nodes, locks and CAS;
//!   `keeper.rs`: [`SessionKeeper`], one live session reused until it
//!   expires.

#![warn(missing_docs)]

mod access;
mod cache;
mod check;
mod client;
mod clock;
mod config;
mod connection;
mod election;
mod error;
mod events;
mod keepalive;
mod keeper;
mod kv;
pub mod lease;
mod lock;
mod member_choice;
mod release;
mod semaphore;
mod session;
mod session_machine;
mod shared;
mod subscription;
mod tls;
mod transport;

pub use cache::CacheStats;
pub use client::{Client, SavedSnapshot};
pub use config::{
    ClientConfig, SessionOptions, CONNECT_TIMEOUT, DEFAULT_CACHE_BYTES, DEFAULT_CACHE_KEYS,
    DEFAULT_GRACE, REQUEST_TIMEOUT,
};
pub use election::{Election, Leader, LeaderChanges, Term};
pub use error::ClientError;
pub use events::{SubscribeOptions, SubscriptionEvent};
pub use keeper::SessionKeeper;
pub use kv::{DeleteOptions, Deleted, PutOptions, Watched};
pub use leasehold_protocol::access::{BearerToken, Identity, Rights, Rule, TokenInfo, Via};
pub use leasehold_protocol::{
    event_mask, Change, CheckInfo, CheckStatus, LockMode, Sequencer, EVENT_CONTENTS_MAX,
};
pub use leasehold_protocol::{
    Behavior, ErrorCode, LockInfo, NodeStat, NodeView, Remedy, SessionId, SessionInfo, SessionLocks,
};
pub use leasehold_protocol::{LockHolder, LockListing, LockWaiter, MasterStatus};
pub use leasehold_protocol::{SessionToken, TokenParseError};
pub use lock::{LockGuard, LockOptions};
pub use member_choice::MemberChoice;
pub use semaphore::{Permit, Semaphore, SEMAPHORE_LOCK};
pub use session::Session;
pub use session_machine::SessionState;
pub use subscription::Subscription;
pub use tls::TlsOptions;
pub use transport::{
    BoxTransport, CellConnector, ConnectFuture, Connector, TcpConnector, Transport,
};

// Compiles the README's examples, so the tour cannot drift from the API.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
