//! `leasehold lock`, `elect`, `leader`, `semaphore` and `watch` against a
//! `leasehold serve` child process.

mod common;

use std::time::Duration;

use common::{stdout, Running, Serve};
use leasehold_tests::proxy::{Link, Proxy};

const SOON: Duration = Duration::from_secs(10);

// LOCK-7: the command runs with the sequencer, and its status is ours.
#[test]
fn lock_runs_the_command_with_its_sequencer_and_exits_with_its_status() {
    let serve = Serve::start();
    let out = serve.run(&[
        "lock",
        "jobs/report",
        "--",
        "sh",
        "-c",
        "echo $LEASEHOLD_SEQUENCER; leasehold check-sequencer $LEASEHOLD_SEQUENCER; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let printed = stdout(&out);
    let mut lines = printed.lines();
    let sequencer = lines.next().expect("the sequencer");
    assert!(sequencer.len() > 16, "{sequencer}");
    assert_eq!(lines.next(), Some("valid"), "valid while held");
    // Released when the command ended.
    let after = serve.run(&["check-sequencer", sequencer]);
    assert_eq!(after.status.code(), Some(1));
}

// LOCK-12: locks and elections taken by the CLI leave no nodes behind,
// unless `lock --value` wrote one to keep.
#[test]
fn lock_and_elect_leave_no_node_behind_unless_lock_wrote_a_value() {
    let serve = Serve::start();
    let ls = || stdout(&serve.run(&["ls", "--recursive", "/"]));
    let held = serve.run(&["lock", "jobs/once", "--", "leasehold", "ls", "jobs"]);
    assert!(held.status.success(), "{held:?}");
    assert_eq!(stdout(&held), "jobs/once", "the node exists while held");
    let led = serve.run(&["elect", "svc/leader", "--value", "me", "--", "true"]);
    assert!(led.status.success(), "{led:?}");
    assert_eq!(ls(), "", "nothing is left after the lock and the election");
    let kept = serve.run(&["lock", "jobs/kept", "--value", "v", "--", "true"]);
    assert!(kept.status.success(), "{kept:?}");
    assert_eq!(ls(), "jobs/kept");
    assert_eq!(stdout(&serve.run(&["get", "jobs/kept"])), "v");
}

// LOCK-3
#[test]
fn lock_gives_up_after_its_timeout_while_another_holds() {
    let serve = Serve::start();
    let holder = Running::start(&serve.addr, &["lock", "k", "--", "sleep", "30"]);
    holder.stderr_until("holding k", SOON);
    let out = serve.run(&["lock", "k", "--timeout", "200ms", "--", "true"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("held"),
        "{out:?}"
    );
}

// EV-6, LOCK-8: a lock taken away stops the command with SIGTERM.
#[test]
fn a_lock_taken_away_stops_the_command_with_sigterm() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &["lock", "k", "--", "sh", "-c", "echo started; exec sleep 30"],
    );
    assert_eq!(holder.stdout_line(SOON), "started");
    assert!(serve.run(&["delete", "k"]).status.success());
    holder.stderr_until("may be lost", SOON);
    assert_eq!(holder.wait(SOON).code(), Some(128 + 15));
}

// A command that ignores SIGTERM gets SIGKILL after the kill grace.
#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &[
            "lock",
            "k",
            "--kill-grace",
            "300ms",
            "--",
            "sh",
            "-c",
            "trap '' TERM; echo started; while true; do sleep 0.05; done",
        ],
    );
    assert_eq!(holder.stdout_line(SOON), "started");
    assert!(serve.run(&["delete", "k"]).status.success());
    assert_eq!(holder.wait(SOON).code(), Some(128 + 9));
}

/// A `lock` through a relay that will hold its traffic; returns once CMD
/// runs.
fn lock_through(proxy: &Proxy, stop_on: &str) -> Running {
    let holder = Running::start(
        &proxy.addr.to_string(),
        &[
            "lock",
            "k",
            // Long enough that, once the relay holds its KeepAlive, the
            // master's lease outlives the client's by seconds: time for the
            // test to see the jeopardy and let the reply through, however
            // loaded the machine.
            "--lease",
            "4s",
            "--grace",
            "10s",
            "--stop-on",
            stop_on,
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 30",
        ],
    );
    assert_eq!(holder.stdout_line(SOON), "started");
    holder
}

