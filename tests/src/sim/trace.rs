//! What happened in a run, in virtual time: every fault, session state,
//! lock holding, fenced write, key/value operation and delivered event.
//! The checkers read nothing else, and the same seed writes the same bytes.

use std::sync::{Arc, Mutex};

use serde::Serialize;

/// One line of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Virtual milliseconds since the run began.
    pub at: u64,
    /// The host it happened on, or the host a fault targets.
    pub who: String,
    #[serde(flatten)]
    pub what: What,
}

/// A key/value call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    Put {
        value: String,
    },
    Get,
    /// A read through a session's cache (`CACHE-1`).
    CachedGet,
}

/// How a key/value call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A put was applied, or a get read `value`.
    Ok { value: Option<String> },
    /// The master refused it, or it never left the client: not applied.
    Failed { error: String },
    /// No answer: it may or may not have been applied.
    Unknown { error: String },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// The run began: what the checks need to know of it besides what
    /// happened (the first entry, at 0).
    RunStarted {
        scenario: String,
        seed: u64,
        contenders: usize,
        lease_ms: u64,
        grace_ms: u64,
        semaphore_limit: u32,
    },
    /// The run ended, on its own or with the simulation's `error` (the
    /// last entry).
    RunEnded { error: Option<String> },
    /// The network or the master misbehaves from here on (`fault`:
    /// partition, partition-to, partition-from, hold, crash), or is
    /// repaired (repair, release, restart). `flow`: new traffic passes a
    /// held link again while what it held still waits, until `release`.
    /// `peer` is the other end.
    /// `expect_normal` marks a partition that heals while the client's
    /// local lease still covers the held KeepAlive answer.
    Fault {
        fault: String,
        peer: String,
        expect_normal: bool,
    },
    /// A client has a new session.
    SessionStarted { session: String },
    /// The client closes its session (`CS-8`): the `Closed` that follows
    /// is its own doing.
    Closing,
    /// The client's session `session` entered this state (`CS-7`).
    State { state: String, session: String },
    /// From now on the client believes it holds `lock` with `generation`
    /// under `session`, and acts on it.
    Holding {
        lock: String,
        generation: u64,
        session: String,
    },
    /// A wait for `lock` (a lock, a term or a semaphore slot) ended:
    /// `granted`, `refused` (held or in lock-delay past its timeout),
    /// `expired` (its session ended), `timeout` (its session was not back
    /// before its time ran out), `gave_up` (the work was over), or `error:
    /// ...` (anything else: what a lost connection or a fail-over must
    /// never end a wait with, `LOCK-15`).
    Waited { lock: String, outcome: String },
    /// The client no longer believes it holds `lock`.
    Released {
        lock: String,
        generation: u64,
        why: String,
    },
    /// The storage host received a fenced write from `who`.
    Write {
        lock: String,
        generation: u64,
        accepted: bool,
        /// The newest generation the storage host had seen before it.
        newest: u64,
    },
    /// A key/value call began.
    Invoke { op: u64, key: String, call: Call },
    /// The call `op` ended.
    Complete { op: u64, result: Outcome },
    /// The read `op` was served from its session's cache, with no round
    /// trip (`CACHE-1`).
    CacheHit { op: u64 },
    /// A watcher has a subscription: events from here on must all arrive.
    Subscribed { prefix: String },
    /// A watcher's subscription ended with its session.
    Unsubscribed,
    /// An event the application received.
    Event { key: String, change: String },
    /// The application was told that events were lost (`EV-4`, `FO-6`).
    EventsLost,
    /// The operator asks to set the snooper's rule on `prefix` to
    /// `rights` (`ACL-1`).
    RuleSending { prefix: String, rights: String },
    /// That change ended: `done` at global `index`, `failed` (certainly
    /// not applied) or `unknown`.
    RuleSet {
        prefix: String,
        rights: String,
        outcome: String,
        index: Option<u64>,
    },
    /// The snooper heard of a change to `key` made at global `index`.
    Heard { key: String, index: u64 },
    /// The snooper's read of `key`, sent at virtual time `sent`, was
    /// answered: it learned the key's contents or that it does not exist.
    Learned { key: String, sent: u64 },
    /// The master granted `session` a lease until virtual time `until`
    /// (its own clock's expiry, at its rate): on creation, a KeepAlive's
    /// answer, a promotion (`failover`) or the one more lease of `FO-2`.
    Lease {
        session: String,
        until: u64,
        why: String,
    },
    /// The master ended `session`.
    SessionEnded { session: String, cause: String },
    /// The master answered an acquire of `lock` by `session` with the
    /// holding of `generation`, at `index`: `at_once`, `from_line` (its
    /// turn came) or `again` (it held it and asked again, `LOCK-2`).
    Granted {
        session: String,
        lock: String,
        generation: u64,
        index: u64,
        how: String,
    },
    /// `session` no longer holds `lock` at the master: `released` by its
    /// client, `given_back` (a grant nobody heard, `LOCK-9`), its session
    /// ended (`session_ended`), or its node `deleted`.
    LetGo {
        session: String,
        lock: String,
        generation: u64,
        why: String,
    },
    /// The master refused a release of `lock` by `session` naming the
    /// acquire at `named`: the holding's latest was answered at
    /// `acquired`, after the release was sent (`LOCK-4`).
    ReleaseRefused {
        session: String,
        lock: String,
        named: u64,
        acquired: u64,
    },
    /// A master began serving in `epoch`: the grants it reports from here
    /// on are that epoch's.
    Serving { epoch: u64 },
    /// The master of `epoch` decides nothing more: its lease lapsed, its
    /// member no longer leads, or it was shut down. A crash of its host
    /// stops it too, with no entry of its own.
    Stopped { epoch: u64 },
    /// A cell member's replica had applied the log up to `index`, and
    /// held what `digest` sums up.
    Replica { index: u64, digest: u64 },
    /// The operator was told a change of members is done: the voters now
    /// (`CELL-9`).
    Configured { voters: Vec<u64> },
    /// The cell's leader (of the newest term) holds a membership of these
    /// voters, one set, or two while a change is joint.
    Configuration { configs: Vec<Vec<u64>> },
}

/// The trace of one run, shared by every host.
#[derive(Debug, Clone, Default)]
pub struct Trace(Arc<Mutex<Vec<Entry>>>);

impl Trace {
    /// Records `what` at the current virtual time of the simulation.
    pub fn push(&self, who: &str, what: What) {
        let at = turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64;
        self.push_at(at, who, what);
    }

    pub fn push_at(&self, at: u64, who: &str, what: What) {
        self.0.lock().unwrap().push(Entry {
            at,
            who: who.to_string(),
            what,
        });
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.0.lock().unwrap().clone()
    }

    /// Reads the entries in place: the driver asks of the trace at every
    /// step, and a copy each time cost most of a run's time.
    pub fn read<R>(&self, f: impl FnOnce(&[Entry]) -> R) -> R {
        f(&self.0.lock().unwrap())
    }
}

/// The trace as JSON lines, one entry each.
pub fn to_jsonl(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        out.push_str(&serde_json::to_string(entry).expect("trace entries serialize"));
        out.push('\n');
    }
    out
}

/// Whether `who` is a server: the single master, or a cell's member.
pub fn is_server(who: &str) -> bool {
    who == "master"
        || who
            .strip_prefix('m')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Milliseconds of virtual time since the run began.
pub fn now_ms() -> u64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
}
