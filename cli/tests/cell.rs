//! A three-member cell of real `leasehold serve` processes on loopback:
//! the master is killed with SIGKILL under writes and lock traffic, and
//! the cell goes on (SPEC "The cell").

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cell::{cli_riding_elections, Cell};
use common::traffic::{locker, writer, Acknowledged};
use leasehold::{Client, LockOptions, Remedy, SessionOptions, SessionState};
use tokio::time::Instant;

// CELL-6, CELL-7, FO-1..FO-6: SIGKILL the master under writes and lock
// traffic; a new master serves under a higher epoch, no acknowledged write
// is lost, no lock generation was granted twice, and a holder keeps its
// lock and sequencer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_master_loses_no_acknowledged_write_and_grants_no_generation_twice() {
    let mut cell = Cell::start("kill");
    let (master, epoch) = cell.master().await;
    let addrs = cell.addrs();

    // On a loaded machine a new cell can elect again soon after its first
    // master was seen: the holder's setup is made again if that cut it off.
    let mut tries = 0;
    let (_holder_client, holder, guard) = loop {
        tries += 1;
        let setup = async {
            let client = Client::connect(addrs.clone()).await?;
            let session = client
                .create_session(SessionOptions::new("holder").lease(Duration::from_secs(10)))
                .await?;
            let guard = session
                .try_lock("svc/leader", LockOptions::exclusive())
                .await?;
            Ok::<_, leasehold::ClientError>((client, session, guard))
        };
        match setup.await {
            Ok(made) => break made,
            Err(e)
                if tries < 5
                    && matches!(e.remedy(), Remedy::Reconnect | Remedy::OutcomeUnknown) =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the holder's setup: {e}"),
        }
    };
    let sequencer = guard.sequencer_bytes().to_vec();

    let seen = Arc::new(Mutex::new(Acknowledged::default()));
    let until = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for c in 0..4 {
        let client = Client::connect(addrs.clone()).await.unwrap();
        let name = format!("c{c}");
        tasks.push(if c < 3 {
            tokio::spawn(writer(client, name, until, seen.clone()))
        } else {
            tokio::spawn(locker(
                client,
                name,
                Duration::from_secs(3),
                until,
                seen.clone(),
            ))
        });
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    cell.kill(master);
    for task in tasks {
        task.await.unwrap();
    }

    let (next, next_epoch) = cell.master().await;
    assert_ne!(next, master);
    assert!(next_epoch > epoch, "epoch {epoch} then {next_epoch}");
    let check = Client::connect(cell.addrs()).await.unwrap();
    let (writes, grants) = {
        let seen = seen.lock().unwrap();
        (seen.writes.clone(), seen.grants.clone())
    };
    assert!(
        writes.len() > 20,
        "only {} writes acknowledged",
        writes.len()
    );
    for (key, value) in &writes {
        let got = check
            .get(key)
            .await
            .unwrap()
            .and_then(|n| n.contents)
            .map(|c| String::from_utf8(c).unwrap());
        assert_eq!(got.as_deref(), Some(value.as_str()), "{key} lost");
    }
    for ((key, generation), sessions) in &grants {
        assert_eq!(
            sessions.len(),
            1,
            "{key} generation {generation} granted to {sessions:?}"
        );
    }
    assert!(check.check_sequencer(&sequencer).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while holder.state() != SessionState::Normal {
        assert!(Instant::now() < deadline, "the holder never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    guard.release().await.unwrap();
}

// CELL-1, CELL-8: with LEASEHOLD_ADDR naming the whole cell and no
// --listen, each member listens on its own --cell address (not on the
// list), and `leasehold cell status` reads the same LEASEHOLD_ADDR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_started_with_the_cell_in_leasehold_addr_listen_on_their_own_address() {
    let cell = Cell::start_as("cell-env", false);
    cell.master().await;
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["cell", "status"])
        .env("LEASEHOLD_ADDR", cell.addrs())
        .output()
        .expect("run leasehold cell status");
    assert!(status.status.success(), "{status:?}");
    let out = String::from_utf8_lossy(&status.stdout);
    let lines: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines.iter().all(|l| !l.contains("unreachable")), "{out}");
    let masters = lines.iter().filter(|l| l.contains(" yes ")).count();
    assert_eq!(masters, 1, "{out}");
}

