//! A three-member cell in one process, on loopback: clients find the
//! master through any member, and sessions, locks, sequencers and
//! acknowledged writes ride through the master's loss (SPEC "The cell").

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{Client, LockOptions, PutOptions, SessionOptions, SessionState};
use leasehold_protocol::{ClientFrame, Hello, ServerFrame};
use leasehold_server::cell::{MemberConfig, Storage, TcpDialer, Timing};
use leasehold_server::{Config, ServerTls, TlsFiles};
use leasehold_tests::certs::{Pair, Pki};
use leasehold_tests::fixture::TempDir;
use leasehold_tests::raw::RawConnection;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Member {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

struct Cell {
    members: BTreeMap<u64, Member>,
    addrs: BTreeMap<u64, String>,
    /// Each member's HTTP port (`OPS-2`).
    http: BTreeMap<u64, std::net::SocketAddr>,
    /// How to speak to the members when they speak TLS.
    tls: Option<leasehold_tests::raw::RawTls>,
    _dirs: Vec<TempDir>,
}

fn timing() -> Timing {
    Timing {
        heartbeat: Duration::from_millis(50),
        election_min: Duration::from_millis(300),
        election_max: Duration::from_millis(600),
        announced_election_max: None,
    }
}

async fn cell(name: &str) -> Cell {
    cell_speaking(name, None).await
}

/// A cell whose members speak mutual TLS with `pki`'s certificates
/// (`CELL-11`), or plaintext.
async fn cell_speaking(name: &str, pki: Option<&Pki>) -> Cell {
    let mut listeners = BTreeMap::new();
    let mut addrs = BTreeMap::new();
    for id in 1..=3u64 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(id, l.local_addr().unwrap().to_string());
        listeners.insert(id, l);
    }
    let mut members = BTreeMap::new();
    let mut dirs = Vec::new();
    let mut http = BTreeMap::new();
    for (id, listener) in listeners {
        let port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        http.insert(id, port.local_addr().unwrap());
        let dir = TempDir::new(&format!("cell-{name}-{id}"));
        let member = MemberConfig {
            cell: format!("test-{name}"),
            secret: None,
            id,
            members: addrs.clone(),
            storage: Storage::Dir(dir.path().to_path_buf()),
            timing: timing(),
            snapshot_every: leasehold_server::cell::DEFAULT_SNAPSHOT_EVERY,
            broken: Default::default(),
            join: false,
        };
        dirs.push(dir);
        let tls = pki.map(|pki| {
            let Pair { cert, key } = pki.members[id as usize - 1].clone();
            let files = TlsFiles {
                cert,
                key,
                client_ca: Some(pki.ca.clone()),
            };
            ServerTls::load(files).expect("the member's certificate loads")
        });
        let config = Config {
            min_lease: Duration::from_millis(100),
            tls,
            metrics: leasehold_server::Metrics::for_member(),
            ..Config::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let dialer = Arc::new(TcpDialer);
            leasehold_server::cell::serve_with_http(
                listener,
                config,
                member,
                dialer,
                Some(port),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
        });
        members.insert(id, Member { stop, task });
    }
    let tls = pki.map(|pki| {
        let client = Some((pki.client.cert.as_path(), pki.client.key.as_path()));
        leasehold_tests::raw::RawTls::load(&pki.ca, client, "127.0.0.1").unwrap()
    });
    Cell {
        members,
        addrs,
        http,
        tls,
        _dirs: dirs,
    }
}

impl Cell {
    fn addr_list(&self) -> String {
        self.addrs.values().cloned().collect::<Vec<_>>().join(",")
    }

    /// What member `id` answers a Hello with, on the wire: its Welcome, or
    /// the master's address.
    async fn hello(&self, id: u64) -> ServerFrame {
        let addr = self.addrs[&id].parse().unwrap();
        let mut raw = RawConnection::connect_over(addr, self.tls.as_ref()).await;
        raw.send(ClientFrame::Hello(Hello::current())).await;
        raw.recv().await.expect("an answer to Hello")
    }

    /// The member serving as master: it alone welcomes a client.
    async fn master(&self) -> u64 {
        for id in self.members.keys() {
            if let ServerFrame::Welcome(_) = self.hello(*id).await {
                return *id;
            }
        }
        panic!("no member serves as master");
    }

    async fn stop(&mut self, id: u64) {
        let member = self.members.remove(&id).unwrap();
        let _ = member.stop.send(());
        member.task.await.unwrap();
    }
}

