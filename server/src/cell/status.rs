//! What a member says of itself and its cell (SPEC `CELL-8`), for
//! `leasehold cell status`: any member answers, master or not, on the
//! client port. The asker's first frame is `LHSTAT01`; the member answers
//! one frame, the encoded [`MemberStatus`], and closes.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use openraft::ServerState;
use serde::{Deserialize, Serialize};
use tokio_util::codec::Framed;

use super::member::Member;
use super::network::{codec, Served};
use super::NodeId;
use crate::codec::{decode, encode};

/// The first frame of a status query.
pub const STATUS_MAGIC: &[u8; 8] = b"LHSTAT01";

/// One member's view of itself and its cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub cell: String,
    pub id: NodeId,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    /// Whether this member serves clients as the master now (it leads and
    /// holds the master lease).
    pub master: bool,
    /// The member this one believes leads, if any.
    pub leader: Option<NodeId>,
    /// The cell's epoch as this member's replica has it.
    pub epoch: u64,
    pub term: u64,
    /// The last entry in this member's log.
    pub last_log: Option<u64>,
    /// The last entry this member applied.
    pub applied: Option<u64>,
    /// Every member of the configuration in force, with its address.
    pub members: BTreeMap<NodeId, String>,
    /// The voters (the others are learners).
    pub voters: Vec<NodeId>,
    /// On the leader: how many entries each member is behind its log.
    pub lag: BTreeMap<NodeId, u64>,
}

impl MemberStatus {
    /// What `member` says now.
    pub(crate) fn of(member: &Member, serving: bool) -> MemberStatus {
        let m = member.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let members = membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect();
        let voters = membership.voter_ids().collect();
        let last = m.last_log_index.unwrap_or(0);
        let lag = m
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .map(|(id, matched)| (*id, last.saturating_sub(matched.map_or(0, |l| l.index))))
                    .collect()
            })
            .unwrap_or_default();
        MemberStatus {
            cell: member.config.cell.clone(),
            id: member.config.id,
            role: match m.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            }
            .into(),
            master: serving,
            leader: m.current_leader,
            epoch: member.machine.replica_epoch(),
            term: m.current_term,
            last_log: m.last_log_index,
            applied: m.last_applied.map(|l| l.index),
            members,
            voters,
            lag,
        }
    }
}

/// Answers a status query on `framed` and closes.
pub(crate) async fn answer<S: Served>(
    mut framed: Framed<S, super::frame::FrameCodec>,
    status: MemberStatus,
) {
    let _ = framed.send(Bytes::from(encode(&status))).await;
}

/// Asks the member at `addr` for its status, over TCP.
/// What an answer that is not a member's means: a single master answered
/// (its frames decode as no member's), or a port that speaks TLS to a
/// query that does not.
pub(crate) fn not_a_member() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "it did not answer as a cell's member: a single master, or a port that speaks TLS",
    )
}

pub async fn query(addr: &str) -> std::io::Result<MemberStatus> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    query_on(stream).await
}

/// Asks the member at the other end of `stream` for its status: over TLS,
/// for a cell whose members speak it (`CELL-11`).
pub async fn query_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: S,
) -> std::io::Result<MemberStatus> {
    let mut framed = Framed::new(stream, codec());
    framed.send(Bytes::from_static(STATUS_MAGIC)).await?;
    let frame = framed
        .next()
        .await
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))??;
    decode(&frame).map_err(|_| not_a_member())
}
