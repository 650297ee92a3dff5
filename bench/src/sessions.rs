//! `sessions`: hold many sessions over fewer connections, each kept alive
//! the way the client library does it (one held KeepAlive outstanding per
//! session, the next sent as soon as a reply arrives, `KA-1`), and measure
//! what that costs the master.
//!
//! Leasehold's sessions are driven over the raw protocol: a hundred
//! thousand client-library sessions would spend this machine's two cores
//! in the load generator rather than in the master being measured.
//!
//! With `--keepalive-all` a connection renews all its sessions together,
//! in `KeepAliveAll` requests (`KA-10`) sent every half lease, as a proxy
//! or a process with many sessions would: the shape for a million
//! sessions, where a million held KeepAlives would cost the master a
//! waiting request each.
//!
//! In either mode, connections to a master on loopback come from as many
//! loopback addresses (127.0.0.1, .2, ...) as the master's per-address
//! quotas on sessions (`QUOTA-2`) and connections (`CONN-8`) ask for, as
//! many client hosts would: two for the default 100,000 sessions.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use leasehold_protocol::{
    keepalive_all_limit, Authority, Behavior, ClientFrame, CreateSession, ErrorCode, FrameCodec,
    Hello, KeepAlive, Request, Response, ServerFrame, SessionId, SessionSecret, SessionToken,
    DEFAULT_MAX_FRAME,
};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio_util::codec::Framed;

use crate::procstat::Meter;
use crate::report::Figure;
use crate::sessions_tally::{Phase, Tally};
use crate::system::{Kind, System};

/// What to hold and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub sessions: usize,
    pub connections: usize,
    pub lease: Duration,
    /// How long the sessions are held once all exist.
    pub hold: Duration,
    /// Renew each connection's sessions together, every half lease, in
    /// `KeepAliveAll` requests rather than a held KeepAlive each.
    pub keepalive_all: bool,
}

/// Sessions a connection renewing its sessions together asks for at once.
pub(crate) const CREATIONS_IN_FLIGHT: usize = 4;

/// Sessions the bench opens from one loopback address at most: half the
/// master's default per-address quota (`QUOTA-2`).
const SESSIONS_PER_ADDRESS: usize = 50_000;
/// Connections from one loopback address at most: half the master's
/// default per-address cap (`CONN-8`).
const CONNECTIONS_PER_ADDRESS: usize = 2_048;

