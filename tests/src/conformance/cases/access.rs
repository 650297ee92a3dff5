//! SPEC.md, "Access control": identities, bearer tokens and rules.
//!
//! The harness has no operator token: these cases need a master without
//! one, with access control off and no rules (as `serve` starts), and skip
//! otherwise. Each leaves the master as it found it: it turns access
//! control on only under a rule that gives anyone every right on every
//! key, so that other connections keep theirs, narrows only principals of
//! its own, and removes its rules and tokens at the end.

use leasehold_protocol::access::{BearerToken, Identity, Rights, Rule, Via, ANYONE};
use leasehold_protocol::{event_mask, ErrorCode, LockMode, Request, Response};

use crate::conformance::common::{
    acquire, case, ensure, expect_error, expect_reply, keepalive, key, needs_restart, open, put,
    restart, session,
};
use crate::conformance::{Case, Check, Ctx, SKIPPED};
use crate::raw::RawConnection;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["ID-1", "ID-2", "ID-3", "TOK-1"],
            a_token_makes_a_connection_its_principal
        ),
        case!(&["ID-4"], a_token_for_no_valid_principal_is_refused),
        case!(
            &["ID-5"],
            a_session_acts_only_for_the_principal_that_made_it
        ),
        case!(&["ACL-1", "ACL-6"], rules_are_set_listed_and_removed),
        case!(&["ACL-2", "ACL-3"], the_longest_prefix_decides_each_right),
        case!(&["ACL-4"], a_subscriber_hears_and_lists_only_readable_keys),
        case!(
            &["ACL-5"],
            access_control_is_not_turned_on_by_one_it_would_lock_out
        ),
        case!(&["ACL-7"], rules_and_tokens_outlive_a_restart),
        case!(&["TOK-2", "TOK-4"], tokens_are_listed_without_secrets),
        case!(&["TOK-3"], a_revoked_token_stops_counting_at_once),
        // Last: it leaves the harness's address refused for a while.
        case!(&["ID-6"], failed_authentications_are_refused_unheard),
    ]
}

/// A name no other case or run uses.
fn unique(name: &str) -> String {
    key(name).replace('/', "-")
}

/// Ends `session` through `owner`, its principal's connection: the
/// harness's clean-up, acting as another principal, may not (`ID-5`).
async fn destroy(owner: &mut RawConnection, session: leasehold_protocol::SessionToken) -> Check {
    let destroyed = owner
        .call(Request::DestroySession {
            session: session.id,
            authority: leasehold_protocol::Authority::Session(session),
        })
        .await;
    expect_reply!(destroyed, Response::Destroyed)
        .map_err(|e| format!("the owner destroying its session: {e}"))
}

async fn who(conn: &mut RawConnection) -> Result<Identity, String> {
    expect_reply!(conn.call(Request::WhoAmI).await, Response::Identity(i) => i)
        .map_err(|e| format!("WhoAmI: {e}"))
}

async fn authenticate(conn: &mut RawConnection, token: &BearerToken) -> Check {
    let request = Request::Authenticate {
        token: token.to_string(),
    };
    expect_reply!(conn.call(request).await, Response::Identity(_))
        .map_err(|e| format!("Authenticate with a live token: {e}"))
}

/// The master made ready for a case, and what to undo after it.
struct Scope {
    admin: RawConnection,
    rules: Vec<(String, String)>,
    tokens: Vec<u64>,
}

impl Scope {
    /// Skips unless this harness may change the rules of a master whose
    /// access control is off and has no rules.
    async fn new(ctx: &Ctx) -> Result<Scope, String> {
        let (mut admin, _) = open(ctx).await;
        let listed = admin.call(Request::ListRules).await;
        match listed {
            Ok(Response::Rules { rules, enabled }) if rules.is_empty() && !enabled => {}
            Ok(Response::Rules { .. }) => {
                return Err(format!(
                    "{SKIPPED}the master has rules or access control on of its own"
                ))
            }
            Err(e) if e.code == ErrorCode::PermissionDenied => {
                return Err(format!(
                    "{SKIPPED}the master has an operator token, so the harness may not \
                     change its rules"
                ))
            }
            other => return Err(format!("ListRules: expected Rules, got {other:?}")),
        }
        let mut scope = Scope {
            admin,
            rules: Vec::new(),
            tokens: Vec::new(),
        };
        scope.rule("", ANYONE, Rights::ALL).await?;
        Ok(scope)
    }

