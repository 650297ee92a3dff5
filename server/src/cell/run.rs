//! Serving as a member of a cell: one listener for clients and peers, and
//! a loop that makes this member the master while it leads the cell and
//! holds the master lease, and a follower that redirects clients to the
//! master otherwise (SPEC `CELL-7`).
//!
//! Becoming master is a restart in all but the process: the member takes
//! a new epoch through the log (`NewEpoch`, applied after every earlier
//! entry), starts a master on its replica as a restarted master starts on
//! its store (every session's lease extended, fail-over events sent,
//! `FO-1`..`FO-6`), and from then on every command the master applies
//! goes to the log, replies waiting until a quorum holds it. Losing the
//! lead or the lease stops that master: what it applied but the log did not
//! take is gone, as a crash would lose it, and its clients find the next.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use openraft::{Raft, ServerState};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::member::{Member, MemberConfig, MemberError};
use super::network::Dialer;
use super::peer::{first_frame, may_stand, newest_voter, FirstFrame, Proof};
use super::rounds::Rounds;
use super::runtime::ElectionRng;
use super::{CellTypes, NodeId, Outcome, Proposal};
use crate::accept::{accept_loop, Accepted, Listener};
use crate::codec::encode;
use crate::commit::{Committer, Replicate, ReplicateError, ReplicateFuture};
use crate::config::Config;
use crate::config::PROPOSAL_BYTES;
use crate::connection;
use crate::http::Health;
use crate::incoming::Incoming;
use crate::master::{self, MasterHandle};
use crate::prefixed::Prefixed;
use crate::recovery::Start;
use crate::state::{Bounds, Command};
use crate::store::Record;
use crate::time::Millis;

/// What this member is to clients now.
#[derive(Clone)]
enum Role {
    Master {
        handle: MasterHandle,
        /// Cancelled when this master stops: its clients must go to the
        /// next.
        connections: CancellationToken,
        /// The master's configuration: its epoch is what `Welcome` says.
        config: Arc<Config>,
    },
    Follower {
        /// The master's address, if this member knows of one.
        master: Option<String>,
    },
}

/// Serves `listener` as member `member` of its cell until `shutdown`
/// resolves: peers' Raft traffic, and clients, whom it serves while it is
/// the master and redirects to the master otherwise.
pub async fn serve<L: Listener>(
    listener: L,
    config: Config,
    member: MemberConfig,
    dialer: Arc<dyn Dialer>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), MemberError> {
    serve_with_http(listener, config, member, dialer, None, shutdown).await
}

/// As [`serve`], and serves the HTTP port on `http` if given: the
/// member's metrics (make `config.metrics` with
/// [`Metrics::for_member`](crate::Metrics::for_member) for its own
/// figures), and its health (`OPS-1`..`OPS-3`).
pub async fn serve_with_http<L: Listener>(
    listener: L,
    config: Config,
    member: MemberConfig,
    dialer: Arc<dyn Dialer>,
    http: Option<tokio::net::TcpListener>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), MemberError> {
    let member = start_member(&config, member, dialer).await?;
    serve_member_with_http(listener, config, member, http, shutdown).await
}

/// Opens member `member`'s data directory and starts its Raft under the
/// limits of `config`, for [`serve_member_with_http`]: a process that
/// starts the member before it binds its port says nothing of a port
/// when the data directory is refused.
pub async fn start_member(
    config: &Config,
    member: MemberConfig,
    dialer: Arc<dyn Dialer>,
) -> Result<Member, MemberError> {
    config
        .validate()
        .map_err(|e| MemberError::Config(e.to_string()))?;
    check_tls(config)?;
    let dialer = super::peer_tls::peer_dialer(config, dialer);
    Member::start(member, Bounds::from(config), dialer).await
}

