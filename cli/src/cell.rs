//! `leasehold cell status`: what each member of a cell says of itself.

use std::collections::BTreeMap;
use std::process::ExitCode;

use leasehold_server::cell::{
    change_members_on, query_status_on, Change, ChangeReply, ChangeRequest, MemberStatus,
};

/// What one address answered.
enum Answer {
    Member(MemberStatus),
    /// A master that is not a cell's member: it speaks the client
    /// protocol, and says its epoch.
    Single {
        epoch: u64,
    },
    Unreachable(String),
}

/// What the address `addr` is: a cell's member (its status), a single
/// master (it answers a client's handshake, not a status query), or
/// nothing that answers.
/// A connection to the member at `addr`, over TLS when the flags say
/// (`--tls-ca` and friends: `CELL-11`).
async fn dial(addr: &str) -> std::io::Result<leasehold::BoxTransport> {
    use leasehold::Connector;
    let mut connector = leasehold::TcpConnector::new(addr);
    if let Some(options) = crate::CLIENT_TLS.get().cloned().flatten() {
        connector = connector
            .tls(&options)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    }
    connector.connect().await
}

/// `--request-timeout`, the bound on each member's answer.
fn request_timeout() -> std::time::Duration {
    crate::REQUEST_TIMEOUT
        .get()
        .copied()
        .unwrap_or(leasehold::REQUEST_TIMEOUT)
}

/// `exchange` with the member at `addr`, given `--request-timeout` to
/// answer in, connection included: a member that accepts and never
/// answers does not hold the command for ever.
async fn within_timeout<T, F>(addr: &str, exchange: F) -> std::io::Result<T>
where
    F: std::future::Future<Output = std::io::Result<T>>,
{
    let limit = request_timeout();
    tokio::time::timeout(limit, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{addr} did not answer within {limit:?} (--request-timeout)"),
            ))
        })
}

async fn ask(addr: &str) -> Answer {
    let status = within_timeout(addr, async { query_status_on(dial(addr).await?).await }).await;
    match status {
        Ok(status) => Answer::Member(status),
        Err(error) => match crate::connect(addr).await {
            Ok(client) => match client.epoch().await {
                Ok(epoch) => Answer::Single { epoch },
                Err(_) => Answer::Unreachable(error.to_string()),
            },
            Err(_) => Answer::Unreachable(error.to_string()),
        },
    }
}

/// Every address of `addrs` asked at once, each within `--request-timeout`:
/// a member that is stopped, or cut off, costs the command that time once,
/// not once for each such member.
async fn ask_all<'a>(addrs: impl IntoIterator<Item = &'a String>) -> Vec<(String, Answer)> {
    let mut asking = tokio::task::JoinSet::new();
    for (i, addr) in addrs.into_iter().enumerate() {
        let addr = addr.clone();
        asking.spawn(async move { (i, ask(&addr).await, addr) });
    }
    let mut answers = Vec::new();
    while let Some(answer) = asking.join_next().await {
        if let Ok(answer) = answer {
            answers.push(answer);
        }
    }
    answers.sort_by_key(|(i, _, _)| *i);
    answers
        .into_iter()
        .map(|(_, answer, addr)| (addr, answer))
        .collect()
}

/// Whether `addrs` names a cell's members: one of them answers a member's
/// status query, each within `--request-timeout`, all asked at once (a
/// member that is stopped accepts connections and answers nothing).
pub(crate) async fn is_member(addrs: &str) -> bool {
    let mut asking = tokio::task::JoinSet::new();
    for addr in addrs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let addr = addr.to_string();
        asking.spawn(async move {
            within_timeout(&addr, async { query_status_on(dial(&addr).await?).await })
                .await
                .is_ok()
        });
    }
    while let Some(answer) = asking.join_next().await {
        if answer.unwrap_or(false) {
            return true;
        }
    }
    false
}

