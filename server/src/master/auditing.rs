//! What the engine writes to the audit log besides lock grants and
//! releases (`apply.rs`): refused requests, authentications, rule and
//! token changes, sessions destroyed (`AUDIT-2`).

use leasehold_protocol::{Error, Request, Response, Sequencer};

use super::{Call, Engine};
use crate::access::Principal;
use crate::audit::{Audit, Outcome};
use crate::config::SHOWN_CHARS;

/// A request's name in the audit log.
pub(crate) fn request_name(request: &Request) -> &'static str {
    use Request as R;
    match request {
        R::CreateSession(_) => "create-session",
        R::KeepAlive(_) => "keepalive",
        R::DestroySession { .. } => "destroy-session",
        R::SessionInfo { .. } => "session-info",
        R::ListSessions { .. } => "list-sessions",
        R::Get { .. } => "get",
        R::List { .. } => "list",
        R::Put(_) => "put",
        R::Delete { .. } => "delete",
        R::Watch { .. } => "watch",
        R::Acquire(_) => "acquire",
        R::ReleaseUnfenced { .. } | R::Release { .. } => "release",
        R::GetSequencer { .. } => "get-sequencer",
        R::CheckSequencer { .. } => "check-sequencer",
        R::Subscribe { .. } => "subscribe",
        R::Unsubscribe { .. } => "unsubscribe",
        R::SetCheck { .. } => "set-check",
        R::DeleteCheck { .. } => "delete-check",
        R::ListChecks { .. } => "list-checks",
        R::KeepAliveAll(_) => "keepalive-all",
        R::GetCached(_) => "get-cached",
        R::LockInfo { .. } => "lock-info",
        R::SessionLocks { .. } => "session-locks",
        R::Authenticate { .. } => "authenticate",
        R::WhoAmI => "whoami",
        R::SetRule(_) => "set-rule",
        R::RemoveRule { .. } => "remove-rule",
        R::ListRules => "list-rules",
        R::SetAccessControl { .. } => "set-access-control",
        R::CreateToken { .. } => "create-token",
        R::RevokeToken { .. } => "revoke-token",
        R::ListTokens => "list-tokens",
        R::ListLocks { .. } => "list-locks",
        R::Status => "status",
        R::SaveSnapshot => "save-snapshot",
        R::ReadSnapshot { .. } => "read-snapshot",
    }
}

/// The key (or check name, or rule prefix) a request names, if any.
fn request_key(request: &Request) -> Option<String> {
    use Request as R;
    match request {
        R::Get { key, .. }
        | R::Delete { key, .. }
        | R::Watch { key, .. }
        | R::ReleaseUnfenced { key, .. }
        | R::Release { key, .. }
        | R::GetSequencer { key, .. }
        | R::Subscribe { key, .. }
        | R::LockInfo { key } => Some(key.clone()),
        R::List { prefix, .. } | R::RemoveRule { prefix, .. } | R::ListLocks { prefix, .. } => {
            Some(prefix.clone())
        }
        R::Put(put) => Some(put.key.clone()),
        R::Acquire(a) => Some(a.key.clone()),
        R::GetCached(get) => Some(get.key.clone()),
        R::SetCheck { name, .. } | R::DeleteCheck { name } => Some(name.clone()),
        R::SetRule(rule) => Some(rule.prefix.clone()),
        R::CheckSequencer { sequencer } => Sequencer::from_bytes(sequencer).map(|s| s.key),
        _ => None,
    }
}

/// The session a request acts for or names, if any.
fn request_session(request: &Request) -> Option<leasehold_protocol::SessionId> {
    use Request as R;
    match request {
        R::KeepAlive(ka) => Some(ka.session.id),
        R::DestroySession { session, .. }
        | R::SessionInfo { session }
        | R::SessionLocks { session } => Some(*session),
        R::Acquire(a) => Some(a.session.id),
        R::ReleaseUnfenced { session, .. }
        | R::Release { session, .. }
        | R::GetSequencer { session, .. }
        | R::Subscribe { session, .. }
        | R::Unsubscribe { session, .. } => Some(session.id),
        R::GetCached(get) => Some(get.session.id),
        R::Put(put) => put.ephemeral.map(|t| t.id),
        _ => None,
    }
}

