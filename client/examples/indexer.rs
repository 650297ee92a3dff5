//! The README's example: takes a lock, works while it holds, lets go.
//! Run a master first (`cargo run --release -- serve`), then
//! `cargo run -p leasehold --example indexer`.

use leasehold::{Client, LockOptions, SessionOptions, SessionState};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), leasehold::ClientError> {
    let client = Client::connect("127.0.0.1:7171").await?;
    let session = client
        .create_session(
            SessionOptions::new("indexer")
                .lease(Duration::from_secs(12))
                .lock_delay(Duration::from_secs(15))
                .grace(Duration::from_secs(45)),
        )
        .await?;

    // Every transition, in order (`session.watch_state()` gives the latest).
    session.on_state_change(|state| match state {
        SessionState::Jeopardy => eprintln!("master unreachable: pause work"),
        SessionState::Safe => eprintln!("contact restored"),
        SessionState::Failover => eprintln!("the master restarted: re-read caches"),
        SessionState::Expired => eprintln!("session lost: stop"),
        SessionState::Closed => eprintln!("session closed"),
        _ => {} // Normal, and states a later version may add
    });

    let guard = session
        .lock("jobs/indexer", LockOptions::exclusive())
        .await?;
    println!(
        "holding jobs/indexer, sequencer {}",
        guard.sequencer().to_hex()
    );
    for batch in 0..3 {
        // Stop the moment the lock can no longer be relied on.
        if !guard.is_held() {
            eprintln!("lost the lock: stopping");
            break;
        }
        println!("indexing batch {batch}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    guard.release().await?;

    // Closing destroys the session on the master. Dropping the last handle
    // asks the session's task to, but once main returns the runtime that
    // runs the task is gone: a session not closed lives on the master until
    // its lease runs out, and its locks then wait out their lock-delay.
    session.close().await
}
