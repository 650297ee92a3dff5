//! What arrives on a member's port: the first frame says whether it is a
//! peer, a status query, a membership change or a client, and a peer's
//! Raft traffic is served here, votes under `CELL-9`'s rule.
//!
//! Above the member (`member.rs`), which knows nothing of who calls it.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use openraft::raft::VoteResponse;
use openraft::BasicNode;
use tokio_util::codec::Framed;

use super::frame::FrameCodec;
use super::member::Member;
use super::network::{self, same_secret, PeerHello, PeerRequest, PeerResponse, Served};
use super::NodeId;
use crate::codec::{decode, encode};
use crate::config::SHOWN_CHARS;
use leasehold_protocol::excerpt;

/// Reads a connection's first frame, refusing one longer than `max`
/// before reading it (a client's limit: both hellos are small), and, if
/// it is a peer's hello, returns the framed stream, now taking peer-sized
/// frames, and the hello; a client's first frame comes back as bytes, to
/// be served as a client's connection.
pub async fn first_frame<S: Served>(stream: S, max: usize) -> std::io::Result<FirstFrame<S>> {
    let mut codec = network::codec();
    codec.set_max_frame_length(max);
    let mut framed = Framed::new(stream, codec);
    let Some(first) = framed.next().await else {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    };
    let first: BytesMut = first?;
    match PeerHello::parse(&first) {
        _ if first[..] == super::status::STATUS_MAGIC[..] => Ok(FirstFrame::Status(framed)),
        _ if first[..] == super::membership::MEMBERSHIP_MAGIC[..] => {
            Ok(FirstFrame::Membership(framed))
        }
        Some(Ok(hello)) => {
            framed
                .codec_mut()
                .set_max_frame_length(network::MAX_PEER_FRAME);
            Ok(FirstFrame::Peer(framed, hello))
        }
        Some(Err(e)) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        None if first.starts_with(network::EARLIER_PEER_MAGIC) => {
            Ok(FirstFrame::EarlierPeer(framed))
        }
        None => Ok(FirstFrame::Client(framed, first)),
    }
}

/// What a connection's first frame said it is.
pub enum FirstFrame<S> {
    Peer(Framed<S, FrameCodec>, PeerHello),
    Client(Framed<S, FrameCodec>, BytesMut),
    /// A status query (`CELL-8`).
    Status(Framed<S, FrameCodec>),
    /// A membership change (`CELL-9`).
    Membership(Framed<S, FrameCodec>),
    /// A member of an earlier version, which is refused (`CELL-4`).
    EarlierPeer(Framed<S, FrameCodec>),
}

/// Tells a member of an earlier version why it is refused, in the answer
/// it reads: the refusal is one of its own peer responses.
pub async fn refuse_earlier_peer<S: Served>(mut framed: Framed<S, FrameCodec>) {
    tracing::debug!("a member of an earlier version refused");
    let refusal = PeerResponse::Refused(network::EARLIER_PEER_REFUSAL.to_string());
    if framed.send(Bytes::from(encode(&refusal))).await.is_err() {
        return;
    }
    // Closed with its request unread, the connection would be reset, and
    // the reset can discard the refusal before the peer reads it. What
    // arrives meanwhile is read and dropped, a frame at a time, up to the
    // linger's budget.
    let _ = tokio::time::timeout(crate::config::LINGER, async {
        let mut read = 0;
        while let Some(Ok(frame)) = framed.next().await {
            read += frame.len();
            if read > crate::config::LINGER_BYTES {
                break;
            }
        }
    })
    .await;
}

/// How often a refusal of one peer is logged at warning level.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(60);
/// Peers whose refusals are remembered; past it they are logged at debug
/// level alone, so that made-up ids cannot fill memory.
const MAX_REFUSALS_REMEMBERED: usize = 1024;

/// Whether a refusal of peer `from` is to be logged at warning level now,
/// and if so, notes that it is.
fn refusal_due(member: &Member, from: NodeId) -> bool {
    let now = tokio::time::Instant::now();
    let mut logged = member
        .refusals_logged
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let due = logged
        .get(&from)
        .is_none_or(|at| now.duration_since(*at) >= REFUSALS_LOGGED_EVERY);
    let room = logged.contains_key(&from) || logged.len() < MAX_REFUSALS_REMEMBERED;
    if due && room {
        logged.insert(from, now);
    }
    due && room
}

