//! Carrying out commands: apply one to the state machine, log it (and
//! snapshot when the log has grown), run its events, and reply only once
//! what the reply depends on is durable.

use leasehold_protocol::{Error, ErrorCode, Response, Sequencer};
use tracing::info;

use super::{Master, ReplyTx, Timer, Told};
use crate::observe::{Grant, MasterEvent};
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

    /// As `deliver` for a reply that grants `grant`, giving the lock back
    /// if nobody is there to receive it (`LOCK-9`). `made`: this reply's
    /// acquire made the holding; otherwise its session held it already
    /// and was told so by an earlier reply, maybe a previous master's,
    /// which this master cannot count.
    pub(crate) fn deliver_grant(
        &mut self,
        reply: ReplyTx,
        result: Result<Response, Error>,
        grant: Sequencer,
        made: bool,
    ) {
        let holding = (grant.session, grant.key.clone());
        // A holding whose give-back is owed (nobody heard its grant) counts
        // as made here: if this reply is not heard either, it goes back.
        let owed = (grant.session, grant.key.clone(), grant.lock_generation);
        let made = made || self.giving_back.contains(&owed);
        let fresh = || Told {
            grant: grant.clone(),
            replies: 0,
            made_here: made,
        };
        let told = self.told.entry(holding).or_insert_with(fresh);
        if told.grant != grant {
            *told = fresh();
        }
        told.replies += 1;
        let unheard = match &mut self.commit {
            Some(commit) => commit.reply(reply, result, Some(grant)),
            None => reply.send(result).err().map(|_| grant),
        };
        if let Some(grant) = unheard {
            self.grant_unheard(grant);
        }
    }

    /// A reply granting `grant` found nobody to receive it. The lock goes
    /// back unless another reply has told the session it holds this same
    /// holding (it asked again while this one waited for the log, and was
    /// told it already holds it, `LOCK-2`), or the holding was made before
    /// this master's replies (a previous master's reply told of it), or
    /// the holding is gone.
    fn grant_unheard(&mut self, grant: Sequencer) {
        let holding = (grant.session, grant.key.clone());
        match self.told.get_mut(&holding) {
            Some(told) if told.grant == grant => {
                told.replies -= 1;
                if told.replies > 0 || !told.made_here {
                    return;
                }
            }
            // Its record went with the holding: the lock was let go.
            _ => return,
        }
        self.give_back(grant);
    }

    /// Gives back `grant`, which nobody was there to hear, if it is still
    /// the session's holding (`LOCK-9`). The give-back may wait (for the
    /// command that granted to finish, or behind invalidations of the
    /// key, `CACHE-3`): its record of replies is cleared now, so that a
    /// reply telling the session of the holding meanwhile (it asked
    /// again, `LOCK-2`) is seen and cancels it (`give_back_cancelled`).
    pub(crate) fn give_back(&mut self, grant: Sequencer) {
        if self.state.sequencer_of(&grant.key, grant.session).as_ref() != Some(&grant) {
            return;
        }
        self.told.remove(&(grant.session, grant.key.clone()));
        let owed = (grant.session, grant.key.clone(), grant.lock_generation);
        self.giving_back.insert(owed);
        let release = Command::GiveBack {
            key: grant.key,
            session: grant.session,
            generation: grant.lock_generation,
        };
        if self.depth > 0 {
            self.deferred.push_back(release);
        } else {
            self.apply_made(release);
        }
    }

    /// The log has grown durable: send what waited for it.
    pub(super) fn on_durable(&mut self) {
        let Some(commit) = &mut self.commit else {
            return;
        };
        match commit.advance() {
            Ok(unheard) => {
                for grant in unheard {
                    self.grant_unheard(grant);
                }
            }
            Err(reason) => {
                tracing::error!(%reason, "stopping: changes can no longer be made durable");
                self.failed = true;
            }
        }
    }

    /// Whether `command` gives back a holding that a reply has told its
    /// session of since the give-back was decided: that reply may have
    /// been heard, so the holding stays; if it is not, the holding counts
    /// as made here and goes back then (`LOCK-9`, `deliver_grant`).
    fn give_back_cancelled(&mut self, command: &Command) -> bool {
        let Command::GiveBack {
            key,
            session,
            generation,
        } = command
        else {
            return false;
        };
        self.giving_back
            .remove(&(*session, key.clone(), *generation));
        self.told
            .get(&(*session, key.clone()))
            .is_some_and(|told| told.grant.lock_generation == *generation)
    }

    /// Applies a command to the state machine and carries out its events.
    pub(crate) fn apply(&mut self, command: Command, now: Millis) -> Result<Applied, Error> {
        if self.give_back_cancelled(&command) {
            return Err(Error::new(
                ErrorCode::LockHeld,
                "the holding was told of since its give-back was decided",
            ));
        }
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
                self.apply_made(command);
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
                self.observe(|| MasterEvent::Granted {
                    session: id,
                    now,
                    expires,
                    why: Grant::Created,
                });
            }
            StateEvent::LockReleased {
                key,
                session,
                generation,
                why,
            } => {
                self.observe(|| MasterEvent::LockLetGo {
                    session,
                    key: key.clone(),
                    generation,
                    now,
                    why,
                });
                self.told.remove(&(session, key));
            }
            StateEvent::LockAcquired {
                key,
                session,
                generation,
                index,
                how,
                ..
            } => {
                self.observe(|| MasterEvent::LockGranted {
                    session,
                    key,
                    generation,
                    index,
                    now,
                    how,
                });
            }
            // Heard of through `publish` alone.
            StateEvent::LockWaiting { .. } => {}
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
            // Logged as a command of its own, on the next turn rather than
            // inside this apply (`LOCK-5`).
            StateEvent::LineLeft { key } => {
                if self.state.line_can_move(&key, now) {
                    self.timers.insert(now, Timer::LineLeft(key));
                }
            }
            StateEvent::LockDelayStarted { key, until } => {
                // Waiters get the lock when the delay ends (`LOCK-6`).
                self.timers.insert(until, Timer::LockDelayEnd(key));
            }
            StateEvent::SessionEnded { id, cause } => {
                info!(session = %id, "session ended: {}", cause.as_str());
                self.observe(|| MasterEvent::Ended {
                    session: id,
                    now,
                    cause,
                });
                self.quotas.sessions.give_back(&id);
                self.failover_pending.remove(&id);
                self.unheard.remove(&id);
                self.cache.forget_session(id);
                // A KeepAlive held for it is answered at once (`KA-7`).
                if let Some(held) = self.leases.remove(id) {
                    self.deliver(held.reply, Err(self.state.missing_session(id)));
                }
            }
        }
    }
}
