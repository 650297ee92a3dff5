//! Nodes: get, put, delete, ls, and checking sequencers.

use std::process::ExitCode;

use anyhow::Context;
use leasehold::{Client, DeleteOptions, LockMode, NodeView, PutOptions, Sequencer, SessionId};
use serde_json::json;

use crate::{Command, NOT_FOUND};

pub(crate) async fn kv(addr: &str, json: bool, command: Command) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    match command {
        Command::Get { key, stat, raw } => {
            if raw && json {
                eprintln!("leasehold: --raw writes the contents alone; it does not go with --json");
                return Ok(ExitCode::from(crate::USAGE));
            }
            let node = if stat {
                client.stat(&key).await?.map(|stat| NodeView {
                    key: key.clone(),
                    stat,
                    contents: None,
                })
            } else {
                client.get(&key).await?
            };
            // Who holds the lock, who waits, and its lock-delay, which
            // outlives a node deleted with its holder's session.
            let lock = match stat {
                true => Some(lock_of(&client, &key).await?),
                false => None,
            };
            let Some(node) = node else {
                eprintln!("leasehold: no node at {key}");
                if let Some(lock) = lock.filter(|l| !l.is_free()) {
                    print_lock(&key, &lock, json);
                }
                return Ok(ExitCode::from(NOT_FOUND));
            };
            let code = print_node(&node, json, raw, lock.as_ref())?;
            return Ok(code);
        }
        Command::Put {
            key,
            value,
            cas,
            flags,
            ephemeral,
        } => {
            let options = PutOptions {
                cas,
                flags,
                ephemeral,
            };
            let contents = if value == "-" {
                read_stdin().await?
            } else {
                value.into_bytes()
            };
            let index = client.put(&key, contents, options).await?;
            if json {
                println!("{}", json!({ "key": key, "modify_index": index }));
            } else {
                println!("{index}");
            }
        }
        Command::Delete {
            key,
            cas,
            recursive,
        } => {
            let deleted = client
                .delete(
                    &key,
                    DeleteOptions {
                        cas,
                        recursive,
                        ..DeleteOptions::default()
                    },
                )
                .await?;
            print_keys(&deleted.keys, json);
            // The reply lists the first 1000 keys; the total says how many
            // went. On stderr in text, so stdout stays one key a line.
            let unlisted = deleted.total - deleted.keys.len() as u64;
            if json {
                println!("{}", json!({ "deleted_total": deleted.total }));
            } else if recursive || unlisted > 0 {
                eprintln!(
                    "deleted {} key(s){}",
                    deleted.total,
                    if unlisted > 0 {
                        format!(", {unlisted} not listed")
                    } else {
                        String::new()
                    }
                );
            }
        }
        Command::Ls { prefix, recursive } => {
            // ZooKeeper's root is `/`; here it is the empty prefix.
            let prefix = if prefix == "/" { String::new() } else { prefix };
            // Page by page, so a prefix of millions of keys streams out in
            // bounded memory.
            let mut after = None;
            loop {
                let (keys, more) = client.list_page(&prefix, recursive, after, 0).await?;
                print_keys(&keys, json);
                after = keys.last().cloned();
                if !more || after.is_none() {
                    break;
                }
            }
        }
        Command::CheckSequencer { sequencer } => {
            let Some(parsed) = Sequencer::from_hex(sequencer.trim()) else {
                eprintln!(
                    "leasehold: '{}' is not a sequencer",
                    crate::printable(&sequencer)
                );
                return Ok(ExitCode::from(crate::MALFORMED));
            };
            let valid = client.check_sequencer(&parsed.to_bytes()).await?;
            if json {
                println!(
                    "{}",
                    json!({
                        "valid": valid,
                        "key": parsed.key,
                        "lock_generation": parsed.lock_generation,
                        "session": parsed.session,
                    })
                );
            } else {
                println!("{}", if valid { "valid" } else { "invalid" });
            }
            if !valid {
                return Ok(ExitCode::from(NOT_FOUND));
            }
        }
        _ => unreachable!("dispatched in main"),
    }
    Ok(ExitCode::SUCCESS)
}

fn print_keys(keys: &[String], json: bool) {
    for key in keys {
        if json {
            println!("{}", json!({ "key": key }));
        } else {
            println!("{key}");
        }
    }
}

/// A lock as `get --stat` shows it: its holders and waiters with their
/// sessions' names, and its lock-delay.
pub(crate) struct LockView {
    holders: Vec<(SessionId, LockMode, String)>,
    waiters: Vec<(SessionId, LockMode, String)>,
    waiters_total: u64,
    delay_remaining_ms: Option<u64>,
}

impl LockView {
    fn is_free(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty() && self.delay_remaining_ms.is_none()
    }
}

