//! The engine's outbox: the [`Effect`]s it decides, queued in the order
//! they must happen, and whether a connection may be sent more.

use leasehold_protocol::{Error, ErrorCode, Response, Sequencer};

use super::{Engine, ReplyTx};
use crate::audit::Audit;
use crate::config::CONGESTED_RETRY_MS;
use crate::observe::MasterEvent;
use crate::store::Record;

/// What the engine decided must happen, in the order it must happen.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Append to the log (only when the master has one).
    Log(Record),
    /// Send `result` once every record logged before it is durable, or
    /// at once if it tells of nothing logged (`waits` false). If nobody
    /// receives a reply carrying `grant`, the engine is told
    /// (`Input::Unheard`).
    Reply {
        reply: ReplyTx,
        result: Result<Response, Error>,
        grant: Option<Sequencer>,
        waits: bool,
    },
    /// Tell the observer (`Config::observer`).
    Observe(MasterEvent),
    /// Write to the audit log (`Config::audit`).
    Audit(Audit),
}

impl Engine {
    /// Whether this master keeps an audit log: records are made only
    /// then.
    pub(crate) fn auditing(&self) -> bool {
        self.config.audit.is_some()
    }

    /// Writes `record` to the audit log, if this master keeps one
    /// (`AUDIT-1`).
    pub(crate) fn audit(&mut self, record: Audit) {
        if self.auditing() {
            self.out.push_back(Effect::Audit(record));
        }
    }

    /// Logs `record`, if this master logs.
    pub(crate) fn log(&mut self, record: impl FnOnce() -> Record) {
        if self.logging {
            self.out.push_back(Effect::Log(record()));
        }
    }

    /// Whether this master logs what it applies.
    pub(crate) fn logging(&self) -> bool {
        self.logging
    }

    /// Sends `result` through `reply` once everything logged before it is
    /// durable.
    pub(crate) fn deliver(&mut self, reply: ReplyTx, result: Result<Response, Error>) {
        self.reply(reply, result, None, true);
    }

    /// Sends `result` through `reply` at once, ahead of replies waiting
    /// for the disk: for a reply that tells of nothing logged, such as a
    /// KeepAlive's lease with no events (`STORE-1`), which must not wait
    /// behind another client's bulk write.
    pub(crate) fn deliver_at_once(&mut self, reply: ReplyTx, result: Result<Response, Error>) {
        self.reply(reply, result, None, false);
    }

    /// As `deliver`, for a reply that tells its session of `grant`.
    pub(crate) fn deliver_telling(
        &mut self,
        reply: ReplyTx,
        result: Result<Response, Error>,
        grant: Sequencer,
    ) {
        self.reply(reply, result, Some(grant), true);
    }

    /// Counts the reply against its connection's budget as it is decided
    /// (`CONN-9`), and leaves it to be sent.
    fn reply(
        &mut self,
        mut reply: ReplyTx,
        result: Result<Response, Error>,
        grant: Option<Sequencer>,
        waits: bool,
    ) {
        reply.reserve(&result);
        self.out.push_back(Effect::Reply {
            reply,
            result,
            grant,
            waits,
        });
    }

    /// Tells the observer, if there is one, of `event`.
    pub(crate) fn observe(&mut self, event: impl FnOnce() -> MasterEvent) {
        if self.config.observer.is_some() {
            self.out.push_back(Effect::Observe(event()));
        }
    }

    /// Whether the connection of `reply` has too many bytes of replies
    /// unread to be sent more (`CONN-9`).
    pub(crate) fn congested(&self, reply: &ReplyTx) -> bool {
        let c = &self.config;
        reply.congested(c.reply_budget, c.all_reply_budget, c.max_frame)
    }

    /// Whether events may go on a KeepAlive reply to `reply`'s connection:
    /// not while it is congested, so pipelined KeepAlives cannot pile events
    /// up (`CONN-9`, `EV-3`).
    pub(crate) fn may_carry_events(&self, reply: &ReplyTx) -> bool {
        !self.congested(reply)
    }

    /// The refusal for a request on a connection whose unread replies
    /// have used up its budget (`CONN-9`).
    pub(crate) fn congested_refusal(&self) -> Error {
        Error::new(
            ErrorCode::Congested {
                retry_after_ms: CONGESTED_RETRY_MS,
            },
            format!(
                "this connection's unread replies exceed its budget of {} bytes: nothing was done; read them, then retry",
                self.config.reply_budget
            ),
        )
    }

    /// `answer()`, unless the connection of `reply` is congested, which
    /// gets the refusal instead (`CONN-9`).
    pub(crate) fn unless_congested(
        &self,
        reply: &ReplyTx,
        answer: impl FnOnce() -> Response,
    ) -> Result<Response, Error> {
        if self.congested(reply) {
            Err(self.congested_refusal())
        } else {
            Ok(answer())
        }
    }
}
