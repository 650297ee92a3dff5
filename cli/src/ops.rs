//! `leasehold locks` and `leasehold status`: what an operator on call asks
//! first, who holds what and since when, and what the master serves.

use std::process::ExitCode;

use leasehold::{LockListing, LockMode, MasterStatus};

/// Prints every lock at or below `prefix` that is held, awaited or in
/// lock-delay (`LOCK-16`): one line per holder (a lock nobody holds, one
/// line with `-`), or with `json` one object per lock.
pub(crate) async fn locks(addr: &str, json: bool, prefix: &str) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let locks = client.list_locks(prefix).await?;
    if json {
        for lock in &locks {
            println!("{}", leasehold_server::lock_json(lock));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if locks.is_empty() {
        if prefix.is_empty() {
            eprintln!("leasehold: no lock is held, awaited or in lock-delay");
        } else {
            eprintln!(
                "leasehold: no lock at or below '{}' is held, awaited or in lock-delay",
                crate::printable(prefix)
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 8]> = locks.iter().flat_map(rows).collect();
    let header = [
        "KEY", "MODE", "SESSION", "NAME", "GEN", "HELD", "WAITERS", "DELAY",
    ]
    .map(String::from);
    print_table(std::iter::once(header).chain(rows));
    Ok(ExitCode::SUCCESS)
}

/// A lock's lines: one per holder.
fn rows(lock: &LockListing) -> Vec<[String; 8]> {
    let waiters = match lock.waiters.first() {
        Some(first) if !first.name.is_empty() => {
            format!("{} (first: {})", lock.waiters_total, first.name)
        }
        _ => lock.waiters_total.to_string(),
    };
    let delay = lock.delay_remaining_ms.map_or("-".to_string(), for_people);
    let key = crate::printable(&lock.key);
    if lock.holders.is_empty() {
        return vec![[
            key,
            "-".into(),
            "-".into(),
            "-".into(),
            lock.lock_generation.to_string(),
            "-".into(),
            waiters,
            delay,
        ]];
    }
    let more = lock.holders_total.saturating_sub(lock.holders.len() as u64);
    let mut rows: Vec<[String; 8]> = lock
        .holders
        .iter()
        .map(|h| {
            [
                key.clone(),
                mode_name(h.mode).into(),
                h.session.to_string(),
                crate::printable(&h.name),
                lock.lock_generation.to_string(),
                h.held_ms.map_or("?".to_string(), for_people),
                waiters.clone(),
                delay.clone(),
            ]
        })
        .collect();
    if more > 0 {
        let shown = format!("and {more} more holders");
        rows.push([
            key,
            "shared".into(),
            shown,
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    rows
}

/// Prints what the master serves (`OPS-4`); when `addr` names a cell's
/// members, then each member as `cell status` does. Exit status as
/// `cell status`'s in a cell: 69 when no member serves as master.
pub(crate) async fn status(addr: &str, json: bool) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let status = client.status().await?;
    if json {
        println!("{}", leasehold_server::master_json(&status));
    } else {
        print_status(&status);
    }
    if !crate::cell::is_member(addr).await {
        return Ok(ExitCode::SUCCESS);
    }
    if !json {
        println!();
    }
    crate::cell::status(addr, json).await
}

fn print_status(s: &MasterStatus) {
    let ended = s
        .recently_ended
        .iter()
        .map(|(cause, n)| format!("{n} {cause}"))
        .collect::<Vec<_>>()
        .join(", ");
    let stored = s
        .stored_bytes
        .map_or("- (in memory, or a cell's: see its members)".into(), bytes);
    print_table([
        ["version".into(), s.version.clone()],
        ["epoch".into(), s.epoch.to_string()],
        ["index".into(), s.index.to_string()],
        [
            "sessions".into(),
            format!(
                "{} ({} keeping alive now); recently ended: {ended}",
                s.sessions, s.keepalives_held
            ),
        ],
        ["nodes".into(), s.nodes.to_string()],
        [
            "locks".into(),
            format!(
                "{} held ({} holdings), {} waiting, {} in lock-delay",
                s.locks_held, s.holdings, s.waiters, s.locks_in_delay
            ),
        ],
        ["checks".into(), s.checks.to_string()],
        [
            "access".into(),
            if s.access_control { "on" } else { "off" }.into(),
        ],
        ["stored".into(), stored],
    ]);
}

fn mode_name(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::Shared => "shared",
    }
}

/// Rows in columns as wide as their widest cell, two spaces apart.
fn print_table<const N: usize>(rows: impl IntoIterator<Item = [String; N]>) {
    let rows: Vec<[String; N]> = rows.into_iter().collect();
    let mut widths = [0; N];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  "));
            }
        }
        println!("{}", line.trim_end());
    }
}

/// A length of time as people read it: `850ms`, `12.3s`, `4m05s`,
/// `2h03m`, `3d04h`.
fn for_people(ms: u64) -> String {
    let s = ms / 1_000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{}s", s, (ms % 1_000) / 100),
        60_000..3_600_000 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

/// A size as people read it: `512 B`, `1.5 KiB`, `12.0 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut size = n as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_people_read_them() {
        assert_eq!(for_people(850), "850ms");
        assert_eq!(for_people(12_345), "12.3s");
        assert_eq!(for_people(245_000), "4m05s");
        assert_eq!(for_people(7_380_000), "2h03m");
        assert_eq!(for_people(273_600_000), "3d04h");
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(12 << 20), "12.0 MiB");
    }
}
