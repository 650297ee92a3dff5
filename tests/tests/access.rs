//! Identities and access control (SPEC "Access control"): bearer tokens,
//! rules by key prefix, and every way in checking them, against the real
//! master over loopback, through the library and in raw frames.
//!
//! Every test runs twice, in the modules at the end: `plain`, where a
//! principal is a bearer token's, and `mutual_tls`, where the master
//! speaks TLS, asks each client for a certificate, and a principal is the
//! name in the client's certificate (`ID-1`).

use std::time::Duration;

use leasehold::{
    BearerToken, CheckStatus, Client, ClientConfig, ClientError, DeleteOptions, Election,
    ErrorCode, LockOptions, PutOptions, Rights, Rule, Semaphore, SessionOptions, SubscribeOptions,
    SubscriptionEvent, TlsOptions, Via,
};
use leasehold_protocol::{Request, Response, Welcome};
use leasehold_server::{Config, ServerTls, TlsFiles};
use leasehold_tests::certs::Pki;
use leasehold_tests::fixture::TempDir;
use leasehold_tests::raw::{RawConnection, RawTls};
use leasehold_tests::server::{start, Setup, TestServer};

const OPERATOR_TOKEN: &str = "operator-token-for-access-tests";

/// How clients reach the master, and what names a principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Plain TCP; a principal is a bearer token's.
    Plain,
    /// Mutual TLS; a principal is its client certificate's name.
    MutualTls,
}

/// The way in, with the certificates it needs.
struct Net {
    way: Way,
    pki: Option<Pki>,
    /// Removed when the test ends.
    _dir: Option<TempDir>,
}

/// The name of the certificate a client presents over mutual TLS when
/// the test wants one without a rule of its own.
const STRANGER: &str = "stranger";

impl Net {
    fn new(way: Way) -> Net {
        match way {
            Way::Plain => Net {
                way,
                pki: None,
                _dir: None,
            },
            Way::MutualTls => {
                let dir = TempDir::new("access-pki");
                let pki = Pki::new(dir.path(), "access");
                Net {
                    way,
                    pki: Some(pki),
                    _dir: Some(dir),
                }
            }
        }
    }

    /// `base` with the master's certificate and the client CA, over TLS.
    fn config(&self, base: Config) -> Config {
        let tls = self.pki.as_ref().map(|pki| {
            ServerTls::load(TlsFiles {
                cert: pki.server.cert.clone(),
                key: pki.server.key.clone(),
                client_ca: Some(pki.ca.clone()),
            })
            .expect("the test certificates load")
        });
        Config { tls, ..base }
    }

    /// TLS options presenting a certificate named `principal`.
    fn tls_as(&self, principal: &str) -> Option<TlsOptions> {
        self.pki.as_ref().map(|pki| {
            let pair = pki.client_named(principal);
            TlsOptions::new(&pki.ca).client_certificate(pair.cert, pair.key)
        })
    }

    /// A client of `server` that authenticates with `token` if given;
    /// over TLS it presents a certificate without rules of its own.
    async fn connect_with_token(
        &self,
        server: &TestServer,
        token: Option<String>,
    ) -> Result<Client, ClientError> {
        let config = ClientConfig {
            token,
            tls: self.tls_as(STRANGER),
            ..ClientConfig::default()
        };
        Client::connect_with(server.addr.to_string(), config).await
    }

    /// A client of `server` acting as `principal`: through its certificate
    /// over TLS, or else through a token `operator` makes for it.
    async fn connect_as(&self, server: &TestServer, operator: &Client, principal: &str) -> Client {
        match self.way {
            Way::MutualTls => {
                let config = ClientConfig {
                    tls: self.tls_as(principal),
                    ..ClientConfig::default()
                };
                Client::connect_with(server.addr.to_string(), config)
                    .await
                    .unwrap()
            }
            Way::Plain => {
                let token = operator.create_token(principal, "tests").await.unwrap();
                self.connect_with_token(server, Some(token.to_string()))
                    .await
                    .unwrap()
            }
        }
    }

    /// A raw connection to `server`, past its handshake; over TLS it
    /// presents a certificate without rules of its own.
    async fn raw(&self, server: &TestServer) -> (RawConnection, Welcome) {
        let tls = self.pki.as_ref().map(|pki| {
            let pair = pki.client_named(STRANGER);
            RawTls::load(&pki.ca, Some((&pair.cert, &pair.key)), "127.0.0.1").unwrap()
        });
        RawConnection::open_over(server.addr, tls.as_ref()).await
    }

