//! `noisy`: one client cannot hurt another. A canary session is kept alive
//! through the client library while attackers, one pattern at a time, abuse
//! the master as a hostile or careless client would, over raw frames. Per
//! pattern it reports the canary's worst KeepAlive round trip (an unheld
//! KeepAlive every 100 ms on a connection of its own), whether its session
//! ever left `Normal`, how many small writes a bystander on the canary's
//! address got done and how many were refused, and the master's peak
//! resident memory.
//!
//! Every attack is bounded in count and in time and stops by itself; all
//! traffic goes to the master's loopback address.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use leasehold::{Client, SessionOptions, SessionState};
use leasehold_protocol::{
    event_mask, Behavior, CheckStatus, ClientFrame, CreateSession, FrameCodec, Hello, KeepAlive,
    Put, Request, Response, ServerFrame, SessionToken, DEFAULT_MAX_FRAME,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use crate::report::Figure;
use crate::system::{Kind, System};

/// How each attack is sized.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// How long each attack runs.
    pub attack: Duration,
    /// Connections each attack uses.
    pub connections: usize,
    /// The master's resident memory the run must stay under, in MiB.
    pub rss_budget_mib: u64,
}

/// The abuse patterns, in the order they run.
const PATTERNS: &[&str] = &[
    "bulk writes",
    "unread large reads",
    "unread KeepAlives with events",
    "half-sent frames",
    "connection flood",
    "prefix subscriptions",
    "session flood",
    "health check flood",
];

type Raw = Framed<TcpStream, FrameCodec<ServerFrame, ClientFrame>>;

/// The master's epoch, as its last Welcome announced it.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Opens up to `connections` attacker connections and sends `count`
/// requests on each, made by `request`, without reading a reply; gives up
/// on a connection whose writes the master no longer takes. Returns the
/// connections, to hold open.
async fn pipeline(
    addr: &str,
    connections: usize,
    count: u64,
    request: impl Fn() -> Request,
    stopped: impl Fn() -> bool,
) -> anyhow::Result<Vec<Raw>> {
    let mut conns = Vec::new();
    for _ in 0..connections {
        let Some(mut conn) = connect(addr).await? else {
            break;
        };
        for id in 0..count {
            if stopped() {
                break;
            }
            let frame = ClientFrame::Request {
                id,
                body: request(),
            };
            let sent = tokio::time::timeout(Duration::from_secs(1), conn.send(frame)).await;
            if !matches!(sent, Ok(Ok(()))) {
                break;
            }
        }
        conns.push(conn);
    }
    Ok(conns)
}

async fn until(stopped: impl Fn() -> bool) {
    while !stopped() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where the attackers connect from: another loopback address than the
/// canary's, as another host would, so that per-address limits tell them
/// apart.
const ATTACKER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

/// A TCP connection to `addr` from the attackers' address.
async fn attacker_stream(addr: &str) -> std::io::Result<TcpStream> {
    let target: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((ATTACKER, 0).into())?;
    socket.connect(target).await
}

/// An attacker's connection past its handshake; `None` if the master
/// refused it.
async fn connect(addr: &str) -> anyhow::Result<Option<Raw>> {
    handshake(attacker_stream(addr).await?).await
}

async fn handshake(stream: TcpStream) -> anyhow::Result<Option<Raw>> {
    let mut framed = Framed::new(stream, FrameCodec::new(DEFAULT_MAX_FRAME));
    framed.send(ClientFrame::Hello(Hello::current())).await?;
    match tokio::time::timeout(Duration::from_secs(10), framed.next()).await {
        Ok(Some(Ok(ServerFrame::Welcome(w)))) => {
            EPOCH.store(w.epoch, Ordering::Release);
            Ok(Some(framed))
        }
        Ok(Some(Ok(ServerFrame::Close(_)))) | Ok(None) => Ok(None),
        other => bail!("no Welcome: {other:?}"),
    }
}

async fn call(conn: &mut Raw, id: u64, body: Request) -> anyhow::Result<Response> {
    conn.send(ClientFrame::Request { id, body }).await?;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), conn.next()).await {
            Ok(Some(Ok(ServerFrame::Reply { id: got, body }))) if got == id => {
                return body.map_err(|e| anyhow::anyhow!("{:?}: {}", e.code, e.message));
            }
            Ok(Some(Ok(_))) => continue,
            other => bail!("no reply: {other:?}"),
        }
    }
}