/// What proves who a peer is, besides the cell's secret in its hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Nothing: the member does not speak TLS.
    Plaintext,
    /// TLS verified the peer's certificate; this is the common name it
    /// carries, if any (`CELL-11`).
    Certificate(Option<String>),
}

/// Why the peer's certificate does not make it member `from` of the cell,
/// if it does not (`CELL-11`).
fn certificate_refusal(proof: &Proof, hello: &PeerHello, member: &Member) -> Option<String> {
    let Proof::Certificate(named) = proof else {
        return None;
    };
    let wanted = super::peer_tls::member_name(hello.from);
    if named.as_deref() != Some(wanted.as_str()) {
        let shown = named
            .as_deref()
            .map_or_else(|| "no name".to_string(), |n| excerpt(n, SHOWN_CHARS));
        return Some(format!(
            "the peer's certificate names {shown}, not {wanted}, the member it says it is"
        ));
    }
    let metrics = member.raft.metrics().borrow().clone();
    let known = metrics
        .membership_config
        .membership()
        .nodes()
        .any(|(id, _)| *id == hello.from);
    (!known).then(|| format!("member {} is not a member of this cell", hello.from))
}

/// Serves one peer's connection after its hello: each request goes to
/// this member's Raft, each answer back, until the peer hangs up. With
/// TLS, `proof` names the peer's certificate, which must be the member's
/// its hello says it is (`CELL-11`).
pub async fn serve<S: Served>(
    mut framed: Framed<S, FrameCodec>,
    hello: PeerHello,
    member: &Member,
    proof: Proof,
) {
    let (cell, secret, me) = (
        member.config.cell.as_str(),
        &member.config.secret,
        member.config.id,
    );
    let (raft, lease) = (&member.raft, &member.lease);
    let refusal = if let Some(why) = certificate_refusal(&proof, &hello, member) {
        Some(why)
    } else if !same_secret(&hello.secret, secret) {
        // Neither secret goes in the message.
        Some("the peer did not present this cell's secret".to_string())
    } else if hello.cell != cell {
        // The name the peer gave is cut short: a refusal and its log
        // line never repeat unbounded input.
        Some(format!(
            "this member belongs to cell {}, not {}",
            excerpt(cell, SHOWN_CHARS),
            excerpt(&hello.cell, SHOWN_CHARS)
        ))
    } else if hello.to != me {
        Some(format!("this member is {me}, not {}", hello.to))
    } else if hello.lease_outlasts(member.config.timing.announced()) {
        Some(format!(
            "member {} runs election timeouts up to {} ms, this member up to {} ms: its master \
             lease would outlast this member's refusal window, so they cannot form one cell \
             (CELL-5, CELL-6)",
            hello.from,
            hello.election_max_us / 1000,
            member.config.timing.announced().as_millis()
        ))
    } else {
        None
    };
    if let Some(reason) = refusal {
        if refusal_due(member, hello.from) {
            tracing::warn!(from = hello.from, %reason, "peer refused (said at most once a minute)");
        } else {
            tracing::debug!(from = hello.from, %reason, "peer refused");
        }
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
                let broken = member.config.broken;
                let ours = member.log.last_log_id();
                let voter = broken.hear_any_candidate
                    || may_campaign(
                        membership,
                        hello.from,
                        rpc.last_log_id.as_ref(),
                        ours.as_ref(),
                        led,
                    );
                tracing::debug!(
                    from = hello.from,
                    vote = %rpc.vote,
                    theirs = ?rpc.last_log_id,
                    ours = ?ours,
                    led,
                    configs = ?membership.get_joint_config(),
                    heard = voter,
                    "vote request"
                );
                let theirs = rpc.last_log_id;
                if voter {
                    let vote = rpc.vote;
                    let answer = raft.vote(rpc).await.map(|mut answer| {
                        if !answer.vote_granted {
                            answer.last_log_id =
                                refusal_log(membership, me, answer.last_log_id, theirs);
                        }
                        answer
                    });
                    // A vote given to a rival ends this member's master
                    // lease, and leaves only once the master has stopped,
                    // however late the member would notice that it no
                    // longer leads (CELL-6); a master that does not stop
                    // in time costs the rival the vote. A request the
                    // engine refused (a rival behind in the log, or asking
                    // within the engine's leader lease) stops nothing.
                    let granted = answer.as_ref().is_ok_and(|a| a.vote_granted);
                    let stopped = !granted || broken.keep_lease_when_asked || {
                        lease.yield_to(&vote);
                        lease
                            .master_stopped(member.config.timing.election_max)
                            .await
                    };
                    if stopped {
                        PeerResponse::Vote(answer)
                    } else {
                        // The log may have grown while the master stopped.
                        let ours = member.log.last_log_id();
                        PeerResponse::Vote(Ok(vote_refused(m.vote, membership, me, ours, theirs)))
                    }
                } else {
                    // See `may_campaign`: a vote for it would never make a
                    // master, and a request must not depose one (CELL-9).
                    PeerResponse::Vote(Ok(vote_refused(m.vote, membership, me, ours, theirs)))
                }
            }
            PeerRequest::Snapshot(rpc) => PeerResponse::Snapshot(raft.install_snapshot(rpc).await),
        };
        if framed.send(Bytes::from(encode(&response))).await.is_err() {
            return;
        }
    }
}

