//! The invariants every run is held to, each judged from the trace alone:
//! what a check knows of the run ([`Recorded`]) is read from the trace's
//! first and last entries.
//!
//! - [`exclusion`]: no two clients believed at the same instant that they
//!   held the same exclusive lock (nor more than the limit a semaphore's
//!   slots) while their local lease was valid.
//! - [`fencing`]: the storage host accepted no write from a superseded
//!   holder, nor under a sequencer its writer never held.
//! - [`durability`]: no acknowledged write was lost, not even one a later
//!   write to its key would hide.
//! - [`states`]: session states follow the SPEC diagram, and a partition
//!   shorter than the lease never leaves `Normal`.
//! - [`events`]: events reach the application in order, with no gap and no
//!   duplicate.
//! - [`linearizable`]: the key/value history is linearizable, reads served
//!   from a session's cache included.
//! - [`cache`]: no read a cache served returned a value older than a write
//!   acknowledged before the read began.
//! - [`containment`]: every belief a client held of its session lies
//!   inside the lease the master kept for it.
//! - [`failover`]: a session whose client was not cut off does not
//!   expire.
//! - [`masters`]: epochs rise, and once a master of a newer epoch began,
//!   no older master grants again.
//! - [`replicas`]: a cell's members hold the same replica at the same
//!   applied index.
//! - [`waits`]: no wait for a lock, a term or a slot ended with an error:
//!   lost connections and fail-overs are ridden through.
//! - [`access`]: no client read or heard of a key its principal could not
//!   read at that index.

pub mod access;
pub mod cache;
pub mod containment;
pub mod durability;
pub mod events;
pub mod exclusion;
pub mod failover;
pub mod fencing;
pub mod history;
pub mod linearizable;
pub mod masters;
pub mod members;
pub mod replicas;
pub mod states;
pub mod waits;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::time::Duration;

use super::record::Run;
use super::trace::{Entry, What};

/// A run as its trace records it: everything a check may know.
#[derive(Debug)]
pub struct Recorded {
    pub scenario: String,
    pub seed: u64,
    pub contenders: usize,
    /// When the run ended, in virtual milliseconds.
    pub end: u64,
    /// The simulation's error, if it ended with one.
    pub error: Option<String>,
    pub settings: Limits,
    pub entries: Vec<Entry>,
}

/// The settings of a run the checks judge by.
#[derive(Debug, Clone)]
pub struct Limits {
    pub lease: Duration,
    pub grace: Duration,
    /// Slots of each semaphore.
    pub semaphore_limit: u32,
}

impl Recorded {
    /// The run `trace` records, which must begin with `RunStarted` and
    /// end with `RunEnded`.
    pub fn of(trace: &[Entry]) -> Result<Recorded, String> {
        let Some(Entry {
            what:
                What::RunStarted {
                    scenario,
                    seed,
                    contenders,
                    lease_ms,
                    grace_ms,
                    semaphore_limit,
                },
            ..
        }) = trace.first()
        else {
            return Err("the trace does not begin with the run's start".into());
        };
        let Some(Entry {
            at,
            what: What::RunEnded { error },
            ..
        }) = trace.last()
        else {
            return Err("the trace does not end with the run's end".into());
        };
        Ok(Recorded {
            scenario: scenario.clone(),
            seed: *seed,
            contenders: *contenders,
            end: *at,
            error: error.clone(),
            settings: Limits {
                lease: Duration::from_millis(*lease_ms),
                grace: Duration::from_millis(*grace_ms),
                semaphore_limit: *semaphore_limit,
            },
            entries: trace.to_vec(),
        })
    }
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    /// Virtual milliseconds into the run.
    pub at: u64,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {} ms: {}", self.invariant, self.at, self.detail)
    }
}

