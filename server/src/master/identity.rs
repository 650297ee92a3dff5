//! Who a request acts as (`ID-1`..`ID-6`): the principal resolved from its
//! connection's certificate and credential, `Authenticate` and `WhoAmI`,
//! and the slowing of token guessing.

use std::collections::HashMap;
use std::net::IpAddr;

use leasehold_protocol::access::{BearerToken, Identity, Via};
use leasehold_protocol::auth::same_bytes;
use leasehold_protocol::{Error, ErrorCode, Response};

use super::Engine;
use crate::access::Principal;
use crate::caller::{Caller, Credential};
use crate::config::{AUTH_FAILURES_ALLOWED, AUTH_FAILURES_REMEMBERED, AUTH_FAILURE_WINDOW};
use crate::tally::Limit;
use crate::time::Millis;

/// Failed authentications from one address in the window that began at
/// `since` (`ID-6`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failures {
    count: u32,
    since: Millis,
}

/// Failed authentications by peer address: the master's soft state.
#[derive(Debug, Default)]
pub(crate) struct Guesses {
    by_peer: HashMap<IpAddr, Failures>,
}

impl Guesses {
    /// How long `peer` must wait before it may try again, if it failed too
    /// often in the current window.
    fn wait(&self, peer: IpAddr, now: Millis) -> Option<u64> {
        let failures = self.by_peer.get(&peer)?;
        let ends = failures.since + AUTH_FAILURE_WINDOW;
        (failures.count >= AUTH_FAILURES_ALLOWED && now < ends)
            .then(|| ends.since(now).as_millis() as u64)
    }

    fn failed(&mut self, peer: IpAddr, now: Millis) {
        if self.by_peer.len() >= AUTH_FAILURES_REMEMBERED && !self.by_peer.contains_key(&peer) {
            self.by_peer
                .retain(|_, f| now < (f.since + AUTH_FAILURE_WINDOW));
            if self.by_peer.len() >= AUTH_FAILURES_REMEMBERED {
                // Forgetting one lets it guess a few more times; keeping
                // every address would let many addresses fill memory.
                if let Some(any) = self.by_peer.keys().next().copied() {
                    self.by_peer.remove(&any);
                }
            }
        }
        let failures = self.by_peer.entry(peer).or_insert(Failures {
            count: 0,
            since: now,
        });
        if now >= (failures.since + AUTH_FAILURE_WINDOW) {
            *failures = Failures {
                count: 0,
                since: now,
            };
        }
        failures.count += 1;
    }
}

impl Engine {
    /// Who a request from `caller` acts as (`ID-1`): the operator, or the
    /// principal of its token while the token lives, or else the name in
    /// its certificate, or nobody.
    pub(crate) fn principal_of(&self, caller: Option<&Caller>) -> Principal {
        let Some(caller) = caller else {
            return Principal::Anonymous;
        };
        match caller.credential() {
            Some(Credential::Operator) if self.config.operator_token.is_some() => {
                return Principal::Operator;
            }
            Some(Credential::Token(id)) => {
                if let Some(token) = self.state.access.tokens.get(&id) {
                    return Principal::Named(token.principal.as_str().into());
                }
            }
            _ => {}
        }
        match &caller.certified {
            Some(name) => Principal::Named(name.clone()),
            None => Principal::Anonymous,
        }
    }

    /// What `WhoAmI` answers (`ID-3`).
    pub(crate) fn identity(&self, caller: Option<&Caller>) -> Identity {
        let principal = self.principal_of(caller);
        let live = |id: &u64| self.state.access.tokens.contains_key(id);
        let via = match (&principal, caller.and_then(Caller::credential)) {
            (Principal::Operator, _) => Via::Operator,
            (Principal::Named(_), Some(Credential::Token(id))) if live(&id) => Via::Token { id },
            (Principal::Named(_), _) => Via::Certificate,
            (Principal::Anonymous, _) => Via::Anonymous,
        };
        Identity {
            principal: principal.name().map(str::to_string),
            via,
            access_control: self.state.access.enabled,
        }
    }

    /// Authenticates `caller` with `token` (`ID-2`): a bearer token, or the
    /// operator token. A failure leaves the connection as it was; too many
    /// from one address in a window are refused unheard (`ID-6`).
    pub(crate) fn authenticate(
        &mut self,
        token: &str,
        caller: Option<&Caller>,
        now: Millis,
    ) -> Result<Response, Error> {
        let Some(caller) = caller else {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                "only a connection can authenticate",
            ));
        };
        if let Some(wait) = self.guesses.wait(caller.peer, now) {
            self.tally.refused(Limit::AuthFailures);
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!(
                    "{AUTH_FAILURES_ALLOWED} failed authentications from this address within \
                     {AUTH_FAILURE_WINDOW:?}: try again in {wait} ms"
                ),
            ));
        }
        let operator = self
            .config
            .operator_token
            .as_ref()
            .is_some_and(|op| same_bytes(op.as_bytes(), token.trim().as_bytes()));
        let credential = if operator {
            Some(Credential::Operator)
        } else {
            token
                .parse::<BearerToken>()
                .ok()
                .filter(|t| self.state.access.authenticate(t.id, &t.secret).is_some())
                .map(|t| Credential::Token(t.id))
        };
        match credential {
            Some(credential) => {
                caller.set_credential(Some(credential));
                Ok(Response::Identity(self.identity(Some(caller))))
            }
            None => {
                self.guesses.failed(caller.peer, now);
                // Never the token itself: it may be a secret with a typo.
                Err(Error::new(
                    ErrorCode::PermissionDenied,
                    "the token is unknown, revoked or mistyped: nothing changed on this \
                     connection",
                ))
            }
        }
    }
}
