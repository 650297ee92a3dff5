//! Carrying out commands: apply one to the state machine, log it (and
//! snapshot when the log has grown), run its events, and reply only once
//! what the reply depends on is durable.

use leasehold_protocol::{Error, Response};
use tracing::info;

use super::{Master, ReplyTx, Timer};
use crate::observe::{Grant, LeaseEvent};
use crate::state::{Applied, Command, StateEvent};
use crate::store::{Record, Snapshot};
use crate::time::Millis;

impl Master {
    /// Sends a reply once everything applied before it is durable.
    pub(crate) fn deliver(&mut self, reply: ReplyTx, result: Result<Response, Error>) {
        match &mut self.commit {
            Some(commit) => {
                commit.reply(reply, result, None);
            }
            None => {
                let _ = reply.send(result);
            }
        }
    }

    /// As `deliver`, applying `undelivered` if nobody is there to receive
    /// the reply (`LOCK-9`).
    pub(crate) fn deliver_or(
        &mut self,
        reply: ReplyTx,
        result: Result<Response, Error>,
        undelivered: Command,
    ) {
        let unheard = match &mut self.commit {
            Some(commit) => commit.reply(reply, result, Some(undelivered)),
            None => reply.send(result).err().map(|_| undelivered),
        };
        if let Some(command) = unheard {
            if self.depth > 0 {
                self.deferred.push_back(command);
            } else {
                let _ = self.apply(command, self.now);
            }
        }
    }

    /// The log has grown durable: send what waited for it.
    pub(super) fn on_durable(&mut self) {
        let Some(commit) = &mut self.commit else {
            return;
        };
        match commit.advance() {
            Ok(unheard) => {
                for command in unheard {
                    let _ = self.apply(command, self.now);
                }
            }
            Err(reason) => {
                tracing::error!(%reason, "stopping: changes can no longer be made durable");
                self.failed = true;
            }
        }
    }

    /// Applies a command to the state machine and carries out its events.
    pub(crate) fn apply(&mut self, command: Command, now: Millis) -> Result<Applied, Error> {
        // Fan-out already behind goes on a slice per turn of the master's
        // loop; this command's adds to it and takes no extra slice.
        let behind = self.depth == 0 && self.events.owes();
        // A refused command changes nothing and is not logged.
        let logged = self.commit.as_ref().map(|_| command.clone());
        let (reply, events) = self.state.apply(command, now);
        if let (Some(commit), Some(command), true) = (&mut self.commit, logged, reply.is_ok()) {
            commit.append(Record::Command { now, command });
            if commit.wants_snapshot() {
                // Taken before this command's events run further commands,
                // so it is the state as of exactly the records so far.
                let snapshot = Snapshot {
                    epoch: self.config.epoch,
                    now,
                    next_seq: commit.next_seq,
                    state: self.state.clone(),
                };
                commit.compact(snapshot);
            }
        }
        self.depth += 1;
        for event in events {
            self.on_event(event, now);
        }
        self.depth -= 1;
        if self.depth == 0 {
            // Work that applies commands of its own waits until this
            // command's events are decided, so events stay in order; a
            // small fan-out is queued at once, a large one a slice at a
            // time between timers and requests (`EV-9`).
            if !behind {
                self.deliver_events();
            }
            while let Some(command) = self.deferred.pop_front() {
                let _ = self.apply(command, self.now);
            }
        }
        reply
    }

    fn on_event(&mut self, event: StateEvent, now: Millis) {
        self.publish(&event);
        match event {
            StateEvent::SessionCreated { id } => {
                let Some(session) = self.state.session(id) else {
                    return;
                };
                info!(session = %id, name = %session.name, lease = ?session.lease, "session created");
                let expires = self.leases.start(id, session.lease, now);
                self.leases.arm(id, expires);
                self.observe(|| LeaseEvent::Granted {
                    session: id,
                    now,
                    expires,
                    why: Grant::Created,
                });
            }
            // Heard of through `publish` alone.
            StateEvent::LockAcquired { .. }
            | StateEvent::LockReleased { .. }
            | StateEvent::LockWaiting { .. } => {}
            StateEvent::NodeChanged { key, .. } => self.wake_watchers(&key),
            StateEvent::NodeDeleted { key } => {
                self.quotas.bytes.give_back(&key);
                self.wake_watchers(&key);
            }
            StateEvent::LockGranted {
                ticket,
                index,
                sequencer,
            } => self.acquire_granted(ticket, index, sequencer),
            StateEvent::WaitEnded { ticket } => self.acquire_ended(ticket),
            StateEvent::LockDelayStarted { key, until } => {
                // Waiters get the lock when the delay ends (`LOCK-6`).
                self.timers.insert(until, Timer::LockDelayEnd(key));
            }
            StateEvent::SessionEnded { id, cause } => {
                info!(session = %id, "session ended: {}", cause.as_str());
                self.observe(|| LeaseEvent::Ended {
                    session: id,
                    now,
                    cause,
                });
                self.quotas.sessions.give_back(&id);
                self.failover_pending.remove(&id);
                self.unheard.remove(&id);
                // A KeepAlive held for it is answered at once (`KA-7`).
                if let Some(held) = self.leases.remove(id) {
                    self.deliver(held.reply, Err(self.state.missing_session(id)));
                }
            }
        }
    }
}