    /// Who a client without a token or a rule of its own is: nobody on
    /// plain TCP, its certificate's name over TLS.
    fn stranger(&self) -> (Option<&'static str>, Via) {
        match self.way {
            Way::Plain => (None, Via::Anonymous),
            Way::MutualTls => (Some(STRANGER), Via::Certificate),
        }
    }
}

/// A master with an operator token, and the operator's client.
struct Master {
    net: Net,
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

impl Master {
    async fn start(way: Way) -> Master {
        let net = Net::new(way);
        let server = start(net.config(config())).await;
        let operator = net
            .connect_with_token(&server, Some(OPERATOR_TOKEN.into()))
            .await
            .unwrap();
        Master {
            net,
            server,
            operator,
        }
    }

    /// The same, with access control on and `rules` set.
    async fn with_rules(way: Way, rules: &[(&str, &str, Rights)]) -> Master {
        let master = Master::start(way).await;
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

    /// A client acting as `principal`.
    async fn client_as(&self, principal: &str) -> Client {
        self.net
            .connect_as(&self.server, &self.operator, principal)
            .await
    }

    /// A client authenticating with `token`.
    async fn with_token(&self, token: &BearerToken) -> Result<Client, ClientError> {
        self.net
            .connect_with_token(&self.server, Some(token.to_string()))
            .await
    }

    /// A client without a token or a rule of its own: anonymous on plain
    /// TCP, a stranger's certificate over TLS.
    async fn stranger(&self) -> Client {
        self.net
            .connect_with_token(&self.server, None)
            .await
            .unwrap()
    }

    async fn raw(&self) -> (RawConnection, Welcome) {
        self.net.raw(&self.server).await
    }
}

fn refused<T: std::fmt::Debug>(result: Result<T, ClientError>) -> String {
    match result {
        Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => e.to_string(),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

// ACL-5
async fn with_access_control_off_an_anonymous_client_may_do_everything(way: Way) {
    let master = Master::start(way).await;
    let anyone = master.stranger().await;
    anyone.put("jobs/a", "x", PutOptions::new()).await.unwrap();
    assert!(anyone.get("jobs/a").await.unwrap().is_some());
    let identity = anyone.who_am_i().await.unwrap();
    let (principal, via) = master.net.stranger();
    assert_eq!(identity.principal.as_deref(), principal);
    assert_eq!(identity.via, via);
    assert!(!identity.access_control);
}

// ID-2, ID-3
async fn a_client_with_a_token_acts_as_its_principal(way: Way) {
    let master = Master::start(way).await;
    let token = master.token("ci").await;
    let ci = master.with_token(&token).await.unwrap();
    let identity = ci.who_am_i().await.unwrap();
    assert_eq!(identity.principal.as_deref(), Some("ci"));
    assert_eq!(identity.via, Via::Token { id: token.id });
}

// ID-2
async fn a_wrong_token_fails_the_connect_and_is_not_echoed(way: Way) {
    let master = Master::start(way).await;
    let mut token = master.token("ci").await;
    token.secret[0] ^= 1;
    let text = token.to_string();
    let error = refused(master.with_token(&token).await);
    assert!(!error.contains(&text[10..]), "{error}");
}

// ID-6
async fn failed_authentications_from_one_address_are_refused_unheard_after_five(way: Way) {
    let master = Master::start(way).await;
    let good = master.token("ci").await.to_string();
    let (mut conn, _) = master.raw().await;
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
async fn tokens_are_listed_without_their_secrets(way: Way) {
    let master = Master::start(way).await;
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
async fn a_revoked_token_loses_its_rights_at_once_on_an_open_connection(way: Way) {
    let master = Master::with_rules(way, &[("", "ci", Rights::READ)]).await;
    master
        .operator
        .put("svc/db", "x", PutOptions::new())
        .await
        .unwrap();
    let token = master.token("ci").await;
    let ci = master.with_token(&token).await.unwrap();
    assert!(ci.get("svc/db").await.unwrap().is_some());
    master.operator.revoke_token(token.id).await.unwrap();
    refused(ci.get("svc/db").await);
    assert_eq!(ci.who_am_i().await.unwrap().via, master.net.stranger().1);
}

// ACL-3: read
async fn get_and_stat_need_read(way: Way) {
    let master = Master::with_rules(way, &[("pub/", "*", Rights::READ)]).await;
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
    let anyone = master.stranger().await;
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
async fn a_refusal_names_the_right_and_the_rule_and_never_the_value(way: Way) {
    let master = Master::with_rules(way, &[("jobs/", "ci", Rights::LOCK)]).await;
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
async fn a_list_shows_only_the_keys_its_principal_may_read(way: Way) {
    let master = Master::with_rules(way, &[("a/open/", "*", Rights::READ)]).await;
    for key in ["a/open/1", "a/shut/1", "a/open/2", "a/shut/2"] {
        master
            .operator
            .put(key, "x", PutOptions::new())
            .await
            .unwrap();
    }
    let anyone = master.stranger().await;
    let keys = anyone.list("a", true).await.unwrap();
    assert_eq!(keys, ["a/open/1", "a/open/2"]);
}

// ACL-4: pages skip what may not be read, so paging ends and misses
// nothing.
async fn paging_through_a_prefix_mostly_unreadable_finds_every_readable_key(way: Way) {
    let master = Master::with_rules(way, &[("k/7", "*", Rights::READ)]).await;
    for i in 0..100 {
        let key = format!("k/{i:02}");
        master
            .operator
            .put(&key, "x", PutOptions::new())
            .await
            .unwrap();
    }
    let anyone = master.stranger().await;
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
async fn put_and_delete_need_write(way: Way) {
    let master = Master::with_rules(
        way,
        &[
            ("", "app", Rights::READ),
            ("app/", "app", Rights::READ.with(Rights::WRITE)),
        ],
    )
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
async fn a_recursive_delete_over_a_key_it_may_not_write_deletes_nothing(way: Way) {
    let master = Master::with_rules(
        way,
        &[("d/", "app", Rights::ALL), ("d/keep/", "app", Rights::READ)],
    )
    .await;
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
async fn locking_needs_lock_and_read_is_not_enough(way: Way) {
    let master = Master::with_rules(
        way,
        &[
            ("jobs/", "worker", Rights::LOCK),
            ("jobs/", "viewer", Rights::READ),
        ],
    )
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
async fn changing_rules_and_tokens_needs_admin(way: Way) {
    let master = Master::with_rules(
        way,
        &[
            ("", "root", Rights::ALL),
            ("team/", "lead", Rights::ADMIN.with(Rights::READ)),
            ("", "dev", Rights::READ.with(Rights::WRITE)),
        ],
    )
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
async fn turning_access_control_on_is_refused_to_one_it_would_lock_out(way: Way) {
    let net = Net::new(way);
    let server = start(net.config(Config::default())).await;
    let anyone = net.connect_with_token(&server, None).await.unwrap();
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
async fn with_access_control_off_only_the_operator_changes_rules(way: Way) {
    let master = Master::start(way).await;
    let anyone = master.stranger().await;
    let rule = Rule {
        prefix: String::new(),
        principal: "*".into(),
        rights: Rights::ALL,
    };
    refused(anyone.set_rule(rule.clone()).await);
    master.operator.set_rule(rule).await.unwrap();
}

// ACL-3: ending another principal's session is an administrator's.
async fn destroying_anothers_session_needs_admin(way: Way) {
    let master = Master::with_rules(
        way,
        &[
            ("", "a", Rights::READ),
            ("", "b", Rights::READ),
            ("", "boss", Rights::ADMIN),
        ],
    )
    .await;
    let a = master.client_as("a").await;
    let session = a.create_session(SessionOptions::new("a")).await.unwrap();
    let b = master.client_as("b").await;
    refused(b.destroy_session(session.id()).await);
    let boss = master.client_as("boss").await;
    boss.destroy_session(session.id()).await.unwrap();
}

// ID-5: a session is its creator's, whoever learns its secret.
async fn another_principal_with_a_sessions_secret_cannot_act_for_it(way: Way) {
    let master = Master::with_rules(way, &[("", "a", Rights::ALL), ("", "b", Rights::ALL)]).await;
    let a = master.client_as("a").await;
    let session = a.create_session(SessionOptions::new("a")).await.unwrap();
    let token = session.token();
    let b_token = master.token("b").await.to_string();
    let (mut conn, welcome) = master.raw().await;
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
async fn a_watch_needs_read(way: Way) {
    let master = Master::with_rules(way, &[("pub/", "*", Rights::READ)]).await;
    let anyone = master.stranger().await;
    refused(anyone.watch("secret/a", 0, Duration::from_millis(10)).await);
    anyone
        .watch("pub/a", 0, Duration::from_millis(10))
        .await
        .unwrap();
}

// ACL-3: cached reads
async fn a_cached_read_needs_read(way: Way) {
    let master = Master::with_rules(
        way,
        &[("", "app", Rights::LOCK), ("pub/", "app", Rights::READ)],
    )
    .await;
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
async fn lock_information_and_sequencer_checks_need_read(way: Way) {
    let master = Master::with_rules(
        way,
        &[("", "locker", Rights::LOCK), ("", "reader", Rights::READ)],
    )
    .await;
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

// LOCK-16, ACL-4: a principal's lock listing shows only locks on keys it
// may read, and names only its own sessions.
async fn a_lock_listing_shows_only_readable_keys_and_own_session_names(way: Way) {
    let master = Master::with_rules(
        way,
        &[
            ("", "a", Rights::LOCK),
            ("pub/", "a", Rights::LOCK.with(Rights::READ)),
            ("", "b", Rights::LOCK),
        ],
    )
    .await;
    let a = master.client_as("a").await;
    let b = master.client_as("b").await;
    let mine = a.create_session(SessionOptions::new("mine")).await.unwrap();
    let theirs = b
        .create_session(SessionOptions::new("theirs"))
        .await
        .unwrap();
    let _guards = [
        mine.try_lock("pub/x", LockOptions::exclusive())
            .await
            .unwrap(),
        theirs
            .try_lock("pub/y", LockOptions::exclusive())
            .await
            .unwrap(),
        theirs
            .try_lock("secret/z", LockOptions::exclusive())
            .await
            .unwrap(),
    ];
    let listed = a.list_locks("").await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["pub/x", "pub/y"]);
    assert_eq!(listed[0].holders[0].name, "mine");
    assert_eq!(listed[1].holders[0].session, theirs.id());
    assert_eq!(
        listed[1].holders[0].name, "",
        "another's session is not named"
    );
    assert!(
        b.list_locks("").await.unwrap().is_empty(),
        "b may read nothing"
    );
}

// ACL-3: subscribing to a key needs read on it.
async fn subscribing_to_a_key_needs_read(way: Way) {
    let master = Master::with_rules(
        way,
        &[("", "app", Rights::LOCK), ("pub/", "app", Rights::READ)],
    )
    .await;
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
async fn a_prefix_subscriber_hears_only_of_keys_it_may_read(way: Way) {
    let master = Master::with_rules(
        way,
        &[("", "app", Rights::LOCK), ("a/pub/", "app", Rights::READ)],
    )
    .await;
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
async fn rules_and_tokens_hold_after_a_restart(way: Way) {
    let dir = TempDir::new("access-restart");
    let net = Net::new(way);
    let server = start(Setup::durable(dir.path(), net.config(config()))).await;
    let operator = net
        .connect_with_token(&server, Some(OPERATOR_TOKEN.into()))
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

    let server = start(Setup::durable(dir.path(), net.config(config()))).await;
    let ci = net
        .connect_with_token(&server, Some(token.to_string()))
        .await
        .unwrap();
    let identity = ci.who_am_i().await.unwrap();
    assert_eq!(identity.principal.as_deref(), Some("ci"));
    assert!(identity.access_control);
    refused(ci.get("jobs/a").await);
    server.shutdown().await.unwrap();
}

// CHK-6: with an operator token and access control off, a check a
// principal created is changed only by it or the operator.
async fn a_check_a_principal_created_is_changed_only_by_it_or_the_operator(way: Way) {
    let master = Master::start(way).await;
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
            .stranger()
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
async fn with_access_control_on_changing_a_check_needs_write_on_its_name(way: Way) {
    let master = Master::with_rules(way, &[("disk:", "checker", Rights::WRITE)]).await;
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
async fn an_admin_cannot_take_its_own_admin_away(way: Way) {
    let master = Master::with_rules(
        way,
        &[("", "boss", Rights::ALL), ("", "deputy", Rights::ALL)],
    )
    .await;
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
async fn the_operators_session_hears_of_every_change(way: Way) {
    let master = Master::with_rules(way, &[("", "writer", Rights::WRITE)]).await;
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
async fn others_sessions_are_seen_only_with_read_on_every_key(way: Way) {
    let master = Master::with_rules(
        way,
        &[
            ("", "a", Rights::LOCK),
            ("", "b", Rights::LOCK),
            ("", "auditor", Rights::READ),
        ],
    )
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

// ACL-3: the recipes ask for nothing beyond their rights: an election
// needs lock and write on its key (the leader's value goes in with the
// lock), a semaphore read, write and lock on its prefix; reading who leads
// needs read.
async fn an_election_and_a_semaphore_work_with_their_rights_and_not_without(way: Way) {
    let all_but_admin = Rights::READ.with(Rights::WRITE).with(Rights::LOCK);
    let master = Master::with_rules(
        way,
        &[
            ("jobs/", "worker", all_but_admin),
            ("other/", "outsider", all_but_admin),
            ("jobs/", "watcher", Rights::READ),
        ],
    )
    .await;
    let worker = master.client_as("worker").await;
    let session = worker
        .create_session(SessionOptions::new("worker"))
        .await
        .unwrap();
    let term = Election::new(&session, "jobs/leader")
        .try_campaign("host-a")
        .await
        .unwrap()
        .expect("nobody else leads");
    let permit = Semaphore::new(&session, "jobs/pool", 2)
        .try_acquire("host-a")
        .await
        .unwrap()
        .expect("a slot is free");
    let watcher = master.client_as("watcher").await;
    let leader = watcher.leader("jobs/leader").await.unwrap().unwrap();
    assert_eq!(leader.value, b"host-a");

    let outsider = master.client_as("outsider").await;
    let theirs = outsider
        .create_session(SessionOptions::new("outsider"))
        .await
        .unwrap();
    refused(
        Election::new(&theirs, "jobs/leader")
            .try_campaign("host-b")
            .await,
    );
    refused(
        Semaphore::new(&theirs, "jobs/pool", 2)
            .try_acquire("host-b")
            .await,
    );
    refused(outsider.leader("jobs/leader").await);
    permit.release().await.unwrap();
    term.resign().await.unwrap();
}

/// Runs each test over plain TCP with tokens, and over mutual TLS with
/// certificates.
macro_rules! both_ways {
    ($($name:ident),* $(,)?) => {
        mod plain {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::Way::Plain).await
            })*
        }
        mod mutual_tls {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::Way::MutualTls).await
            })*
        }
    };
}

both_ways!(
    an_election_and_a_semaphore_work_with_their_rights_and_not_without,
    with_access_control_off_an_anonymous_client_may_do_everything,
    a_client_with_a_token_acts_as_its_principal,
    a_wrong_token_fails_the_connect_and_is_not_echoed,
    failed_authentications_from_one_address_are_refused_unheard_after_five,
    tokens_are_listed_without_their_secrets,
    a_revoked_token_loses_its_rights_at_once_on_an_open_connection,
    get_and_stat_need_read,
    a_refusal_names_the_right_and_the_rule_and_never_the_value,
    a_list_shows_only_the_keys_its_principal_may_read,
    paging_through_a_prefix_mostly_unreadable_finds_every_readable_key,
    put_and_delete_need_write,
    a_recursive_delete_over_a_key_it_may_not_write_deletes_nothing,
    locking_needs_lock_and_read_is_not_enough,
    changing_rules_and_tokens_needs_admin,
    turning_access_control_on_is_refused_to_one_it_would_lock_out,
    with_access_control_off_only_the_operator_changes_rules,
    destroying_anothers_session_needs_admin,
    another_principal_with_a_sessions_secret_cannot_act_for_it,
    a_watch_needs_read,
    a_cached_read_needs_read,
    lock_information_and_sequencer_checks_need_read,
    a_lock_listing_shows_only_readable_keys_and_own_session_names,
    subscribing_to_a_key_needs_read,
    a_prefix_subscriber_hears_only_of_keys_it_may_read,
    rules_and_tokens_hold_after_a_restart,
    a_check_a_principal_created_is_changed_only_by_it_or_the_operator,
    with_access_control_on_changing_a_check_needs_write_on_its_name,
    an_admin_cannot_take_its_own_admin_away,
    the_operators_session_hears_of_every_change,
    others_sessions_are_seen_only_with_read_on_every_key,
);
