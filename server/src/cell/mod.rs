//! The replicated cell: several members keep the same log of commands
//! through Raft (openraft), and the member that leads it, while a quorum
//! keeps acknowledging it, is the master (SPEC "The cell").
//!
//! openraft replicates and orders; everything Chubby adds is ours: the
//! master lease, epochs taken through the log, and the conservative lease a
//! new master gives every session. This module is the seam: the engine's
//! types stop here, and the state machine (`State::apply(command, now)`)
//! never sees them.
//!
//! - `log.rs`: the Raft log and vote, durable in the member's data
//!   directory with the single master's crash discipline.
//! - `machine.rs`: the state machine the log drives, and its snapshots.
//! - `network.rs`: Raft's traffic between members, on the client port.
//! - `frame.rs`: the length-prefixed frames members and tools exchange.
//! - `member.rs`: one member: its data directory, its Raft, its peers.
//! - `peer.rs`: what arrives on a member's port, and a peer's Raft traffic
//!   served.
//! - `lease.rs`: the master lease, kept from the followers' answers.
//! - `run.rs`: serving as a member: master while leading, else a redirect.
//! - `status.rs`: what a member says of itself, for `leasehold cell status`.
//! - `observed.rs`: what a member shows on the HTTP port: its figures and
//!   health.
//! - `membership.rs`: adding and removing members, through joint
//!   consensus.
//! - `restore.rs`: a new cell's first member made from a backup.
//! - `volume.rs`: where a member keeps its files: a directory, or memory.
//! - `runtime.rs`: openraft's runtime, with election timeouts a simulation
//!   can seed.

// openraft's error types are large, and its traits return them by value.
#![allow(clippy::result_large_err)]

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::state::Command;
use crate::time::Millis;

mod broken;
mod frame;
mod lease;
mod log;
mod machine;
mod member;
mod membership;
mod network;
mod observed;
mod peer;
mod peer_tls;
mod restore;
mod rounds;
mod run;
mod runtime;
mod status;
#[cfg(test)]
mod tests;
mod volume;

pub use broken::{short_refusal_window, BrokenRules};
pub use lease::MasterLease;
pub use log::CellLog;
pub use machine::{CellMachine, Replica};
pub use member::{Member, MemberConfig, MemberError, Storage, Timing, DEFAULT_SNAPSHOT_EVERY};
pub use membership::{
    request as change_members, request_on as change_members_on, Change, ChangeReply, ChangeRequest,
    MEMBERSHIP_MAGIC,
};
pub use network::{
    CellNetwork, DialFuture, Dialer, PeerHello, PeerStream, Served, TcpDialer, MAX_PEER_FRAME,
    PEER_MAGIC,
};
pub use peer::{first_frame, serve as serve_peer, FirstFrame, Proof};
pub use peer_tls::{member_name, peer_dialer, TlsDialer, MEMBER_PREFIX};
pub(crate) use restore::restore_member;
pub use run::{serve, serve_member, serve_member_with_http, serve_with_http, start_member};
pub use runtime::{seed_elections, CellRuntime};
pub use status::{query as query_status, query_on as query_status_on, MemberStatus, STATUS_MAGIC};
pub use volume::{DirVolume, MemoryVolume, Volume};

/// A member's id within its cell.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The cell's Raft types: proposals carry the master's commands.
    pub CellTypes:
        D = Proposal,
        R = Outcome,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        AsyncRuntime = CellRuntime,
);

/// What a master puts in the cell's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Proposal {
    /// The proposing member's master takes the next epoch (`CELL-3`): the
    /// state machine assigns it, so epochs rise with the log whatever the
    /// Raft term.
    NewEpoch { node: NodeId },
    /// Commands a master applied, in order, each at its master time.
    /// Applied only while `epoch` is the cell's: a deposed master's
    /// commands change nothing, on every member alike.
    Commands {
        epoch: u64,
        commands: Vec<(Millis, Command)>,
    },
}

/// What applying a proposal did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The epoch a `NewEpoch` assigned.
    Epoch(u64),
    /// Whether the commands were applied (their epoch was the cell's).
    Commands { applied: bool },
    /// A blank or membership entry.
    Nothing,
}