// A member that is down costs each other member one line of log, when it
// becomes unreachable, not a line per retry; the replication engine's own
// account (state dumps, each retry) is left to RUST_LOG.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_down_is_one_line_in_each_other_members_log() {
    let mut cell = Cell::start_as("quiet", true);
    let (master, _) = cell.master().await;
    let down = if master == 3 { 2 } else { 3 };
    // What each member logged before the kill: on a loaded machine a
    // member may go silent for a moment at start and say so, once, then
    // that it is back; only what the kill brings is counted.
    let dir = cell.dir.clone();
    let log_of = |id: &u64| std::fs::read_to_string(dir.join(format!("log-{id}"))).unwrap();
    let before: std::collections::BTreeMap<u64, usize> = cell
        .members
        .keys()
        .map(|id| (*id, log_of(id).lines().count()))
        .collect();
    cell.kill(down);
    // Past several of the engine's retries (every half second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in cell.members.keys() {
        let log = log_of(id);
        assert!(!log.contains("openraft"), "member {id}:\n{log}");
        let since: Vec<&str> = log.lines().skip(before[id]).collect();
        let told = since
            .iter()
            .filter(|l| l.contains(&format!("member {down} is unreachable")))
            .count();
        assert!(told <= 1, "member {id} said so {told} times:\n{log}");
        assert!(since.len() <= 5, "member {id}:\n{log}");
    }
    let master_log = std::fs::read_to_string(cell.dir.join(format!("log-{master}"))).unwrap();
    assert!(
        master_log.contains(&format!("member {down} is unreachable")),
        "{master_log}"
    );
}

// A member with no operator token says at start, as a single master does,
// that anyone may end any session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_an_operator_token_warns_at_start() {
    let cell = Cell::start_as("no-operator", true);
    cell.master().await;
    for id in cell.members.keys() {
        let log = std::fs::read_to_string(cell.dir.join(format!("log-{id}"))).unwrap();
        assert!(
            log.contains("no --operator-token-file"),
            "member {id}:\n{log}"
        );
    }
}

