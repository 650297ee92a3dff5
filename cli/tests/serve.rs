//! `leasehold serve` as an operator runs it: where it listens, how it stops,
//! and what it says when it cannot start.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::BIN;

/// Starts `leasehold ARGS` with `env` added, its output piped.
fn start(args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(BIN)
        .args(args)
        .env_remove("LEASEHOLD_ADDR")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start leasehold")
}

/// The first line the child prints on stdout ("" if it printed none).
fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("read stdout");
    line.trim().to_string()
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// Waits for the child to exit, at most `within`.
fn exit_within(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("leasehold-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Whether the line announces a port other than the default 7171.
fn listening_elsewhere_than_the_default(line: &str) -> bool {
    line.strip_prefix("listening on 127.0.0.1:")
        .is_some_and(|port| port != "7171")
}

#[test]
fn serve_listens_where_addr_says_when_not_told_to_listen_elsewhere() {
    let mut serve = start(&["--addr", "127.0.0.1:0", "serve", "--in-memory"], &[]);
    let line = first_line(&mut serve);
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(listening_elsewhere_than_the_default(&line), "{line:?}");
}

#[test]
fn serve_listens_where_leasehold_addr_says_when_not_told_to_listen_elsewhere() {
    let mut serve = start(
        &["serve", "--in-memory"],
        &[("LEASEHOLD_ADDR", "127.0.0.1:0")],
    );
    let line = first_line(&mut serve);
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(listening_elsewhere_than_the_default(&line), "{line:?}");
}

// A flag overrides the environment: with LEASEHOLD_ADDR exported for the
// clients (or --addr given), serve listens where --listen says.
#[test]
fn serve_listens_where_listen_says_whatever_leasehold_addr_says() {
    let mut serve = start(
        &["serve", "--listen", "127.0.0.1:0", "--in-memory"],
        &[("LEASEHOLD_ADDR", "127.0.0.1:1")],
    );
    let line = first_line(&mut serve);
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(line.starts_with("listening on 127.0.0.1:"), "{line:?}");
    assert!(!line.ends_with(":1"), "{line:?}");
}

// `serve --json` says where it listens as JSON.
#[test]
fn serve_json_says_where_it_listens_as_json() {
    let mut serve = start(
        &["--json", "serve", "--listen", "127.0.0.1:0", "--in-memory"],
        &[],
    );
    let line = first_line(&mut serve);
    let _ = serve.kill();
    let _ = serve.wait();
    let parsed: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert!(
        parsed["listening"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{line}"
    );
}

#[cfg(unix)]
#[test]
fn sigterm_shuts_the_master_down_cleanly() {
    let dir = scratch("sigterm");
    let dir_arg = dir.to_str().unwrap();
    let mut serve = start(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", dir_arg],
        &[],
    );
    assert!(first_line(&mut serve).starts_with("listening on "));
    let killed = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = exit_within(&mut serve, Duration::from_secs(20));
    let stderr = stderr_of(&mut serve);
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    // Stopped cleanly, the data directory is free for the next master.
    let mut next = start(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", dir_arg],
        &[],
    );
    assert!(first_line(&mut next).starts_with("listening on "));
    let _ = next.kill();
    let _ = next.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_master_on_a_busy_data_directory_fails_before_announcing_an_address() {
    let dir = scratch("busy");
    let dir_arg = dir.to_str().unwrap();
    let mut first = start(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", dir_arg],
        &[],
    );
    assert!(first_line(&mut first).starts_with("listening on "));
    let mut second = start(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", dir_arg],
        &[],
    );
    let status = exit_within(&mut second, Duration::from_secs(10));
    let _ = first.kill();
    let _ = first.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        status.code(),
        Some(75),
        "free once the other stops: try again"
    );
    assert_eq!(first_line(&mut second), "", "announced an address");
    let stderr = stderr_of(&mut second);
    assert!(stderr.contains("another master"), "{stderr}");
}

#[test]
fn a_refused_configuration_leaves_the_data_directory_untouched() {
    let dir = scratch("refused");
    let mut serve = start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.to_str().unwrap(),
            "--min-lease",
            "10s",
            "--max-lease",
            "1s",
        ],
        &[],
    );
    let status = exit_within(&mut serve, Duration::from_secs(10));
    assert!(!status.success());
    assert_eq!(first_line(&mut serve), "", "announced an address");
    assert!(!dir.exists(), "the data directory was created");
}

/// Runs `serve` with `args` until it gives up; its exit status.
fn serve_status(args: &[&str]) -> Option<i32> {
    let mut serve = start(args, &[]);
    let status = exit_within(&mut serve, Duration::from_secs(10));
    assert_eq!(first_line(&mut serve), "", "announced an address");
    status.code()
}

// README's exit statuses: a port that is not one is the command line's
// mistake, and nothing is created for it.
#[test]
fn serve_with_no_port_to_listen_on_exits_64_before_making_its_data_directory() {
    let dir = scratch("no-port");
    let args = ["serve", "--listen", "127.0.0.1:99999", "--data-dir"];
    assert_eq!(
        serve_status(&[&args[..], &[dir.to_str().unwrap()]].concat()),
        Some(64)
    );
    assert!(!dir.exists(), "the data directory was created");
}

// README's exit statuses: an address another process listens on.
#[test]
fn serve_on_an_address_in_use_exits_69() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    assert_eq!(
        serve_status(&["serve", "--in-memory", "--listen", &addr]),
        Some(69)
    );
}