    async fn rule(&mut self, prefix: &str, principal: &str, rights: Rights) -> Check {
        let rule = Rule {
            prefix: prefix.into(),
            principal: principal.into(),
            rights,
        };
        let set = self.admin.call(Request::SetRule(rule)).await;
        expect_reply!(set, Response::AccessChanged { .. }).map_err(|e| format!("SetRule: {e}"))?;
        self.rules.push((prefix.into(), principal.into()));
        Ok(())
    }

    async fn token(&mut self, principal: &str) -> Result<BearerToken, String> {
        let request = Request::CreateToken {
            principal: principal.into(),
            note: "conformance".into(),
        };
        let token = expect_reply!(
            self.admin.call(request).await,
            Response::TokenCreated { token, .. } => token
        )
        .map_err(|e| format!("CreateToken: {e}"))?;
        self.tokens.push(token.id);
        Ok(token)
    }

    async fn on(&mut self) -> Check {
        let on = Request::SetAccessControl { enabled: true };
        expect_reply!(self.admin.call(on).await, Response::AccessChanged { .. })
            .map_err(|e| format!("SetAccessControl on: {e}"))
    }

    /// A connection acting as `principal`, through a new token.
    async fn connect_as(&mut self, ctx: &Ctx, principal: &str) -> Result<RawConnection, String> {
        let token = self.token(principal).await?;
        let (mut conn, _) = open(ctx).await;
        authenticate(&mut conn, &token).await?;
        Ok(conn)
    }

    /// Puts the master back as it was: access control off, no rules (it
    /// had none), no tokens of the case's.
    async fn end(mut self) {
        let off = Request::SetAccessControl { enabled: false };
        let _ = self.admin.call(off).await;
        // Every rule, the case's own and any a wrong master let another
        // connection set.
        if let Ok(Response::Rules { rules, .. }) = self.admin.call(Request::ListRules).await {
            self.rules = rules.into_iter().map(|r| (r.prefix, r.principal)).collect();
        }
        for (prefix, principal) in self.rules.drain(..).rev() {
            let _ = self
                .admin
                .call(Request::RemoveRule { prefix, principal })
                .await;
        }
        for id in self.tokens.drain(..) {
            let _ = self.admin.call(Request::RevokeToken { id }).await;
        }
    }
}

/// Runs `body` in a scope, then undoes the scope whatever `body` found.
macro_rules! scoped {
    ($ctx:expr, |$scope:ident| $body:expr) => {{
        let mut $scope = Scope::new(&$ctx).await?;
        let found: Check = async { $body }.await;
        $scope.end().await;
        found
    }};
}

async fn a_token_makes_a_connection_its_principal(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let name = unique("principal");
        let token = scope.token(&name).await?;
        let text = token.to_string();
        ensure!(
            text.starts_with(&format!("lht1_{}_", token.id)) && text.len() > 64,
            "a token's text is lht1_<id>_<64 hex digits>, not {text:?}"
        );
        let (mut conn, _) = open(&ctx).await;
        authenticate(&mut conn, &token).await?;
        let identity = who(&mut conn).await?;
        ensure!(
            identity.principal.as_deref() == Some(name.as_str())
                && identity.via == Via::Token { id: token.id },
            "WhoAmI after Authenticate: expected {name} by token {}, got {identity:?}",
            token.id
        );
        // A token that is not live changes nothing on the connection.
        let mut wrong = token;
        wrong.secret[0] ^= 1;
        let (mut other, _) = open(&ctx).await;
        let before = who(&mut other).await?;
        let refused = other
            .call(Request::Authenticate {
                token: wrong.to_string(),
            })
            .await;
        expect_error!(&refused, ErrorCode::PermissionDenied)
            .map_err(|e| format!("Authenticate with a wrong secret: {e}"))?;
        let message = refused.err().map(|e| e.message).unwrap_or_default();
        ensure!(
            !message.contains(&wrong.to_string()[12..]),
            "the refusal echoes the token: {message}"
        );
        let after = who(&mut other).await?;
        ensure!(
            after == before,
            "a failed Authenticate changed the connection: {before:?} became {after:?}"
        );
        Ok(())
    })
}

