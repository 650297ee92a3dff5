//! Waiters outlive a fail-over (SPEC `LOCK-15`, `FO-4`), tried from
//! outside: `leasehold lock`, `elect` and `semaphore` processes queue
//! behind a holder, the master goes away (SIGKILL and a restart of a single
//! master; SIGKILL or SIGSTOP of a cell's master, so another member takes
//! over), and
//! every waiter gets its turn once the holder lets go, runs its command
//! and exits 0.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use common::cell::Cell;
use common::Running;
use leasehold::{
    Client, Election, LockOptions, Remedy, Semaphore, Session, SessionOptions, SessionState,
};
use tokio::time::Instant;

const LOCK: &str = "wq/a";
const ELECTION: &str = "wq/leader";
const SEMAPHORE: &str = "wq/slots";

/// Waits until `ready` holds, for at most `within`.
async fn eventually<F, Fut>(what: &str, within: Duration, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !ready().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The holder's session. A loaded machine may move a new cell's master
/// while it is created; a creation whose outcome is unknown is made again
/// (one left over holds nothing, and its lease runs out).
async fn create_holder(client: &Client) -> Session {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let options = SessionOptions::new("holder").lease(Duration::from_secs(10));
        match client.create_session(options).await {
            Ok(session) => return session,
            Err(e) if e.remedy() != Remedy::GiveUp && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the holder's session: {e}"),
        }
    }
}

/// A holder of the lock, the election and the semaphore's one slot, and
/// one CLI process waiting behind it for each, each waiter in line.
struct Queue {
    holder: Session,
    waiters: [Running; 3],
}

async fn queue_behind_a_holder(addrs: &str) -> (Queue, Holdings) {
    let client = Client::connect(addrs).await.unwrap();
    let holder = create_holder(&client).await;
    let guard = holder
        .try_lock(LOCK, LockOptions::exclusive())
        .await
        .unwrap();
    let term = Election::new(&holder, ELECTION)
        .campaign("holder")
        .await
        .unwrap();
    let permit = Semaphore::new(&holder, SEMAPHORE, 1)
        .acquire("holder", Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let waiters = [
        Running::start(
            addrs,
            &["lock", LOCK, "--timeout", "90s", "--", "echo", "locked"],
        ),
        Running::start(
            addrs,
            &[
                "elect", ELECTION, "--value", "next", "--", "echo", "elected",
            ],
        ),
        Running::start(
            addrs,
            &[
                "semaphore",
                SEMAPHORE,
                "--limit",
                "1",
                "--",
                "echo",
                "slotted",
            ],
        ),
    ];
    let within = Duration::from_secs(20);
    eventually("the lock and the election have waiters", within, || async {
        let lock = client.lock_info(LOCK).await.map(|i| i.waiters.len());
        let election = client.lock_info(ELECTION).await.map(|i| i.waiters.len());
        lock.is_ok_and(|n| n == 1) && election.is_ok_and(|n| n == 1)
    })
    .await;
    eventually("a second semaphore contender", within, || async {
        let keys = client.list(SEMAPHORE, false).await.unwrap_or_default();
        keys.iter().filter(|k| !k.ends_with(".lock")).count() == 2
    })
    .await;
    for waiter in &waiters {
        assert!(
            waiter.stdout.try_recv().is_err(),
            "no waiter runs its command"
        );
    }
    let queue = Queue { holder, waiters };
    (queue, (guard, term, permit))
}

type Holdings = (leasehold::LockGuard, leasehold::Term, leasehold::Permit);

impl Queue {
    /// Once the holder's session is normal again, it lets go of all
    /// three; each waiter then runs its command and exits 0.
    async fn let_go_and_see_every_waiter_served(mut self, (guard, term, permit): Holdings) {
        let holder = &self.holder;
        eventually(
            "the holder's session back to normal",
            Duration::from_secs(30),
            || async { holder.state() == SessionState::Normal },
        )
        .await;
        guard.release().await.unwrap();
        term.resign().await.unwrap();
        permit.release().await.unwrap();
        for (waiter, said) in self
            .waiters
            .iter_mut()
            .zip(["locked", "elected", "slotted"])
        {
            let line = waiter.stdout.recv_timeout(Duration::from_secs(30));
            assert_eq!(
                line.as_deref(),
                Ok(said),
                "stderr: {:?}",
                waiter.stderr_so_far()
            );
            let status = waiter.wait(Duration::from_secs(30));
            assert!(status.success(), "{said}: {status:?}");
        }
    }
}

fn serve(dir: &Path, listen: &str) -> (Child, String) {
    let dir = dir.to_str().expect("a UTF-8 path");
    common::spawn_serve(&["--listen", listen, "--data-dir", dir])
}

// LOCK-15, FO-4: a single master killed with SIGKILL and restarted on its
// data directory; the waiting processes keep waiting and are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_ride_through_a_killed_and_restarted_master() {
    let dir = std::env::temp_dir().join(format!("leasehold-waiters-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut master, addr) = serve(&dir, "127.0.0.1:0");
    let (mut queue, holdings) = queue_behind_a_holder(&addr).await;

    master.kill().expect("SIGKILL the master");
    master.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut master, _) = serve(&dir, &addr);
    for waiter in &mut queue.waiters {
        assert!(waiter.running(), "a waiter gave up at the fail-over");
    }
    queue.let_go_and_see_every_waiter_served(holdings).await;
    let _ = master.kill();
    let _ = master.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

// LOCK-15, FO-4, CELL-6: a cell's master stops (SIGSTOP: it neither
// answers nor closes its connections, as a master cut off from everyone
// looks); another member takes over, and the waiting processes keep
// waiting and are served by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_ride_through_a_cells_master_stopped() {
    let cell = Cell::start("waiters");
    let master = cell.master_other_than(None).await;
    let (mut queue, holdings) = queue_behind_a_holder(&cell.addrs()).await;

    cell.signal(master, "-STOP");
    let next = cell.master_other_than(Some(master)).await;
    assert_ne!(next, master);
    for waiter in &mut queue.waiters {
        assert!(waiter.running(), "a waiter gave up at the master change");
    }
    queue.let_go_and_see_every_waiter_served(holdings).await;
    cell.signal(master, "-CONT");
}

// LOCK-15, FO-4, CELL-6: a cell's master killed with SIGKILL; another
// member takes over, and the waiting processes are served by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_ride_through_a_cells_master_killed() {
    let mut cell = Cell::start("waiters-kill");
    let master = cell.master_other_than(None).await;
    let (mut queue, holdings) = queue_behind_a_holder(&cell.addrs()).await;

    cell.kill(master);
    let next = cell.master_other_than(Some(master)).await;
    assert_ne!(next, master);
    for waiter in &mut queue.waiters {
        assert!(waiter.running(), "a waiter gave up at the master change");
    }
    queue.let_go_and_see_every_waiter_served(holdings).await;
}
