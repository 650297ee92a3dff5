//! Backups of a live master (SPEC `OPS-6`): a snapshot saved while
//! clients write and lock holds exactly what was acknowledged before it; a
//! master started on its restored directory serves every node, session
//! and lock generation of the original; damage is refused; and taking one
//! needs the operator's or an administrator's rights.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    Client, ClientConfig, ErrorCode, LockOptions, NodeStat, PutOptions, Rights, Rule,
    SavedSnapshot, SessionOptions,
};
use leasehold_server::{Backup, BackupError, Config};
use leasehold_tests::fixture::TempDir;
use leasehold_tests::server::{start, Setup, TestServer};

const OPERATOR_TOKEN: &str = "the operator token of the backup tests";

fn config() -> Config {
    Config {
        operator_token: Some(OPERATOR_TOKEN.into()),
        min_lease: Duration::from_millis(100),
        ..Config::default()
    }
}

async fn client(server: &TestServer, token: Option<&str>) -> Client {
    client_of(server.addr.to_string(), token).await
}

/// A client of the master at `addrs`, with `token` if given, that holds
/// the operator token.
async fn client_of(addrs: String, token: Option<&str>) -> Client {
    let config = ClientConfig {
        token: token.map(String::from),
        operator_token: Some(OPERATOR_TOKEN.into()),
        ..ClientConfig::default()
    };
    Client::connect_with(addrs, config).await.unwrap()
}

/// The operator's client of the master at `addrs`.
async fn operators_client(addrs: String) -> Client {
    client_of(addrs, Some(OPERATOR_TOKEN)).await
}

/// Saves `client`'s master's snapshot to `file`.
async fn save(client: &Client, file: &std::path::Path) -> SavedSnapshot {
    let mut out = std::fs::File::create(file).unwrap();
    let mut seen = 0;
    let saved = client
        .save_snapshot(&mut out, |done, total| {
            assert!(done >= seen && done <= total);
            seen = done;
        })
        .await
        .unwrap();
    out.sync_all().unwrap();
    assert_eq!(seen, saved.bytes, "progress reached the end");
    saved
}

/// Restores `file` into a new directory under `dir` and starts a master
/// on it.
async fn restored(file: &std::path::Path, dir: &TempDir) -> TestServer {
    let data = dir.path().join("restored");
    Backup::read(file).unwrap().restore(&data).unwrap();
    start(Setup::durable(&data, config())).await
}

/// A master on a data directory under `dir`, its operator's client, and a
/// session of the operator's with a long lease, after one write.
async fn original(dir: &TempDir) -> (TestServer, Client, leasehold::Session) {
    let server = start(Setup::durable(dir.path().join("data"), config())).await;
    let operator = client(&server, Some(OPERATOR_TOKEN)).await;
    let session = operator
        .create_session(SessionOptions::new("a").lease(Duration::from_secs(60)))
        .await
        .unwrap();
    operator
        .put("svc/db", b"10.0.0.5".to_vec(), PutOptions::new().flags(3))
        .await
        .unwrap();
    (server, operator, session)
}

/// Every node, with its contents and metadata, in key order.
async fn nodes(client: &Client) -> BTreeMap<String, (Vec<u8>, NodeStat)> {
    let mut all = BTreeMap::new();
    for key in client.list("", true).await.unwrap() {
        if let Some(node) = client.get(&key).await.unwrap() {
            all.insert(key, (node.contents.unwrap_or_default(), node.stat));
        }
    }
    all
}

