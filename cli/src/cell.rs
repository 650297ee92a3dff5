//! `leasehold cell status`: what each member of a cell says of itself.

use std::process::ExitCode;

use leasehold_server::cell::{
    change_members, query_status, Change, ChangeReply, ChangeRequest, MemberStatus,
};

/// Asks every member `addrs` names (separated by commas) and prints one
/// line each: id, address, role, whether it serves as master, epoch, term,
/// last log entry, last applied, and on the leader each member's lag.
/// Unreachable members are listed as such; the status is 69 if none
/// answered.
pub(crate) async fn status(addrs: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut answered = 0;
    if !json {
        println!("ID  ADDRESS                ROLE       MASTER EPOCH TERM  LAST-LOG APPLIED  LAG");
    }
    for addr in addrs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        match query_status(addr).await {
            Ok(status) => {
                answered += 1;
                if json {
                    println!("{}", to_json(addr, &status));
                } else {
                    print_line(addr, &status);
                }
            }
            Err(error) => {
                if json {
                    let line = serde_json::json!({ "address": addr, "error": error.to_string() });
                    println!("{line}");
                } else {
                    println!("?   {addr:<22} unreachable: {error}");
                }
            }
        }
    }
    Ok(if answered == 0 {
        ExitCode::from(crate::UNREACHABLE)
    } else {
        ExitCode::SUCCESS
    })
}

fn opt(n: Option<u64>) -> String {
    n.map_or("-".into(), |n| n.to_string())
}

fn print_line(addr: &str, s: &MemberStatus) {
    let lag = if s.lag.is_empty() {
        "-".to_string()
    } else {
        s.lag
            .iter()
            .map(|(id, behind)| format!("{id}:{behind}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    println!(
        "{:<3} {:<22} {:<10} {:<6} {:<5} {:<5} {:<8} {:<8} {}",
        s.id,
        addr,
        s.role,
        if s.master { "yes" } else { "no" },
        s.epoch,
        s.term,
        opt(s.last_log),
        opt(s.applied),
        lag
    );
}

fn to_json(addr: &str, s: &MemberStatus) -> serde_json::Value {
    serde_json::json!({
        "address": addr,
        "cell": s.cell,
        "id": s.id,
        "role": s.role,
        "master": s.master,
        "leader": s.leader,
        "epoch": s.epoch,
        "term": s.term,
        "last_log": s.last_log,
        "applied": s.applied,
        "members": s.members,
        "voters": s.voters,
        "lag": s.lag,
    })
}

/// Changes the cell's members: asks the members `addrs` names (separated
/// by commas) in turn, following the one that says who leads, until the
/// leader answers. Prints the members after the change. Exit status 0 once
/// done, 69 if no leader could be reached, 1 if refused or not carried
/// through.
pub(crate) async fn change(addrs: &str, json: bool, change: Change) -> anyhow::Result<ExitCode> {
    let request = ChangeRequest {
        change,
        operator_token: crate::OPERATOR_TOKEN.get().cloned().flatten(),
    };
    let mut queue: std::collections::VecDeque<String> = addrs
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    let mut asked = std::collections::BTreeSet::new();
    let mut last_error = String::from("no member address given (--addr a,b,c)");
    while let Some(addr) = queue.pop_front() {
        if !asked.insert(addr.clone()) {
            continue;
        }
        let reply = match change_members(&addr, &request).await {
            Ok(reply) => reply,
            Err(error) => {
                last_error = format!("{addr}: {error}");
                continue;
            }
        };
        match reply {
            ChangeReply::NotLeader { leader } => {
                last_error = format!("{addr} does not lead the cell");
                if let Some(leader) = leader {
                    queue.push_front(leader);
                }
            }
            ChangeReply::Done { voters, members } => {
                if json {
                    let line = serde_json::json!({ "voters": voters, "members": members });
                    println!("{line}");
                } else {
                    for (id, member_addr) in &members {
                        let role = if voters.contains(id) {
                            "voter"
                        } else {
                            "learner"
                        };
                        println!("{id:<3} {member_addr:<22} {role}");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            ChangeReply::Refused(why) | ChangeReply::Failed(why) => {
                eprintln!("leasehold: {addr}: {why}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    eprintln!("leasehold: no member that leads the cell answered: {last_error}");
    Ok(ExitCode::from(crate::UNREACHABLE))
}
