//! Clients that never read their replies, against a `leasehold serve`
//! process whose memory is read from outside (`/proc/PID/status`): what
//! one connection can make the master hold is bounded in bytes (`CONN-9`),
//! and given back to the system once it leaves (`CONN-12`).

mod common;

use std::time::Duration;

use common::spawn_serve;
use leasehold_protocol::{event_mask, KeepAlive, Request};
use leasehold_tests::raw::RawConnection;

/// The master's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The most the master's memory reaches over `span`, sampled.
async fn peak_rss(pid: u32, span: Duration) -> u64 {
    let until = tokio::time::Instant::now() + span;
    let mut peak = rss(pid);
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(rss(pid));
    }
    peak
}

/// Connections each attack uses.
const CONNECTIONS: u64 = 8;

/// Growth allowed: each connection's reply budget (8 MiB by default) and
/// socket buffers, and the master's own bookkeeping; far below what
/// unbounded queues took (gigabytes).
const ALLOWED_GROWTH: u64 = CONNECTIONS * (10 << 20) + (32 << 20);

struct Master {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn master() -> Master {
    let (child, addr) = spawn_serve(&["--listen", "127.0.0.1:0", "--in-memory"]);
    Master {
        child,
        addr: addr.parse().unwrap(),
    }
}

// CONN-9
#[tokio::test]
async fn pipelined_large_reads_never_read_do_not_grow_the_master_past_its_budget() {
    let master = master();
    let (mut writer, _) = RawConnection::open(master.addr).await;
    writer.put("big", &"x".repeat(256 * 1024)).await;
    let get = || Request::Get {
        key: "big".into(),
        stat_only: false,
    };
    assert_bounded_growth(&master, 3_000, get).await;
}

/// Opens [`CONNECTIONS`] connections, sends `count` requests made by
/// `request` on each without reading a reply, and checks the master's
/// growth over the following seconds.
async fn assert_bounded_growth(master: &Master, count: usize, request: impl Fn() -> Request) {
    let before = rss(master.child.id());
    let mut greedy = Vec::new();
    for _ in 0..CONNECTIONS {
        let (mut conn, _) = RawConnection::open(master.addr).await;
        for _ in 0..count {
            conn.request(request()).await;
        }
        greedy.push(conn);
    }
    let peak = peak_rss(master.child.id(), Duration::from_secs(3)).await;
    let growth = peak.saturating_sub(before);
    assert!(
        growth < ALLOWED_GROWTH,
        "the master grew by {} MiB",
        growth >> 20
    );
    // Gone, they leave nothing behind: what they made the master hold is
    // handed back to the system, not kept for the master's lifetime.
    drop(greedy);
    let settled = settled_rss(master.child.id(), before + ALLOWED_RESIDUE).await;
    assert!(
        settled <= before + ALLOWED_RESIDUE,
        "{} MiB of the master's {} MiB peak still held after the attackers left (before: {} MiB)",
        settled.saturating_sub(before) >> 20,
        peak >> 20,
        before >> 20
    );
}

/// What may stay after the attackers leave: the allocator's own slack.
const ALLOWED_RESIDUE: u64 = 16 << 20;

/// The master's memory once it falls to `target`, or after a wait far
/// longer than the master's trim delay (2 s), whichever comes first.
async fn settled_rss(pid: u32, target: u64) -> u64 {
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = rss(pid);
        if now <= target || tokio::time::Instant::now() >= until {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// CONN-9, EV-3
#[tokio::test]
async fn pipelined_keepalives_never_read_do_not_grow_the_master_past_its_budget() {
    let master = master();
    let (mut owner, _) = RawConnection::open(master.addr).await;
    let session = owner.create_session(Duration::from_secs(60)).await;
    owner.subscribe(session, "", true, event_mask::ALL).await;
    // A full queue of events with long keys: every KeepAlive reply would
    // carry half a frame of them.
    let long = "k".repeat(400);
    for i in 0..1_000 {
        owner.put(&format!("{long}/{i}"), "v").await;
    }
    let keepalive = || {
        Request::KeepAlive(KeepAlive {
            session,
            epoch: 1,
            acked_seq: 0,
            hold: false,
        })
    };
    assert_bounded_growth(&master, 5_000, keepalive).await;
}
