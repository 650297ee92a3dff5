//! Client traffic for the crash tests: writers of unique keys and a
//! locker, recording everything the master acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Client, LockOptions, PutOptions, SessionId, SessionOptions};
use tokio::time::Instant;

/// What the master (or cell) acknowledged.
#[derive(Default)]
pub struct Acknowledged {
    /// key -> value, for every write the master acknowledged.
    pub writes: BTreeMap<String, String>,
    /// (lock key, generation) -> the sessions it was granted to.
    pub grants: BTreeMap<(String, u64), BTreeSet<SessionId>>,
}

/// Writes unique keys as fast as acknowledgements come, until `until`.
pub async fn writer(client: Client, name: String, until: Instant, seen: Arc<Mutex<Acknowledged>>) {
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let key = format!("w/{name}/{n}");
        let value = format!("{name}-{n}");
        if client
            .put(&key, value.as_str(), PutOptions::new())
            .await
            .is_ok()
        {
            seen.lock().unwrap().writes.insert(key, value);
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Takes and releases a few locks with sessions of `lease`, recording
/// every grant.
pub async fn locker(
    client: Client,
    name: String,
    lease: Duration,
    until: Instant,
    seen: Arc<Mutex<Acknowledged>>,
) {
    let mut session = None;
    let mut n = 0u64;
    while Instant::now() < until {
        if session.is_none() {
            let options = SessionOptions::new(&name)
                .lease(lease)
                .lock_delay(Duration::ZERO);
            session = client.create_session(options).await.ok();
            if session.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        }
        let s = session.as_ref().expect("created");
        n += 1;
        let key = format!("l/{}", n % 3);
        let options = LockOptions::exclusive().timeout(Duration::from_millis(200));
        match s.lock(&key, options).await {
            Ok(guard) => {
                let generation = guard.sequencer().lock_generation;
                seen.lock()
                    .unwrap()
                    .grants
                    .entry((key, generation))
                    .or_default()
                    .insert(s.id());
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = guard.release().await;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
        if s.state().is_final() {
            session = None;
        }
    }
}
