//! The master lease (SPEC `CELL-6`): the leader serves as master only
//! while a quorum has acknowledged it recently enough that no other
//! member can have been elected since. openraft has no such check (a
//! leader cut off from its followers goes on believing it leads), so the
//! cell keeps its own.
//!
//! A follower that accepts a request from the leader will not vote for
//! anyone else for the election timeout after it received it (openraft's
//! leader lease), and it received it after the leader sent it. So once a
//! quorum of voters accepted requests the leader sent at or after `t`,
//! no other leader can be elected before `t + election_max` by any of
//! their clocks: the master lease runs to `t + election_max x (1 - drift)`,
//! the drift allowance covering clocks that run at different rates. The
//! times are the leader's own send instants, so the lease is never longer
//! than the truth.
//!
//! The lease also knows whether a master serves under it. A vote this
//! member grants a rival ends the lease and wakes the master, which stops;
//! the vote waits for that stop before it leaves, so the rival cannot be
//! elected while the master can still decide (`CELL-6`), however late the
//! member's own task would notice that it no longer leads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use openraft::Vote;
use tokio::time::Instant;

use super::NodeId;

/// The master lease of one member.
#[derive(Debug)]
pub struct MasterLease {
    me: NodeId,
    /// How long an acknowledgement keeps the lease.
    length: Duration,
    base: Instant,
    /// The lease's end in microseconds after `base`; 0: no lease.
    until: AtomicU64,
    book: Mutex<Book>,
    /// Woken when the lease ends before its time (deposed, or a rival
    /// asked for a higher vote): a master waiting for its deadline looks
    /// again.
    ended: tokio::sync::Notify,
    /// Whether a master serves under this lease now.
    serving: tokio::sync::watch::Sender<bool>,
    /// Broken on purpose: once held, the lease never lapses while this
    /// member leads.
    kept: bool,
}

#[derive(Debug, Default)]
struct Book {
    /// The vote this member leads with; acknowledgements of any other do
    /// not count.
    vote: Option<Vote<NodeId>>,
    /// The voters of each configuration in force (two during a joint
    /// change): a quorum of each must have acknowledged.
    voters: Vec<Vec<NodeId>>,
    /// The latest send instant each voter acknowledged under `vote`.
    acked: BTreeMap<NodeId, Instant>,
}

impl MasterLease {
    /// The lease of member `me`, which an acknowledgement keeps for
    /// `length` (the election timeout less the drift allowance).
    pub fn new(me: NodeId, length: Duration) -> Self {
        MasterLease {
            me,
            length,
            base: Instant::now(),
            until: AtomicU64::new(0),
            book: Mutex::new(Book::default()),
            ended: tokio::sync::Notify::new(),
            serving: tokio::sync::watch::Sender::new(false),
            kept: false,
        }
    }

    /// A lease that, once held, never lapses while this member leads,
    /// whatever its followers answer: a master that goes on granting
    /// after losing its quorum. Unsafe; it exists so that a simulation
    /// can show its checks catch it.
    #[doc(hidden)]
    pub fn kept_for_ever(me: NodeId, length: Duration) -> Self {
        MasterLease {
            kept: true,
            ..MasterLease::new(me, length)
        }
    }

    /// This member leads with `vote` over `voters`: acknowledgements of an
    /// earlier vote no longer count.
    pub fn lead(&self, vote: Vote<NodeId>, voters: Vec<Vec<NodeId>>) {
        let mut book = self.book.lock().expect("lease lock");
        if book.vote != Some(vote) {
            book.acked.clear();
            book.vote = Some(vote);
        }
        book.voters = voters;
        self.recompute(&book);
    }

    /// This member does not lead: no lease.
    pub fn depose(&self) {
        let mut book = self.book.lock().expect("lease lock");
        *book = Book::default();
        self.until.store(0, Ordering::Release);
        self.ended.notify_waiters();
    }

    /// This member's engine granted a rival `vote`. If it is above the
    /// vote this member leads with, the rival may be elected with it: the
    /// lease ends now, before the vote leaves (`CELL-6`), and whoever
    /// answers the rival waits for the master to stop
    /// ([`MasterLease::master_stopped`]). A leader's own vote is not
    /// renewed by its heartbeats, so the engine's leader lease does not
    /// stop a leader of long standing from granting it.
    pub fn yield_to(&self, vote: &Vote<NodeId>) {
        let mut book = self.book.lock().expect("lease lock");
        if book
            .vote
            .is_some_and(|led| vote.leader_id() > led.leader_id())
        {
            *book = Book::default();
            self.until.store(0, Ordering::Release);
            self.ended.notify_waiters();
        }
    }

