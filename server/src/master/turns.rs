//! Requests waiting for the master, by the connection they came on, taken
//! one connection at a time (`CONN-13`): a client that pipelines a hundred
//! requests waits behind its own, and another client's request waits
//! behind one of them at most. Each connection's requests keep their
//! order.

use std::collections::{HashMap, VecDeque};

use super::Call;

#[derive(Debug, Default)]
pub(crate) struct Turns {
    waiting: HashMap<usize, VecDeque<Call>>,
    /// Connections with requests waiting, in the order they get a turn.
    order: VecDeque<usize>,
    len: usize,
}

impl Turns {
    pub(crate) fn push(&mut self, call: Call) {
        let connection = call.reply.connection();
        let queue = self.waiting.entry(connection).or_default();
        if queue.is_empty() {
            self.order.push_back(connection);
        }
        queue.push_back(call);
        self.len += 1;
    }

    /// The oldest request of the connection whose turn it is.
    pub(crate) fn next(&mut self) -> Option<Call> {
        let connection = self.order.pop_front()?;
        let queue = self.waiting.get_mut(&connection)?;
        let call = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&connection);
        } else {
            self.order.push_back(connection);
        }
        self.len -= 1;
        call
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::ReplyTx;
    use leasehold_protocol::Request;
    use std::sync::Arc;

    fn call(connection: &Arc<crate::reply::Flow>, id: u64) -> Call {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        Call {
            request: Request::Get {
                key: "k".into(),
                stat_only: true,
            },
            reply: ReplyTx::new(tx, connection.clone(), id, false),
            peer: None,
            caller: None,
            arrived: None,
        }
    }

    // CONN-13
    #[test]
    fn a_pipelining_connection_takes_turns_with_the_others_in_its_own_order() {
        let (busy, quiet) = (Arc::default(), Arc::default());
        let mut turns = Turns::default();
        for id in 1..=3 {
            turns.push(call(&busy, id));
        }
        turns.push(call(&quiet, 9));
        let order: Vec<u64> = std::iter::from_fn(|| turns.next())
            .map(|c| c.reply.request_id())
            .collect();
        assert_eq!(order, [1, 9, 2, 3]);
        assert!(turns.is_empty());
    }
}
