//! The master's blocking acquires: a wait in a lock's line, answered when
//! the lock is granted, the wait times out or is replaced (`LOCK-3`), with
//! LOCK-9's give-back of a grant nobody heard.

use std::time::Duration;

use leasehold_protocol::{Acquire, Error, ErrorCode, Response, Sequencer};

use super::{Engine, ReplyTx, Timer};
use crate::acquire::Waiting;
use crate::config::MAX_WATCH_TIMEOUT;
use crate::state::command::{self, CancelWait};
use crate::state::{Acquisition, WaitCancelled};
use crate::time::Millis;

impl Engine {
    pub(crate) fn acquire(
        &mut self,
        acquire: Acquire,
        reply: ReplyTx,
        peer: Option<std::net::IpAddr>,
        now: Millis,
    ) {
        // Asked again while it waits (a new connection, a new master):
        // it keeps its place in line.
        // The session waits for this key already: its client gave that
        // wait up (a lost connection, a fail-over, a caller that stopped
        // waiting), for the session waits once per key (`LOCK-3`). Asked
        // again as it was, it keeps its place; asked otherwise, the old
        // wait leaves the line and this one is served as any other.
        if let Some((ticket, mode)) = self.state.waiting_ticket(&acquire.key, acquire.session.id) {
            if acquire.wait_ms.is_some() && mode == acquire.mode {
                return self.take_place(ticket, acquire, reply, peer, now);
            }
            self.replace_wait(ticket, &acquire.key);
        }
        let writes = acquire.contents.is_some();
        // A holder asking again is answered with a holding some earlier
        // reply, maybe a previous master's, told it of (`LOCK-9`).
        let again = self
            .state
            .sequencer_of(&acquire.key, acquire.session.id)
            .is_some();
        let command = command::Acquire {
            key: acquire.key.clone(),
            session: acquire.session.id,
            mode: acquire.mode,
            contents: acquire.contents,
            transient: acquire.transient,
            wait: acquire.wait_ms.is_some(),
        };
        match self.apply(command, now) {
            Ok(Acquisition::Acquired { index, sequencer }) => {
                if writes {
                    self.count_node_bytes(acquire.key, peer); // QUOTA-5
                }
                self.hand_over(reply, index, sequencer, !again)
            }
            // The events of its own command may already have ended the
            // wait (a session's lease ran out as held KeepAlives were
            // answered): then nobody else will answer it.
            Ok(Acquisition::Queued { ticket }) if !self.state.is_waiting(&acquire.key, ticket) => {
                match self.state.sequencer_of(&acquire.key, acquire.session.id) {
                    Some(sequencer) => {
                        let index = self.state.namespace().key_index(&acquire.key);
                        self.hand_over(reply, index, sequencer, true);
                    }
                    None => {
                        let ended = self.state.missing_session(acquire.session.id);
                        self.deliver(reply, Err(ended));
                    }
                }
            }
            Ok(Acquisition::Queued { ticket }) => {
                let wait = (acquire.key, acquire.wait_ms);
                self.wait_in_line(ticket, wait, reply, peer, now)
            }
            Err(e) => {
                self.deliver(reply, Err(e));
            }
        }
    }

    /// A waiter got the lock. One no request waits for (it waited before
    /// a fail-over, `FO-4`) has nobody to tell: the lock goes back at once
    /// (`LOCK-9`).
    pub(crate) fn acquire_granted(&mut self, ticket: u64, index: u64, sequencer: Sequencer) {
        match self.stop_waiting(ticket) {
            Some(waiting) => {
                self.timers.remove(waiting.timer);
                self.hand_over(waiting.reply, index, sequencer, true);
            }
            None => self.give_back(sequencer),
        }
    }

    /// The session of `acquire` waits in its key's line already, in the
    /// same mode, as `ticket`, with no request of this connection waiting
    /// for it: its connection closed, another connection asked, or it
    /// waited before a fail-over (`FO-4`). This acquire takes its place
    /// and its answer, and waits as long as it asks (`LOCK-3`). The one it
    /// replaces, if its connection is still open, is told it was.
    fn take_place(
        &mut self,
        ticket: u64,
        acquire: Acquire,
        reply: ReplyTx,
        peer: Option<std::net::IpAddr>,
        now: Millis,
    ) {
        self.answer_replaced(ticket, &acquire.key);
        let wait = (acquire.key, acquire.wait_ms);
        self.wait_in_line(ticket, wait, reply, peer, now);
    }

