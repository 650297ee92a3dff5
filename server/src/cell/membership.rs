//! Changing who the cell's members are (SPEC `CELL-9`), for `leasehold
//! cell add` and `leasehold cell remove`: through the engine's joint
//! consensus, so that no moment has two majorities that do not overlap.
//!
//! The asker's first frame is `LHMEMB01`, the second an encoded
//! [`ChangeRequest`]; the member answers one [`ChangeReply`] and closes.
//! Only the leader changes the membership; any other member names it. A
//! member to add must be running, started with `--join` so that it waits
//! to be added rather than founding a cell of its own; it first catches
//! up as a learner (from a snapshot if the log was purged past what it
//! has), and only then becomes a voter.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use openraft::{BasicNode, ChangeMembers, ServerState};
use serde::{Deserialize, Serialize};
use tokio_util::codec::Framed;

use super::frame::FrameCodec;
use super::member::Member;
use super::network::{codec, Served};
use super::status::not_a_member;
use super::NodeId;
use crate::codec::{decode, encode};
use crate::config::{CATCH_UP, MAX_MEMBERSHIP_REQUEST, MEMBERSHIP_COMMIT, SHOWN_CHARS};
use leasehold_protocol::excerpt;

/// The first frame of a membership change.
pub const MEMBERSHIP_MAGIC: &[u8; 8] = b"LHMEMB01";

/// A change to the cell's members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// Member `id`, which the others reach at `addr`, joins as a voter.
    Add { id: NodeId, addr: String },
    /// Member `id` leaves the cell.
    Remove { id: NodeId },
}

/// What the asker sends after the magic.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRequest {
    pub change: Change,
    /// The operator's right to change the members (`CELL-10`): the
    /// operator token if the members have one, otherwise the cell's
    /// secret. (Earlier versions named this field `operator_token`; the
    /// bytes are the same.)
    pub credential: Option<String>,
}

impl std::fmt::Debug for ChangeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeRequest")
            .field("change", &self.change)
            .field("credential", &self.credential.as_ref().map(|_| "<given>"))
            .finish()
    }
}

