//! What a member shows its operators on the HTTP port (SPEC `OPS-1`,
//! `OPS-3`): its role, term and log positions, each follower's lag, the
//! master lease left, and whether it is healthy: serving as the master,
//! or a follower that hears from a leader and has applied what its log
//! holds.

use std::time::Duration;

use openraft::{BasicNode, RaftMetrics, ServerState};
use tokio::time::Instant;

use super::NodeId;
use crate::http::Health;
use crate::metrics::CellFigures;

/// A follower more entries than this behind its own log is catching up,
/// not ready (`OPS-3`).
const CAUGHT_UP_ENTRIES: u64 = 1024;

fn role_index(state: ServerState) -> usize {
    match state {
        ServerState::Leader => 0,
        ServerState::Follower => 1,
        ServerState::Candidate => 2,
        ServerState::Learner => 3,
        ServerState::Shutdown => 4,
    }
}

/// On the leader, the last entry a quorum of every configuration in force
/// holds: for each, the entry the middle voter holds, counting the
/// leader's own log; the lowest of them.
fn committed(m: &RaftMetrics<NodeId, BasicNode>) -> Option<u64> {
    let replication = m.replication.as_ref()?;
    let own = m.last_log_index.unwrap_or(0);
    let matched = |id: &NodeId| {
        if *id == m.id {
            own
        } else {
            replication
                .get(id)
                .and_then(|l| l.map(|l| l.index))
                .unwrap_or(0)
        }
    };
    m.membership_config
        .membership()
        .get_joint_config()
        .iter()
        .map(|voters| {
            let mut held: Vec<u64> = voters.iter().map(matched).collect();
            held.sort_unstable_by(|a, b| b.cmp(a));
            held.get(voters.len() / 2).copied().unwrap_or(0)
        })
        .min()
}

/// What `m` and the master lease's `deadline` say of this member at `now`.
pub(super) fn figures(
    m: &RaftMetrics<NodeId, BasicNode>,
    serving: bool,
    deadline: Option<Instant>,
    now: Instant,
) -> CellFigures {
    let last = m.last_log_index.unwrap_or(0);
    let applied = m.last_applied.map_or(0, |l| l.index);
    let lag = m
        .replication
        .as_ref()
        .map(|r| {
            r.iter()
                .filter(|(id, _)| **id != m.id)
                .map(|(id, matched)| (*id, last.saturating_sub(matched.map_or(0, |l| l.index))))
                .collect()
        })
        .unwrap_or_default();
    CellFigures {
        role: role_index(m.state),
        master: serving,
        term: m.current_term,
        log_index: last,
        commit_index: committed(m).unwrap_or(applied),
        applied_index: applied,
        lag,
        master_lease_left: deadline.map_or(Duration::ZERO, |d| d.saturating_duration_since(now)),
        leader: m.current_leader,
    }
}

/// Whether this member is healthy (`OPS-3`): it serves as the master, or
/// it follows a leader it heard from within `silence` and has applied
/// its log but for a few entries.
pub(super) fn health(
    m: &RaftMetrics<NodeId, BasicNode>,
    serving: bool,
    heard: Option<Duration>,
    silence: Duration,
) -> Health {
    if serving {
        return Health::serving();
    }
    if m.membership_config.membership().get_node(&m.id).is_none() {
        return Health::not_serving(format!(
            "not a member of the cell as far as this member knows: waiting to be added \
             (`leasehold cell add {}=ADDR`), or removed",
            m.id
        ));
    }
    let Some(leader) = m.current_leader else {
        return Health::not_serving("no master: the cell has no leader this member knows of");
    };
    if leader == m.id {
        return Health::not_serving(
            "leading, but not serving as the master yet: taking an epoch or the master lease",
        );
    }
    if heard.is_none_or(|h| h > silence) {
        return Health::not_serving(format!(
            "member {leader} leads, but this member has not heard from it lately"
        ));
    }
    let last = m.last_log_index.unwrap_or(0);
    let applied = m.last_applied.map_or(0, |l| l.index);
    if last.saturating_sub(applied) > CAUGHT_UP_ENTRIES {
        return Health::not_serving(format!(
            "catching up: {} entries of its log still to apply",
            last - applied
        ));
    }
    Health::serving()
}

#[cfg(test)]
mod tests {
    use super::*;

    // OPS-3: a member started with --join that nobody added yet says so,
    // rather than that the cell has no leader.
    #[test]
    fn a_member_waiting_to_be_added_says_so() {
        let fresh: RaftMetrics<NodeId, BasicNode> = RaftMetrics::new_initial(4);
        let health = health(&fresh, false, None, Duration::from_secs(1));
        let said = format!("{health:?}");
        assert!(
            said.contains("waiting to be added") && said.contains("cell add 4="),
            "{said}"
        );
    }
}
