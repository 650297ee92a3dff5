//! Subscriptions and lock signals through the client library.

use std::time::Duration;

use leasehold::{
    event_mask, Change, Client, DeleteOptions, LockOptions, PutOptions, Session, SessionOptions,
    SessionState, SubscribeOptions, SubscriptionEvent,
};
use leasehold_tests::fixture::Fixture;
use leasehold_tests::proxy::{Link, Proxy};
use leasehold_tests::server::{short_lease_config, start};

/// The next node event as [`changed`] writes it, without its index and
/// contents (which `events_carry_the_index_and_small_contents` checks).
async fn next(sub: &mut leasehold::Subscription) -> SubscriptionEvent {
    match next_full(sub).await {
        SubscriptionEvent::Changed { key, change, .. } => changed(&key, change),
        other => other,
    }
}

/// The next node event; session state events (a slow machine may see a
/// moment of jeopardy) are the subject of their own test.
async fn next_full(sub: &mut leasehold::Subscription) -> SubscriptionEvent {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("an event within 5 s")
            .expect("the session lives");
        if !matches!(event, SubscriptionEvent::Session(_)) {
            return event;
        }
    }
}

/// A master, a client of it and a session of that client.
async fn one_session() -> (leasehold_tests::server::TestServer, Client, Session) {
    let Fixture { server, client } = Fixture::new().await;
    let session = client
        .create_session(SessionOptions::new("w"))
        .await
        .unwrap();
    (server, client, session)
}

fn changed(key: &str, change: Change) -> SubscriptionEvent {
    SubscriptionEvent::Changed {
        key: key.into(),
        change,
        index: 0,
        contents: None,
    }
}