/// What the checks found in one run.
#[derive(Debug, Default)]
pub struct Report {
    /// Each invariant with how many things it judged.
    pub checked: Vec<(&'static str, usize)>,
    pub violations: Vec<Violation>,
    /// Session state transitions (`Normal->Jeopardy`, ...) with counts.
    pub transitions: BTreeMap<String, usize>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Violations of invariant `name`.
    pub fn of(&self, name: &str) -> Vec<&Violation> {
        self.violations
            .iter()
            .filter(|v| v.invariant == name)
            .collect()
    }

    /// A few lines for people.
    pub fn summary(&self, run: &Run) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "scenario {} seed {}: {} contenders, {} ms of virtual time, {} trace entries",
            run.scenario,
            run.seed,
            run.contenders,
            run.end,
            run.entries.len()
        );
        for (name, count) in &self.checked {
            let broken = self.of(name).len();
            let verdict = if broken == 0 {
                "ok".to_string()
            } else {
                format!("{broken} VIOLATED")
            };
            let _ = writeln!(out, "  {name:<14} {verdict:<12} ({count} checked)");
        }
        let transitions: Vec<String> = self
            .transitions
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let _ = writeln!(out, "  transitions    {}", transitions.join(", "));
        for v in self.violations.iter().take(20) {
            let _ = writeln!(out, "  violation: {v}");
        }
        if self.violations.len() > 20 {
            let _ = writeln!(out, "  ... and {} more", self.violations.len() - 20);
        }
        out
    }
}