/// A refused vote that names where this member's log ends, as the
/// engine's own refusals do (`CELL-9`). A candidate told of a longer log
/// during its election waits twice the longest election timeout on top of
/// its own timeout before it stands again; told
/// nothing, a candidate that can never win (the member being removed, a
/// log behind, whose timer runs shortest) would stand first in every
/// round, and each round's rightful candidate, asking in the same term,
/// would lose to its higher id (`cell-removal-crash` seed 5000629).
fn vote_refused(
    vote: openraft::Vote<NodeId>,
    membership: &openraft::Membership<NodeId, BasicNode>,
    me: NodeId,
    ours: Option<openraft::LogId<NodeId>>,
    theirs: Option<openraft::LogId<NodeId>>,
) -> VoteResponse<NodeId> {
    VoteResponse::new(vote, refusal_log(membership, me, ours, theirs), false)
}

/// Where a refusal says this member's log ends (`CELL-9`): where it does,
/// unless this member is a voter of no configuration it holds (removed,
/// or not yet added). Such a member never stands, so a log longer than
/// the candidate's, named, would only have the candidate wait twice the
/// longest election timeout for a rival that never comes. The removed
/// member held the change's last entries alone, and the one candidate able
/// to win waited in every round while a candidate behind it stood first in
/// the same term, taking the votes it needed: 7.7 s without a master
/// (`cell-removal-crash` seed 6000849 at 250-500 ms). A refusal that names
/// the candidate's own end tells it nothing to wait for.
fn refusal_log(
    membership: &openraft::Membership<NodeId, BasicNode>,
    me: NodeId,
    ours: Option<openraft::LogId<NodeId>>,
    theirs: Option<openraft::LogId<NodeId>>,
) -> Option<openraft::LogId<NodeId>> {
    let stands = membership
        .get_joint_config()
        .iter()
        .any(|voters| voters.contains(&me));
    if stands {
        ours
    } else {
        ours.min(theirs)
    }
}

/// A member this one heard from, and how long ago.
pub(crate) type Heard = Option<(NodeId, Duration)>;