async fn create_session(conn: &mut Raw, id: u64) -> anyhow::Result<SessionToken> {
    let request = Request::CreateSession(CreateSession {
        name: "noisy".into(),
        lease_ms: Some(60_000),
        lock_delay_ms: Some(0),
        behavior: Behavior::Release,
        checks: Vec::new(),
    });
    match call(conn, id, request).await? {
        Response::SessionCreated {
            session, secret, ..
        } => Ok(SessionToken {
            id: session,
            secret,
        }),
        other => bail!("unexpected {other:?}"),
    }
}

fn put(key: String, contents: Vec<u8>) -> Request {
    Request::Put(Put {
        key,
        contents,
        flags: 0,
        cas: None,
        ephemeral: None,
    })
}

/// What the canary saw during one attack.
#[derive(Default)]
struct Watch {
    worst_round_trip_us: AtomicU64,
    peak_rss: AtomicU64,
    left_normal: AtomicBool,
    /// The bystander's writes: done, and refused (`Congested` or any
    /// other error).
    written: AtomicU64,
    refused: AtomicU64,
    /// Bytes the attack got acknowledged, where it writes.
    attack_bytes: AtomicU64,
    /// The attack's connections refused with a `Close` saying why, and
    /// those reset or closed without one.
    refused_with_reason: AtomicU64,
    refused_silently: AtomicU64,
    /// The attack's connections served.
    welcomed: AtomicU64,
}

/// Writes 64 bytes to one key of its own, one write at a time, until
/// `stopped`: what another client of the master gets done meanwhile.
async fn bystander(
    mut conn: Raw,
    key: String,
    mut id: u64,
    watch: Arc<Watch>,
    stop: Arc<AtomicBool>,
) -> Raw {
    while !stop.load(Ordering::Acquire) {
        id += 1;
        match call(&mut conn, id, put(key.clone(), vec![b'b'; 64])).await {
            Ok(_) => watch.written.fetch_add(1, Ordering::AcqRel),
            Err(_) => watch.refused.fetch_add(1, Ordering::AcqRel),
        };
    }
    conn
}