pub async fn run(system: &System, shape: Shape) -> anyhow::Result<Vec<Figure>> {
    let shape = Shape {
        sessions: shape.sessions.min(system.kind.max_sessions()),
        ..shape
    };
    let tally = Arc::new(Tally::default());
    let (measuring, _) = watch::channel(Phase::Creating);
    let before = Meter::start(&system.pids);
    let bar = crate::progress::bar(shape.sessions as u64, "creating sessions");
    let (shares, addresses) = split(shape.sessions, shape.connections);
    let connections = shares.len();
    let mut tasks = Vec::new();
    for n in shares {
        let (system, tally, phase) = (system.clone(), tally.clone(), measuring.subscribe());
        let from_index = tasks.len();
        let from = from_index % addresses;
        tasks.push(tokio::spawn(async move {
            match system.kind {
                Kind::Leasehold => {
                    let stream = connect_from(&system.addr, from).await?;
                    if shape.keepalive_all {
                        let share = from_index as f64 / connections as f64;
                        renew_together(stream, share, n, shape.lease, tally, phase).await
                    } else {
                        hold_leasehold(stream, n, shape.lease, tally, phase).await
                    }
                }
                #[cfg(feature = "etcd")]
                Kind::Etcd => {
                    crate::etcd::hold_sessions(&system.addr, n, shape.lease, tally, phase).await
                }
                #[cfg(feature = "zookeeper")]
                Kind::Zookeeper => {
                    crate::zookeeper::hold_sessions(&system.addr, n, shape.lease, tally, phase)
                        .await
                }
                #[allow(unreachable_patterns)]
                _ => Err(system.missing()),
            }
        }));
    }
    // Every session exists before the measured span starts.
    until_created(&tally.created, shape.sessions, &mut tasks, &bar).await?;
    bar.finish_and_clear();
    let creation = before.span();
    // One lease later every session has renewed at least once, so the
    // measured span sees the steady rate, not the first held KeepAlives.
    let bar = crate::progress::timer(shape.lease, "warming up");
    let warm = Instant::now();
    while warm.elapsed() < shape.lease {
        bar.set_position(warm.elapsed().as_secs());
        tokio::time::sleep(Duration::from_millis(250).min(shape.lease)).await;
    }
    bar.finish_and_clear();
    let meter = Meter::start(&system.pids);
    measuring.send_replace(Phase::Measuring);
    let bar = crate::progress::timer(shape.hold, "holding sessions");
    let started = Instant::now();
    while started.elapsed() < shape.hold {
        bar.set_position(started.elapsed().as_secs());
        tokio::time::sleep(Duration::from_millis(250).min(shape.hold)).await;
    }
    let renewals = tally.renewals.load(Ordering::Relaxed);
    let span = meter.span();
    bar.finish_and_clear();
    measuring.send_replace(Phase::Closing);
    for task in tasks {
        task.await?.context("a connection failed")?;
    }
    let held = started.elapsed().min(shape.hold).as_secs_f64();
    // ZooKeeper's client pings on its own schedule and does not say when:
    // its renewals are not counted.
    let counted = system.kind != Kind::Zookeeper;
    let mut figures = vec![Figure::neutral("sessions held", "", shape.sessions as f64)];
    if counted {
        figures.push(Figure::neutral(
            "KeepAlive replies/s",
            "/s",
            renewals as f64 / held,
        ));
    }
    if let (Some(span), Some(creation)) = (span, creation) {
        figures.push(Figure::lower("master CPU", "%", span.cpu_percent()));
        if counted {
            figures.push(
                Figure::lower(
                    "master CPU per KeepAlive",
                    "us",
                    span.cpu.as_secs_f64() * 1e6 / renewals.max(1) as f64,
                )
                .target(10.0),
            );
        }
        figures.push(Figure::lower(
            "master RSS",
            "MiB",
            span.rss_after as f64 / (1 << 20) as f64,
        ));
        let grown = span.rss_after.saturating_sub(creation.rss_before);
        figures.push(
            Figure::lower(
                "master bytes per session",
                "B",
                grown as f64 / shape.sessions as f64,
            )
            .target(400.0),
        );
    }
    if shape.keepalive_all {
        let ms = |us: &AtomicU64| us.load(Ordering::Relaxed) as f64 / 1e3;
        figures.push(Figure::lower(
            "worst KeepAliveAll round trip",
            "ms",
            ms(&tally.worst_round_trip_us),
        ));
        figures.push(Figure::lower(
            "worst renewal round started late by",
            "ms",
            ms(&tally.worst_round_late_us),
        ));
    }
    figures.push(
        Figure::lower(
            "spurious expirations",
            "",
            tally.expired.load(Ordering::Relaxed) as f64,
        )
        .target(0.0),
    );
    Ok(figures)
}

