//! Watches: a Get that waits until the node changes (SPEC `NS-8`), the
//! blocking query of Consul. The master holds the reply, as it holds a
//! KeepAlive, until a command touches the key or the timeout passes. This
//! is the bookkeeping; the master's handling is `master/watches.rs`.

use std::collections::BTreeMap;

use crate::reply::ReplyTx;
use crate::timers::TimerKey;

/// Watches waiting for their keys to change.
#[derive(Debug, Default)]
pub(crate) struct Watches {
    pub(crate) waiting: BTreeMap<u64, Waiting>,
    pub(crate) by_key: BTreeMap<String, Vec<u64>>,
    pub(crate) next: u64,
}

#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) key: String,
    pub(crate) reply: ReplyTx,
    pub(crate) timer: TimerKey,
}