async fn a_token_for_no_valid_principal_is_refused(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        for principal in [
            String::new(),
            ANYONE.to_string(),
            "a\nb".into(),
            "p".repeat(257),
        ] {
            let request = Request::CreateToken {
                principal: principal.clone(),
                note: String::new(),
            };
            let reply = scope.admin.call(request).await;
            if let Ok(Response::TokenCreated { token, .. }) = &reply {
                scope.tokens.push(token.id);
            }
            expect_error!(reply, ErrorCode::InvalidArgument).map_err(|e| {
                format!(
                    "a token for {:?}: {e}",
                    &principal[..principal.len().min(8)]
                )
            })?;
        }
        Ok(())
    })
}

async fn a_session_acts_only_for_the_principal_that_made_it(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let (owner_name, other_name) = (unique("owner"), unique("other"));
        let mut owner = scope.connect_as(&ctx, &owner_name).await?;
        let mut other = scope.connect_as(&ctx, &other_name).await?;
        let (_, w) = open(&ctx).await;
        let s = session(&mut owner, &w).await?;
        let refused = other.call(keepalive(s, &w, 0, false)).await;
        expect_error!(refused, ErrorCode::PermissionDenied)
            .map_err(|e| format!("another principal's KeepAlive with the secret: {e}"))?;
        let kept = owner.call(keepalive(s, &w, 0, false)).await;
        expect_reply!(kept, Response::KeepAlive { .. })
            .map_err(|e| format!("the owner's KeepAlive: {e}"))?;
        destroy(&mut owner, s).await
    })
}

async fn rules_are_set_listed_and_removed(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let (prefix, name) = (key("acl-1"), unique("lister"));
        scope
            .rule(&prefix, &name, Rights::READ.with(Rights::LOCK))
            .await?;
        let (rules, enabled) = expect_reply!(
            scope.admin.call(Request::ListRules).await,
            Response::Rules { rules, enabled } => (rules, enabled)
        )
        .map_err(|e| format!("ListRules: {e}"))?;
        ensure!(
            !enabled,
            "ListRules says access control is on before it was turned on"
        );
        let wanted = Rule {
            prefix: prefix.clone(),
            principal: name.clone(),
            rights: Rights::READ.with(Rights::LOCK),
        };
        ensure!(
            rules.contains(&wanted),
            "ListRules lacks {wanted}: {rules:?}"
        );
        scope.on().await?;
        let enabled = expect_reply!(
            scope.admin.call(Request::ListRules).await,
            Response::Rules { enabled, .. } => enabled
        )?;
        ensure!(
            enabled,
            "ListRules says access control is off after it was turned on"
        );
        let remove = || Request::RemoveRule {
            prefix: prefix.clone(),
            principal: name.clone(),
        };
        expect_reply!(
            scope.admin.call(remove()).await,
            Response::AccessChanged { .. }
        )
        .map_err(|e| format!("RemoveRule: {e}"))?;
        scope.rules.retain(|(p, n)| *p != prefix || *n != name);
        expect_error!(scope.admin.call(remove()).await, ErrorCode::InvalidArgument)
            .map_err(|e| format!("RemoveRule of a rule that is gone: {e}"))
    })
}