// EV-10
#[tokio::test]
async fn events_carry_the_index_and_small_contents() {
    let (_server, client, session) = one_session().await;
    let mut sub = session
        .subscribe("cfg", SubscribeOptions::exact())
        .await
        .unwrap();
    let small = client.put("cfg", "v1", PutOptions::new()).await.unwrap();
    let large_value = vec![b'x'; leasehold::EVENT_CONTENTS_MAX + 1];
    let large = client
        .put("cfg", large_value, PutOptions::new())
        .await
        .unwrap();
    let deleted = client.delete("cfg", DeleteOptions::new()).await.unwrap();
    assert_eq!(deleted.total, 1);
    let heard = [
        next_full(&mut sub).await,
        next_full(&mut sub).await,
        next_full(&mut sub).await,
    ];
    let event = |change, index, contents| SubscriptionEvent::Changed {
        key: "cfg".into(),
        change,
        index,
        contents,
    };
    assert_eq!(
        heard[0],
        event(Change::Created, small, Some(b"v1".to_vec()))
    );
    assert_eq!(heard[1], event(Change::Modified, large, None));
    let SubscriptionEvent::Changed {
        change: Change::Deleted,
        index,
        contents: None,
        ..
    } = heard[2]
    else {
        panic!("expected the deletion, got {:?}", heard[2]);
    };
    assert!(index > large, "the deletion came after the write");
    // It is the key's index now (`NS-8`), which a watch continues from.
    let now = client
        .watch("cfg", 0, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(index, now.index);
}

// EV-5, EV-7
#[tokio::test]
async fn a_subscription_hears_each_change_in_order() {
    let (_server, client, session) = one_session().await;
    let mut sub = session
        .subscribe("cfg", SubscribeOptions::exact())
        .await
        .unwrap();
    client.put("cfg", "1", PutOptions::new()).await.unwrap();
    client
        .put("cfg/child", "x", PutOptions::new())
        .await
        .unwrap();
    client.put("cfg", "2", PutOptions::new()).await.unwrap();
    client
        .delete("cfg", DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(next(&mut sub).await, changed("cfg", Change::Created));
    assert_eq!(
        next(&mut sub).await,
        changed(
            "cfg",
            Change::ChildAdded {
                child: "cfg/child".into()
            }
        )
    );
    assert_eq!(next(&mut sub).await, changed("cfg", Change::Modified));
    assert_eq!(next(&mut sub).await, changed("cfg", Change::Deleted));
}

// EV-2, EV-7
#[tokio::test]
async fn events_arrive_once_each_and_in_order_across_a_dropped_connection() {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let watcher = Client::connect(proxy.addr.to_string()).await.unwrap();
    let writer = server.client().await;
    let session = watcher
        .create_session(
            SessionOptions::new("w")
                .lease(Duration::from_secs(4))
                .grace(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    let mut sub = session
        .subscribe("n", SubscribeOptions::prefix())
        .await
        .unwrap();
    writer.put("n", "0", PutOptions::new()).await.unwrap();
    assert_eq!(next(&mut sub).await, changed("n", Change::Created));

    // Cut the link for less than the lease (the master would end the session
    // otherwise): writes go on and the events wait at the master. Cut once
    // the master holds the next KeepAlive, and write a while after: the
    // first write answers it (the reply is lost) and extends the master's
    // lease well past the client's, so the client, which reconnects when its
    // own lease runs out, finds the session alive however loaded the machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !writer
        .session_info(session.id())
        .await
        .unwrap()
        .keepalive_held
    {
        assert!(tokio::time::Instant::now() < deadline, "no KeepAlive held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.set(Link::Cut);
    tokio::time::sleep(Duration::from_secs(1)).await;
    for n in 1..=20 {
        writer
            .put("n", n.to_string(), PutOptions::new())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.set(Link::Pass);
    for _ in 1..=20 {
        assert_eq!(next(&mut sub).await, changed("n", Change::Modified));
    }
    // No duplicate follows.
    assert!(
        tokio::time::timeout(Duration::from_millis(700), next(&mut sub))
            .await
            .is_err()
    );
}

// EV-6, LOCK-10
#[tokio::test]
async fn a_guard_hears_that_the_master_took_its_lock() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    let session = client
        .create_session(SessionOptions::new("h"))
        .await
        .unwrap();
    let guard = session
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    assert!(guard.is_held());
    client.delete("k", DeleteOptions::default()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("told of the loss");
    assert!(!guard.is_held());
}

// EV-6
#[tokio::test]
async fn a_holder_hears_that_someone_waits_and_can_hand_the_lock_over() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    let holder = client
        .create_session(SessionOptions::new("h"))
        .await
        .unwrap();
    let waiter = client
        .create_session(SessionOptions::new("w"))
        .await
        .unwrap();
    let guard = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock("k", LockOptions::exclusive()).await })
    };
    let who = tokio::time::timeout(Duration::from_secs(5), guard.conflict())
        .await
        .expect("told of the waiter");
    assert_eq!(who, waiter.id());
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap();
}

/// Everything a stream hears while its session's link is cut until the
/// session expires (lease 1 s, grace 0.5 s).
async fn stream_through_a_cut(options: SubscribeOptions) -> (Vec<SubscriptionEvent>, Session) {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let client = Client::connect(proxy.addr.to_string()).await.unwrap();
    let session = client
        .create_session(
            SessionOptions::new("w")
                .lease(Duration::from_secs(1))
                .grace(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    let mut sub = session.subscribe("k", options).await.unwrap();
    proxy.set(Link::Cut);
    let mut heard = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("the stream moves within 5 s")
    {
        heard.push(event);
    }
    (heard, session)
}

// EV-8, CS-7
#[tokio::test]
async fn a_subscription_reports_session_states_and_ends_when_the_session_expires() {
    let (heard, _session) = stream_through_a_cut(SubscribeOptions::exact()).await;
    assert_eq!(
        heard,
        [
            SubscriptionEvent::Session(SessionState::Jeopardy),
            SubscriptionEvent::Session(SessionState::Expired)
        ]
    );
}

// EV-8
#[tokio::test]
async fn a_subscription_without_the_session_state_bit_hears_no_states() {
    let options = SubscribeOptions::exact().mask(event_mask::CONTENTS);
    let (heard, session) = stream_through_a_cut(options).await;
    assert_eq!(heard, []);
    assert_eq!(session.state(), SessionState::Expired);
}

// EV-3: many events with long keys are spread over several replies that
// each fit a small frame.
#[tokio::test]
async fn events_that_outgrow_a_frame_arrive_over_several_replies() {
    let server = start(leasehold_server::Config {
        max_frame: 16 * 1024,
        ..short_lease_config()
    })
    .await;
    let client = server.client().await;
    let session = client
        .create_session(SessionOptions::new("w"))
        .await
        .unwrap();
    let mut sub = session
        .subscribe("big", SubscribeOptions::prefix())
        .await
        .unwrap();
    let long = "x".repeat(400);
    for n in 0..100 {
        client
            .put(&format!("big/{long}{n}"), "", PutOptions::new())
            .await
            .unwrap();
    }
    for n in 0..100 {
        assert_eq!(
            next(&mut sub).await,
            changed(&format!("big/{long}{n}"), Change::Created)
        );
    }
}

// EV-5, EV-7
#[tokio::test]
async fn streams_on_the_same_key_share_a_subscription_and_each_hears_its_own_mask() {
    let (_server, client, session) = one_session().await;
    let mut contents = session
        .subscribe("cfg", SubscribeOptions::exact().mask(event_mask::CONTENTS))
        .await
        .unwrap();
    let mut locks = session
        .subscribe(
            "cfg",
            SubscribeOptions::exact().mask(event_mask::LOCK_ACQUIRED),
        )
        .await
        .unwrap();
    assert_eq!(contents.id(), locks.id(), "one subscription on the master");
    client.put("cfg", "1", PutOptions::new()).await.unwrap();
    let guard = session.lock("cfg", LockOptions::exclusive()).await.unwrap();
    assert_eq!(next(&mut contents).await, changed("cfg", Change::Created));
    assert_eq!(
        next(&mut locks).await,
        changed(
            "cfg",
            Change::LockAcquired {
                holder: session.id()
            }
        )
    );
    guard.release().await.unwrap();
    client.put("cfg", "2", PutOptions::new()).await.unwrap();
    // Had `locks` heard the contents change, it would come before this.
    assert_eq!(next(&mut contents).await, changed("cfg", Change::Modified));
    drop(locks);
}

// EV-5
#[tokio::test]
async fn ending_one_stream_leaves_another_on_the_same_key_hearing() {
    let (server, client, session) = one_session().await;
    let mut kept = session
        .subscribe("cfg", SubscribeOptions::exact())
        .await
        .unwrap();
    let cancelled = session
        .subscribe("cfg", SubscribeOptions::exact())
        .await
        .unwrap();
    cancelled.cancel().await.unwrap();
    // Dropped and made again at once: the unsubscribe it sends must not
    // end the new stream's subscription.
    let dropped = session
        .subscribe("cfg", SubscribeOptions::exact())
        .await
        .unwrap();
    drop(dropped);
    let mut again = session
        .subscribe("cfg", SubscribeOptions::exact())
        .await
        .unwrap();
    client.put("cfg", "1", PutOptions::new()).await.unwrap();
    assert_eq!(next(&mut kept).await, changed("cfg", Change::Created));
    assert_eq!(next(&mut again).await, changed("cfg", Change::Created));
    // The last stream gone, the master's subscription goes too.
    let id = kept.id();
    kept.cancel().await.unwrap();
    again.cancel().await.unwrap();
    let (mut raw, _) = leasehold_tests::raw::RawConnection::open(server.addr).await;
    let refused = raw
        .call(leasehold_protocol::Request::Unsubscribe {
            session: session.token(),
            subscription: id,
        })
        .await;
    assert!(refused.is_err(), "still subscribed: {refused:?}");
}

// EV-7: a subscription is a `Stream`, so streams combine.
#[tokio::test]
async fn subscriptions_combine_as_streams() {
    use futures::StreamExt;
    let (_server, client, session) = one_session().await;
    let a = session
        .subscribe("a", SubscribeOptions::exact().mask(event_mask::CONTENTS))
        .await
        .unwrap();
    let b = session
        .subscribe("b", SubscribeOptions::exact().mask(event_mask::CONTENTS))
        .await
        .unwrap();
    client.put("a", "1", PutOptions::new()).await.unwrap();
    client.put("b", "1", PutOptions::new()).await.unwrap();
    let mut both = futures::stream::select(a, b);
    let mut heard = Vec::new();
    while heard.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(5), both.next())
            .await
            .expect("an event within 5 s")
            .expect("the session lives");
        if let SubscriptionEvent::Changed { key, change, .. } = event {
            heard.push(changed(&key, change));
        }
    }
    heard.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        heard,
        [changed("a", Change::Created), changed("b", Change::Created)]
    );
}
