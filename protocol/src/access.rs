//! Identities and access control (SPEC "Access control").
//!
//! A connection acts as a *principal*: the name in the client certificate
//! TLS verified, or the principal of a bearer token it authenticated with
//! (`ID-1`). Rules grant a principal [`Rights`] on the keys under a prefix;
//! the longest prefix that names the principal, or anyone (`*`), decides
//! (`ACL-2`).
//!
//! # Example
//! ```
//! use leasehold_protocol::access::{BearerToken, Rights, Rule};
//!
//! let rights: Rights = "read,lock".parse().unwrap();
//! assert!(rights.contains(Rights::LOCK));
//! assert!(!rights.contains(Rights::WRITE));
//! assert_eq!(rights.to_string(), "read,lock");
//!
//! let rule: Rule = "jobs/ builder lock".parse().unwrap();
//! assert_eq!(rule.principal, "builder");
//!
//! let token = BearerToken { id: 3, secret: [0x5a; 32] };
//! let text = token.to_string();
//! assert!(text.starts_with("lht1_3_"));
//! assert_eq!(text.parse::<BearerToken>().unwrap(), token);
//! // Debug output never shows the secret.
//! assert!(!format!("{token:?}").contains("5a5a"));
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::excerpt;

/// The principal a rule names to mean every connection, anonymous ones
/// included (`ACL-2`).
pub const ANYONE: &str = "*";

/// The longest principal name, in bytes (`ID-4`).
pub const MAX_PRINCIPAL: usize = 256;

/// The longest note kept with a token, in bytes.
pub const MAX_TOKEN_NOTE: usize = 256;

/// What a rule lets its principal do under its prefix (`ACL-3`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Rights(u8);

impl Rights {
    /// Nothing: a rule with no rights denies what a shorter prefix grants.
    pub const NONE: Rights = Rights(0);
    /// Learn a key's contents or existence: get, stat, list, watch,
    /// subscriptions and their events, cached reads, lock information.
    pub const READ: Rights = Rights(1);
    /// Create, write and delete nodes; set and delete health checks.
    pub const WRITE: Rights = Rights(2);
    /// Acquire a node's lock, shared or exclusive, and release it.
    pub const LOCK: Rights = Rights(4);
    /// Change rules and tokens, destroy others' sessions, delete others'
    /// locked nodes.
    pub const ADMIN: Rights = Rights(8);
    /// Every right.
    pub const ALL: Rights = Rights(15);

    const NAMES: [(Rights, &'static str); 4] = [
        (Rights::READ, "read"),
        (Rights::WRITE, "write"),
        (Rights::LOCK, "lock"),
        (Rights::ADMIN, "admin"),
    ];

    /// Whether these rights include every one of `other`.
    pub fn contains(self, other: Rights) -> bool {
        self.0 & other.0 == other.0
    }

    /// These rights and `other`'s.
    pub fn with(self, other: Rights) -> Rights {
        Rights(self.0 | other.0)
    }

    /// The rights that are in `other` and not here, to name in a refusal.
    pub fn missing(self, other: Rights) -> Rights {
        Rights(other.0 & !self.0)
    }
}

impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Rights::NONE {
            return f.write_str("none");
        }
        if *self == Rights::ALL {
            return f.write_str("all");
        }
        let mut first = true;
        for (right, name) in Rights::NAMES {
            if self.contains(right) {
                if !first {
                    f.write_str(",")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rights({self})")
    }
}

/// Why text is not rights, a rule or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AccessParseError(String);

impl FromStr for Rights {
    type Err = AccessParseError;

    /// Rights are a comma-separated list of `read`, `write`, `lock` and
    /// `admin`, or `all`, or `none`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = text.split(',').map(str::trim).collect();
        if words.len() > 1 && words.contains(&"none") {
            return Err(AccessParseError(
                "none stands alone: it is a rule that grants nothing".into(),
            ));
        }
        let mut rights = Rights::NONE;
        for word in words {
            rights = rights.with(match word {
                "all" => Rights::ALL,
                "none" => Rights::NONE,
                _ => Rights::NAMES
                    .iter()
                    .find(|(_, name)| *name == word)
                    .map(|(right, _)| *right)
                    .ok_or_else(|| {
                        AccessParseError(format!(
                            "{} is not a right: rights are read, write, lock, admin, all or \
                             none, separated by commas",
                            excerpt(word, 32)
                        ))
                    })?,
            });
        }
        Ok(rights)
    }
}

/// Whether `name` may be a principal's (`ID-4`): 1 to 256 bytes, no
/// control characters, and not [`ANYONE`], which rules use for everyone.
pub fn check_principal(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_PRINCIPAL {
        return Err(format!(
            "a principal's name is 1 to {MAX_PRINCIPAL} bytes, not {}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("a principal's name has no control characters".into());
    }
    if name == ANYONE {
        return Err(format!(
            "{ANYONE:?} stands for anyone in rules: no principal has it as its name"
        ));
    }
    Ok(())
}

/// A rule: `principal` has `rights` on every key that starts with
/// `prefix` (`ACL-1`). Its text form is `PREFIX PRINCIPAL RIGHTS`, with
/// `""` for the empty prefix, which covers every key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// The keys covered: those that start with it.
    pub prefix: String,
    /// Who: a principal's name, or [`ANYONE`].
    pub principal: String,
    /// What they may do there.
    pub rights: Rights,
}

impl fmt::Display for Rule {
    /// A prefix or principal that is empty or holds blanks is quoted, so
    /// the three words stay apart.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = |text: &str| {
            if text.is_empty() || text.contains(char::is_whitespace) {
                format!("{text:?}")
            } else {
                text.to_string()
            }
        };
        write!(
            f,
            "{} {} {}",
            word(&self.prefix),
            word(&self.principal),
            self.rights
        )
    }
}

