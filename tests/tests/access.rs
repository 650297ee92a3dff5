//! Identities and access control (SPEC "Access control"): bearer tokens,
//! rules by key prefix, and every way in checking them, against the real
//! master over loopback, through the library and in raw frames.

use std::time::Duration;

use leasehold::{
    BearerToken, CheckStatus, Client, ClientConfig, ClientError, DeleteOptions, ErrorCode,
    LockOptions, PutOptions, Rights, Rule, SessionOptions, SubscribeOptions, SubscriptionEvent,
    Via,
};
use leasehold_protocol::{Request, Response};
use leasehold_server::Config;
use leasehold_tests::fixture::TempDir;
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{start, Setup, TestServer};

const OPERATOR_TOKEN: &str = "operator-token-for-access-tests";

/// A master with an operator token, and the operator's client.
struct Master {
    server: TestServer,
    operator: Client,
}

fn config() -> Config {
    Config {
        operator_token: Some(OPERATOR_TOKEN.into()),
        min_lease: Duration::from_millis(100),
        ..Config::default()
    }
}

async fn connect_as(server: &TestServer, token: Option<String>) -> Result<Client, ClientError> {
    let config = ClientConfig {
        token,
        ..ClientConfig::default()
    };
    Client::connect_with(server.addr.to_string(), config).await
}

impl Master {
    async fn start() -> Master {
        let server = start(config()).await;
        let operator = connect_as(&server, Some(OPERATOR_TOKEN.into()))
            .await
            .unwrap();
        Master { server, operator }
    }

    /// The same, with access control on and `rules` set.
    async fn with_rules(rules: &[(&str, &str, Rights)]) -> Master {
        let master = Master::start().await;
        for (prefix, principal, rights) in rules {
            master.rule(prefix, principal, *rights).await;
        }
        master.operator.set_access_control(true).await.unwrap();
        master
    }

    async fn rule(&self, prefix: &str, principal: &str, rights: Rights) {
        let rule = Rule {
            prefix: prefix.into(),
            principal: principal.into(),
            rights,
        };
        self.operator.set_rule(rule).await.unwrap();
    }

    async fn token(&self, principal: &str) -> BearerToken {
        self.operator
            .create_token(principal, "tests")
            .await
            .unwrap()
    }

    /// A client acting as `principal`, through a token made for it.
    async fn client_as(&self, principal: &str) -> Client {
        let token = self.token(principal).await;
        connect_as(&self.server, Some(token.to_string()))
            .await
            .unwrap()
    }

    async fn anonymous(&self) -> Client {
        connect_as(&self.server, None).await.unwrap()
    }
}

