//! A closed-loop load: each client issues its next operation as soon as
//! the previous one completes, until the time or the count runs out.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::latency::Latency;
use crate::procstat::{Meter, Span};
use crate::report::Figure;

/// What a closed-loop run did.
pub struct Run {
    pub ops: u64,
    pub elapsed: Duration,
    pub latency: Latency,
    /// CPU the server processes used meanwhile, when it could be read.
    pub server: Option<Span>,
    /// CPU this process (the load generator, clients included) used.
    pub generator: Option<Span>,
}

impl Run {
    pub fn per_second(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Where the machine's cores went: the server's CPU time and the load
    /// generator's per operation.
    pub fn cpu_figures(&self, label: &str) -> Vec<Figure> {
        let per_op = |span: &Span| span.cpu.as_secs_f64() * 1e6 / self.ops.max(1) as f64;
        let mut figures = Vec::new();
        if let Some(server) = &self.server {
            figures.push(Figure::lower(
                format!("server CPU per op, {label}"),
                "us",
                per_op(server),
            ));
        }
        if let Some(generator) = &self.generator {
            figures.push(Figure::neutral(
                format!("client CPU per op, {label}"),
                "us",
                per_op(generator),
            ));
        }
        figures
    }
}

/// Runs `op(client, client_index, n)` in a loop on every client at once
/// for `duration`, stopping early after `max_ops` operations in all,
/// metering the CPU of the processes `server` meanwhile (every member of
/// a cluster).
pub async fn closed_loop<C, F, Fut>(
    server: &[u32],
    clients: &[Arc<C>],
    duration: Duration,
    max_ops: u64,
    what: &str,
    op: F,
) -> anyhow::Result<Run>
where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let bar = crate::progress::timer(duration, what);
    let done = Arc::new(AtomicU64::new(0));
    let server_meter = Meter::start(server);
    let generator_meter = Meter::start(&[std::process::id()]);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, done, op) = (client.clone(), done.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut latency = Latency::new();
            let mut n = 0u64;
            while Instant::now() < deadline && done.fetch_add(1, Ordering::Relaxed) < max_ops {
                let sent = Instant::now();
                op(client.clone(), i, n).await?;
                latency.record(sent.elapsed());
                n += 1;
            }
            anyhow::Ok(latency)
        }));
    }
    let ticker = {
        let bar = bar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                bar.set_position(started.elapsed().as_secs());
            }
        })
    };
    let mut latency = Latency::new();
    let mut failure = None;
    for t in tasks {
        match t.await? {
            Ok(l) => latency.merge(&l),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    let elapsed = started.elapsed();
    let (server, generator) = (server_meter.span(), generator_meter.span());
    ticker.abort();
    bar.finish_and_clear();
    if let Some(e) = failure {
        return Err(e.context(format!("{what}: an operation failed")));
    }
    Ok(Run {
        ops: latency.count(),
        elapsed,
        latency,
        server,
        generator,
    })
}

/// Opens `n` clients with at most 64 connecting at once.
pub async fn open<C, F, Fut>(n: usize, what: &str, open: F) -> anyhow::Result<Vec<Arc<C>>>
where
    C: Send + Sync + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<C>>,
{
    use futures::stream::{self, StreamExt, TryStreamExt};
    let bar = crate::progress::bar(n as u64, what);
    let clients: Vec<Arc<C>> = stream::iter(0..n)
        .map(|i| {
            let fut = open(i);
            let bar = bar.clone();
            async move {
                let c = fut.await?;
                bar.inc(1);
                anyhow::Ok(Arc::new(c))
            }
        })
        .buffered(64)
        .try_collect()
        .await?;
    bar.finish_and_clear();
    Ok(clients)
}