pub async fn run(system: &System, shape: Shape) -> anyhow::Result<Vec<Figure>> {
    if system.kind != Kind::Leasehold {
        bail!("the attacks speak Leasehold's wire protocol; there is no peer equivalent");
    }
    let addr = system.addr.clone();
    let client = Client::connect(addr.clone()).await?;
    let canary = client
        .create_session(SessionOptions::new("canary").lease(Duration::from_secs(12)))
        .await?;
    let left_normal = Arc::new(AtomicBool::new(false));
    {
        let left = left_normal.clone();
        canary.on_state_change(move |state| {
            if state != SessionState::Normal {
                left.store(true, Ordering::Release);
            }
        });
    }
    // The probe's own session, on its own connection from the canary's
    // address: its round trips measure what any client would see.
    let mut probe = handshake(TcpStream::connect(&addr).await?)
        .await?
        .context("the canary's probe was refused")?;
    let token = create_session(&mut probe, 1).await?;
    let mut writer = Some(
        handshake(TcpStream::connect(&addr).await?)
            .await?
            .context("the bystander was refused")?,
    );
    let mut figures = Vec::new();
    let mut overall_peak = 0u64;
    for (n, pattern) in PATTERNS.iter().enumerate() {
        eprintln!("noisy: {pattern} for {:?}", shape.attack);
        let watch = Arc::new(Watch::default());
        left_normal.store(false, Ordering::Release);
        let stop = Arc::new(AtomicBool::new(false));
        let attack = tokio::spawn(attack(n, addr.clone(), shape, stop.clone(), watch.clone()));
        let writing = tokio::spawn(bystander(
            writer.take().context("the bystander's connection")?,
            format!("noisy-bystander/{n}"),
            1_000_000 * (n as u64 + 1),
            watch.clone(),
            stop.clone(),
        ));
        let started = Instant::now();
        let until = started + shape.attack;
        let mut id = 1_000_000 * (n as u64 + 1);
        while Instant::now() < until {
            id += 1;
            let sent = Instant::now();
            let keepalive = Request::KeepAlive(KeepAlive {
                session: token,
                epoch: client.epoch().await?,
                acked_seq: 0,
                hold: false,
            });
            let answered = call(&mut probe, id, keepalive).await;
            let took = sent.elapsed().as_micros() as u64;
            watch.worst_round_trip_us.fetch_max(took, Ordering::AcqRel);
            if answered.is_err() {
                watch.left_normal.store(true, Ordering::Release);
            }
            if let Some(usage) = system
                .pids
                .first()
                .and_then(|pid| crate::procstat::usage(*pid))
            {
                watch.peak_rss.fetch_max(usage.rss, Ordering::AcqRel);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.store(true, Ordering::Release);
        let elapsed = started.elapsed().as_secs_f64();
        writer = Some(
            tokio::time::timeout(Duration::from_secs(60), writing)
                .await
                .context("the bystander's write did not end within 60 s")??,
        );
        let outcome = tokio::time::timeout(Duration::from_secs(60), attack).await;
        match outcome {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("noisy: {pattern}: the attack ended early: {e:#}"),
            Ok(Err(e)) => eprintln!("noisy: {pattern}: the attack panicked: {e}"),
            Err(_) => eprintln!("noisy: {pattern}: the attack did not stop within 60 s"),
        }
        let left = left_normal.load(Ordering::Acquire) || watch.left_normal.load(Ordering::Acquire);
        let peak = watch.peak_rss.load(Ordering::Acquire);
        overall_peak = overall_peak.max(peak);
        figures.push(
            Figure::lower(
                format!("{pattern}: canary worst KeepAlive"),
                "ms",
                watch.worst_round_trip_us.load(Ordering::Acquire) as f64 / 1000.0,
            )
            .target(1000.0),
        );
        figures.push(
            Figure::lower(
                format!("{pattern}: canary left Normal"),
                "times",
                f64::from(u8::from(left)),
            )
            .target(0.0),
        );
        figures.push(Figure::higher(
            format!("{pattern}: bystander writes"),
            "/s",
            watch.written.load(Ordering::Acquire) as f64 / elapsed,
        ));
        figures.push(
            Figure::lower(
                format!("{pattern}: bystander writes refused"),
                "times",
                watch.refused.load(Ordering::Acquire) as f64,
            )
            .target(0.0),
        );
        // What the deletes left on disk, once a compaction they call for
        // has had a moment (`STORE-2`).
        if n == 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Some(bytes) = system.pids.first().and_then(|pid| data_dir_bytes(*pid)) {
                figures.push(Figure::lower(
                    format!("{pattern}: data directory after the deletes"),
                    "MiB",
                    bytes as f64 / f64::from(1 << 20),
                ));
            }
        }
        let told = watch.refused_with_reason.load(Ordering::Acquire);
        let silent = watch.refused_silently.load(Ordering::Acquire);
        let welcomed = watch.welcomed.load(Ordering::Acquire);
        if told + silent + welcomed > 0 {
            figures.push(Figure::neutral(
                format!("{pattern}: connections served"),
                "times",
                welcomed as f64,
            ));
            figures.push(Figure::neutral(
                format!("{pattern}: connections refused with the reason"),
                "times",
                told as f64,
            ));
            figures.push(
                Figure::lower(
                    format!("{pattern}: connections reset or closed without it"),
                    "times",
                    silent as f64,
                )
                .target(0.0),
            );
        }
        let attack_bytes = watch.attack_bytes.load(Ordering::Acquire);
        if attack_bytes > 0 {
            figures.push(Figure::higher(
                format!("{pattern}: attacker's bytes written"),
                "MiB/s",
                attack_bytes as f64 / f64::from(1 << 20) / elapsed,
            ));
        }
        figures.push(
            Figure::lower(
                format!("{pattern}: master peak RSS"),
                "MiB",
                (peak >> 20) as f64,
            )
            .target(shape.rss_budget_mib as f64),
        );
    }
    figures.push(
        Figure::lower(
            "master peak RSS, all patterns",
            "MiB",
            (overall_peak >> 20) as f64,
        )
        .target(shape.rss_budget_mib as f64),
    );
    canary.close().await?;
    Ok(figures)
}

/// The bytes in the data directory of the master with process id `pid`
/// (its `--data-dir`, as its command line names it), the disk reserve
/// left out; `None` if that cannot be read.
fn data_dir_bytes(pid: u32) -> Option<u64> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let at = args.iter().position(|a| *a == b"--data-dir")?;
    let dir = std::path::Path::new(std::str::from_utf8(args.get(at + 1)?).ok()?);
    let dir = if dir.is_relative() {
        std::fs::read_link(format!("/proc/{pid}/cwd"))
            .ok()?
            .join(dir)
    } else {
        dir.to_path_buf()
    };
    let bytes = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name() != "reserve")
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    Some(bytes)
}