/// Asks every member `addrs` names (separated by commas), learns the
/// cell's configuration from the members that answer, and asks the
/// members it names that `addrs` did not; prints one line per member
/// (id, address, role, whether it serves as master, epoch, term, last
/// log entry, last applied, and on the leader each member's lag). A
/// member that answers from outside the configuration is `removed`; a
/// single master is one line of its own. The status is 0 when a member
/// serves as master, 69 when none does (none answered, or no quorum).
pub(crate) async fn status(addrs: &str, json: bool) -> anyhow::Result<ExitCode> {
    let named: Vec<String> = addrs
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    let mut answers: BTreeMap<String, Answer> = ask_all(&named).await.into_iter().collect();
    // The configuration as the member that knows best has it: the master,
    // else the member with the newest log.
    let knows_best = answers
        .values()
        .filter_map(|a| match a {
            Answer::Member(s) => Some(s),
            _ => None,
        })
        .max_by_key(|s| (s.master, s.term, s.last_log))
        .cloned();
    let members = knows_best
        .as_ref()
        .map(|s| s.members.clone())
        .unwrap_or_default();
    let voters = knows_best
        .as_ref()
        .map(|s| s.voters.clone())
        .unwrap_or_default();
    let unnamed: Vec<&String> = members
        .values()
        .filter(|addr| !answers.contains_key(*addr))
        .collect();
    answers.extend(ask_all(unnamed).await);
    if !json {
        println!("ID  ADDRESS                ROLE       MASTER EPOCH TERM  LAST-LOG APPLIED  LAG");
    }
    let mut serving = false;
    let mut voters_up = 0;
    let listed: Vec<(Option<u64>, String)> = members
        .iter()
        .map(|(id, addr)| (Some(*id), addr.clone()))
        .chain(
            answers
                .keys()
                .filter(|a| !members.values().any(|m| m == *a))
                .map(|a| (None, a.clone())),
        )
        .collect();
    for (id, addr) in listed {
        let answer = &answers[&addr];
        match answer {
            Answer::Member(status) => {
                let removed = !members.is_empty() && !members.contains_key(&status.id);
                serving |= status.master;
                if voters.contains(&status.id) && !removed {
                    voters_up += 1;
                }
                let role = if removed {
                    "removed"
                } else {
                    status.role.as_str()
                };
                if json {
                    let mut line = to_json(&addr, status);
                    line["role"] = role.into();
                    println!("{line}");
                } else {
                    print_line(&addr, status, role);
                }
            }
            Answer::Single { epoch } => {
                serving = true;
                if json {
                    let line = serde_json::json!({
                        "address": addr, "role": "single", "master": true, "epoch": epoch,
                    });
                    println!("{line}");
                } else {
                    println!("-   {addr:<22} {:<10} {:<6} {epoch:<5}", "single", "yes");
                }
            }
            Answer::Unreachable(error) => {
                let id = id.map_or("?".to_string(), |id| id.to_string());
                if json {
                    let line = serde_json::json!({ "id": id, "address": addr, "error": error });
                    println!("{line}");
                } else {
                    println!("{id:<3} {addr:<22} unreachable: {error}");
                }
            }
        }
    }
    if serving {
        return Ok(ExitCode::SUCCESS);
    }
    if answers
        .values()
        .all(|a| matches!(a, Answer::Unreachable(_)))
    {
        eprintln!("leasehold: no member answered");
    } else if !voters.is_empty() && voters_up <= voters.len() / 2 {
        eprintln!(
            "leasehold: no master: {voters_up} of {} voters answer, and a master needs {}",
            voters.len(),
            voters.len() / 2 + 1
        );
    } else {
        eprintln!("leasehold: no member serves as master now (an election may be under way)");
    }
    Ok(ExitCode::from(crate::UNREACHABLE))
}

fn opt(n: Option<u64>) -> String {
    n.map_or("-".into(), |n| n.to_string())
}

fn print_line(addr: &str, s: &MemberStatus, role: &str) {
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
        role,
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

/// Changes the cell's members, presenting `credential` (`CELL-10`): asks
/// the members `addrs` names (separated by commas) in turn, following the
/// one that says who leads, until the leader answers. Prints the members
/// after the change. Exit status 0 once done, 69 if no leader could be
/// reached, 1 if refused or not carried through, 3 if a member asked gave
/// no answer within `--request-timeout` (the change may be carried out).
pub(crate) async fn change(
    addrs: &str,
    json: bool,
    change: Change,
    credential: String,
) -> anyhow::Result<ExitCode> {
    let request = ChangeRequest {
        change,
        credential: Some(credential),
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
        let stream = match within_timeout(&addr, dial(&addr)).await {
            Ok(stream) => stream,
            Err(error) => {
                last_error = format!("{addr}: {error}");
                continue;
            }
        };
        // Once asked, a member that does not answer may still carry the
        // change out: asking the next one could ask for it twice.
        let reply = match within_timeout(&addr, change_members_on(stream, &request)).await {
            Ok(reply) => reply,
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {
                eprintln!(
                    "leasehold: {error}: the change may still be carried out; `leasehold cell \
                     status` shows the members"
                );
                return Ok(ExitCode::from(crate::OUTCOME_UNKNOWN));
            }
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
