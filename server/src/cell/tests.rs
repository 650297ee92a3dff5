//! A three-member cell in one process, on loopback TCP.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, ServerState};

use super::*;
use crate::codec::encode;
use crate::state::Bounds;
use membership::Right;

const TEST_OPERATOR_TOKEN: &str = "the operator token of the tests";

/// A membership of `configs` (two while a change is joint), each voter
/// at `m<id>:7171`.
pub(crate) fn membership_of(configs: &[&[NodeId]]) -> openraft::Membership<NodeId, BasicNode> {
    let configs: Vec<std::collections::BTreeSet<NodeId>> = configs
        .iter()
        .map(|voters| voters.iter().copied().collect())
        .collect();
    let nodes: BTreeMap<NodeId, BasicNode> = configs
        .iter()
        .flatten()
        .map(|id| (*id, BasicNode::new(format!("m{id}:7171"))))
        .collect();
    openraft::Membership::new(configs, nodes)
}

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
        announced_election_max: None,
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
                crate::cell::serve_peer(framed, hello, &member, crate::cell::Proof::Plaintext)
                    .await;
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn cell(name: &str, size: u64) -> Cell {
    cell_snapshotting(name, size, DEFAULT_SNAPSHOT_EVERY).await
}

async fn cell_snapshotting(name: &str, size: u64, snapshot_every: u64) -> Cell {
    cell_of(name, size, snapshot_every, None).await
}

