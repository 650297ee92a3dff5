//! What each request needs of its principal's rights (`ACL-3`, `ACL-4`),
//! and the refusal that names the right and the prefix, never a value.
//! Requests that list keys are not refused: what they list is filtered
//! to keys the principal may read (`views.rs`, `serve.rs`).

use std::borrow::Cow;

use leasehold_protocol::access::Rights;
use leasehold_protocol::{excerpt, Error, ErrorCode, Request, Sequencer};

use super::Engine;
use crate::access::Principal;
use crate::config::SHOWN_CHARS;

/// What a request needs before it is served.
enum Needs<'a> {
    /// Nothing of the rules: it names no key, acts only for a session its
    /// secret and owner prove, or what it returns is filtered.
    Nothing,
    /// These rights on this key.
    On(Cow<'a, str>, Rights),
    /// `admin` on this prefix (a rule's).
    AdminOn(&'a str),
    /// `admin` on every key: tokens, access control, listing rules.
    Admin,
    /// Everything the state holds, session secrets included: `admin` on
    /// every key, or while access control is off the operator, if there
    /// is an operator token (`OPS-6`).
    Everything,
}

fn on(key: &str, rights: Rights) -> Needs<'_> {
    Needs::On(Cow::Borrowed(key), rights)
}

fn needs(request: &Request) -> Needs<'_> {
    use Request as R;
    match request {
        R::Get { key, .. } | R::Watch { key, .. } | R::LockInfo { key } => on(key, Rights::READ),
        R::GetCached(get) => on(&get.key, Rights::READ),
        R::Subscribe {
            key, prefix: false, ..
        } => on(key, Rights::READ),
        R::CheckSequencer { sequencer } => match Sequencer::from_bytes(sequencer) {
            Some(s) => Needs::On(Cow::Owned(s.key), Rights::READ),
            None => Needs::Nothing,
        },
        R::Put(put) => on(&put.key, Rights::WRITE),
        R::Delete { key, .. } => on(key, Rights::WRITE),
        R::Acquire(a) if a.contents.is_some() => on(&a.key, Rights::LOCK.with(Rights::WRITE)),
        R::Acquire(a) => on(&a.key, Rights::LOCK),
        // Checks are named like keys (`ACL-4`).
        R::SetCheck { name, .. } | R::DeleteCheck { name } => on(name, Rights::WRITE),
        R::SetRule(rule) => Needs::AdminOn(&rule.prefix),
        R::RemoveRule { prefix, .. } => Needs::AdminOn(prefix),
        R::ListRules
        | R::SetAccessControl { .. }
        | R::CreateToken { .. }
        | R::RevokeToken { .. }
        | R::ListTokens => Needs::Admin,
        R::SaveSnapshot | R::ReadSnapshot { .. } => Needs::Everything,
        _ => Needs::Nothing,
    }
}

/// Whether `request` changes or shows rules or tokens, or the whole state.
fn administers(request: &Request) -> bool {
    matches!(
        request,
        Request::SetRule(_)
            | Request::RemoveRule { .. }
            | Request::ListRules
            | Request::SetAccessControl { .. }
            | Request::CreateToken { .. }
            | Request::RevokeToken { .. }
            | Request::ListTokens
            | Request::SaveSnapshot
            | Request::ReadSnapshot { .. }
    )
}

/// How a principal is named in a refusal.
pub(crate) fn described(principal: &Principal) -> String {
    match principal {
        Principal::Operator => "the operator".into(),
        Principal::Named(name) => format!("principal {}", excerpt(name, SHOWN_CHARS)),
        Principal::Anonymous => "an anonymous connection".into(),
    }
}