// A start that cannot listen leaves no data directory it created behind
// (its disk reserve alone is 64 MiB), and keeps one that was there.
#[test]
fn serve_on_an_address_in_use_removes_only_a_data_directory_it_created() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = scratch("in-use");
    let args = [
        "serve",
        "--listen",
        &addr,
        "--data-dir",
        dir.to_str().unwrap(),
    ];
    assert_eq!(serve_status(&args), Some(69));
    assert!(!dir.exists(), "the data directory this start made is left");
    // One that was there, if empty, is the operator's: it stays.
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(serve_status(&args), Some(69));
    assert!(dir.exists(), "the operator's data directory was removed");
    let _ = std::fs::remove_dir_all(&dir);
}

// README's exit statuses, STORE-2: a damaged data directory is never
// reset; restarting cannot mend it.
#[test]
fn serve_on_a_damaged_data_directory_exits_65() {
    let dir = scratch("damaged");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("stray"), "not Leasehold's").unwrap();
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir"];
    let status = serve_status(&[&args[..], &[dir.to_str().unwrap()]].concat());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status, Some(65));
}

// README's exit statuses: settings that cannot work, a TLS file that
// cannot be read among them.
#[test]
fn serve_with_settings_that_cannot_work_exits_78() {
    let leases = ["--min-lease", "10s", "--max-lease", "1s"];
    let base = ["serve", "--in-memory", "--listen", "127.0.0.1:0"];
    assert_eq!(serve_status(&[&base[..], &leases[..]].concat()), Some(78));
    let tls = [
        "--tls-cert",
        "/nonexistent/cert.pem",
        "--tls-key",
        "/nonexistent/key.pem",
    ];
    assert_eq!(serve_status(&[&base[..], &tls[..]].concat()), Some(78));
}

/// The answer to `GET path` from the HTTP server at `addr`.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the HTTP port");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    answer
}