async fn the_longest_prefix_decides_each_right(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let (base, name) = (key("acl-2"), unique("reader"));
        let (open_key, shut_key) = (format!("{base}/open/k"), format!("{base}/open/shut/k"));
        for k in [&open_key, &shut_key] {
            let written = scope.admin.call(put(k, b"v", None, None)).await;
            expect_reply!(written, Response::Written { .. })?;
        }
        scope.rule(&format!("{base}/"), &name, Rights::READ).await?;
        scope
            .rule(&format!("{base}/open/shut/"), &name, Rights::NONE)
            .await?;
        scope.on().await?;
        let mut reader = scope.connect_as(&ctx, &name).await?;
        let get = |k: &str| Request::Get {
            key: k.into(),
            stat_only: false,
        };
        expect_reply!(
            reader.call(get(&open_key)).await,
            Response::Node { node: Some(_), .. }
        )
        .map_err(|e| format!("read under a rule that grants it: {e}"))?;
        let refused = reader.call(get(&shut_key)).await;
        expect_error!(&refused, ErrorCode::PermissionDenied)
            .map_err(|e| format!("read under a longer rule with no rights: {e}"))?;
        let message = refused.err().map(|e| e.message).unwrap_or_default();
        ensure!(
            message.contains("read"),
            "the refusal does not name the right: {message}"
        );
        let written = reader.call(put(&open_key, b"w", None, None)).await;
        expect_error!(written, ErrorCode::PermissionDenied)
            .map_err(|e| format!("a write with read alone: {e}"))?;
        let (_, w) = open(&ctx).await;
        let s = session(&mut reader, &w).await?;
        let locked = reader
            .call(acquire(&open_key, s, LockMode::Shared, None))
            .await;
        destroy(&mut reader, s).await?;
        expect_error!(locked, ErrorCode::PermissionDenied)
            .map_err(|e| format!("a shared lock with read alone: {e}"))?;
        let rule = Rule {
            prefix: format!("{base}/open/"),
            principal: name.clone(),
            rights: Rights::ALL,
        };
        expect_error!(
            reader.call(Request::SetRule(rule)).await,
            ErrorCode::PermissionDenied
        )
        .map_err(|e| format!("a rule set without admin: {e}"))
    })
}

async fn a_subscriber_hears_and_lists_only_readable_keys(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let (base, name) = (key("acl-4"), unique("listener"));
        scope.rule(&base, &name, Rights::LOCK).await?;
        scope
            .rule(&format!("{base}/open/"), &name, Rights::READ)
            .await?;
        scope.on().await?;
        let mut listener = scope.connect_as(&ctx, &name).await?;
        let (_, w) = open(&ctx).await;
        let s = session(&mut listener, &w).await?;
        let subscribe = Request::Subscribe {
            session: s,
            key: base.clone(),
            prefix: true,
            mask: event_mask::ALL,
        };
        expect_reply!(listener.call(subscribe).await, Response::Subscribed { .. })
            .map_err(|e| format!("Subscribe to a prefix: {e}"))?;
        let (shut, open_key) = (format!("{base}/shut/k"), format!("{base}/open/k"));
        for k in [&shut, &open_key] {
            expect_reply!(
                scope.admin.call(put(k, b"v", None, None)).await,
                Response::Written { .. }
            )?;
        }
        let events = expect_reply!(
            listener.call(keepalive(s, &w, 0, false)).await,
            Response::KeepAlive { events, .. } => events
        )?;
        destroy(&mut listener, s).await?;
        let told = format!("{events:?}");
        ensure!(
            !told.contains("/shut/"),
            "a subscriber heard of a key it may not read: {told}"
        );
        ensure!(
            told.contains("/open/k"),
            "a subscriber did not hear of a key it may read: {told}"
        );
        let list = Request::List {
            prefix: base.clone(),
            recursive: true,
            after: None,
            limit: 0,
        };
        let keys = expect_reply!(listener.call(list).await, Response::Keys { keys, .. } => keys)?;
        ensure!(
            keys == [open_key.clone()],
            "List shows {keys:?}, not only the readable {open_key}"
        );
        Ok(())
    })
}

async fn access_control_is_not_turned_on_by_one_it_would_lock_out(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        // Without the rule that gives anyone every right, nobody here
        // keeps admin.
        let removed = scope
            .admin
            .call(Request::RemoveRule {
                prefix: String::new(),
                principal: ANYONE.into(),
            })
            .await;
        expect_reply!(removed, Response::AccessChanged { .. })?;
        scope.rules.retain(|(p, n)| !(p.is_empty() && n == ANYONE));
        let on = scope
            .admin
            .call(Request::SetAccessControl { enabled: true })
            .await;
        expect_error!(on, ErrorCode::InvalidArgument)
            .map_err(|e| format!("turning access control on, keeping no admin: {e}"))?;
        let enabled = expect_reply!(
            scope.admin.call(Request::ListRules).await,
            Response::Rules { enabled, .. } => enabled
        )?;
        ensure!(!enabled, "access control was turned on all the same");
        Ok(())
    })
}

