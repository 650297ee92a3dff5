//! `leasehold locks` and `leasehold status`, run as an operator runs them
//! (SPEC `LOCK-16`, `OPS-4`).

mod common;

use std::time::Duration;

use common::{stdout, Running, Serve};

const SOON: Duration = Duration::from_secs(10);

/// Runs `leasehold ARGS` until its stdout satisfies `done`, within a
/// deadline far beyond what a loaded machine needs.
fn until(serve: &Serve, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + SOON;
    loop {
        let out = serve.run(args);
        assert!(out.status.success(), "{out:?}");
        let text = stdout(&out);
        if done(&text) {
            return text;
        }
        assert!(std::time::Instant::now() < deadline, "never: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// LOCK-16: `locks` prints each holder with its session's name and time
// held, and how many wait behind it, the first by name.
#[test]
fn locks_prints_the_holder_time_held_and_who_waits_first() {
    let serve = Serve::start();
    let holder = Running::start(&serve.addr, &["lock", "jobs/a", "--", "sleep", "30"]);
    holder.stderr_until("holding jobs/a", SOON);
    let _waiter = Running::start(
        &serve.addr,
        &["lock", "--name", "second", "jobs/a", "--", "true"],
    );
    let table = until(&serve, &["locks", "jobs/"], |t| t.contains("first: second"));
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["KEY", "MODE", "SESSION", "NAME", "GEN", "HELD", "WAITERS", "DELAY"]
    );
    let row = lines.next().expect("a row for jobs/a");
    assert!(row.starts_with("jobs/a  exclusive  "), "{row}");
    assert!(
        row.contains("lock jobs/a by ") && row.contains(&format!(":{}", holder.id())),
        "the holder's session name: {row}"
    );
    assert!(row.contains("1 (first: second)"), "{row}");
    assert!(row.trim_end().ends_with('-'), "no lock-delay: {row}");
    assert_eq!(lines.next(), None);

    let json = until(&serve, &["--json", "locks", "jobs/"], |t| !t.is_empty());
    let lock: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(lock["key"], "jobs/a");
    assert_eq!(lock["holders"][0]["mode"], "exclusive");
    assert!(lock["holders"][0]["held_ms"].as_u64().is_some(), "{lock}");
    assert_eq!(lock["waiters"][0]["name"], "second");
    assert_eq!(lock["waiters_total"], 1);
}

// LOCK-16, LOCK-6: a lock whose holder's session ended with lock-delay is
// listed with no holder and the lock-delay left (Consul #2767).
#[test]
fn locks_shows_a_lock_in_lock_delay_with_no_holder() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &[
            "lock",
            "jobs/d",
            "--lease",
            "1s",
            "--lock-delay",
            "20s",
            "--",
            "sleep",
            "30",
        ],
    );
    holder.stderr_until("holding jobs/d", SOON);
    let _ = std::process::Command::new("kill")
        .args(["-9", &holder.id().to_string()])
        .status();
    holder.wait(SOON);
    let json = until(&serve, &["--json", "locks"], |t| {
        t.contains("\"holders\":[]")
    });
    let lock: serde_json::Value = serde_json::from_str(&json).unwrap();
    let left = lock["delay_remaining_ms"].as_u64().expect("lock-delay");
    assert!(left > 0 && left <= 20_000, "{lock}");
    let table = stdout(&serve.run(&["locks"]));
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("a row")
        .split_whitespace()
        .collect();
    // Its transient node went with its holder: generation 0.
    assert_eq!(
        row[..7],
        ["jobs/d", "-", "-", "-", "0", "-", "0"],
        "{table}"
    );
    assert!(row[7].ends_with('s'), "the lock-delay left: {table}");
}

// LOCK-16: nothing locked below a prefix is said on stderr, and is no
// error.
#[test]
fn locks_below_a_prefix_nobody_locks_says_so() {
    let serve = Serve::start();
    let out = serve.run(&["locks", "nothing/"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no lock at or below 'nothing/'"), "{said}");
}

// LOCK-16: with no prefix, the sentence names no empty prefix.
#[test]
fn locks_on_a_master_with_no_lock_says_so_plainly() {
    let serve = Serve::start();
    let out = serve.run(&["locks"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("no lock is held, awaited or in lock-delay"),
        "{said}"
    );
    assert!(!said.contains("''"), "{said}");
}

// OPS-4: `status` prints what the master serves, as text and as JSON.
#[test]
fn status_prints_sessions_locks_and_waiters() {
    let serve = Serve::start();
    let holder = Running::start(&serve.addr, &["lock", "jobs/a", "--", "sleep", "30"]);
    holder.stderr_until("holding jobs/a", SOON);
    let _waiter = Running::start(&serve.addr, &["lock", "jobs/a", "--", "true"]);
    let text = until(&serve, &["status"], |t| t.contains("1 waiting"));
    assert!(text.contains("sessions  2 ("), "{text}");
    assert!(
        text.contains("locks     1 held (1 holdings), 1 waiting, 0 in lock-delay"),
        "{text}"
    );
    assert!(text.contains("epoch     "), "{text}");
    let json = stdout(&serve.run(&["--json", "status"]));
    let status: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status["sessions"], 2);
    assert_eq!(status["locks_held"], 1);
    assert_eq!(status["waiters"], 1);
    assert_eq!(status["recently_ended"]["expired"], 0);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
}

// `locks` and `status` at an address nobody serves exit 69, as every
// client command does.
#[test]
fn locks_and_status_with_no_master_exit_69() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    for command in ["locks", "status"] {
        let out = std::process::Command::new(common::BIN)
            .args(["--addr", &addr, "--request-timeout", "2s", command])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(69), "{command}: {out:?}");
    }
}