// OPS-2, OPS-3: `serve --http-listen` says where its HTTP port is, and
// serves health and metrics there.
#[test]
fn serve_http_listen_says_where_and_serves_health_and_metrics() {
    let mut child = start(
        &[
            "serve",
            "--in-memory",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("listening on "), "{line:?}");
    line.clear();
    stdout.read_line(&mut line).unwrap();
    let http = line
        .trim()
        .strip_prefix("status page, metrics and health on http://")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_string();
    let health = http_get(&http, "/health");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(
        health.ends_with("{\"health\":\"true\",\"reason\":\"\"}\n"),
        "{health}"
    );
    let metrics = http_get(&http, "/metrics");
    assert!(metrics.contains("leasehold_epoch 1\n"), "{metrics}");
    let _ = child.kill();
    let _ = child.wait();
}

// OPS-2: a supervisor that stops reading once `serve` says where it
// listens (a benchmark, a script) does not stop the server when it then
// says where its HTTP port is.
#[test]
fn serve_goes_on_when_its_output_is_no_longer_read() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http = port.local_addr().unwrap().to_string();
    drop(port);
    let mut child = start(
        &[
            "serve",
            "--in-memory",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            &http,
        ],
        &[],
    );
    // Reads the first line and closes the pipe.
    assert!(first_line(&mut child).starts_with("listening on "));
    // The HTTP port is served only after the line about it was written.
    let health = http_get(&http, "/health");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(child.try_wait().unwrap().is_none(), "the server stopped");
    let _ = child.kill();
    let _ = child.wait();
}

// OPS-2: an HTTP port that cannot be had stops `serve` before it says it
// listens.
#[test]
fn serve_refuses_an_http_port_it_cannot_listen_on() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut child = start(
        &[
            "serve",
            "--in-memory",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            &addr,
        ],
        &[],
    );
    assert_eq!(first_line(&mut child), "");
    assert!(!exit_within(&mut child, Duration::from_secs(10)).success());
    let said = stderr_of(&mut child);
    assert!(said.contains("--http-listen"), "{said}");
}

/// The systemd unit that ships in `dist/`.
const UNIT: &str = include_str!("../../dist/leasehold.service");

