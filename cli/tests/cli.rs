//! The `leasehold` binary against a `leasehold serve` child process.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{stdout, Serve, BIN};

#[test]
fn a_created_session_lives_until_its_lease_runs_out() {
    let serve = Serve::start();
    let created = serve.run(&["session", "create", "--name", "cli-test", "--lease", "3s"]);
    assert!(created.status.success());
    // AUTH-1: the token, `<id>:<secret>`, is what another process needs.
    let token = stdout(&created);
    let (id, secret) = token.split_once(':').expect("a token");
    assert_eq!(id.len(), 36, "a UUID: {token}");
    assert_eq!(secret.len(), 32, "128 bits in hex: {token}");
    let id = id.to_string();

    let info = serve.run(&["--json", "session", "info", &id]);
    assert!(info.status.success());
    assert!(
        stdout(&info).contains("\"name\":\"cli-test\""),
        "{}",
        stdout(&info)
    );
    assert!(stdout(&serve.run(&["session", "list"])).contains(&id));

    // Nothing keeps it alive: it ends with its lease.
    let deadline = Instant::now() + Duration::from_secs(15);
    let gone = loop {
        let info = serve.run(&["session", "info", &id]);
        if !info.status.success() || Instant::now() > deadline {
            break info;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("lease ran out"));
}

#[test]
fn destroying_a_session_removes_it() {
    let serve = Serve::start();
    let id = stdout(&serve.run(&["session", "create"]));
    assert!(serve.run(&["session", "destroy", &id]).status.success());
    assert_eq!(
        serve.run(&["session", "destroy", &id]).status.code(),
        Some(1)
    );
}

#[test]
fn an_unreachable_server_is_one_line_and_exit_status_69() {
    let output = Command::new(BIN)
        .args(["--addr", "127.0.0.1:1", "session", "list"])
        .output()
        .unwrap();
    // EX_UNAVAILABLE, apart from a usage error's 64.
    assert_eq!(output.status.code(), Some(69));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot connect to 127.0.0.1:1"), "{stderr}");
}

#[test]
fn the_address_comes_from_leasehold_addr() {
    let serve = Serve::start();
    let output = Command::new(BIN)
        .env("LEASEHOLD_ADDR", &serve.addr)
        .args(["session", "list"])
        .output()
        .unwrap();
    assert!(output.status.success());
}

#[test]
fn session_keep_prints_each_state_until_the_session_expires() {
    let mut serve = Serve::start();
    let mut keep = Command::new(BIN)
        .args(["--addr", &serve.addr, "--json", "session", "keep"])
        .args(["--lease", "500ms", "--grace", "500ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(keep.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("\"state\":\"normal\""), "{first}");

    let started = Instant::now();
    serve.child.kill().unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = keep.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let states: Vec<String> = rest
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            v["state"].as_str().expect("a state").to_string()
        })
        .collect();
    assert_eq!(states, ["jeopardy", "expired"]);
    assert_eq!(status.code(), Some(1));
}

#[test]
fn put_get_ls_and_delete_work_on_the_namespace() {
    let serve = Serve::start();
    let written = serve.run(&["put", "svc/db/primary", "10.0.0.5:5432"]);
    assert!(written.status.success());
    let index = stdout(&written);
    assert!(
        index.parse::<u64>().is_ok(),
        "prints the modify index: {index}"
    );
    assert!(serve.run(&["put", "svc/web", "x"]).status.success());

    assert_eq!(
        stdout(&serve.run(&["get", "svc/db/primary"])),
        "10.0.0.5:5432"
    );
    let stat = stdout(&serve.run(&["get", "--stat", "svc/db/primary"]));
    assert!(stat.contains(&format!("modify_index={index}")), "{stat}");
    assert_eq!(stdout(&serve.run(&["ls", "svc"])), "svc/db\nsvc/web");
    assert_eq!(
        stdout(&serve.run(&["ls", "--recursive", "svc"])),
        "svc/db/primary\nsvc/web"
    );
    let deleted = serve.run(&["delete", "--recursive", "svc"]);
    assert_eq!(stdout(&deleted), "svc/db/primary\nsvc/web");
    assert_eq!(
        String::from_utf8_lossy(&deleted.stderr).trim(),
        "deleted 2 key(s)"
    );
    assert_eq!(stdout(&serve.run(&["ls", "--recursive"])), "");
}