async fn rules_and_tokens_outlive_a_restart(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    scoped!(ctx, |scope| {
        let (base, name) = (key("acl-7"), unique("durable"));
        scope.rule(&base, &name, Rights::LOCK).await?;
        scope.on().await?;
        let token = scope.token(&name).await?;
        let (mut conn, _) = restart(&ctx).await?;
        authenticate(&mut conn, &token).await?;
        let read = conn
            .call(Request::Get {
                key: format!("{base}/k"),
                stat_only: false,
            })
            .await;
        expect_error!(read, ErrorCode::PermissionDenied)
            .map_err(|e| format!("after a restart, a read the rules deny: {e}"))?;
        let (mut admin, _) = open(&ctx).await;
        let enabled = expect_reply!(
            admin.call(Request::ListRules).await,
            Response::Rules { enabled, .. } => enabled
        )?;
        ensure!(enabled, "access control was off after a restart");
        // The old connection went with the old master.
        scope.admin = admin;
        Ok(())
    })
}

async fn tokens_are_listed_without_secrets(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let name = unique("twice");
        let (first, second) = (scope.token(&name).await?, scope.token(&name).await?);
        for token in [&first, &second] {
            let (mut conn, _) = open(&ctx).await;
            authenticate(&mut conn, token).await?;
            let identity = who(&mut conn).await?;
            ensure!(
                identity.principal.as_deref() == Some(name.as_str()),
                "token {} acts as {:?}, not {name}",
                token.id,
                identity.principal
            );
        }
        let listed = expect_reply!(
            scope.admin.call(Request::ListTokens).await,
            Response::Tokens(tokens) => tokens
        )?;
        let ours: Vec<_> = listed.iter().filter(|t| t.principal == name).collect();
        ensure!(
            ours.len() == 2,
            "ListTokens shows {ours:?}, not both tokens"
        );
        let shown = format!("{listed:?}");
        let secret: String = first.secret.iter().map(|b| format!("{b:02x}")).collect();
        ensure!(!shown.contains(&secret[..16]), "ListTokens shows a secret");
        Ok(())
    })
}

async fn a_revoked_token_stops_counting_at_once(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let name = unique("revoked");
        let token = scope.token(&name).await?;
        let (mut conn, _) = open(&ctx).await;
        let before = who(&mut conn).await?;
        authenticate(&mut conn, &token).await?;
        let revoked = scope
            .admin
            .call(Request::RevokeToken { id: token.id })
            .await;
        expect_reply!(revoked, Response::AccessChanged { .. })
            .map_err(|e| format!("RevokeToken: {e}"))?;
        scope.tokens.retain(|id| *id != token.id);
        let after = who(&mut conn).await?;
        ensure!(
            after.principal == before.principal && after.via == before.via,
            "after its token was revoked, the connection is {after:?}, not {before:?} again"
        );
        let again = scope
            .admin
            .call(Request::RevokeToken { id: token.id })
            .await;
        expect_error!(again, ErrorCode::InvalidArgument)
            .map_err(|e| format!("revoking a revoked token: {e}"))
    })
}

async fn failed_authentications_are_refused_unheard(ctx: Ctx) -> Check {
    scoped!(ctx, |scope| {
        let token = scope.token(&unique("guessed")).await?;
        let (mut conn, _) = open(&ctx).await;
        let mut wrong = token;
        wrong.secret[31] ^= 1;
        let attempt = |t: &BearerToken| Request::Authenticate {
            token: t.to_string(),
        };
        let mut limited = false;
        for _ in 0..6 {
            match conn.call(attempt(&wrong)).await {
                Err(e) if e.code == ErrorCode::LimitReached => {
                    limited = true;
                    break;
                }
                Err(e) if e.code == ErrorCode::PermissionDenied => {}
                other => return Err(format!("a wrong token: expected a refusal, got {other:?}")),
            }
        }
        ensure!(limited, "six wrong tokens in a row were all heard");
        let right = conn.call(attempt(&token)).await;
        expect_error!(right, ErrorCode::LimitReached)
            .map_err(|e| format!("the right token, right after: {e}"))
    })
}
