//! What one peer address may take of what the master shares among all its
//! clients (SPEC `QUOTA-1`). The master-wide caps stay the last line; a
//! quota keeps one client from reaching them alone, so that others, the
//! operator among them, still find room. Quotas are the master's soft
//! state: what a peer created before a restart is not counted against it.

use std::collections::HashMap;
use std::net::IpAddr;

/// Health checks created, by peer address.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    checks_by_peer: HashMap<IpAddr, usize>,
    check_creator: HashMap<String, IpAddr>,
}

impl Quotas {
    /// Health checks `peer` has created that still exist.
    pub(crate) fn checks_of(&self, peer: IpAddr) -> usize {
        self.checks_by_peer.get(&peer).copied().unwrap_or(0)
    }

    pub(crate) fn check_created(&mut self, name: &str, peer: IpAddr) {
        *self.checks_by_peer.entry(peer).or_default() += 1;
        self.check_creator.insert(name.to_string(), peer);
    }

    pub(crate) fn check_deleted(&mut self, name: &str) {
        let Some(peer) = self.check_creator.remove(name) else {
            return;
        };
        if let Some(n) = self.checks_by_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.checks_by_peer.remove(&peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_check_is_given_back_to_its_creator() {
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let mut quotas = Quotas::default();
        quotas.check_created("x", a);
        quotas.check_created("y", a);
        quotas.check_created("z", b);
        quotas.check_deleted("x");
        quotas.check_deleted("unknown");
        assert_eq!((quotas.checks_of(a), quotas.checks_of(b)), (1, 1));
    }
}
