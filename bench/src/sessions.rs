//! `sessions`: hold many sessions over fewer connections, each kept alive
//! the way the client library does it (one held KeepAlive outstanding per
//! session, the next sent as soon as a reply arrives, `KA-1`), and measure
//! what that costs the master.
//!
//! Leasehold's sessions are driven over the raw protocol: a hundred
//! thousand client-library sessions would spend this machine's two cores
//! in the load generator rather than in the master being measured.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use leasehold_protocol::{
    Authority, Behavior, ClientFrame, CreateSession, ErrorCode, FrameCodec, Hello, KeepAlive,
    Request, Response, ServerFrame, SessionId, SessionSecret, SessionToken, DEFAULT_MAX_FRAME,
};
use tokio::net::TcpStream;
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
}

pub async fn run(system: &System, shape: Shape) -> anyhow::Result<Vec<Figure>> {
    let shape = Shape {
        sessions: shape.sessions.min(system.kind.max_sessions()),
        ..shape
    };
    let tally = Arc::new(Tally::default());
    let (measuring, _) = watch::channel(Phase::Creating);
    let before = Meter::start(&system.pids);
    let bar = crate::progress::bar(shape.sessions as u64, "creating sessions");
    let per = shape.sessions.div_ceil(shape.connections.max(1));
    let mut tasks = Vec::new();
    let mut remaining = shape.sessions;
    while remaining > 0 {
        let n = per.min(remaining);
        remaining -= n;
        let (system, tally, phase) = (system.clone(), tally.clone(), measuring.subscribe());
        tasks.push(tokio::spawn(async move {
            match system.kind {
                Kind::Leasehold => hold_leasehold(&system.addr, n, shape.lease, tally, phase).await,
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
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let created = tally.created.load(Ordering::Relaxed);
        bar.set_position(created);
        if created as usize >= shape.sessions {
            break;
        }
        if let Some(t) = tasks.iter().position(|t| t.is_finished()) {
            let task = tasks.remove(t);
            task.await??;
            bail!("a connection ended while creating sessions");
        }
        if Instant::now() > deadline {
            bail!("creating {} sessions took over 600 s", shape.sessions);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
                .target(40.0),
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
            .target(512.0),
        );
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

type Framing = Framed<TcpStream, FrameCodec<ServerFrame, ClientFrame>>;

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

/// One connection holding `n` sessions until the phase is `Closing`, then
/// destroying them.
async fn hold_leasehold(
    addr: &str,
    n: usize,
    lease: Duration,
    tally: Arc<Tally>,
    mut phase: watch::Receiver<Phase>,
) -> anyhow::Result<()> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut framed: Framing = Framed::new(stream, FrameCodec::new(DEFAULT_MAX_FRAME));
    framed.send(ClientFrame::Hello(Hello::current())).await?;
    let mut epoch = match framed.next().await {
        Some(Ok(ServerFrame::Welcome(w))) => w.epoch,
        other => bail!("expected Welcome, got {other:?}"),
    };
    // Request ids name the session by index; creation requests are
    // pipelined (well under the in-flight limit).
    for i in 0..n {
        let create = Request::CreateSession(CreateSession {
            name: "bench".into(),
            lease_ms: Some(lease.as_millis() as u64),
            lock_delay_ms: Some(0),
            behavior: Behavior::Release,
            checks: Vec::new(),
        });
        framed
            .feed(ClientFrame::Request {
                id: i as u64,
                body: create,
            })
            .await?;
    }
    framed.flush().await?;
    let nobody = SessionToken {
        id: SessionId::nil(),
        secret: SessionSecret::from_bytes([0; 16]),
    };
    let mut sessions = vec![nobody; n];
    for _ in 0..n {
        match reply(&mut framed).await? {
            (
                id,
                Ok(Response::SessionCreated {
                    session, secret, ..
                }),
            ) => {
                sessions[id as usize] = SessionToken {
                    id: session,
                    secret,
                }
            }
            (_, other) => bail!("CreateSession failed: {other:?}"),
        }
    }
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
    // End the sessions, so a master given with --addr is left as found.
    // Replies still owed (held KeepAlives, answered on destruction) are
    // read until every destruction is acknowledged or 10 s pass.
    let base = n as u64;
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