fn refused<T: std::fmt::Debug>(result: Result<T, ClientError>) -> String {
    match result {
        Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => e.to_string(),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

// ACL-5
#[tokio::test]
async fn with_access_control_off_an_anonymous_client_may_do_everything() {
    let master = Master::start().await;
    let anyone = master.anonymous().await;
    anyone.put("jobs/a", "x", PutOptions::new()).await.unwrap();
    assert!(anyone.get("jobs/a").await.unwrap().is_some());
    let identity = anyone.who_am_i().await.unwrap();
    assert_eq!(identity.principal, None);
    assert_eq!(identity.via, Via::Anonymous);
    assert!(!identity.access_control);
}

// ID-2, ID-3
#[tokio::test]
async fn a_client_with_a_token_acts_as_its_principal() {
    let master = Master::start().await;
    let token = master.token("ci").await;
    let ci = connect_as(&master.server, Some(token.to_string()))
        .await
        .unwrap();
    let identity = ci.who_am_i().await.unwrap();
    assert_eq!(identity.principal.as_deref(), Some("ci"));
    assert_eq!(identity.via, Via::Token { id: token.id });
}

// ID-2
#[tokio::test]
async fn a_wrong_token_fails_the_connect_and_is_not_echoed() {
    let master = Master::start().await;
    let mut token = master.token("ci").await;
    token.secret[0] ^= 1;
    let text = token.to_string();
    let error = refused(connect_as(&master.server, Some(text.clone())).await);
    assert!(!error.contains(&text[10..]), "{error}");
}

// ID-6
#[tokio::test]
async fn failed_authentications_from_one_address_are_refused_unheard_after_five() {
    let master = Master::start().await;
    let good = master.token("ci").await.to_string();
    let (mut conn, _) = RawConnection::open(master.server.addr).await;
    let authenticate = |token: &str| Request::Authenticate {
        token: token.into(),
    };
    for _ in 0..5 {
        let reply = conn.call(authenticate("lht1_1_00")).await;
        assert_eq!(reply.unwrap_err().code, ErrorCode::PermissionDenied);
    }
    // The sixth, even with the right token, is not heard.
    let reply = conn.call(authenticate(&good)).await;
    assert_eq!(reply.unwrap_err().code, ErrorCode::LimitReached);
}

// TOK-1, TOK-4
#[tokio::test]
async fn tokens_are_listed_without_their_secrets() {
    let master = Master::start().await;
    let token = master.token("ci").await;
    let listed = master.operator.tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, token.id);
    assert_eq!(listed[0].principal, "ci");
    let shown = format!("{listed:?}");
    let secret: String = token.secret.iter().map(|b| format!("{b:02x}")).collect();
    assert!(!shown.contains(&secret[..16]));
}

// TOK-3
#[tokio::test]
async fn a_revoked_token_loses_its_rights_at_once_on_an_open_connection() {
    let master = Master::with_rules(&[("", "ci", Rights::READ)]).await;
    master
        .operator
        .put("svc/db", "x", PutOptions::new())
        .await
        .unwrap();
    let token = master.token("ci").await;
    let ci = connect_as(&master.server, Some(token.to_string()))
        .await
        .unwrap();
    assert!(ci.get("svc/db").await.unwrap().is_some());
    master.operator.revoke_token(token.id).await.unwrap();
    refused(ci.get("svc/db").await);
    assert_eq!(ci.who_am_i().await.unwrap().via, Via::Anonymous);
}

// ACL-3: read
#[tokio::test]
async fn get_and_stat_need_read() {
    let master = Master::with_rules(&[("pub/", "*", Rights::READ)]).await;
    master
        .operator
        .put("pub/a", "1", PutOptions::new())
        .await
        .unwrap();
    master
        .operator
        .put("secret/a", "2", PutOptions::new())
        .await
        .unwrap();
    let anyone = master.anonymous().await;
    assert!(anyone.get("pub/a").await.unwrap().is_some());
    assert!(anyone.stat("pub/a").await.unwrap().is_some());
    refused(anyone.get("secret/a").await);
    refused(anyone.stat("secret/a").await);
    // Not even whether it exists.
    let missing = refused(anyone.get("secret/none").await);
    let present = refused(anyone.get("secret/a").await);
    assert_eq!(missing.replace("none", "a"), present);
}

// ACL-3: a refusal names the right and the rule, never the value.
#[tokio::test]
async fn a_refusal_names_the_right_and_the_rule_and_never_the_value() {
    let master = Master::with_rules(&[("jobs/", "ci", Rights::LOCK)]).await;
    master
        .operator
        .put("jobs/a", "the-secret-value", PutOptions::new())
        .await
        .unwrap();
    let ci = master.client_as("ci").await;
    let error = refused(ci.get("jobs/a").await);
    assert!(error.contains("read"), "{error}");
    assert!(error.contains("\"jobs/\""), "{error}");
    assert!(error.contains("ci"), "{error}");
    assert!(!error.contains("the-secret-value"), "{error}");
}

// ACL-4
#[tokio::test]
async fn a_list_shows_only_the_keys_its_principal_may_read() {
    let master = Master::with_rules(&[("a/open/", "*", Rights::READ)]).await;
    for key in ["a/open/1", "a/shut/1", "a/open/2", "a/shut/2"] {
        master
            .operator
            .put(key, "x", PutOptions::new())
            .await
            .unwrap();
    }
    let anyone = master.anonymous().await;
    let keys = anyone.list("a", true).await.unwrap();
    assert_eq!(keys, ["a/open/1", "a/open/2"]);
}

// ACL-4: pages skip what may not be read, so paging ends and misses
// nothing.
#[tokio::test]
async fn paging_through_a_prefix_mostly_unreadable_finds_every_readable_key() {
    let master = Master::with_rules(&[("k/7", "*", Rights::READ)]).await;
    for i in 0..100 {
        let key = format!("k/{i:02}");
        master
            .operator
            .put(&key, "x", PutOptions::new())
            .await
            .unwrap();
    }
    let anyone = master.anonymous().await;
    let (mut seen, mut after) = (Vec::new(), None);
    loop {
        let (keys, more) = anyone.list_page("k", true, after.clone(), 3).await.unwrap();
        after = keys.last().cloned();
        seen.extend(keys);
        if !more {
            break;
        }
        assert!(after.is_some(), "a page with more to come is never empty");
    }
    let expected: Vec<String> = (70..80).map(|i| format!("k/{i}")).collect();
    assert_eq!(seen, expected);
}

// ACL-3: write
#[tokio::test]
async fn put_and_delete_need_write() {
    let master = Master::with_rules(&[
        ("", "app", Rights::READ),
        ("app/", "app", Rights::READ.with(Rights::WRITE)),
    ])
    .await;
    let app = master.client_as("app").await;
    app.put("app/x", "1", PutOptions::new()).await.unwrap();
    refused(app.put("other/x", "1", PutOptions::new()).await);
    master
        .operator
        .put("other/y", "1", PutOptions::new())
        .await
        .unwrap();
    refused(app.delete("other/y", DeleteOptions::new()).await);
    app.delete("app/x", DeleteOptions::new()).await.unwrap();
    assert!(app.get("other/y").await.unwrap().is_some());
}

// ACL-3: a recursive delete needs write on every key it would remove.
#[tokio::test]
async fn a_recursive_delete_over_a_key_it_may_not_write_deletes_nothing() {
    let master =
        Master::with_rules(&[("d/", "app", Rights::ALL), ("d/keep/", "app", Rights::READ)]).await;
    master
        .operator
        .put("d/a", "1", PutOptions::new())
        .await
        .unwrap();
    master
        .operator
        .put("d/keep/b", "1", PutOptions::new())
        .await
        .unwrap();
    let app = master.client_as("app").await;
    refused(app.delete("d", DeleteOptions::new().recursive()).await);
    assert!(app.get("d/a").await.unwrap().is_some());
}

// ACL-3: lock. A reader cannot block a writer: read is not enough to lock.
#[tokio::test]
async fn locking_needs_lock_and_read_is_not_enough() {
    let master = Master::with_rules(&[
        ("jobs/", "worker", Rights::LOCK),
        ("jobs/", "viewer", Rights::READ),
    ])
    .await;
    let worker = master.client_as("worker").await;
    let session = worker
        .create_session(SessionOptions::new("w"))
        .await
        .unwrap();
    let guard = session
        .try_lock("jobs/nightly", LockOptions::exclusive())
        .await
        .unwrap();
    refused(session.try_lock("other/x", LockOptions::exclusive()).await);
    guard.release().await.unwrap();

    let viewer = master.client_as("viewer").await;
    let session = viewer
        .create_session(SessionOptions::new("v"))
        .await
        .unwrap();
    refused(
        session
            .try_lock("jobs/nightly", LockOptions::shared())
            .await,
    );
}

// ACL-3: admin
#[tokio::test]
async fn changing_rules_and_tokens_needs_admin() {
    let master = Master::with_rules(&[
        ("", "root", Rights::ALL),
        ("team/", "lead", Rights::ADMIN.with(Rights::READ)),
        ("", "dev", Rights::READ.with(Rights::WRITE)),
    ])
    .await;
    let dev = master.client_as("dev").await;
    let rule = |prefix: &str| Rule {
        prefix: prefix.into(),
        principal: "dev".into(),
        rights: Rights::ALL,
    };
    refused(dev.set_rule(rule("")).await);
    refused(dev.create_token("root", "").await);
    refused(dev.tokens().await);
    refused(dev.rules().await);
    refused(dev.set_access_control(false).await);
    let lead = master.client_as("lead").await;
    lead.set_rule(rule("team/")).await.unwrap();
    refused(lead.set_rule(rule("")).await);
    let root = master.client_as("root").await;
    root.create_token("dev", "").await.unwrap();
    assert_eq!(root.rules().await.unwrap().0.len(), 4);
}

// ACL-5: nobody turns access control on and locks themselves out.
#[tokio::test]
async fn turning_access_control_on_is_refused_to_one_it_would_lock_out() {
    let server = start(Config::default()).await;
    let anyone = connect_as(&server, None).await.unwrap();
    let error = anyone.set_access_control(true).await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument));
    anyone
        .set_rule(Rule {
            prefix: String::new(),
            principal: "*".into(),
            rights: Rights::ALL,
        })
        .await
        .unwrap();
    anyone.set_access_control(true).await.unwrap();
}

