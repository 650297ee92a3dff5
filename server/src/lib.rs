//! The Leasehold master.
//!
//! The core is [`State`], a deterministic state machine with no I/O and no
//! clock: `apply(command, now) -> (reply, events)`. Around it, a master task
//! keeps the soft state (leases, held KeepAlives) and the timers, and
//! connection tasks speak the wire protocol. [`run`] wires them to any
//! [`Listener`], so the same code serves TCP and a simulated network.
//!
//! # Layout
//! - `config.rs`: every default and limit.
//! - `state/`: the durable state machine: `State::apply` and its events
//!   (`mod.rs`); each kind of command, the reply its kind has ([`Kind`])
//!   and `Command`, the kinds as the log holds them (`command.rs`); what
//!   it does to locks (`locks.rs`), to health checks (`checks.rs`) and to
//!   rules and tokens (`access.rs`);
//!   `session.rs`: a session record.
//! - `namespace.rs`: every node by key; `node.rs`: keys, a node's counters,
//!   how a node changed.
//! - `time.rs`: master time, [`Millis`]; `lease.rs`: leases, the master's
//!   soft state; `timers.rs`: the master's other timers, an ordered set.
//! - `policy.rs`: what a session's timer and a promotion ask of the master,
//!   decided without a runtime.
//! - `lock.rs`: the locks' data: holders, waiters, lock-delay; `holding.rs`:
//!   one holder's hold, and how holdings begin and end.
//! - `events.rs`: subscriptions and per-session event queues, a recovered
//!   session's fail-over event implied until it is acknowledged or joined
//!   by another (`recovering.rs`: the sets of recovered sessions);
//!   `cache.rs`: who caches what and the work held for them (`CACHE-1`..).
//! - `check.rs`: health checks bound to sessions.
//! - `keepalive.rs`: a held KeepAlive; `watch.rs`: Watches held until their
//!   key changes; `acquire.rs`: blocking acquires waiting in a line;
//!   `call.rs`: a request with the way back to its connection.
//! - `observe.rs`: telling an observer of every lease granted, every
//!   session ended and every holding of a lock begun or ended, for checks
//!   from outside the master.
//! - `quota.rs`: what each peer address may take of what the master shares.
//! - `master/`: the master. `engine.rs` owns the state, leases and timers
//!   and decides: an input (a request, timers due, a grant nobody heard,
//!   held work let go, fan-out owed) and a time in, effects out (records
//!   to log, replies, events to observe); its tests, without a runtime,
//!   are `engine_tests.rs`. `mod.rs` is the task: the only reader of
//!   master time, it feeds the engine and carries out its effects.
//!   The engine's parts, in the order a request meets them: the checks
//!   every request passes (`admission.rs`), with who the request acts as
//!   (`identity.rs`), who may act for a session (`auth.rs`), the rights
//!   each request needs (`rights.rs`) and quotas (`quotas.rs`); the gate that holds a
//!   write for caches (`cache.rs`); requests to commands to responses
//!   (`serve.rs`), with what replies show of the state (`views.rs`) and
//!   its side of KeepAlives (`keepalive.rs`), events (`events.rs`),
//!   blocking acquires (`acquire.rs`), Watches (`watches.rs`) and rules
//!   and tokens (`access.rs`);
//!   applying a command and running its events (`apply.rs`); the effects
//!   it queues (`outbox.rs`). The way in, `MasterHandle` (`handle.rs`);
//!   the task driven by hand in `tests.rs`.
//! - `access.rs`: rules, tokens' hashes and sessions' owners, part of the
//!   state, and whose rights they give; `audit.rs`: the audit log, its
//!   records and the thread that writes and rotates it; `caller.rs`: who is at the other
//!   end of a connection; `cert_name.rs`: the principal a client
//!   certificate names.
//! - `connection.rs`: one client connection; `accept.rs`: accepting them,
//!   for a single master and a cell's member alike, and giving memory back
//!   after a burst of them ends (`memory.rs`); `incoming.rs`: a connection
//!   made ready for frames, plaintext or TLS, told apart by its first byte
//!   (`prefixed.rs` reads it again); `tls.rs`: [`ServerTls`], the master's
//!   certificate, reloadable; `server.rs`: a single master serving;
//!   `reply.rs`: the budget of replies a connection may leave unread.
//! - The durability path: `store.rs`, the [`Store`] trait, its records and
//!   the log's bytes; `file_store.rs`, [`FileStore`], the store in a data
//!   directory; `disk.rs`, the data directory's errors, atomic writes and
//!   checksummed framing, which the cell's files use too; `codec.rs`, the
//!   encoding of what goes to disk or to a peer; `commit.rs`, the writer
//!   (a thread, or a task for a store that never blocks) that appends and
//!   fsyncs batches (group commit); `memstore.rs`, a store in memory that keeps what a disk
//!   would through a crash, for tests and simulations; `recovery.rs`,
//!   rebuilding state (and a new epoch) from a store; `upgrade.rs`,
//!   reading the state as earlier formats stored it; `ids.rs`, session
//!   ids, their secrets and tokens' secrets.
//! - `cell/`: the replicated cell, where a member's Raft log takes the
//!   place of the store and its leader runs the master (its own Layout is
//!   in `cell/mod.rs`).
//!
//! # Who reads the clock
//! Master time ([`Millis`]), which every lease, timer and command is
//! measured in, is read in one place: the master task's loop
//! (`master/mod.rs`), once a turn, and handed to the engine with the
//! input it handles. Other
//! readings of tokio's clock decide nothing a client is promised: a
//! connection's idle and frame timeouts (`connection.rs`), when to give
//! memory back (`accept.rs`), and in a cell the master lease, kept from
//! when heartbeats went and were answered (`cell/network.rs`,
//! `cell/peer.rs`, `cell/lease.rs`) and checked before serving
//! (`cell/run.rs`, `master/mod.rs`).

