//! Every scenario runs end to end in a tiny configuration against a
//! `leasehold serve` of its own (and `lock` and `failover` against a cell
//! of three), so the benchmark tool cannot rot. The figures are not judged
//! (the machines are shared and noisy), only that each scenario completes
//! and reports what it should.
//!
//! The master binary is the `leasehold` Cargo builds beside this one:
//! `cargo test --workspace` builds it.

use std::process::Command;

use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold-bench"))
        .args(args)
        .arg("--json")
        .output()
        .expect("run leasehold-bench");
    assert!(
        output.status.success(),
        "leasehold-bench {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON object on stdout")
}

/// The Leasehold figure called `name`.
fn figure(report: &Value, name: &str) -> f64 {
    let system = &report["systems"][0];
    assert_eq!(system["system"], "leasehold");
    system["figures"]
        .as_array()
        .expect("figures")
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no figure {name:?} in {report}"))["value"]
        .as_f64()
        .expect("a number")
}

#[test]
fn sessions_holds_every_session_without_a_spurious_expiration() {
    let report = bench(&[
        "sessions",
        "--sessions",
        "40",
        "--connections",
        "4",
        // A lease a loaded machine cannot make the bench miss, and a run
        // long enough to renew each at least once.
        "--lease",
        "3s",
        "--duration",
        "3s",
    ]);
    assert_eq!(report["scenario"], "sessions");
    assert_eq!(figure(&report, "sessions held"), 40.0);
    assert_eq!(figure(&report, "spurious expirations"), 0.0);
    assert!(figure(&report, "KeepAlive replies/s") > 0.0);
    assert!(figure(&report, "master bytes per session").is_finite());
}

#[test]
fn sessions_renewed_together_hold_without_a_spurious_expiration() {
    let report = bench(&[
        "sessions",
        "--sessions",
        "60",
        "--connections",
        "3",
        "--keepalive-all",
        "--lease",
        "3s",
        "--duration",
        "3s",
    ]);
    assert_eq!(report["parameters"]["keepalive_all"], true);
    assert_eq!(figure(&report, "sessions held"), 60.0);
    assert_eq!(figure(&report, "spurious expirations"), 0.0);
    assert!(figure(&report, "KeepAlive replies/s") > 0.0);
}

#[test]
fn lock_cycles_a_contended_lock() {
    let report = bench(&[
        "lock",
        "--clients",
        "3",
        "--keys",
        "1",
        "--duration",
        "300ms",
    ]);
    assert!(figure(&report, "cycles/s, 3 client(s), 1 key(s)") > 0.0);
    assert!(figure(&report, "p99, 3 client(s), 1 key(s)") > 0.0);
    assert!(report["limits"]["fsync_ms"].as_f64().unwrap() > 0.0);
    assert!(report["limits"]["fsync_probes"].as_u64().unwrap() > 0);
}