/// Whether member `me`, holding `membership`, stands for election when
/// its leader goes silent (`CELL-9`): always as a voter of the newest
/// configuration; otherwise (the member being removed, still a voter of
/// the old half of a joint change) only once, for twice the longest
/// election timeout, no leader that is a voter of the newest
/// configuration has been heard (`led_by`: that leader, and how long ago)
/// and no such voter has refused this member's vote request holding a log
/// at least as long as its own (`outstood`: each refuser, and how long
/// ago).
///
/// Its candidacy would be refused anyway while such a leader runs, but it
/// would still cost the cell its master: standing raises the member's own
/// vote to a new term, and openraft orders the votes of one term by
/// member id, so when a rightful candidate of a lower id wins that same
/// term, this member rejects the new leader's first append with its own
/// higher vote, and the leader steps down. Round after round, the cell
/// had no master (`cell-membership` seed 920167). Kept from standing, it
/// stays a term behind, and the next leader's appends are taken.
///
/// With no leader running, a voter of the newest configuration whose log
/// is at least as long is a candidate at least as able to win, and will
/// stand; this member's rounds would only raise the term, which the
/// rightful candidates take on from its answers and from the voters it
/// asks, and each time their election timers start again
/// (`cell-removal-crash` seed 6000938). It may still stand once the
/// newest configuration's voters have been silent long enough: it may
/// then be the only member able to finish the change.
pub(crate) fn may_stand(
    membership: &openraft::Membership<NodeId, BasicNode>,
    me: NodeId,
    (led_by, outstood): (Heard, &[(NodeId, Duration)]),
    election_max: Duration,
) -> bool {
    let recent_rightful = |(voter, ago): (NodeId, Duration)| {
        ago < 2 * election_max && newest_voter(membership, voter)
    };
    newest_voter(membership, me)
        || !(led_by.is_some_and(recent_rightful) || outstood.iter().copied().any(recent_rightful))
}

/// Whether `id` is a voter of the newest configuration of `membership`.
pub(crate) fn newest_voter(
    membership: &openraft::Membership<NodeId, BasicNode>,
    id: NodeId,
) -> bool {
    let configs = membership.get_joint_config();
    configs.last().is_some_and(|voters| voters.contains(&id))
}