/// What a member asks of a membership change (`CELL-10`).
#[derive(Clone, Copy)]
pub(crate) enum Right<'a> {
    /// The operator token the members were started with.
    OperatorToken(&'a str),
    /// The cell's secret, in a cell with no operator token.
    CellSecret(&'a str),
    /// Neither: nobody can show the right, so every change is refused.
    Nobody,
}

impl<'a> Right<'a> {
    /// What a change must present, in words.
    fn needed(self) -> &'static str {
        match self {
            Right::OperatorToken(_) => {
                "changing the cell's members needs the operator token (--operator-token-file)"
            }
            Right::CellSecret(_) => {
                "changing the cell's members needs the cell's secret (--cell-secret-file), as \
                 this cell has no operator token"
            }
            Right::Nobody => "nobody may change the members of this cell",
        }
    }

    /// The right a member with operator token `token` and cell secret
    /// `secret` asks for.
    pub(crate) fn of(token: Option<&'a str>, secret: Option<&'a str>) -> Self {
        // An empty token or secret shows nothing: it is no right.
        let (token, secret) = (
            token.filter(|t| !t.is_empty()),
            secret.filter(|s| !s.is_empty()),
        );
        match (token, secret) {
            (Some(token), _) => Right::OperatorToken(token),
            (None, Some(secret)) => Right::CellSecret(secret),
            (None, None) => Right::Nobody,
        }
    }

    /// Why `given` does not show this right, if it does not. The message
    /// never repeats what was given.
    fn refusal(self, given: Option<&str>) -> Option<String> {
        // Nothing given shows no right, whatever the member holds.
        let given = given.filter(|g| !g.is_empty()).map(str::as_bytes);
        let given = match (given, self) {
            (_, Right::Nobody) | (Some(_), _) => given.unwrap_or_default(),
            (None, _) => {
                return Some(format!("{} (none was presented)", self.needed()));
            }
        };
        match self {
            Right::OperatorToken(token) if !constant_time_eq(given, token.as_bytes()) => {
                Some(format!("{} (the one presented is not it)", self.needed()))
            }
            Right::CellSecret(secret) if !constant_time_eq(given, secret.as_bytes()) => {
                Some(format!("{} (the one presented is not it)", self.needed()))
            }
            Right::Nobody => Some(
                "this cell has neither an operator token nor a secret, so nobody can show the \
                 right to change its members: start the members with --operator-token-file or \
                 --cell-secret-file"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// How a change went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeReply {
    /// The change is committed (or there was nothing to change): the
    /// voters and every member's address now.
    Done {
        voters: BTreeSet<NodeId>,
        members: BTreeMap<NodeId, String>,
    },
    /// This member does not lead the cell; ask the one at `leader`, if it
    /// knows of one.
    NotLeader { leader: Option<String> },
    /// Refused, and refused again if repeated: a wrong operator token, or
    /// a change that would leave the cell with no voter.
    Refused(String),
    /// The engine did not carry it through in time (no quorum, a new
    /// member that could not be reached): it may have been done in part;
    /// look with `cell status` and try again.
    Failed(String),
}

/// Whether `given` is `secret`, in time that depends on `given`'s length
/// alone: neither the secret's bytes nor its length show in it.
fn constant_time_eq(given: &[u8], secret: &[u8]) -> bool {
    let mut differ = u8::from(given.len() != secret.len());
    for (i, g) in given.iter().enumerate() {
        let s = secret.get(i % secret.len().max(1)).copied().unwrap_or(0);
        differ |= g ^ s;
    }
    differ == 0
}

/// Answers a membership change on `framed` as `member`, which asks for
/// `right`, and closes. The request must have come by `by`, the end of
/// the connection's handshake time: a slot is not held for a silent asker.
pub(crate) async fn answer<S: Served>(
    mut framed: Framed<S, FrameCodec>,
    member: &Member,
    right: Right<'_>,
    by: tokio::time::Instant,
) {
    framed
        .codec_mut()
        .set_max_frame_length(MAX_MEMBERSHIP_REQUEST);
    let Ok(Some(Ok(frame))) = tokio::time::timeout_at(by, framed.next()).await else {
        return;
    };
    let reply = match decode::<ChangeRequest>(&frame) {
        Ok(request) => change(member, right, request).await,
        Err(e) => ChangeReply::Refused(format!("the request does not decode: {e}")),
    };
    let _ = framed.send(Bytes::from(encode(&reply))).await;
}

/// Carries `request` through on `member` if it shows `right`.
pub(crate) async fn change(
    member: &Member,
    right: Right<'_>,
    request: ChangeRequest,
) -> ChangeReply {
    if let Some(refusal) = right.refusal(request.credential.as_deref()) {
        return ChangeReply::Refused(refusal);
    }
    let m = member.raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        let leader = m.current_leader.and_then(|l| {
            let node = m.membership_config.membership().get_node(&l);
            node.map(|n| n.addr.clone())
                .or_else(|| member.config.members.get(&l).cloned())
        });
        return ChangeReply::NotLeader { leader };
    }
    let membership = m.membership_config.membership().clone();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let raft = &member.raft;
    if shows(&membership, &request.change) {
        // `Done` with nothing changed only from a configuration that is
        // one and committed, confirmed by a quorum now.
        let now = if member.config.broken.done_unsettled {
            Some(membership.clone())
        } else {
            settled(member).await
        };
        match now {
            Some(now) if shows(&now, &request.change) => {}
            Some(_) => {
                return ChangeReply::Failed(
                    "the members changed while this was asked: ask again".into(),
                )
            }
            None => {
                // A joint change a crashed master left is finished here,
                // to its newest configuration; one not yet committed is
                // refused by the engine as under way.
                let newest = newest_voters(&membership);
                if let Err(e) = commit(member, ChangeMembers::ReplaceAllVoters(newest)).await {
                    return e;
                }
            }
        }
    } else {
        match request.change {
            Change::Add { id, addr } => {
                let learner = tokio::time::timeout(
                    CATCH_UP,
                    raft.add_learner(id, BasicNode::new(&addr), true),
                )
                .await;
                match learner {
                    // The engine calls a learner caught up when its lag is
                    // under a threshold, which a short log always is: wait
                    // until it holds the entry that made it a learner.
                    Ok(Ok(added)) => {
                        if !holds(member, id, added.log_id.index).await {
                            return ChangeReply::Failed(format!(
                                "member {id} took no entry within {CATCH_UP:?}: is it running \
                                 with --join and the cell's secret, reachable at {}? It \
                                 stays a learner until `cell remove {id}`",
                                excerpt(&addr, SHOWN_CHARS)
                            ));
                        }
                    }
                    Ok(Err(e)) => return ChangeReply::Failed(e.to_string()),
                    Err(_) => {
                        return ChangeReply::Failed(format!(
                            "member {id} did not catch up within {CATCH_UP:?}: is it running \
                             with --join, reachable at {}?",
                            excerpt(&addr, SHOWN_CHARS)
                        ))
                    }
                }
                let ids = BTreeSet::from([id]);
                if let Err(e) = commit(member, ChangeMembers::AddVoterIds(ids)).await {
                    return e;
                }
            }
            Change::Remove { id } => {
                if voters.len() == 1 && voters.contains(&id) {
                    return ChangeReply::Refused(format!(
                        "member {id} is the cell's only voter: a cell needs one"
                    ));
                }
                let ids = BTreeSet::from([id]);
                // A learner (added, never caught up) has no vote to take:
                // it leaves the nodes directly.
                let change = if voters.contains(&id) {
                    ChangeMembers::RemoveVoters(ids)
                } else {
                    ChangeMembers::RemoveNodes(ids)
                };
                if let Err(e) = commit(member, change).await {
                    return e;
                }
            }
        }
    }
    let m = member.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    ChangeReply::Done {
        voters: membership.voter_ids().collect(),
        members: membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect(),
    }
}

/// The voters of the newest configuration in `membership`: the new one
/// while a change is joint.
fn newest_voters(membership: &openraft::Membership<NodeId, BasicNode>) -> BTreeSet<NodeId> {
    membership
        .get_joint_config()
        .last()
        .cloned()
        .unwrap_or_default()
}

/// The membership this member holds, if it still leads, by a quorum asked
/// now, and that membership is one configuration, committed: only then
/// may a change it already shows be answered `Done` without a commit. A master
/// restarted as leader of its old term holds the joint configuration it
/// proposed before it crashed, which nobody may have taken; answering from
/// it told the operator a member was added that never was (`cell-removal-
/// crash` seed 5001668).
async fn settled(member: &Member) -> Option<openraft::Membership<NodeId, BasicNode>> {
    let asked = tokio::time::timeout(MEMBERSHIP_COMMIT, member.raft.ensure_linearizable()).await;
    if !matches!(asked, Ok(Ok(_))) {
        return None;
    }
    let m = member.raft.metrics().borrow().clone();
    is_settled(&m.membership_config, m.last_applied.as_ref())
        .then(|| m.membership_config.membership().clone())
}

/// Whether `membership` already shows `change` done: the member added is
/// a voter of its newest configuration, the member removed is in none.
fn shows(membership: &openraft::Membership<NodeId, BasicNode>, change: &Change) -> bool {
    match change {
        Change::Add { id, .. } => newest_voters(membership).contains(id),
        Change::Remove { id } => membership.get_node(id).is_none(),
    }
}

/// Whether `stored` is one configuration whose entry is applied by
/// `applied`, so committed.
fn is_settled(
    stored: &openraft::StoredMembership<NodeId, BasicNode>,
    applied: Option<&openraft::LogId<NodeId>>,
) -> bool {
    stored.membership().get_joint_config().len() == 1 && stored.log_id().as_ref() <= applied
}

/// Whether member `id` came to hold the log up to `index`, by the
/// leader's replication metrics, within [`CATCH_UP`].
async fn holds(member: &Member, id: NodeId, index: u64) -> bool {
    let mut metrics = member.raft.metrics();
    let caught_up = async {
        loop {
            let matched = metrics
                .borrow_and_update()
                .replication
                .as_ref()
                .and_then(|r| r.get(&id).copied().flatten());
            if matched.is_some_and(|m| m.index >= index) {
                return true;
            }
            if metrics.changed().await.is_err() {
                return false;
            }
        }
    };
    tokio::time::timeout(CATCH_UP, caught_up)
        .await
        .unwrap_or(false)
}

/// Commits `changes` through a joint configuration; a removed member
/// leaves the membership altogether.
async fn commit(
    member: &Member,
    changes: ChangeMembers<NodeId, BasicNode>,
) -> Result<(), ChangeReply> {
    match tokio::time::timeout(
        MEMBERSHIP_COMMIT,
        member.raft.change_membership(changes, false),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(ChangeReply::Failed(e.to_string())),
        Err(_) => Err(ChangeReply::Failed(format!(
            "the new configuration did not commit within {MEMBERSHIP_COMMIT:?}"
        ))),
    }
}

/// Asks the member at `addr` for `request`, over TCP.
pub async fn request(addr: &str, request: &ChangeRequest) -> std::io::Result<ChangeReply> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    request_on(stream, request).await
}

/// Asks the member at the other end of `stream` for `request`.
pub async fn request_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: S,
    request: &ChangeRequest,
) -> std::io::Result<ChangeReply> {
    let mut framed = Framed::new(stream, codec());
    framed.send(Bytes::from_static(MEMBERSHIP_MAGIC)).await?;
    framed.send(Bytes::from(encode(request))).await?;
    let frame = framed
        .next()
        .await
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))??;
    decode(&frame).map_err(|_| not_a_member())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, StoredMembership};

    use super::{is_settled, shows, Change, Right};
    use crate::cell::tests::membership_of;
    use crate::cell::NodeId;

    fn at(index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn stored(configs: &[&[NodeId]], index: u64) -> StoredMembership<NodeId, BasicNode> {
        StoredMembership::new(Some(at(index)), membership_of(configs))
    }

    // CELL-9: a change already shown is `Done` only from one configuration
    // that is applied, so committed.
    #[test]
    fn only_an_applied_single_configuration_is_settled() {
        assert!(is_settled(&stored(&[&[1, 2, 3]], 90), Some(&at(93))));
        assert!(is_settled(&stored(&[&[1, 2, 3]], 93), Some(&at(93))));
    }

    // CELL-9: cell-removal-crash seed 5001668: a master restarted as
    // leader of its old term holds the joint configuration it proposed at
    // 94 and has applied only 93; it must not say the member was added.
    #[test]
    fn a_configuration_not_yet_applied_is_not_settled() {
        assert!(!is_settled(&stored(&[&[1, 2, 3, 4]], 94), Some(&at(93))));
        assert!(!is_settled(&stored(&[&[1, 2, 3]], 1), None));
    }

    /// `configs`, with `learners` beside their voters.
    fn membership(configs: &[&[NodeId]], learners: &[NodeId]) -> Membership<NodeId, BasicNode> {
        let voting = membership_of(configs);
        let mut nodes: BTreeMap<NodeId, BasicNode> = voting
            .nodes()
            .map(|(id, node)| (*id, node.clone()))
            .collect();
        for id in learners {
            nodes.insert(*id, BasicNode::new(format!("m{id}:7171")));
        }
        Membership::new(voting.get_joint_config().clone(), nodes)
    }

    fn add(id: NodeId) -> Change {
        Change::Add {
            id,
            addr: format!("m{id}:7171"),
        }
    }

    // CELL-9: an addition is shown done once the member votes in the
    // newest configuration; a learner, or a voter of the old half only,
    // is not added yet.
    #[test]
    fn an_addition_is_shown_by_a_voter_of_the_newest_configuration() {
        assert!(shows(&membership(&[&[1, 2, 3, 4]], &[]), &add(4)));
        assert!(shows(
            &membership(&[&[1, 2, 3], &[1, 2, 3, 4]], &[]),
            &add(4)
        ));
        assert!(!shows(&membership(&[&[1, 2, 3]], &[4]), &add(4)));
        assert!(!shows(
            &membership(&[&[1, 2, 3, 4], &[1, 2, 3]], &[]),
            &add(4)
        ));
    }

    // CELL-9: a removal is shown done once the member is in no
    // configuration and no longer a learner either.
    #[test]
    fn a_removal_is_shown_once_the_member_is_gone_from_every_configuration() {
        let remove = |id| Change::Remove { id };
        assert!(shows(&membership(&[&[1, 2, 4]], &[]), &remove(3)));
        assert!(!shows(
            &membership(&[&[1, 2, 3, 4], &[1, 2, 4]], &[]),
            &remove(3)
        ));
        assert!(!shows(&membership(&[&[1, 2, 4]], &[3]), &remove(3)));
    }

    // CELL-9: a joint configuration is a change under way, committed or not.
    #[test]
    fn a_joint_configuration_is_not_settled() {
        assert!(!is_settled(
            &stored(&[&[1, 2, 3], &[1, 2, 3, 4]], 94),
            Some(&at(95))
        ));
    }

    const TOKEN: &str = "the operator token, long enough";
    const SECRET: &str = "the cell's secret, long enough";

    // CELL-10: with an operator token, only it shows the right.
    #[test]
    fn with_an_operator_token_only_the_token_may_change_members() {
        let right = Right::of(Some(TOKEN), Some(SECRET));
        assert!(right.refusal(Some(TOKEN)).is_none());
        for given in [None, Some(SECRET), Some("")] {
            let refusal = right.refusal(given).expect("refused");
            assert!(refusal.contains("--operator-token-file"), "{refusal}");
        }
    }

    // CELL-10: without an operator token, the cell's secret shows it; a
    // change that presents nothing is refused.
    #[test]
    fn without_an_operator_token_the_cells_secret_may_change_members() {
        let right = Right::of(None, Some(SECRET));
        assert!(right.refusal(Some(SECRET)).is_none());
        for given in [None, Some(TOKEN), Some("")] {
            let refusal = right.refusal(given).expect("refused");
            assert!(refusal.contains("--cell-secret-file"), "{refusal}");
        }
    }

    // CELL-10: a cell with neither changes its members for nobody.
    #[test]
    fn a_cell_with_neither_token_nor_secret_changes_members_for_nobody() {
        let right = Right::of(None, None);
        for given in [None, Some(TOKEN), Some("")] {
            assert!(right.refusal(given).is_some());
        }
    }

    // CELL-10: an empty secret or token is no right, and a member asked
    // with nothing presented refuses whatever it holds.
    #[test]
    fn an_empty_secret_is_no_right_and_nothing_presented_is_refused() {
        assert!(Right::of(Some(""), Some("")).refusal(None).is_some());
        assert!(Right::of(None, Some("")).refusal(Some("")).is_some());
        for right in [Right::of(Some(TOKEN), None), Right::of(None, Some(SECRET))] {
            let refusal = right.refusal(None).expect("refused");
            assert!(refusal.contains("none was presented"), "{refusal}");
        }
    }

    // CELL-10: the comparison looks at what was given, whatever its length.
    #[test]
    fn a_credential_matches_only_when_it_is_the_secret_whole() {
        assert!(super::constant_time_eq(
            SECRET.as_bytes(),
            SECRET.as_bytes()
        ));
        for given in [&SECRET[..5], "", "the cell's secret, long enough!", "x"] {
            assert!(
                !super::constant_time_eq(given.as_bytes(), SECRET.as_bytes()),
                "{given}"
            );
        }
        assert!(!super::constant_time_eq(b"x", b""));
    }

    // CELL-10: a refusal never repeats what was given.
    #[test]
    fn a_refusal_does_not_repeat_the_credential_given() {
        let huge = "x".repeat(512 * 1024);
        for right in [Right::of(Some(TOKEN), None), Right::of(None, Some(SECRET))] {
            let refusal = right.refusal(Some(&huge)).expect("refused");
            assert!(refusal.len() < 200, "{} bytes", refusal.len());
        }
    }
}
