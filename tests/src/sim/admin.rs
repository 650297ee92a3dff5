//! The operator of a simulated cell: changes its members at scheduled
//! times, as `leasehold cell add` and `cell remove` do, over the network:
//! asking the members in turn, following the one that names the leader,
//! trying again until the change is done or its time is up.

use std::time::Duration;

use leasehold_server::cell::{change_members_on, Change, ChangeReply, ChangeRequest};
use tokio::time::sleep;

use super::cell::CELL_SECRET;
use super::net::PORT;
use super::trace::{now_ms, Trace, What};

/// The operator's host name.
pub const HOST: &str = "admin";

/// A change of members, at a virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    pub at: u64,
    /// Add (true) or remove the member.
    pub add: bool,
    /// The member's number: `m{n}`.
    pub member: u64,
}

/// How long the operator keeps trying one change.
const PATIENCE: u64 = 20_000;

/// Carries out `changes` in order, each at its time or once the one
/// before is done; `members` names every member host.
pub async fn run(trace: Trace, members: Vec<String>, changes: Vec<Scheduled>) -> turmoil::Result {
    for change in changes {
        let wait = change.at.saturating_sub(now_ms());
        sleep(Duration::from_millis(wait)).await;
        let name = format!("m{}", change.member);
        let request = ChangeRequest {
            change: if change.add {
                Change::Add {
                    id: change.member,
                    addr: format!("{name}:{PORT}"),
                }
            } else {
                Change::Remove { id: change.member }
            },
            credential: Some(CELL_SECRET.into()),
        };
        let what = if change.add { "add" } else { "remove" };
        trace.push(HOST, fault(what, &name));
        let give_up = now_ms() + PATIENCE;
        let done = loop {
            if let Some(reply) = ask(&members, &request).await {
                break Some(reply);
            }
            if now_ms() >= give_up {
                break None;
            }
            sleep(Duration::from_millis(250)).await;
        };
        let outcome = match done {
            Some(ChangeReply::Done { voters, .. }) => {
                let voters = voters.into_iter().collect();
                trace.push(HOST, What::Configured { voters });
                "done"
            }
            _ => "given-up",
        };
        trace.push(HOST, fault(&format!("{what}-{outcome}"), &name));
    }
    Ok(())
}

fn fault(what: &str, member: &str) -> What {
    What::Fault {
        fault: what.into(),
        peer: member.into(),
        expect_normal: false,
    }
}

/// Asks each member once, following a named leader; the reply of the one
/// that carried the change through.
async fn ask(members: &[String], request: &ChangeRequest) -> Option<ChangeReply> {
    let mut queue: Vec<String> = members.to_vec();
    let mut asked = Vec::new();
    while let Some(host) = queue.pop() {
        if asked.contains(&host) {
            continue;
        }
        asked.push(host.clone());
        let attempt = async {
            let stream = turmoil::net::TcpStream::connect((host.as_str(), PORT))
                .await
                .ok()?;
            change_members_on(stream, request).await.ok()
        };
        let Ok(Some(reply)) = tokio::time::timeout(Duration::from_secs(15), attempt).await else {
            continue;
        };
        match reply {
            ChangeReply::Done { .. } => return Some(reply),
            ChangeReply::NotLeader {
                leader: Some(leader),
            } => queue.push(leader.split(':').next().unwrap_or_default().to_string()),
            _ => {}
        }
    }
    None
}
