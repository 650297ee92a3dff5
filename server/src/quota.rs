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
///
/// A master keeps an entry here for each of up to a million sessions: an
/// item names its taker by a slot number and its amount in 32 bits, 8
/// bytes where an address and a 64-bit amount took 32.
#[derive(Debug)]
pub(crate) struct Ledger<K> {
    /// Each peer that holds anything, by slot: its address, what it
    /// holds, and how many items.
    peers: Vec<Taker>,
    slot_of: HashMap<IpAddr, u32>,
    /// Slots of peers that no longer hold anything, to be used again.
    free: Vec<u32>,
    holder: HashMap<K, (u32, u32)>,
}

impl<K> Default for Ledger<K> {
    fn default() -> Self {
        Ledger {
            peers: Vec::new(),
            slot_of: HashMap::new(),
            free: Vec::new(),
            holder: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> Ledger<K> {
    /// How much `peer` holds.
    pub(crate) fn used(&self, peer: IpAddr) -> u64 {
        self.slot_of
            .get(&peer)
            .map_or(0, |slot| self.peers[*slot as usize].used)
    }

    /// What `peer` would hold with `item` at `amount` instead of as now.
    pub(crate) fn used_with(&self, peer: IpAddr, item: &K, amount: u64) -> u64 {
        let mine = match self.holder.get(item) {
            Some((slot, had)) if self.peers[*slot as usize].peer == peer => u64::from(*had),
            _ => 0,
        };
        self.used(peer) - mine + u64::from(narrow(amount))
    }

    /// The peer address that holds `item`, if any does.
    #[cfg(test)]
    pub(crate) fn holder(&self, item: &K) -> Option<IpAddr> {
        self.holder
            .get(item)
            .map(|(slot, _)| self.peers[*slot as usize].peer)
    }

    /// Counts `item` against `peer`, at `amount`; an item held before,
    /// by anyone, is given back first.
    pub(crate) fn take(&mut self, item: K, peer: IpAddr, amount: u64) {
        self.give_back(&item);
        let amount = narrow(amount);
        let slot = self.count(peer, amount);
        self.holder.insert(item, (slot, amount));
    }

    /// Gives `item` back to whoever took it; nothing if no one did.
    pub(crate) fn give_back(&mut self, item: &K) {
        let Some((slot, amount)) = self.holder.remove(item) else {
            return;
        };
        self.uncount(slot, amount);
    }
}

impl<K> Ledger<K> {
    /// Counts an item against `peer`, at `amount`, without an entry for
    /// it here: the caller keeps the slot returned, which names `peer`
    /// until the item is given back with [`Ledger::give_back_kept`]. A
    /// million sessions keep theirs in their leases, in room a lease has
    /// spare, rather than in a table here.
    pub(crate) fn take_kept(&mut self, peer: IpAddr, amount: u64) -> u32 {
        self.count(peer, narrow(amount))
    }

    /// Gives back an item taken with [`Ledger::take_kept`].
    pub(crate) fn give_back_kept(&mut self, slot: u32, amount: u64) {
        self.uncount(slot, narrow(amount));
    }

    /// The peer a kept slot names.
    pub(crate) fn peer_of(&self, slot: u32) -> IpAddr {
        self.peers[slot as usize].peer
    }

    /// Counts `amount` against `peer`; returns its slot.
    fn count(&mut self, peer: IpAddr, amount: u32) -> u32 {
        let slot = match self.slot_of.get(&peer) {
            Some(slot) => *slot,
            None => {
                let taker = Taker {
                    peer,
                    used: 0,
                    items: 0,
                };
                let slot = match self.free.pop() {
                    Some(slot) => {
                        self.peers[slot as usize] = taker;
                        slot
                    }
                    None => {
                        self.peers.push(taker);
                        (self.peers.len() - 1) as u32
                    }
                };
                self.slot_of.insert(peer, slot);
                slot
            }
        };
        let taker = &mut self.peers[slot as usize];
        taker.used += u64::from(amount);
        taker.items += 1;
        slot
    }

    /// Takes `amount` and one item off the taker in `slot`, freeing the
    /// slot once it holds nothing.
    fn uncount(&mut self, slot: u32, amount: u32) {
        let taker = &mut self.peers[slot as usize];
        taker.used -= u64::from(amount);
        taker.items -= 1;
        if taker.items == 0 {
            self.slot_of.remove(&taker.peer);
            self.free.push(slot);
        }
    }
}

/// A peer address that holds items of a ledger.
#[derive(Debug)]
struct Taker {
    peer: IpAddr,
    used: u64,
    items: u64,
}

/// An item's amount as the ledger keeps it: no item (a node's key and
/// contents, bounded by a frame) comes near 4 GiB, and one that did would
/// count as 4 GiB, taken and given back alike.
fn narrow(amount: u64) -> u32 {
    u32::try_from(amount).unwrap_or(u32::MAX)
}

/// Every quota the master keeps.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    /// Health checks, by name (`QUOTA-1`).
    pub(crate) checks: Ledger<String>,
    /// Live sessions (`QUOTA-2`), whose creators' slots their leases
    /// keep ([`Ledger::take_kept`]): no entry per session here.
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

    #[test]
    fn a_peer_that_held_nothing_for_a_while_is_counted_afresh() {
        let (a, b) = peers();
        let mut sessions = Ledger::default();
        sessions.take(1u64, a, 1);
        sessions.give_back(&1);
        // b takes the slot a left; a comes back in a slot of its own.
        sessions.take(2, b, 1);
        sessions.take(3, a, 1);
        sessions.take(4, a, 1);
        assert_eq!((sessions.used(a), sessions.used(b)), (2, 1));
        assert_eq!(
            (sessions.holder(&2), sessions.holder(&3)),
            (Some(b), Some(a))
        );
        sessions.give_back(&2);
        assert_eq!((sessions.used(a), sessions.used(b)), (2, 0));
        assert_eq!(sessions.holder(&4), Some(a));
    }

    #[test]
    fn an_item_of_no_amount_keeps_its_takers_place() {
        let (a, b) = peers();
        let mut bytes = Ledger::default();
        bytes.take("empty".to_string(), a, 0);
        bytes.take("full".to_string(), a, 5);
        bytes.give_back(&"full".to_string());
        bytes.take("other".to_string(), b, 7);
        assert_eq!(bytes.holder(&"empty".to_string()), Some(a));
        assert_eq!((bytes.used(a), bytes.used(b)), (0, 7));
    }

    // QUOTA-2: an item whose slot its caller keeps counts against its
    // taker like any other, names it by the slot while held, and frees
    // the slot for another address once its taker holds nothing.
    #[test]
    fn an_item_kept_by_slot_counts_and_is_given_back_by_it() {
        let (a, b) = peers();
        let mut sessions: Ledger<SessionId> = Ledger::default();
        let first = sessions.take_kept(a, 1);
        let second = sessions.take_kept(a, 1);
        assert_eq!(first, second, "one slot per address");
        assert_eq!(sessions.peer_of(first), a);
        assert_eq!(sessions.used(a), 2);
        sessions.give_back_kept(first, 1);
        assert_eq!(sessions.used(a), 1);
        sessions.give_back_kept(second, 1);
        assert_eq!(sessions.used(a), 0);
        let other = sessions.take_kept(b, 1);
        assert_eq!(other, first, "the freed slot is used again");
        assert_eq!(sessions.peer_of(other), b);
        assert!(sessions.holder.is_empty(), "no entry per item");
    }
}
