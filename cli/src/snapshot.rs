//! `leasehold snapshot save|status|restore`: backups of a live master
//! (SPEC `OPS-6`).

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use leasehold_server::{Backup, BackupSummary};
use serde_json::json;

use crate::SnapshotCommand;

pub(crate) async fn snapshot(
    addr: &str,
    json: bool,
    command: SnapshotCommand,
) -> anyhow::Result<ExitCode> {
    match command {
        SnapshotCommand::Save { file } => save(addr, json, &file).await,
        SnapshotCommand::Status { file } => status(json, &file),
        SnapshotCommand::Restore {
            file,
            data_dir,
            cell,
            node,
        } => match (cell, node) {
            (Some(cell), Some(node)) => match first_member(&cell, node) {
                Ok(member) => restore(json, &file, &data_dir, Some(member)),
                Err(code) => Ok(code),
            },
            _ => restore(json, &file, &data_dir, None),
        },
    }
}

/// Saves the master's snapshot to `file`: written to a file beside it,
/// synced, then renamed, so `file` is whole or absent.
async fn save(addr: &str, json: bool, file: &Path) -> anyhow::Result<ExitCode> {
    let name = file
        .file_name()
        .with_context(|| format!("{} names no file", file.display()))?;
    let partial = file.with_file_name(format!(".{}.partial", name.to_string_lossy()));
    let client = crate::connect(addr).await?;
    let mut out = match private_file(&partial) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("leasehold: cannot create {}: {e}", partial.display());
            return Ok(ExitCode::from(crate::CANT_CREATE));
        }
    };
    let terminal = std::io::stderr().is_terminal();
    let saved = client
        .save_snapshot(&mut out, |done, total| {
            if terminal {
                eprint!("\r{}", progress_bar(done, total));
            }
        })
        .await;
    if terminal {
        eprintln!();
    }
    let saved = match saved {
        Ok(saved) => saved,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            if let leasehold::ClientError::Write { .. } = e {
                eprintln!("leasehold: {e}");
                return Ok(ExitCode::from(crate::CANT_CREATE));
            }
            return Err(e.into());
        }
    };
    if let Err(e) = out.sync_all() {
        let _ = std::fs::remove_file(&partial);
        eprintln!("leasehold: cannot write {}: {e}", file.display());
        return Ok(ExitCode::from(crate::CANT_CREATE));
    }
    // What arrived is checked whole before it takes the name.
    if let Err(e) = Backup::read(&partial) {
        let _ = std::fs::remove_file(&partial);
        eprintln!(
            "leasehold: the snapshot received does not verify, nothing was saved: {}",
            crate::printable(&e.to_string())
        );
        return Ok(ExitCode::from(crate::MALFORMED));
    }
    let synced = std::fs::rename(&partial, file);
    if let Err(e) = synced {
        let _ = std::fs::remove_file(&partial);
        eprintln!("leasehold: cannot write {}: {e}", file.display());
        return Ok(ExitCode::from(crate::CANT_CREATE));
    }
    if json {
        println!(
            "{}",
            json!({ "file": file, "index": saved.index, "epoch": saved.epoch, "bytes": saved.bytes })
        );
    } else {
        println!(
            "saved {} ({} bytes): index {}, epoch {}",
            file.display(),
            saved.bytes,
            saved.index,
            saved.epoch
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A file for the snapshot only its owner may read: it holds every
/// session's secret. A link in its place is not followed.
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        let file = options.open(path)?;
        // A file left by an earlier save keeps its mode: set it anew.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(file)
    }
    #[cfg(not(unix))]
    options.open(path)
}

/// `[=====>    ] 12.0 of 40.0 MiB`
fn progress_bar(done: u64, total: u64) -> String {
    const WIDTH: u64 = 30;
    let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH);
    let mib = |n: u64| n as f64 / (1024.0 * 1024.0);
    format!(
        "[{}{}] {:.1} of {:.1} MiB",
        "=".repeat(filled as usize),
        " ".repeat((WIDTH - filled) as usize),
        mib(done),
        mib(total)
    )
}

/// A backup that cannot be read is exit 66, one that is damaged 65, with
/// the reason.
fn read(file: &Path) -> Result<Backup, ExitCode> {
    Backup::read(file).map_err(|e| {
        eprintln!("leasehold: {}", crate::printable(&e.to_string()));
        match e {
            leasehold_server::BackupError::Unreadable { .. } => ExitCode::from(crate::NO_INPUT),
            _ => ExitCode::from(crate::MALFORMED),
        }
    })
}

fn status(json: bool, file: &Path) -> anyhow::Result<ExitCode> {
    let backup = match read(file) {
        Ok(backup) => backup,
        Err(code) => return Ok(code),
    };
    let s = backup.summary();
    if json {
        println!("{}", serde_json::to_value(&s)?);
    } else {
        print_summary(file, &s);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_summary(file: &Path, s: &BackupSummary) {
    println!("{}: a whole snapshot, its checksum holds", file.display());
    println!("index     {}", s.index);
    println!("epoch     {}", s.epoch);
    println!("sessions  {}", s.sessions);
    println!("nodes     {}", s.nodes);
    println!("locks     {} held, {} waiting", s.locks_held, s.waiters);
    println!("checks    {}", s.checks);
    println!(
        "access    {} rules, {} tokens, access control {}",
        s.rules,
        s.tokens,
        if s.access_control { "on" } else { "off" }
    );
    println!("bytes     {}", s.bytes);
}

/// Makes `dir` a single master's data directory of `file`, or with
/// `member` (its id and address) the first member of a new cell.
fn restore(
    json: bool,
    file: &Path,
    dir: &Path,
    member: Option<(u64, String)>,
) -> anyhow::Result<ExitCode> {
    let backup = match read(file) {
        Ok(backup) => backup,
        Err(code) => return Ok(code),
    };
    let restored = match &member {
        None => backup.restore(dir),
        Some((node, addr)) => backup.restore_member(dir, *node, addr),
    };
    if let Err(e) = restored {
        eprintln!("leasehold: {}", crate::printable(&e.to_string()));
        return Ok(ExitCode::from(crate::CANT_CREATE));
    }
    let s = backup.summary();
    let shown = dir.display();
    match (json, &member) {
        (true, _) => println!(
            "{}",
            json!({ "data_dir": dir, "index": s.index, "epoch": s.epoch, "node": member.as_ref().map(|m| m.0) })
        ),
        (false, None) => println!(
            "restored index {} of epoch {} into {shown}: start a master with \
             `leasehold serve --data-dir {shown}`",
            s.index, s.epoch,
        ),
        (false, Some((node, addr))) => println!(
            "restored index {} of epoch {} into {shown} as member {node} of a new cell: start \
             it with `leasehold serve --cell {node}={addr} --node {node} --data-dir {shown}`",
            s.index, s.epoch,
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// The member `--cell` and `--node` name: `cell` must name `node` alone.
fn first_member(
    cell: &std::collections::BTreeMap<u64, String>,
    node: u64,
) -> Result<(u64, String), ExitCode> {
    match cell.get(&node) {
        Some(addr) if cell.len() == 1 => Ok((node, addr.clone())),
        _ => {
            eprintln!(
                "leasehold: a backup restores a new cell's first member alone: give --cell \
                 {node}=ADDR naming member {node} only; start the others with --join and add \
                 them with `leasehold cell add`"
            );
            Err(ExitCode::from(crate::USAGE))
        }
    }
}
