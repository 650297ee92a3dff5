//! Admission: the checks every request passes before the master does
//! anything for it (authority, rights, a full disk, fan-out behind, an unread
//! connection, quotas, a fail-over not yet acknowledged), and where it goes
//! next: a write to the cache gate (`cache.rs`), anything else to be served
//! (`serve.rs`).

use leasehold_protocol::{Error, ErrorCode, Request, SessionId};

use super::{Call, Engine};
use crate::config::{CONGESTED_RETRY_MS, FAILOVER_RETRY_MS};
use crate::tally::Limit;

/// The session a request acts for, when it changes or depends on that
/// session's locks, nodes or subscriptions: such requests wait for the
/// session's fail-over acknowledgement (`FO-5`).
fn acting_for(request: &Request) -> Option<SessionId> {
    match request {
        Request::Acquire(a) => Some(a.session.id),
        Request::Release { session, .. }
        | Request::ReleaseUnfenced { session, .. }
        | Request::GetSequencer { session, .. }
        | Request::Subscribe { session, .. }
        | Request::Unsubscribe { session, .. } => Some(session.id),
        Request::Put(put) => put.ephemeral.map(|t| t.id),
        _ => None,
    }
}

/// Whether a request changes the durable state, so that a master on a
/// full disk refuses it (`STORE-5`); only these may change what a cache
/// holds (`CACHE-3`).
pub(super) fn writes(request: &Request) -> bool {
    matches!(
        request,
        Request::CreateSession(_)
            | Request::DestroySession { .. }
            | Request::Put(_)
            | Request::Delete { .. }
            | Request::Acquire(_)
            | Request::Release { .. }
            | Request::ReleaseUnfenced { .. }
            | Request::SetCheck { .. }
            | Request::DeleteCheck { .. }
            | Request::SetRule(_)
            | Request::RemoveRule { .. }
            | Request::SetAccessControl { .. }
            | Request::CreateToken { .. }
            | Request::RevokeToken { .. }
    )
}

impl Engine {
    /// Takes a request in: refuses it for what every request is checked
    /// for first (authority, a full disk, fan-out behind, an unread
    /// connection, quotas, a fail-over not yet acknowledged), or passes it
    /// on: a write to the cache gate, which holds it while sessions cache
    /// what it changes (`CACHE-3`), anything else straight to be served.
    pub(super) fn handle(&mut self, call: Call) {
        let Some(call) = self.checked(call) else {
            return;
        };
        if writes(&call.request) {
            self.gate(call);
        } else {
            self.serve(call, self.now);
        }
    }

    /// Answers a request let go after it was held for caches: its checks
    /// again, as things may have changed meanwhile, then the work.
    pub(crate) fn handle_checked(&mut self, call: Call) {
        if let Some(call) = self.checked(call) {
            self.serve(call, self.now);
        }
    }

    /// The request, if it passes the checks every request passes; if not,
    /// it is answered with the refusal.
    fn checked(&mut self, call: Call) -> Option<Call> {
        let principal = self.principal_of(call.caller.as_deref());
        let allowed = self
            .authorize(&call.request, &principal) // AUTH-2, ID-5
            .and_then(|()| self.permitted(&call.request, &principal)); // ACL-3
        if let Err(refused) = allowed {
            self.audit_refusal(&call, &principal, &refused);
            self.deliver(call.reply, Err(refused));
            return None;
        }
        if self.disk_full && writes(&call.request) {
            let refusal = Error::new(
                ErrorCode::StorageFull,
                "the master's disk is full: nothing was written; reads and KeepAlives are \
                 served, and writes are accepted again once it has room",
            );
            self.deliver(call.reply, Err(refusal));
            return None; // STORE-5
        }
        if self.events.backlogged(self.config.fanout_backlog) && writes(&call.request) {
            let refusal = Error::new(
                ErrorCode::Congested {
                    retry_after_ms: CONGESTED_RETRY_MS,
                },
                "the master is behind telling subscribers of earlier writes: nothing was done; retry",
            );
            self.tally.refused(Limit::FanoutBacklog);
            self.deliver(call.reply, Err(refusal));
            return None; // EV-9
        }
        // A peer that leaves its replies unread gets nothing more to leave
        // unread, and nothing is done for it, but its leases are kept
        // (`CONN-9`).
        let keepalive = matches!(
            call.request,
            Request::KeepAlive(_) | Request::KeepAliveAll(_)
        );
        if !keepalive && self.congested(&call.reply) {
            self.tally.refused(Limit::ReplyBudget);
            let refusal = self.congested_refusal();
            self.deliver(call.reply, Err(refusal));
            return None;
        }
        if let Some((limit, refusal)) = self.over_quota(&call.request, call.peer) {
            self.tally.refused(limit);
            self.deliver(call.reply, Err(refusal));
            return None; // QUOTA-1..QUOTA-5
        }
        if let Some(session) = acting_for(&call.request) {
            // Its lease ran out; its end waits for caches (`CACHE-5`).
            if self.cache.ending.contains(&session) {
                let ended = Error::new(
                    ErrorCode::SessionExpired,
                    format!("session {session} expired: its lease ran out"),
                );
                self.deliver(call.reply, Err(ended));
                return None;
            }
            if self.events.awaits_failover(session) {
                let error = Error::new(
                    ErrorCode::FailoverInProgress {
                        retry_after_ms: FAILOVER_RETRY_MS,
                    },
                    format!(
                        "failover in progress: session {session} must acknowledge the fail-over event on its next KeepAlive; retry"
                    ),
                );
                self.deliver(call.reply, Err(error));
                return None;
            }
        }
        Some(call)
    }
}