/// Judges the run `trace` records against every invariant.
pub fn all(trace: &[Entry]) -> Report {
    let mut report = Report::default();
    let run = match Recorded::of(trace) {
        Ok(run) => run,
        Err(broken) => {
            report.violations.push(Violation {
                invariant: "simulation",
                at: trace.last().map_or(0, |e| e.at),
                detail: broken,
            });
            return report;
        }
    };
    let run = &run;
    if let Some(error) = &run.error {
        report.violations.push(Violation {
            invariant: "simulation",
            at: run.end,
            detail: error.clone(),
        });
    }
    let mut add = |name: &'static str, (count, violations): (usize, Vec<Violation>)| {
        report.checked.push((name, count));
        report.violations.extend(violations);
    };
    add(exclusion::NAME, exclusion::check(run));
    add(fencing::NAME, fencing::check(run));
    add(durability::NAME, durability::check(run));
    let (count, violations, transitions) = states::check(run);
    add(states::NAME, (count, violations));
    add(events::NAME, events::check(run));
    add(waits::NAME, waits::check(run));
    add(linearizable::NAME, linearizable::check(run));
    add(cache::NAME, cache::check(run));
    add(containment::NAME, containment::check(run));
    add(failover::NAME, failover::check(run));
    add(masters::NAME, masters::check(run));
    add(members::NAME, members::check(run));
    add(replicas::NAME, replicas::check(run));
    add(access::NAME, access::check(run));
    report.transitions = transitions;
    report
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sim::record::Settings;
    use crate::sim::trace::{Call, Outcome};

    /// The limits of a run on default settings.
    pub(crate) fn limits() -> Limits {
        let settings = Settings::default();
        Limits {
            lease: settings.lease,
            grace: settings.grace,
            semaphore_limit: settings.semaphore_limit,
        }
    }

    pub(crate) fn run_of(entries: Vec<(u64, &str, What)>) -> Recorded {
        let entries: Vec<Entry> = entries
            .into_iter()
            .map(|(at, who, what)| Entry {
                at,
                who: who.into(),
                what,
            })
            .collect();
        Recorded {
            scenario: "test".into(),
            seed: 0,
            settings: limits(),
            contenders: 0,
            end: entries.last().map_or(0, |e| e.at + 1),
            entries,
            error: None,
        }
    }

    #[test]
    fn a_trace_that_does_not_say_which_run_it_records_is_not_judged_passed() {
        let trace = run_of(vec![(5, "c1", What::Serving { epoch: 1 })]).entries;
        let report = all(&trace);
        assert_eq!(report.of("simulation").len(), 1, "{report:?}");
    }

    #[test]
    fn the_run_is_read_from_its_traces_first_and_last_entries() {
        let started = What::RunStarted {
            scenario: "s".into(),
            seed: 7,
            contenders: 3,
            lease_ms: 4_000,
            grace_ms: 6_000,
            semaphore_limit: 2,
        };
        let ended = What::RunEnded {
            error: Some("stalled".into()),
        };
        let trace = run_of(vec![(0, "sim", started), (900, "sim", ended)]).entries;
        let run = Recorded::of(&trace).expect("a run");
        assert_eq!((run.seed, run.contenders, run.end), (7, 3, 900));
        assert_eq!(run.settings.lease, Duration::from_secs(4));
        assert_eq!(run.error.as_deref(), Some("stalled"));
    }

    fn put(op: u64, at: u64, key: &str, value: &str) -> [(u64, &'static str, What); 2] {
        let call = Call::Put {
            value: value.into(),
        };
        let key = key.to_string();
        let ok = Outcome::Ok { value: None };
        [
            (at, "w1", What::Invoke { op, key, call }),
            (at + 2, "w1", What::Complete { op, result: ok }),
        ]
    }

    fn read(
        op: u64,
        at: u64,
        who: &'static str,
        key: &str,
        value: Option<&str>,
    ) -> [(u64, &'static str, What); 2] {
        let key = key.to_string();
        let value = value.map(str::to_string);
        [
            (
                at,
                who,
                What::Invoke {
                    op,
                    key,
                    call: Call::Get,
                },
            ),
            (
                at + 2,
                who,
                What::Complete {
                    op,
                    result: Outcome::Ok { value },
                },
            ),
        ]
    }

    fn event(at: u64, key: &str) -> (u64, &'static str, What) {
        let change = "modified".to_string();
        (
            at,
            "watch",
            What::Event {
                key: key.into(),
                change,
            },
        )
    }

    fn subscribed(at: u64) -> (u64, &'static str, What) {
        (
            at,
            "watch",
            What::Subscribed {
                prefix: "kv/own".into(),
            },
        )
    }

    const A: &str = "kv/own/w1/a";
    const B: &str = "kv/own/w1/b";

    /// A read `w2`'s session cache served, reading `value`.
    fn hit(op: u64, at: u64, key: &str, value: Option<&str>) -> Vec<(u64, &'static str, What)> {
        let key = key.to_string();
        let value = value.map(str::to_string);
        let call = Call::CachedGet;
        vec![
            (at, "w2", What::Invoke { op, key, call }),
            (
                at,
                "w2",
                What::Complete {
                    op,
                    result: Outcome::Ok { value },
                },
            ),
            (at, "w2", What::CacheHit { op }),
        ]
    }

    // CACHE-3
    #[test]
    fn a_hit_on_the_newest_acknowledged_value_passes() {
        let mut entries = Vec::new();
        entries.extend(put(1, 10, A, "1"));
        entries.extend(hit(2, 20, A, Some("1")));
        entries.extend(put(3, 30, A, "2"));
        entries.extend(hit(4, 40, A, Some("2")));
        let (hits, violations) = cache::check(&run_of(entries));
        assert_eq!(hits, 2);
        assert!(violations.is_empty(), "{violations:?}");
    }

    // CACHE-3
    #[test]
    fn a_hit_on_a_value_an_acknowledged_write_replaced_is_stale() {
        let mut entries = Vec::new();
        entries.extend(put(1, 10, A, "1"));
        entries.extend(put(2, 20, A, "2"));
        entries.extend(hit(3, 30, A, Some("1")));
        let (_, violations) = cache::check(&run_of(entries));
        assert_eq!(violations.len(), 1, "{violations:?}");
    }

    // CACHE-3: random seed 75 held a put's request until after its client
    // gave up, and two later puts were acknowledged; the late one was the
    // newest value then, and a cache may serve it.
    #[test]
    fn a_hit_on_a_put_whose_answer_never_came_is_not_called_stale() {
        let mut entries = vec![
            (
                10,
                "w2",
                What::Invoke {
                    op: 1,
                    key: A.to_string(),
                    call: Call::Put {
                        value: "late".into(),
                    },
                },
            ),
            (
                20,
                "w2",
                What::Complete {
                    op: 1,
                    result: Outcome::Unknown {
                        error: "no reply".into(),
                    },
                },
            ),
        ];
        entries.extend(put(2, 30, A, "1"));
        entries.extend(hit(3, 40, A, Some("late")));
        let (_, violations) = cache::check(&run_of(entries));
        assert!(violations.is_empty(), "{violations:?}");
    }

    // CACHE-3
    #[test]
    fn a_hit_reading_absence_after_an_acknowledged_create_is_stale() {
        let mut entries = Vec::new();
        entries.extend(put(1, 10, A, "1"));
        entries.extend(hit(2, 20, A, None));
        let (_, violations) = cache::check(&run_of(entries));
        assert_eq!(violations.len(), 1, "{violations:?}");
    }

    // CACHE-3: a write still in flight when the read began may come after it.
    #[test]
    fn a_hit_on_the_value_before_a_write_still_in_flight_passes() {
        let mut entries = Vec::new();
        entries.extend(put(1, 10, A, "1"));
        entries.extend(put(2, 19, A, "2"));
        entries.extend(hit(3, 20, A, Some("1")));
        let (_, violations) = cache::check(&run_of(entries));
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn events_matching_the_writes_in_order_pass() {
        let mut entries = vec![subscribed(0)];
        entries.extend(put(1, 10, A, "1"));
        entries.push(event(13, A));
        entries.extend(put(2, 20, B, "2"));
        entries.push(event(23, B));
        assert!(events::check(&run_of(entries)).1.is_empty());
    }

    #[test]
    fn a_missing_event_is_a_gap() {
        let mut entries = vec![subscribed(0)];
        entries.extend(put(1, 10, A, "1"));
        entries.extend(put(2, 20, B, "2"));
        entries.push(event(23, B));
        assert_eq!(events::check(&run_of(entries)).1.len(), 1);
    }

    #[test]
    fn a_repeated_or_reordered_event_is_caught() {
        let mut twice = vec![subscribed(0)];
        twice.extend(put(1, 10, A, "1"));
        twice.push(event(13, A));
        twice.push(event(14, A));
        assert_eq!(events::check(&run_of(twice)).1.len(), 1);

        let mut swapped = vec![subscribed(0)];
        swapped.extend(put(1, 10, A, "1"));
        swapped.extend(put(2, 20, B, "2"));
        swapped.push(event(23, B));
        swapped.push(event(24, A));
        assert_eq!(events::check(&run_of(swapped)).1.len(), 1);
    }

    #[test]
    fn a_gap_the_application_was_told_of_is_allowed() {
        let mut entries = vec![subscribed(0)];
        entries.extend(put(1, 10, A, "1"));
        entries.push((15, "watch", What::EventsLost));
        entries.extend(put(2, 20, B, "2"));
        entries.push(event(23, B));
        assert!(events::check(&run_of(entries)).1.is_empty());
    }

    // EV-4: a notice excuses what was not yet delivered, not a gap behind
    // an event the watcher had already heard.
    #[test]
    fn a_gap_before_an_event_heard_is_not_excused_by_a_later_notice() {
        let mut entries = vec![subscribed(0)];
        entries.extend(put(1, 10, A, "1"));
        entries.extend(put(2, 20, B, "2"));
        entries.push(event(23, B));
        entries.push((30, "watch", What::EventsLost));
        assert_eq!(events::check(&run_of(entries)).1.len(), 1);
    }

    // FO-6, EV-4: a notice owns up to every event not yet delivered, held
    // wherever it was: here by a held link, one arriving late, the other
    // never.
    #[test]
    fn events_not_yet_delivered_at_a_notice_may_be_missing() {
        let mut entries = vec![subscribed(0)];
        entries.extend(put(1, 110, A, "1"));
        entries.extend(put(2, 120, B, "2"));
        entries.push(event(200, A));
        entries.push((300, "watch", What::EventsLost));
        assert!(events::check(&run_of(entries)).1.is_empty());
    }

    // FO-6: the notice comes once the subscription is back, so a write
    // begun after it must be heard.
    #[test]
    fn a_write_after_a_notice_must_be_heard() {
        let mut entries = vec![subscribed(0)];
        entries.push((5, "watch", What::EventsLost));
        entries.extend(put(1, 10, A, "1"));
        entries.extend(put(2, 20, B, "2"));
        entries.push(event(23, B));
        assert_eq!(events::check(&run_of(entries)).1.len(), 1);
    }

    // A stream that ended with its session excuses what it had not
    // delivered, up to the next subscription, and nothing after it.
    #[test]
    fn a_new_subscription_excuses_what_the_ended_stream_missed_only() {
        let mut entries = vec![subscribed(0)];
        entries.extend(put(1, 10, A, "1"));
        entries.push((15, "watch", What::Unsubscribed));
        entries.push(subscribed(30));
        entries.extend(put(2, 40, B, "2"));
        entries.push(event(43, B));
        assert!(events::check(&run_of(entries.clone())).1.is_empty());
        entries.extend(put(3, 50, A, "3"));
        assert_eq!(events::check(&run_of(entries)).1.len(), 1);
    }

    #[test]
    fn a_final_read_older_than_an_acknowledged_write_is_a_loss() {
        let mut entries = Vec::new();
        entries.extend(put(1, 10, A, "1"));
        entries.extend(put(2, 20, A, "2"));
        entries.extend(read(3, 30, "final", A, Some("1")));
        assert_eq!(durability::check(&run_of(entries)).1.len(), 1);

        let mut kept = Vec::new();
        kept.extend(put(1, 10, A, "1"));
        kept.extend(put(2, 20, A, "2"));
        kept.extend(read(3, 30, "final", A, Some("2")));
        assert!(durability::check(&run_of(kept)).1.is_empty());
    }

    fn lease(at: u64, session: &str, until: u64) -> (u64, &'static str, What) {
        let what = What::Lease {
            session: session.into(),
            until,
            why: "keepalive".into(),
        };
        (at, "master", what)
    }

    fn state(at: u64, who: &'static str, state: &str) -> (u64, &'static str, What) {
        let what = What::State {
            state: state.into(),
            session: "s".into(),
        };
        (at, who, what)
    }

    fn started(at: u64, who: &'static str) -> (u64, &'static str, What) {
        let what = What::SessionStarted {
            session: "s".into(),
        };
        (at, who, what)
    }

    // LEASE-4, CS-1
    #[test]
    fn a_client_normal_past_the_masters_lease_breaks_containment() {
        let inside = run_of(vec![
            lease(0, "s", 100),
            started(2, "c1"),
            lease(80, "s", 180),
            state(170, "c1", "jeopardy"),
        ]);
        assert!(containment::check(&inside).1.is_empty());
        let outside = run_of(vec![
            lease(0, "s", 100),
            started(2, "c1"),
            state(120, "c1", "jeopardy"),
        ]);
        let (_, violations) = containment::check(&outside);
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].at, 100);
    }

    // CS-5: a reply that arrives after the lease it granted has run out
    // proves nothing; a client that goes back to Normal on it, even for an
    // instant, believes outside the master's lease.
    #[test]
    fn normal_for_an_instant_outside_the_lease_breaks_containment() {
        let run = run_of(vec![
            lease(0, "s", 100),
            started(2, "c1"),
            state(90, "c1", "jeopardy"),
            state(150, "c1", "safe"),
            state(150, "c1", "normal"),
            state(150, "c1", "jeopardy"),
        ]);
        let (_, violations) = containment::check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].at, 150);
    }

    // LEASE-4, LOCK-10
    #[test]
    fn a_lock_believed_after_the_master_ended_the_session_breaks_containment() {
        let holding = What::Holding {
            lock: "locks/work".into(),
            generation: 3,
            session: "s".into(),
        };
        let released = What::Released {
            lock: "locks/work".into(),
            generation: 3,
            why: "released".into(),
        };
        let ended = What::SessionEnded {
            session: "s".into(),
            cause: "expired".into(),
        };
        let run = run_of(vec![
            lease(0, "s", 1_000),
            started(2, "c1"),
            (10, "c1", holding),
            state(50, "c1", "jeopardy"),
            (60, "master", ended),
            (90, "c1", released),
        ]);
        let (_, violations) = containment::check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].detail.contains("locks/work"));
    }

    fn fault(at: u64, who: &'static str, fault: &str) -> (u64, &'static str, What) {
        let what = What::Fault {
            fault: fault.into(),
            peer: "master".into(),
            expect_normal: false,
        };
        (at, who, what)
    }

    // FO-2: a master back in time gives the session a full lease.
    #[test]
    fn a_session_that_expires_though_its_client_was_never_cut_off_breaks_the_failover_promise() {
        let run = run_of(vec![
            started(0, "c1"),
            fault(10_000, "master", "crash"),
            fault(14_000, "master", "restart"),
            state(15_000, "c1", "jeopardy"),
            state(21_000, "c1", "expired"),
        ]);
        assert_eq!(failover::check(&run).1.len(), 1);
    }

    // FO-2
    #[test]
    fn a_master_that_expires_a_session_its_uncut_client_still_holds_breaks_the_promise() {
        let ended = |at| {
            let what = What::SessionEnded {
                session: "s".into(),
                cause: "expired".into(),
            };
            (at, "master", what)
        };
        let early = run_of(vec![
            started(0, "c1"),
            fault(10_000, "master", "crash"),
            state(13_000, "c1", "jeopardy"),
            fault(15_000, "master", "restart"),
            ended(15_100),
            state(15_200, "c1", "expired"),
        ]);
        assert_eq!(failover::check(&early).1.len(), 1);
        // A session its client began closing is no longer held by it.
        let closing = run_of(vec![
            started(0, "c1"),
            fault(10_000, "master", "crash"),
            state(13_000, "c1", "jeopardy"),
            (14_000, "c1", What::Closing),
            fault(15_000, "master", "restart"),
            ended(19_000),
        ]);
        assert!(failover::check(&closing).1.is_empty());
        // Once the client gave the session up, the master's expiry is due.
        let due = run_of(vec![
            started(0, "c1"),
            fault(10_000, "c1", "partition"),
            state(13_000, "c1", "jeopardy"),
            state(19_000, "c1", "expired"),
            ended(19_500),
        ]);
        assert!(failover::check(&due).1.is_empty());
    }

    #[test]
    fn a_session_lost_to_its_own_cut_or_to_a_master_back_too_late_breaks_no_promise() {
        let cut = run_of(vec![
            started(0, "c1"),
            fault(10_000, "c1", "partition"),
            state(14_000, "c1", "jeopardy"),
            state(20_000, "c1", "expired"),
            fault(21_000, "c1", "repair"),
        ]);
        assert!(failover::check(&cut).1.is_empty());
        let late = run_of(vec![
            started(0, "c1"),
            fault(10_000, "master", "crash"),
            state(14_000, "c1", "jeopardy"),
            fault(19_500, "master", "restart"),
            state(20_000, "c1", "expired"),
        ]);
        assert!(failover::check(&late).1.is_empty());
    }

    const ONCE: &str = "kv/once/w1/1";

    // STORE-1
    #[test]
    fn a_lost_write_once_key_is_caught() {
        let mut entries = Vec::new();
        entries.extend(put(1, 10, ONCE, "w1-1"));
        entries.extend(read(2, 30, "final", ONCE, None));
        let (_, violations) = durability::check(&run_of(entries));
        assert_eq!(violations.len(), 1);
        assert!(
            violations[0].detail.contains("write-once key kv/once/w1/1"),
            "{}",
            violations[0]
        );
    }

    // STORE-1
    #[test]
    fn a_write_once_key_whose_put_went_unanswered_may_be_missing() {
        let call = Call::Put {
            value: "w1-1".into(),
        };
        let unknown = Outcome::Unknown {
            error: "no answer in time".into(),
        };
        let mut entries = vec![
            (
                10,
                "w1",
                What::Invoke {
                    op: 1,
                    key: ONCE.into(),
                    call,
                },
            ),
            (
                4_010,
                "w1",
                What::Complete {
                    op: 1,
                    result: unknown,
                },
            ),
        ];
        entries.extend(read(2, 5_000, "final", ONCE, None));
        assert!(durability::check(&run_of(entries)).1.is_empty());
    }

    #[test]
    fn a_transition_outside_the_diagram_is_caught() {
        let state = |s: &str| What::State {
            state: s.into(),
            session: "s".into(),
        };
        let started = What::SessionStarted {
            session: "s".into(),
        };
        let good = run_of(vec![
            (0, "c1", started.clone()),
            (5, "c1", state("jeopardy")),
            (9, "c1", state("safe")),
            (9, "c1", state("normal")),
            (20, "c1", state("expired")),
        ]);
        assert!(states::check(&good).1.is_empty());
        let bad = run_of(vec![
            (0, "c1", started),
            (5, "c1", state("jeopardy")),
            (9, "c1", state("normal")),
        ]);
        assert_eq!(states::check(&bad).1.len(), 1);
    }
}
