//! Who may do what: the durable part of access control (SPEC "Access
//! control"). Rules, bearer tokens (their hashes), whether access control
//! is on, and who created each session are part of the state: logged
//! commands change them, so every member of a cell applies a change at the
//! same index and a new master enforces what the old one did (`ACL-7`).

use std::collections::BTreeMap;

use leasehold_protocol::access::{Rights, Rule, TokenInfo, ANYONE};
use leasehold_protocol::SessionId;
use serde::{Deserialize, Serialize};

/// Who a request acts as, once the master resolved its connection's
/// credentials (`ID-1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The master's operator token: every right.
    Operator,
    /// A certificate's or a token's principal.
    Named(Box<str>),
    /// No credentials.
    Anonymous,
}

impl Principal {
    /// Its name, if it has one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Principal::Named(name) => Some(name),
            _ => None,
        }
    }
}

/// Whose a session or a check is, when a principal or the operator made it
/// (`ID-5`, `CHK-6`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Owner {
    Principal(String),
    Operator,
}

impl Owner {
    /// The owner a request from `principal` makes, if it has one.
    pub fn of(principal: &Principal) -> Option<Owner> {
        match principal {
            Principal::Named(name) => Some(Owner::Principal(name.to_string())),
            Principal::Operator => Some(Owner::Operator),
            Principal::Anonymous => None,
        }
    }

    /// Whether `principal` is this owner; the operator is every owner.
    pub fn is(&self, principal: &Principal) -> bool {
        match (self, principal) {
            (_, Principal::Operator) => true,
            (Owner::Principal(name), Principal::Named(other)) => **name == **other,
            _ => false,
        }
    }

    /// Who the owner acts as, for what it may hear (`ACL-4`).
    pub fn principal(&self) -> Principal {
        match self {
            Owner::Principal(name) => Principal::Named(name.as_str().into()),
            Owner::Operator => Principal::Operator,
        }
    }

    /// How a refusal names it.
    pub fn described(&self) -> String {
        match self {
            Owner::Principal(name) => format!(
                "principal {}",
                leasehold_protocol::excerpt(name, crate::config::SHOWN_CHARS)
            ),
            Owner::Operator => "the operator".into(),
        }
    }
}

/// A bearer token as the state keeps it: the SHA-256 hash of its secret,
/// never the secret (`TOK-1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredToken {
    pub principal: String,
    pub note: String,
    pub hash: [u8; 32],
    pub created_index: u64,
}

/// Rules, tokens and owners.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// Off: every request is allowed, as before access control existed
    /// (`ACL-5`).
    pub(crate) enabled: bool,
    /// By prefix, then principal: a key's prefixes are looked up as they
    /// are, with no string made for each.
    pub(crate) rules: BTreeMap<String, BTreeMap<String, Rights>>,
    pub(crate) tokens: BTreeMap<u64, StoredToken>,
    /// The id the next token gets: ids are never used twice, so a revoked
    /// token's id never comes back to life.
    pub(crate) next_token: u64,
    /// Who created each live session, if a principal or the operator did
    /// (`ID-5`).
    pub(crate) owners: BTreeMap<SessionId, Owner>,
    /// Who created each health check, if a principal or the operator did
    /// (`CHK-6`).
    pub(crate) check_owners: BTreeMap<String, Owner>,
}

impl Access {
    /// The rights `principal` has on `key` (`ACL-2`): all of them while
    /// access control is off, or for the operator; otherwise those of the
    /// rule with the longest prefix of `key` that names the principal or
    /// anyone, the principal's own rule first where both have that
    /// prefix; none if no rule covers the key.
    pub fn rights(&self, principal: &Principal, key: &str) -> Rights {
        match principal {
            _ if !self.enabled => Rights::ALL,
            Principal::Operator => Rights::ALL,
            _ => self
                .decide(principal, key)
                .map_or(Rights::NONE, |(_, _, rights)| rights),
        }
    }

    /// The rule that decides what `principal` may do on `key`, by its
    /// prefix and principal, with the rights it grants; `None` if no rule
    /// covers the key.
    pub fn decide(&self, principal: &Principal, key: &str) -> Option<(&str, &str, Rights)> {
        let name = principal.name();
        let cuts = key
            .char_indices()
            .map(|(at, _)| at)
            .chain(std::iter::once(key.len()));
        let mut found = None;
        // The shortest first: the longest that has a rule for the
        // principal, or for anyone, is the last found.
        for cut in cuts {
            let Some((prefix, by_principal)) = self.rules.get_key_value(&key[..cut]) else {
                continue;
            };
            let rule = name
                .and_then(|name| by_principal.get_key_value(name))
                .or_else(|| by_principal.get_key_value(ANYONE));
            if let Some((who, rights)) = rule {
                found = Some((prefix.as_str(), who.as_str(), *rights));
            }
        }
        found
    }

    /// Sets the rule of `prefix` and `principal`; whether it is a new one.
    pub(crate) fn set_rule(&mut self, prefix: String, principal: String, rights: Rights) -> bool {
        self.rules
            .entry(prefix)
            .or_default()
            .insert(principal, rights)
            .is_none()
    }

    /// Removes the rule of `prefix` and `principal`; whether there was one.
    pub(crate) fn remove_rule(&mut self, prefix: &str, principal: &str) -> bool {
        let Some(by_principal) = self.rules.get_mut(prefix) else {
            return false;
        };
        let removed = by_principal.remove(principal).is_some();
        if by_principal.is_empty() {
            self.rules.remove(prefix);
        }
        removed
    }

    /// How many rules there are.
    pub(crate) fn rule_count(&self) -> usize {
        self.rules.values().map(BTreeMap::len).sum()
    }

