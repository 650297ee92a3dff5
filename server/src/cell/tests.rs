//! A three-member cell in one process, on loopback TCP.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;

use super::*;
use crate::state::Bounds;
use crate::store::encode;

struct Cell {
    name: String,
    members: BTreeMap<NodeId, Member>,
    listeners: BTreeMap<NodeId, tokio::task::JoinHandle<()>>,
    addrs: BTreeMap<NodeId, String>,
    snapshot_every: u64,
    _dirs: Vec<PathGuard>,
}

fn member_dir(name: &str, id: NodeId) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("leasehold-cell-{name}-{}-{id}", std::process::id()))
}

struct PathGuard(std::path::PathBuf);
impl Drop for PathGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn timing() -> Timing {
    Timing {
        heartbeat: Duration::from_millis(50),
        election_min: Duration::from_millis(300),
        election_max: Duration::from_millis(600),
    }
}

async fn accept(listener: tokio::net::TcpListener, member: Member) {
    // Connections end with the loop: a member stopped here holds nothing.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let member = member.clone();
        connections.spawn(async move {
            if let Ok(FirstFrame::Peer(framed, hello)) = first_frame(stream, 1 << 20).await {
                member.serve_peer(framed, hello).await;
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn cell(name: &str, size: u64) -> Cell {
    cell_snapshotting(name, size, DEFAULT_SNAPSHOT_EVERY).await
}

async fn cell_snapshotting(name: &str, size: u64, snapshot_every: u64) -> Cell {
    let mut listeners = BTreeMap::new();
    let mut addrs = BTreeMap::new();
    for id in 1..=size {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(id, l.local_addr().unwrap().to_string());
        listeners.insert(id, l);
    }
    let mut dirs = Vec::new();
    let mut starting = Vec::new();
    for id in 1..=size {
        let dir = member_dir(name, id);
        let _ = std::fs::remove_dir_all(&dir);
        dirs.push(PathGuard(dir.clone()));
        let config = MemberConfig {
            cell: format!("test-{name}"),
            id,
            members: addrs.clone(),
            storage: Storage::Dir(dir),
            timing: timing(),
            snapshot_every,
            unsafe_keep_master_lease: false,
        };
        starting.push(tokio::spawn(Member::start(
            config,
            Bounds::from(&crate::Config::default()),
            Arc::new(TcpDialer),
        )));
    }
    let mut members = BTreeMap::new();
    let mut tasks = BTreeMap::new();
    for (id, start) in (1..=size).zip(starting) {
        let member = start.await.unwrap().unwrap();
        let listener = listeners.remove(&id).unwrap();
        tasks.insert(id, tokio::spawn(accept(listener, member.clone())));
        members.insert(id, member);
    }
    Cell {
        name: name.to_string(),
        members,
        listeners: tasks,
        addrs,
        snapshot_every,
        _dirs: dirs,
    }
}

/// Waits (up to a deadline far beyond any election) until `f` holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Cell {
    fn leader(&self) -> Option<NodeId> {
        self.members.iter().find_map(|(id, m)| {
            let metrics = m.raft.metrics().borrow().clone();
            (metrics.state == ServerState::Leader).then_some(*id)
        })
    }

    async fn stop(&mut self, id: NodeId) {
        let listener = self.listeners.remove(&id).unwrap();
        listener.abort();
        let _ = listener.await;
        let member = self.members.remove(&id).unwrap();
        member.shutdown().await;
    }

    /// Starts member `id` again on its data directory and its address.
    async fn restart(&mut self, id: NodeId) {
        let config = MemberConfig {
            cell: format!("test-{}", self.name),
            id,
            members: self.addrs.clone(),
            storage: Storage::Dir(member_dir(&self.name, id)),
            timing: timing(),
            snapshot_every: self.snapshot_every,
            unsafe_keep_master_lease: false,
        };
        let listener = tokio::net::TcpListener::bind(&self.addrs[&id])
            .await
            .unwrap();
        let bounds = Bounds::from(&crate::Config::default());
        let member = Member::start(config, bounds, Arc::new(TcpDialer))
            .await
            .unwrap();
        self.listeners
            .insert(id, tokio::spawn(accept(listener, member.clone())));
        self.members.insert(id, member);
    }
}

// CELL-3: every member applies the same entries to the same replica, and
// a new leader's epoch is above the last one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_hold_identical_replicas_and_a_new_leader_takes_a_higher_epoch() {
    let mut cell = cell("replicas", 3).await;
    eventually("a leader", || cell.leader().is_some()).await;
    let leader = cell.leader().unwrap();
    let raft = cell.members[&leader].raft.clone();
    let first = raft
        .client_write(Proposal::NewEpoch { node: leader })
        .await
        .unwrap();
    assert_eq!(first.data, Outcome::Epoch(1));
    let command = crate::state::Command::CancelWait {
        key: "kv/a".into(),
        ticket: 7,
    };
    let applied = raft
        .client_write(Proposal::Commands {
            epoch: 1,
            commands: vec![(crate::time::Millis::from_millis(5), command.clone())],
        })
        .await
        .unwrap();
    assert_eq!(applied.data, Outcome::Commands { applied: true });
    let index = applied.log_id.index;
    eventually("every member applied the commands", || {
        cell.members
            .values()
            .all(|m| m.machine.replica().applied.map(|l| l.index) >= Some(index))
    })
    .await;
    let images: Vec<Vec<u8>> = cell
        .members
        .values()
        .map(|m| encode(&m.machine.replica()))
        .collect();
    assert!(images.windows(2).all(|w| w[0] == w[1]));

    cell.stop(leader).await;
    eventually("another leader", || cell.leader().is_some()).await;
    let next = cell.leader().unwrap();
    assert_ne!(next, leader);
    let raft = cell.members[&next].raft.clone();
    let second = raft
        .client_write(Proposal::NewEpoch { node: next })
        .await
        .unwrap();
    assert_eq!(second.data, Outcome::Epoch(2));
    // A deposed master's commands change nothing.
    let stale = raft
        .client_write(Proposal::Commands {
            epoch: 1,
            commands: vec![(crate::time::Millis::from_millis(9), command)],
        })
        .await
        .unwrap();
    assert_eq!(stale.data, Outcome::Commands { applied: false });
    let replica = cell.members[&next].machine.replica();
    assert_eq!(replica.now, crate::time::Millis::from_millis(5));
}

// CELL-2, CELL-3: a member that was down while the others snapshotted and
// purged the entries it missed catches up from a snapshot, to the same
// replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_behind_the_purged_log_catches_up_from_a_snapshot() {
    let mut cell = cell_snapshotting("catch-up", 3, 16).await;
    eventually("a leader", || cell.leader().is_some()).await;
    let leader = cell.leader().unwrap();
    let raft = cell.members[&leader].raft.clone();
    raft.client_write(Proposal::NewEpoch { node: leader })
        .await
        .unwrap();
    let behind = *cell.members.keys().find(|id| **id != leader).unwrap();
    cell.stop(behind).await;
    let mut last = 0;
    for n in 0..100u64 {
        let written = raft
            .client_write(Proposal::Commands {
                epoch: 1,
                commands: vec![(
                    crate::time::Millis::from_millis(n),
                    crate::state::Command::CancelWait {
                        key: format!("kv/{n}"),
                        ticket: n,
                    },
                )],
            })
            .await
            .unwrap();
        last = written.log_id.index;
    }
    eventually("the leader purged what the stopped member lacks", || {
        let m = cell.members[&leader].raft.metrics().borrow().clone();
        m.purged.is_some_and(|p| p.index > 10)
    })
    .await;
    cell.restart(behind).await;
    eventually("the member caught up", || {
        cell.members[&behind]
            .machine
            .replica()
            .applied
            .map(|l| l.index)
            >= Some(last)
    })
    .await;
    let snapshot = cell.members[&behind].raft.metrics().borrow().snapshot;
    assert!(snapshot.is_some(), "it installed a snapshot");
    let images: Vec<Vec<u8>> = cell
        .members
        .values()
        .map(|m| {
            let mut replica = m.machine.replica();
            replica.applied = None;
            replica.membership = Default::default();
            encode(&replica)
        })
        .collect();
    assert!(images.windows(2).all(|w| w[0] == w[1]));
}

// CELL-4: over TCP, a peer of another cell, or one that addresses a member
// by another's id, gets a refusal and no Raft service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_cell_or_naming_another_member_is_refused() {
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};

    let cell = cell("refuse", 3).await;
    eventually("a leader", || cell.leader().is_some()).await;
    let target = 2;
    let node = openraft::BasicNode::new(cell.addrs[&target].clone());
    let vote = openraft::raft::VoteRequest::new(openraft::Vote::new(99, 9), None);
    let option = RPCOption::new(Duration::from_secs(5));
    for (name, claimed) in [("test-other", target), ("test-refuse", 3)] {
        let lease = Arc::new(MasterLease::new(9, Duration::from_millis(100)));
        let mut network = CellNetwork::new(name, 9, Arc::new(TcpDialer), lease);
        let mut client = network.new_client(claimed, &node).await;
        let refused = client.vote(vote.clone(), option.clone()).await.unwrap_err();
        assert!(refused.to_string().contains("refused"), "{name}: {refused}");
    }
    // The refused peers changed nothing: the cell still has its leader.
    assert!(cell.leader().is_some());
    let term = cell.members[&target].raft.metrics().borrow().current_term;
    assert!(term < 99, "the refused vote request reached the engine");
}
