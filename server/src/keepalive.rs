//! Held KeepAlives (SPEC "KeepAlive").
//!
//! The master answers a KeepAlive only when the session's lease is about to
//! end (or at once when asked to), so a healthy client costs one request per
//! lease rather than one per polling interval, and the reply can carry
//! whatever happened meanwhile. At most one KeepAlive is held per session: a
//! new one answers the old one at once, so a client that reconnects is never
//! stuck behind a request on a dead connection.

use leasehold_protocol::{KeepAlive, LeaseGrant, Response, SessionId};
use tracing::debug;

use crate::master::{Master, ReplyTx};
use crate::observe::{Grant, LeaseEvent};
use crate::policy::{self, SessionDue};
use crate::session::EndCause;
use crate::state::Command;
use crate::time::{whole_millis, Millis};

/// A KeepAlive waiting for its answer, kept in its session's lease. The
/// session's one timer is set for its answer while it waits
/// (`Leases::answer_held_at`; see `Master::session_timer_fired`, below).
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) reply: ReplyTx,
    pub(crate) received_at: Millis,
}

impl Master {
    pub(crate) fn keepalive(&mut self, ka: KeepAlive, reply: ReplyTx, now: Millis) {
        let id = ka.session.id;
        if ka.epoch != self.config.epoch {
            self.deliver(reply, Err(self.wrong_epoch(ka.epoch))); // KA-6
            return;
        }
        // A lease that ran out is never revived, even if its timer has not
        // been handled yet (SES-6).
        if self.state.session(id).is_none() || self.end_if_ran_out(id, now) {
            self.deliver(reply, Err(self.state.missing_session(id))); // KA-7
            return;
        }
        self.unheard.remove(&id);
        self.events.acknowledge(id, ka.acked_seq); // EV-2
        if self.failover_pending.contains(&id) && !self.events.failover_unacknowledged(id) {
            self.failover_pending.remove(&id); // FO-5
        }
        if let Some(previous) = self.take_held(id) {
            self.answer(id, previous, now); // KA-5
        }
        let held = Held {
            reply,
            received_at: now,
        };
        // Events cannot be delivered to a connection whose peer leaves its
        // replies unread (`CONN-9`): hold as if there were none.
        let deliverable = self.events.has_pending(id) && self.may_carry_events(&held.reply);
        match self.leases.answer_held_at(id, self.config.keepalive_margin) {
            // Events waiting: answer at once to deliver them (EV-3).
            Some(at) if ka.hold && at > now && !deliverable => {
                self.leases.hold(id, held);
                self.leases.arm(id, at);
            }
            _ => self.answer(id, held, now), // KA-3
        }
    }

    /// Removes the held KeepAlive of `id`. The session's timer, set for
    /// its answer, stays: answering re-arms it, and if nothing does, it
    /// finds no KeepAlive held when it fires and moves to the lease's end.
    pub(crate) fn take_held(&mut self, id: SessionId) -> Option<Held> {
        self.leases.take_held(id)
    }

    /// Extends the lease and answers a KeepAlive.
    pub(crate) fn answer(&mut self, id: SessionId, held: Held, now: Millis) {
        // A reply nobody can read would extend the lease without the client
        // knowing; leaving the lease alone keeps master and client closer.
        if held.reply.is_closed() {
            return;
        }
        if self.end_if_ran_out(id, now) {
            self.deliver(held.reply, Err(self.state.missing_session(id)));
            return;
        }
        let Some(expires) = self.leases.extend(id, now) else {
            self.deliver(held.reply, Err(self.state.missing_session(id)));
            return;
        };
        self.leases.arm(id, expires);
        self.observe(|| LeaseEvent::Granted {
            session: id,
            now,
            expires,
            why: Grant::KeepAlive,
        });
        let congested = !self.may_carry_events(&held.reply);
        self.deliver(
            held.reply,
            Ok(Response::KeepAlive {
                epoch: self.config.epoch,
                lease: LeaseGrant::conservative(
                    whole_millis(expires.since(now)),
                    whole_millis(now.since(held.received_at)),
                ),
                // Half a frame, as pages of sessions: the rest of the reply is
                // small and the smallest frame still carries one event. None
                // while the connection's peer leaves its replies unread: the
                // lease is extended, and the events wait (`CONN-9`).
                events: if congested {
                    Vec::new()
                } else {
                    self.events.pending(id, self.config.max_frame / 2)
                },
            }),
        );
    }

    /// A session's timer: answers its held KeepAlive if that is due, then
    /// does what `policy::session_due` says comes next. The timer rounds
    /// to milliseconds and may fire a tick early: nothing happens before
    /// its time.
    pub(crate) fn session_timer_fired(&mut self, id: SessionId, backlog: usize) {
        let (now, margin) = (self.now, self.config.keepalive_margin);
        if policy::held_answer_due(&self.leases, id, margin, now) {
            let held = self.leases.take_held(id).expect("checked");
            self.answer(id, held, now);
        }
        if self.state.session(id).is_none() {
            return;
        }
        let unheard = self.unheard.contains(&id);
        match policy::session_due(&self.leases, id, margin, now, backlog, unheard) {
            SessionDue::Nothing => {}
            SessionDue::Arm(due) => self.leases.arm(id, due),
            SessionDue::OneMoreLease => {
                self.unheard.remove(&id);
                if let Some(expires) = self.leases.extend(id, now) {
                    debug!(session = %id, backlog, "recovered session unheard from while requests wait: one more lease");
                    self.leases.arm(id, expires);
                    self.observe(|| LeaseEvent::Granted {
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
    pub(crate) fn end_if_ran_out(&mut self, id: SessionId, now: Millis) -> bool {
        if self.leases.expires_at(id).is_some_and(|e| e <= now) {
            let _ = self.apply(
                Command::EndSession {
                    id,
                    cause: EndCause::Expired,
                },
                now,
            );
            return true;
        }
        false
    }
}
