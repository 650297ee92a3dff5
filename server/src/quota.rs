//! What one peer address may take of what the master shares among all its
//! clients (SPEC "Quotas"). The master-wide caps stay the last line; a
//! quota keeps one client from reaching them alone, so that others, the
//! operator among them, still find room. Quotas are the master's soft
//! state: what a peer created before a restart is not counted against it.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;

use leasehold_protocol::{Error, ErrorCode, SessionId};

/// What each peer address holds of one resource, and who holds each item,
/// so that an item given back is given back to whoever took it.
#[derive(Debug)]
pub(crate) struct Ledger<K> {
    used: HashMap<IpAddr, u64>,
    holder: HashMap<K, (IpAddr, u64)>,
}

impl<K> Default for Ledger<K> {
    fn default() -> Self {
        Ledger {
            used: HashMap::new(),
            holder: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> Ledger<K> {
    /// How much `peer` holds.
    pub(crate) fn used(&self, peer: IpAddr) -> u64 {
        self.used.get(&peer).copied().unwrap_or(0)
    }

    /// What `peer` would hold with `item` at `amount` instead of as now.
    pub(crate) fn used_with(&self, peer: IpAddr, item: &K, amount: u64) -> u64 {
        let mine = match self.holder.get(item) {
            Some((holder, had)) if *holder == peer => *had,
            _ => 0,
        };
        self.used(peer) - mine + amount
    }

    /// The peer address that holds `item`, if any does.
    pub(crate) fn holder(&self, item: &K) -> Option<IpAddr> {
        self.holder.get(item).map(|(peer, _)| *peer)
    }

    /// Counts `item` against `peer`, at `amount`; an item held before,
    /// by anyone, is given back first.
    pub(crate) fn take(&mut self, item: K, peer: IpAddr, amount: u64) {
        self.give_back(&item);
        *self.used.entry(peer).or_default() += amount;
        self.holder.insert(item, (peer, amount));
    }

    /// Gives `item` back to whoever took it; nothing if no one did.
    pub(crate) fn give_back(&mut self, item: &K) {
        let Some((peer, amount)) = self.holder.remove(item) else {
            return;
        };
        if let Some(used) = self.used.get_mut(&peer) {
            *used -= amount;
            if *used == 0 {
                self.used.remove(&peer);
            }
        }
    }
}

/// Every quota the master keeps.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    /// Health checks, by name (`QUOTA-1`).
    pub(crate) checks: Ledger<String>,
    /// Live sessions (`QUOTA-2`).
    pub(crate) sessions: Ledger<SessionId>,
    /// Subscriptions, by id (`QUOTA-3`).
    pub(crate) subscriptions: Ledger<u64>,
    /// Acquires waiting in line, by ticket (`QUOTA-4`).
    pub(crate) waiters: Ledger<u64>,
    /// Bytes of nodes (key and contents), by key, held by the peer that
    /// last wrote each (`QUOTA-5`).
    pub(crate) bytes: Ledger<String>,
}

/// The refusal for `peer` at its quota of `what`.
pub(crate) fn refusal(peer: IpAddr, limit: usize, what: &str) -> Error {
    Error::new(
        ErrorCode::LimitReached,
        format!("{peer} has reached its quota of {limit} {what}"),
    )
}

/// `Some(refusal)` when `peer` would go past `limit` by holding `amount`
/// more; never for requests without a peer address (tests).
pub(crate) fn over(
    peer: Option<IpAddr>,
    used_after: impl FnOnce(IpAddr) -> u64,
    limit: usize,
    what: &str,
) -> Option<Error> {
    let peer = peer?;
    (used_after(peer) > limit as u64).then(|| refusal(peer, limit, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers() -> (IpAddr, IpAddr) {
        ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap())
    }

    #[test]
    fn an_item_given_back_goes_back_to_its_taker() {
        let (a, b) = peers();
        let mut checks = Ledger::default();
        checks.take("x".to_string(), a, 1);
        checks.take("y".to_string(), a, 1);
        checks.take("z".to_string(), b, 1);
        checks.give_back(&"x".to_string());
        checks.give_back(&"unknown".to_string());
        assert_eq!((checks.used(a), checks.used(b)), (1, 1));
    }

    #[test]
    fn an_item_taken_again_moves_to_its_new_taker_at_its_new_amount() {
        let (a, b) = peers();
        let mut bytes = Ledger::default();
        bytes.take("k".to_string(), a, 100);
        assert_eq!(bytes.used_with(a, &"k".to_string(), 30), 30);
        assert_eq!(bytes.used_with(b, &"k".to_string(), 30), 30);
        bytes.take("k".to_string(), b, 30);
        assert_eq!((bytes.used(a), bytes.used(b)), (0, 30));
    }
}
