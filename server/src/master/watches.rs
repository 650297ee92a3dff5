//! The master's side of Watches: holding them until their key changes
//! or they time out.

use std::time::Duration;

use leasehold_protocol::{Error, ErrorCode, Response};

use super::{Engine, ReplyTx, Timer};
use crate::config::{DEFAULT_WATCH_TIMEOUT, MAX_WATCH_TIMEOUT};
use crate::node::check_key;
use crate::watch::Waiting;

impl Engine {
    pub(crate) fn watch(&mut self, key: String, after_index: u64, timeout_ms: u64, reply: ReplyTx) {
        if let Err(e) = check_key(&key) {
            self.deliver(reply, Err(Error::new(ErrorCode::InvalidArgument, e)));
            return;
        }
        if self.state.namespace().key_index(&key) > after_index {
            self.deliver(reply, Ok(self.watched(&key)));
            return;
        }
        let timeout = match timeout_ms {
            0 => DEFAULT_WATCH_TIMEOUT,
            ms => Duration::from_millis(ms).min(MAX_WATCH_TIMEOUT),
        };
        let id = self.watches.next;
        self.watches.next += 1;
        // Master time counts whole milliseconds: one more, so the watch
        // never ends before its timeout has passed since it arrived.
        let due = self.now + timeout + Duration::from_millis(1);
        let timer = self.timers.insert(due, Timer::WatchTimeout(id));
        self.watches.by_key.entry(key.clone()).or_default().push(id);
        self.watches
            .waiting
            .insert(id, Waiting { key, reply, timer });
    }

    /// Answers every watch on `key`: a command has just changed it.
    pub(crate) fn wake_watchers(&mut self, key: &str) {
        let Some(ids) = self.watches.by_key.remove(key) else {
            return;
        };
        let reply = self.watched(key);
        for id in ids {
            if let Some(waiting) = self.watches.waiting.remove(&id) {
                self.timers.remove(waiting.timer);
                let answer = self.unless_congested(&waiting.reply, || reply.clone());
                self.deliver(waiting.reply, answer);
            }
        }
    }

    /// Answers a watch whose time is up with the node as it is.
    pub(crate) fn watch_timed_out(&mut self, id: u64) {
        // The timer has fired, so its key is spent: forget the watch first.
        let Some(waiting) = self.watches.waiting.remove(&id) else {
            return;
        };
        if let Some(ids) = self.watches.by_key.get_mut(&waiting.key) {
            ids.retain(|other| *other != id);
            if ids.is_empty() {
                self.watches.by_key.remove(&waiting.key);
            }
        }
        let answer = self.unless_congested(&waiting.reply, || self.watched(&waiting.key));
        self.deliver(waiting.reply, answer);
    }

    fn watched(&self, key: &str) -> Response {
        Response::Node {
            index: self.state.namespace().key_index(key),
            node: self.node_view(key, false),
        }
    }
}