/// Runs attack number `n` until `stop`, bounded in count too.
async fn attack(
    n: usize,
    addr: String,
    shape: Shape,
    stop: Arc<AtomicBool>,
    watch: Arc<Watch>,
) -> anyhow::Result<()> {
    let stopped = || stop.load(Ordering::Acquire);
    let tag = uuid::Uuid::new_v4().simple().to_string();
    match n {
        // Pipelined 256 KiB reads, never read back.
        1 => {
            let mut setup = connect(&addr).await?.context("refused")?;
            let key = format!("noisy-{tag}/big");
            call(&mut setup, 1, put(key.clone(), vec![b'x'; 256 * 1024])).await?;
            let get = || Request::Get {
                key: key.clone(),
                stat_only: false,
            };
            let _conns = pipeline(&addr, shape.connections, 3_000, get, stopped).await?;
            until(stopped).await;
        }
        // Unheld KeepAlives with a full event queue, never read back.
        2 => {
            let mut owner = connect(&addr).await?.context("refused")?;
            let session = create_session(&mut owner, 1).await?;
            let subscribe = Request::Subscribe {
                session,
                key: format!("noisy-{tag}"),
                prefix: true,
                mask: event_mask::ALL,
            };
            call(&mut owner, 2, subscribe).await?;
            let long = "k".repeat(400);
            for i in 0..1_000u64 {
                call(
                    &mut owner,
                    10 + i,
                    put(format!("noisy-{tag}/{long}{i}"), b"v".to_vec()),
                )
                .await?;
            }
            let keepalive = || {
                Request::KeepAlive(KeepAlive {
                    session,
                    epoch: EPOCH.load(Ordering::Acquire),
                    acked_seq: 0,
                    hold: false,
                })
            };
            let _conns = pipeline(&addr, shape.connections, 20_000, keepalive, stopped).await?;
            until(stopped).await;
        }
        // Connections that send half a frame and stall.
        3 => {
            let mut conns = Vec::new();
            for _ in 0..shape.connections * 10 {
                if stopped() {
                    break;
                }
                let Some(conn) = connect(&addr).await? else {
                    break;
                };
                let mut stream = conn.into_inner();
                let _ = stream.write_all(&[0, 0, 1, 0, 7, 7, 7]).await;
                conns.push(stream);
            }
            until(stopped).await;
        }
        // 5,000 connections, each saying Hello and reading nothing until
        // all are open: past the address's cap (4,096) each should read
        // its refusal, not a reset.
        4 => {
            let mut conns = Vec::new();
            let hello = {
                let mut codec = FrameCodec::<ServerFrame, ClientFrame>::new(DEFAULT_MAX_FRAME);
                let mut bytes = bytes::BytesMut::new();
                tokio_util::codec::Encoder::encode(
                    &mut codec,
                    ClientFrame::Hello(Hello::current()),
                    &mut bytes,
                )?;
                bytes.freeze()
            };
            // Past the pattern's time if need be (30 s at most): the cap
            // must be reached for the refusals to be seen.
            let opening = Instant::now();
            for _ in 0..5_000 {
                if opening.elapsed() > Duration::from_secs(30) {
                    break;
                }
                let Ok(mut stream) = attacker_stream(&addr).await else {
                    break;
                };
                let _ = stream.write_all(&hello).await;
                conns.push(stream);
            }
            for stream in conns.iter_mut() {
                let mut framed = tokio_util::codec::FramedRead::new(
                    stream,
                    FrameCodec::<ServerFrame, ClientFrame>::new(DEFAULT_MAX_FRAME),
                );
                let answer = tokio::time::timeout(Duration::from_secs(5), framed.next()).await;
                match answer {
                    Ok(Some(Ok(ServerFrame::Welcome(_)))) => {
                        watch.welcomed.fetch_add(1, Ordering::AcqRel);
                    }
                    Ok(Some(Ok(ServerFrame::Close(_)))) => {
                        watch.refused_with_reason.fetch_add(1, Ordering::AcqRel);
                    }
                    _ => {
                        watch.refused_silently.fetch_add(1, Ordering::AcqRel);
                    }
                };
            }
            until(stopped).await;
        }
        // Sessions subscribed to every ancestor of one deep key (the root
        // too), as many subscriptions as the address's quota allows, then
        // pipelined writes to that key: every write matches them all, and
        // every write by anyone matches the root's.
        5 => {
            let mut conn = connect(&addr).await?.context("refused")?;
            let mut id = 1;
            let segments: Vec<String> = (0..31).map(|i| format!("s{i}")).collect();
            let deep = format!("noisy-{tag}/{}", segments.join("/"));
            let ancestors: Vec<String> = std::iter::once(String::new())
                .chain(deep.match_indices('/').map(|(i, _)| deep[..i].to_string()))
                .chain(std::iter::once(deep.clone()))
                .collect();
            // In rounds of 100 sessions, each round's creations and then
            // its subscriptions pipelined, until the address's quota.
            'subscribing: for _ in 0..30 {
                if stopped() {
                    break;
                }
                let create = (0..100).map(|_| {
                    Request::CreateSession(CreateSession {
                        name: "noisy".into(),
                        lease_ms: Some(60_000),
                        lock_delay_ms: Some(0),
                        behavior: Behavior::Release,
                        checks: Vec::new(),
                    })
                });
                let (last, created) = burst_answers(&mut conn, id, create).await?;
                id = last;
                let sessions: Vec<SessionToken> = created
                    .into_iter()
                    .filter_map(|answer| match answer {
                        Ok(Response::SessionCreated {
                            session, secret, ..
                        }) => Some(SessionToken {
                            id: session,
                            secret,
                        }),
                        _ => None,
                    })
                    .collect();
                let mut subscriptions = Vec::new();
                for session in &sessions {
                    for key in &ancestors {
                        subscriptions.push(Request::Subscribe {
                            session: *session,
                            key: key.clone(),
                            prefix: true,
                            mask: event_mask::CONTENTS,
                        });
                    }
                }
                let wanted = subscriptions.len() as u64;
                let (last, made) = burst(&mut conn, id, subscriptions.into_iter()).await?;
                id = last;
                if sessions.len() < 100 || made < wanted {
                    break 'subscribing; // the address's quota
                }
            }
            for _ in 0..1_000 {
                if stopped() {
                    break;
                }
                let writes = (0..100).map(|_| put(deep.clone(), b"v".to_vec()));
                id = burst(&mut conn, id, writes).await?.0;
            }
        }
        // Sessions created as fast as one connection can, up to 200,000.
        6 => {
            let mut conn = connect(&addr).await?.context("refused")?;
            let mut id = 0;
            while !stopped() && id < 200_000 {
                id += 1;
                if create_session(&mut conn, id).await.is_err() {
                    break;
                }
            }
        }
        // Health checks created until the master's cap.
        7 => {
            let mut conn = connect(&addr).await?.context("refused")?;
            let mut id = 0;
            while !stopped() && id < 20_000 {
                id += 1;
                let check = Request::SetCheck {
                    name: format!("noisy-{tag}-{id}"),
                    status: CheckStatus::Passing,
                    note: String::new(),
                };
                if call(&mut conn, id, check).await.is_err() {
                    break;
                }
            }
            until(stopped).await;
        }
        // Bursts of 400 pipelined 256 KiB puts (100 MiB), each followed
        // by the deletes of those keys, up to 20 rounds: every byte inside
        // the address's quotas, every fsync a long one. First, before any
        // other pattern's sessions and subscriptions are left behind.
        0 => {
            let mut conn = connect(&addr).await?.context("refused")?;
            let contents = vec![b'x'; 256 * 1024];
            let keys: Vec<String> = (0..400).map(|i| format!("noisy-{tag}/bulk/{i}")).collect();
            let mut id = 0;
            for _ in 0..20 {
                if stopped() {
                    break;
                }
                let puts = keys.iter().map(|k| put(k.clone(), contents.clone()));
                let (last, written) = burst(&mut conn, id, puts).await?;
                let bytes = written * contents.len() as u64;
                watch.attack_bytes.fetch_add(bytes, Ordering::AcqRel);
                id = last;
                let deletes = keys.iter().map(|k| Request::Delete {
                    key: k.clone(),
                    cas: None,
                    recursive: false,
                    authority: leasehold_protocol::Authority::Anonymous,
                });
                id = burst(&mut conn, id, deletes).await?.0;
            }
            until(stopped).await;
        }
        _ => {}
    }
    Ok(())
}

