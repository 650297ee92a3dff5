//! `fanout`: many subscribers on one key, each with its own session; one
//! write; how long until the last subscriber has the event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use leasehold::{Client, SessionOptions, SubscribeOptions, SubscriptionEvent};
use tokio::sync::Barrier;

pub use crate::fanout_arrivals::Shape;
use crate::fanout_arrivals::{Arrivals, Meters};
use crate::procstat::Span;
use crate::report::Figure;
use crate::system::{Kind, System};

pub async fn run(system: &System, shape: Shape) -> anyhow::Result<Vec<Figure>> {
    let key = format!("bench-fanout-{}", uuid::Uuid::new_v4().simple());
    let arrivals = match system.kind {
        Kind::Leasehold => leasehold(&system.addr, &system.pids, &key, shape).await?,
        #[cfg(feature = "etcd")]
        Kind::Etcd => crate::etcd::fanout(&system.addr, &system.pids, &key, shape).await?,
        #[cfg(feature = "zookeeper")]
        Kind::Zookeeper => {
            crate::zookeeper::fanout(&system.addr, &system.pids, &key, shape).await?
        }
        #[allow(unreachable_patterns)]
        _ => return Err(system.missing()),
    };
    let Arrivals {
        mut times,
        server,
        client,
    } = arrivals;
    if times.len() != shape.subscribers {
        bail!(
            "{} of {} subscribers saw the write",
            times.len(),
            shape.subscribers
        );
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut figures = vec![
        Figure::lower("first subscriber has the event", "ms", ms(times[0])),
        Figure::lower("median subscriber", "ms", ms(times[times.len() / 2])),
        Figure::lower(
            "last subscriber has the event",
            "ms",
            ms(*times.last().unwrap()),
        )
        .target(100.0),
    ];
    let per_event = |span: Span| span.cpu.as_secs_f64() * 1e6 / shape.subscribers as f64;
    if let Some(server) = server {
        figures.push(Figure::lower(
            "server CPU per subscriber",
            "us",
            per_event(server),
        ));
    }
    if let Some(client) = client {
        figures.push(Figure::neutral(
            "client CPU per subscriber",
            "us",
            per_event(client),
        ));
    }
    Ok(figures)
}

/// One session per connection, as ZooKeeper has it and as etcd has one
/// watch stream per connection; each session carries its share of the
/// subscriptions, and the master sends each subscription its event.
async fn leasehold(addr: &str, pids: &[u32], key: &str, shape: Shape) -> anyhow::Result<Arrivals> {
    let per = shape.subscribers.div_ceil(shape.connections.max(1));
    let sessions = shape.subscribers.div_ceil(per);
    let ready = Arc::new(Barrier::new(sessions + 1));
    let (start_tx, start) = tokio::sync::watch::channel(None::<Instant>);
    let bar = crate::progress::bar(shape.subscribers as u64, "subscribing");
    let mut tasks = Vec::new();
    let mut remaining = shape.subscribers;
    for _ in 0..sessions {
        let n = per.min(remaining);
        remaining -= n;
        let (addr, key, ready, mut start, bar) = (
            addr.to_string(),
            key.to_string(),
            ready.clone(),
            start.clone(),
            bar.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let setup = async {
                let client = Client::connect(addr).await?;
                let session = client
                    .create_session(SessionOptions::new("bench-fanout"))
                    .await?;
                let mut subscriptions = Vec::new();
                for _ in 0..n {
                    subscriptions.push(session.subscribe(&key, SubscribeOptions::exact()).await?);
                    bar.inc(1);
                }
                anyhow::Ok((session, subscriptions))
            }
            .await;
            ready.wait().await;
            let (session, mut subscriptions) = setup?;
            let sent = start.wait_for(|s| s.is_some()).await?.expect("set");
            let arrivals =
                futures::future::try_join_all(subscriptions.iter_mut().map(|s| async move {
                    loop {
                        match s.next().await {
                            Some(SubscriptionEvent::Changed { .. }) => return Ok(sent.elapsed()),
                            Some(_) => {}
                            None => bail!("the subscription ended"),
                        }
                    }
                }));
            let arrivals = tokio::time::timeout(Duration::from_secs(60), arrivals)
                .await
                .context("no event within 60 s")??;
            // Kept to the end: a dropped subscription unsubscribes, and
            // closing sessions or unsubscribing during the measurement
            // would delay and bill the deliveries still under way.
            anyhow::Ok((arrivals, (session, subscriptions)))
        }));
    }
    ready.wait().await;
    bar.finish_and_clear();
    let writer = Client::connect(addr.to_string()).await?;
    let meters = Meters::start(pids);
    start_tx.send_replace(Some(Instant::now()));
    writer
        .put(key, b"x".to_vec(), leasehold::PutOptions::new())
        .await?;
    let mut arrivals = Vec::new();
    let mut sessions = Vec::new();
    for t in tasks {
        let (times, session) = t.await??;
        arrivals.extend(times);
        sessions.push(session);
    }
    let arrivals = meters.finish(arrivals);
    futures::future::join_all(sessions.into_iter().map(|(session, subscriptions)| {
        drop(subscriptions);
        session.close()
    }))
    .await;
    Ok(arrivals)
}