// OPS-6: `snapshot save` writes a whole snapshot and says its index;
// `snapshot status` verifies it; `snapshot restore` makes a data
// directory a master serves it from; damage, a missing file and a
// directory in use are refused with their own exit statuses.
#[test]
fn snapshot_save_status_and_restore_round_trip() {
    let serve = Serve::start();
    let dir = std::env::temp_dir().join(format!("leasehold-cli-snapshot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let put = serve.run(&["put", "svc/db", "10.0.0.5"]);
    assert!(put.status.success(), "{put:?}");
    let file = dir.join("backup.snap");
    let file = file.to_str().unwrap();
    let saved = serve.run(&["snapshot", "save", file]);
    assert!(saved.status.success(), "{saved:?}");
    assert!(
        stdout(&saved).starts_with(&format!("saved {file} (")),
        "{saved:?}"
    );
    assert!(!dir.join(".backup.snap.partial").exists());
    // It holds every session's secret: its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    let status = serve.run(&["--json", "snapshot", "status", file]);
    assert!(status.status.success(), "{status:?}");
    let summary: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert_eq!(summary["nodes"], 1);

    let data = dir.join("restored");
    let data = data.to_str().unwrap();
    let restored = serve.run(&["snapshot", "restore", file, "--data-dir", data]);
    assert!(restored.status.success(), "{restored:?}");
    let mode = std::fs::metadata(data).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let again = serve.run(&["snapshot", "restore", file, "--data-dir", data]);
    assert_eq!(again.status.code(), Some(73), "{again:?}");
    let (mut child, addr) = common::spawn_serve(&["--listen", "127.0.0.1:0", "--data-dir", data]);
    let got = std::process::Command::new(common::BIN)
        .args(["--addr", &addr, "get", "svc/db"])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(stdout(&got), "10.0.0.5", "{got:?}");

    let whole = std::fs::read(file).unwrap();
    let cut = dir.join("cut.snap");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let damaged = serve.run(&["snapshot", "status", cut.to_str().unwrap()]);
    assert_eq!(damaged.status.code(), Some(65), "{damaged:?}");
    let said = String::from_utf8_lossy(&damaged.stderr);
    assert!(said.contains("not a whole Leasehold snapshot"), "{said}");
    let missing = serve.run(&["snapshot", "status", "no/such/file"]);
    assert_eq!(missing.status.code(), Some(66), "{missing:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

// OPS-6: `snapshot restore --cell ID=ADDR --node ID` makes a new cell's
// first member, which serves the backup as a cell of one; a --cell that
// names more than that member is refused (exit 64), as founding several
// members each on a copy would make separate cells.
#[test]
fn snapshot_restore_makes_a_new_cells_first_member() {
    let serve = Serve::start();
    let dir = std::env::temp_dir().join(format!(
        "leasehold-cli-snapshot-cell-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let put = serve.run(&["put", "svc/db", "10.0.0.5"]);
    assert!(put.status.success(), "{put:?}");
    let file = dir.join("backup.snap");
    let file = file.to_str().unwrap();
    let saved = serve.run(&["snapshot", "save", file]);
    assert!(saved.status.success(), "{saved:?}");
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    let data = dir.join("member-1");
    let data = data.to_str().unwrap();
    let one = format!("1={addr}");
    let two = format!("1={addr},2=127.0.0.1:1");
    let both = serve.run(&[
        "snapshot",
        "restore",
        file,
        "--data-dir",
        data,
        "--cell",
        &two,
        "--node",
        "1",
    ]);
    assert_eq!(both.status.code(), Some(64), "{both:?}");
    assert!(!std::path::Path::new(data).exists());
    let restored = serve.run(&[
        "snapshot",
        "restore",
        file,
        "--data-dir",
        data,
        "--cell",
        &one,
        "--node",
        "1",
    ]);
    assert!(restored.status.success(), "{restored:?}");
    assert!(stdout(&restored).contains("--cell 1="), "{restored:?}");
    let (mut child, _) = common::spawn_serve(&["--cell", &one, "--node", "1", "--data-dir", data]);
    let got = std::process::Command::new(common::BIN)
        .args(["--addr", &addr, "get", "svc/db"])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(stdout(&got), "10.0.0.5", "{got:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
