//! `kv`: writes then reads of small values, with 1 and with 64 clients,
//! each client on its own connection.

use std::time::Duration;

use crate::clients::Kv;
use crate::limits::Limits;
use crate::load;
use crate::report::Figure;
use crate::system::System;

const VALUE: &[u8] = b"0123456789abcdef0123456789abcdef";
/// Keys per client: reads hit keys the writes made.
const KEYS_PER_CLIENT: u64 = 100;

pub async fn run(
    system: &System,
    client_counts: &[usize],
    duration: Duration,
) -> anyhow::Result<Vec<Figure>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut figures = Vec::new();
    for &clients in client_counts {
        let label = format!("{clients} client(s)");
        let kvs = load::open(clients, "connecting", |_| Kv::connect(system)).await?;
        let prefix = format!("bench-kv-{run}-{clients}");
        let p = prefix.clone();
        let puts = load::closed_loop(
            &system.pids,
            &kvs,
            duration,
            50_000_000,
            &format!("put, {label}"),
            move |kv, i, n| {
                let key = format!("{p}/{i}/{}", n % KEYS_PER_CLIENT);
                async move { kv.put(&key, VALUE).await }
            },
        )
        .await?;
        let p = prefix.clone();
        let gets = load::closed_loop(
            &system.pids,
            &kvs,
            duration,
            50_000_000,
            &format!("get, {label}"),
            move |kv, i, n| {
                let key = format!("{p}/{i}/{}", n % KEYS_PER_CLIENT);
                async move {
                    // Clients that wrote fewer keys than this read a missing
                    // one: still a full read round trip.
                    kv.get(&key).await?;
                    Ok(())
                }
            },
        )
        .await?;
        let mut put_rate = Figure::higher(format!("puts/s, {label}"), "/s", puts.per_second());
        let mut get_rate = Figure::higher(format!("gets/s, {label}"), "/s", gets.per_second());
        if clients == 1 {
            put_rate = put_rate.bounded_by(Limits::write_1_client);
            get_rate = get_rate.bounded_by(Limits::read_1_client);
        }
        figures.push(put_rate);
        figures.push(Figure::lower(
            format!("put p50, {label}"),
            "ms",
            puts.latency.ms(0.5),
        ));
        figures.push(Figure::lower(
            format!("put p99, {label}"),
            "ms",
            puts.latency.ms(0.99),
        ));
        figures.push(get_rate);
        figures.push(Figure::lower(
            format!("get p50, {label}"),
            "ms",
            gets.latency.ms(0.5),
        ));
        figures.push(Figure::lower(
            format!("get p99, {label}"),
            "ms",
            gets.latency.ms(0.99),
        ));
        figures.extend(puts.cpu_figures(&format!("put, {label}")));
        figures.extend(gets.cpu_figures(&format!("get, {label}")));
    }
    Ok(figures)
}
