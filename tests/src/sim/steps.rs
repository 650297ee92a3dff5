//! The driver's steps: each fault as it is applied and repaired, and the
//! queue of steps with the faults in force, which the client faults
//! (`world.rs`) and the servers' own faults (`servers.rs`) share.

use std::collections::BTreeMap;

use super::scenario::{Direction, Edge};
use super::trace::{Trace, What};

/// Where an `Action::LateRelease` is: waiting for a holder to stall;
/// for the stalled client to let go (since `since`); to let new traffic
/// flow; for the client to hold the lock again (since `since`), when the
/// stalled messages go on. `id` names its hold.
#[derive(Debug, Clone)]
pub(super) enum Late {
    Holder,
    LetGo { client: String, since: u64, id: u64 },
    Flow { client: String, id: u64 },
    HeldAgain { client: String, since: u64, id: u64 },
}

/// A fault as the driver applies it. A fault that finds its client
/// already cut off (or held) is skipped whole, and a repair heals only the
/// fault that scheduled it, so overlapping faults never end each other.
#[derive(Debug, Clone)]
pub(super) enum Step {
    Cut {
        client: String,
        direction: Direction,
        ms: u64,
        expect_normal: bool,
    },
    Heal {
        client: String,
        direction: Direction,
        id: u64,
    },
    Hold {
        client: String,
        ms: u64,
        expect_normal: bool,
    },
    Release {
        client: String,
        id: u64,
    },
    Crash,
    Restart,
    /// Wait for a moment the client's local lease leaves room for a short
    /// hold, then hold.
    Short {
        client: String,
        give_up: u64,
        expect_normal: bool,
    },
    Flap {
        client: String,
        until: u64,
    },
    CutHolder {
        direction: Direction,
        ms: u64,
    },
    /// `edge`, `delay` after the master next grants `client`'s session a
    /// lease later than `since`, watching until `give_up`.
    AfterGrant {
        client: String,
        delay: u64,
        edge: Edge,
        since: Option<u64>,
        /// The client's local lease as published when last looked at:
        /// what a renewal by the coming grant's reply will change.
        published: Option<u64>,
        give_up: u64,
    },
    /// `Action::LateRelease`, in the phase `late`, watching until
    /// `give_up`.
    LateRelease {
        late: Late,
        give_up: u64,
    },
    /// Crash a cell's member: its master, or a follower.
    CrashMember {
        master: bool,
        ms: u64,
    },
    RestartMember {
        name: String,
        id: u64,
    },
    Isolate {
        ms: u64,
        reachable: Vec<String>,
        bounce: Option<super::scenario::Bounce>,
    },
    /// Cell fault `id` goes on: the master is cut off from `follower`
    /// too, as it crashes, down for `down` ms.
    CutAndBounce {
        id: u64,
        master: String,
        follower: String,
        down: u64,
    },
    Split {
        master_in_minority: bool,
        ms: u64,
        minority_clients: Vec<String>,
    },
    /// Crash the master once its membership is joint, or with `at_end`
    /// once it was (`seen`) and is no longer, looking each tick until
    /// `until`; down for `ms`.
    CrashWhileJoint {
        until: u64,
        ms: u64,
        at_end: bool,
        seen: bool,
    },
    /// The master's messages to one follower are dropped for `ms`.
    DeafFollower {
        ms: u64,
    },
    FlapPeers {
        until: u64,
        id: Option<u64>,
    },
    /// Heal the links between two members a flap cut.
    PeerHeal {
        a: String,
        b: String,
    },
    /// End the fault among members `id`: heal `links` (directed), and
    /// tell the trace that `clients` and `who` are whole again.
    CellHeal {
        id: u64,
        links: Vec<(String, String)>,
        clients: Vec<String>,
        who: Vec<String>,
    },
    /// Publish `client`'s local lease every step, or every 50 ms again.
    Watch {
        client: String,
        watched: bool,
    },
    /// Once `client`'s local lease is no longer `before` (a reply has
    /// renewed it), hold its traffic for less than that lease has left;
    /// watching until `give_up`.
    AfterRenewal {
        client: String,
        before: Option<u64>,
        give_up: u64,
    },
}

/// The directed links `direction` cuts between `a` and `b` (`ToMaster`:
/// from `a` to `b`).
pub(super) fn directed<'a>(
    a: &'a str,
    b: &'a str,
    direction: Direction,
) -> Vec<(&'a str, &'a str)> {
    match direction {
        Direction::Both => vec![(a, b), (b, a)],
        Direction::ToMaster => vec![(a, b)],
        Direction::FromMaster => vec![(b, a)],
    }
}

pub(super) fn names(direction: Direction) -> (&'static str, &'static str) {
    match direction {
        Direction::Both => ("partition", "repair"),
        Direction::ToMaster => ("partition-to-master", "repair-to-master"),
        Direction::FromMaster => ("partition-from-master", "repair-from-master"),
    }
}

/// The steps to come and the faults in force.
pub(super) struct Faults {
    pub(super) queue: BTreeMap<(u64, u64), Step>,
    pub(super) seq: u64,
    pub(super) trace: Trace,
    /// Faults in force, by client (or "cell") and kind ("cut", "hold",
    /// "fault"): the id of the fault, and how to repair it.
    pub(super) active: BTreeMap<(String, &'static str), (u64, Step)>,
    /// The single master, or a cell's members.
    pub(super) servers: Vec<String>,
    /// The client hosts a fault among members may cut off.
    pub(super) clients: Vec<String>,
}

impl Faults {
    pub(super) fn push(&mut self, at: u64, step: Step) {
        self.seq += 1;
        self.queue.insert((at, self.seq), step);
    }

    /// Writes a fault, or its repair, into the trace.
    pub(super) fn fault(&self, at: u64, who: &str, fault: &str, peer: &str, expect_normal: bool) {
        let what = What::Fault {
            fault: fault.into(),
            peer: peer.into(),
            expect_normal,
        };
        self.trace.push_at(at, who, what);
    }

    pub(super) fn is_cut(&self, client: &str) -> bool {
        self.active.contains_key(&(client.to_string(), "cut"))
    }
}