/// Holds the relay's traffic until the holder's session is in jeopardy,
/// then lets it through; the master kept the session meanwhile.
fn jeopardy_then_recovery(proxy: &Proxy, holder: &Running) {
    std::thread::sleep(Duration::from_millis(300));
    proxy.set(Link::Hold);
    holder.stderr_until("session jeopardy", SOON);
    proxy.set(Link::Pass);
}

// LOCK-10, CS-2: by default the command stops at jeopardy.
#[tokio::test(flavor = "multi_thread")]
async fn by_default_the_command_stops_at_jeopardy() {
    let serve = Serve::start();
    let proxy = Proxy::start(serve.addr.parse().unwrap()).await;
    let mut holder = lock_through(&proxy, "jeopardy");
    jeopardy_then_recovery(&proxy, &holder);
    holder.stderr_until("may be lost", SOON);
    assert_eq!(holder.wait(SOON).code(), Some(128 + 15));
}

// CS-4: with --stop-on expiry the command survives a jeopardy that ends.
#[tokio::test(flavor = "multi_thread")]
async fn with_stop_on_expiry_the_command_survives_a_recovered_jeopardy() {
    let serve = Serve::start();
    let proxy = Proxy::start(serve.addr.parse().unwrap()).await;
    let mut holder = lock_through(&proxy, "expiry");
    jeopardy_then_recovery(&proxy, &holder);
    holder.stderr_until("session normal", SOON);
    std::thread::sleep(Duration::from_millis(500));
    assert!(holder.running(), "the command still runs");
}