    /// The earlier request waiting as `ticket`, if one still does, is
    /// told a later acquire of its session replaced it.
    fn answer_replaced(&mut self, ticket: u64, key: &str) {
        if let Some(earlier) = self.stop_waiting(ticket) {
            self.timers.remove(earlier.timer);
            let replaced = Error::new(
                ErrorCode::LockHeld,
                format!("the session asked for '{key}' again, which replaces this wait"),
            );
            self.deliver(earlier.reply, Err(replaced));
        }
    }

    /// The session's wait `ticket` for `key` leaves the line: a later
    /// acquire of the session, asking otherwise, replaces it (`LOCK-3`).
    fn replace_wait(&mut self, ticket: u64, key: &str) {
        self.answer_replaced(ticket, key);
        let cancel = CancelWait {
            key: key.to_string(),
            ticket,
        };
        let _ = self.apply(cancel, self.now);
    }

    /// Holds `reply` as the answer to the wait `ticket`, until the lock is
    /// granted, the session ends, or the wait's time is up.
    fn wait_in_line(
        &mut self,
        ticket: u64,
        (key, wait_ms): (String, Option<u64>),
        reply: ReplyTx,
        peer: Option<std::net::IpAddr>,
        now: Millis,
    ) {
        let timeout = match wait_ms {
            Some(0) | None => MAX_WATCH_TIMEOUT,
            Some(ms) => Duration::from_millis(ms).min(MAX_WATCH_TIMEOUT),
        };
        // One millisecond more, as a watch's: never before the timeout has
        // passed since the acquire arrived.
        let due = now + timeout + Duration::from_millis(1);
        let timer = self.timers.insert(due, Timer::AcquireTimeout(ticket));
        if let Some(peer) = peer {
            self.quotas.waiters.take(ticket, peer, 1); // QUOTA-4
        }
        self.acquires
            .waiting
            .insert(ticket, Waiting { key, reply, timer });
    }

    /// A waiter's session ended while it waited.
    pub(crate) fn acquire_ended(&mut self, ticket: u64) {
        if let Some(waiting) = self.stop_waiting(ticket) {
            self.timers.remove(waiting.timer);
            self.deliver(
                waiting.reply,
                Err(Error::new(
                    ErrorCode::SessionExpired,
                    format!("the session ended while waiting for '{}'", waiting.key),
                )),
            );
        }
    }

    /// A waiter's time is up: it leaves the line, told why it got nothing,
    /// once its leaving may change what caches hold (`CACHE-5`).
    pub(crate) fn acquire_timed_out(&mut self, ticket: u64) {
        if let Some(Timer::AcquireTimeout(ticket)) = self.held_timer(Timer::AcquireTimeout(ticket))
        {
            self.acquire_times_out(ticket);
        }
    }

    /// A waiter's time is up: it leaves the line, told why it got nothing.
    pub(crate) fn acquire_times_out(&mut self, ticket: u64) {
        // The timer has fired, so its key is spent: forget the wait first.
        let Some(waiting) = self.stop_waiting(ticket) else {
            return;
        };
        let command = CancelWait {
            key: waiting.key,
            ticket,
        };
        let answer = match self.apply(command, self.now) {
            Ok(WaitCancelled { refusal }) => Err(refusal),
            Err(e) => Err(e),
        };
        self.deliver(waiting.reply, answer);
    }

    /// Takes a wait out of the line's bookkeeping and gives it back to the
    /// peer that waited (`QUOTA-4`).
    fn stop_waiting(&mut self, ticket: u64) -> Option<Waiting> {
        self.quotas.waiters.give_back(&ticket);
        self.acquires.waiting.remove(&ticket)
    }

    /// Tells the acquirer it holds the lock; if it is no longer there to be
    /// told of a holding this acquire `made`, gives the lock back at once,
    /// so no session holds a lock its client never heard of (`LOCK-9`).
    fn hand_over(&mut self, reply: ReplyTx, index: u64, sequencer: Sequencer, made: bool) {
        let response = Response::Acquired {
            index,
            sequencer: sequencer.to_bytes(),
        };
        self.deliver_grant(reply, Ok(response), sequencer, made);
    }
}