#[test]
fn a_missing_key_is_a_message_and_exit_status_1() {
    let serve = Serve::start();
    let output = serve.run(&["get", "nothing/here"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no node at nothing/here"));
}

#[test]
fn a_failed_compare_and_set_is_exit_status_1_and_writes_nothing() {
    let serve = Serve::start();
    let index = stdout(&serve.run(&["put", "k", "first"]));
    let stale = serve.run(&["put", "k", "second", "--cas", "999"]);
    assert_eq!(stale.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(
        stderr.contains(&format!("modify index {index}")),
        "{stderr}"
    );
    assert_eq!(stdout(&serve.run(&["get", "k"])), "first");
    assert!(serve
        .run(&["put", "k", "second", "--cas", &index])
        .status
        .success());
}

#[test]
fn check_sequencer_exits_0_while_the_holding_lasts_and_1_after() {
    let serve = Serve::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (guard, hex) = runtime.block_on(async {
        let client = leasehold::Client::connect(serve.addr.clone())
            .await
            .unwrap();
        let session = client
            .create_session(leasehold::SessionOptions::new("cli-test"))
            .await
            .unwrap();
        let guard = session
            .try_lock("jobs/report", leasehold::LockOptions::exclusive())
            .await
            .unwrap();
        let hex = guard.sequencer().to_hex();
        (guard, hex)
    });
    let valid = serve.run(&["check-sequencer", &hex]);
    assert_eq!(valid.status.code(), Some(0));
    assert_eq!(stdout(&valid), "valid");
    runtime.block_on(guard.release()).unwrap();
    let invalid = serve.run(&["check-sequencer", &hex]);
    assert_eq!(invalid.status.code(), Some(1));
    assert_eq!(stdout(&invalid), "invalid");
    // Not a sequencer at all is not the same answer as a stale one.
    let garbage = serve.run(&["check-sequencer", "zz"]);
    assert_eq!(garbage.status.code(), Some(65));
}

// CHK-2, CHK-3
#[test]
fn a_critical_check_set_from_the_cli_ends_the_sessions_bound_to_it() {
    let serve = Serve::start();
    assert!(serve
        .run(&["check", "set", "disk", "passing", "--note", "ok"])
        .status
        .success());
    let created = serve.run(&["session", "create", "--lease", "30s", "--check", "disk"]);
    assert!(created.status.success(), "{created:?}");
    let token = stdout(&created);
    let id = token.split(':').next().unwrap();
    let listed = stdout(&serve.run(&["check", "list"]));
    assert!(listed.contains("disk  passing  sessions=1  ok"), "{listed}");

    let set = serve.run(&["check", "set", "disk", "critical"]);
    assert!(set.status.success());
    assert_eq!(stdout(&set), format!("ended session {id}"));
    let gone = serve.run(&["session", "info", id]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("health check"));

    let refused = serve.run(&["session", "create", "--check", "disk"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("critical"));
}

// AUTH-3
#[test]
fn with_an_operator_token_a_session_is_destroyed_by_its_token_or_the_operator() {
    let token_file = std::env::temp_dir().join(format!("leasehold-op-{}", std::process::id()));
    std::fs::write(&token_file, "a-long-enough-operator-token\n").unwrap();
    let token_path = token_file.to_str().unwrap();
    let (child, addr) = common::spawn_serve(&[
        "--listen",
        "127.0.0.1:0",
        "--in-memory",
        "--operator-token-file",
        token_path,
    ]);
    let serve = Serve { child, addr };
    let first = stdout(&serve.run(&["session", "create"]));
    let first_id = first.split(':').next().unwrap().to_string();
    let refused = serve.run(&["session", "destroy", &first_id]);
    // EX_NOPERM: the master refused for want of a right.
    assert_eq!(refused.status.code(), Some(77), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("operator token"),
        "{refused:?}"
    );
    assert!(serve.run(&["session", "destroy", &first]).status.success());

    let second = stdout(&serve.run(&["session", "create"]));
    let second_id = second.split(':').next().unwrap();
    let by_operator = serve.run(&[
        "--operator-token-file",
        token_path,
        "session",
        "destroy",
        second_id,
    ]);
    assert!(by_operator.status.success(), "{by_operator:?}");
    let _ = std::fs::remove_file(&token_file);
}

// AUTH-1, SES-9: another process keeps a created session alive by its token.
#[test]
fn a_created_session_is_kept_alive_by_another_process_with_its_token() {
    let serve = Serve::start();
    let token = stdout(&serve.run(&["session", "create", "--lease", "3s"]));
    let id = token.split(':').next().unwrap().to_string();
    let keeper = common::Running::start(&serve.addr, &["session", "keep", "--attach", &token]);
    assert_eq!(keeper.stdout_line(Duration::from_secs(10)), "normal");
    // More than two leases later it is still there, kept by the second
    // process.
    std::thread::sleep(Duration::from_secs(7));
    assert!(serve.run(&["session", "info", &id]).status.success());
    let forged = format!("{id}:{}", "0".repeat(32));
    let refused = serve.run(&["session", "keep", "--attach", &forged]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("secret does not match"),
        "{refused:?}"
    );
}

// A reader that exits early (`leasehold watch | head -1`) ends the command
// quietly, as it ends other tools, without a panic.
#[test]
fn a_reader_that_exits_early_ends_the_command_quietly() {
    let serve = Serve::start();
    let mut watch = Command::new(BIN)
        .args(["--addr", &serve.addr, "watch", "k"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A reader that takes one line and exits: `head -1`.
    let out = watch.stdout.take().unwrap();
    let (first, first_line) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = first.send(line);
    });
    // Writes until the watch has printed its first line: it may not have
    // subscribed before the first ones.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 1;
    let line = loop {
        assert!(serve.run(&["put", "k", &n.to_string()]).status.success());
        n += 1;
        if let Ok(line) = first_line.recv_timeout(Duration::from_millis(100)) {
            break line;
        }
        assert!(Instant::now() < deadline, "watch printed nothing");
    };
    assert!(line.contains('k'), "{line}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = watch.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "watch kept running");
        assert!(serve.run(&["put", "k", &n.to_string()]).status.success());
        n += 1;
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(13), "ended by SIGPIPE: {status:?}");
}

// A master raises its soft open-files limit to the hard one: every
// connection is a descriptor.
#[test]
fn serve_raises_its_open_files_limit_to_the_hard_limit() {
    let mut child = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -Sn 256 && exec {BIN} serve --listen 127.0.0.1:0 --in-memory"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on"), "{line}");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a limit on open files");
    let numbers: Vec<&str> = open_files.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers[0], numbers[1], "soft and hard: {open_files}");
    assert_ne!(numbers[0], "256", "{open_files}");
}

// An address that is not HOST:PORT is a usage error (64), not an
// unreachable master (69).
#[test]
fn an_address_that_is_not_host_and_port_is_a_usage_error() {
    for addr in [
        "127.0.0.1",
        "localhost",
        "localhost:http",
        "127.0.0.1:70000",
        "a:1,b",
    ] {
        refused_as_not_host_and_port(addr);
    }
}

/// What `--addr addr` prints once refused as not HOST:PORT, exit 64.
fn refused_as_not_host_and_port(addr: &str) -> String {
    let output = Command::new(BIN)
        .args(["--addr", addr, "session", "list"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64), "{addr}: {output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(stderr.contains("is not HOST:PORT"), "{stderr}");
    stderr
}

// The mistakes people make with a cell's addresses are usage errors with
// a hint, not an unreachable master: `serve --cell`'s `ID=HOST:PORT` given
// to a client, and addresses separated by spaces or semicolons.
#[test]
fn a_cells_addresses_written_the_wrong_way_are_a_usage_error_with_a_hint() {
    for (addr, hint) in [
        ("2=127.0.0.1:7171", "ID=HOST:PORT is how `serve --cell`"),
        (
            "1=127.0.0.1:7171,2=127.0.0.1:7172",
            "ID=HOST:PORT is how `serve --cell`",
        ),
        ("127.0.0.1:7171 127.0.0.1:7172", "separate"),
        ("127.0.0.1:7171;127.0.0.1:7172", "separate"),
    ] {
        let stderr = refused_as_not_host_and_port(addr);
        assert!(stderr.contains(hint), "{addr}: {stderr}");
    }
}

// Addresses people do write stay accepted: names, IPv4, IPv6 in
// brackets, a cell's members separated by commas (with spaces after them).
#[test]
fn host_names_and_both_kinds_of_ip_address_are_accepted() {
    for addr in [
        "db-1.example.internal:7171",
        "[::1]:7171",
        "127.0.0.1:1, 127.0.0.2:2",
    ] {
        let output = Command::new(BIN)
            .args(["--addr", addr, "--help"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{addr}: {output:?}");
    }
}

// A member id the `--cell` list does not name is a usage error (64).
#[test]
fn a_node_the_cell_does_not_name_is_a_usage_error() {
    let dir = std::env::temp_dir().join(format!("leasehold-node-4-{}", std::process::id()));
    let output = Command::new(BIN)
        .args([
            "serve",
            "--cell",
            "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3",
            "--node",
            "4",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(output.status.code(), Some(64), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--node 4 is not among"), "{stderr}");
}

// What is not a session id is malformed input (65), not a missing
// session (1).
#[test]
fn a_session_that_is_not_an_id_is_malformed_input() {
    let serve = Serve::start();
    for command in ["info", "destroy"] {
        let out = serve.run(&["session", command, "nope"]);
        assert_eq!(out.status.code(), Some(65), "{command}: {out:?}");
    }
}

// ZooKeeper's and etcd's users write keys with a leading `/`: it names
// the same key.
#[test]
fn a_key_with_a_leading_slash_is_the_same_key() {
    let serve = Serve::start();
    assert!(serve.run(&["put", "/jobs/x", "v"]).status.success());
    assert_eq!(stdout(&serve.run(&["get", "jobs/x"])), "v");
    assert_eq!(stdout(&serve.run(&["get", "/jobs/x"])), "v");
    assert_eq!(stdout(&serve.run(&["ls", "/jobs"])), "jobs/x");
}

// Every argument of every command says what it is in --help.
#[test]
fn every_key_argument_is_described_in_help() {
    for command in [
        "lock",
        "elect",
        "leader",
        "get",
        "put",
        "delete",
        "semaphore",
    ] {
        let help = Command::new(BIN)
            .args([command, "--help"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&help.stdout);
        let arguments = text
            .split("Arguments:")
            .nth(1)
            .and_then(|a| a.split("Options:").next())
            .unwrap_or_else(|| panic!("{command}: {text}"));
        // The description follows the name on its line, or on the next
        // (clap's long form).
        let lines: Vec<&str> = arguments.lines().map(str::trim).collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.starts_with('<') {
                continue;
            }
            let same = line.split_once("  ").map(|(_, d)| d.trim());
            let next = lines
                .get(i + 1)
                .filter(|l| !l.is_empty() && !l.starts_with('<'));
            assert!(
                same.is_some_and(|d| !d.is_empty()) || next.is_some(),
                "{command}: {line:?} has no description"
            );
        }
    }
}

#[test]
fn a_lease_the_master_refuses_names_the_settings_that_decide() {
    let serve = Serve::start();
    let refused = serve.run(&["session", "create", "--lease", "90s"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--max-lease"), "{stderr}");
    // Decimals are durations too.
    let created = serve.run(&["session", "create", "--lease", "2.5s"]);
    assert!(created.status.success(), "{created:?}");
}

#[test]
fn put_reads_the_value_from_stdin_given_a_dash() {
    let serve = Serve::start();
    let mut put = Command::new(BIN)
        .args(["--addr", &serve.addr, "put", "from/stdin", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    put.stdin
        .take()
        .unwrap()
        .write_all(b"line one\nline two\n")
        .unwrap();
    assert!(put.wait().unwrap().success());
    let got = serve.run(&["get", "from/stdin"]);
    // `get` ends what it prints with a newline of its own.
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "line one\nline two\n\n"
    );
}

#[test]
fn ls_of_slash_lists_the_root_as_zookeeper_users_expect() {
    let serve = Serve::start();
    assert!(serve.run(&["put", "a/b", "1"]).status.success());
    let listed = serve.run(&["ls", "/"]);
    assert!(listed.status.success(), "{listed:?}");
    assert_eq!(stdout(&listed), "a");
}

#[test]
fn a_usage_error_is_exit_status_64_and_help_is_success() {
    let wrong = Command::new(BIN).args(["put"]).output().unwrap();
    assert_eq!(wrong.status.code(), Some(64), "{wrong:?}");
    let help = Command::new(BIN).args(["--help"]).output().unwrap();
    assert!(help.status.success(), "{help:?}");
}

#[test]
fn bash_completion_offers_the_subcommands_and_their_flags() {
    let script = Command::new(BIN)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(script.status.success());
    let path = std::env::temp_dir().join(format!("leasehold-{}.bash", std::process::id()));
    std::fs::write(&path, &script.stdout).unwrap();
    // What bash's completion machinery does on `leasehold lo<TAB>` and on
    // `leasehold lock --t<TAB>`.
    let complete = |words: &str, cword: usize| {
        let program = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; \
             _leasehold leasehold \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display()
        );
        let out = Command::new("bash")
            .args(["-c", &program])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let subcommands = complete("leasehold lo", 1);
    assert!(subcommands.lines().any(|w| w == "lock"), "{subcommands}");
    let flags = complete("leasehold lock --t", 2);
    assert!(flags.lines().any(|w| w == "--try"), "{flags}");
    assert!(flags.lines().any(|w| w == "--timeout"), "{flags}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn completions_for_an_unknown_shell_are_a_usage_error() {
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values"));
}

// SIGTERM, as a service manager stops `session keep`, destroys the
// session on the way out, as Ctrl-C does.
#[test]
fn session_keep_destroys_its_session_on_sigterm() {
    let serve = Serve::start();
    let mut keep = common::Running::start(
        &serve.addr,
        &[
            "--json", "session", "keep", "--name", "kept", "--lease", "30s",
        ],
    );
    let first = keep.stdout_line(Duration::from_secs(10));
    assert!(first.contains("\"state\":\"normal\""), "{first}");
    let id = serde_json::from_str::<serde_json::Value>(&first).unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &keep.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(keep.wait(Duration::from_secs(10)).code(), Some(0));
    // Gone at once, not when its 30 s lease runs out.
    let info = serve.run(&["session", "info", &id]);
    assert_eq!(info.status.code(), Some(1), "{info:?}");
}

/// `put KEY -` with `bytes` on its stdin.
fn put_from_stdin(serve: &Serve, key: &str, bytes: &[u8]) {
    use std::io::Write;
    let mut put = Command::new(BIN)
        .args(["--addr", &serve.addr, "put", key, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    put.stdin.take().unwrap().write_all(bytes).unwrap();
    assert!(put.wait().unwrap().success());
}

/// 256 KiB of bytes that are not UTF-8 text (a fixed xorshift stream).
fn random_bytes() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..256 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

// `get --raw` writes exactly what `put -` stored, binary or not, and no
// newline after it.
#[test]
fn get_raw_gives_back_exactly_the_bytes_put_stored() {
    let serve = Serve::start();
    let bytes = random_bytes();
    assert!(std::str::from_utf8(&bytes).is_err());
    put_from_stdin(&serve, "blob", &bytes);
    let got = serve.run(&["get", "blob", "--raw"]);
    assert!(got.status.success(), "{:?}", got.status);
    assert!(
        got.stdout == bytes,
        "{} bytes back for {}",
        got.stdout.len(),
        bytes.len()
    );
    put_from_stdin(&serve, "text", b"abc");
    assert_eq!(serve.run(&["get", "text", "--raw"]).stdout, b"abc");
}

// A value that is not text is not printed as text, where it would come
// out changed: `get` refuses it and says what gives it exactly; `--json`
// carries it in base64, and text as text too.
#[test]
fn get_refuses_to_print_bytes_that_are_not_text_and_json_carries_them_in_base64() {
    use base64::Engine;

    let serve = Serve::start();
    let bytes = random_bytes();
    put_from_stdin(&serve, "blob", &bytes);
    let text = serve.run(&["get", "blob"]);
    assert_eq!(text.status.code(), Some(65), "{:?}", text.status);
    assert!(text.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&text.stderr).contains("--raw"),
        "{:?}",
        text.stderr
    );
    let json = serve.run(&["--json", "get", "blob"]);
    let line: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(line["value"].is_null(), "{line}");
    let carried = base64::engine::general_purpose::STANDARD
        .decode(line["value_base64"].as_str().unwrap())
        .unwrap();
    assert!(carried == bytes);
    put_from_stdin(&serve, "text", b"caf\xc3\xa9");
    let line: serde_json::Value =
        serde_json::from_slice(&serve.run(&["--json", "get", "text"]).stdout).unwrap();
    assert_eq!(line["value"], "café");
    assert_eq!(line["value_base64"], "Y2Fmw6k=");
}

// A write held for a session that caches its key (`CACHE-3`), here one
// that never acknowledges, takes up to that session's lease; past the
// CLI's request timeout its outcome is unknown, and the CLI says so with
// an exit status of its own. The write is applied once the lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_does_not_come_in_time_exits_3_saying_its_outcome_is_unknown() {
    use leasehold_protocol::{GetCached, Request, Response};
    use leasehold_tests::raw::RawConnection;

    let serve = Serve::start();
    assert!(serve.run(&["put", "k", "old"]).status.success());
    let (mut cacher, _) = RawConnection::open(serve.addr.parse().unwrap()).await;
    let session = cacher.create_session(Duration::from_secs(5)).await;
    let cached = cacher
        .call(Request::GetCached(GetCached {
            key: "k".into(),
            session,
            dropped: Vec::new(),
        }))
        .await;
    assert!(
        matches!(
            cached,
            Ok(Response::Cached {
                cacheable: true,
                ..
            })
        ),
        "{cached:?}"
    );
    let put = serve.run(&["--request-timeout", "500ms", "put", "k", "new"]);
    assert_eq!(put.status.code(), Some(3), "{put:?}");
    let said = String::from_utf8_lossy(&put.stderr);
    assert!(said.contains("outcome is unknown"), "{said}");
    // The cacher's lease runs out, and the write goes through.
    let deadline = Instant::now() + Duration::from_secs(10);
    while stdout(&serve.run(&["get", "k"])) != "new" {
        assert!(
            Instant::now() < deadline,
            "the held write was never applied"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// `cell status` against a single master: one line saying so, with its
// epoch, and exit status 0 (it serves).
#[test]
fn cell_status_against_a_single_master_says_it_is_one() {
    let serve = Serve::start();
    let out = serve.run(&["cell", "status"]);
    assert!(out.status.success(), "{out:?}");
    let printed = stdout(&out);
    let line = printed.lines().nth(1).expect("a line for the master");
    assert!(
        line.contains("single") && line.contains(&serve.addr),
        "{printed}"
    );
    assert!(!printed.contains("unreachable"), "{printed}");
}
