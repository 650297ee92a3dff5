//! Raft traffic between members (SPEC `CELL-4`): frames of a 4-byte
//! big-endian length and a body, on the same port clients use. A peer's
//! first frame starts with `LHCELL02`, which no client's `Hello` can (a
//! client's first byte is a message kind, 0), then names the cell and the
//! two members; a member answers only a peer of its own cell that
//! addresses it by its id, so two cells on one machine never mix.
//!
//! Each member keeps one connection per (target, purpose) openraft asks
//! for, made when first used and again after any failure; requests on it
//! go one at a time, each bounded by the deadline openraft gives.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::Framed;

use super::frame::FrameCodec;
use super::lease::MasterLease;
use super::member::Member;
use super::{CellTypes, NodeId};
use crate::store::{decode, encode};

/// The first bytes of a peer's first frame.
pub const PEER_MAGIC: &[u8; 8] = b"LHCELL02";
/// The largest peer frame: a batch of entries or a snapshot chunk.
pub const MAX_PEER_FRAME: usize = 64 << 20;

/// A byte stream to another member.
pub trait PeerStream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> PeerStream for T {}

/// A connection a member accepted: it needs not be shared between
/// threads, as a dialed one must (openraft's connections are).
pub trait Served: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Served for T {}

/// The future a [`Dialer`] returns.
pub type DialFuture = Pin<Box<dyn Future<Output = io::Result<Box<dyn PeerStream>>> + Send>>;

/// Opens connections to other members: TCP in a real cell, a simulated
/// network in a simulation.
pub trait Dialer: Send + Sync + 'static {
    fn dial(&self, addr: &str) -> DialFuture;
}

/// Dials over TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpDialer;

impl Dialer for TcpDialer {
    fn dial(&self, addr: &str) -> DialFuture {
        let addr = addr.to_string();
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as Box<dyn PeerStream>)
        })
    }
}

/// Who a peer says it is, after the magic.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerHello {
    pub cell: String,
    pub from: NodeId,
    pub to: NodeId,
    /// The cell's shared secret, if its members have one.
    pub secret: Option<String>,
}

impl std::fmt::Debug for PeerHelloSecret<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "<secret>" } else { "none" })
    }
}

/// A secret as logs show it: whether there is one.
struct PeerHelloSecret<'a>(&'a Option<String>);

fn same_secret(given: &Option<String>, mine: &Option<String>) -> bool {
    match (given, mine) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.bytes()
                    .zip(b.bytes())
                    .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                    == 0
        }
        _ => false,
    }
}

impl std::fmt::Debug for PeerHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerHello")
            .field("cell", &self.cell)
            .field("from", &self.from)
            .field("to", &self.to)
            .field("secret", &PeerHelloSecret(&self.secret))
            .finish()
    }
}

impl PeerHello {
    fn frame(&self) -> Bytes {
        let mut body = PEER_MAGIC.to_vec();
        body.extend(encode(self));
        body.into()
    }