// ACL-5, AUTH-3: with an operator token and access control off, only the
// operator changes rules.
#[tokio::test]
async fn with_access_control_off_only_the_operator_changes_rules() {
    let master = Master::start().await;
    let anyone = master.anonymous().await;
    let rule = Rule {
        prefix: String::new(),
        principal: "*".into(),
        rights: Rights::ALL,
    };
    refused(anyone.set_rule(rule.clone()).await);
    master.operator.set_rule(rule).await.unwrap();
}

// ACL-3: ending another principal's session is an administrator's.
#[tokio::test]
async fn destroying_anothers_session_needs_admin() {
    let master = Master::with_rules(&[
        ("", "a", Rights::READ),
        ("", "b", Rights::READ),
        ("", "boss", Rights::ADMIN),
    ])
    .await;
    let a = master.client_as("a").await;
    let session = a.create_session(SessionOptions::new("a")).await.unwrap();
    let b = master.client_as("b").await;
    refused(b.destroy_session(session.id()).await);
    let boss = master.client_as("boss").await;
    boss.destroy_session(session.id()).await.unwrap();
}

// ID-5: a session is its creator's, whoever learns its secret.
#[tokio::test]
async fn another_principal_with_a_sessions_secret_cannot_act_for_it() {
    let master = Master::with_rules(&[("", "a", Rights::ALL), ("", "b", Rights::ALL)]).await;
    let a = master.client_as("a").await;
    let session = a.create_session(SessionOptions::new("a")).await.unwrap();
    let token = session.token();
    let b_token = master.token("b").await.to_string();
    let (mut conn, welcome) = RawConnection::open(master.server.addr).await;
    let authenticated = conn
        .call(Request::Authenticate { token: b_token })
        .await
        .unwrap();
    assert!(matches!(authenticated, Response::Identity(_)));
    let keepalive = Request::KeepAlive(leasehold_protocol::KeepAlive {
        session: token,
        epoch: welcome.epoch,
        acked_seq: 0,
        hold: false,
    });
    let error = conn.call(keepalive).await.unwrap_err();
    assert_eq!(error.code, ErrorCode::PermissionDenied);
    assert!(error.message.contains("belongs to principal"), "{error:?}");
}