#[test]
fn kv_one_client_figures_have_limits_and_chart_as_svg() {
    let dir = std::env::temp_dir().join(format!("leasehold-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("kv.json");
    let report = bench(&[
        "kv",
        "--clients",
        "1",
        "--duration",
        "200ms",
        "--json-out",
        json.to_str().unwrap(),
    ]);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written, report, "--json-out writes what --json prints");
    let puts = report["systems"][0]["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "puts/s, 1 client(s)")
        .expect("puts/s")
        .clone();
    assert!(puts["limit"].as_f64().unwrap() > 0.0, "{puts}");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-bench"))
        .args([
            "chart",
            json.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let svg = std::fs::read_to_string(dir.join("kv.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.contains("puts/s, 1 client(s) (/s, higher is better)"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kv_writes_and_reads() {
    let report = bench(&["kv", "--clients", "2", "--duration", "300ms"]);
    assert!(figure(&report, "puts/s, 2 client(s)") > 0.0);
    assert!(figure(&report, "gets/s, 2 client(s)") > 0.0);
}

#[test]
fn cache_reads_through_sessions_caches_and_holds_writes_for_cachers() {
    let report = bench(&[
        "cache",
        "--clients",
        "2",
        "--keys",
        "10",
        "--cachers",
        "3",
        "--duration",
        "300ms",
    ]);
    assert!(figure(&report, "reads/s, fast reads, 2 clients") > 0.0);
    assert!(figure(&report, "reads/s, linearizable reads, 2 clients") > 0.0);
    // Every key was read once before the run, so a hit is the rule.
    assert!(figure(&report, "hit ratio, fast reads, 2 clients") > 0.0);
    assert!(figure(&report, "write p50, 3 cachers") > 0.0);
}

#[test]
fn fanout_reaches_every_subscriber() {
    let report = bench(&["fanout", "--subscribers", "30", "--connections", "3"]);
    let first = figure(&report, "first subscriber has the event");
    let last = figure(&report, "last subscriber has the event");
    assert!(first > 0.0 && first <= last);
}

/// A `failover` run with `args` added to a small shape: every session
/// back, none expired, and a new lock taken.
fn failover(args: &[&str]) -> Value {
    let mut all = vec!["failover", "--nodes", "200"];
    all.extend_from_slice(args);
    let report = bench(&all);
    assert_eq!(figure(&report, "sessions expired"), 0.0);
    assert!(figure(&report, "every session Normal again") > 0.0);
    assert!(figure(&report, "a new lock taken") > 0.0);
    report
}

#[test]
fn failover_brings_every_session_back() {
    failover(&["--sessions", "20", "--connections", "4"]);
}

#[test]
fn failover_of_sessions_renewed_together_brings_every_session_back() {
    let report = failover(&["--keepalive-all", "--sessions", "300", "--connections", "3"]);
    assert_eq!(report["parameters"]["keepalive_all"], true);
    assert!(figure(&report, "every connection made again") > 0.0);
}

#[test]
fn failover_in_a_cell_of_sessions_renewed_together_brings_every_session_back() {
    let report = failover(&[
        "--cell",
        "--keepalive-all",
        "--sessions",
        "300",
        "--connections",
        "3",
    ]);
    assert_eq!(report["scenario"], "failover-cell");
    assert!(figure(&report, "new master serving") > 0.0);
}

#[test]
fn a_cell_of_three_members_cycles_a_contended_lock() {
    let report = bench(&[
        "lock",
        "--cell",
        "--clients",
        "3",
        "--keys",
        "1",
        "--duration",
        "300ms",
    ]);
    assert_eq!(report["scenario"], "lock-cell");
    assert_eq!(report["parameters"]["members"], 3);
    assert!(figure(&report, "cycles/s, 3 client(s), 1 key(s)") > 0.0);
}

#[test]
fn failover_in_a_cell_brings_every_session_back_without_the_killed_master() {
    let report = failover(&["--cell", "--sessions", "20", "--connections", "4"]);
    assert_eq!(report["scenario"], "failover-cell");
    assert!(figure(&report, "new master serving") > 0.0);
}

#[test]
fn failover_in_a_cell_killed_again_and_again_gives_each_figures_median_and_p99() {
    let report = bench(&[
        "failover",
        "--cell",
        "--kills",
        "3",
        "--sessions",
        "20",
        "--connections",
        "4",
        "--nodes",
        "200",
    ]);
    assert_eq!(report["parameters"]["kills"], 3);
    assert_eq!(figure(&report, "sessions expired"), 0.0);
    for name in [
        "new master serving",
        "every session Normal again",
        "a new lock taken",
    ] {
        let median = figure(&report, &format!("{name}, median of 3 kills"));
        let p99 = figure(&report, &format!("{name}, p99 of 3 kills"));
        assert!(median > 0.0 && median <= p99, "{name}: {median} and {p99}");
    }
}

#[test]
fn sessions_renewed_together_are_each_counted_back_after_every_kill() {
    let report = bench(&[
        "failover",
        "--cell",
        "--keepalive-all",
        "--kills",
        "3",
        "--sessions",
        "300",
        "--connections",
        "3",
        "--nodes",
        "200",
    ]);
    assert_eq!(report["parameters"]["keepalive_all"], true);
    assert_eq!(figure(&report, "sessions expired"), 0.0);
    for name in ["every session Normal again", "every connection made again"] {
        let median = figure(&report, &format!("{name}, median of 3 kills"));
        let p99 = figure(&report, &format!("{name}, p99 of 3 kills"));
        assert!(median > 0.0 && median <= p99, "{name}: {median} and {p99}");
    }
}

#[test]
fn kills_past_one_are_refused_where_they_mean_nothing() {
    for (extra, said) in [
        (&[][..], "--kills is for a Leasehold cell"),
        (&["--cell", "--runs", "2"][..], "without --runs"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_leasehold-bench"))
            .args(["failover", "--kills", "2", "--sessions", "5"])
            .args(extra)
            .output()
            .expect("run leasehold-bench");
        assert!(!output.status.success(), "{extra:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{extra:?}: {stderr}");
    }
}

#[test]
fn a_run_without_a_master_binary_says_how_to_get_one() {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold-bench"))
        .args([
            "kv",
            "--server-bin",
            "/nonexistent/leasehold",
            "--duration",
            "10ms",
        ])
        .output()
        .expect("run leasehold-bench");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/leasehold"));
}

#[test]
fn noisy_keeps_the_canary_normal_under_every_attack() {
    let report = bench(&["noisy", "--duration", "1s", "--connections", "2"]);
    assert_eq!(report["scenario"], "noisy");
    for pattern in [
        "unread large reads",
        "unread KeepAlives with events",
        "half-sent frames",
        "connection flood",
        "prefix subscriptions",
        "session flood",
        "health check flood",
    ] {
        assert_eq!(
            figure(&report, &format!("{pattern}: canary left Normal")),
            0.0
        );
        assert!(figure(&report, &format!("{pattern}: master peak RSS")) > 0.0);
    }
}
