//! Health checks: set, delete, list.

use std::process::ExitCode;

use clap::ValueEnum;
use leasehold::{CheckStatus, ErrorCode, SessionId};
use serde_json::json;

use crate::{CheckCommand, NOT_FOUND};

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum StatusArg {
    Passing,
    Warning,
    Critical,
}

impl From<StatusArg> for CheckStatus {
    fn from(s: StatusArg) -> Self {
        match s {
            StatusArg::Passing => CheckStatus::Passing,
            StatusArg::Warning => CheckStatus::Warning,
            StatusArg::Critical => CheckStatus::Critical,
        }
    }
}

pub(crate) async fn check(
    addr: &str,
    json: bool,
    command: CheckCommand,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    match command {
        CheckCommand::Set { name, status, note } => {
            let ended = client.set_check(&name, status.into(), &note).await?;
            print_ended(&name, &ended, json);
        }
        CheckCommand::Delete { name } => match client.delete_check(&name).await {
            Ok(ended) => print_ended(&name, &ended, json),
            Err(e) if e.code() == Some(ErrorCode::InvalidArgument) => {
                eprintln!("leasehold: {}", crate::printable(&e.to_string()));
                return Ok(ExitCode::from(NOT_FOUND));
            }
            Err(e) => return Err(e.into()),
        },
        CheckCommand::List => {
            for c in client.list_checks().await? {
                if json {
                    println!(
                        "{}",
                        json!({
                            "name": c.name,
                            "status": c.status.as_str(),
                            "note": c.note,
                            "modify_index": c.modify_index,
                            "sessions": c.sessions,
                        })
                    );
                } else {
                    println!(
                        "{}  {}  sessions={}  {}",
                        c.name,
                        c.status.as_str(),
                        c.sessions,
                        c.note
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Sessions a check change ended, one a line: the operator should know.
fn print_ended(name: &str, ended: &[SessionId], json: bool) {
    if json {
        println!("{}", json!({ "check": name, "ended_sessions": ended }));
    } else {
        for id in ended {
            println!("ended session {id}");
        }
    }
}
