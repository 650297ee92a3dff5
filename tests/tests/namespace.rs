//! The namespace through the client library over loopback.

use std::time::Duration;

use leasehold::{Client, DeleteOptions, ErrorCode, PutOptions, SessionOptions};
use leasehold_server::MAX_CONTENTS;
use leasehold_tests::fixture::Fixture;
use leasehold_tests::server::TestServer;

async fn client() -> (TestServer, Client) {
    let Fixture { server, client } = Fixture::new().await;
    (server, client)
}

// NS-2, NS-6, NS-9
#[tokio::test]
async fn a_written_node_reads_back_with_its_counters() {
    let (_server, client) = client().await;
    let first = client
        .put("svc/db", "10.0.0.5", PutOptions::new().flags(7))
        .await
        .unwrap();
    let second = client
        .put("svc/db", "10.0.0.6", PutOptions::new())
        .await
        .unwrap();
    assert!(second > first);
    let node = client.get("svc/db").await.unwrap().unwrap();
    assert_eq!(node.contents.as_deref(), Some(&b"10.0.0.6"[..]));
    assert_eq!(node.stat.instance, first);
    assert_eq!(node.stat.content_generation, 2);
    assert_eq!(node.stat.modify_index, second);
    assert_eq!(node.stat.flags, 0, "a write replaces the flags");
    assert_eq!(node.stat.contents_len, 8);
    let stat = client.stat("svc/db").await.unwrap().unwrap();
    assert_eq!(stat, node.stat);
    assert_eq!(client.get("svc/none").await.unwrap(), None);
}

// NS-6, ERR-10
#[tokio::test]
async fn compare_and_set_writes_only_at_the_expected_index() {
    let (_server, client) = client().await;
    let created = client
        .put("k", "a", PutOptions::new().cas(0))
        .await
        .unwrap();
    let again = client
        .put("k", "b", PutOptions::new().cas(0))
        .await
        .unwrap_err();
    assert_eq!(
        again.code(),
        Some(ErrorCode::CasMismatch { current: created })
    );
    let updated = client
        .put("k", "c", PutOptions::new().cas(created))
        .await
        .unwrap();
    let stale = client
        .put("k", "d", PutOptions::new().cas(created))
        .await
        .unwrap_err();
    assert_eq!(
        stale.code(),
        Some(ErrorCode::CasMismatch { current: updated })
    );
    let node = client.get("k").await.unwrap().unwrap();
    assert_eq!(node.contents.as_deref(), Some(&b"c"[..]));
}