// OPS-6: a snapshot saved while writers and lockers are busy holds every
// write acknowledged at or before its index, and none after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_saved_under_load_holds_exactly_the_writes_up_to_its_index() {
    let dir = TempDir::new("backup-load");
    let server = start(Setup::durable(dir.path().join("data"), config())).await;
    let operator = client(&server, Some(OPERATOR_TOKEN)).await;
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut load = Vec::new();
    for writer in 0..3 {
        let (client, acknowledged) = (client(&server, None).await, acknowledged.clone());
        load.push(tokio::spawn(async move {
            for n in 0..150 {
                let key = format!("load/{writer}/{n}");
                let index = client
                    .put(&key, n.to_string().into_bytes(), PutOptions::new())
                    .await
                    .unwrap();
                acknowledged.lock().unwrap().push((key, index));
            }
        }));
    }
    for locker in 0..2 {
        let client = client(&server, None).await;
        load.push(tokio::spawn(async move {
            let session = client
                .create_session(SessionOptions::new(format!("locker {locker}")))
                .await
                .unwrap();
            for _ in 0..40 {
                let guard = session
                    .lock("load/lock", LockOptions::exclusive())
                    .await
                    .unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    // Once some writes are in, the snapshot is taken while the rest go on.
    while acknowledged.lock().unwrap().len() < 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let file = dir.path().join("under-load.snap");
    let saved = save(&operator, &file).await;
    for task in load {
        task.await.unwrap();
    }
    let writes = acknowledged.lock().unwrap().clone();
    assert!(
        writes.iter().any(|(_, index)| *index > saved.index),
        "writes went on after the snapshot"
    );
    let restored = restored(&file, &dir).await;
    let reader = client(&restored, None).await;
    for (key, index) in &writes {
        let node = reader.get(key).await.unwrap();
        assert_eq!(
            node.is_some(),
            *index <= saved.index,
            "{key}, written at {index}, in a snapshot of index {}",
            saved.index
        );
    }
}

// OPS-6: a master on the restored directory serves every node (contents
// and metadata), session, lock holder and check of the original, under a
// higher epoch.
#[tokio::test]
async fn a_restored_master_serves_every_node_session_and_lock_of_the_original() {
    let dir = TempDir::new("backup-same");
    let (_server, operator, a) = original(&dir).await;
    let b = operator
        .create_session(SessionOptions::new("b").lease(Duration::from_secs(60)))
        .await
        .unwrap();
    // More than a frame holds: the snapshot is read in several pieces.
    for n in 0..6u8 {
        let contents = vec![n; 200 * 1024];
        operator
            .put(&format!("big/{n}"), contents, PutOptions::new())
            .await
            .unwrap();
    }
    let x = a
        .try_lock("locks/x", LockOptions::exclusive())
        .await
        .unwrap();
    let s1 = a.try_lock("locks/s", LockOptions::shared()).await.unwrap();
    let s2 = b.try_lock("locks/s", LockOptions::shared()).await.unwrap();
    operator
        .set_check("disk", leasehold::CheckStatus::Passing, "ok")
        .await
        .unwrap();
    operator
        .set_rule(Rule {
            prefix: "svc/".into(),
            principal: "reader".into(),
            rights: Rights::READ,
        })
        .await
        .unwrap();
    let file = dir.path().join("same.snap");
    let saved = save(&operator, &file).await;
    assert!(saved.bytes > 1 << 20, "{saved:?}");

    let restored = restored(&file, &dir).await;
    let copy = client(&restored, Some(OPERATOR_TOKEN)).await;
    same_state(&copy, &operator).await;
    for key in ["locks/x", "locks/s"] {
        let (was, is) = (
            operator.lock_info(key).await.unwrap(),
            copy.lock_info(key).await.unwrap(),
        );
        assert_eq!(is.holders, was.holders, "{key}");
    }
    for guard in [&x, &s1, &s2] {
        assert!(
            copy.check_sequencer(guard.sequencer_bytes()).await.unwrap(),
            "{} is still held in the copy",
            guard.key()
        );
    }
    assert_eq!(copy.list_checks().await.unwrap().len(), 1);
    assert!(copy.epoch().await.unwrap() > saved.epoch);
}

/// Starts member `id` of a cell whose members are `members`, on
/// `listener` and `dir`; `join`: it waits to be added.
fn member(
    id: u64,
    members: &BTreeMap<u64, String>,
    listener: tokio::net::TcpListener,
    dir: std::path::PathBuf,
    join: bool,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    use leasehold_server::cell::{MemberConfig, Storage, TcpDialer, Timing};
    let member = MemberConfig {
        cell: "restored".into(),
        secret: None,
        id,
        members: members.clone(),
        storage: Storage::Dir(dir),
        timing: Timing {
            heartbeat: Duration::from_millis(50),
            election_min: Duration::from_millis(300),
            election_max: Duration::from_millis(600),
            announced_election_max: None,
        },
        snapshot_every: leasehold_server::cell::DEFAULT_SNAPSHOT_EVERY,
        broken: Default::default(),
        join,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let dialer = Arc::new(TcpDialer);
        leasehold_server::cell::serve(listener, config(), member, dialer, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (stop, task)
}

/// What of a master's state a copy must serve alike: every node, the
/// sessions, each lock's holders, and checks and rules.
async fn same_state(copy: &Client, original: &Client) {
    assert_eq!(nodes(copy).await, nodes(original).await);
    let ids = |sessions: Vec<leasehold::SessionInfo>| {
        sessions
            .into_iter()
            .map(|s| (s.session, s.name))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(copy.list_sessions().await.unwrap()),
        ids(original.list_sessions().await.unwrap())
    );
    // Each lock's generation and holders; how long each held is not.
    let locks = |listings: Vec<leasehold::LockListing>| {
        listings
            .into_iter()
            .map(|l| {
                let holders: Vec<_> = l.holders.iter().map(|h| (h.session, h.mode)).collect();
                (l.key, l.lock_generation, holders)
            })
            .collect::<Vec<_>>()
    };
    let before = locks(original.list_locks("").await.unwrap());
    assert!(!before.is_empty());
    assert_eq!(locks(copy.list_locks("").await.unwrap()), before);
    assert_eq!(
        copy.list_checks().await.unwrap(),
        original.list_checks().await.unwrap()
    );
    assert_eq!(
        copy.rules().await.unwrap().0,
        original.rules().await.unwrap().0
    );
}

// OPS-6: a backup restores into a new cell's first member, which serves
// the original's every node, session and lock generation under a later
// epoch; members that join it are sent the state, and serve it once the
// first is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_a_new_cell_that_members_join() {
    use leasehold_server::cell::{change_members, Change, ChangeReply, ChangeRequest};
    let dir = TempDir::new("backup-cell");
    let (_server, operator, a) = original(&dir).await;
    let x = a
        .try_lock("locks/x", LockOptions::exclusive())
        .await
        .unwrap();
    operator
        .set_check("disk", leasehold::CheckStatus::Passing, "ok")
        .await
        .unwrap();
    let file = dir.path().join("cell.snap");
    let saved = save(&operator, &file).await;

    let mut listeners = Vec::new();
    let mut addrs = BTreeMap::new();
    for id in 1..=3u64 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(id, l.local_addr().unwrap().to_string());
        listeners.push(l);
    }
    let first_dir = dir.path().join("member-1");
    Backup::read(&file)
        .unwrap()
        .restore_member(&first_dir, 1, &addrs[&1])
        .unwrap();
    let mut listeners = listeners.into_iter();
    let only_first = BTreeMap::from([(1, addrs[&1].clone())]);
    let (stop_first, first) = member(1, &only_first, listeners.next().unwrap(), first_dir, false);
    let copy = operators_client(addrs[&1].clone()).await;
    same_state(&copy, &operator).await;
    assert!(copy.check_sequencer(x.sequencer_bytes()).await.unwrap());
    assert!(copy.epoch().await.unwrap() > saved.epoch);

    let mut running = Vec::new();
    for id in 2..=3u64 {
        let joiner = member(
            id,
            &addrs,
            listeners.next().unwrap(),
            dir.path().join(format!("member-{id}")),
            true,
        );
        running.push(joiner);
        let request = ChangeRequest {
            change: Change::Add {
                id,
                addr: addrs[&id].clone(),
            },
            credential: Some(OPERATOR_TOKEN.into()),
        };
        let reply = change_members(&addrs[&1], &request).await.unwrap();
        assert!(matches!(reply, ChangeReply::Done { .. }), "{reply:?}");
    }
    let _ = stop_first.send(());
    first.await.unwrap();
    let others = format!("{},{}", addrs[&2], addrs[&3]);
    let after = operators_client(others).await;
    same_state(&after, &operator).await;
    assert!(after.check_sequencer(x.sequencer_bytes()).await.unwrap());
    for (stop, task) in running {
        let _ = stop.send(());
        task.await.unwrap();
    }
}

// OPS-6: a damaged or truncated snapshot is refused with the reason, and
// nothing is restored.
#[tokio::test]
async fn a_damaged_or_truncated_snapshot_is_refused() {
    let dir = TempDir::new("backup-damaged");
    let server = start(Setup::durable(dir.path().join("data"), config())).await;
    let operator = client(&server, Some(OPERATOR_TOKEN)).await;
    operator
        .put("svc/db", b"10.0.0.5".to_vec(), PutOptions::new())
        .await
        .unwrap();
    let file = dir.path().join("whole.snap");
    save(&operator, &file).await;
    let whole = std::fs::read(&file).unwrap();
    let mut flipped = whole.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    for (name, bytes) in [
        ("flipped", flipped),
        ("truncated", whole[..whole.len() - 10].to_vec()),
        ("foreign", b"not a snapshot at all".to_vec()),
    ] {
        let damaged = dir.path().join(name);
        std::fs::write(&damaged, bytes).unwrap();
        match Backup::read(&damaged) {
            Err(BackupError::Damaged { reason, .. }) => {
                assert!(
                    reason.contains("checksum") || reason.contains("magic"),
                    "{name}: {reason}"
                )
            }
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
    let data = dir.path().join("not-made");
    assert!(Backup::read(&file).unwrap().restore(&data).is_ok());
    let refused = Backup::read(&file).unwrap().restore(&data).unwrap_err();
    assert!(refused.to_string().contains("not empty"), "{refused}");
}

// OPS-6: a snapshot holds every session's secret: with an operator token
// and access control off, only the operator takes one; with access
// control on, only a principal with admin on every key.
#[tokio::test]
async fn a_snapshot_is_only_the_operators_or_an_administrators() {
    let dir = TempDir::new("backup-rights");
    let server = start(Setup::durable(dir.path().join("data"), config())).await;
    let operator = client(&server, Some(OPERATOR_TOKEN)).await;
    let anyone = Client::connect(server.addr.to_string()).await.unwrap();
    let file = dir.path().join("x.snap");
    let mut out = std::fs::File::create(&file).unwrap();
    let refused = anyone.save_snapshot(&mut out, |_, _| {}).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::PermissionDenied),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("only the operator"),
        "{refused}"
    );

    operator
        .set_rule(Rule {
            prefix: "".into(),
            principal: "admin".into(),
            rights: Rights::ALL,
        })
        .await
        .unwrap();
    operator
        .set_rule(Rule {
            prefix: "".into(),
            principal: "reader".into(),
            rights: Rights::READ,
        })
        .await
        .unwrap();
    let admin = operator.create_token("admin", "backups").await.unwrap();
    let reader = operator.create_token("reader", "reads").await.unwrap();
    operator.set_access_control(true).await.unwrap();
    let reader = client(&server, Some(&reader.to_string())).await;
    let refused = reader.save_snapshot(&mut out, |_, _| {}).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::PermissionDenied),
        "{refused}"
    );
    let admin = client(&server, Some(&admin.to_string())).await;
    save(&admin, &file).await;
    Backup::read(&file).unwrap();

    // Admin at the root is not admin on every key: a longer prefix's rule
    // can take it away (ACL-2), and then the snapshot is refused.
    operator
        .set_rule(Rule {
            prefix: "hr/".into(),
            principal: "admin".into(),
            rights: Rights::NONE,
        })
        .await
        .unwrap();
    let refused = admin.save_snapshot(&mut out, |_, _| {}).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::PermissionDenied),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("lacks admin on some key"),
        "{refused}"
    );
}
