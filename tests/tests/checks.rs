//! Health checks bound to sessions, through the client library.

use std::time::Duration;

use leasehold::{
    Behavior, CheckStatus, Client, ErrorCode, LockOptions, PutOptions, Session, SessionOptions,
    SessionState,
};
use leasehold_tests::fixture::Fixture;
use leasehold_tests::server::TestServer;

async fn client() -> (TestServer, Client) {
    let Fixture { server, client } = Fixture::new().await;
    (server, client)
}

/// A session that only a check can end soon: a long lease, a short
/// lock-delay.
async fn bound(client: &Client, check: &str, behavior: Behavior) -> Session {
    client
        .create_session(
            SessionOptions::new("bound")
                .lease(Duration::from_secs(30))
                .lock_delay(Duration::from_secs(2))
                .behavior(behavior)
                .check(check),
        )
        .await
        .unwrap()
}

async fn expires_soon(session: &Session) {
    tokio::time::timeout(Duration::from_secs(2), session.expired())
        .await
        .expect("the client hears within 2 s");
}

// CHK-3, KA-7, CS-6
#[tokio::test]
async fn a_critical_check_ends_its_sessions_and_their_clients_hear_at_once() {
    let (_server, client) = client().await;
    client
        .set_check("disk", CheckStatus::Passing, "")
        .await
        .unwrap();
    let doomed = bound(&client, "disk", Behavior::Release).await;
    let other = client
        .create_session(SessionOptions::new("other"))
        .await
        .unwrap();
    let ended = client
        .set_check("disk", CheckStatus::Critical, "full")
        .await
        .unwrap();
    assert_eq!(ended, [doomed.id()]);
    expires_soon(&doomed).await;
    let gone = client.session_info(doomed.id()).await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::SessionExpired));
    assert_eq!(other.state(), SessionState::Normal);
    client.session_info(other.id()).await.unwrap();
}

// CHK-3, LOCK-6
#[tokio::test]
async fn a_critical_check_leaves_the_sessions_locks_in_lock_delay() {
    let (_server, client) = client().await;
    client
        .set_check("disk", CheckStatus::Passing, "")
        .await
        .unwrap();
    let doomed = bound(&client, "disk", Behavior::Release).await;
    let guard = doomed
        .try_lock("leader", LockOptions::exclusive())
        .await
        .unwrap();
    client
        .set_check("disk", CheckStatus::Critical, "")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the guard hears");
    let next = client
        .create_session(SessionOptions::new("next"))
        .await
        .unwrap();
    let refused = next
        .try_lock("leader", LockOptions::exclusive())
        .await
        .unwrap_err();
    assert!(
        matches!(refused.code(), Some(ErrorCode::LockDelayed { .. })),
        "{refused}"
    );
    assert!(client.get("leader").await.unwrap().is_some());
}

// CHK-3, LOCK-6, NS-4
#[tokio::test]
async fn behaviour_delete_removes_the_locked_and_ephemeral_nodes_of_an_invalidated_session() {
    let (_server, client) = client().await;
    client
        .set_check("disk", CheckStatus::Passing, "")
        .await
        .unwrap();
    let doomed = bound(&client, "disk", Behavior::Delete).await;
    let _guard = doomed
        .try_lock("svc/leader", LockOptions::exclusive())
        .await
        .unwrap();
    client
        .put("svc/member-1", "up", PutOptions::new().ephemeral(&doomed))
        .await
        .unwrap();
    client
        .put("svc/config", "kept", PutOptions::new())
        .await
        .unwrap();
    client
        .set_check("disk", CheckStatus::Critical, "")
        .await
        .unwrap();
    expires_soon(&doomed).await;
    assert_eq!(client.get("svc/leader").await.unwrap(), None);
    assert_eq!(client.get("svc/member-1").await.unwrap(), None);
    assert!(client.get("svc/config").await.unwrap().is_some());
}

// CHK-3
#[tokio::test]
async fn a_warning_ends_nothing() {
    let (_server, client) = client().await;
    client
        .set_check("disk", CheckStatus::Passing, "")
        .await
        .unwrap();
    let session = bound(&client, "disk", Behavior::Release).await;
    let ended = client
        .set_check("disk", CheckStatus::Warning, "80% full")
        .await
        .unwrap();
    assert!(ended.is_empty());
    client.session_info(session.id()).await.unwrap();
}

// CHK-2
#[tokio::test]
async fn a_session_needs_its_checks_to_exist_and_not_be_critical() {
    let (_server, client) = client().await;
    let missing = client
        .create_session(SessionOptions::new("s").check("nope"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Some(ErrorCode::InvalidArgument));
    client
        .set_check("disk", CheckStatus::Critical, "full")
        .await
        .unwrap();
    let critical = client
        .create_session(SessionOptions::new("s").check("disk"))
        .await
        .unwrap_err();
    assert!(critical.to_string().contains("critical"), "{critical}");
}

// CHK-4, CHK-5
#[tokio::test]
async fn deleting_a_check_ends_its_sessions_and_the_listing_follows() {
    let (_server, client) = client().await;
    client
        .set_check("disk", CheckStatus::Passing, "ok")
        .await
        .unwrap();
    client
        .set_check("net", CheckStatus::Warning, "slow")
        .await
        .unwrap();
    let session = bound(&client, "disk", Behavior::Release).await;
    let listed = client.list_checks().await.unwrap();
    let names: Vec<(&str, CheckStatus, u64)> = listed
        .iter()
        .map(|c| (c.name.as_str(), c.status, c.sessions))
        .collect();
    assert_eq!(
        names,
        [
            ("disk", CheckStatus::Passing, 1),
            ("net", CheckStatus::Warning, 0)
        ]
    );
    assert_eq!(client.delete_check("disk").await.unwrap(), [session.id()]);
    expires_soon(&session).await;
    assert_eq!(client.list_checks().await.unwrap().len(), 1);
}
