//! Raft traffic between members (SPEC `CELL-4`): frames of a 4-byte
//! big-endian length and a body, on the same port clients use. A peer's
//! first frame starts with `LHCELL03`, which no client's `Hello` can (a
//! client's first byte is a message kind, 0), then names the cell, the
//! two members and the sender's longest election timeout; a member answers
//! only a peer of its own cell that addresses it by its id, so two cells on
//! one machine never mix, and whose master lease cannot outlast this
//! member's refusal window (`CELL-6`), so members whose timers would let
//! it never form one cell.
//!
//! Each member keeps one connection per (target, purpose) openraft asks
//! for, made when first used and again after any failure; requests on it
//! go one at a time, each bounded by the deadline openraft gives.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
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
use super::rounds::Outstood;
use super::{CellTypes, NodeId};
use crate::codec::{decode, encode};
pub use crate::config::MAX_PEER_FRAME;
use crate::config::SHOWN_CHARS;
use leasehold_protocol::excerpt;

/// The first bytes of a peer's first frame.
pub const PEER_MAGIC: &[u8; 8] = b"LHCELL03";

/// The first bytes of the first frame of a member of an earlier version,
/// whose hello says nothing of its timers: that version's election
/// timeouts were 250-500 ms, a master lease of 495 ms that followers
/// refusing rivals for 300 ms would not cover.
pub const EARLIER_PEER_MAGIC: &[u8; 8] = b"LHCELL02";

/// Why a member of an earlier version is refused.
pub const EARLIER_PEER_REFUSAL: &str =
    "this member runs a later Leasehold, with shorter election timeouts than the earlier \
     version's 250-500 ms: the two versions never form one cell (CELL-6); upgrade every \
     member, and the cell moves to the later ones once they are a majority";

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
    /// A connection to member `to`, which the configuration says is at
    /// `addr`. A dialer that can tell who answered (TLS, `CELL-11`) must
    /// fail unless it is `to`.
    fn dial(&self, addr: &str, to: NodeId) -> DialFuture;
}

/// Dials over TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpDialer;

impl Dialer for TcpDialer {
    fn dial(&self, addr: &str, _to: NodeId) -> DialFuture {
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
    /// The sender's longest election timeout, in microseconds of its own
    /// clock: the length of its master lease, before the drift allowance.
    pub election_max_us: u64,
}

impl std::fmt::Debug for PeerHelloSecret<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "<secret>" } else { "none" })
    }
}

/// A secret as logs show it: whether there is one.
struct PeerHelloSecret<'a>(&'a Option<String>);

pub(super) fn same_secret(given: &Option<String>, mine: &Option<String>) -> bool {
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
            .field("cell", &excerpt(&self.cell, SHOWN_CHARS))
            .field("from", &self.from)
            .field("to", &self.to)
            .field("secret", &PeerHelloSecret(&self.secret))
            .field("election_max_us", &self.election_max_us)
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

    /// Whether a leader with this hello's timers could hold its master
    /// lease past the time a follower whose longest election timeout is
    /// set to `mine` refuses rivals after hearing it (`CELL-6`). The
    /// lease's drift allowance is for two clocks running one setting at
    /// rates up to 1% apart; a longer setting would spend it, so any is
    /// refused.
    pub(crate) fn lease_outlasts(&self, mine: Duration) -> bool {
        Duration::from_micros(self.election_max_us) > mine
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

/// Makes the connections openraft asks for.
#[derive(Clone)]
pub struct CellNetwork {
    cell: String,
    secret: Option<String>,
    me: NodeId,
    dialer: Arc<dyn Dialer>,
    lease: Arc<MasterLease>,
    reach: Arc<Reach>,
    outstood: Outstood,
    /// This member's longest election timeout, told to every peer.
    election_max: Duration,
    /// How long the engine waits to call a member again after finding it
    /// unreachable (`CELL-5`).
    retry: Duration,
}

/// Which members this one could not reach at its last call, so that an
/// operator reads one line when a member becomes unreachable and one when
/// it is back, not one per retry (openraft's own account, off unless
/// `RUST_LOG` names it, is several lines per failed call, a call every
/// heartbeat, `CELL-5`).
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
                tracing::info!(member, "member {member} is reachable again");
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
            outstood: Outstood::default(),
            election_max: super::Timing::default().election_max,
            retry: super::Timing::default().heartbeat,
        }
    }

    /// Calls a member found unreachable again after `retry`, its
    /// heartbeat (`CELL-5`).
    pub fn with_retry(mut self, retry: Duration) -> Self {
        self.retry = retry;
        self
    }

    /// Tells peers this member's longest election timeout (`CELL-6`).
    pub fn with_election_max(mut self, election_max: Duration) -> Self {
        self.election_max = election_max;
        self
    }

    /// Where this member's vote requests note a refusal by a member whose
    /// log ends at or past this one's (`CELL-9`).
    pub(crate) fn outstood(&self) -> Outstood {
        self.outstood.clone()
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
                election_max_us: self.election_max.as_micros() as u64,
            },
            addr: node.addr.clone(),
            dialer: self.dialer.clone(),
            lease: self.lease.clone(),
            reach: self.reach.clone(),
            outstood: self.outstood.clone(),
            retry: self.retry,
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
    outstood: Outstood,
    retry: Duration,
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
                .dial(&self.addr, target)
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
        // An earlier version takes this version's hello for a client's and
        // answers as a master answers one; its answer is no peer response.
        let unreadable = |e: String| {
            lost(format!(
                "its answer is no peer response this version reads ({e}): it may run an \
                 earlier Leasehold, which never forms one cell with this one (CELL-4)"
            ))
        };
        match decode(&frame).map_err(unreadable)? {
            // Whatever answers there may send anything: a log line shows
            // only the start of it (`CELL-4`).
            PeerResponse::Refused(reason) => Err(lost(format!(
                "refused: {}",
                excerpt(&reason, SHOWN_CHARS * 4)
            ))),
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
    /// Once a member is found unreachable, the engine waits this long
    /// before each call to it until one succeeds: a heartbeat, not the
    /// engine's default 500 ms (`CELL-5`). A member that starts again
    /// stands 400-600 ms after its Raft starts unless a leader reaches it
    /// first (its vote is dated to the start); reached later, its higher
    /// term deposes the master serving, and the round it loses to a longer
    /// log adds twice the longest election timeout to its next election.
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.retry))
    }

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
        let ours = rpc.last_log_id;
        match self.call(PeerRequest::Vote(rpc), &option).await? {
            PeerResponse::Vote(answer) => {
                if let Ok(refused) = &answer {
                    if !refused.vote_granted && refused.last_log_id >= ours {
                        let now = tokio::time::Instant::now();
                        self.outstood.note(self.hello.to, now, ours);
                    }
                }
                answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.hello.to, e)))
            }
            _ => Err(self.unexpected()),
        }
    }
}