    /// The hello in a first frame, if it is a peer's. `None`: a client's.
    pub(crate) fn parse(first: &[u8]) -> Option<Result<PeerHello, String>> {
        let rest = first.strip_prefix(PEER_MAGIC)?;
        Some(decode(rest))
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum PeerRequest {
    Append(AppendEntriesRequest<CellTypes>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<CellTypes>),
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum PeerResponse {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// The hello was refused: another cell, or another member's id.
    Refused(String),
}

pub(crate) fn codec() -> FrameCodec {
    FrameCodec::new(MAX_PEER_FRAME)
}

/// Serves one peer's connection after its hello: each request goes to
/// this member's Raft, each answer back, until the peer hangs up.
pub(crate) async fn serve<S: Served>(
    mut framed: Framed<S, FrameCodec>,
    hello: PeerHello,
    member: &Member,
) {
    let (cell, secret, me) = (
        member.config.cell.as_str(),
        &member.config.secret,
        member.config.id,
    );
    let (raft, lease) = (&member.raft, &member.lease);
    let refusal = if !same_secret(&hello.secret, secret) {
        // Neither secret goes in the message.
        Some("the peer did not present this cell's secret".to_string())
    } else if hello.cell != cell {
        Some(format!(
            "this member belongs to cell {cell:?}, not {:?}",
            hello.cell
        ))
    } else if hello.to != me {
        Some(format!("this member is {me}, not {}", hello.to))
    } else {
        None
    };
    if let Some(reason) = refusal {
        tracing::warn!(from = hello.from, %reason, "peer refused");
        let _ = framed
            .send(Bytes::from(encode(&PeerResponse::Refused(reason))))
            .await;
        return;
    }
    while let Some(Ok(frame)) = framed.next().await {
        let request: PeerRequest = match decode(&frame) {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!(from = hello.from, error = %e, "malformed peer frame");
                return;
            }
        };
        let response = match request {
            PeerRequest::Append(rpc) => {
                if rpc.vote.is_committed() {
                    let now = tokio::time::Instant::now();
                    *member.led_by.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((hello.from, now));
                }
                PeerResponse::Append(raft.append_entries(rpc).await)
            }
            PeerRequest::Vote(rpc) => {
                let m = raft.metrics().borrow().clone();
                let membership = m.membership_config.membership();
                let led_by = *member.led_by.lock().unwrap_or_else(|e| e.into_inner());
                let led = led_by.is_some_and(|(leader, at)| {
                    at.elapsed() < member.config.timing.election_max
                        && newest_voter(membership, leader)
                });
                let voter = may_campaign(
                    membership,
                    hello.from,
                    rpc.last_log_id.as_ref(),
                    member.log.last_log_id().as_ref(),
                    led,
                );
                if voter {
                    // A leader the engine lets vote for a rival steps
                    // down: its master stops before the vote can leave
                    // (CELL-6).
                    lease.yield_to(&rpc.vote);
                    PeerResponse::Vote(raft.vote(rpc).await)
                } else {
                    // See `may_campaign`: a vote for it would never make a
                    // master, and a request must not depose one (CELL-9).
                    PeerResponse::Vote(Ok(VoteResponse::new(m.vote, None, false)))
                }
            }
            PeerRequest::Snapshot(rpc) => PeerResponse::Snapshot(raft.install_snapshot(rpc).await),
        };
        if framed.send(Bytes::from(encode(&response))).await.is_err() {
            return;
        }
    }
}

/// Whether `id` is a voter of the newest configuration of `membership`.
fn newest_voter(membership: &openraft::Membership<NodeId, BasicNode>, id: NodeId) -> bool {
    let configs = membership.get_joint_config();
    configs.last().is_some_and(|voters| voters.contains(&id))
}

/// Whether this member, holding `membership` and a log that ends at
/// `ours`, hears `candidate` ask for its vote with a log that ends at
/// `theirs` (`CELL-9`): a voter of the newest configuration it knows (the
/// new one while a change is joint), or a voter of the old one only that
/// holds entries this member lacks, unless a leader of the newest
/// configuration has been heard from within the election timeout (`led`).
///
/// The old-half voter is heard for a cell that has no other way to finish
/// the change; once a leader of the newest configuration runs, it would
/// only take votes that depose that leader: openraft orders the votes of
/// one term by member id, so a vote given to the removed member outranks
/// the leader's in its own term, and the leader steps down at its next
/// append here, before it can bring this member up to date.
///
/// A member removed (still running) or not yet added would otherwise
/// depose the master with every request, for a vote no configuration
/// counts. And once a removal is committed, a voter that still holds the
/// joint configuration must not give its vote to the removed member: the
/// members that hold the new configuration refuse it, so it can never win,
/// yet each higher term it asks at would take that vote from every
/// rightful candidate, and the cell would have no master at all. While the
/// change is still joint, though, the member being removed may be the one
/// that holds entries the others lack, and then only it can be elected
/// and finish the change: it is heard.
pub(crate) fn may_campaign(
    membership: &openraft::Membership<NodeId, BasicNode>,
    candidate: NodeId,
    theirs: Option<&openraft::LogId<NodeId>>,
    ours: Option<&openraft::LogId<NodeId>>,
    led: bool,
) -> bool {
    let configs = membership.get_joint_config();
    let newest = configs
        .last()
        .is_some_and(|voters| voters.contains(&candidate));
    let older = configs.iter().any(|voters| voters.contains(&candidate));
    newest || (older && theirs > ours && !led)
}

/// Makes the connections openraft asks for.
#[derive(Clone)]
pub struct CellNetwork {
    cell: String,
    secret: Option<String>,
    me: NodeId,
    dialer: Arc<dyn Dialer>,
    lease: Arc<MasterLease>,
    reach: Arc<Reach>,
}

/// Which members this one could not reach at its last call, so that an
/// operator reads one line when a member becomes unreachable and one when
/// it is back, not one per retry (openraft's own account is at DEBUG).
#[derive(Debug, Default)]
struct Reach {
    unreachable: std::sync::Mutex<std::collections::BTreeSet<NodeId>>,
}

impl Reach {
    /// Notes how the last call to `member` went.
    fn called(&self, member: NodeId, failed: Option<&CallError>) {
        let mut unreachable = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        match failed {
            Some(e) if unreachable.insert(member) => {
                let reason = e.reason();
                tracing::warn!(member, "member {member} is unreachable: {reason}");
            }
            None if unreachable.remove(&member) => {
                tracing::warn!(member, "member {member} is reachable again");
            }
            _ => {}
        }
    }
}

impl CellNetwork {
    /// Connections from member `me` of `cell`, whose acknowledgements
    /// keep `lease`.
    pub fn new(
        cell: impl Into<String>,
        me: NodeId,
        dialer: Arc<dyn Dialer>,
        lease: Arc<MasterLease>,
    ) -> Self {
        CellNetwork {
            cell: cell.into(),
            secret: None,
            me,
            dialer,
            lease,
            reach: Arc::default(),
        }
    }

    /// Presents `secret` to the other members (`CELL-4`).
    pub fn with_secret(mut self, secret: Option<String>) -> Self {
        self.secret = secret;
        self
    }
}

impl RaftNetworkFactory<CellTypes> for CellNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            hello: PeerHello {
                cell: self.cell.clone(),
                from: self.me,
                to: target,
                secret: self.secret.clone(),
            },
            addr: node.addr.clone(),
            dialer: self.dialer.clone(),
            lease: self.lease.clone(),
            reach: self.reach.clone(),
            conn: None,
        }
    }
}