/// Whether this member, holding `membership` and a log that ends at
/// `ours`, hears `candidate` ask for its vote with a log that ends at
/// `theirs` (`CELL-9`): a voter of the newest configuration it knows (the
/// new one while a change is joint), or any other candidate that holds
/// entries this member lacks, unless a leader of the newest configuration
/// has been heard from within the election timeout (`led`).
///
/// A candidate ahead of this member may hold a configuration this member
/// has not taken yet. The member being added, when the master crashed as
/// the change turned joint, may be the only candidate left that can win:
/// refused, while its requests kept the one other candidate's timer from
/// running out, it left the cell with no master (`cell-removal-crash` seed
/// 5001668). The member being removed may likewise hold entries the others
/// lack, and then only it can finish the change.
///
/// Once a leader of the newest configuration runs, such a candidate would
/// only take votes that depose that leader: openraft orders the votes of
/// one term by member id, so a vote given to it outranks the leader's in
/// its own term, and the leader steps down at its next append here, before
/// it can bring this member up to date. A member removed (still running)
/// or not yet added would otherwise depose the master with every request,
/// for a vote no configuration counts. And one that is not ahead of this
/// member is refused even with no leader running: a removed member asking
/// at ever higher terms would take this vote from every rightful
/// candidate, and the cell would have no master at all.
pub(crate) fn may_campaign(
    membership: &openraft::Membership<NodeId, BasicNode>,
    candidate: NodeId,
    theirs: Option<&openraft::LogId<NodeId>>,
    ours: Option<&openraft::LogId<NodeId>>,
    led: bool,
) -> bool {
    let newest = membership
        .get_joint_config()
        .last()
        .is_some_and(|voters| voters.contains(&candidate));
    newest || (theirs > ours && !led)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use openraft::{BasicNode, CommittedLeaderId, LogId, Membership};

    use super::{may_campaign, may_stand, refusal_log};
    use crate::cell::tests::membership_of;
    use crate::cell::NodeId;

    fn membership(configs: &[&[NodeId]]) -> Membership<NodeId, BasicNode> {
        membership_of(configs)
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

    // CELL-9
    #[test]
    fn a_member_outside_the_configuration_may_not_ask_for_votes() {
        let cell = membership(&[&[1, 2, 3]]);
        assert!(!heard(&cell, 4));
        assert!(!may_campaign(
            &cell,
            4,
            at(2, 6).as_ref(),
            at(2, 7).as_ref(),
            false
        ));
    }

    // CELL-9: cell-removal-crash seed 5001668: m5's addition turned joint
    // as the master crashed; m2 never took the joint entry, and m5, ahead
    // of it, is a voter of a configuration m2 does not hold yet.
    #[test]
    fn a_member_outside_the_configuration_ahead_in_the_log_is_heard_while_no_leader_runs() {
        let cell = membership(&[&[1, 2]]);
        let (theirs, ours) = (at(3, 321), at(3, 320));
        assert!(may_campaign(
            &cell,
            5,
            theirs.as_ref(),
            ours.as_ref(),
            false
        ));
        assert!(!may_campaign(
            &cell,
            5,
            theirs.as_ref(),
            ours.as_ref(),
            true
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

    const ELECTION_MAX: Duration = Duration::from_millis(300);

    // CELL-9
    #[test]
    fn a_voter_of_the_newest_configuration_always_stands() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 2, 4]]);
        let led = Some((2, Duration::from_millis(10)));
        assert!(may_stand(&joint, 1, (led, &[]), ELECTION_MAX));
        assert!(may_stand(&joint, 4, (None, &[]), ELECTION_MAX));
    }

    // CELL-9: cell-membership seed 920167
    #[test]
    fn the_member_being_removed_does_not_stand_while_a_rightful_leader_is_heard() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 2, 4]]);
        let led = Some((2, Duration::from_millis(10)));
        assert!(!may_stand(&joint, 3, (led, &[]), ELECTION_MAX));
        // Heard long enough ago, it may stand: perhaps only it can finish
        // the change.
        let silent = Some((2, 2 * ELECTION_MAX));
        assert!(may_stand(&joint, 3, (silent, &[]), ELECTION_MAX));
        assert!(may_stand(&joint, 3, (None, &[]), ELECTION_MAX));
    }

    #[test]
    fn a_leader_outside_the_newest_configuration_does_not_keep_the_member_being_removed_down() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 2, 4]]);
        // Another member being removed, leading still, is not a leader a
        // finished change would keep.
        let three_removed = membership(&[&[1, 2, 3, 4, 5], &[1, 2, 4]]);
        assert!(may_stand(
            &joint,
            3,
            (Some((3, Duration::ZERO)), &[]),
            ELECTION_MAX
        ));
        assert!(may_stand(
            &three_removed,
            3,
            (Some((5, Duration::ZERO)), &[]),
            ELECTION_MAX
        ));
    }

    // CELL-9: cell-removal-crash seed 6000938
    #[test]
    fn the_member_being_removed_does_not_stand_after_a_rightful_voter_outstood_it() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 2, 4]]);
        let outstood = [(1, Duration::from_millis(10))];
        assert!(!may_stand(&joint, 3, (None, &outstood), ELECTION_MAX));
        // Long enough ago, it may stand: that voter may be gone.
        let long_ago = [(1, 2 * ELECTION_MAX)];
        assert!(may_stand(&joint, 3, (None, &long_ago), ELECTION_MAX));
        // A voter of the old half only is no rightful candidate, and does
        // not hide one that is.
        let old_half = membership(&[&[1, 2, 3, 4, 5], &[1, 2, 4]]);
        let both = [(1, Duration::ZERO), (5, Duration::ZERO)];
        assert!(may_stand(&old_half, 3, (None, &both[1..]), ELECTION_MAX));
        assert!(!may_stand(&old_half, 3, (None, &both), ELECTION_MAX));
        // A voter of the newest configuration stands whoever outstood it.
        assert!(may_stand(&joint, 4, (None, &outstood), ELECTION_MAX));
    }
    // CELL-9: a member that never stands does not have a candidate wait
    // for it.
    #[test]
    fn a_removed_member_ahead_in_the_log_names_the_candidates_end_in_a_refusal() {
        let removed = membership(&[&[1, 3, 4]]);
        assert_eq!(refusal_log(&removed, 2, at(2, 182), at(2, 181)), at(2, 181));
        assert_eq!(
            refusal_log(&removed, 2, at(2, 180), at(2, 181)),
            at(2, 180),
            "behind the candidate, it names its own end"
        );
    }

    #[test]
    fn a_voter_of_any_configuration_it_holds_names_its_own_end_in_a_refusal() {
        let joint = membership(&[&[1, 2, 3, 4], &[1, 3, 4]]);
        // The member being removed may still stand (`may_stand`).
        assert_eq!(refusal_log(&joint, 2, at(2, 182), at(2, 181)), at(2, 182));
        assert_eq!(refusal_log(&joint, 3, at(2, 182), at(2, 181)), at(2, 182));
    }
}