/// Member `id`'s metrics, once `ready` holds of them (at most 10 s).
async fn member_metrics(cell: &Cell, id: u64, ready: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = leasehold_tests::http::get(cell.http[&id], "/metrics", None)
            .await
            .body;
        if ready(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "member {id} never showed it:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// OPS-1, OPS-3: each member's HTTP port shows its role, the term, its log
// positions and its health; the master shows each follower's lag and the
// master lease it holds; after the master stops, the next one shows the
// leader's change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_shows_its_role_term_and_lag_on_its_http_port() {
    use leasehold_tests::http::{get, sample};
    let mut cell = cell("http").await;
    let client = Client::connect(cell.addr_list()).await.unwrap();
    client.put("svc/a", "1", PutOptions::new()).await.unwrap();
    let master = cell.master().await;
    let leader = "leasehold_cell_role{role=\"leader\"}";
    let follower = "leasehold_cell_role{role=\"follower\"}";
    let text = member_metrics(&cell, master, |t| {
        sample(t, "leasehold_cell_master") == Some(1.0)
            && sample(t, "leasehold_cell_applied_index") >= Some(1.0)
    })
    .await;
    assert_eq!(sample(&text, leader), Some(1.0), "{text}");
    let term = sample(&text, "leasehold_cell_term").expect("a term");
    assert!(term >= 1.0, "{text}");
    let commit = sample(&text, "leasehold_cell_commit_index").expect("a commit index");
    assert!(commit >= sample(&text, "leasehold_cell_applied_index").unwrap_or(0.0));
    assert!(sample(&text, "leasehold_cell_master_lease_left_seconds") > Some(0.0));
    assert_eq!(sample(&text, "leasehold_sessions"), Some(0.0), "{text}");
    for id in cell.members.keys().filter(|id| **id != master) {
        let lag = format!("leasehold_cell_follower_lag_entries{{member=\"{id}\"}}");
        assert!(sample(&text, &lag).is_some(), "no lag for {id}:\n{text}");
        // The cell's epoch, as the follower's replica has it once it has
        // applied the entry that set it: on a loaded machine a follower
        // may be a moment behind.
        let epoch = sample(&text, "leasehold_epoch");
        let theirs = member_metrics(&cell, *id, |t| {
            sample(t, follower) == Some(1.0)
                && sample(t, "leasehold_cell_term") == Some(term)
                && sample(t, "leasehold_epoch") == epoch
        })
        .await;
        assert_eq!(sample(&theirs, "leasehold_cell_master"), Some(0.0));
        assert_eq!(sample(&theirs, leader), Some(0.0));
        assert!(sample(&theirs, "leasehold_cell_applied_index") > Some(0.0));
        assert_eq!(
            sample(&theirs, "leasehold_cell_master_lease_left_seconds"),
            Some(0.0)
        );
    }
    for id in cell.members.keys() {
        let health = get(cell.http[id], "/health", None).await;
        assert_eq!(health.status, 200, "member {id}: {}", health.body);
    }
    // OPS-5: each member's page data says what `cell status` says; the
    // master's has the master's figures too, a follower's none.
    for id in cell.members.keys() {
        let answer = get(cell.http[id], "/api/status", None).await;
        assert_eq!(answer.status, 200, "member {id}: {}", answer.body);
        let status: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(status["cell"]["id"], *id, "{status}");
        assert_eq!(status["cell"]["leader"], master, "{status}");
        assert_eq!(status["cell"]["members"].as_object().unwrap().len(), 3);
        assert_eq!(status["master"].is_null(), *id != master, "{status}");
        if *id == master {
            assert_eq!(status["master"]["nodes"], 1, "{status}");
        }
    }

    cell.stop(master).await;
    // Once the next master serves, a write goes through.
    tokio::time::timeout(Duration::from_secs(30), async {
        while client.put("svc/a", "2", PutOptions::new()).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a new master serves");
    let next = cell.master().await;
    let text = member_metrics(&cell, next, |t| {
        sample(t, "leasehold_cell_master") == Some(1.0)
            && sample(t, "leasehold_cell_term") > Some(term)
    })
    .await;
    assert!(
        sample(&text, "leasehold_cell_leader_changes_seen_total") >= Some(2.0),
        "from none to the first master, then to this one:\n{text}"
    );
    assert!(
        sample(&text, "leasehold_cell_elections_total") >= Some(1.0),
        "{text}"
    );
    let gone = format!("leasehold_cell_follower_lag_entries{{member=\"{master}\"}}");
    assert!(
        sample(&text, &gone).is_some(),
        "the stopped member lags:\n{text}"
    );
}

// CELL-7, FO-1..FO-6: a session with a lock and a write, made through the
// cell's master, rides through that master's loss: the lock and its
// sequencer stay valid, the write is there, and the epoch is higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_its_lock_and_an_acknowledged_write_ride_through_the_masters_loss() {
    let mut cell = cell("ride").await;
    let client = Client::connect(cell.addr_list()).await.unwrap();
    let first_epoch = client.epoch().await.unwrap();
    let index = client
        .put("svc/db", "10.0.0.5", PutOptions::new())
        .await
        .unwrap();
    let session = client
        .create_session(SessionOptions::new("holder").lease(Duration::from_secs(10)))
        .await
        .unwrap();
    let guard = session
        .try_lock("svc/leader", LockOptions::exclusive())
        .await
        .unwrap();
    let sequencer = guard.sequencer_bytes().to_vec();

    let master = cell.master().await;
    for id in cell.members.keys().filter(|id| **id != master) {
        // CELL-7: a follower names the master.
        match cell.hello(*id).await {
            ServerFrame::Redirect { master: Some(addr) } => assert_eq!(addr, cell.addrs[&master]),
            other => panic!("member {id} answered {other:?}"),
        }
    }
    // FO-6: the session reports Failover, then Normal, once it hears of
    // the new master; until then it is Normal under the old epoch.
    let failed_over = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = failed_over.clone();
    session.on_state_change(move |state| {
        if state == SessionState::Failover {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    cell.stop(master).await;

    let mut states = session.watch_state();
    let back = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let epoch = client.epoch().await;
            if matches!(epoch, Ok(e) if e > first_epoch)
                && failed_over.load(std::sync::atomic::Ordering::SeqCst)
                && *states.borrow_and_update() == SessionState::Normal
            {
                return epoch.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a new master serves the session");
    assert!(back > first_epoch);
    assert!(client.check_sequencer(&sequencer).await.unwrap());
    let node = client
        .get("svc/db")
        .await
        .unwrap()
        .expect("the write survived");
    assert_eq!(node.stat.modify_index, index);
    assert_eq!(session.state(), SessionState::Normal);
    guard.release().await.unwrap();
    for id in cell.members.keys().copied().collect::<Vec<_>>() {
        cell.stop(id).await;
    }
}

// CELL-7: a master that loses its quorum stops, and a client connected to
// it reads a Close that says so, not a bare end of the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_loses_its_quorum_closes_its_clients_connections_saying_why() {
    let mut cell = cell("close").await;
    // The first master needs an election first.
    Client::connect(cell.addr_list()).await.unwrap();
    let master = cell.master().await;
    let mut raw = RawConnection::connect(cell.addrs[&master].parse().unwrap()).await;
    raw.send(ClientFrame::Hello(Hello::current())).await;
    assert!(matches!(raw.recv().await, Some(ServerFrame::Welcome(_))));
    let others: Vec<u64> = cell
        .members
        .keys()
        .copied()
        .filter(|id| *id != master)
        .collect();
    for id in others {
        cell.stop(id).await;
    }
    let frame = tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("the master stops within its lease");
    match frame {
        Some(ServerFrame::Close(error)) => {
            assert_eq!(error.code, leasehold_protocol::ErrorCode::Internal);
            assert!(error.message.contains("master"), "{}", error.message);
        }
        other => panic!("expected Close, got {other:?}"),
    }
}

// CELL-7: a client given the cell's members finds the master even when the
// first member it tries cannot be reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_goes_past_a_member_it_cannot_reach() {
    let cell = cell("past").await;
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let client = Client::connect(format!("{gone},{}", cell.addr_list()))
        .await
        .expect("past the member that is gone");
    client.put("svc/k", "v", PutOptions::new()).await.unwrap();
}

// CELL-7: given one member's address, and that member not the master, a
// client goes where its redirect names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_given_only_a_followers_address_finds_the_master() {
    let cell = cell("one-follower").await;
    let client = Client::connect(cell.addr_list()).await.unwrap();
    client.put("svc/k", "v", PutOptions::new()).await.unwrap();
    let master = cell.master().await;
    let follower = cell.addrs.keys().find(|id| **id != master).unwrap();
    let client = Client::connect(cell.addrs[follower].clone())
        .await
        .expect("redirected to the master");
    assert_eq!(
        client.get("svc/k").await.unwrap().unwrap().contents,
        Some(b"v".to_vec())
    );
}

// ACL-7: rules, tokens and access control made on one master hold after
// it is stopped and another member takes over: they are in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_and_tokens_made_on_one_master_hold_on_the_next() {
    let mut cell = cell("acl").await;
    let admin = Client::connect(cell.addr_list()).await.unwrap();
    let first_epoch = admin.epoch().await.unwrap();
    admin.put("jobs/a", "1", PutOptions::new()).await.unwrap();
    admin.put("svc/db", "2", PutOptions::new()).await.unwrap();
    for rule in ["\"\" root all", "jobs/ ci read,lock"] {
        admin.set_rule(rule.parse().unwrap()).await.unwrap();
    }
    let root = admin.create_token("root", "").await.unwrap().to_string();
    let ci = admin.create_token("ci", "").await.unwrap().to_string();
    let as_root = leasehold::ClientConfig {
        token: Some(root),
        ..leasehold::ClientConfig::default()
    };
    let root = Client::connect_with(cell.addr_list(), as_root)
        .await
        .unwrap();
    root.set_access_control(true).await.unwrap();

    let master = cell.master().await;
    cell.stop(master).await;
    let as_ci = leasehold::ClientConfig {
        token: Some(ci),
        connect_timeout: Duration::from_secs(30),
        ..leasehold::ClientConfig::default()
    };
    let ci = Client::connect_with(cell.addr_list(), as_ci).await.unwrap();
    assert!(ci.epoch().await.unwrap() > first_epoch);
    assert!(ci.get("jobs/a").await.unwrap().is_some());
    let refused = ci.get("svc/db").await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(leasehold_protocol::ErrorCode::PermissionDenied)
    );
    let anonymous = Client::connect(cell.addr_list()).await.unwrap();
    let identity = anonymous.who_am_i().await.unwrap();
    assert!(identity.access_control);
    assert!(anonymous.get("jobs/a").await.is_err());
    for id in cell.members.keys().copied().collect::<Vec<_>>() {
        cell.stop(id).await;
    }
}

// CELL-11, ACL-7: a cell whose members speak mutual TLS serves clients
// over TLS, each acting as its certificate's principal; rules made on one
// master hold on the next, once it is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_rules_made_on_one_master_hold_on_the_next() {
    let dir = TempDir::new("cell-tls-pki");
    let pki = Pki::new(dir.path(), "acl-cell");
    let mut cell = cell_speaking("tls-acl", Some(&pki)).await;
    let Pair { cert, key } = &pki.client;
    let tls = leasehold::TlsOptions::new(&pki.ca).client_certificate(cert, key);
    let config = |token: Option<String>| leasehold::ClientConfig {
        tls: Some(tls.clone()),
        token,
        connect_timeout: Duration::from_secs(30),
        ..leasehold::ClientConfig::default()
    };
    let client = Client::connect_with(cell.addr_list(), config(None))
        .await
        .unwrap();
    let identity = client.who_am_i().await.unwrap();
    assert_eq!(identity.principal.as_deref(), Some("acl-cell-client"));
    client.put("jobs/a", "1", PutOptions::new()).await.unwrap();
    client.put("svc/db", "2", PutOptions::new()).await.unwrap();
    for rule in ["\"\" acl-cell-client all", "jobs/ ci read"] {
        client.set_rule(rule.parse().unwrap()).await.unwrap();
    }
    let ci = client.create_token("ci", "").await.unwrap().to_string();
    client.set_access_control(true).await.unwrap();
    let first_epoch = client.epoch().await.unwrap();

    let master = cell.master().await;
    cell.stop(master).await;
    let ci = Client::connect_with(cell.addr_list(), config(Some(ci)))
        .await
        .unwrap();
    assert!(ci.epoch().await.unwrap() > first_epoch);
    assert!(ci.get("jobs/a").await.unwrap().is_some());
    let refused = ci.get("svc/db").await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(leasehold_protocol::ErrorCode::PermissionDenied)
    );
    for id in cell.members.keys().copied().collect::<Vec<_>>() {
        cell.stop(id).await;
    }
}