    /// A master begins serving under this lease, if it holds at `now`:
    /// checked and recorded at once, so that a rival's request that ends
    /// the lease either comes first (and no master begins) or finds the
    /// master serving (and waits for it to stop).
    pub fn begin_serving(&self, now: Instant) -> bool {
        let _book = self.book.lock().expect("lease lock");
        let holds = self.holds(now);
        if holds {
            self.serving.send_replace(true);
        }
        holds
    }

    /// The master serving under this lease has stopped: it decides
    /// nothing more.
    pub fn end_serving(&self) {
        self.serving.send_replace(false);
    }

    /// Resolves once the lease's end has passed, or the lease ended early;
    /// at once if there is none. The lease may have been renewed meanwhile,
    /// so the caller looks again ([`MasterLease::holds`]).
    pub async fn lapses(&self) {
        let ended = self.ended.notified();
        tokio::pin!(ended);
        // Registered before the deadline is read: an end between the two
        // still wakes it.
        ended.as_mut().enable();
        if let Some(deadline) = self.deadline() {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = ended => {}
            }
        }
    }

    /// Waits until no master serves under this lease, for at most `patience`;
    /// whether none does.
    pub async fn master_stopped(&self, patience: Duration) -> bool {
        let mut serving = self.serving.subscribe();
        tokio::time::timeout(patience, serving.wait_for(|serving| !serving))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }

    /// `target` accepted a request this member sent at `sent` under `vote`.
    pub fn acked(&self, target: NodeId, vote: &Vote<NodeId>, sent: Instant) {
        let mut book = self.book.lock().expect("lease lock");
        if book.vote.as_ref() != Some(vote) {
            return;
        }
        let at = book.acked.entry(target).or_insert(sent);
        *at = (*at).max(sent);
        self.recompute(&book);
    }

    fn recompute(&self, book: &Book) {
        let now = Instant::now();
        let mut held: Option<Instant> = None;
        for voters in &book.voters {
            let mut times: Vec<Instant> = voters
                .iter()
                .filter_map(|v| {
                    if *v == self.me {
                        Some(now)
                    } else {
                        book.acked.get(v).copied()
                    }
                })
                .collect();
            let quorum = voters.len() / 2 + 1;
            if times.len() < quorum {
                self.until.store(0, Ordering::Release);
                return;
            }
            times.sort_unstable_by(|a, b| b.cmp(a));
            let t = times[quorum - 1];
            held = Some(held.map_or(t, |h| h.min(t)));
        }
        // 1 at least: a lease that ended before `base` is still one that
        // ended, not "none".
        let until = held.map_or(0, |t| {
            ((t + self.length)
                .saturating_duration_since(self.base)
                .as_micros() as u64)
                .max(1)
        });
        self.until.store(until, Ordering::Release);
    }

    /// When the lease ends, if there is one.
    pub fn deadline(&self) -> Option<Instant> {
        match self.until.load(Ordering::Acquire) {
            0 => None,
            _ if self.kept => Some(self.base + Duration::from_secs(1 << 30)),
            micros => Some(self.base + Duration::from_micros(micros)),
        }
    }

    /// Whether the lease holds at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now < d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(term: u64) -> Vote<NodeId> {
        Vote::new_committed(term, 1)
    }

    // CELL-6: the lease runs from the send instant a quorum acknowledged,
    // not from when the acknowledgements arrived.
    #[tokio::test(start_paused = true)]
    async fn a_quorum_of_acknowledgements_gives_a_lease_from_the_send_instant() {
        let lease = MasterLease::new(1, Duration::from_millis(500));
        lease.lead(vote(1), vec![vec![1, 2, 3]]);
        assert!(lease.deadline().is_none(), "the leader alone is no quorum");
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(100)).await;
        lease.acked(2, &vote(1), sent);
        assert_eq!(lease.deadline(), Some(sent + Duration::from_millis(500)));
        assert!(lease.holds(Instant::now()));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert!(!lease.holds(Instant::now()), "ran out with no newer ack");
    }

    // CELL-6: a majority of five needs two followers, and the lease runs
    // from the older of the two most recent acknowledgements.
    #[tokio::test(start_paused = true)]
    async fn with_five_voters_the_lease_follows_the_second_most_recent_follower() {
        let lease = MasterLease::new(1, Duration::from_millis(500));
        lease.lead(vote(1), vec![vec![1, 2, 3, 4, 5]]);
        let t0 = Instant::now();
        lease.acked(2, &vote(1), t0);
        assert!(lease.deadline().is_none());
        tokio::time::advance(Duration::from_millis(50)).await;
        let t1 = Instant::now();
        lease.acked(3, &vote(1), t1);
        assert_eq!(lease.deadline(), Some(t0 + Duration::from_millis(500)));
        lease.acked(2, &vote(1), t1);
        assert_eq!(lease.deadline(), Some(t1 + Duration::from_millis(500)));
    }

    // CELL-6: acknowledgements of an earlier leadership, or given while a
    // joint change needs both configurations, do not make a lease alone.
    #[tokio::test(start_paused = true)]
    async fn acknowledgements_of_another_vote_or_one_configuration_of_two_do_not_count() {
        let lease = MasterLease::new(1, Duration::from_millis(500));
        lease.lead(vote(2), vec![vec![1, 2, 3], vec![1, 4, 5]]);
        lease.acked(2, &vote(1), Instant::now());
        assert!(lease.deadline().is_none(), "an old vote's ack");
        lease.acked(2, &vote(2), Instant::now());
        assert!(
            lease.deadline().is_none(),
            "no quorum of the new configuration"
        );
        lease.acked(4, &vote(2), Instant::now());
        assert!(lease.deadline().is_some());
        lease.depose();
        assert!(lease.deadline().is_none());
    }

    // CELL-6: a request for a vote above the leader's ends its lease before
    // the engine can grant it; one at or below it does not.
    #[tokio::test(start_paused = true)]
    async fn a_rival_asking_for_a_higher_vote_ends_the_lease_at_once() {
        let lease = MasterLease::new(1, Duration::from_millis(500));
        lease.lead(vote(2), vec![vec![1, 2, 3]]);
        lease.acked(2, &vote(2), Instant::now());
        lease.yield_to(&Vote::new(1, 3));
        assert!(lease.deadline().is_some(), "a lower vote changes nothing");
        lease.yield_to(&Vote::new(3, 3));
        assert!(lease.deadline().is_none());
    }

    // CELL-6: a master begins only while the lease holds, checked as it
    // is recorded.
    #[tokio::test(start_paused = true)]
    async fn a_master_begins_only_while_the_lease_holds() {
        let lease = MasterLease::new(1, Duration::from_millis(500));
        lease.lead(vote(1), vec![vec![1, 2, 3]]);
        assert!(!lease.begin_serving(Instant::now()), "no quorum yet");
        lease.acked(2, &vote(1), Instant::now());
        assert!(lease.begin_serving(Instant::now()));
        assert!(
            !lease.master_stopped(Duration::from_millis(10)).await,
            "a master serves"
        );
        lease.end_serving();
        assert!(lease.master_stopped(Duration::ZERO).await);
    }

    // CELL-6: a rival's higher vote wakes the master waiting for its
    // lease's end at once, not at the old deadline, and the request can
    // wait for the master to stop.
    #[tokio::test(start_paused = true)]
    async fn a_rival_asking_for_a_higher_vote_wakes_the_master_at_once() {
        let lease = std::sync::Arc::new(MasterLease::new(1, Duration::from_millis(500)));
        lease.lead(vote(2), vec![vec![1, 2, 3]]);
        lease.acked(2, &vote(2), Instant::now());
        assert!(lease.begin_serving(Instant::now()));
        let master = {
            let lease = lease.clone();
            tokio::spawn(async move {
                lease.lapses().await;
                let stopped_at = Instant::now();
                assert!(!lease.holds(stopped_at));
                lease.end_serving();
                stopped_at
            })
        };
        tokio::time::advance(Duration::from_millis(100)).await;
        let asked = Instant::now();
        lease.yield_to(&Vote::new(3, 3));
        assert!(lease.deadline().is_none(), "a higher vote ends it");
        assert!(lease.master_stopped(Duration::from_millis(500)).await);
        assert_eq!(master.await.unwrap(), asked, "woken at once");
    }
}