/// `text`, cut to [`SHOWN_CHARS`] characters: a client's string never
/// fills the audit log (`AUDIT-2`).
pub(crate) fn cut(text: &str) -> String {
    cut_to(text, SHOWN_CHARS)
}

/// A refusal's message: the master's words, with what they quote already
/// cut; bounded all the same.
fn cut_long(text: &str) -> String {
    cut_to(text, 4 * SHOWN_CHARS)
}

fn cut_to(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        None => text.to_string(),
        Some((at, _)) => format!("{}...", &text[..at]),
    }
}

/// `record` saying who asked: a principal's name (cut), the operator, or
/// nobody.
pub(crate) fn by(mut record: Audit, principal: &Principal) -> Audit {
    match principal {
        Principal::Operator => record.operator = Some(true),
        Principal::Named(name) => record.principal = Some(cut(name)),
        Principal::Anonymous => {}
    }
    record
}

impl Engine {
    /// Records a request refused for want of authority or a right.
    pub(crate) fn audit_refusal(&mut self, call: &Call, principal: &Principal, refused: &Error) {
        if !self.auditing() {
            return;
        }
        let mut record = by(
            Audit::new(request_name(&call.request), Outcome::Refused),
            principal,
        )
        .peer(call.peer)
        .detail(cut_long(&refused.message));
        if let Some(key) = request_key(&call.request) {
            record = record.key(cut(&key));
        }
        if let Some(session) = request_session(&call.request) {
            record = record.session(session);
        }
        self.audit(record);
    }

    /// Records the outcome of a request that changes who may do what, or
    /// that ends a session, once it is served: rules, access control,
    /// tokens, authentications, destroyed sessions (`AUDIT-2`). The token
    /// a request carries, or creates, is never written; its id is.
    pub(crate) fn audit_served(
        &mut self,
        request: &Request,
        call: (&Principal, Option<std::net::IpAddr>),
        result: &Result<Response, Error>,
    ) {
        use Request as R;
        if !self.auditing() {
            return;
        }
        let detail = match request {
            R::SetRule(rule) => format!("{} gets {}", rule.principal, rule.rights),
            R::RemoveRule { principal, .. } => format!("{principal} loses its rule"),
            R::SetAccessControl { enabled: true } => "access control on".into(),
            R::SetAccessControl { enabled: false } => "access control off".into(),
            R::CreateToken { principal, .. } => match result {
                Ok(Response::TokenCreated { token, .. }) => {
                    format!("token {} for {principal}", token.id)
                }
                _ => format!("a token for {principal}"),
            },
            R::RevokeToken { id } => format!("token {id}"),
            R::Authenticate { .. } => match result {
                Ok(Response::Identity(identity)) => identity.to_string(),
                _ => String::new(),
            },
            // Destroyed sessions, and what the operator does.
            _ => String::new(),
        };
        let (principal, peer) = call;
        let (outcome, detail) = match result {
            Ok(_) => (Outcome::Done, detail),
            Err(e) if detail.is_empty() => (Outcome::Refused, e.message.clone()),
            Err(e) => (Outcome::Refused, format!("{detail}: {}", e.message)),
        };
        let mut record = by(Audit::new(request_name(request), outcome), principal).peer(peer);
        if !detail.is_empty() {
            record = record.detail(cut_long(&detail));
        }
        if let Some(key) = request_key(request) {
            record = record.key(cut(&key));
        }
        if let Some(session) = request_session(request) {
            record = record.session(session);
        }
        if let Ok(Response::AccessChanged { index } | Response::TokenCreated { index, .. }) = result
        {
            record = record.index(*index);
        }
        self.audit(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // AUDIT-2: a client's long string does not fill the log.
    #[test]
    fn a_long_key_is_cut() {
        let cut = cut(&"k".repeat(100_000));
        assert!(cut.len() < 100, "{} bytes", cut.len());
        assert!(cut.ends_with("..."));
    }
}