    /// Whether `prefix` and `principal` have a rule.
    pub(crate) fn has_rule(&self, prefix: &str, principal: &str) -> bool {
        self.rules
            .get(prefix)
            .is_some_and(|by_principal| by_principal.contains_key(principal))
    }

    /// Whether `principal` has every right in `needed` on `key`.
    pub fn allows(&self, principal: &Principal, key: &str, needed: Rights) -> bool {
        self.rights(principal, key).contains(needed)
    }

    /// Whether `principal` has every right in `needed` on every key: a
    /// longer prefix's rule can take away what the root's grants
    /// (`ACL-2`), and each key is decided by the root's rule or by some
    /// rule's prefix, so it is enough to ask at the root and at each
    /// prefix a rule names.
    pub fn allows_everywhere(&self, principal: &Principal, needed: Rights) -> bool {
        self.allows(principal, "", needed)
            && self
                .rules
                .keys()
                .all(|prefix| self.allows(principal, prefix, needed))
    }

    /// Every rule, by prefix then principal.
    pub fn rules(&self) -> Vec<Rule> {
        self.rules
            .iter()
            .flat_map(|(prefix, by_principal)| {
                by_principal.iter().map(move |(principal, rights)| Rule {
                    prefix: prefix.clone(),
                    principal: principal.clone(),
                    rights: *rights,
                })
            })
            .collect()
    }

    /// Every token, without its hash.
    pub fn tokens(&self) -> Vec<TokenInfo> {
        self.tokens
            .iter()
            .map(|(id, token)| TokenInfo {
                id: *id,
                principal: token.principal.clone(),
                note: token.note.clone(),
                created_index: token.created_index,
            })
            .collect()
    }

    /// The principal whose token this is, if a live token of that id has
    /// that secret. The hashes are compared in constant time.
    pub fn authenticate(&self, id: u64, secret: &[u8; 32]) -> Option<&str> {
        let token = self.tokens.get(&id)?;
        let hash = hash_secret(secret);
        leasehold_protocol::auth::same_bytes(&hash, &token.hash).then_some(&token.principal)
    }

    /// The principal that created check `name`, if it had a name.
    pub fn check_owner(&self, name: &str) -> Option<&Owner> {
        self.check_owners.get(name)
    }

    /// The principal that created `session`, if it had a name.
    pub fn owner(&self, session: SessionId) -> Option<&Owner> {
        self.owners.get(&session)
    }
}

/// The SHA-256 hash of a token's secret, which is what the state keeps:
/// the secret has 256 random bits, so a fast hash is as strong as a slow
/// one here, and a stolen snapshot or log yields no usable token.
pub fn hash_secret(secret: &[u8; 32]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret);
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(rules: &[(&str, &str, Rights)]) -> Access {
        let mut access = Access {
            enabled: true,
            ..Access::default()
        };
        for (prefix, principal, rights) in rules {
            access.set_rule(prefix.to_string(), principal.to_string(), *rights);
        }
        access
    }

    fn named(name: &str) -> Principal {
        Principal::Named(name.into())
    }

    // ACL-5
    #[test]
    fn everything_is_allowed_while_access_control_is_off() {
        let access = Access::default();
        assert_eq!(access.rights(&Principal::Anonymous, "x"), Rights::ALL);
    }

    // ACL-2
    #[test]
    fn with_access_control_on_a_key_no_rule_covers_is_denied() {
        let access = with(&[("jobs/", "ci", Rights::LOCK)]);
        assert_eq!(access.rights(&named("ci"), "other"), Rights::NONE);
        assert_eq!(access.rights(&Principal::Anonymous, "jobs/a"), Rights::NONE);
    }

    // ACL-2
    #[test]
    fn the_longest_prefix_wins() {
        let access = with(&[
            ("", "ci", Rights::READ),
            ("jobs/", "ci", Rights::LOCK),
            ("jobs/secret/", "ci", Rights::NONE),
        ]);
        assert_eq!(access.rights(&named("ci"), "svc/db"), Rights::READ);
        assert_eq!(access.rights(&named("ci"), "jobs/a"), Rights::LOCK);
        assert_eq!(access.rights(&named("ci"), "jobs/secret/k"), Rights::NONE);
    }

    // ACL-2
    #[test]
    fn a_principals_own_rule_beats_anyones_at_the_same_prefix() {
        let access = with(&[("jobs/", "*", Rights::READ), ("jobs/", "ci", Rights::ALL)]);
        assert_eq!(access.rights(&named("ci"), "jobs/a"), Rights::ALL);
        assert_eq!(access.rights(&named("other"), "jobs/a"), Rights::READ);
        assert_eq!(access.rights(&Principal::Anonymous, "jobs/a"), Rights::READ);
    }

    #[test]
    fn anyones_longer_prefix_beats_a_principals_shorter_one() {
        let access = with(&[("", "ci", Rights::ALL), ("pub/", "*", Rights::READ)]);
        assert_eq!(access.rights(&named("ci"), "pub/x"), Rights::READ);
    }

    #[test]
    fn the_operator_has_every_right() {
        let access = with(&[]);
        assert_eq!(access.rights(&Principal::Operator, "x"), Rights::ALL);
    }

    #[test]
    fn a_token_authenticates_only_with_its_own_secret() {
        let mut access = Access::default();
        access.tokens.insert(
            4,
            StoredToken {
                principal: "ci".into(),
                note: String::new(),
                hash: hash_secret(&[9; 32]),
                created_index: 1,
            },
        );
        assert_eq!(access.authenticate(4, &[9; 32]), Some("ci"));
        assert_eq!(access.authenticate(4, &[8; 32]), None);
        assert_eq!(access.authenticate(5, &[9; 32]), None);
    }
}
