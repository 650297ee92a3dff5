//! The audit log (SPEC `AUDIT-1`..`AUDIT-4`): what a master with
//! `--audit-log` writes, read back from the file.

use std::time::Duration;

use leasehold::{Client, ClientConfig, LockOptions, PutOptions, Rights, Rule, SessionOptions};
use leasehold_server::{AuditConfig, AuditLog, Config};
use leasehold_tests::fixture::TempDir;
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::start;
use serde_json::Value;

const OPERATOR_TOKEN: &str = "operator-token-for-audit-tests";

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// The lines of the log once one says `event` with `outcome`.
async fn once_written(path: &std::path::Path, event: &str, outcome: &str) -> Vec<Value> {
    for _ in 0..500 {
        let found = lines(path);
        if found
            .iter()
            .any(|l| l["event"] == event && l["outcome"] == outcome)
        {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {event} {outcome} in {:?}", lines(path));
}

fn find<'a>(found: &'a [Value], event: &str, outcome: &str) -> &'a Value {
    found
        .iter()
        .find(|l| l["event"] == event && l["outcome"] == outcome)
        .unwrap_or_else(|| panic!("no {event} {outcome} in {found:?}"))
}

// AUDIT-1, AUDIT-2
#[tokio::test]
async fn locks_rules_tokens_refusals_and_failed_authentications_are_each_a_line() {
    let dir = TempDir::new("audit");
    let path = dir.join("audit.log");
    let config = Config {
        operator_token: Some(OPERATOR_TOKEN.into()),
        audit: Some(AuditLog::open(&AuditConfig::at(&path)).unwrap()),
        ..Config::default()
    };
    let server = start(config).await;
    let as_token = |token: String| ClientConfig {
        token: Some(token),
        ..ClientConfig::default()
    };
    let operator = Client::connect_with(server.addr.to_string(), as_token(OPERATOR_TOKEN.into()))
        .await
        .unwrap();
    let rule = Rule {
        prefix: "jobs/".into(),
        principal: "ci".into(),
        rights: Rights::LOCK,
    };
    operator.set_rule(rule).await.unwrap();
    operator.set_access_control(true).await.unwrap();
    let token = operator.create_token("ci", "").await.unwrap();
    let ci = Client::connect_with(server.addr.to_string(), as_token(token.to_string()))
        .await
        .unwrap();
    let session = ci.create_session(SessionOptions::new("ci")).await.unwrap();
    let guard = session
        .try_lock("jobs/nightly", LockOptions::exclusive())
        .await
        .unwrap();
    guard.release().await.unwrap();
    assert!(ci.put("svc/db", "x", PutOptions::new()).await.is_err());
    let (mut raw, _) = RawConnection::open(server.addr).await;
    let wrong = raw
        .call(leasehold_protocol::Request::Authenticate {
            token: "lht1_1_00".into(),
        })
        .await;
    assert!(wrong.is_err());

    let found = once_written(&path, "authenticate", "refused").await;
    let found = if found.iter().any(|l| l["event"] == "put") {
        found
    } else {
        once_written(&path, "put", "refused").await
    };
    let granted = find(&found, "lock-granted", "done");
    assert_eq!(granted["principal"], "ci");
    assert_eq!(granted["key"], "jobs/nightly");
    assert_eq!(granted["peer"], "127.0.0.1");
    assert_eq!(granted["session"], session.id().to_string());
    let released = find(&found, "lock-released", "done");
    assert_eq!(released["key"], "jobs/nightly");
    let rule = find(&found, "set-rule", "done");
    assert_eq!(rule["operator"], true);
    assert_eq!(rule["key"], "jobs/");
    assert!(rule["index"].as_u64().is_some());
    find(&found, "set-access-control", "done");
    let created = find(&found, "create-token", "done");
    assert!(created["detail"].as_str().unwrap().contains("for ci"));
    let refused = find(&found, "put", "refused");
    assert_eq!(refused["principal"], "ci");
    assert_eq!(refused["key"], "svc/db");
    let failed = find(&found, "authenticate", "refused");
    assert_eq!(failed["peer"], "127.0.0.1");
    // No secret reaches the log.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&token.to_string()[8..]));
    assert!(!text.contains(OPERATOR_TOKEN));
    server.shutdown().await.unwrap();
}

// AUDIT-2, OPS-5: a status page polling with a bearer token authenticates
// once, not at every poll; its token revoked, the next poll is refused.
#[tokio::test]
async fn a_polling_status_page_authenticates_once_until_its_token_is_revoked() {
    let dir = TempDir::new("audit-page");
    let path = dir.join("audit.log");
    let config = Config {
        operator_token: Some(OPERATOR_TOKEN.into()),
        audit: Some(AuditLog::open(&AuditConfig::at(&path)).unwrap()),
        ..Config::default()
    };
    let (server, http) = leasehold_tests::server::start_with_http(config).await;
    let operator = Client::connect_with(
        server.addr.to_string(),
        ClientConfig {
            token: Some(OPERATOR_TOKEN.into()),
            ..ClientConfig::default()
        },
    )
    .await
    .unwrap();
    let rule = Rule {
        prefix: String::new(),
        principal: "reader".into(),
        rights: Rights::READ,
    };
    operator.set_rule(rule).await.unwrap();
    operator.set_access_control(true).await.unwrap();
    let token = operator.create_token("reader", "page").await.unwrap();
    let bearer = token.to_string();
    for _ in 0..3 {
        let page = leasehold_tests::http::get(http, "/api/status", Some(&bearer)).await;
        assert_eq!(page.status, 200, "{}", page.body);
    }
    operator.revoke_token(token.id).await.unwrap();
    let refused = leasehold_tests::http::get(http, "/api/status", Some(&bearer)).await;
    assert_eq!(refused.status, 401, "{}", refused.body);

    let found = once_written(&path, "authenticate", "refused").await;
    let readers = found
        .iter()
        .filter(|l| l["event"] == "authenticate" && l["outcome"] == "done")
        .filter(|l| l["detail"].as_str().is_some_and(|d| d.contains("reader")))
        .count();
    assert_eq!(readers, 1, "{found:?}");
}