async fn cell_of(name: &str, size: u64, snapshot_every: u64, secret: Option<&str>) -> Cell {
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
            secret: secret.map(String::from),
            id,
            members: addrs.clone(),
            storage: Storage::Dir(dir),
            timing: timing(),
            snapshot_every,
            broken: Default::default(),
            join: false,
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

    /// A leader that has applied the membership it leads under: until
    /// then openraft refuses a change of members as one in progress, which
    /// on a loaded machine can outlast the election by a while.
    fn settled_leader(&self) -> Option<NodeId> {
        self.members.iter().find_map(|(id, m)| {
            let metrics = m.raft.metrics().borrow().clone();
            let membership = metrics.membership_config.log_id().as_ref().map(|l| l.index);
            let settled = metrics.last_applied.map(|l| l.index) >= membership
                && metrics.last_applied.is_some();
            (metrics.state == ServerState::Leader && settled).then_some(*id)
        })
    }

    async fn stop(&mut self, id: NodeId) {
        let listener = self.listeners.remove(&id).unwrap();
        listener.abort();
        let _ = listener.await;
        let member = self.members.remove(&id).unwrap();
        member.shutdown().await;
    }

    /// Starts a new member `id` on a fresh directory, waiting to be added
    /// (`join`); its address.
    async fn join(&mut self, id: NodeId) -> String {
        self.join_with(id, None).await
    }

    /// [`Cell::join`] presenting `secret` to the others.
    async fn join_with(&mut self, id: NodeId, secret: Option<&str>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        self.addrs.insert(id, addr.clone());
        let dir = member_dir(&self.name, id);
        let _ = std::fs::remove_dir_all(&dir);
        self._dirs.push(PathGuard(dir.clone()));
        let config = MemberConfig {
            cell: format!("test-{}", self.name),
            secret: secret.map(String::from),
            id,
            members: self.addrs.clone(),
            storage: Storage::Dir(dir),
            timing: timing(),
            snapshot_every: self.snapshot_every,
            broken: Default::default(),
            join: true,
        };
        self.launch(id, config, listener).await;
        addr
    }

    /// Starts member `id` with `config`, serving peers on `listener`.
    async fn launch(
        &mut self,
        id: NodeId,
        config: MemberConfig,
        listener: tokio::net::TcpListener,
    ) {
        let bounds = Bounds::from(&crate::Config::default());
        let member = Member::start(config, bounds, Arc::new(TcpDialer))
            .await
            .unwrap();
        self.listeners
            .insert(id, tokio::spawn(accept(listener, member.clone())));
        self.members.insert(id, member);
    }

    /// Carries `change` through on whichever member leads, with the
    /// operator's right.
    async fn change(&self, change: Change) -> ChangeReply {
        for _ in 0..50 {
            if let Some(leader) = self.leader() {
                let request = ChangeRequest {
                    change: change.clone(),
                    credential: Some(TEST_OPERATOR_TOKEN.into()),
                };
                let right = Right::OperatorToken(TEST_OPERATOR_TOKEN);
                let reply = super::membership::change(&self.members[&leader], right, request).await;
                if !matches!(reply, ChangeReply::NotLeader { .. }) {
                    return reply;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no leader carried the change through");
    }

    /// Starts member `id` again on its data directory and its address.
    async fn restart(&mut self, id: NodeId) {
        let config = MemberConfig {
            cell: format!("test-{}", self.name),
            secret: None,
            id,
            members: self.addrs.clone(),
            storage: Storage::Dir(member_dir(&self.name, id)),
            timing: timing(),
            snapshot_every: self.snapshot_every,
            broken: Default::default(),
            join: false,
        };
        let listener = tokio::net::TcpListener::bind(&self.addrs[&id])
            .await
            .unwrap();
        self.launch(id, config, listener).await;
    }
}

/// Writes `n` commands of epoch 1 through whichever member leads; the
/// index of the last.
async fn write_commands(cell: &Cell, n: u64) -> u64 {
    let mut last = 0;
    for n in 0..n {
        let (_, written) = write_to_leader(cell, |_| Proposal::Commands {
            epoch: 1,
            commands: vec![(
                crate::time::Millis::from_millis(n),
                crate::state::Command::CancelWait(crate::state::command::CancelWait {
                    key: format!("kv/{n}"),
                    ticket: n,
                }),
            )],
        })
        .await;
        last = written.log_id.index;
    }
    last
}

/// Writes the proposal `make` gives for the member that leads, again on
/// the next leader if the lead moved before it took it (a loaded machine
/// can starve a leader's heartbeats past an election timeout).
async fn write_to_leader(
    cell: &Cell,
    make: impl Fn(NodeId) -> Proposal,
) -> (NodeId, openraft::raft::ClientWriteResponse<CellTypes>) {
    for _ in 0..50 {
        if let Some(leader) = cell.leader() {
            match cell.members[&leader].raft.client_write(make(leader)).await {
                Ok(response) => return (leader, response),
                Err(e) if e.forward_to_leader().is_some() => {}
                Err(e) => panic!("{e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no leader took the proposal");
}

// CELL-3: every member applies the same entries to the same replica, and
// a new leader's epoch is above the last one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_hold_identical_replicas_and_a_new_leader_takes_a_higher_epoch() {
    let mut cell = cell("replicas", 3).await;
    eventually("a leader", || cell.leader().is_some()).await;
    let (leader, first) = write_to_leader(&cell, |node| Proposal::NewEpoch { node }).await;
    assert_eq!(first.data, Outcome::Epoch(1));
    let command = crate::state::Command::CancelWait(crate::state::command::CancelWait {
        key: "kv/a".into(),
        ticket: 7,
    });
    let (_, applied) = write_to_leader(&cell, |_| Proposal::Commands {
        epoch: 1,
        commands: vec![(crate::time::Millis::from_millis(5), command.clone())],
    })
    .await;
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
    let (next, second) = write_to_leader(&cell, |node| Proposal::NewEpoch { node }).await;
    assert_ne!(next, leader);
    assert!(
        matches!(second.data, Outcome::Epoch(e) if e >= 2),
        "{:?}",
        second.data
    );
    // A deposed master's commands change nothing.
    let (next, stale) = write_to_leader(&cell, |_| Proposal::Commands {
        epoch: 1,
        commands: vec![(crate::time::Millis::from_millis(9), command.clone())],
    })
    .await;
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
    write_to_leader(&cell, |node| Proposal::NewEpoch { node }).await;
    let behind = *cell.members.keys().find(|id| **id != leader).unwrap();
    cell.stop(behind).await;
    let last = write_commands(&cell, 100).await;
    eventually("the others purged what the stopped member lacks", || {
        cell.members.values().all(|m| {
            let m = m.raft.metrics().borrow().clone();
            m.purged.is_some_and(|p| p.index > 10)
        })
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
    // The refused peers changed nothing: the cell has a leader (on a
    // loaded machine a lease may lapse and another be elected, which is
    // no fault of theirs), and no term reached the one they asked for.
    eventually("a leader", || cell.leader().is_some()).await;
    let term = cell.members[&target].raft.metrics().borrow().current_term;
    assert!(term < 99, "the refused vote request reached the engine");
}

// CELL-9: a member started with `join` waits; added, it catches up from a
// snapshot as a learner and then votes, holding the replica the others
// hold; a removed member leaves the configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_member_catches_up_and_votes_and_a_removed_one_leaves() {
    let mut cell = cell_snapshotting("members", 3, 8).await;
    eventually("a leader", || cell.leader().is_some()).await;
    write_to_leader(&cell, |node| Proposal::NewEpoch { node }).await;
    write_commands(&cell, 40).await;
    let addr = cell.join(4).await;
    // A joining member founds no cell of its own.
    let waiting = cell.members[&4].raft.metrics().borrow().clone();
    assert_ne!(waiting.state, ServerState::Leader);
    assert!(waiting
        .membership_config
        .membership()
        .get_node(&4)
        .is_none());

    let reply = cell
        .change(Change::Add {
            id: 4,
            addr: addr.clone(),
        })
        .await;
    let ChangeReply::Done { voters, members } = reply else {
        panic!("{reply:?}");
    };
    assert_eq!(voters, [1, 2, 3, 4].into());
    assert_eq!(members.len(), 4);
    // Adding it again changes nothing: no configuration is written.
    let leader = cell.leader().unwrap();
    let written = || {
        *cell.members[&leader]
            .raft
            .metrics()
            .borrow()
            .membership_config
            .log_id()
    };
    let before = written();
    let again = cell.change(Change::Add { id: 4, addr }).await;
    assert!(
        matches!(&again, ChangeReply::Done { voters, .. } if voters.len() == 4),
        "{again:?}"
    );
    assert_eq!(written(), before);
    let last = write_commands(&cell, 5).await;
    eventually("the new member applied the log", || {
        cell.members[&4].machine.replica().applied.map(|l| l.index) >= Some(last)
    })
    .await;
    let snapshot = cell.members[&4].raft.metrics().borrow().snapshot;
    assert!(snapshot.is_some(), "it caught up from a snapshot");
    let new = encode(&cell.members[&4].machine.replica().state);
    let leader = cell.leader().unwrap();
    assert_eq!(new, encode(&cell.members[&leader].machine.replica().state));

    let gone = *cell.members.keys().find(|id| **id != leader).unwrap();
    let reply = cell.change(Change::Remove { id: gone }).await;
    let ChangeReply::Done { voters, members } = reply else {
        panic!("{reply:?}");
    };
    assert!(!voters.contains(&gone) && !members.contains_key(&gone));
    assert_eq!(voters.len(), 3);
    // Removing it again changes nothing.
    let again = cell.change(Change::Remove { id: gone }).await;
    assert!(matches!(again, ChangeReply::Done { .. }), "{again:?}");
}

// CELL-9: a member added as a learner that never caught up (a wrong
// address) is removed by `cell remove`, as its refusal says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_that_never_caught_up_is_removed() {
    let cell = cell("members-learner", 3).await;
    eventually("a settled leader", || cell.settled_leader().is_some()).await;
    let leader = cell.settled_leader().unwrap();
    // Nothing listens there: it stays a learner.
    cell.members[&leader]
        .raft
        .add_learner(9, openraft::BasicNode::new("127.0.0.1:9"), false)
        .await
        .unwrap();
    let reply = cell.change(Change::Remove { id: 9 }).await;
    let ChangeReply::Done { voters, members } = reply else {
        panic!("{reply:?}");
    };
    assert!(!members.contains_key(&9), "{members:?}");
    assert_eq!(voters.len(), 3);
}

// CELL-9, AUTH-3: with an operator token, a change without it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_without_the_operator_token_is_refused() {
    let cell = cell("members-token", 3).await;
    eventually("a leader", || cell.leader().is_some()).await;
    let leader = cell.leader().unwrap();
    let token = Right::OperatorToken("an operator token of some length");
    for given in [None, Some("a wrong token of the same size!!")] {
        let request = ChangeRequest {
            change: Change::Remove { id: leader },
            credential: given.map(String::from),
        };
        let reply = super::membership::change(&cell.members[&leader], token, request).await;
        assert!(matches!(reply, ChangeReply::Refused(_)), "{reply:?}");
    }
    let voters = cell.members[&leader]
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .count();
    assert_eq!(voters, 3);
}

// CELL-4: in a cell with a secret, a peer that names the cell and the
// member rightly but lacks the secret, or has another, is refused; members
// that share it elect a leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_the_cells_secret_is_refused() {
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};

    let cell = cell_of(
        "secret",
        3,
        DEFAULT_SNAPSHOT_EVERY,
        Some("the cell's secret"),
    )
    .await;
    eventually("a leader among members that share the secret", || {
        cell.leader().is_some()
    })
    .await;
    let target = 2;
    let node = openraft::BasicNode::new(cell.addrs[&target].clone());
    let vote = openraft::raft::VoteRequest::new(openraft::Vote::new(99, 9), None);
    let option = RPCOption::new(Duration::from_secs(5));
    for secret in [None, Some("a guess".to_string())] {
        let lease = Arc::new(MasterLease::new(9, Duration::from_millis(100)));
        let mut network = CellNetwork::new("test-secret", 9, Arc::new(TcpDialer), lease)
            .with_secret(secret.clone());
        let mut client = network.new_client(target, &node).await;
        let refused = client.vote(vote.clone(), option.clone()).await.unwrap_err();
        assert!(
            refused.to_string().contains("secret"),
            "{secret:?}: {refused}"
        );
    }
    let term = cell.members[&target].raft.metrics().borrow().current_term;
    assert!(term < 99, "the refused vote request reached the engine");
}

// CELL-4: a peer naming another cell is refused, and the refusal shows
// only the start of the name it gave, however long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_shows_only_the_start_of_a_long_cell_name() {
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};

    let cell = cell("long-name", 3).await;
    eventually("a leader", || cell.leader().is_some()).await;
    let target = 2;
    let node = openraft::BasicNode::new(cell.addrs[&target].clone());
    let vote = openraft::raft::VoteRequest::new(openraft::Vote::new(99, 9), None);
    let option = RPCOption::new(Duration::from_secs(5));
    let name = "n".repeat(512 * 1024);
    let lease = Arc::new(MasterLease::new(9, Duration::from_millis(100)));
    let mut network = CellNetwork::new(&name, 9, Arc::new(TcpDialer), lease);
    let mut client = network.new_client(target, &node).await;
    let refused = client.vote(vote, option).await.unwrap_err().to_string();
    assert!(refused.contains("524288 bytes"), "{refused}");
    assert!(refused.len() < 1024, "{} bytes", refused.len());
}