// ELECT-1, ELECT-2
#[test]
fn elect_leads_while_the_command_runs_and_leader_prints_its_value() {
    let serve = Serve::start();
    let out = serve.run(&[
        "elect",
        "svc/leader",
        "--value",
        "10.0.0.7:3306",
        "--",
        "sh",
        "-c",
        "leasehold leader svc/leader && test -n \"$LEASEHOLD_SEQUENCER\"",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "10.0.0.7:3306");
    // Resigned when the command ended.
    let none = serve.run(&["leader", "svc/leader"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no leader"));
}

// SEM-2: two commands on a semaphore of one never overlap.
#[test]
fn semaphore_runs_commands_within_the_limit() {
    let serve = Serve::start();
    let dir = std::env::temp_dir().join(format!("leasehold-sem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let flag = dir.join("busy");
    let script = format!(
        "if [ -e {f} ]; then echo overlap; fi; touch {f}; sleep 0.3; rm {f}; echo done",
        f = flag.display()
    );
    let mut runs: Vec<Running> = (0..2)
        .map(|_| {
            Running::start(
                &serve.addr,
                &[
                    "semaphore",
                    "sem",
                    "--limit",
                    "1",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )
        })
        .collect();
    for run in &mut runs {
        assert!(run.wait(SOON).success());
        assert_eq!(run.stdout_line(SOON), "done");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// EV-5: watch prints one line per change.
#[test]
fn watch_prints_one_line_per_change() {
    let serve = Serve::start();
    let watcher = Running::start(&serve.addr, &["watch", "svc"]);
    watcher.stderr_until("watching svc", SOON);
    assert!(serve.run(&["put", "svc/db", "a"]).status.success());
    assert!(serve.run(&["put", "svc/db", "b"]).status.success());
    assert!(serve.run(&["delete", "svc/db"]).status.success());
    assert!(serve.run(&["put", "other", "x"]).status.success());
    assert_eq!(watcher.stdout_line(SOON), "created svc/db");
    assert_eq!(watcher.stdout_line(SOON), "modified svc/db");
    assert_eq!(watcher.stdout_line(SOON), "deleted svc/db");
    assert!(watcher
        .stdout
        .recv_timeout(Duration::from_millis(300))
        .is_err());
}

// What CMD started stops with it: the whole process group is signalled.
#[test]
fn a_lost_lock_stops_what_the_command_started_too() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &[
            "lock",
            "k",
            "--",
            "sh",
            "-c",
            "echo started; sleep 37.125; echo done",
        ],
    );
    assert_eq!(holder.stdout_line(SOON), "started");
    assert!(common::process_running("sleep 37.125"));
    assert!(serve.run(&["delete", "k"]).status.success());
    holder.wait(SOON);
    // The group is signalled; the grandchild may take a moment to go.
    assert!(
        stops_within("sleep 37.125", SOON),
        "the grandchild lives on"
    );
}

// Stopping the supervisor stops the command first, so it never runs
// unsupervised.
#[test]
fn sigterm_to_leasehold_stops_the_command_and_releases_the_lock() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &[
            "lock",
            "k",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 38.125",
        ],
    );
    assert_eq!(holder.stdout_line(SOON), "started");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &holder.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    holder.wait(SOON);
    assert!(stops_within("sleep 38.125", SOON), "the command lives on");
    let next = serve.run(&["lock", "k", "--timeout", "1s", "--", "true"]);
    assert!(next.status.success(), "the lock was released: {next:?}");
}

/// Whether no process whose command line holds `pattern` runs, by
/// `within` from now.
fn stops_within(pattern: &str, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while common::process_running(pattern) {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Whether process `pid` is gone: no such process, or a zombie waiting
/// for a parent that will never read its status.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The pids of the command and of the child it started, as it printed them.
fn pids(line: &str) -> Vec<u32> {
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(pids.len(), 2, "{line}");
    pids
}

fn all_gone_within(pids: &[u32], within: Duration) {
    let deadline = std::time::Instant::now() + within;
    while !pids.iter().all(|p| gone(*p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the command outlived its supervisor: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// The command dies with its supervisor, however the supervisor dies: a
// SIGKILL leaves it no chance to stop the command, so the command and what
// it started must go without its help.
#[test]
fn a_supervisor_killed_with_sigkill_takes_the_command_and_its_children_with_it() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &[
            "lock",
            "k",
            "--",
            "sh",
            "-c",
            "sleep 600 & echo $$ $!; wait",
        ],
    );
    let pids = pids(&holder.stdout_line(SOON));
    assert!(pids.iter().all(|p| !gone(*p)), "running: {pids:?}");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &holder.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    holder.wait(SOON);
    all_gone_within(&pids, SOON);
}

// What the command started in the background does not outlive the holding
// either: the lock is released when the supervisor exits.
#[test]
fn a_command_that_exits_leaves_nothing_it_started_running() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &["lock", "k", "--", "sh", "-c", "sleep 600 & echo $$ $!"],
    );
    let pids = pids(&holder.stdout_line(SOON));
    assert!(holder.wait(SOON).success());
    all_gone_within(&pids, SOON);
}

// `lock --try` runs CMD only if the lock is free now; held, it exits 75
// (EX_TEMPFAIL) without running it, as does a `--timeout` that runs out.
#[test]
fn lock_try_runs_the_command_only_if_the_lock_is_free_now() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &[
            "lock",
            "k",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 39.125",
        ],
    );
    assert_eq!(holder.stdout_line(SOON), "started");
    let tried = serve.run(&["lock", "k", "--try", "--", "echo", "ran"]);
    assert_eq!(tried.status.code(), Some(75), "{tried:?}");
    assert!(tried.stdout.is_empty(), "the command ran: {tried:?}");
    assert!(
        String::from_utf8_lossy(&tried.stderr).contains("not run"),
        "{tried:?}"
    );
    let waited = serve.run(&["lock", "k", "--timeout", "200ms", "--", "echo", "ran"]);
    assert_eq!(waited.status.code(), Some(75), "{waited:?}");
    assert!(waited.stdout.is_empty(), "the command ran: {waited:?}");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &holder.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    holder.wait(SOON);
    let free = serve.run(&["lock", "k", "--try", "--", "echo", "ran"]);
    assert!(free.status.success(), "{free:?}");
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "ran");
}

// A command that cannot start gives what was taken for it back at once,
// with no lock-delay, and exits as a shell does: 127 for a command not
// found, 126 for one that cannot be run.
#[test]
fn a_command_that_cannot_start_gives_the_lock_back_at_once_and_exits_as_a_shell_does() {
    let serve = Serve::start();
    let missing = serve.run(&[
        "lock",
        "jobs/typo",
        "--lease",
        "10s",
        "--lock-delay",
        "15s",
        "--",
        "./no-such-script.sh",
    ]);
    assert_eq!(missing.status.code(), Some(127), "{missing:?}");
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot run ./no-such-script.sh"),
        "{missing:?}"
    );
    let next = serve.run(&["lock", "jobs/typo", "--try", "--", "true"]);
    assert!(next.status.success(), "the lock is free at once: {next:?}");

    let not_runnable = serve.run(&["lock", "jobs/typo", "--", "/etc/passwd"]);
    assert_eq!(not_runnable.status.code(), Some(126), "{not_runnable:?}");
    let next = serve.run(&["lock", "jobs/typo", "--try", "--", "true"]);
    assert!(next.status.success(), "{next:?}");

    let daemon = serve.run(&["elect", "svc/x", "--value", "me", "--", "./no-such-daemon"]);
    assert_eq!(daemon.status.code(), Some(127), "{daemon:?}");
    let leader = serve.run(&["leader", "svc/x"]);
    assert_eq!(leader.status.code(), Some(1), "nobody leads: {leader:?}");

    let slot = serve.run(&[
        "semaphore",
        "pool",
        "--limit",
        "1",
        "--",
        "./no-such-worker",
    ]);
    assert_eq!(slot.status.code(), Some(127), "{slot:?}");
    let next = serve.run(&["semaphore", "pool", "--limit", "1", "--", "true"]);
    assert!(next.status.success(), "the slot is free at once: {next:?}");
}

/// What `get --stat KEY` prints, once `until` holds of it.
fn stat_until(serve: &Serve, key: &str, until: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + SOON;
    loop {
        let out = serve.run(&["get", "--stat", key]);
        let printed = String::from_utf8_lossy(&out.stdout).to_string();
        if until(&printed) {
            return printed;
        }
        assert!(std::time::Instant::now() < deadline, "{out:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// LOCK-14, SES-11: who holds a lock and who waits for it, and what a
// session holds, are one command away, each session named after the
// command that made it, its host and its pid.
#[test]
fn get_stat_shows_holders_and_waiters_and_session_info_what_a_session_holds() {
    let serve = Serve::start();
    let holder = Running::start(&serve.addr, &["lock", "jobs/a", "--", "sleep", "30"]);
    holder.stderr_until("holding jobs/a", SOON);
    let waiter = Running::start(&serve.addr, &["lock", "jobs/a", "--shared", "--", "true"]);
    let stat = stat_until(&serve, "jobs/a", |s| s.contains("waiter "));
    let named = |line: &str, pid: u32| {
        line.contains("\"lock jobs/a by ") && line.ends_with(&format!(":{pid}\""))
    };
    let holder_line = stat
        .lines()
        .find(|l| l.starts_with("holder "))
        .unwrap_or_else(|| panic!("{stat}"));
    assert!(holder_line.contains(" exclusive "), "{holder_line}");
    assert!(named(holder_line, holder.id()), "{holder_line}");
    let waiter_line = stat.lines().find(|l| l.starts_with("waiter ")).unwrap();
    assert!(waiter_line.contains(" shared "), "{waiter_line}");
    assert!(named(waiter_line, waiter.id()), "{waiter_line}");
    let id = holder_line.split_whitespace().nth(1).unwrap();
    let info = serve.run(&["session", "info", id]);
    assert!(info.status.success(), "{info:?}");
    assert!(
        stdout(&info).lines().any(|l| l == "holds jobs/a exclusive"),
        "{info:?}"
    );
}

// LOCK-14, LOCK-6: a lock in lock-delay is not free, though its node went
// with its holder's session and nobody holds it: `get --stat` says how
// long the lock-delay lasts still (Consul #2767).
#[test]
fn get_stat_shows_a_lock_delay_that_outlives_its_node() {
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
    // Its session ends with its lease, not with a close.
    let _ = std::process::Command::new("kill")
        .args(["-9", &holder.id().to_string()])
        .status();
    holder.wait(SOON);
    let stat = stat_until(&serve, "jobs/d", |s| s.contains("lock-delay"));
    assert!(!stat.contains("holder "), "{stat}");
    let ms: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("lock-delay "))
        .and_then(|l| l.trim_end_matches(" ms").parse().ok())
        .unwrap_or_else(|| panic!("{stat}"));
    assert!(ms > 0 && ms <= 20_000, "{stat}");
}

// On a terminal, `lock` says what it waits for and behind whom while it
// waits (a script reads nothing but the outcome).
#[test]
fn lock_on_a_terminal_says_behind_whom_it_waits() {
    let serve = Serve::start();
    let holder = Running::start(&serve.addr, &["lock", "jobs/w", "--", "sleep", "3"]);
    holder.stderr_until("holding jobs/w", SOON);
    // `script` gives the waiter a terminal of its own.
    let waiter = format!(
        "{} --addr {} lock jobs/w -- echo ran",
        common::BIN,
        serve.addr
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &waiter, "/dev/null"])
        .output()
        .expect("run script(1)");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("waiting for jobs/w: held by lock jobs/w by ")
            && said.contains(&format!(":{}, 0 ahead", holder.id())),
        "{said}"
    );
    assert!(said.contains("ran"), "{said}");
    // Without a terminal, nothing but the outcome, though it waits too.
    let again = Running::start(&serve.addr, &["lock", "jobs/w", "--", "sleep", "1"]);
    again.stderr_until("holding jobs/w", SOON);
    let quiet = serve.run(&["lock", "jobs/w", "--", "true"]);
    assert!(quiet.status.success(), "{quiet:?}");
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("waiting"));
}

