//! The election and semaphore recipes, end to end, as their seeds describe.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::{Client, Election, Semaphore, Session, SessionOptions};
use leasehold_protocol::{EventKind, Response};
use leasehold_tests::fixture::Fixture;
use leasehold_tests::proxy::{Link, Proxy};
use leasehold_tests::relay::Relay;
use leasehold_tests::server::{short_lease_config, start, TestServer};
use tokio::time::Instant;

/// The lease of a contender that is meant to die: short, so the test
/// need not wait long for the master to give up on it.
const SHORT_LEASE: Duration = Duration::from_secs(1);
const LOCK_DELAY: Duration = Duration::from_millis(800);
/// The lease and lock-delay of a contender that is meant to live: long
/// enough that no load on the machine running the tests makes it miss a
/// KeepAlive, and that a hand-over which wrongly waited for lock-delay
/// could not pass for a prompt one.
const LONG_LEASE: Duration = Duration::from_secs(30);
const LONG_LOCK_DELAY: Duration = Duration::from_secs(30);

/// A contender that lives through the test.
async fn contender(client: &Client, name: &str) -> Session {
    session(client, name, LONG_LEASE, LONG_LOCK_DELAY).await
}

/// A contender the test lets die (cut off, or detached).
async fn mortal(client: &Client, name: &str) -> Session {
    session(client, name, SHORT_LEASE, LOCK_DELAY).await
}

async fn session(client: &Client, name: &str, lease: Duration, lock_delay: Duration) -> Session {
    client
        .create_session(
            SessionOptions::new(name)
                .lease(lease)
                .lock_delay(lock_delay)
                .grace(Duration::from_millis(500)),
        )
        .await
        .unwrap()
}

/// When `session` first leaves `Normal`, stamped by the library as it
/// decides, not when a test task next runs: a loaded machine cannot make
/// the stamp late.
fn left_normal(session: &Session) -> Arc<std::sync::Mutex<Option<Instant>>> {
    let left = Arc::new(std::sync::Mutex::new(None));
    let stamp = left.clone();
    session.on_state_change(move |state| {
        if state != leasehold::SessionState::Normal {
            stamp.lock().unwrap().get_or_insert_with(Instant::now);
        }
    });
    left
}

async fn setup() -> (TestServer, Client) {
    let Fixture { server, client } = Fixture::new().await;
    (server, client)
}