/// A member that speaks TLS verifies its peers' certificates as they
/// verify its own, so it needs the cell's CA as its client CA (`CELL-11`).
pub(super) fn check_tls(config: &Config) -> Result<(), MemberError> {
    match &config.tls {
        Some(tls) if !tls.mutual() => Err(MemberError::Config(
            "a cell's members speaking TLS verify each other's certificates: give the cell's \
             CA as the client CA (--tls-client-ca)"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// Serves `listener` as `member`, started already with the limits of
/// `config`, until `shutdown` resolves; then stops the member. Refused at
/// once if `config` asks for TLS (`TLS-1`).
pub async fn serve_member<L: Listener>(
    listener: L,
    config: Config,
    member: Member,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), MemberError> {
    serve_member_with_http(listener, config, member, None, shutdown).await
}

/// As [`serve_member`], and serves the HTTP port on `http` if given, as
/// [`serve_with_http`] says.
pub async fn serve_member_with_http<L: Listener>(
    listener: L,
    config: Config,
    member: Member,
    http: Option<tokio::net::TcpListener>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), MemberError> {
    if let Err(refused) = check_tls(&config) {
        member.shutdown().await;
        return Err(refused);
    }
    let (role_tx, role) = watch::channel(Role::Follower { master: None });
    let (health_tx, health) = watch::channel(Health::not_serving("starting"));
    let stop = CancellationToken::new();
    if let Some(http) = http {
        let following = role.clone();
        let now: crate::status_page::MasterNow = Arc::new(move || match &*following.borrow() {
            Role::Master { handle, .. } => Some(handle.clone()),
            Role::Follower { .. } => None,
        });
        let (described, roles) = (member.clone(), role.clone());
        let cell: crate::status_page::CellView = Arc::new(move || {
            let serving = matches!(*roles.borrow(), Role::Master { .. });
            let status = super::status::MemberStatus::of(&described, serving);
            serde_json::to_value(status).unwrap_or_default()
        });
        let asker = crate::status_page::Asker::member(now, cell);
        let port = crate::http::HttpPort::new(config.metrics.clone(), health)
            .with_hosts(&config.http_hosts)
            .for_member(asker, config.operator_token.as_deref())
            .with_tls(config.tls.clone());
        let stopped = stop.clone();
        tokio::spawn(crate::http::serve_http(http, port, async move {
            stopped.cancelled().await
        }));
    }
    let leading = tokio::spawn(lead(
        member.clone(),
        config.clone(),
        (role_tx, health_tx),
        stop.clone(),
    ));
    let all_queued_bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // One copy that every connection shares, rather than one each.
    let shared = Arc::new(config.clone());
    let stopped = std::future::pending();
    let Accepted {
        mut tasks,
        refusing: _refusing,
        ..
    } = accept_loop(
        listener,
        &config,
        "member",
        shutdown,
        stopped,
        |incoming, ip| {
            connected(
                incoming,
                ip,
                member.clone(),
                role.clone(),
                shared.clone(),
                all_queued_bytes.clone(),
                stop.clone(),
            )
        },
    )
    .await;
    info!("member shutting down");
    stop.cancel();
    let _ = leading.await;
    tasks.abort_all();
    member.shutdown().await;
    Ok(())
}

/// Serves one connection: a peer's, or a client's as this member's role
/// says.
async fn connected<S: super::network::Served>(
    incoming: Incoming<S>,
    ip: std::net::IpAddr,
    member: Member,
    role: watch::Receiver<Role>,
    config: Arc<Config>,
    all_queued_bytes: Arc<std::sync::atomic::AtomicUsize>,
    stop: CancellationToken,
) {
    // Boxed: a connection's task keeps no room for the handshake's state
    // once it serves.
    let Some((stream, hello_by)) = Box::pin(incoming.establish(&config, &stop)).await else {
        return;
    };
    let certified = stream.certified();
    let proof = match config.tls {
        Some(_) => Proof::Certificate(certified.clone()),
        None => Proof::Plaintext,
    };
    let first = tokio::time::timeout_at(hello_by, first_frame(stream, config.max_frame)).await;
    let Ok(Ok(first)) = first else { return };
    match first {
        FirstFrame::Peer(framed, hello) => {
            tokio::select! {
                () = super::peer::serve(framed, hello, &member, proof) => {}
                () = stop.cancelled() => {}
            }
        }
        FirstFrame::EarlierPeer(framed) => super::peer::refuse_earlier_peer(framed).await,
        FirstFrame::Membership(framed) => {
            let right = super::membership::Right::of(
                config.operator_token.as_deref(),
                member.config.secret.as_deref(),
            );
            super::membership::answer(framed, &member, right, hello_by).await;
        }
        FirstFrame::Status(framed) => {
            let serving = matches!(*role.borrow(), Role::Master { .. });
            super::status::answer(framed, super::status::MemberStatus::of(&member, serving)).await;
        }
        FirstFrame::Client(framed, frame) => {
            let parts = framed.into_parts();
            let mut prefix = BytesMut::with_capacity(4 + frame.len() + parts.read_buf.len());
            prefix.put_u32(frame.len() as u32);
            prefix.extend_from_slice(&frame);
            prefix.extend_from_slice(&parts.read_buf);
            let stream = Prefixed::new(prefix.freeze(), parts.io);
            let now = role.borrow().clone();
            match now {
                Role::Master {
                    handle,
                    connections,
                    config,
                } => {
                    connection::serve(
                        stream,
                        handle,
                        config,
                        all_queued_bytes,
                        crate::caller::Caller::new(ip, certified),
                        connections.child_token(),
                        hello_by,
                    )
                    .await
                }
                Role::Follower { master } => {
                    connection::redirect(stream, master, (*config).clone(), hello_by).await
                }
            }
        }
    }
}

/// A master this member runs.
struct Running {
    epoch: u64,
    config: Config,
    handle: MasterHandle,
    connections: CancellationToken,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.connections.cancel();
        let _ = self.task.await;
    }
}

/// The voters of each configuration in force.
fn voters(metrics: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> Vec<Vec<NodeId>> {
    metrics
        .membership_config
        .membership()
        .get_joint_config()
        .iter()
        .map(|c| c.iter().copied().collect())
        .collect()
}

/// Makes this member the master while it leads and holds the master
/// lease, and tells connections who the master is.
async fn lead(
    member: Member,
    config: Config,
    (role, health): (watch::Sender<Role>, watch::Sender<Health>),
    stop: CancellationToken,
) {
    let me = member.config.id;
    let heartbeat = member.config.timing.heartbeat;
    let addresses: BTreeMap<NodeId, String> = member.config.members.clone();
    let mut metrics = member.raft.metrics();
    let mut running: Option<Running> = None;
    let mut standing = true;
    let mut rounds = Rounds::default();
    loop {
        let m = metrics.borrow_and_update().clone();
        // Checked at least every heartbeat: whether to stand for election
        // when the leader goes silent (CELL-9), or not yet after a round
        // of its own that failed (CELL-12).
        let led_by = *member.led_by.lock().unwrap_or_else(|e| e.into_inner());
        let led_by = led_by.map(|(leader, at)| (leader, at.elapsed()));
        let outstood: Vec<(NodeId, Duration)> = if member.config.broken.stand_when_outstood {
            Vec::new()
        } else {
            let ours = member.log.last_log_id();
            let refusers = member.outstood.refusers(ours);
            refusers
                .into_iter()
                .map(|(voter, at)| (voter, at.elapsed()))
                .collect()
        };
        let election_max = member.config.timing.election_max;
        let instant = tokio::time::Instant::now();
        let candidate_in = (m.state == ServerState::Candidate && m.vote.leader_id.node_id == me)
            .then_some(m.vote.leader_id.term);
        let leader_known = m.current_leader.is_some();
        rounds.observe(candidate_in, leader_known, instant, || {
            let most = election_max.as_millis().max(1) as u64;
            Duration::from_millis(rand::Rng::gen_range(&mut ElectionRng, 0..most))
        });
        let stand = (member.config.broken.hear_any_candidate
            || may_stand(
                m.membership_config.membership(),
                me,
                (led_by, &outstood),
                election_max,
            ))
            && !rounds.paused(instant);
        if stand != standing {
            member.raft.runtime_config().elect(stand);
            standing = stand;
        }
        let leading = m.state == ServerState::Leader && m.current_leader == Some(me);
        if let (false, Some(_), Some(lag)) =
            (leading, &running, member.config.broken.slow_step_down)
        {
            tokio::time::sleep(lag).await;
        }
        if leading {
            member.lease.lead(m.vote, voters(&m));
        } else {
            member.lease.depose();
            if let Some(master) = running.take() {
                info!(
                    epoch = master.epoch,
                    "no longer leading the cell: the master stops"
                );
                master.stop().await;
            }
        }
        if leading && running.is_none() && member.lease.holds(tokio::time::Instant::now()) {
            running = become_master(&member, &config).await;
        }
        let now = match &running {
            Some(master) => Role::Master {
                handle: master.handle.clone(),
                connections: master.connections.clone(),
                config: Arc::new(master.config.clone()),
            },
            None => Role::Follower {
                master: master_named(
                    m.membership_config.membership(),
                    me,
                    m.current_leader,
                    led_by.map(|(leader, _)| leader),
                )
                .and_then(|l| {
                    let known = m
                        .membership_config
                        .membership()
                        .get_node(&l)
                        .map(|n| n.addr.clone());
                    known.or_else(|| addresses.get(&l).cloned())
                }),
            },
        };
        let serving = matches!(now, Role::Master { .. });
        role.send_replace(now);
        let instant = tokio::time::Instant::now();
        let figures = super::observed::figures(&m, serving, member.lease.deadline(), instant);
        config.metrics.member(&figures);
        if !serving {
            config.metrics.no_master(member.machine.replica_epoch());
        }
        let heard = led_by.map(|(_, ago)| ago);
        health.send_replace(super::observed::health(&m, serving, heard, election_max));
        let ended = async {
            match &mut running {
                Some(master) => {
                    let _ = (&mut master.task).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = metrics.changed() => {}
            () = ended => {
                if let Some(master) = running.take() {
                    warn!(epoch = master.epoch, "the master stopped: its lease lapsed or the log took no more");
                    master.connections.cancel();
                    // Said by the master as it stops; said again for a
                    // master task that ended any other way.
                    member.lease.end_serving();
                }
            }
            // Acknowledgements move the lease without moving the metrics.
            () = tokio::time::sleep(heartbeat) => {}
            () = stop.cancelled() => break,
        }
    }
    if let Some(master) = running.take() {
        master.stop().await;
    }
}

/// The member a follower's `Redirect` names as master (`CELL-7`): the
/// leader it knows, else, if it is no voter of the newest configuration
/// it holds (being removed, or removed before it took the entry that
/// says so), the last leader it heard. The cell goes on without such a
/// member, which no longer hears its leader and may stand in elections
/// of its own that leave it knowing none; told "no master now", a client
/// that named only it waited in vain while the cell served.
fn master_named(
    membership: &openraft::Membership<NodeId, openraft::BasicNode>,
    me: NodeId,
    leader: Option<NodeId>,
    last_heard: Option<NodeId>,
) -> Option<NodeId> {
    let left_out = !newest_voter(membership, me);
    leader
        .or(last_heard.filter(|_| left_out))
        .filter(|l| *l != me)
}

/// Takes a new epoch through the log and starts a master on the replica
/// as of it; `None` if the log would not take the epoch (this member lost
/// the lead meanwhile).
async fn become_master(member: &Member, config: &Config) -> Option<Running> {
    let me = member.config.id;
    let patience =
        (member.config.timing.election_max * 2).max(crate::config::CELL_PROPOSAL_PATIENCE);
    // The leadership this epoch is taken under: the lease is counted for
    // it alone (`MasterLease::lead`).
    let led_with = member.raft.metrics().borrow().vote;
    // Each step's time goes in the log: with many sessions the copy and
    // the start are most of a fail-over after the election.
    let began = tokio::time::Instant::now();
    let proposed = tokio::time::timeout(
        patience,
        member.raft.client_write(Proposal::NewEpoch { node: me }),
    )
    .await;
    let epoch = match proposed {
        Ok(Ok(reply)) => match reply.data {
            Outcome::Epoch(epoch) => epoch,
            other => {
                warn!(?other, "a new epoch's entry applied as something else");
                return None;
            }
        },
        Ok(Err(e)) => {
            info!(error = %e, "the cell's log did not take a new epoch");
            return None;
        }
        Err(_) => {
            info!("the cell's log took no new epoch in time");
            return None;
        }
    };
    let taken = began.elapsed();
    let replica = member.machine.replica();
    let copied = began.elapsed() - taken;
    if replica.epoch != epoch {
        // Another epoch followed ours before we could start: not ours.
        return None;
    }
    if member.raft.metrics().borrow().vote != led_with {
        // This member was elected again while the entry waited (a new
        // term): the lease still counts the old term's acknowledgements
        // and would lapse within moments. The loop takes a new epoch
        // under the new leadership instead.
        info!(
            epoch,
            "elected again while the epoch was taken: not serving it"
        );
        return None;
    }
    if !member.lease.begin_serving(tokio::time::Instant::now()) {
        // The entry took its time, and the lease lapsed meanwhile: another
        // member may have been elected and be serving a later epoch that
        // this replica has not applied yet. A master starts only inside
        // the lease (CELL-6).
        info!(
            epoch,
            "the master lease lapsed while the epoch was taken: not serving"
        );
        return None;
    }
    let mut config = config.clone();
    config.epoch = epoch;
    let writer = CellWriter {
        raft: member.raft.clone(),
        epoch,
        patience,
    };
    let start = Start {
        state: replica.state,
        offset: replica.now,
        commit: Some(Committer::replicated(Box::new(writer), 0)),
        recovered: true,
        lease: Some(member.lease.clone()),
    };
    let sessions = start.state.sessions.len();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (handle, task) = master::spawn(config.clone(), start, async {
        let _ = stop_rx.await;
    });
    let started = began.elapsed() - taken - copied;
    info!(
        epoch,
        sessions,
        epoch_ms = taken.as_millis() as u64,
        copy_ms = copied.as_millis() as u64,
        start_ms = started.as_millis() as u64,
        "this member is the cell's master"
    );
    Some(Running {
        epoch,
        config,
        handle,
        connections: CancellationToken::new(),
        stop: Some(stop_tx),
        task,
    })
}

/// A master's records, to the cell's log.
struct CellWriter {
    raft: Raft<CellTypes>,
    epoch: u64,
    /// How long a proposal may take before the master gives up on the
    /// quorum and stops.
    patience: Duration,
}

impl Replicate for CellWriter {
    fn replicate(&mut self, records: Vec<Record>) -> ReplicateFuture<'_> {
        Box::pin(async move {
            let mut proposals: Vec<Vec<(Millis, Command)>> = vec![Vec::new()];
            let mut bytes = 0;
            for record in records {
                let Record::Command { now, command } = record else {
                    continue;
                };
                let size = encode(&command).len();
                if bytes + size > PROPOSAL_BYTES && bytes > 0 {
                    proposals.push(Vec::new());
                    bytes = 0;
                }
                bytes += size;
                proposals
                    .last_mut()
                    .expect("one at least")
                    .push((now, command));
            }
            for commands in proposals.into_iter().filter(|p| !p.is_empty()) {
                let proposal = Proposal::Commands {
                    epoch: self.epoch,
                    commands,
                };
                match tokio::time::timeout(self.patience, self.raft.client_write(proposal)).await {
                    Ok(Ok(reply)) if reply.data == (Outcome::Commands { applied: true }) => {}
                    Ok(Ok(_)) => return Err(ReplicateError::Superseded { epoch: self.epoch }),
                    Ok(Err(e)) => return Err(ReplicateError::Refused(e.to_string())),
                    Err(_) => {
                        return Err(ReplicateError::NoQuorum {
                            waited: self.patience,
                        })
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::master_named;
    use crate::cell::tests::membership_of;

    // CELL-7
    #[test]
    fn a_follower_names_the_leader_it_knows() {
        let cell = membership_of(&[&[1, 2, 3]]);
        assert_eq!(master_named(&cell, 2, Some(1), Some(3)), Some(1));
        assert_eq!(master_named(&cell, 1, Some(1), None), None, "never itself");
    }

    #[test]
    fn a_voter_knowing_no_leader_names_none_while_the_cell_elects() {
        let cell = membership_of(&[&[1, 2, 3]]);
        assert_eq!(master_named(&cell, 2, None, Some(1)), None);
    }

    #[test]
    fn a_member_left_out_of_the_newest_configuration_names_the_last_leader_it_heard() {
        let removing = membership_of(&[&[1, 2, 3], &[1, 3]]);
        assert_eq!(master_named(&removing, 2, None, Some(1)), Some(1));
        let removed = membership_of(&[&[1, 3]]);
        assert_eq!(master_named(&removed, 2, None, Some(3)), Some(3));
        assert_eq!(master_named(&removed, 2, None, None), None);
    }
}
