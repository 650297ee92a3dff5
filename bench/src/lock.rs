//! `lock`: exclusive acquire+release round trips, each client with its own
//! connection and session, uncontended and contended.

use std::time::Duration;

use crate::limits::Limits;
use crate::load;
use crate::report::Figure;
use crate::system::System;

/// One load shape: `clients` clients cycling over `keys` keys.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub clients: usize,
    pub keys: usize,
}

/// The shapes the targets name: one sequential client, 64 clients
/// each on its own key, and 64 clients in line for one key.
pub const DEFAULT_SHAPES: [Shape; 3] = [
    Shape {
        clients: 1,
        keys: 1,
    },
    Shape {
        clients: 64,
        keys: 64,
    },
    Shape {
        clients: 64,
        keys: 1,
    },
];

/// Limit and target of a shape's cycles per second, where the issue sets
/// one.
fn bounds(shape: Shape, limits: Option<&Limits>) -> (Option<f64>, Option<f64>) {
    let limit = |f: fn(&Limits) -> f64| limits.map(f);
    match (shape.clients, shape.keys) {
        (1, _) => (limit(Limits::lock_1_client), Some(1_300.0)),
        (64, 64) => (limit(Limits::lock_64_keys), Some(35_000.0)),
        (64, 1) => (limit(Limits::lock_1_key), Some(2_500.0)),
        _ => (None, None),
    }
}

pub async fn run(
    system: &System,
    shapes: &[Shape],
    duration: Duration,
    limits: Option<&Limits>,
) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    // Keys unique to this run, so runs against one server never meet.
    let run = uuid::Uuid::new_v4().simple().to_string();
    for &shape in shapes {
        let label = format!("{} client(s), {} key(s)", shape.clients, shape.keys);
        let lockers = load::open(shape.clients, "opening sessions", |_| {
            system.locker(Duration::from_secs(12))
        })
        .await?;
        let prefix = format!("bench-lock-{run}-{}x{}", shape.clients, shape.keys);
        let keys = shape.keys;
        let result = load::closed_loop(
            system.pid,
            &lockers,
            duration,
            50_000_000,
            &format!("lock {label}"),
            move |locker, i, _| {
                let key = format!("{prefix}/{}", i % keys);
                async move { locker.cycle(&key).await }
            },
        )
        .await?;
        for locker in lockers {
            if let Ok(locker) = std::sync::Arc::try_unwrap(locker) {
                locker.close().await;
            }
        }
        let (limit, target) = bounds(shape, limits);
        let mut throughput =
            Figure::higher(format!("cycles/s, {label}"), "/s", result.per_second());
        if let Some(limit) = limit {
            throughput = throughput.limit(limit);
        }
        if let Some(target) = target {
            throughput = throughput.target(target);
        }
        figures.push(throughput);
        figures.push(Figure::lower(
            format!("p50, {label}"),
            "ms",
            result.latency.ms(0.5),
        ));
        let mut p99 = Figure::lower(format!("p99, {label}"), "ms", result.latency.ms(0.99));
        if shape.clients == 64 && shape.keys == 64 {
            p99 = p99.target(5.0);
        }
        figures.push(p99);
        figures.push(Figure::lower(
            format!("p99.9, {label}"),
            "ms",
            result.latency.ms(0.999),
        ));
        figures.extend(result.cpu_figures(&label));
    }
    Ok(figures)
}