/// The lock of `key`, each session named as its owner named it (a session
/// that just ended has no name any more).
async fn lock_of(client: &Client, key: &str) -> anyhow::Result<LockView> {
    let info = client.lock_info(key).await?;
    let mut named = Vec::new();
    for list in [&info.holders, &info.waiters] {
        let mut sessions = Vec::new();
        for (session, mode) in list {
            let name = match client.session_info(*session).await {
                Ok(info) => info.name,
                Err(_) => String::new(),
            };
            sessions.push((*session, *mode, name));
        }
        named.push(sessions);
    }
    let waiters = named.pop().unwrap_or_default();
    let holders = named.pop().unwrap_or_default();
    Ok(LockView {
        holders,
        waiters,
        waiters_total: info.waiters_total,
        delay_remaining_ms: info.delay_remaining_ms,
    })
}

fn mode_name(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::Shared => "shared",
    }
}

fn sessions_json(sessions: &[(SessionId, LockMode, String)]) -> serde_json::Value {
    sessions
        .iter()
        .map(|(session, mode, name)| json!({ "session": session, "mode": mode_name(*mode), "name": name }))
        .collect()
}

/// The lock's lines under a node's metadata: one per holder and waiter
/// (first in line first), then the lock-delay.
fn print_lock(key: &str, lock: &LockView, json: bool) {
    if json {
        println!(
            "{}",
            json!({
                "key": key,
                "holders": sessions_json(&lock.holders),
                "waiters": sessions_json(&lock.waiters),
                "waiters_total": lock.waiters_total,
                "lock_delay_remaining_ms": lock.delay_remaining_ms,
            })
        );
        return;
    }
    for (what, sessions) in [("holder", &lock.holders), ("waiter", &lock.waiters)] {
        for (session, mode, name) in sessions {
            let name = crate::printable(name);
            println!("{what} {session} {} \"{name}\"", mode_name(*mode));
        }
    }
    let listed = lock.waiters.len() as u64;
    if lock.waiters_total > listed {
        println!("waiters {} ({listed} listed)", lock.waiters_total);
    }
    if let Some(ms) = lock.delay_remaining_ms {
        println!("lock-delay {ms} ms");
    }
}

/// Prints a node: its contents (exactly, with `raw`; as a line of UTF-8
/// text otherwise, or refused if they are not text), or its metadata and
/// its `lock`.
fn print_node(
    node: &NodeView,
    json: bool,
    raw: bool,
    lock: Option<&LockView>,
) -> anyhow::Result<ExitCode> {
    use base64::Engine;
    use std::io::Write;

    let s = &node.stat;
    let owner = s.ephemeral_owner.map(|o| o.to_string());
    if raw {
        let contents = node.contents.as_deref().unwrap_or_default();
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(contents)?;
        stdout.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = node.contents.as_deref().map(std::str::from_utf8);
    if json {
        // Text as it is; bytes that are not UTF-8 only in base64, which
        // carries every value exactly.
        let value = text.and_then(Result::ok);
        let base64 = node
            .contents
            .as_deref()
            .map(|c| base64::engine::general_purpose::STANDARD.encode(c));
        let mut line = json!({
                "key": node.key,
                "value": value,
                "value_base64": base64,
                "flags": s.flags,
                "instance": s.instance,
                "content_generation": s.content_generation,
                "lock_generation": s.lock_generation,
                "modify_index": s.modify_index,
                "checksum": format!("{:016x}", s.checksum),
                "length": s.contents_len,
                "ephemeral_owner": owner,
                "transient": s.transient,
        });
        if let Some(lock) = lock {
            line["holders"] = sessions_json(&lock.holders);
            line["waiters"] = sessions_json(&lock.waiters);
            line["waiters_total"] = json!(lock.waiters_total);
            line["lock_delay_remaining_ms"] = json!(lock.delay_remaining_ms);
        }
        println!("{line}");
    } else if let Some(text) = text {
        let Ok(text) = text else {
            eprintln!(
                "leasehold: the value of {} is not UTF-8 text: `get --raw` writes its bytes \
                 exactly, `--json get` gives them in base64",
                crate::printable(&node.key)
            );
            return Ok(ExitCode::from(crate::MALFORMED));
        };
        println!("{text}");
    } else {
        println!(
            "key={} flags={} instance={} content_generation={} lock_generation={} modify_index={} checksum={:016x} length={} ephemeral_owner={} transient={}",
            node.key,
            s.flags,
            s.instance,
            s.content_generation,
            s.lock_generation,
            s.modify_index,
            s.checksum,
            s.contents_len,
            owner.as_deref().unwrap_or("-"),
            s.transient,
        );
        if let Some(lock) = lock {
            print_lock(&node.key, lock, false);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The contents `put KEY -` reads from stdin: at most one byte more than a
/// node may hold, so that the master refuses what is too large without
/// this process reading an endless stream first.
async fn read_stdin() -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    tokio::task::spawn_blocking(|| {
        let mut contents = Vec::new();
        std::io::stdin()
            .take(leasehold_server::MAX_CONTENTS as u64 + 1)
            .read_to_end(&mut contents)
            .context("cannot read the value from stdin")?;
        Ok(contents)
    })
    .await?
}
