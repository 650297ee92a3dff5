//! The master's side of KeepAlives: holding them, answering them and
//! renewing leases (`KA-1`..), and what a session's timer decides.

use leasehold_protocol::{
    keepalive_all_limit, Error, ErrorCode, KeepAlive, KeepAliveGrant, LeaseGrant, Response,
    SessionId,
};
use tracing::debug;

use super::{Engine, ReplyTx};
use crate::config::ANSWER_MESSAGE;
use crate::events::encoded_size;
use crate::id_hash::IdSet;
use crate::keepalive::Held;
use crate::observe::{Grant, MasterEvent};
use crate::policy::{self, SessionDue};
use crate::session::EndCause;
use crate::state::command::EndSession;
use crate::tally::Answered;
use crate::time::{whole_millis, Millis};

impl Engine {
    /// A KeepAlive that reached the master at `arrived` and is read at
    /// `now`.
    pub(crate) fn keepalive(
        &mut self,
        ka: KeepAlive,
        reply: ReplyTx,
        arrived: Millis,
        now: Millis,
    ) {
        let id = ka.session.id;
        let hold = ka.hold;
        self.tally.keepalives += 1;
        if let Err(refused) = self.admit(ka, false, arrived, now) {
            self.deliver(reply, Err(refused));
            return;
        }
        let held = Held {
            reply,
            received_at: arrived,
        };
        // Events cannot be delivered to a connection whose peer leaves its
        // replies unread (`CONN-9`): hold as if there were none.
        let deliverable = self.events.has_pending(id) && self.may_carry_events(&held.reply);
        match self.leases.answer_held_at(id, self.config.keepalive_margin) {
            // Events waiting: answer at once to deliver them (EV-3).
            Some(at) if hold && at > now && !deliverable => {
                self.leases.hold(id, held);
                self.leases.arm(id, at);
            }
            _ => self.answer(id, held, now, Answered::AtOnce), // KA-3
        }
    }