// ELECT-1, ELECT-2, LOCK-5, LOCK-6, LOCK-10: the leader-election seed with
// three contenders.
#[tokio::test]
async fn a_new_leader_takes_over_only_after_the_old_one_stopped_and_lock_delay_passed() {
    let (server, client) = setup().await;
    // The first leader reaches the master through a link we can cut.
    let proxy = Proxy::start(server.addr).await;
    let cut_client = Client::connect(proxy.addr.to_string()).await.unwrap();
    let first = mortal(&cut_client, "a").await;
    let first_left_normal = left_normal(&first);
    let key = "service/mysql/leader";
    let term_a = Election::new(&first, key).campaign("a:3306").await.unwrap();
    let sequencer_a = term_a.sequencer_bytes().to_vec();
    let generation_a = term_a.sequencer().lock_generation;

    let mut observer = client.observe_leader(key);
    let seen = observer.next().await.unwrap().expect("a leads");
    assert_eq!(
        (seen.session, &seen.value[..]),
        (first.id(), &b"a:3306"[..])
    );

    let mut waiting = Vec::new();
    for name in ["b", "c"] {
        let session = contender(&client, name).await;
        let election = Election::new(&session, key);
        waiting.push(tokio::spawn(async move {
            let term = election.campaign(format!("{name}:3306")).await.unwrap();
            (session, term, Instant::now())
        }));
        // b queues before c (LOCK-5).
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The leader is cut off: it stops leading when its local lease ends,
    // and the master releases the lock only when the lease ends there,
    // then keeps it for lock-delay.
    let cut = Instant::now();
    proxy.set(Link::Cut);
    tokio::time::timeout(Duration::from_secs(5), term_a.lost())
        .await
        .expect("a hears it may no longer lead");
    let a_stopped = first_left_normal
        .lock()
        .unwrap()
        .expect("a left normal when it stopped leading");
    assert!(!term_a.is_leader());

    let (session_b, term_b, b_started) = waiting.remove(0).await.unwrap();
    assert!(a_stopped < b_started, "a stopped before b began");
    // a's local lease ran out no later than its lease at the master, which
    // then held the lock for lock-delay: b leads at least lock-delay after
    // a stopped.
    assert!(
        b_started - a_stopped >= LOCK_DELAY,
        "b waited out lease and lock-delay: {:?} after a stopped, {:?} after the cut",
        b_started - a_stopped,
        b_started - cut
    );
    assert_eq!(term_b.sequencer().lock_generation, generation_a + 1);
    assert!(!client.check_sequencer(&sequencer_a).await.unwrap());
    let leader = client.leader(key).await.unwrap().expect("b leads");
    assert_eq!(
        (leader.session, &leader.value[..]),
        (session_b.id(), &b"b:3306"[..])
    );

    // The observer saw a go; it ends on b (perhaps after "nobody").
    let mut last = observer.next().await.unwrap();
    while last.as_ref().map(|l| l.session) != Some(session_b.id()) {
        last = tokio::time::timeout(Duration::from_secs(5), observer.next())
            .await
            .expect("the observer hears of b")
            .unwrap();
    }

    // A resignation hands over at once, with no lock-delay.
    let resigned = Instant::now();
    term_b.resign().await.unwrap();
    let (session_c, term_c, c_started) = waiting.remove(0).await.unwrap();
    assert!(c_started - resigned < LONG_LOCK_DELAY);
    assert_eq!(term_c.sequencer().lock_generation, generation_a + 2);
    assert_eq!(
        client.leader(key).await.unwrap().map(|l| l.session),
        Some(session_c.id())
    );
}

// ELECT-1, LOCK-6: a leader that dies (no release, no more KeepAlives) is
// replaced once its lease has run out and lock-delay has passed.
#[tokio::test]
async fn a_dead_leader_is_replaced_after_its_lease_and_lock_delay() {
    let (_server, client) = setup().await;
    let key = "svc/leader";
    let a = mortal(&client, "a").await;
    let term_a = Election::new(&a, key).campaign("a").await.unwrap();
    let generation_a = term_a.sequencer().lock_generation;
    let b = contender(&client, "b").await;
    let campaign_b = tokio::spawn(async move {
        let term = Election::new(&b, key).campaign("b").await.unwrap();
        (b, term, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let died = Instant::now();
    std::mem::forget(term_a);
    a.detach().await;
    let (b, term_b, b_started) = campaign_b.await.unwrap();
    assert!(b_started - died >= LOCK_DELAY, "{:?}", b_started - died);
    assert_eq!(term_b.sequencer().lock_generation, generation_a + 1);
    let leader = client.leader(key).await.unwrap().unwrap();
    assert_eq!((leader.session, &leader.value[..]), (b.id(), &b"b"[..]));
}

// ELECT-2, LOCK-2: a leader may publish a new value without a new term.
#[tokio::test]
async fn a_leader_proclaims_a_new_value_within_its_term() {
    let (_server, client) = setup().await;
    let session = contender(&client, "a").await;
    let election = Election::new(&session, "svc/leader");
    let term = election.campaign("old").await.unwrap();
    let generation = term.sequencer().lock_generation;
    term.proclaim("new").await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.value, b"new");
    assert_eq!(leader.lock_generation, generation, "the same term");
    assert!(term.is_leader());
    let other = contender(&client, "b").await;
    assert!(Election::new(&other, "svc/leader")
        .try_campaign("b")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn leader_changes_of_two_elections_merge_as_streams() {
    use futures::StreamExt;
    let (_server, client) = setup().await;
    let session = contender(&client, "a").await;
    let mut both = futures::stream::select(
        client.observe_leader("svc/one/leader"),
        client.observe_leader("svc/two/leader"),
    );
    // Each stream first says who leads now: nobody.
    for _ in 0..2 {
        assert_eq!(both.next().await.unwrap().unwrap(), None);
    }
    let _one = Election::new(&session, "svc/one/leader")
        .campaign("one")
        .await
        .unwrap();
    let _two = Election::new(&session, "svc/two/leader")
        .campaign("two")
        .await
        .unwrap();
    let mut values = Vec::new();
    for _ in 0..2 {
        let leader = tokio::time::timeout(Duration::from_secs(30), both.next())
            .await
            .expect("each election's stream hears its leader")
            .unwrap()
            .unwrap()
            .expect("someone leads");
        assert_eq!(leader.session, session.id());
        values.push(leader.value);
    }
    values.sort();
    assert_eq!(values, [b"one".to_vec(), b"two".to_vec()]);
}

// A `next()` given up while its read opened a connection (the link held
// the handshake) leaves that read running: had it stayed frozen, it would
// hold the client's one connection attempt, and every other call of the
// client would wait for it until the observer was polled again.
#[tokio::test]
async fn a_leader_observation_given_up_part_way_does_not_stall_the_client() {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let config = leasehold::ClientConfig {
        request_timeout: Duration::from_millis(300),
        ..leasehold::ClientConfig::default()
    };
    let client = Client::connect_with(proxy.addr.to_string(), config)
        .await
        .unwrap();
    proxy.set(Link::Hold);
    // Times out, and the client gives up its connection.
    assert!(client.leader("svc/leader").await.is_err());
    let mut changes = client.observe_leader("svc/leader");
    let given_up = tokio::time::timeout(Duration::from_millis(200), changes.next()).await;
    assert!(given_up.is_err(), "the handshake waits in the relay");
    proxy.set(Link::Pass);
    let read = tokio::time::timeout(Duration::from_secs(5), client.leader("svc/leader")).await;
    assert!(
        matches!(read, Ok(Ok(None))),
        "the client serves other calls: {read:?}"
    );
    drop(changes);
}

// SEM-2, SEM-3: the semaphore seed with five contenders, two slots.
#[tokio::test]
async fn five_contenders_for_two_slots_never_exceed_two_holders() {
    let (_server, client) = setup().await;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for n in 0..5 {
        let session = contender(&client, &format!("c{n}")).await;
        let (holding, most, done) = (holding.clone(), most.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let slots = Semaphore::new(&session, "jobs/builders", 2);
            for _ in 0..3 {
                let permit = slots
                    .acquire(format!("c{n}"), Some(Duration::from_secs(20)))
                    .await
                    .unwrap();
                assert!(permit.is_held());
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }
            session
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every contender finishes")
            .unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 15);
    assert_eq!(most.load(Ordering::SeqCst), 2, "two at a time, never more");
}

// SEM-4, LOCK-13: giving a slot back deletes the contender key, which takes
// the session's own lock on it away, and the master says so (`LockLost`,
// EV-6) on a KeepAlive reply, which nothing orders after the delete's
// reply. Here it comes only after the next acquire has locked the same key
// again (five contenders on one link once made it so): it names the
// holding given back, and the new slot stays held.
#[tokio::test]
async fn a_late_lock_lost_from_giving_a_slot_back_leaves_the_next_slot_held() {
    let server = start(short_lease_config()).await;
    let relay = Relay::start(server.addr).await;
    let client = Client::connect(relay.addr.to_string()).await.unwrap();
    let session = contender(&client, "a").await;
    let slots = Semaphore::new(&session, "sem", 1);
    let first = slots.acquire("a", None).await.unwrap();
    relay.hold(tells_of_a_lost_lock);
    first.release().await.unwrap();
    let second = slots.acquire("a", None).await.unwrap();
    assert!(second.is_held());
    tokio::time::timeout(Duration::from_secs(10), relay.held())
        .await
        .expect("the master tells of the lock its delete took away");
    let last = last_event(&relay.pass_held());
    tokio::time::timeout(Duration::from_secs(10), relay.acknowledged(last))
        .await
        .expect("the client delivers the held events");
    assert!(
        second.is_held(),
        "the LockLost of the slot given back cost the next one"
    );
    assert_eq!(slots.holders().await.unwrap(), [session.id()]);
}

// SEM-1, LOCK-17: an acquire given up while its lock of the contender key
// was unanswered is withdrawn in the background; the session's next
// acquire waits for the withdrawal instead of being refused as if it
// already held or took a slot (`random` seed 7100828 without lock-delay).
#[tokio::test]
async fn an_acquire_given_up_part_way_does_not_refuse_the_next() {
    let server = start(short_lease_config()).await;
    let relay = Relay::start(server.addr).await;
    let client = Client::connect(relay.addr.to_string()).await.unwrap();
    let session = contender(&client, "a").await;
    let slots = Semaphore::new(&session, "sem", 1);
    relay.hold(|r| matches!(r, Response::Acquired { .. }));
    let given_up = slots.acquire("a", Some(Duration::from_secs(30)));
    let given_up = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            _ = given_up => panic!("the acquire ended with its lock's answer held"),
            () = relay.held() => {}
        }
    });
    given_up
        .await
        .expect("the contender key's lock is asked for");
    let next = {
        let slots = slots.clone();
        tokio::spawn(async move { slots.acquire("a", Some(Duration::from_secs(10))).await })
    };
    // The next acquire has subscribed and run into the withdrawal by now
    // (a subscription is one round trip); if not, this passes without
    // testing the wait, and cannot fail for it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.pass_held();
    let permit = next
        .await
        .unwrap()
        .expect("the next acquire takes the slot");
    assert!(permit.is_held());
    assert_eq!(slots.holders().await.unwrap(), [session.id()]);
}

/// A KeepAlive reply that tells of a lock taken away.
fn tells_of_a_lost_lock(response: &Response) -> bool {
    matches!(
        response,
        Response::KeepAlive { events, .. }
            if events.iter().any(|e| matches!(e.kind, EventKind::LockLost { .. }))
    )
}

/// The highest event sequence number among KeepAlive replies.
fn last_event(replies: &[Response]) -> u64 {
    replies
        .iter()
        .filter_map(|r| match r {
            Response::KeepAlive { events, .. } => events.iter().map(|e| e.seq).max(),
            _ => None,
        })
        .max()
        .expect("a held KeepAlive reply with events")
}

// SEM-1, SEM-2, SEM-4: the coordinating key reads as the seed shows it.
#[tokio::test]
async fn the_coordinating_key_holds_the_limit_and_the_holders() {
    let (_server, client) = setup().await;
    let session = contender(&client, "a").await;
    let permit = Semaphore::new(&session, "sem", 2)
        .acquire("a", None)
        .await
        .unwrap();
    let node = client.get("sem/.lock").await.unwrap().unwrap();
    let body: serde_json::Value = serde_json::from_slice(&node.contents.unwrap()).unwrap();
    assert_eq!(
        body,
        serde_json::json!({ "Limit": 2, "Holders": [session.id().to_string()] })
    );
    let contender_key = format!("sem/{}", session.id());
    let stat = client.stat(&contender_key).await.unwrap().unwrap();
    assert_eq!(stat.ephemeral_owner, Some(session.id()));
    permit.release().await.unwrap();
    assert_eq!(client.get(&contender_key).await.unwrap(), None);
    let other = contender(&client, "b").await;
    let refused = Semaphore::new(&other, "sem", 3)
        .try_acquire("b")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("limit 2"), "{refused}");
}

// SEM-2, SEM-3: a dead holder is pruned and its slot taken.
#[tokio::test]
async fn a_crashed_holders_slot_goes_to_a_waiter_once_its_session_ends() {
    let (_server, client) = setup().await;
    let a = mortal(&client, "a").await;
    let b = contender(&client, "b").await;
    let c = contender(&client, "c").await;
    let permit_a = Semaphore::new(&a, "sem", 2)
        .acquire("a", None)
        .await
        .unwrap();
    let _permit_b = Semaphore::new(&b, "sem", 2)
        .acquire("b", None)
        .await
        .unwrap();
    let slots_c = Semaphore::new(&c, "sem", 2);
    assert!(slots_c.try_acquire("c").await.unwrap().is_none());

    // a crashes: no release, no more KeepAlives.
    std::mem::forget(permit_a);
    let a_id = a.detach().await.id;
    let permit_c = slots_c
        .acquire("c", Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(permit_c.is_held());
    let mut holders = slots_c.holders().await.unwrap();
    holders.sort();
    let mut expected = vec![b.id(), c.id()];
    expected.sort();
    assert_eq!(holders, expected);
    assert!(!holders.contains(&a_id));
}

// SEM-3: a holder re-checks on every change and hears when an
// operator takes its slot away.
#[tokio::test]
async fn a_holder_hears_when_its_slot_is_taken_away() {
    let (_server, client) = setup().await;
    let session = contender(&client, "a").await;
    let permit = Semaphore::new(&session, "sem", 1)
        .acquire("a", None)
        .await
        .unwrap();
    let node = client.get("sem/.lock").await.unwrap().unwrap();
    client
        .put(
            "sem/.lock",
            r#"{"Limit":1,"Holders":[]}"#,
            leasehold::PutOptions::new().cas(node.stat.modify_index),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), permit.lost())
        .await
        .expect("the holder hears");
    assert!(!permit.is_held());
}

// SEM-1: a session holds at most one slot of a semaphore.
#[tokio::test]
async fn a_session_cannot_hold_two_slots_of_one_semaphore() {
    let (_server, client) = setup().await;
    let session = contender(&client, "a").await;
    let slots = Semaphore::new(&session, "sem", 2);
    let permit = slots.acquire("a", None).await.unwrap();
    let refused = slots.try_acquire("a").await.unwrap_err();
    assert!(refused.to_string().contains("already holds"), "{refused}");
    assert!(permit.is_held());
    assert_eq!(slots.holders().await.unwrap(), [session.id()]);
}

// SEM-1: tasks of one session asking at once: one gets the slot, the
// others are refused, rather than sharing one slot with each believing it
// holds a permit of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_session_asking_at_once_get_one_slot_between_them() {
    let (_server, client) = setup().await;
    let session = contender(&client, "a").await;
    let slots = Semaphore::new(&session, "sem", 2);
    let asks = (0..8).map(|_| slots.try_acquire("a"));
    let permits: Vec<_> = futures::future::join_all(asks)
        .await
        .into_iter()
        .filter_map(|asked| match asked {
            Ok(permit) => permit,
            Err(refused) => {
                assert!(refused.to_string().contains("already"), "{refused}");
                None
            }
        })
        .collect();
    assert_eq!(permits.len(), 1, "two permits for one session's one slot");
    assert_eq!(slots.holders().await.unwrap(), [session.id()]);
}