// Whoever reads a cell's secret may speak Raft to its members: a member
// whose secret file other users may read says so at start.
#[test]
fn a_member_whose_secret_others_may_read_warns_at_start() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::PermissionsExt;
    let dir =
        std::env::temp_dir().join(format!("leasehold-cli-open-secret-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("cell-secret");
    std::fs::write(&secret, "a secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut member = std::process::Command::new(common::BIN)
        .args(["serve", "--cell", &format!("1={addr}"), "--node", "1"])
        .args(["--listen", &addr, "--data-dir"])
        .arg(dir.join("m1"))
        .arg("--cell-secret-file")
        .arg(&secret)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = member.stderr.take().unwrap();
    // The warning comes before the member listens; a few lines at most.
    let warned = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .take_while(|line| !line.contains("serving as a cell member"))
        .take(50)
        .any(|line| line.contains("other users may read the cell secret file"));
    let _ = member.kill();
    let _ = member.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(warned, "no warning about the secret's mode");
}

// A member whose data directory is refused (here: another member runs on
// it) says why and exits, without announcing a port it will never serve.
#[test]
fn a_member_refused_its_data_directory_announces_no_port() {
    use std::io::{BufRead, BufReader};
    let dir = std::env::temp_dir().join(format!("leasehold-cli-dir-held-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let first = format!("127.0.0.1:{}", free_port());
    let second = format!("127.0.0.1:{}", free_port());
    let cell = format!("1={first},2={second}");
    let member = |addr: &str, node: &str| {
        let mut command = std::process::Command::new(common::BIN);
        command
            .args(["serve", "--cell", &cell, "--node", node, "--listen", addr])
            .arg("--data-dir")
            .arg(dir.join("data"));
        command
    };
    let mut running = member(&first, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kept open while the member runs: it may print more.
    let mut said = BufReader::new(running.stdout.take().unwrap()).lines();
    let announced = said.next().and_then(Result::ok).unwrap_or_default();
    assert!(announced.starts_with("listening on"), "{announced:?}");
    let refused = within_a_minute(member(&second, "2"));
    let _ = running.kill();
    let _ = running.wait();
    drop(said);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    assert_eq!(String::from_utf8_lossy(&refused.stdout), "", "{refused:?}");
}

/// `leasehold cell status` against `addrs`.
/// Removes a member other than `master` with `leasehold cell remove`, and
/// returns its id.
fn remove_a_follower(cell: &Cell, master: u64) -> u64 {
    let removed = if master == 3 { 2 } else { 3 };
    let remove = cli_riding_elections(&[
        "--addr",
        &cell.addrs(),
        "cell",
        "remove",
        &removed.to_string(),
        "--cell-secret-file",
        cell.secret_file().to_str().unwrap(),
    ]);
    assert!(remove.status.success(), "{remove:?}");
    removed
}

fn cell_status(addrs: &str) -> std::process::Output {
    cli_riding_elections(&["--addr", addrs, "cell", "status"])
}

// CELL-8: given one member, `cell status` learns the configuration from
// it and shows every member; a member removed but still running is shown
// as removed, not as a learner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_status_shows_every_member_from_any_one_and_names_a_removed_one() {
    let cell = Cell::start("status-all");
    let (master, _) = cell.master().await;
    let other = if master == 1 { 2 } else { 1 };
    let one = cell.members[&other].1.clone();
    let out = cell_status(&one);
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    for (_, addr) in cell.members.values() {
        assert!(
            printed.contains(addr.as_str()),
            "{addr} missing:\n{printed}"
        );
    }
    let removed = remove_a_follower(&cell, master);
    let out = cell_status(&cell.addrs());
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    let line = printed
        .lines()
        .find(|l| l.contains(cell.members[&removed].1.as_str()))
        .unwrap_or_else(|| panic!("no line for the removed member:\n{printed}"));
    assert!(line.contains("removed"), "{line}");
}

// CELL-7: a member removed but still running no longer hears the cell's
// leader, and may stand in elections of its own that leave it knowing
// none; a client that named only it is sent to the last leader it heard,
// not told that the cell has no master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_member_still_running_sends_clients_to_the_master() {
    let cell = Cell::start("removed-redirects");
    let (master, _) = cell.master().await;
    let removed = remove_a_follower(&cell, master);
    let addr = cell.members[&removed].1.clone();
    // Until it has stood on its own, it may still know the leader.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = leasehold_server::cell::query_status(&addr).await;
        if status.is_ok_and(|s| s.leader.is_none()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the removed member still knows the leader after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let put = cli_riding_elections(&["--addr", &addr, "put", "svc/k", "v"]);
    assert!(put.status.success(), "{put:?}");
}

// OPS-4, CELL-8: `status` given one member prints the master's figures,
// then every member as `cell status` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_the_masters_figures_then_every_member() {
    let cell = Cell::start("status-figures");
    let (master, _) = cell.master().await;
    let other = if master == 1 { 2 } else { 1 };
    let out = cli_riding_elections(&["--addr", &cell.members[&other].1, "status"]);
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(printed.starts_with("version "), "{printed}");
    assert!(printed.contains("\nsessions  "), "{printed}");
    assert!(
        printed.contains("stored    - "),
        "a cell's members say their own: {printed}"
    );
    assert!(printed.contains("\nID  ADDRESS"), "{printed}");
    for (_, addr) in cell.members.values() {
        assert!(
            printed.contains(addr.as_str()),
            "{addr} missing:\n{printed}"
        );
    }
}

// OPS-6: `snapshot save` given one member saves the cell's master's state,
// and it restores into a single master's directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cells_snapshot_is_saved_from_any_member_and_restores() {
    let cell = Cell::start("snapshot");
    let (master, _) = cell.master().await;
    let other = if master == 1 { 2 } else { 1 };
    let run = |args: &[&str]| {
        let mut all = vec!["--addr", cell.members[&other].1.as_str()];
        all.extend_from_slice(args);
        cli_riding_elections(&all)
    };
    let put = run(&["put", "svc/db", "10.0.0.5"]);
    assert!(put.status.success(), "{put:?}");
    let dir = std::env::temp_dir().join(format!("leasehold-cell-snap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cell.snap");
    let saved = run(&["snapshot", "save", file.to_str().unwrap()]);
    assert!(saved.status.success(), "{saved:?}");
    let data = dir.join("single");
    let restored = run(&[
        "snapshot",
        "restore",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(restored.status.success(), "{restored:?}");
    let store = leasehold_server::Backup::read(&file).unwrap().summary();
    assert_eq!(store.nodes, 1, "{store:?}");
    // A member's directory restored for member 1 is refused to member 2,
    // which would never serve on it, with what to do instead.
    let member = dir.join("member-1");
    let restored = run(&[
        "snapshot",
        "restore",
        file.to_str().unwrap(),
        "--data-dir",
        member.to_str().unwrap(),
        "--cell",
        "1=127.0.0.1:1",
        "--node",
        "1",
    ]);
    assert!(restored.status.success(), "{restored:?}");
    let started = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&member)
        .args(["--cell", "1=127.0.0.1:1,2=127.0.0.1:2", "--node", "2"])
        .output()
        .unwrap();
    assert!(!started.status.success(), "{started:?}");
    let said = String::from_utf8_lossy(&started.stderr);
    assert!(
        said.contains("member 1's") && said.contains("--node 1"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// CELL-10: in a cell with a secret and no operator token, a change of
// members that does not present the secret is refused by the leader, and
// the member stays; the CLI asks for the right before it connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_without_the_operators_right_is_refused() {
    use leasehold_server::cell::{change_members, Change, ChangeReply, ChangeRequest};

    let cell = Cell::start("change-right");
    let (master, _) = cell.master().await;
    let leader = cell.members[&master].1.clone();
    let removed = if master == 3 { 2 } else { 3 };
    for credential in [None, Some("a guess".to_string())] {
        let request = ChangeRequest {
            change: Change::Remove { id: removed },
            credential,
        };
        let reply = change_members(&leader, &request).await.unwrap();
        let ChangeReply::Refused(why) = reply else {
            panic!("not refused: {reply:?}");
        };
        assert!(why.contains("--cell-secret-file"), "{why}");
    }
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["--addr", &leader, "cell", "remove", &removed.to_string()])
        .env_remove("LEASEHOLD_CELL_SECRET_FILE")
        .env_remove("LEASEHOLD_OPERATOR_TOKEN_FILE")
        .output()
        .unwrap();
    // EX_USAGE: the command needs a flag it was not given.
    assert_eq!(cli.status.code(), Some(64), "{cli:?}");
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(stderr.contains("--cell-secret-file"), "{stderr}");
    let out = cell_status(&cell.addrs());
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    let line = printed
        .lines()
        .find(|l| l.contains(cell.members[&removed].1.as_str()))
        .unwrap_or_else(|| panic!("no line for the member:\n{printed}"));
    assert!(!line.contains("removed"), "{line}");
}

// CELL-8: with no member serving as master (two of three down: no
// quorum), `cell status` says so and exits 69.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_status_exits_69_when_no_member_serves_as_master() {
    let (_cell, addrs) = one_member_left("status-none").await;
    let out = first_exit_69(|| cell_status(&addrs)).await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no master"), "{said}");
}

/// A cell of which only one follower is left running: no quorum, so no
/// master; and the members' addresses.
async fn one_member_left(name: &str) -> (Cell, String) {
    let mut cell = Cell::start(name);
    let (master, _) = cell.master().await;
    let addrs = cell.addrs();
    for id in [1, 2, 3].into_iter().filter(|id| *id != master).take(1) {
        cell.kill(id);
    }
    cell.kill(master);
    (cell, addrs)
}

/// Runs `command` until it exits 69, as it does once the last member has
/// no master to name (it never wins an election alone), for 20 s at most.
async fn first_exit_69(command: impl Fn() -> std::process::Output) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = command();
        if out.status.code() == Some(69) {
            return out;
        }
        assert!(Instant::now() < deadline, "still a master: {out:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// CELL-7: with no master to be found (two of three down), a data command
// fails with exit 69 and says what the members answered, not only that
// the time ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_with_no_master_to_find_says_the_members_have_none() {
    let (_cell, addrs) = one_member_left("get-none").await;
    let out = first_exit_69(|| {
        std::process::Command::new(common::BIN)
            .args(["--addr", &addrs, "get", "nothing/here"])
            .output()
            .expect("run leasehold")
    })
    .await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("has no master now"), "{said}");
    assert!(said.contains("cell status"), "{said}");
}

// A member that accepts and never answers: `cell remove` gives up after
// --request-timeout, saying the change may still be carried out (exit 3:
// outcome unknown), and `cell status` reports it unreachable (exit 69),
// rather than either waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_commands_give_up_on_a_member_that_never_answers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // Accepted and held open, read from, never answered.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let secret = std::env::temp_dir().join(format!("leasehold-silent-{}", std::process::id()));
    std::fs::write(&secret, "a cell secret of sixteen bytes or more").unwrap();
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["--addr", &addr, "--request-timeout", "1s"])
            .args(args)
            .env("LEASEHOLD_CELL_SECRET_FILE", &secret)
            .env_remove("LEASEHOLD_OPERATOR_TOKEN_FILE");
        within_a_minute(command)
    };
    // Blocking this worker: the other serves the silent listener.
    let removed = run(&["cell", "remove", "2"]);
    assert_eq!(removed.status.code(), Some(3), "{removed:?}");
    let said = String::from_utf8_lossy(&removed.stderr);
    assert!(
        said.contains("--request-timeout") && said.contains("may still"),
        "{said}"
    );
    let status = run(&["cell", "status"]);
    assert_eq!(status.status.code(), Some(69), "{status:?}");
    silent.abort();
    let _ = std::fs::remove_file(&secret);
}