// NS-5, NS-7
#[tokio::test]
async fn listing_and_recursive_deletion_follow_the_key_hierarchy() {
    let (_server, client) = client().await;
    for key in ["a/b", "a/c/d", "a/c/e", "ab"] {
        client.put(key, "x", PutOptions::new()).await.unwrap();
    }
    assert_eq!(client.list("a", false).await.unwrap(), ["a/b", "a/c"]);
    assert_eq!(client.list("", false).await.unwrap(), ["a", "ab"]);
    assert_eq!(
        client.list("a", true).await.unwrap(),
        ["a/b", "a/c/d", "a/c/e"]
    );
    let recursive = DeleteOptions {
        recursive: true,
        ..DeleteOptions::default()
    };
    assert_eq!(
        client.delete("a/c", recursive).await.unwrap().keys,
        ["a/c/d", "a/c/e"]
    );
    assert_eq!(client.list("", true).await.unwrap(), ["a/b", "ab"]);
    let nothing = client
        .delete("nothing", DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!((nothing.keys.len(), nothing.total), (0, 0));
}

// NS-5: a prefix with more keys than a reply can carry is listed page by
// page, in key order, with nothing missed or repeated.
#[tokio::test]
async fn a_prefix_too_large_for_one_reply_is_listed_page_by_page() {
    let (_server, client) = client().await;
    // Keys long enough that 30,000 of them exceed a frame (1 MiB).
    let stem = "k".repeat(60);
    let writes = (0..30_000).map(|n| {
        let client = client.clone();
        let key = format!("big/{stem}{n:06}");
        async move { client.put(&key, "x", PutOptions::new()).await.unwrap() }
    });
    // A few hundred in flight at once, not all 30,000: each request has
    // its own timeout, which the last of 30,000 queued at once could
    // outwait on a loaded machine.
    use futures::StreamExt;
    futures::stream::iter(writes)
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await;
    client
        .put("big/sub/deeper", "x", PutOptions::new())
        .await
        .unwrap();
    let all = client.list("big", true).await.unwrap();
    assert_eq!(all.len(), 30_001);
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "in key order, once each"
    );
    let (first, more) = client.list_page("big", true, None, 0).await.unwrap();
    assert_eq!((first.len(), more), (1000, true));
    let children = client.list("big", false).await.unwrap();
    assert_eq!(children.len(), 30_001, "30,000 nodes and big/sub");
    assert!(children.contains(&"big/sub".to_string()));
    let deleted = client
        .delete(
            "big",
            DeleteOptions {
                recursive: true,
                ..DeleteOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((deleted.keys.len(), deleted.total), (1000, 30_001));
}

// NS-4
#[tokio::test]
async fn an_ephemeral_node_goes_when_its_session_ends() {
    let (_server, client) = client().await;
    let session = client
        .create_session(SessionOptions::new("owner"))
        .await
        .unwrap();
    client
        .put("svc/worker-1", "up", PutOptions::new().ephemeral(&session))
        .await
        .unwrap();
    client
        .put("svc/config", "x", PutOptions::new())
        .await
        .unwrap();
    let node = client.get("svc/worker-1").await.unwrap().unwrap();
    assert_eq!(node.stat.ephemeral_owner, Some(session.id()));
    session.close().await.unwrap();
    assert_eq!(client.get("svc/worker-1").await.unwrap(), None);
    assert!(client.get("svc/config").await.unwrap().is_some());
}

// NS-4
#[tokio::test]
async fn an_ephemeral_node_goes_when_its_session_expires() {
    let (_server, client) = client().await;
    let session = client
        .create_session(SessionOptions::new("owner").lease(Duration::from_millis(300)))
        .await
        .unwrap();
    client
        .put("lease/holder", "me", PutOptions::new().ephemeral(&session))
        .await
        .unwrap();
    session.detach().await;
    // A KeepAlive still held at the master extends the lease once more, so
    // wait for the node to go rather than for a fixed time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while client.get("lease/holder").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ephemeral node outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// NS-3
#[tokio::test]
async fn contents_up_to_the_limit_are_stored_and_larger_are_refused() {
    let (_server, client) = client().await;
    let largest = vec![7u8; MAX_CONTENTS];
    client
        .put("big", largest.clone(), PutOptions::new())
        .await
        .unwrap();
    let node = client.get("big").await.unwrap().unwrap();
    assert_eq!(node.contents, Some(largest));
    let error = client
        .put("big", vec![0u8; MAX_CONTENTS + 1], PutOptions::new())
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument));
}

// NS-1
#[tokio::test]
async fn a_malformed_key_is_an_invalid_argument() {
    let (_server, client) = client().await;
    for key in ["/abs", "a//b", "a b"] {
        let error = client.get(key).await.unwrap_err();
        assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{key}");
    }
}

// NS-8
#[tokio::test]
async fn a_watch_answers_when_the_node_changes() {
    let (_server, client) = client().await;
    let index = client.put("cfg", "v1", PutOptions::new()).await.unwrap();
    let watcher = client.clone();
    let watch =
        tokio::spawn(async move { watcher.watch("cfg", index, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!watch.is_finished(), "held while nothing changes");
    let written = client.put("cfg", "v2", PutOptions::new()).await.unwrap();
    let seen = watch.await.unwrap().unwrap();
    assert_eq!(seen.index, written);
    assert_eq!(seen.node.unwrap().contents.as_deref(), Some(&b"v2"[..]));
}

// NS-8
#[tokio::test]
async fn a_watch_answers_when_the_node_is_deleted() {
    let (_server, client) = client().await;
    let index = client.put("cfg", "v1", PutOptions::new()).await.unwrap();
    let watcher = client.clone();
    let watch =
        tokio::spawn(async move { watcher.watch("cfg", index, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    client
        .delete("cfg", DeleteOptions::default())
        .await
        .unwrap();
    let seen = watch.await.unwrap().unwrap();
    assert_eq!(seen.node, None);
    assert!(seen.index > index);
}

// NS-8
#[tokio::test]
async fn a_watch_on_a_key_never_written_waits_for_its_creation() {
    let (_server, client) = client().await;
    let watcher = client.clone();
    let watch = tokio::spawn(async move { watcher.watch("new", 0, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!watch.is_finished());
    client.put("new", "here", PutOptions::new()).await.unwrap();
    assert!(watch.await.unwrap().unwrap().node.is_some());
}

// NS-8
#[tokio::test]
async fn a_watch_that_sees_no_change_answers_at_its_timeout_with_the_node_as_it_is() {
    let (_server, client) = client().await;
    let index = client
        .put("still", "same", PutOptions::new())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let seen = client
        .watch("still", index, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(290));
    assert_eq!(seen.index, index);
    assert!(seen.node.is_some());
}

// NS-8
#[tokio::test]
async fn a_watch_behind_the_current_index_answers_at_once() {
    let (_server, client) = client().await;
    let index = client.put("k", "1", PutOptions::new()).await.unwrap();
    client.put("k", "2", PutOptions::new()).await.unwrap();
    let started = tokio::time::Instant::now();
    let seen = client
        .watch("k", index, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(seen.index > index);
}

// NS-8: once 65,536 later deletions push a key's own deletion out of
// memory, its index does not fall back; a watch from the index it had
// answers at once, telling the watcher to re-read.
#[tokio::test]
async fn a_watch_from_a_forgotten_deletion_answers_at_once_with_a_newer_index() {
    let (_server, client) = client().await;
    client.put("cfg", "v1", PutOptions::new()).await.unwrap();
    client
        .delete("cfg", DeleteOptions::default())
        .await
        .unwrap();
    let was = client
        .watch("cfg", 0, Duration::from_secs(10))
        .await
        .unwrap()
        .index;
    // 70,000 deletions of other keys, in one recursive delete. The writes
    // go 256 at a time: all at once, the last would wait in line longer
    // than a request's timeout on a loaded machine.
    use futures::StreamExt;
    futures::stream::iter(0..70_000)
        .map(|n| {
            let client = client.clone();
            async move {
                client
                    .put(&format!("bulk/{n}"), "x", PutOptions::new())
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await;
    let recursive = DeleteOptions {
        recursive: true,
        ..DeleteOptions::default()
    };
    client.delete("bulk", recursive).await.unwrap();
    let seen = tokio::time::timeout(
        Duration::from_secs(60),
        client.watch("cfg", was, Duration::from_secs(300)),
    )
    .await
    .expect("answered at once, not at the watch's timeout")
    .unwrap();
    assert_eq!(seen.node, None);
    assert!(
        seen.index > was,
        "the index went from {was} to {}",
        seen.index
    );
}
