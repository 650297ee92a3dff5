//! `lock`: exclusive acquire+release round trips, each client with its own
//! connection and session, uncontended and contended.

use std::time::Duration;

use crate::clients::Locker;
use crate::limits::{Bound, Limits};
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

/// What bounds a shape's cycles per second on this machine, and the
/// target for it, where there is one.
fn bounds(shape: Shape) -> (Option<Bound>, Option<f64>) {
    match (shape.clients, shape.keys) {
        (1, _) => (Some(Limits::lock_1_client), Some(1_300.0)),
        (64, 64) => (Some(Limits::lock_64_keys), Some(35_000.0)),
        (64, 1) => (Some(Limits::lock_1_key), Some(2_500.0)),
        _ => (None, None),
    }
}

pub async fn run(
    system: &System,
    shapes: &[Shape],
    duration: Duration,
) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    // Keys unique to this run, so runs against one server never meet.
    let run = uuid::Uuid::new_v4().simple().to_string();
    for &shape in shapes {
        let label = format!("{} client(s), {} key(s)", shape.clients, shape.keys);
        let lockers = load::open(shape.clients, "opening sessions", |_| {
            Locker::connect(system, Duration::from_secs(12))
        })
        .await?;
        let prefix = format!("bench-lock-{run}-{}x{}", shape.clients, shape.keys);
        let keys = shape.keys;
        let result = load::closed_loop(
            &system.pids,
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
        let (bound, target) = bounds(shape);
        let mut throughput =
            Figure::higher(format!("cycles/s, {label}"), "/s", result.per_second());
        if let Some(bound) = bound {
            throughput = throughput.bounded_by(bound);
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