/// Sends every request of `requests` without waiting, then reads their
/// replies; returns the last id used and how many succeeded.
async fn burst(
    conn: &mut Raw,
    id: u64,
    requests: impl Iterator<Item = Request>,
) -> anyhow::Result<(u64, u64)> {
    let (last, answers) = burst_answers(conn, id, requests).await?;
    Ok((last, answers.iter().filter(|a| a.is_ok()).count() as u64))
}

/// [`burst`], returning the answers, in the order of their replies.
async fn burst_answers(
    conn: &mut Raw,
    mut id: u64,
    requests: impl Iterator<Item = Request>,
) -> anyhow::Result<(u64, Vec<Result<Response, leasehold_protocol::Error>>)> {
    let first = id + 1;
    for body in requests {
        id += 1;
        conn.feed(ClientFrame::Request { id, body }).await?;
    }
    conn.flush().await?;
    let mut left = id + 1 - first;
    let mut answers = Vec::new();
    while left > 0 {
        match tokio::time::timeout(Duration::from_secs(60), conn.next()).await {
            Ok(Some(Ok(ServerFrame::Reply { id: got, body }))) if got >= first => {
                left -= 1;
                answers.push(body);
            }
            Ok(Some(Ok(_))) => continue,
            other => bail!("no reply: {other:?}"),
        }
    }
    Ok((id, answers))
}