// Ctrl-C on `lock` stops CMD and exits as a shell reports a process
// SIGINT ended: 130, whatever CMD made of the SIGTERM it got.
#[test]
fn lock_interrupted_exits_130() {
    let serve = Serve::start();
    let mut holder = Running::start(
        &serve.addr,
        &[
            "lock",
            "jobs/int",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 30",
        ],
    );
    assert_eq!(holder.stdout_line(SOON), "started");
    let _ = std::process::Command::new("kill")
        .args(["-INT", &holder.id().to_string()])
        .status();
    assert_eq!(holder.wait(SOON).code(), Some(130));
}

// `watch --from-index N` first prints what changed after index N, as it
// is now, then every change from then on.
#[test]
fn watch_from_an_index_prints_what_changed_since_then_what_changes() {
    let serve = Serve::start();
    let before = stdout(&serve.run(&["put", "svc/old", "1"]));
    let since: u64 = before.parse().unwrap();
    assert!(serve.run(&["put", "svc/new", "1"]).status.success());
    assert!(serve.run(&["put", "svc/old", "2"]).status.success());
    assert!(serve.run(&["put", "other", "1"]).status.success());
    let watcher = Running::start(
        &serve.addr,
        &["watch", "svc", "--from-index", &since.to_string()],
    );
    watcher.stderr_until("watching svc", SOON);
    let first: Vec<String> = (0..2).map(|_| watcher.stdout_line(SOON)).collect();
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(sorted, ["created svc/new", "modified svc/old"], "{first:?}");
    assert!(serve.run(&["put", "svc/later", "1"]).status.success());
    assert_eq!(watcher.stdout_line(SOON), "created svc/later");
}