// CELL-9: a member the others cannot speak to (here it has another secret)
// never holds the log, and is not made a voter: the change fails, and the
// voters are those before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_the_others_cannot_reach_is_not_made_a_voter() {
    let mut cell = cell("members-unreachable", 3).await;
    eventually("a leader", || cell.leader().is_some()).await;
    write_to_leader(&cell, |node| Proposal::NewEpoch { node }).await;
    let addr = cell.join_with(4, Some("another cell's secret")).await;
    let reply = cell.change(Change::Add { id: 4, addr }).await;
    assert!(matches!(reply, ChangeReply::Failed(_)), "{reply:?}");
    let leader = cell.leader().unwrap();
    let voters: Vec<NodeId> = cell.members[&leader]
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    assert_eq!(voters, [1, 2, 3]);
}

// STORE-6: a member's cell format 2 directory, as the Leasehold of
// protocol 7 left it (tests/fixtures/README.md), is carried forward: its
// log decodes, its snapshot's holdings count as acquired at index 0, and
// its FORMAT says cell format 4 from then on.
#[test]
fn a_cell_format_2_directory_is_carried_forward() {
    use crate::holding::Holding;
    use leasehold_protocol::{LockMode, SessionId};

    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cell-format-2");
    let dir = member_dir("format-2", 1);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = PathGuard(dir.clone());
    for file in ["FORMAT", "raft-log", "raft-snapshot"] {
        std::fs::copy(fixture.join(file), dir.join(file)).unwrap();
    }
    let taken = member::take_dir(&dir, 1).expect("a cell format 2 directory is taken");
    let volume: Arc<dyn Volume> = Arc::new(DirVolume::new(&dir));
    let log = CellLog::open(volume.clone()).expect("its log decodes");
    assert!(!log.is_empty());
    let machine = CellMachine::open(volume, Bounds::from(&crate::Config::default()))
        .expect("its snapshot decodes");
    assert_eq!(
        std::fs::read_to_string(dir.join("FORMAT")).unwrap(),
        "leasehold-cell 2\n",
        "read, not yet carried forward"
    );
    taken.carried_forward(&dir).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("FORMAT")).unwrap(),
        "leasehold-cell 5\n"
    );
    let state = machine.replica().state;
    assert!(
        !state.acquires_kept(),
        "until a master of this version says so"
    );
    let a: SessionId = "e71364f3-9832-404e-b1d0-b9a41ff02b91".parse().unwrap();
    let b: SessionId = "72e1a3bd-83bb-4107-a12c-0f3a0ab98785".parse().unwrap();
    let holder = |key: &str, session| {
        state
            .locks()
            .get(key)
            .and_then(|l| l.holders.get(&session))
            .copied()
    };
    assert_eq!(
        holder("locks/x", a),
        Some(Holding {
            mode: LockMode::Exclusive,
            acquired: 0,
            since: None,
        })
    );
    assert_eq!(
        holder("locks/s", b),
        Some(Holding {
            mode: LockMode::Shared,
            acquired: 0,
            since: None,
        })
    );
    assert!(state.namespace().get("svc/db").is_some());
}