// ACL-3: watch
#[tokio::test]
async fn a_watch_needs_read() {
    let master = Master::with_rules(&[("pub/", "*", Rights::READ)]).await;
    let anyone = master.anonymous().await;
    refused(anyone.watch("secret/a", 0, Duration::from_millis(10)).await);
    anyone
        .watch("pub/a", 0, Duration::from_millis(10))
        .await
        .unwrap();
}

// ACL-3: cached reads
#[tokio::test]
async fn a_cached_read_needs_read() {
    let master =
        Master::with_rules(&[("", "app", Rights::LOCK), ("pub/", "app", Rights::READ)]).await;
    master
        .operator
        .put("pub/a", "1", PutOptions::new())
        .await
        .unwrap();
    master
        .operator
        .put("secret/a", "2", PutOptions::new())
        .await
        .unwrap();
    let app = master.client_as("app").await;
    let session = app
        .create_session(SessionOptions::new("c").cache(true))
        .await
        .unwrap();
    assert!(session.get("pub/a").await.unwrap().is_some());
    refused(session.get("secret/a").await);
}

// ACL-3: lock information and sequencers tell of a key: read.
#[tokio::test]
async fn lock_information_and_sequencer_checks_need_read() {
    let master =
        Master::with_rules(&[("", "locker", Rights::LOCK), ("", "reader", Rights::READ)]).await;
    let locker = master.client_as("locker").await;
    let session = locker
        .create_session(SessionOptions::new("l"))
        .await
        .unwrap();
    let guard = session
        .try_lock("jobs/x", LockOptions::exclusive())
        .await
        .unwrap();
    refused(locker.lock_info("jobs/x").await);
    refused(locker.check_sequencer(guard.sequencer_bytes()).await);
    let reader = master.client_as("reader").await;
    assert!(reader
        .check_sequencer(guard.sequencer_bytes())
        .await
        .unwrap());
    reader.lock_info("jobs/x").await.unwrap();
}