// `leader --follow` prints the leader now and each change, `-` when
// nobody leads.
#[test]
fn leader_follow_prints_each_change_of_leader() {
    let serve = Serve::start();
    let follower = Running::start(&serve.addr, &["leader", "svc/db", "--follow"]);
    assert_eq!(follower.stdout_line(SOON), "-");
    let first = Running::start(
        &serve.addr,
        &["elect", "svc/db", "--value", "10.0.0.1", "--", "sleep", "1"],
    );
    assert_eq!(follower.stdout_line(SOON), "10.0.0.1");
    // Its command ends, and it resigns.
    let mut first = first;
    assert!(first.wait(SOON).success());
    let line = follower.stdout_line(SOON);
    assert_eq!(line, "-", "nobody leads once the leader is gone");
}

// `put --ephemeral TOKEN` binds the node to that session: it goes when
// the session ends.
#[test]
fn put_ephemeral_binds_the_node_to_a_session() {
    let serve = Serve::start();
    let token = stdout(&serve.run(&["session", "create", "--lease", "30s"]));
    let put = serve.run(&["put", "svc/me", "here", "--ephemeral", &token]);
    assert!(put.status.success(), "{put:?}");
    let stat = stdout(&serve.run(&["get", "--stat", "svc/me"]));
    let id = token.split(':').next().unwrap();
    assert!(stat.contains(&format!("ephemeral_owner={id}")), "{stat}");
    assert!(serve.run(&["session", "destroy", &token]).status.success());
    assert_eq!(serve.run(&["get", "svc/me"]).status.code(), Some(1));
}

// `watch` offers only the flags it uses: no lock-delay, behaviour or
// checks for a session that only listens.
#[test]
fn watch_offers_only_the_flags_it_uses() {
    let help = std::process::Command::new(common::BIN)
        .args(["watch", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    for unused in ["--lock-delay", "--behavior", "--check"] {
        assert!(!text.contains(unused), "{unused} in {text}");
    }
    assert!(text.contains("--from-index"), "{text}");
}