    /// Renews every session a KeepAliveAll names, each as a KeepAlive
    /// answered at once, and answers them all in one reply (`KA-10`). The
    /// events of one reply share half a frame, in the order the sessions
    /// are named; a session whose events did not fit has its next
    /// KeepAlive answered at once (`EV-3`).
    pub(crate) fn keepalive_all(
        &mut self,
        all: Vec<KeepAlive>,
        reply: ReplyTx,
        principal: &crate::access::Principal,
        arrived: Millis,
        now: Millis,
    ) {
        let limit = keepalive_all_limit(self.config.max_frame);
        if all.len() > limit {
            let refusal = Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "a KeepAliveAll names at most {limit} sessions; this one named {}",
                    all.len()
                ),
            );
            self.deliver(reply, Err(refusal));
            return;
        }
        // As for one KeepAlive: each is taken (its acknowledgement, the
        // one held before it), but nobody would learn of a renewal, so
        // none is made (KA-4).
        let closed = reply.is_closed();
        // Strictly within half a frame, and each answer without its events
        // within 128 bytes (`keepalive_all_limit`): the reply fits a frame.
        let mut budget = if self.may_carry_events(&reply) {
            self.config.max_frame / 2 - 64
        } else {
            0
        };
        let mut named = IdSet::with_capacity_and_hasher(all.len(), Default::default());
        let mut answers = Vec::with_capacity(all.len());
        self.tally.keepalives += all.len() as u64;
        for ka in all {
            let id = ka.session.id;
            let admitted = if named.insert(id) {
                self.check_token_of_live(&ka.session, principal) // AUTH-2, ID-5
                    .and_then(|live| self.admit(ka, live, arrived, now))
            } else {
                let twice = format!("session {id} is named twice");
                Err(Error::new(ErrorCode::InvalidArgument, twice))
            };
            if !closed {
                // Admitted, so its lease had not run out when it arrived.
                let answer =
                    admitted.and_then(|()| self.grant_live(id, arrived, now, &mut budget, false));
                answers.push(answer.map_err(shortened));
            }
        }
        if closed {
            return;
        }
        // Each renewal is a KeepAlive answered at once (`KA-10`).
        let renewed = answers.iter().filter(|a| a.is_ok()).count() as u64;
        self.tally.answered[Answered::AtOnce as usize] += renewed;
        let unlogged = answers
            .iter()
            .all(|a| a.as_ref().is_ok_and(|grant| grant.events.is_empty()));
        if unlogged {
            self.deliver_at_once(reply, Ok(Response::KeepAliveAll { answers }));
        } else {
            self.deliver(reply, Ok(Response::KeepAliveAll { answers }));
        }
    }

    /// What every KeepAlive does before it is held or answered: refuses a
    /// wrong epoch or a session that is not live, takes the events it
    /// acknowledges, and answers the one held before it. `live` says the
    /// caller has just seen the session in the state, so it is not looked
    /// up again; `arrived` is when the KeepAlive reached the master.
    fn admit(
        &mut self,
        ka: KeepAlive,
        live: bool,
        arrived: Millis,
        now: Millis,
    ) -> Result<(), Error> {
        let id = ka.session.id;
        if ka.epoch != self.config.epoch {
            return Err(self.wrong_epoch(ka.epoch)); // KA-6
        }
        // A lease that had run out when the KeepAlive arrived is never
        // revived, even if its timer has not been handled yet; one that
        // had not is renewed, however late the master reads it (SES-6).
        if !(live || self.state.session(id).is_some()) || self.end_if_ran_out(id, arrived) {
            return Err(self.ended(id)); // KA-7
        }
        self.events.recovering.heard(&id); // FO-2
        self.events.acknowledge(id, ka.acked_seq); // EV-2, FO-5
        self.cache.acknowledged(id, ka.acked_seq); // CACHE-3
        if let Some(previous) = self.take_held(id) {
            self.answer(id, previous, now, Answered::Early); // KA-5
        }
        Ok(())
    }

    /// Answers the held KeepAlives of sessions that got events.
    pub(crate) fn wake(&mut self) {
        let now = self.now;
        for session in std::mem::take(&mut self.events.woken) {
            if let Some(held) = self.take_held(session) {
                self.answer(session, held, now, Answered::Early);
            }
        }
    }

    /// Removes the held KeepAlive of `id`. The session's timer, set for
    /// its answer, stays: answering re-arms it, and if nothing does, it
    /// finds no KeepAlive held when it fires and moves to the lease's end.
    pub(crate) fn take_held(&mut self, id: SessionId) -> Option<Held> {
        self.leases.take_held(id)
    }

    /// Extends the lease and answers a KeepAlive, counted as `when`.
    pub(crate) fn answer(&mut self, id: SessionId, held: Held, now: Millis, when: Answered) {
        // A reply nobody can read would extend the lease without the client
        // knowing; leaving the lease alone keeps master and client closer.
        if held.reply.is_closed() {
            return;
        }
        self.tally.answered(when);
        // Half a frame, as pages of sessions: the rest of the reply is
        // small and the smallest frame still carries one event. None while
        // the connection's peer leaves its replies unread: the lease is
        // extended, and the events wait (`CONN-9`).
        let mut budget = if self.may_carry_events(&held.reply) {
            self.config.max_frame / 2
        } else {
            0
        };
        let answer = self.grant(id, held.received_at, now, &mut budget, true);
        // A lease with no events tells of nothing logged: it goes out at
        // once, not behind other clients' writes on their way to the disk
        // (STORE-1). Events, and an end, wait for what they tell of.
        let unlogged = answer.as_ref().is_ok_and(|grant| grant.events.is_empty());
        if unlogged {
            self.deliver_at_once(held.reply, answer.map(Response::from));
        } else {
            self.deliver(held.reply, answer.map(Response::from));
        }
    }

    /// Extends the lease of a KeepAlive received at `received_at` (`KA-4`)
    /// and takes the events that fit `budget` bytes, less what they use;
    /// none once it is spent. A lone KeepAlive takes its first event even
    /// if it alone is over the budget (`first_regardless`), so its queue
    /// always drains; a KeepAliveAll's sessions take only what fits.
    pub(crate) fn grant(
        &mut self,
        id: SessionId,
        received_at: Millis,
        now: Millis,
        budget: &mut usize,
        first_regardless: bool,
    ) -> Result<KeepAliveGrant, Error> {
        // A held KeepAlive arrived before the lease ran out: it renews it
        // however late the master answers (SES-6).
        if self.end_if_ran_out(id, received_at.min(now)) {
            return Err(self.ended(id));
        }
        self.grant_live(id, received_at, now, budget, first_regardless)
    }

    /// [`Engine::grant`] for a session already found not to have run out
    /// at `now`.
    fn grant_live(
        &mut self,
        id: SessionId,
        received_at: Millis,
        now: Millis,
        budget: &mut usize,
        first_regardless: bool,
    ) -> Result<KeepAliveGrant, Error> {
        let events = if *budget == 0 {
            Vec::new()
        } else {
            self.events.pending(id, *budget, first_regardless)
        };
        *budget = budget.saturating_sub(events.iter().map(encoded_size).sum::<usize>());
        // A reply that leaves an invalidation untold must not let the
        // client serve its cache longer: the lease stays as it was when
        // the cacher was told (`CACHE-6`).
        let carried = events.last().map_or(0, |e| e.seq);
        let extend = !self.cache.untold_beyond(id, carried);
        let Some(expires) = self.leases.renew(id, now, extend) else {
            return Err(self.state.missing_session(id));
        };
        self.observe(|| MasterEvent::Granted {
            session: id,
            now,
            expires,
            why: Grant::KeepAlive,
        });
        Ok(KeepAliveGrant {
            epoch: self.config.epoch,
            lease: LeaseGrant::conservative(
                whole_millis(expires.since(now)),
                whole_millis(now.since(received_at)),
            ),
            events,
        })
    }

    /// A session's timer: answers its held KeepAlive if that is due, then
    /// does what `policy::session_due` says comes next. The timer rounds
    /// to milliseconds and may fire a tick early: nothing happens before
    /// its time.
    pub(crate) fn session_timer_fired(&mut self, id: SessionId, caught_up: Millis, backlog: usize) {
        let (now, margin) = (self.now, self.config.keepalive_margin);
        // Renewals leave a timer early (`Leases::renew`): most fire with
        // nothing due, and are set again for what is.
        if self.leases.rearm_if_early(id, margin, now) {
            return;
        }
        if policy::held_answer_due(&self.leases, id, margin, now) {
            let due = self.leases.due(id, margin).unwrap_or(now);
            // The margin in force: the configured one, kept within the
            // lease's bounds (`Leases::answer_held_at`).
            let in_force = self.leases.expires_at(id).unwrap_or(due).since(due);
            let when = if now.since(due) > in_force / 4 {
                Answered::Late
            } else {
                Answered::Due
            };
            let held = self.leases.take_held(id).expect("checked");
            self.answer(id, held, now, when);
        }
        if self.state.session(id).is_none() {
            return;
        }
        let unheard = self.events.recovering.is_unheard(&id);
        match policy::session_due(&self.leases, id, margin, now, caught_up, backlog, unheard) {
            SessionDue::Nothing => {}
            SessionDue::Arm(due) => self.leases.arm(id, due),
            SessionDue::OneMoreLease => {
                self.events.recovering.heard(&id);
                if let Some(expires) = self.leases.extend(id, now) {
                    debug!(session = %id, backlog, "recovered session unheard from while requests wait: one more lease");
                    self.leases.arm(id, expires);
                    self.observe(|| MasterEvent::Granted {
                        session: id,
                        now,
                        expires,
                        why: Grant::OneMore,
                    });
                }
            }
            SessionDue::Expire => {
                self.end_if_ran_out(id, now);
            }
        }
    }

    /// Ends the session `id` if its lease has run out at `now`; says whether
    /// it did.
    /// Its end may wait for caches (`CACHE-5`); the session counts as
    /// ended meanwhile.
    pub(crate) fn end_if_ran_out(&mut self, id: SessionId, now: Millis) -> bool {
        if self.cache.ending.contains(&id) {
            return true;
        }
        if self.leases.expires_at(id).is_some_and(|e| e <= now) {
            self.apply_made(
                EndSession {
                    id,
                    cause: EndCause::Expired,
                }
                .into(),
            );
            return true;
        }
        false
    }

    /// The refusal of a KeepAlive that names another epoch (`KA-6`).
    fn wrong_epoch(&self, epoch: u64) -> Error {
        Error::new(
            ErrorCode::WrongEpoch {
                current: self.config.epoch,
            },
            format!(
                "request names epoch {epoch}; the master's epoch is {}",
                self.config.epoch
            ),
        )
    }

    /// The refusal for a session that is not live, or whose lease ran out
    /// while its end waits for caches.
    fn ended(&self, id: SessionId) -> Error {
        if self.state.session(id).is_some() {
            return Error::new(
                ErrorCode::SessionExpired,
                format!("session {id} expired: its lease ran out"),
            );
        }
        self.state.missing_session(id)
    }
}

/// `e` with its message cut to [`ANSWER_MESSAGE`] bytes: with one session
/// per 256 bytes of frame at most, the answers without their events then
/// fill at most half of it (`KA-10`).
fn shortened(mut e: Error) -> Error {
    if e.message.len() > ANSWER_MESSAGE {
        let mut end = ANSWER_MESSAGE;
        while !e.message.is_char_boundary(end) {
            end -= 1;
        }
        e.message.truncate(end);
    }
    e
}