// ACL-3: subscribing to a key needs read on it.
#[tokio::test]
async fn subscribing_to_a_key_needs_read() {
    let master =
        Master::with_rules(&[("", "app", Rights::LOCK), ("pub/", "app", Rights::READ)]).await;
    let app = master.client_as("app").await;
    let session = app.create_session(SessionOptions::new("s")).await.unwrap();
    refused(
        session
            .subscribe("secret/a", SubscribeOptions::exact())
            .await,
    );
    session
        .subscribe("pub/a", SubscribeOptions::exact())
        .await
        .unwrap();
}

// ACL-4: a subscriber never hears of a key it may not read.
#[tokio::test]
async fn a_prefix_subscriber_hears_only_of_keys_it_may_read() {
    let master =
        Master::with_rules(&[("", "app", Rights::LOCK), ("a/pub/", "app", Rights::READ)]).await;
    let app = master.client_as("app").await;
    let session = app.create_session(SessionOptions::new("s")).await.unwrap();
    let mut events = session
        .subscribe("a", SubscribeOptions::prefix())
        .await
        .unwrap();
    master
        .operator
        .put("a/secret/x", "1", PutOptions::new())
        .await
        .unwrap();
    master
        .operator
        .put("a/pub/x", "2", PutOptions::new())
        .await
        .unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap()
        .unwrap();
    match heard {
        SubscriptionEvent::Changed { key, .. } => assert_eq!(key, "a/pub/x"),
        other => panic!("expected a change, got {other:?}"),
    }
}

// ACL-7: rules and tokens are logged: a restarted master enforces them.
#[tokio::test]
async fn rules_and_tokens_hold_after_a_restart() {
    let dir = TempDir::new("access-restart");
    let server = start(Setup::durable(dir.path(), config())).await;
    let operator = connect_as(&server, Some(OPERATOR_TOKEN.into()))
        .await
        .unwrap();
    operator
        .set_rule(Rule {
            prefix: "jobs/".into(),
            principal: "ci".into(),
            rights: Rights::LOCK,
        })
        .await
        .unwrap();
    operator.set_access_control(true).await.unwrap();
    let token = operator.create_token("ci", "").await.unwrap();
    drop(operator);
    server.shutdown().await.unwrap();

    let server = start(Setup::durable(dir.path(), config())).await;
    let ci = connect_as(&server, Some(token.to_string())).await.unwrap();
    let identity = ci.who_am_i().await.unwrap();
    assert_eq!(identity.principal.as_deref(), Some("ci"));
    assert!(identity.access_control);
    refused(ci.get("jobs/a").await);
    server.shutdown().await.unwrap();
}