mod accept;
pub mod access;
mod acquire;
mod audit;
mod backup;
mod cache;
mod call;
mod caller;
pub mod cell;
mod cert_name;
mod check;
mod codec;
mod commit;
mod config;
mod connection;
mod disk;
mod events;
mod file_store;
mod holding;
pub mod http;
mod id_hash;
mod ids;
mod incoming;
mod keepalive;
mod lease;
mod lock;
mod master;
mod memory;
mod memstore;
pub mod metrics;
mod namespace;
mod node;
mod observe;
mod policy;
mod prefixed;
mod quota;
mod recovering;
mod recovery;
mod reply;
#[cfg(test)]
mod scratch;
mod server;
mod session;
mod state;
mod status_page;
mod store;
mod tally;
mod time;
mod timers;
mod tls;
mod upgrade;
mod watch;

pub use accept::{bind, Listener};
pub use audit::{AuditConfig, AuditLog};
pub use backup::{Backup, BackupError, BackupSummary};
pub use check::{check_name, Check, Checks, MAX_CHECKS, MAX_CHECKS_PER_SESSION};
pub use config::*;
pub use disk::StoreError;
pub use file_store::FileStore;
pub use holding::{Holding, HowGranted, LetGo};
pub use lease::Leases;
pub use lock::{LockState, Locks, Waiter};
pub use memstore::MemoryStore;
pub use metrics::Metrics;
pub use namespace::{Namespace, Put};
pub use node::{check_key, Node, MAX_CONTENTS, MAX_KEY_DEPTH, MAX_KEY_LEN};
pub use observe::{Grant, MasterEvent, MasterObserver};
pub use server::{run, Server, ServerError};
pub use session::{EndCause, Session};
pub use state::command;
pub use state::{
    Acquisition, Applied, Bounds, CheckChanged, Command, Deleted, Kind, LockedNodes, NewSession,
    State, StateEvent, WaitCancelled,
};
pub use status_page::{lock_json, master_json};
pub use store::{Record, Recovered, Snapshot, Store, StoreSizes, SyncCount};
pub use time::{Millis, Span};
pub use tls::{ServerTls, TlsError, TlsFiles};
