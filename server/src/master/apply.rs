//! Carrying out commands: apply one to the state machine, log it, and
//! run its events; replies go out once what they depend on is durable
//! (the loop in `mod.rs` sees to that).

use leasehold_protocol::{Error, ErrorCode, Response, Sequencer, SessionId};
use tracing::info;

use super::{Engine, ReplyTx, Timer, Told};
use crate::access::Principal;
use crate::audit::{Audit, Outcome};
use crate::observe::{Grant, MasterEvent};
use crate::state::command::GiveBack;
use crate::state::{Applied, Command, Kind, StateEvent};
use crate::store::Record;
use crate::time::Millis;

impl Engine {
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
        self.deliver_telling(reply, result, grant);
    }

    /// A reply granting `grant` found nobody to receive it. The lock goes
    /// back unless another reply has told the session it holds this same
    /// holding (it asked again while this one waited for the log, and was
    /// told it already holds it, `LOCK-2`), or the holding was made before
    /// this master's replies (a previous master's reply told of it), or
    /// the holding is gone.
    pub(crate) fn grant_unheard(&mut self, grant: Sequencer) {
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
    /// the session's holding (`LOCK-9`). The give-back is applied once the
    /// input at hand is handled, and may wait longer, behind
    /// invalidations of the key (`CACHE-3`): its record of replies is
    /// cleared now, so that a reply telling the session of the holding
    /// meanwhile (it asked again, `LOCK-2`) is seen and cancels it
    /// (`give_back_cancelled`).
    pub(crate) fn give_back(&mut self, grant: Sequencer) {
        if self.state.sequencer_of(&grant.key, grant.session).as_ref() != Some(&grant) {
            return;
        }
        self.told.remove(&(grant.session, grant.key.clone()));
        let owed = (grant.session, grant.key.clone(), grant.lock_generation);
        self.giving_back.insert(owed);
        self.made.push_back(Command::GiveBack(GiveBack {
            key: grant.key,
            session: grant.session,
            generation: grant.lock_generation,
        }));
    }

    /// Whether `command` gives back a holding that a reply has told its
    /// session of since the give-back was decided: that reply may have
    /// been heard, so the holding stays; if it is not, the holding counts
    /// as made here and goes back then (`LOCK-9`, `deliver_grant`).
    fn give_back_cancelled(&mut self, command: &Command) -> bool {
        let Command::GiveBack(GiveBack {
            key,
            session,
            generation,
        }) = command
        else {
            return false;
        };
        self.giving_back
            .remove(&(*session, key.clone(), *generation));
        self.told
            .get(&(*session, key.clone()))
            .is_some_and(|told| told.grant.lock_generation == *generation)
    }

    /// Applies a command of kind `K` and carries out its events: the
    /// reply is the one its kind has.
    pub(crate) fn apply<K: Kind + Clone>(
        &mut self,
        command: K,
        now: Millis,
    ) -> Result<K::Reply, Error> {
        // Fan-out already behind goes on a slice per turn of the master's
        // loop; this command's adds to it and takes no extra slice.
        let behind = self.events.owes();
        // A refused command changes nothing and is not logged.
        let logged = self.logging().then(|| command.clone().into());
        let (reply, events) = self.state.apply_kind(command, now);
        self.applied(logged.filter(|_| reply.is_ok()), events, behind, now);
        reply
    }

    /// Applies a command the engine made (`made`, held work), of whatever
    /// kind: only whether it was applied matters.
    pub(crate) fn apply_any(&mut self, command: Command, now: Millis) -> Result<Applied, Error> {
        if self.give_back_cancelled(&command) {
            return Err(Error::new(
                ErrorCode::LockHeld,
                "the holding was told of since its give-back was decided",
            ));
        }
        let behind = self.events.owes();
        let logged = self.logging().then(|| command.clone());
        let (reply, events) = self.state.apply(command, now);
        self.applied(logged.filter(|_| reply.is_ok()), events, behind, now);
        reply
    }

    /// Logs a command just applied, if it was, and carries out its events.
    /// `behind`: fan-out was owed before it.
    fn applied(
        &mut self,
        logged: Option<Command>,
        events: Vec<StateEvent>,
        behind: bool,
        now: Millis,
    ) {
        if let Some(command) = logged {
            self.log(|| Record::Command { now, command });
        }
        for event in events {
            self.on_event(event, now);
        }
        // A small fan-out is queued at once, a large one a slice at a
        // time between timers and requests (`EV-9`).
        if !behind {
            self.deliver_events();
        }
    }

    /// `record` about `session`: its owner, and the address that created
    /// it.
    fn audited(&self, record: Audit, session: SessionId) -> Audit {
        let owner = self
            .state
            .access
            .owner(session)
            .map_or(Principal::Anonymous, |owner| owner.principal());
        super::auditing::by(record, &owner)
            .session(session)
            .peer(self.creator(session))
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
                self.tally.let_go(why);
                self.observe(|| MasterEvent::LockLetGo {
                    session,
                    key: key.clone(),
                    generation,
                    now,
                    why,
                });
                if self.auditing() {
                    let record = self
                        .audited(Audit::new("lock-released", Outcome::Done), session)
                        .key(super::auditing::cut(&key))
                        .index(self.state.index())
                        .detail(format!("{why:?}, lock generation {generation}"));
                    self.audit(record);
                }
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
                self.tally.granted(how);
                if self.auditing() {
                    let record = self
                        .audited(Audit::new("lock-granted", Outcome::Done), session)
                        .key(super::auditing::cut(&key))
                        .index(index)
                        .detail(format!("lock generation {generation}"));
                    self.audit(record);
                }
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
                self.tally.ended(cause);
                self.observe(|| MasterEvent::Ended {
                    session: id,
                    now,
                    cause,
                });
                if let Some(slot) = self.leases.creator(id) {
                    self.quotas.sessions.give_back_kept(slot, 1);
                }
                self.cache.forget_session(id);
                // A KeepAlive held for it is answered at once (`KA-7`).
                if let Some(held) = self.leases.remove(id) {
                    self.deliver(held.reply, Err(self.state.missing_session(id)));
                }
            }
        }
    }
}