// CHK-6: with an operator token and access control off, a check a
// principal created is changed only by it or the operator.
#[tokio::test]
async fn a_check_a_principal_created_is_changed_only_by_it_or_the_operator() {
    let master = Master::start().await;
    let checker = master.client_as("checker").await;
    checker
        .set_check("disk:/var", CheckStatus::Passing, "ok")
        .await
        .unwrap();
    let other = master.client_as("other").await;
    refused(
        other
            .set_check("disk:/var", CheckStatus::Critical, "")
            .await,
    );
    refused(other.delete_check("disk:/var").await);
    refused(
        master
            .anonymous()
            .await
            .set_check("disk:/var", CheckStatus::Critical, "")
            .await,
    );
    checker
        .set_check("disk:/var", CheckStatus::Warning, "80%")
        .await
        .unwrap();
    master.operator.delete_check("disk:/var").await.unwrap();
}

// CHK-6, ACL-3: with access control on, changing a check needs write on
// its name.
#[tokio::test]
async fn with_access_control_on_changing_a_check_needs_write_on_its_name() {
    let master = Master::with_rules(&[("disk:", "checker", Rights::WRITE)]).await;
    let checker = master.client_as("checker").await;
    checker
        .set_check("disk:/var", CheckStatus::Passing, "")
        .await
        .unwrap();
    refused(checker.set_check("db", CheckStatus::Passing, "").await);
    let other = master.client_as("other").await;
    refused(other.delete_check("disk:/var").await);
}

// ACL-5: while access control is on, an admin cannot take admin on every
// key from itself, by a rule or by removing one; another admin can.
#[tokio::test]
async fn an_admin_cannot_take_its_own_admin_away() {
    let master =
        Master::with_rules(&[("", "boss", Rights::ALL), ("", "deputy", Rights::ALL)]).await;
    let boss = master.client_as("boss").await;
    let demote = |who: &str| Rule {
        prefix: String::new(),
        principal: who.into(),
        rights: Rights::READ,
    };
    let demoted = boss.set_rule(demote("boss")).await.unwrap_err();
    assert_eq!(demoted.code(), Some(ErrorCode::InvalidArgument));
    let removed = boss.remove_rule("", "boss").await.unwrap_err();
    assert_eq!(removed.code(), Some(ErrorCode::InvalidArgument));
    assert!(boss.rules().await.is_ok(), "boss is still an admin");
    let deputy = master.client_as("deputy").await;
    deputy.set_rule(demote("boss")).await.unwrap();
    refused(boss.rules().await);
}

// ACL-4, ID-5: a session the operator made is the operator's, and hears
// of every change.
#[tokio::test]
async fn the_operators_session_hears_of_every_change() {
    let master = Master::with_rules(&[("", "writer", Rights::WRITE)]).await;
    let session = master
        .operator
        .create_session(SessionOptions::new("operator"))
        .await
        .unwrap();
    let mut events = session
        .subscribe("jobs", SubscribeOptions::prefix())
        .await
        .unwrap();
    let writer = master.client_as("writer").await;
    writer.put("jobs/a", "1", PutOptions::new()).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&heard, SubscriptionEvent::Changed { key, .. } if key == "jobs/a"),
        "{heard:?}"
    );
}

// ACL-4: with access control on, a principal sees its own sessions, and
// others' only with read on every key: a session's name is its creator's
// words, often a key it locks.
#[tokio::test]
async fn others_sessions_are_seen_only_with_read_on_every_key() {
    let master = Master::with_rules(&[
        ("", "a", Rights::LOCK),
        ("", "b", Rights::LOCK),
        ("", "auditor", Rights::READ),
    ])
    .await;
    let a = master.client_as("a").await;
    let session = a
        .create_session(SessionOptions::new("lock jobs/secret by host:1"))
        .await
        .unwrap();
    assert_eq!(a.list_sessions().await.unwrap().len(), 1);
    let b = master.client_as("b").await;
    assert!(b.list_sessions().await.unwrap().is_empty());
    refused(b.session_info(session.id()).await);
    refused(b.session_locks(session.id()).await);
    let auditor = master.client_as("auditor").await;
    let seen = auditor.session_info(session.id()).await.unwrap();
    assert_eq!(&*seen.name, "lock jobs/secret by host:1");
}
