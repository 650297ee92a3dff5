//! Serving the requests that change or show rules and tokens (`ACL-1`,
//! `ACL-5`, `ACL-6`, `TOK-1`..`TOK-4`). Admission checked the rights they
//! need; each change is a logged command.

use leasehold_protocol::access::{BearerToken, Rights, Rule};
use leasehold_protocol::{Error, ErrorCode, Response};

use super::rights::described;
use super::Engine;
use crate::access::{hash_secret, Access, Principal};
use crate::state::command::{
    CreateToken, RemoveRule, RevokeToken, SetAccessControl, SetRule, TokenCreated,
};
use crate::time::Millis;

impl Engine {
    /// Fans out every change already applied before an access change is,
    /// so that each subscriber hears of a change by the rules of the index
    /// it was made at (`ACL-4`).
    fn fan_out_all(&mut self) {
        while self.events.owes() {
            self.deliver_events();
        }
    }

    pub(crate) fn set_rule(
        &mut self,
        rule: Rule,
        by: &Principal,
        now: Millis,
    ) -> Result<Response, Error> {
        let (prefix, who, rights) = (rule.prefix.clone(), rule.principal.clone(), rule.rights);
        self.keeps_admin(by, |after| {
            after.set_rule(prefix, who, rights);
        })?;
        self.fan_out_all();
        self.apply(SetRule { rule }, now)
            .map(|index| Response::AccessChanged { index })
    }

    pub(crate) fn remove_rule(
        &mut self,
        prefix: String,
        principal: String,
        by: &Principal,
        now: Millis,
    ) -> Result<Response, Error> {
        self.keeps_admin(by, |after| {
            after.remove_rule(&prefix, &principal);
        })?;
        self.fan_out_all();
        self.apply(RemoveRule { prefix, principal }, now)
            .map(|index| Response::AccessChanged { index })
    }

    /// Refuses a rule change that would take `admin` on every key from the
    /// one who makes it, while access control is on: as turning it on, it
    /// would leave nobody but the operator able to change the rules again
    /// (`ACL-5`).
    fn keeps_admin(&self, by: &Principal, change: impl FnOnce(&mut Access)) -> Result<(), Error> {
        let access = &self.state.access;
        if !access.enabled || !access.allows(by, "", Rights::ADMIN) {
            return Ok(());
        }
        let mut after = access.clone();
        change(&mut after);
        if after.allows(by, "", Rights::ADMIN) {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "that change would leave {} without admin on every key, and perhaps nobody but \
                 the operator able to change the rules again: have another admin make it, or \
                 make it with the operator token",
                described(by)
            ),
        ))
    }

    pub(crate) fn list_rules(&self) -> Response {
        Response::Rules {
            rules: self.state.access.rules(),
            enabled: self.state.access.enabled,
        }
    }

    /// Turns access control on or off (`ACL-5`). Turning it on is refused
    /// if the caller would not keep `admin` on every key: nobody could
    /// turn it off again but the operator, and a cell without an operator
    /// token has none.
    pub(crate) fn set_access_control(
        &mut self,
        enabled: bool,
        principal: &Principal,
        now: Millis,
    ) -> Result<Response, Error> {
        if enabled && !self.state.access.enabled {
            let mut after = self.state.access.clone();
            after.enabled = true;
            if !after.allows(principal, "", Rights::ADMIN) {
                return Err(Error::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "turning access control on would leave {} without admin on every key, \
                         and nobody but the operator could change the rules again: first set \
                         a rule such as `acl set \"\" <you> all`",
                        described(principal)
                    ),
                ));
            }
        }
        self.fan_out_all();
        self.apply(SetAccessControl { enabled }, now)
            .map(|index| Response::AccessChanged { index })
    }

    /// Creates a token (`TOK-1`): its secret is chosen here and shown in
    /// this reply alone; the log and the state keep its hash.
    pub(crate) fn create_token(
        &mut self,
        principal: String,
        note: String,
        now: Millis,
    ) -> Result<Response, Error> {
        let secret = self.ids.next_token_secret();
        let command = CreateToken {
            principal,
            note,
            hash: hash_secret(&secret),
        };
        self.apply(command, now)
            .map(|TokenCreated { id, index }| Response::TokenCreated {
                token: BearerToken { id, secret },
                index,
            })
    }

    /// Revokes a token (`TOK-3`): the connections that authenticated with
    /// it act as their certificate's principal, or anonymously, from the
    /// next request on, as the principal is resolved for each.
    pub(crate) fn revoke_token(&mut self, id: u64, now: Millis) -> Result<Response, Error> {
        self.fan_out_all();
        self.apply(RevokeToken { id }, now)
            .map(|index| Response::AccessChanged { index })
    }

    pub(crate) fn list_tokens(&self) -> Response {
        Response::Tokens(self.state.access.tokens())
    }
}