// OPS-4, CELL-8: a member that accepts connections and never answers (a
// stopped process) named first: `status` and `cell status` still answer,
// each member asked at once within --request-timeout, not waiting on the
// silent one for ever, nor once per member in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_with_a_silent_member_named_first_answers_from_the_others() {
    let cell = Cell::start("status-silent");
    cell.master().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = listener.local_addr().unwrap().to_string();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let addrs = format!("{silent_addr},{}", cell.addrs());
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["--addr", &addrs, "--request-timeout", "1s"])
            .args(args);
        within_a_minute(command)
    };
    let status = run(&["status"]);
    assert!(status.status.success(), "{status:?}");
    let printed = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(printed.starts_with("version "), "{printed}");
    assert!(
        printed.contains("\nID  ADDRESS"),
        "a cell's members: {printed}"
    );
    let members = run(&["cell", "status"]);
    assert!(members.status.success(), "{members:?}");
    let printed = String::from_utf8_lossy(&members.stdout).to_string();
    let line = printed
        .lines()
        .find(|l| l.contains(silent_addr.as_str()))
        .unwrap_or_else(|| panic!("no line for the silent address:\n{printed}"));
    assert!(line.contains("unreachable"), "{line}");
    silent.abort();
}

/// Runs `command`, given a minute, far past the second each member is
/// given, and killed after it: a command that waits for ever fails the
/// test, not hangs it.
fn within_a_minute(mut command: std::process::Command) -> std::process::Output {
    let started = Instant::now();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{command:?} still waits after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

// CELL-7: a member that closes each connection before its Welcome (as one
// does while it stops being master) is passed over like one that cannot
// be reached: the client connects to the next member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_closing_connections_at_once_is_passed_over_when_connecting() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closing = listener.local_addr().unwrap().to_string();
    let closer = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let (mut master, addr) = common::spawn_serve(&["--listen", "127.0.0.1:0", "--in-memory"]);
    let client = Client::connect(format!("{closing},{addr}")).await;
    let _ = master.kill();
    let _ = master.wait();
    closer.abort();
    let client = client.expect("connected past the member that closes at once");
    drop(client);
}
