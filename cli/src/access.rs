//! Who this client is, access rules and bearer tokens: `whoami`, `acl`,
//! `token`.

use std::process::ExitCode;

use leasehold::{ErrorCode, Rule};
use serde_json::json;

use crate::{AclCommand, TokenCommand, NOT_FOUND};

pub(crate) async fn whoami(addr: &str, json: bool) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let identity = client.who_am_i().await?;
    if json {
        let via = match identity.via {
            leasehold::Via::Anonymous => json!("anonymous"),
            leasehold::Via::Certificate => json!("certificate"),
            leasehold::Via::Token { id } => json!({ "token": id }),
            leasehold::Via::Operator => json!("operator"),
        };
        println!(
            "{}",
            json!({
                "principal": identity.principal,
                "via": via,
                "access_control": identity.access_control,
            })
        );
    } else {
        println!("{}", crate::printable(&identity.to_string()));
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn acl(addr: &str, json: bool, command: AclCommand) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let index = match command {
        AclCommand::Set {
            prefix,
            principal,
            rights,
        } => {
            let rule = Rule {
                prefix,
                principal,
                rights,
            };
            client.set_rule(rule).await?
        }
        AclCommand::Rm { prefix, principal } => {
            match client.remove_rule(&prefix, &principal).await {
                Ok(index) => index,
                Err(e) if e.code() == Some(ErrorCode::InvalidArgument) => {
                    eprintln!("leasehold: {}", crate::printable(&e.to_string()));
                    return Ok(ExitCode::from(NOT_FOUND));
                }
                Err(e) => return Err(e.into()),
            }
        }
        AclCommand::Enable => client.set_access_control(true).await?,
        AclCommand::Disable => client.set_access_control(false).await?,
        AclCommand::List => {
            let (rules, enabled) = client.rules().await?;
            if json {
                for rule in &rules {
                    println!(
                        "{}",
                        json!({
                            "prefix": rule.prefix,
                            "principal": rule.principal,
                            "rights": rule.rights.to_string(),
                        })
                    );
                }
            } else {
                let state = if enabled { "on" } else { "off" };
                println!("# access control is {state}");
                for rule in &rules {
                    println!("{}", crate::printable(&rule.to_string()));
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    if json {
        println!("{}", json!({ "index": index }));
    } else {
        println!("{index}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn token(
    addr: &str,
    json: bool,
    command: TokenCommand,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    match command {
        TokenCommand::Create { principal, note } => {
            let token = client.create_token(&principal, &note).await?;
            if json {
                println!("{}", json!({ "id": token.id, "token": token.to_string() }));
            } else {
                // The token alone on stdout, so that `> FILE` keeps it; it
                // is shown this once, as the master keeps only its hash.
                println!("{token}");
                eprintln!(
                    "leasehold: token {} for {}: keep it now, it is not shown again",
                    token.id,
                    crate::printable(&principal)
                );
            }
        }
        TokenCommand::Revoke { id } => match client.revoke_token(id).await {
            Ok(index) => {
                if json {
                    println!("{}", json!({ "index": index }));
                } else {
                    println!("{index}");
                }
            }
            Err(e) if e.code() == Some(ErrorCode::InvalidArgument) => {
                eprintln!("leasehold: {}", crate::printable(&e.to_string()));
                return Ok(ExitCode::from(NOT_FOUND));
            }
            Err(e) => return Err(e.into()),
        },
        TokenCommand::List => {
            for t in client.tokens().await? {
                if json {
                    println!(
                        "{}",
                        json!({
                            "id": t.id,
                            "principal": t.principal,
                            "note": t.note,
                            "created_index": t.created_index,
                        })
                    );
                } else {
                    println!(
                        "{}  {}  created at index {}  {}",
                        t.id,
                        crate::printable(&t.principal),
                        t.created_index,
                        crate::printable(&t.note)
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
