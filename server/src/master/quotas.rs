//! The engine's side of quotas (SPEC "Quotas"): the refusal of a request
//! that would take a peer past one, and what a peer is counted for once
//! a request of its is carried out. What is counted is `crate::quota`.

use leasehold_protocol::{Error, Request, SessionId};

use super::Engine;
use crate::lease::Leases;
use crate::quota::Ledger;
use crate::tally::Limit;

impl Engine {
    /// The refusal of a request that would take `peer` past one of its
    /// quotas (`QUOTA-1`..`QUOTA-5`).
    pub(super) fn over_quota(
        &self,
        request: &Request,
        peer: Option<std::net::IpAddr>,
    ) -> Option<(Limit, Error)> {
        use crate::quota::over;
        let (c, q) = (&self.config, &self.quotas);
        let node_bytes = |key: &str, contents: usize| (key.len() + contents) as u64;
        match request {
            Request::CreateSession(_) => over(
                peer,
                |p| q.sessions.used(p) + 1,
                c.max_sessions_per_peer,
                "live sessions",
            )
            .map(|e| (Limit::SessionsPerAddress, e)),
            Request::SetCheck { name, .. } if self.state.checks.get(name).is_none() => over(
                peer,
                |p| q.checks.used(p) + 1,
                c.max_checks_per_peer,
                "health checks",
            )
            .map(|e| (Limit::ChecksPerAddress, e)),
            Request::Subscribe {
                session,
                key,
                prefix,
                ..
            } if !self.events.subscribed(session.id, key, *prefix) => over(
                peer,
                |p| q.subscriptions.used(p) + 1,
                c.max_subscriptions_per_peer,
                "subscriptions",
            )
            .map(|e| (Limit::SubscriptionsPerAddress, e)),
            Request::Put(put) => over(
                peer,
                |p| {
                    q.bytes
                        .used_with(p, &put.key, node_bytes(&put.key, put.contents.len()))
                },
                c.max_bytes_per_peer,
                "bytes of nodes",
            )
            .map(|e| (Limit::BytesPerAddress, e)),
            Request::Acquire(a) => {
                let waiting = a.wait_ms.is_some().then(|| {
                    over(
                        peer,
                        |p| q.waiters.used(p) + 1,
                        c.max_waiters_per_peer,
                        "acquires waiting",
                    )
                    .map(|e| (Limit::WaitersPerAddress, e))
                });
                let writing = a.contents.as_ref().map(|contents| {
                    over(
                        peer,
                        |p| {
                            q.bytes
                                .used_with(p, &a.key, node_bytes(&a.key, contents.len()))
                        },
                        c.max_bytes_per_peer,
                        "bytes of nodes",
                    )
                    .map(|e| (Limit::BytesPerAddress, e))
                });
                waiting.flatten().or(writing.flatten())
            }
            _ => None,
        }
    }

    /// Counts the node at `key`, just written by `peer`, against it; the
    /// node's previous writer gets its bytes back (`QUOTA-5`).
    pub(crate) fn count_node_bytes(&mut self, key: String, peer: Option<std::net::IpAddr>) {
        let (Some(peer), Some(node)) = (peer, self.state.namespace().get(&key)) else {
            return;
        };
        let bytes = (key.len() + node.contents.len()) as u64;
        self.quotas.bytes.take(key, peer, bytes);
    }

    /// Counts a new session against the peer that created it (`QUOTA-2`).
    pub(super) fn counted_session(
        &mut self,
        id: SessionId,
        peer: Option<std::net::IpAddr>,
    ) -> SessionId {
        if let Some(peer) = peer {
            let slot = self.quotas.sessions.take_kept(peer, 1);
            if let Some(before) = self.leases.set_creator(id, slot) {
                self.quotas.sessions.give_back_kept(before, 1);
            }
        }
        id
    }

    /// The address that created `session`, if one counts it (`QUOTA-2`).
    pub(super) fn creator(&self, session: SessionId) -> Option<std::net::IpAddr> {
        creator(&self.leases, &self.quotas.sessions, session)
    }
}

/// The address that created `session`, if one counts it (`QUOTA-2`): the
/// slot its lease keeps, in the session ledger. Apart from the engine, for
/// callers that hold other parts of it borrowed.
pub(super) fn creator<H>(
    leases: &Leases<H>,
    sessions: &Ledger<SessionId>,
    session: SessionId,
) -> Option<std::net::IpAddr> {
    leases.creator(session).map(|slot| sessions.peer_of(slot))
}
