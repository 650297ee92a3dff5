//! What access-control commands do to the state (`ACL-1`, `TOK-1`..).
//! Each is checked again here, not only on the master before it is
//! logged, so that a log replayed on any member gives the same state.

use leasehold_protocol::access::{check_principal, MAX_TOKEN_NOTE};
use leasehold_protocol::{Error, ErrorCode};

use super::command::{
    Applied, CreateToken, Kind, OwnedCheck, OwnedSession, RemoveRule, RevokeToken,
    SetAccessControl, SetRule, TokenCreated,
};
use super::CheckChanged;
use super::{State, StateEvent};
use crate::access::{Owner, StoredToken};
use crate::config::{MAX_KEY_LEN, MAX_RULES, MAX_TOKENS};
use crate::session::Session;
use crate::time::Millis;

fn invalid(message: String) -> Error {
    Error::new(ErrorCode::InvalidArgument, message)
}

/// Whether a rule for `principal` on `prefix` may exist: the prefix no
/// longer than a key, the principal a principal's name or anyone.
pub(crate) fn check_rule(prefix: &str, principal: &str) -> Result<(), Error> {
    if prefix.len() > MAX_KEY_LEN {
        return Err(invalid(format!(
            "a rule's prefix of {} bytes exceeds the maximum of {MAX_KEY_LEN}, a key's",
            prefix.len()
        )));
    }
    if principal != leasehold_protocol::access::ANYONE {
        check_principal(principal).map_err(invalid)?;
    }
    Ok(())
}

fn check_owner(owner: &Owner) -> Result<(), Error> {
    match owner {
        Owner::Principal(name) => check_principal(name).map_err(invalid),
        Owner::Operator => Ok(()),
    }
}

impl Kind for SetRule {
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        _: Millis,
        _: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        let rule = self.rule;
        check_rule(&rule.prefix, &rule.principal)?;
        let access = &mut state.access;
        if !access.has_rule(&rule.prefix, &rule.principal) && access.rule_count() >= MAX_RULES {
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!("there are {MAX_RULES} rules already, the most a cell keeps"),
            ));
        }
        access.set_rule(rule.prefix, rule.principal, rule.rights);
        Ok(index)
    }
    fn applied(index: u64) -> Applied {
        Applied::AccessChanged { index }
    }
}

impl Kind for RemoveRule {
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        _: Millis,
        _: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        match state.access.remove_rule(&self.prefix, &self.principal) {
            true => Ok(index),
            false => Err(invalid(
                "no rule has that prefix and principal: `acl list` shows the rules".into(),
            )),
        }
    }
    fn applied(index: u64) -> Applied {
        Applied::AccessChanged { index }
    }
}

impl Kind for SetAccessControl {
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        _: Millis,
        _: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        state.access.enabled = self.enabled;
        Ok(index)
    }
    fn applied(index: u64) -> Applied {
        Applied::AccessChanged { index }
    }
}

impl Kind for CreateToken {
    type Reply = TokenCreated;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        _: Millis,
        _: &mut Vec<StateEvent>,
    ) -> Result<TokenCreated, Error> {
        check_principal(&self.principal).map_err(invalid)?;
        if self.note.len() > MAX_TOKEN_NOTE {
            return Err(invalid(format!(
                "a token's note of {} bytes exceeds the maximum of {MAX_TOKEN_NOTE}",
                self.note.len()
            )));
        }
        let access = &mut state.access;
        if access.tokens.len() >= MAX_TOKENS {
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!("there are {MAX_TOKENS} live tokens already: revoke some first"),
            ));
        }
        let id = access.next_token.max(1);
        access.next_token = id + 1;
        access.tokens.insert(
            id,
            StoredToken {
                principal: self.principal,
                note: self.note,
                hash: self.hash,
                created_index: index,
            },
        );
        Ok(TokenCreated { id, index })
    }
    fn applied(reply: TokenCreated) -> Applied {
        Applied::TokenCreated(reply)
    }
}

impl Kind for RevokeToken {
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        _: Millis,
        _: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        match state.access.tokens.remove(&self.id) {
            Some(_) => Ok(index),
            None => Err(invalid(format!(
                "no live token has id {}: `token list` shows them",
                self.id
            ))),
        }
    }
    fn applied(index: u64) -> Applied {
        Applied::AccessChanged { index }
    }
}

impl Kind for OwnedCheck {
    type Reply = CheckChanged;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<CheckChanged, Error> {
        check_owner(&self.owner)?;
        let name = self.check.name.clone();
        let created = state.checks.get(&name).is_none();
        let changed = self.check.apply_to(state, index, now, events)?;
        if created {
            state.access.check_owners.insert(name, self.owner);
        }
        Ok(changed)
    }
    fn applied(CheckChanged { index, invalidated }: CheckChanged) -> Applied {
        Applied::CheckSet { index, invalidated }
    }
}

impl Kind for OwnedSession {
    type Reply = Session;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<Session, Error> {
        check_owner(&self.owner)?;
        let id = self.session.id;
        let session = self.session.apply_to(state, index, now, events)?;
        state.access.owners.insert(id, self.owner);
        Ok(session)
    }
    fn applied(session: Session) -> Applied {
        Applied::SessionCreated(session)
    }
}

#[cfg(test)]
mod tests {
    use leasehold_protocol::access::{Rights, Rule};

    use super::*;
    use crate::access::Principal;
    use crate::state::Bounds;
    use crate::Config;

    fn state() -> State {
        State::new(Bounds::from(&Config::default()))
    }

    // ACL-1
    #[test]
    fn a_rule_set_then_removed_leaves_no_rule() {
        let mut state = state();
        let rule = Rule {
            prefix: "jobs/".into(),
            principal: "ci".into(),
            rights: Rights::LOCK,
        };
        let (set, _) = state.apply_kind(SetRule { rule: rule.clone() }, Millis::ZERO);
        assert_eq!(set, Ok(1));
        assert_eq!(state.access.rules(), vec![rule]);
        let remove = RemoveRule {
            prefix: "jobs/".into(),
            principal: "ci".into(),
        };
        assert_eq!(state.apply_kind(remove.clone(), Millis::ZERO).0, Ok(2));
        assert!(state.access.rules().is_empty());
        // Removing it again is refused and takes no index.
        assert!(state.apply_kind(remove, Millis::ZERO).0.is_err());
        assert_eq!(state.index, 2);
    }

    // TOK-1, TOK-3
    #[test]
    fn a_revoked_tokens_id_is_never_given_again() {
        let mut state = state();
        let create = CreateToken {
            principal: "ci".into(),
            note: String::new(),
            hash: crate::access::hash_secret(&[1; 32]),
        };
        let (first, _) = state.apply_kind(create.clone(), Millis::ZERO);
        let first = first.unwrap().id;
        let (revoked, _) = state.apply_kind(RevokeToken { id: first }, Millis::ZERO);
        assert!(revoked.is_ok());
        assert_eq!(state.access.authenticate(first, &[1; 32]), None);
        let (second, _) = state.apply_kind(create, Millis::ZERO);
        assert_ne!(second.unwrap().id, first);
    }

    // ACL-5
    #[test]
    fn access_control_turned_on_denies_what_no_rule_grants() {
        let mut state = state();
        let anonymous = Principal::Anonymous;
        assert!(state.access.allows(&anonymous, "k", Rights::READ));
        let (on, _) = state.apply_kind(SetAccessControl { enabled: true }, Millis::ZERO);
        assert!(on.is_ok());
        assert!(!state.access.allows(&anonymous, "k", Rights::READ));
    }
}