// STORE-6, ACL-5: a member's cell format 3 directory, from before access
// control, is carried forward: its log and snapshot decode, its state has
// no rules and access control off, and its FORMAT says cell format 4 from
// then on.
#[test]
fn a_cell_format_3_directory_is_carried_forward() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cell-format-3");
    let dir = member_dir("format-3", 1);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = PathGuard(dir.clone());
    for file in ["FORMAT", "raft-log", "raft-snapshot"] {
        std::fs::copy(fixture.join(file), dir.join(file)).unwrap();
    }
    let taken = member::take_dir(&dir, 1).expect("a cell format 3 directory is taken");
    let volume: Arc<dyn Volume> = Arc::new(DirVolume::new(&dir));
    let log = CellLog::open(volume.clone()).expect("its log decodes");
    assert!(!log.is_empty());
    let machine = CellMachine::open(volume, Bounds::from(&crate::Config::default()))
        .expect("its snapshot decodes");
    taken.carried_forward(&dir).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("FORMAT")).unwrap(),
        "leasehold-cell 5\n"
    );
    let state = machine.replica().state;
    assert!(state.namespace().get("svc/db").is_some());
    assert!(!state.access().enabled);
    assert!(state.access().rules().is_empty());
}

// STORE-6, LOCK-16: a member's cell format 4 directory, as the Leasehold
// of protocol 9 left it (tests/fixtures/README.md), is carried forward:
// its log and snapshot decode, with its rules and tokens, and its
// holdings are held since a time unknown; its FORMAT says cell format 5
// from then on.
#[test]
fn a_cell_format_4_directory_is_carried_forward() {
    use leasehold_protocol::{LockMode, SessionId};

    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cell-format-4");
    let dir = member_dir("format-4", 1);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = PathGuard(dir.clone());
    for file in ["FORMAT", "raft-log", "raft-snapshot"] {
        std::fs::copy(fixture.join(file), dir.join(file)).unwrap();
    }
    let taken = member::take_dir(&dir, 1).expect("a cell format 4 directory is taken");
    let volume: Arc<dyn Volume> = Arc::new(DirVolume::new(&dir));
    let log = CellLog::open(volume.clone()).expect("its log decodes");
    assert!(!log.is_empty());
    let machine = CellMachine::open(volume, Bounds::from(&crate::Config::default()))
        .expect("its snapshot decodes");
    taken.carried_forward(&dir).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("FORMAT")).unwrap(),
        "leasehold-cell 5\n"
    );
    let state = machine.replica().state;
    let a: SessionId = "d1e37d29-ceb5-41b2-9335-377136f1f7cf".parse().unwrap();
    let held = state.locks().get("locks/x").and_then(|l| l.holders.get(&a));
    let held = held.expect("a holds locks/x, in the snapshot");
    assert_eq!(held.mode, LockMode::Exclusive);
    assert!(held.acquired > 0, "acquires were kept in cell format 4");
    assert_eq!(held.since, None, "cell format 4 kept no time");
    assert!(state.namespace().get("svc/db").is_some());
    assert!(!state.access().enabled);
    assert_eq!(state.access().rules().len(), 1, "svc/ reader read");
}