// The systemd unit passes `systemd-analyze verify` without a word (where
// the machine has it), with ExecStart pointing at this build.
#[test]
fn the_systemd_unit_verifies() {
    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        assert!(
            std::env::var_os("LEASEHOLD_REQUIRE_SYSTEMD_ANALYZE").is_none(),
            "LEASEHOLD_REQUIRE_SYSTEMD_ANALYZE is set and no systemd-analyze was found"
        );
        eprintln!("no systemd-analyze on this machine: the unit was not verified");
        return;
    };
    assert!(probe.status.success());
    let dir = std::env::temp_dir().join(format!("leasehold-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let unit = dir.join("leasehold.service");
    std::fs::write(&unit, UNIT.replace("/usr/local/bin/leasehold", BIN)).unwrap();
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(verified.status.success(), "{verified:?}");
    let said = String::from_utf8_lossy(&verified.stderr);
    assert!(said.trim().is_empty(), "systemd-analyze: {said}");
}

// The unit's ExecStart and Environment, run as systemd would run them
// (its state directory and operator token file made here), start a
// master: every flag and variable it names exists.
#[test]
fn the_systemd_units_command_starts_a_master() {
    let value = |key: &str| {
        UNIT.lines()
            .filter_map(|l| l.strip_prefix(key))
            .collect::<Vec<_>>()
    };
    let dir = std::env::temp_dir().join(format!("leasehold-unit-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("operator-token");
    std::fs::write(&token, "a token for the unit's test\n").unwrap();
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let exec = value("ExecStart=");
    assert_eq!(exec.len(), 1, "{exec:?}");
    let exec = exec[0].replace("${STATE_DIRECTORY}", state.to_str().unwrap());
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/leasehold"));
    let mut env = Vec::new();
    for assignment in value("Environment=") {
        let (name, value) = assignment.split_once('=').expect("NAME=VALUE");
        assert!(name.starts_with("LEASEHOLD_"), "{assignment}");
        let value = match name {
            "LEASEHOLD_OPERATOR_TOKEN_FILE" => token.to_str().unwrap(),
            _ => value,
        };
        env.push((name.to_string(), value.to_string()));
    }
    let mut child = Command::new(BIN)
        .args(words)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("LEASEHOLD_ADDR")
        .envs(env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = first_line(&mut child);
    let _ = child.kill();
    let stderr = stderr_of(&mut child);
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(line.starts_with("listening on "), "{line:?}: {stderr}");
    assert!(
        !stderr.contains("no --operator-token-file"),
        "the unit gives the master its operator token: {stderr}"
    );
}

/// `leasehold serve ARGS --print-config` with `env`, and what it printed.
fn printed_config(
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String, String) {
    let out = Command::new(BIN)
        .arg("serve")
        .args(args)
        .arg("--print-config")
        .env_remove("LEASEHOLD_ADDR")
        .env_remove("LEASEHOLD_HTTP_LISTEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// A file of `text` in a directory of its own, removed with it.
struct ConfigFile(std::path::PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> ConfigFile {
        let dir =
            std::env::temp_dir().join(format!("leasehold-config-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("leasehold.toml");
        std::fs::write(&file, text).unwrap();
        ConfigFile(file)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

// `serve --config` sets any of serve's flags; a flag on the command line
// and a LEASEHOLD_* variable override it; `--print-config` says where
// each setting comes from.
#[test]
fn a_config_file_sets_flags_and_flags_and_variables_override_it() {
    let file = ConfigFile::new(
        "layers",
        "http-listen = \"127.0.0.1:7180\"\nmax-connections = 100\nmin-lease = \"100ms\"\n\
         http-host = [\"a.example\", \"b.example\"]\n",
    );
    let (status, printed, stderr) = printed_config(
        &["--config", file.path(), "--max-connections", "7"],
        &[("LEASEHOLD_HTTP_LISTEN", "127.0.0.1:7999")],
    );
    assert!(status.success(), "{stderr}");
    let line = |flag: &str| {
        printed
            .lines()
            .find(|l| l.starts_with(&format!("{flag} = ")))
            .unwrap_or_else(|| panic!("no {flag} in:\n{printed}"))
            .to_string()
    };
    assert_eq!(line("min-lease"), "min-lease = \"100ms\"  # config file");
    assert_eq!(
        line("max-connections"),
        "max-connections = \"7\"  # command line"
    );
    assert_eq!(
        line("http-listen"),
        "http-listen = \"127.0.0.1:7999\"  # LEASEHOLD_HTTP_LISTEN"
    );
    assert!(
        printed.contains("# max-lease = \"60s\"  # default"),
        "{printed}"
    );
    assert_eq!(
        line("http-host"),
        "http-host = [\"a.example\", \"b.example\"]  # config file"
    );
}

// What `--print-config` prints, read back as a config file, sets the same.
#[test]
fn printed_settings_read_back_set_the_same() {
    let file = ConfigFile::new("first", "idle-timeout = \"90s\"\nin-memory = true\n");
    let (_, printed, _) = printed_config(&["--config", file.path()], &[]);
    let again = ConfigFile::new("again", &printed);
    let (status, reprinted, stderr) = printed_config(&["--config", again.path()], &[]);
    assert!(status.success(), "{stderr}");
    let settings = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(settings(&reprinted), settings(&printed));
    assert!(printed.contains("idle-timeout = \"90s\"  # config file"));
}

// A key that is not a setting is refused with its name (and the flag it
// was likely meant as), exit 78; so is a file that is not TOML, with its
// line; a value the flag does not take is refused as the flag's would be.
#[test]
fn a_config_file_with_an_unknown_key_or_bad_toml_is_refused() {
    let unknown = ConfigFile::new("unknown", "data_dir = \"/var/lib/leasehold\"\n");
    let (status, _, stderr) = printed_config(&["--config", unknown.path()], &[]);
    assert_eq!(status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("unknown key \"data_dir\""), "{stderr}");
    assert!(stderr.contains("did you mean data-dir?"), "{stderr}");
    let broken = ConfigFile::new("broken", "listen = \n");
    let (status, _, stderr) = printed_config(&["--config", broken.path()], &[]);
    assert_eq!(status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("is not TOML") && stderr.contains("line 1"),
        "{stderr}"
    );
    let wrong = ConfigFile::new("wrong", "max-connections = \"lots\"\n");
    let (status, _, stderr) = printed_config(&["--config", wrong.path()], &[]);
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("'lots' for '--max-connections"), "{stderr}");
    assert!(stderr.contains("gave max-connections as flags"), "{stderr}");
    let (status, _, stderr) = printed_config(&["--config", "/no/such/leasehold.toml"], &[]);
    assert_eq!(status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("cannot read the config file"), "{stderr}");
}

// `--log-format json` writes each log line as one JSON object, for log
// shippers; a master configured from a file says so in its log.
#[test]
fn log_format_json_writes_one_object_a_line() {
    let file = ConfigFile::new("json", "in-memory = true\nlog-format = \"json\"\n");
    let mut child = start(
        &["serve", "--listen", "127.0.0.1:0", "--config", file.path()],
        &[],
    );
    assert!(first_line(&mut child).starts_with("listening on "));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let line: serde_json::Value = serde_json::from_str(&first).expect("a JSON line");
    assert_eq!(line["level"], "INFO", "{line}");
    assert!(
        line["message"]
            .as_str()
            .is_some_and(|m| m.contains("config file")),
        "{line}"
    );
}

// A flag that needs another may be given where the other is not: `--node`
// on the command line and `cell` in the config file.
#[test]
fn a_flag_and_the_flag_it_needs_may_come_one_from_the_file() {
    let file = ConfigFile::new(
        "split",
        "cell = \"1=127.0.0.1:7501,2=127.0.0.1:7502,3=127.0.0.1:7503\"\n",
    );
    let (status, printed, stderr) = printed_config(&["--node", "2", "--config", file.path()], &[]);
    assert!(status.success(), "{stderr}");
    assert!(
        printed.contains("node = \"2\"  # command line"),
        "{printed}"
    );
    assert!(printed.contains("  # config file"), "{printed}");
}

// `--max-sessions` bounds the live sessions of the whole master (the
// SPEC's limits table): one past it is refused with `LimitReached`, and
// one ending makes room again.
#[tokio::test]
async fn max_sessions_refuses_the_session_past_it_until_one_ends() {
    let (mut child, addr) = common::spawn_serve(&[
        "--listen",
        "127.0.0.1:0",
        "--in-memory",
        "--max-sessions",
        "2",
    ]);
    let client = leasehold::Client::connect(addr).await.unwrap();
    let options = || leasehold::SessionOptions::new("bounded");
    let first = client.create_session(options()).await.unwrap();
    let _second = client.create_session(options()).await.unwrap();
    let refused = client.create_session(options()).await.expect_err("refused");
    assert_eq!(
        refused.code(),
        Some(leasehold_protocol::ErrorCode::LimitReached),
        "{refused}"
    );
    first.close().await.unwrap();
    client.create_session(options()).await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
}

// KA-2: a margin past a quarter of the longest lease is capped for every
// session; the master says so at start rather than take it silently.
#[test]
fn a_keepalive_margin_past_a_quarter_of_the_longest_lease_is_warned_of() {
    let mut child = start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--in-memory",
            "--keepalive-margin",
            "30s",
        ],
        &[],
    );
    assert!(first_line(&mut child).starts_with("listening on"));
    let _ = child.kill();
    let _ = child.wait();
    let said = stderr_of(&mut child);
    assert!(
        said.contains("--keepalive-margin 30s") && said.contains("capped at a quarter"),
        "{said}"
    );
    let mut quiet = start(&["serve", "--listen", "127.0.0.1:0", "--in-memory"], &[]);
    assert!(first_line(&mut quiet).starts_with("listening on"));
    let _ = quiet.kill();
    let _ = quiet.wait();
    assert!(!stderr_of(&mut quiet).contains("--keepalive-margin"));
}