/// Waits until `created` counts `wanted` sessions, showing it on `bar`:
/// fails if a connection's task ends first (with its error, if it had
/// one) or if it takes over 600 s.
pub(crate) async fn until_created(
    created: &AtomicU64,
    wanted: usize,
    tasks: &mut Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let made = created.load(Ordering::Relaxed);
        bar.set_position(made);
        if made as usize >= wanted {
            return Ok(());
        }
        if let Some(t) = tasks.iter().position(|t| t.is_finished()) {
            tasks.remove(t).await??;
            bail!("a connection ended while creating sessions");
        }
        if Instant::now() > deadline {
            bail!("creating {wanted} sessions took over 600 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How `sessions` sessions spread over at most `connections` connections:
/// each connection's share, and how many loopback addresses they come
/// from, to stay inside the master's per-address quotas.
pub(crate) fn split(sessions: usize, connections: usize) -> (Vec<usize>, usize) {
    let per = sessions.div_ceil(connections.max(1)).max(1);
    let shares: Vec<usize> = (0..sessions)
        .step_by(per)
        .map(|first| per.min(sessions - first))
        .collect();
    let addresses = (sessions.div_ceil(SESSIONS_PER_ADDRESS))
        .max(shares.len().div_ceil(CONNECTIONS_PER_ADDRESS))
        .max(1);
    (shares, addresses)
}

pub(crate) type Framing = Framed<TcpStream, FrameCodec<ServerFrame, ClientFrame>>;

async fn reply(
    framed: &mut Framing,
) -> anyhow::Result<(u64, Result<Response, leasehold_protocol::Error>)> {
    match framed.next().await {
        Some(Ok(ServerFrame::Reply { id, body })) => Ok((id, body)),
        Some(Ok(ServerFrame::Close(e))) => bail!("the master closed the connection: {e}"),
        Some(Ok(other)) => bail!("unexpected frame {other:?}"),
        Some(Err(e)) => Err(e.into()),
        None => bail!("the master closed the connection"),
    }
}

/// A connection to `addr` from the `from`th loopback address after
/// 127.0.0.1 (itself for the first), when `addr` is on loopback.
pub(crate) async fn connect_from(addr: &str, from: usize) -> anyhow::Result<TcpStream> {
    let target: SocketAddr = tokio::net::lookup_host(addr)
        .await?
        .next()
        .with_context(|| format!("{addr} names no address"))?;
    let stream = match target.ip() {
        IpAddr::V4(ip) if ip.is_loopback() && from > 0 => {
            let octets = u32::from(Ipv4Addr::new(127, 0, 0, 1)) + from as u32;
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(Ipv4Addr::from(octets).into(), 0))?;
            socket.connect(target).await?
        }
        _ => TcpStream::connect(target).await?,
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Says Hello on `stream`: the framed connection and the master's epoch.
async fn hello(stream: TcpStream) -> anyhow::Result<(Framing, u64)> {
    let mut framed: Framing = Framed::new(stream, FrameCodec::new(DEFAULT_MAX_FRAME));
    framed.send(ClientFrame::Hello(Hello::current())).await?;
    match framed.next().await {
        Some(Ok(ServerFrame::Welcome(w))) => Ok((framed, w.epoch)),
        other => bail!("expected Welcome, got {other:?}"),
    }
}

/// Asks for the session the request id `id` names by its index.
pub(crate) async fn ask_for_session(
    framed: &mut Framing,
    id: usize,
    lease: Duration,
) -> anyhow::Result<()> {
    let create = Request::CreateSession(CreateSession {
        name: "bench".into(),
        lease_ms: Some(lease.as_millis() as u64),
        lock_delay_ms: Some(0),
        behavior: Behavior::Release,
        checks: Vec::new(),
    });
    let id = id as u64;
    Ok(framed
        .feed(ClientFrame::Request { id, body: create })
        .await?)
}

/// A placeholder for a session not created yet.
pub(crate) fn nobody() -> SessionToken {
    SessionToken {
        id: SessionId::nil(),
        secret: SessionSecret::from_bytes([0; 16]),
    }
}

/// The token a `SessionCreated` answer gives.
pub(crate) fn created(
    body: Result<Response, leasehold_protocol::Error>,
) -> anyhow::Result<SessionToken> {
    match body {
        Ok(Response::SessionCreated {
            session, secret, ..
        }) => Ok(SessionToken {
            id: session,
            secret,
        }),
        other => bail!("CreateSession failed: {other:?}"),
    }
}

/// Says Hello on `stream` and creates `n` sessions: the framed
/// connection, the master's epoch and the sessions' tokens.
async fn open_sessions(
    stream: TcpStream,
    n: usize,
    lease: Duration,
) -> anyhow::Result<(Framing, u64, Vec<SessionToken>)> {
    let (mut framed, epoch) = hello(stream).await?;
    // Pipelined, well under the in-flight limit.
    for i in 0..n {
        ask_for_session(&mut framed, i, lease).await?;
    }
    framed.flush().await?;
    let mut sessions = vec![nobody(); n];
    for _ in 0..n {
        let (id, body) = reply(&mut framed).await?;
        *sessions
            .get_mut(id as usize)
            .context("reply to an unknown request")? = created(body)?;
    }
    Ok((framed, epoch, sessions))
}

/// One connection holding `n` sessions, each with a held KeepAlive, until
/// the phase is `Closing`, then destroying them.
async fn hold_leasehold(
    stream: TcpStream,
    n: usize,
    lease: Duration,
    tally: Arc<Tally>,
    mut phase: watch::Receiver<Phase>,
) -> anyhow::Result<()> {
    let (mut framed, mut epoch, sessions) = open_sessions(stream, n, lease).await?;
    let keepalive = |session, epoch| {
        Request::KeepAlive(KeepAlive {
            session,
            epoch,
            acked_seq: 0,
            hold: true,
        })
    };
    for (i, s) in sessions.iter().enumerate() {
        framed
            .feed(ClientFrame::Request {
                id: i as u64,
                body: keepalive(*s, epoch),
            })
            .await?;
    }
    framed.flush().await?;
    tally.created.fetch_add(n as u64, Ordering::Relaxed);
    let mut live = n;
    loop {
        tokio::select! {
            changed = phase.changed() => {
                if changed.is_err() || *phase.borrow() == Phase::Closing {
                    break;
                }
            }
            frame = reply(&mut framed) => {
                let (id, body) = frame?;
                let session = *sessions.get(id as usize).context("reply to an unknown request")?;
                match body {
                    Ok(Response::KeepAlive { .. }) => {
                        if *phase.borrow() == Phase::Measuring {
                            tally.renewals.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => match e.code {
                        ErrorCode::WrongEpoch { current } => epoch = current,
                        ErrorCode::SessionExpired | ErrorCode::UnknownSession => {
                            tally.expired.fetch_add(1, Ordering::Relaxed);
                            live -= 1;
                            if live == 0 {
                                break;
                            }
                            continue;
                        }
                        _ => bail!("KeepAlive failed: {e}"),
                    },
                    Ok(other) => bail!("unexpected reply {other:?}"),
                }
                framed.send(ClientFrame::Request { id, body: keepalive(session, epoch) }).await?;
            }
        }
    }
    destroy(framed, &sessions).await
}

/// Ends `sessions`, so a master given with --addr is left as found.
/// Replies still owed (held KeepAlives, answered on destruction) are read
/// until every destruction is acknowledged or 10 s pass.
pub(crate) async fn destroy(mut framed: Framing, sessions: &[SessionToken]) -> anyhow::Result<()> {
    let n = sessions.len();
    // Ids above any a request of the run used.
    let base = 1 << 40;
    for (i, s) in sessions.iter().enumerate() {
        framed
            .feed(ClientFrame::Request {
                id: base + i as u64,
                body: Request::DestroySession {
                    session: s.id,
                    authority: Authority::Session(*s),
                },
            })
            .await?;
    }
    framed.flush().await?;
    let mut destroyed = 0;
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while destroyed < n {
            match reply(&mut framed).await {
                Ok((id, _)) if id >= base => destroyed += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    })
    .await;
    Ok(())
}

/// One connection holding `n` sessions, renewed together every half
/// lease in `KeepAliveAll` requests (`KA-10`), each answered at once,
/// until the phase is `Closing`, then destroying them.
async fn renew_together(
    stream: TcpStream,
    share: f64,
    n: usize,
    lease: Duration,
    tally: Arc<Tally>,
    mut phase: watch::Receiver<Phase>,
) -> anyhow::Result<()> {
    // A master serves its connections by turns, each connection's
    // requests in order (`CONN-13`): a renewal must not wait behind a
    // long line of this connection's creations, so only a few are asked
    // for at a time. Each session is renewed from the first round after
    // it exists.
    let (mut framed, mut epoch) = hello(stream).await?;
    let mut asked_for = n.min(CREATIONS_IN_FLIGHT);
    for i in 0..asked_for {
        ask_for_session(&mut framed, i, lease).await?;
    }
    framed.flush().await?;
    let mut sessions = vec![nobody(); n];
    let per_request = keepalive_all_limit(DEFAULT_MAX_FRAME);
    // Connections start their rounds spread over the first half lease (by
    // their `share` of it), so the master sees a steady rate rather than
    // a crowd every half lease.
    let every = lease / 2;
    let offset = every.mul_f64(share);
    let mut rounds = tokio::time::interval_at(tokio::time::Instant::now() + offset, every);
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Sessions the master has not ended, and those a request in flight
    // renews, by request id.
    let mut alive = vec![false; n];
    let mut asked: HashMap<u64, (Instant, Vec<usize>)> = HashMap::new();
    let mut next_id = n as u64;
    loop {
        let mut ask = Vec::new();
        tokio::select! {
            changed = phase.changed() => {
                if changed.is_err() || *phase.borrow() == Phase::Closing {
                    break;
                }
            }
            due = rounds.tick() => {
                let late = due.elapsed().as_micros() as u64;
                tally.worst_round_late_us.fetch_max(late, Ordering::Relaxed);
                // A session whose previous round is unanswered is not
                // asked for twice.
                let waiting: HashSet<usize> =
                    asked.values().flat_map(|(_, s)| s).copied().collect();
                ask = (0..n).filter(|i| alive[*i] && !waiting.contains(i)).collect();
            }
            frame = reply(&mut framed) => {
                let (id, body) = frame?;
                if let Some(session) = sessions.get_mut(id as usize) {
                    *session = created(body)?;
                    alive[id as usize] = true;
                    tally.created.fetch_add(1, Ordering::Relaxed);
                    if asked_for < n {
                        ask_for_session(&mut framed, asked_for, lease).await?;
                        framed.flush().await?;
                        asked_for += 1;
                    }
                    continue;
                }
                let (sent, renewed) = asked.remove(&id).context("reply to an unknown request")?;
                let waited = sent.elapsed().as_micros() as u64;
                tally.worst_round_trip_us.fetch_max(waited, Ordering::Relaxed);
                let answers = match body {
                    Ok(Response::KeepAliveAll { answers }) if answers.len() == renewed.len() => answers,
                    Ok(other) => bail!("unexpected reply {other:?}"),
                    Err(e) => bail!("KeepAliveAll failed: {e}"),
                };
                let measuring = *phase.borrow() == Phase::Measuring;
                for (i, answer) in renewed.into_iter().zip(answers) {
                    match answer.map_err(|e| e.code) {
                        Ok(_) if measuring => {
                            tally.renewals.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        // Asked again at once, in the master's epoch.
                        Err(ErrorCode::WrongEpoch { current }) => {
                            epoch = current;
                            ask.push(i);
                        }
                        Err(ErrorCode::SessionExpired | ErrorCode::UnknownSession) => {
                            tally.expired.fetch_add(1, Ordering::Relaxed);
                            alive[i] = false;
                        }
                        Err(code) => bail!("KeepAlive failed: {code:?}"),
                    }
                }
            }
        }
        for chunk in ask.chunks(per_request) {
            let all = chunk
                .iter()
                .map(|&i| KeepAlive {
                    session: sessions[i],
                    epoch,
                    acked_seq: 0,
                    hold: false,
                })
                .collect();
            let body = Request::KeepAliveAll(all);
            framed
                .feed(ClientFrame::Request { id: next_id, body })
                .await?;
            asked.insert(next_id, (Instant::now(), chunk.to_vec()));
            next_id += 1;
        }
        if !ask.is_empty() {
            framed.flush().await?;
        }
    }
    sessions.retain(|s| *s != nobody());
    destroy(framed, &sessions).await
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn sessions_split_evenly_over_the_connections_and_addresses_the_quotas_ask_for() {
        assert_eq!(split(10, 4), (vec![3, 3, 3, 1], 1));
        assert_eq!(split(3, 10), (vec![1, 1, 1], 1));
        assert_eq!(split(0, 4), (vec![], 1));
        let (shares, addresses) = split(1_000_000, 10_000);
        assert_eq!(shares.len(), 10_000);
        assert!(shares.iter().all(|&n| n == 100));
        assert_eq!(addresses, 20);
    }
}