/// One connection to one member.
pub struct PeerClient {
    hello: PeerHello,
    addr: String,
    dialer: Arc<dyn Dialer>,
    lease: Arc<MasterLease>,
    reach: Arc<Reach>,
    conn: Option<Framed<Box<dyn PeerStream>, FrameCodec>>,
}

/// Why a call to a peer got no answer.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("cannot reach member {0}: {1}")]
    Unreachable(NodeId, io::Error),
    #[error("member {0} went silent: {1}")]
    Lost(NodeId, String),
}

impl CallError {
    /// Why, without naming the member.
    fn reason(&self) -> String {
        match self {
            CallError::Unreachable(_, e) => e.to_string(),
            CallError::Lost(_, why) => format!("it went silent: {why}"),
        }
    }
}

impl PeerClient {
    async fn exchange(&mut self, request: &PeerRequest) -> Result<PeerResponse, CallError> {
        let target = self.hello.to;
        if self.conn.is_none() {
            let stream = self
                .dialer
                .dial(&self.addr)
                .await
                .map_err(|e| CallError::Unreachable(target, e))?;
            let mut framed = Framed::new(stream, codec());
            framed
                .send(self.hello.frame())
                .await
                .map_err(|e| CallError::Unreachable(target, e))?;
            self.conn = Some(framed);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let lost = |e: String| CallError::Lost(target, e);
        conn.send(Bytes::from(encode(request)))
            .await
            .map_err(|e| lost(e.to_string()))?;
        let frame = conn
            .next()
            .await
            .ok_or_else(|| lost("the connection closed".into()))?
            .map_err(|e| lost(e.to_string()))?;
        match decode(&frame).map_err(lost)? {
            PeerResponse::Refused(reason) => Err(lost(format!("refused: {reason}"))),
            response => Ok(response),
        }
    }

    /// Sends `request` and waits at most `option`'s deadline for the
    /// answer. A connection that failed is dropped, to be made again.
    async fn call<E: std::error::Error>(
        &mut self,
        request: PeerRequest,
        option: &RPCOption,
    ) -> Result<PeerResponse, RPCError<NodeId, BasicNode, E>> {
        let answered = tokio::time::timeout(option.hard_ttl(), self.exchange(&request)).await;
        let failed = match answered {
            Ok(Ok(response)) => {
                self.reach.called(self.hello.to, None);
                return Ok(response);
            }
            Ok(Err(e)) => e,
            Err(_) => CallError::Lost(self.hello.to, "no answer in time".into()),
        };
        self.reach.called(self.hello.to, Some(&failed));
        self.conn = None;
        Err(match failed {
            e @ CallError::Unreachable(..) => RPCError::Unreachable(Unreachable::new(&e)),
            e @ CallError::Lost(..) => RPCError::Network(NetworkError::new(&e)),
        })
    }

    fn unexpected<E: std::error::Error>(&self) -> RPCError<NodeId, BasicNode, E> {
        let e = CallError::Lost(self.hello.to, "answered another request".into());
        RPCError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<CellTypes> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<CellTypes>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let (vote, sent) = (rpc.vote, tokio::time::Instant::now());
        match self.call(PeerRequest::Append(rpc), &option).await? {
            PeerResponse::Append(answer) => {
                let answer = answer
                    .map_err(|e| RPCError::RemoteError(RemoteError::new(self.hello.to, e)))?;
                // Any answer but a higher vote means the member took this
                // leader's request, and its lease with it (CELL-6).
                if !matches!(answer, AppendEntriesResponse::HigherVote(_)) {
                    self.lease.acked(self.hello.to, &vote, sent);
                }
                Ok(answer)
            }
            _ => Err(self.unexpected()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<CellTypes>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let (vote, sent) = (rpc.vote, tokio::time::Instant::now());
        match self.call(PeerRequest::Snapshot(rpc), &option).await? {
            PeerResponse::Snapshot(answer) => {
                let answer = answer
                    .map_err(|e| RPCError::RemoteError(RemoteError::new(self.hello.to, e)))?;
                if answer.vote == vote {
                    self.lease.acked(self.hello.to, &vote, sent);
                }
                Ok(answer)
            }
            _ => Err(self.unexpected()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(PeerRequest::Vote(rpc), &option).await? {
            PeerResponse::Vote(answer) => {
                answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.hello.to, e)))
            }
            _ => Err(self.unexpected()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::{BasicNode, CommittedLeaderId, LogId, Membership};

    use super::may_campaign;
    use crate::cell::NodeId;

    fn membership(configs: &[&[NodeId]]) -> Membership<NodeId, BasicNode> {
        let configs: Vec<BTreeSet<NodeId>> = configs
            .iter()
            .map(|voters| voters.iter().copied().collect())
            .collect();
        let nodes: BTreeMap<NodeId, BasicNode> = configs
            .iter()
            .flatten()
            .map(|id| (*id, BasicNode::new(format!("127.0.0.1:{id}"))))
            .collect();
        Membership::new(configs, nodes)
    }

    fn at(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn heard(membership: &Membership<NodeId, BasicNode>, candidate: NodeId) -> bool {
        may_campaign(
            membership,
            candidate,
            at(2, 7).as_ref(),
            at(2, 7).as_ref(),
            false,
        )
    }

    // CELL-9
    #[test]
    fn a_voter_may_ask_for_votes() {
        assert!(heard(&membership(&[&[1, 2, 3]]), 2));
    }

    // CELL-9: not even with a longer log.
    #[test]
    fn a_member_outside_the_configuration_may_not_ask_for_votes() {
        let cell = membership(&[&[1, 2, 3]]);
        assert!(!heard(&cell, 4));
        assert!(!may_campaign(
            &cell,
            4,
            at(3, 9).as_ref(),
            at(2, 7).as_ref(),
            false
        ));
    }

    // CELL-9: the voter being removed may not depose the master, nor take
    // the votes of members that have not yet heard the removal committed.
    #[test]
    fn during_a_removal_the_removed_voter_may_not_ask_for_votes() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 2, 4]]);
        assert!(!heard(&joint, 3));
        for id in [1, 2, 4] {
            assert!(heard(&joint, id), "voter {id} of both");
        }
    }

    // CELL-9: while the change is joint, the member being removed may hold
    // entries no other survivor has; only it can then finish the change.
    #[test]
    fn during_a_removal_the_removed_voter_with_entries_others_lack_is_heard() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 2, 3]]);
        assert!(may_campaign(
            &joint,
            4,
            at(2, 8).as_ref(),
            at(2, 7).as_ref(),
            false
        ));
        assert!(may_campaign(
            &joint,
            4,
            at(3, 7).as_ref(),
            at(2, 7).as_ref(),
            false
        ));
        assert!(!may_campaign(
            &joint,
            4,
            at(2, 6).as_ref(),
            at(2, 7).as_ref(),
            false
        ));
    }

    // CELL-9
    #[test]
    fn during_an_addition_the_added_voter_may_ask_for_votes() {
        let joint = membership(&[&[1, 2, 3], &[1, 2, 3, 4]]);
        assert!(heard(&joint, 4));
    }

    // CELL-9: once a leader of the newest configuration has been heard
    // from, the removed voter's longer log no longer earns it a hearing:
    // its vote would only depose that leader before it brings this member
    // up to date (cell-membership seed 228).
    #[test]
    fn a_removed_voter_ahead_is_not_heard_while_a_leader_of_the_new_configuration_runs() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 2, 4]]);
        let (theirs, ours) = (at(2, 205), at(2, 204));
        assert!(may_campaign(
            &joint,
            3,
            theirs.as_ref(),
            ours.as_ref(),
            false
        ));
        assert!(!may_campaign(
            &joint,
            3,
            theirs.as_ref(),
            ours.as_ref(),
            true
        ));
        assert!(
            may_campaign(&joint, 2, theirs.as_ref(), ours.as_ref(), true),
            "a voter of both"
        );
    }
}