impl Engine {
    /// Refuses a request its principal lacks the rights for (`ACL-3`).
    pub(crate) fn permitted(&self, request: &Request, principal: &Principal) -> Result<(), Error> {
        if let Request::SetCheck { name, .. } | Request::DeleteCheck { name } = request {
            self.may_change_check(name, principal)?;
        }
        // Off, every right is everyone's: only rule and token changes are
        // checked, for the operator token (`ACL-5`). The common path costs
        // no more than it did before access control.
        if !self.state.access.enabled && !administers(request) {
            return Ok(());
        }
        match needs(request) {
            Needs::Nothing => Ok(()),
            Needs::On(key, needed) => self.may(principal, &key, needed),
            Needs::AdminOn(prefix) => self.may_administer(principal, prefix),
            Needs::Admin => self.may_administer(principal, ""),
            Needs::Everything => self.may_take_everything(principal),
        }
    }

    /// Refuses unless `principal` has `needed` on `key`; the refusal names
    /// the rights missing and the rule that decided, never a value.
    pub(crate) fn may(
        &self,
        principal: &Principal,
        key: &str,
        needed: Rights,
    ) -> Result<(), Error> {
        let access = &self.state.access;
        let rights = access.rights(principal, key);
        if rights.contains(needed) {
            return Ok(());
        }
        let why = match access.decide(principal, key) {
            Some((prefix, who, granted)) => format!(
                "the rule for prefix {} and {} grants {granted}",
                excerpt(prefix, SHOWN_CHARS),
                excerpt(who, SHOWN_CHARS)
            ),
            None => "no rule covers it, and access control denies what no rule grants".into(),
        };
        Err(Error::new(
            ErrorCode::PermissionDenied,
            format!(
                "{} lacks {} on {}: {why}",
                described(principal),
                rights.missing(needed),
                excerpt(key, SHOWN_CHARS)
            ),
        ))
    }

    /// Refuses a change to the rules or tokens unless `principal` has
    /// `admin` on `prefix`. While access control is off, everyone has
    /// every right, except that a master with an operator token keeps
    /// these changes to the operator, as it keeps ending others'
    /// sessions (`ACL-5`, `AUTH-3`).
    pub(crate) fn may_administer(&self, principal: &Principal, prefix: &str) -> Result<(), Error> {
        let guarded = self.config.operator_token.is_some();
        if !self.state.access.enabled && guarded && *principal != Principal::Operator {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                "while access control is off, only the operator (the master's operator token, \
                 given with --operator-token-file) may change or list rules and tokens",
            ));
        }
        self.may(principal, prefix, Rights::ADMIN)
    }

    /// Refuses a snapshot of the whole state to all but a principal with
    /// `admin` on every key, or while access control is off, to all but
    /// the operator on a master with an operator token (`OPS-6`): it holds
    /// every key and every session's secret.
    fn may_take_everything(&self, principal: &Principal) -> Result<(), Error> {
        let guarded = self.config.operator_token.is_some();
        if !self.state.access.enabled && guarded && *principal != Principal::Operator {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                "a snapshot holds every key and every session's secret: while access control \
                 is off, only the operator (the master's operator token, given with \
                 --operator-token-file) may take one",
            ));
        }
        if self
            .state
            .access
            .allows_everywhere(principal, Rights::ADMIN)
        {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::PermissionDenied,
            format!(
                "a snapshot holds every key and every session's secret: {} lacks admin on \
                 some key",
                described(principal)
            ),
        ))
    }

    /// Refuses a change to a check another principal created, on a master
    /// with an operator token and access control off: then only its
    /// creator or the operator may change it (`CHK-6`). With access
    /// control on, the rules decide (`write` on its name).
    fn may_change_check(&self, name: &str, principal: &Principal) -> Result<(), Error> {
        let access = &self.state.access;
        if access.enabled || self.config.operator_token.is_none() {
            return Ok(());
        }
        match access.check_owner(name) {
            Some(owner) if !owner.is(principal) => Err(Error::new(
                ErrorCode::PermissionDenied,
                format!(
                    "check {} belongs to {}: only it or the operator may change it",
                    excerpt(name, SHOWN_CHARS),
                    owner.described()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Whether the session `owner` may hear of `key`: a subscriber hears
    /// only of keys its principal may read (`ACL-4`).
    pub(crate) fn may_read(&self, principal: &Principal, key: &str) -> bool {
        self.state.access.allows(principal, key, Rights::READ)
    }
}