// A member's directory is refused to another member, naming both; one
// without a NODE file (an earlier Leasehold's) is taken and named.
#[test]
fn a_members_directory_is_refused_to_another_member() {
    let dir = member_dir("node-named", 1);
    let _ = std::fs::remove_dir_all(&dir);
    let _guard = PathGuard(dir.clone());
    drop(member::take_dir(&dir, 1).expect("a new directory is taken"));
    assert_eq!(std::fs::read_to_string(dir.join("NODE")).unwrap(), "1\n");
    drop(member::take_dir(&dir, 1).expect("taken again by its member"));
    let refused = member::take_dir(&dir, 2)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains("member 1's") && refused.contains("this member is 2"),
        "{refused}"
    );
    assert!(refused.contains("--node 1"), "{refused}");
    std::fs::remove_file(dir.join("NODE")).unwrap();
    drop(member::take_dir(&dir, 2).expect("an unnamed directory is taken"));
    assert_eq!(std::fs::read_to_string(dir.join("NODE")).unwrap(), "2\n");
}

// A directory a newer Leasehold wrote is refused, naming both formats.
#[test]
fn a_cell_directory_of_a_newer_format_is_refused_naming_both() {
    let dir = member_dir("format-9", 1);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = PathGuard(dir.clone());
    std::fs::write(dir.join("FORMAT"), "leasehold-cell 9\n").unwrap();
    let refused = member::take_dir(&dir, 1).err().expect("refused");
    let refused = refused.to_string();
    assert!(
        refused.contains("newer Leasehold (cell format 9)"),
        "{refused}"
    );
    assert!(refused.contains("cell formats 2 to 5"), "{refused}");
}

