//! Who may act for a session (SPEC "Ownership").
//!
//! A session id is public; its secret is not. Requests that act for a
//! session carry its token, and the master checks the secret before it
//! serves them, so a connection that merely knows an id can neither
//! keep the session alive, nor release, take or inspect its locks, nor read
//! its events away. Ending a session, or taking a lock away by deleting its
//! node, needs the owner's token or, when the master has one, the
//! operator's token. The checks run on the master, before a command is
//! logged: secrets and tokens never reach the log.

use leasehold_protocol::access::Rights;
use leasehold_protocol::auth::same_bytes;
use leasehold_protocol::{Authority, Error, ErrorCode, Request, SessionId, SessionToken};

use super::rights::described;
use super::Engine;
use crate::access::Principal;
use crate::state::LockedNodes;

fn denied(message: String) -> Error {
    Error::new(ErrorCode::PermissionDenied, message)
}

/// The token a request presents to act for a session (`AUTH-2`).
fn presented(request: &Request) -> Option<&SessionToken> {
    match request {
        Request::KeepAlive(ka) => Some(&ka.session),
        Request::Acquire(a) => Some(&a.session),
        Request::Release { session, .. }
        | Request::ReleaseUnfenced { session, .. }
        | Request::GetSequencer { session, .. }
        | Request::Subscribe { session, .. }
        | Request::Unsubscribe { session, .. } => Some(session),
        Request::Put(put) => put.ephemeral.as_ref(),
        Request::GetCached(get) => Some(&get.session),
        _ => None,
    }
}

impl Engine {
    /// Refuses a request whose session token does not prove its session
    /// (`AUTH-2`). A token naming a session that is not live passes here:
    /// the request is then answered as for any such session (`ERR-1`,
    /// `ERR-2`), which tells the caller nothing `ListSessions` does not.
    pub(crate) fn authorize(&self, request: &Request, principal: &Principal) -> Result<(), Error> {
        match presented(request) {
            Some(token) => self.check_token(token, principal),
            None => Ok(()),
        }
    }

    /// Refuses `token` unless its secret is its session's and `principal`
    /// owns the session, if a principal created it (`AUTH-2`, `ID-5`).
    pub(crate) fn check_token(
        &self,
        token: &SessionToken,
        principal: &Principal,
    ) -> Result<(), Error> {
        self.check_token_of_live(token, principal).map(|_| ())
    }

    /// As [`Engine::check_token`], and says whether the session is live,
    /// from the same lookup.
    pub(crate) fn check_token_of_live(
        &self,
        token: &SessionToken,
        principal: &Principal,
    ) -> Result<bool, Error> {
        match self.state.session(token.id) {
            Some(session) if !session.secret.matches(&token.secret) => Err(denied(format!(
                "the secret does not match session {}: only its creator may act for it",
                token.id
            ))),
            Some(_) => match self.state.access.owner(token.id) {
                Some(owner) if !owner.is(principal) => Err(denied(format!(
                    "session {} belongs to {}: only a connection that acts as it may act for \
                     the session, whoever holds its secret",
                    token.id,
                    owner.described()
                ))),
                _ => Ok(true),
            },
            None => Ok(false),
        }
    }

    /// Whether `authority` is the operator: only with the master's operator
    /// token, when it has one.
    fn is_operator(&self, authority: &Authority) -> Result<bool, Error> {
        match (authority, &self.config.operator_token) {
            (Authority::Operator(given), Some(token)) => {
                if same_bytes(given.as_bytes(), token.as_bytes()) {
                    Ok(true)
                } else {
                    Err(denied("the operator token is wrong".into()))
                }
            }
            _ => Ok(false),
        }
    }

    /// Refuses to end `session` on `authority` unless it is the owner's or
    /// the operator's, or the master has no operator token (`AUTH-3`).
    pub(crate) fn may_destroy(
        &self,
        session: SessionId,
        authority: &Authority,
        principal: &Principal,
    ) -> Result<(), Error> {
        if self.state.session(session).is_none() {
            return Err(self.state.missing_session(session)); // SES-7
        }
        if self.is_operator(authority)? || *principal == Principal::Operator {
            return Ok(());
        }
        if let Authority::Session(token) = authority {
            self.check_token(token, principal)?;
            if token.id == session {
                return Ok(());
            }
        }
        if self.state.access.enabled {
            // ACL-3: ending others' sessions is an administrator's.
            return self.may(principal, "", Rights::ADMIN).map_err(|_| {
                denied(format!(
                    "destroying session {session} needs its own session token, the operator \
                     token or admin on every key, which {} lacks",
                    described(principal)
                ))
            });
        }
        if self.config.operator_token.is_none() {
            return Ok(());
        }
        Err(denied(format!(
            "destroying session {session} needs its own session token or the operator token"
        )))
    }

    /// Which locked nodes a delete on `authority` may remove (`AUTH-4`).
    pub(crate) fn locked_nodes(
        &self,
        key: &str,
        authority: &Authority,
        principal: &Principal,
    ) -> Result<LockedNodes, Error> {
        if self.is_operator(authority)? || *principal == Principal::Operator {
            return Ok(LockedNodes::Any);
        }
        let by = match authority {
            Authority::Session(token) => {
                if self.state.session(token.id).is_none() {
                    return Err(self.state.missing_session(token.id));
                }
                self.check_token(token, principal)?;
                Some(token.id)
            }
            _ => None,
        };
        if self.state.access.enabled {
            // ACL-3: others' locked nodes are an administrator's to delete.
            return Ok(
                match self.state.access.allows(principal, key, Rights::ADMIN) {
                    true => LockedNodes::Any,
                    false => LockedNodes::HeldOnlyBy(by),
                },
            );
        }
        Ok(match self.config.operator_token {
            None => LockedNodes::Any,
            Some(_) => LockedNodes::HeldOnlyBy(by),
        })
    }
}