impl FromStr for Rule {
    type Err = AccessParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let [prefix, principal, rights] = words[..] else {
            return Err(AccessParseError(
                "a rule is PREFIX PRINCIPAL RIGHTS, with \"\" for every key".into(),
            ));
        };
        let prefix = if prefix == "\"\"" { "" } else { prefix };
        Ok(Rule {
            prefix: prefix.to_string(),
            principal: principal.to_string(),
            rights: rights.parse()?,
        })
    }
}

/// How a connection proved who it is (`ID-1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Via {
    /// It did not: no client certificate, no token.
    Anonymous,
    /// TLS verified its client certificate, whose name is the principal.
    Certificate,
    /// It authenticated with the bearer token of this id.
    Token {
        /// The token's id.
        id: u64,
    },
    /// It authenticated with the master's operator token: every right.
    Operator,
}

/// Who a connection acts as: the answer to `WhoAmI` and `Authenticate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The principal; `None` for an anonymous connection or the operator.
    pub principal: Option<String>,
    /// How it was proved.
    pub via: Via,
    /// Whether access control is on: if not, every connection may do
    /// everything, as before it existed (`ACL-5`).
    pub access_control: bool,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.principal, &self.via) {
            (_, Via::Operator) => f.write_str("the operator (operator token)")?,
            (Some(name), Via::Certificate) => write!(f, "{name} (client certificate)")?,
            (Some(name), Via::Token { id }) => write!(f, "{name} (token {id})")?,
            _ => f.write_str("anonymous")?,
        }
        let state = if self.access_control { "on" } else { "off" };
        write!(f, "; access control is {state}")
    }
}

/// A bearer token as listed: never its secret, which only its creation
/// showed (`TOK-1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its id, which revoking it names.
    pub id: u64,
    /// The principal it authenticates as.
    pub principal: String,
    /// What it is for, for people.
    pub note: String,
    /// The global index at which it was created.
    pub created_index: u64,
}

/// A bearer token: an id and 256 random bits (`TOK-1`). The master keeps
/// only the secret's SHA-256 hash. Its text form is `lht1_<id>_<64 hex
/// digits>`, recognisable to secret scanners.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BearerToken {
    /// Its id, public: `token list` shows it.
    pub id: u64,
    /// The secret.
    pub secret: [u8; 32],
}

const TOKEN_PREFIX: &str = "lht1_";

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TOKEN_PREFIX}{}_", self.id)?;
        for b in self.secret {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl FromStr for BearerToken {
    type Err = AccessParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // Never echo the text: it may be a secret with a typo.
        let malformed = || {
            AccessParseError(format!(
                "a token is {TOKEN_PREFIX}<id>_<64 hex digits>, as `leasehold token create` \
                 printed it"
            ))
        };
        let rest = text
            .trim()
            .strip_prefix(TOKEN_PREFIX)
            .ok_or_else(malformed)?;
        let (id, hex) = rest.split_once('_').ok_or_else(malformed)?;
        let id = id.parse::<u64>().map_err(|_| malformed())?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed());
        }
        let mut secret = [0u8; 32];
        for (i, byte) in secret.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| malformed())?;
        }
        Ok(BearerToken { id, secret })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_read_back_from_their_text() {
        for rights in 0..16u8 {
            let rights = Rights(rights);
            assert_eq!(rights.to_string().parse::<Rights>(), Ok(rights));
        }
        assert_eq!("all".parse::<Rights>(), Ok(Rights::ALL));
    }

    #[test]
    fn an_unknown_right_is_named_in_the_refusal_but_cut() {
        let error = "read,rite".parse::<Rights>().unwrap_err().to_string();
        assert!(error.contains("\"rite\""), "{error}");
        let long = "x".repeat(10_000);
        assert!(long.parse::<Rights>().unwrap_err().to_string().len() < 300);
    }

    #[test]
    fn none_does_not_combine_with_other_rights() {
        assert!("lock,none".parse::<Rights>().is_err());
        assert_eq!("none".parse::<Rights>(), Ok(Rights::NONE));
    }

    #[test]
    fn a_principal_with_blanks_is_quoted_in_a_rules_text() {
        let rule = Rule {
            prefix: "tmp/".into(),
            principal: "c i".into(),
            rights: Rights::READ,
        };
        assert_eq!(rule.to_string(), "tmp/ \"c i\" read");
    }

    #[test]
    fn a_rule_reads_back_from_its_text() {
        for rule in [
            Rule {
                prefix: "jobs/".into(),
                principal: "ci".into(),
                rights: Rights::LOCK,
            },
            Rule {
                prefix: String::new(),
                principal: ANYONE.into(),
                rights: Rights::READ,
            },
        ] {
            assert_eq!(rule.to_string().parse::<Rule>(), Ok(rule));
        }
    }

    #[test]
    fn a_mistyped_token_is_refused_without_being_echoed() {
        let token = BearerToken {
            id: 9,
            secret: [0xcd; 32],
        };
        let mut text = token.to_string();
        text.pop();
        let error = text.parse::<BearerToken>().unwrap_err().to_string();
        assert!(!error.contains("cdcd"), "{error}");
        assert!("lht1_x_00".parse::<BearerToken>().is_err());
    }

    #[test]
    fn principal_names_are_bounded() {
        assert!(check_principal("alice").is_ok());
        assert!(check_principal("").is_err());
        assert!(check_principal(&"a".repeat(MAX_PRINCIPAL + 1)).is_err());
        assert!(check_principal("a\nb").is_err());
    }
}