// CELL-11: a member asked to speak TLS without a client CA is refused at
// start: it could not verify its peers.
#[test]
fn a_member_with_tls_but_no_client_ca_is_refused() {
    let dir = std::env::temp_dir().join(format!("leasehold-member-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = PathGuard(dir.clone());
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (dir.join("m.pem"), dir.join("m.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let tls = crate::ServerTls::load(crate::TlsFiles {
        cert: cert_file,
        key: key_file,
        client_ca: None,
    })
    .unwrap();
    let config = crate::Config {
        tls: Some(tls),
        ..crate::Config::default()
    };
    let refused = super::run::check_tls(&config).unwrap_err();
    assert!(refused.to_string().contains("client CA"), "{refused}");
    assert!(super::run::check_tls(&crate::Config::default()).is_ok());
}

/// A CA and certificates it signs, written under `dir`, for a cell whose
/// members speak mutual TLS (`CELL-11`).
struct CellPki {
    dir: std::path::PathBuf,
    ca: std::path::PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl CellPki {
    fn new(dir: &std::path::Path, name: &str) -> CellPki {
        std::fs::create_dir_all(dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} CA"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).unwrap();
        let ca = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca, cert.pem()).unwrap();
        CellPki {
            dir: dir.to_path_buf(),
            ca,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate named `name` for 127.0.0.1, for both ends of a link.
    fn issue(&self, name: &str) -> crate::TlsFiles {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = crate::TlsFiles {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
            client_ca: Some(self.ca.clone()),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }
}

/// Three members speaking mutual TLS to each other, through the same
/// path `cell::serve` takes.
async fn tls_cell(name: &str, pki: &CellPki) -> (Cell, Vec<tokio::sync::oneshot::Sender<()>>) {
    let mut listeners = BTreeMap::new();
    let mut addrs = BTreeMap::new();
    for id in 1..=3 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(id, l.local_addr().unwrap().to_string());
        listeners.insert(id, l);
    }
    let (mut members, mut tasks, mut dirs, mut stops) =
        (BTreeMap::new(), BTreeMap::new(), Vec::new(), Vec::new());
    for (id, listener) in listeners {
        let dir = member_dir(name, id);
        let _ = std::fs::remove_dir_all(&dir);
        dirs.push(PathGuard(dir.clone()));
        let tls = crate::ServerTls::load(pki.issue(&member_name(id))).unwrap();
        let config = crate::Config {
            tls: Some(tls),
            ..crate::Config::default()
        };
        let member_config = MemberConfig {
            cell: format!("test-{name}"),
            secret: None,
            id,
            members: addrs.clone(),
            storage: Storage::Dir(dir),
            timing: timing(),
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            broken: Default::default(),
            join: false,
        };
        let dialer = peer_dialer(&config, Arc::new(TcpDialer));
        let member = Member::start(member_config, Bounds::from(&config), dialer)
            .await
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = member.clone();
        tasks.insert(
            id,
            tokio::spawn(async move {
                let _ = serve_member(listener, config, serving, async {
                    let _ = stopped.await;
                })
                .await;
            }),
        );
        members.insert(id, member);
        stops.push(stop);
    }
    let cell = Cell {
        name: name.to_string(),
        members,
        listeners: tasks,
        addrs,
        snapshot_every: DEFAULT_SNAPSHOT_EVERY,
        _dirs: dirs,
    };
    (cell, stops)
}

// CELL-11: members speaking mutual TLS elect a leader; a peer is served
// only with the certificate of the member it says it is: another
// certificate the cell's CA signed, a member's certificate for a member
// the cell does not have, or a certificate another CA signed, is refused,
// and its vote request never reaches the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mutual_tls_a_peer_is_served_only_with_its_members_certificate() {
    use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};

    let dir = std::env::temp_dir().join(format!("leasehold-cell-tls-{}", std::process::id()));
    let _guard = PathGuard(dir.clone());
    let pki = CellPki::new(&dir, "cell");
    let (cell, _stops) = tls_cell("tls", &pki).await;
    eventually("a leader among members speaking TLS", || {
        cell.leader().is_some()
    })
    .await;
    let target = 1;
    let node = openraft::BasicNode::new(cell.addrs[&target].clone());
    let vote = openraft::raft::VoteRequest::new(openraft::Vote::new(99, 2), None);
    let option = RPCOption::new(Duration::from_secs(5));
    let other = CellPki::new(&dir, "other");
    for (claims, files, why) in [
        (2, pki.issue("app-client"), "app-client"),
        (9, pki.issue(&member_name(9)), "not a member of this cell"),
        (2, other.issue(&member_name(2)), ""),
    ] {
        let tls = crate::ServerTls::load(files).unwrap();
        let dialer = Arc::new(TlsDialer::new(Arc::new(TcpDialer), tls));
        let lease = Arc::new(MasterLease::new(claims, Duration::from_millis(100)));
        let mut network = CellNetwork::new("test-tls", claims, dialer, lease);
        let mut client = network.new_client(target, &node).await;
        let refused = client.vote(vote.clone(), option.clone()).await.unwrap_err();
        assert!(refused.to_string().contains(why), "{claims}: {refused}");
    }
    let term = cell.members[&target].raft.metrics().borrow().current_term;
    assert!(term < 99, "a refused vote request reached the engine");

    // The other way: a member dialing member 2 at member 1's address is
    // answered with member 1's certificate, and gives up.
    let tls = crate::ServerTls::load(pki.issue(&member_name(3))).unwrap();
    let dialer = TlsDialer::new(Arc::new(TcpDialer), tls);
    let wrong = dialer
        .dial(&cell.addrs[&1], 2)
        .await
        .err()
        .expect("refused");
    assert!(
        wrong
            .to_string()
            .contains("\"leasehold-member-1\", not leasehold-member-2"),
        "{wrong}"
    );
    assert!(dialer.dial(&cell.addrs[&1], 1).await.is_ok());
}

// CELL-4: a member of the version before the hello carried its timers
// (fixture: the first frame such a member sends, `LHCELL02` and its hello
// for cell `old`, from 1 to 2, no secret) is told why it is refused, in a
// peer response it can read, and gets no Raft service.
#[tokio::test]
async fn a_member_of_the_earlier_version_is_told_why_it_is_refused() {
    use bytes::Bytes;
    use futures::{SinkExt, StreamExt};
    use tokio_util::codec::Framed;

    const EARLIER_HELLO: &[u8] = b"LHCELL02\x03old\x01\x02\x00";
    let (ours, theirs) = tokio::io::duplex(4096);
    let mut earlier = Framed::new(theirs, crate::cell::frame::FrameCodec::new(1 << 20));
    earlier
        .send(Bytes::from_static(EARLIER_HELLO))
        .await
        .unwrap();
    let Ok(FirstFrame::EarlierPeer(framed)) = first_frame(ours, 1 << 20).await else {
        panic!("the earlier hello was not recognised");
    };
    peer::refuse_earlier_peer(framed).await;
    let answer = earlier.next().await.expect("an answer").unwrap();
    let network::PeerResponse::Refused(reason) = crate::codec::decode(&answer).unwrap() else {
        panic!("not a refusal");
    };
    assert!(reason.contains("250-500 ms"), "{reason}");
    assert!(earlier.next().await.is_none(), "then the connection closes");
}

// CELL-6: a peer whose longest election timeout is set longer than this
// member's, so that its master lease could outlast this member's refusal
// window, is refused; one set the same or shorter is not.
#[test]
fn a_peer_whose_lease_outlasts_the_refusal_window_is_refused() {
    let hello = |election_max_us| network::PeerHello {
        cell: "c".into(),
        from: 1,
        to: 2,
        secret: None,
        election_max_us,
    };
    let mine = Duration::from_millis(300);
    assert!(hello(500_000).lease_outlasts(mine));
    // A setting 1% longer would spend the allowance for clock rates.
    assert!(hello(303_000).lease_outlasts(mine));
    assert!(hello(300_001).lease_outlasts(mine));
    assert!(!hello(300_000).lease_outlasts(mine));
    assert!(!hello(300_000).lease_outlasts(Duration::from_millis(600)));
}
