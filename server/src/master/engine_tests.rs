//! The engine on its own: an input and a time in, effects out. No
//! runtime, no clock, no store: each test reads what the engine decided
//! (the replies, the records it logs, in order) as the loop would find it.

use std::time::Duration;

use leasehold_protocol::{
    event_mask, Acquire, Authority, Behavior, CheckStatus, CreateSession, Error, GetCached,
    KeepAlive, LockMode, Put, Request, Response, Sequencer, SessionToken,
};

use super::{Call, Effect, Engine, Input};
use crate::config::Config;
use crate::state::{Bounds, State};
use crate::store::Record;
use crate::time::{at, Millis};

/// What the engine decided for one input, in the order it decided it.
#[derive(Debug, Default)]
struct Decided {
    /// Each effect in order: `log Put`, `reply Written`, `observe`.
    order: Vec<String>,
    replies: Vec<Result<Response, Error>>,
    /// The kinds of the commands logged.
    logged: Vec<String>,
}

/// The variant's name of a value's `Debug` form: `Written { .. }` is
/// `Written`.
fn kind(value: &impl std::fmt::Debug) -> String {
    let text = format!("{value:?}");
    let end = text.find([' ', '(', '{']).unwrap_or(text.len());
    text[..end].to_string()
}

/// A reply's kind, or its error code's.
fn shape(reply: &Result<Response, Error>) -> String {
    match reply {
        Ok(response) => kind(response),
        Err(error) => format!("error {}", kind(&error.code)),
    }
}

struct Bench {
    engine: Engine,
    /// Receivers of the replies' connections: kept open, so that nothing
    /// counts as unheard.
    open: Vec<tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply>>,
}

const LEASE_MS: u64 = 1_000;
const LOCK_DELAY_MS: u64 = 500;

impl Bench {
    fn new() -> Bench {
        Bench::with(Config {
            min_lease: Duration::from_millis(100),
            ..Config::default()
        })
    }

    fn with(config: Config) -> Bench {
        let state = State::new(Bounds::from(&config));
        let mut engine = Engine::new(config, state, false, at(1_000), true);
        // A new state is logged as keeping acquires (`STORE-6`).
        let started: Vec<String> = engine.effects().iter().map(kind).collect();
        assert_eq!(started, ["Log"]);
        Bench {
            engine,
            open: Vec::new(),
        }
    }

    fn now(&self) -> Millis {
        self.engine.now
    }

    /// Feeds `input` at the engine's current time.
    fn step(&mut self, input: Input) -> Decided {
        let now = self.now();
        self.step_at(input, now)
    }

    fn step_at(&mut self, input: Input, now: Millis) -> Decided {
        self.engine.step(input, now);
        let mut decided = Decided::default();
        for effect in self.engine.effects() {
            match effect {
                Effect::Log(Record::Command { command, .. }) => {
                    decided.order.push(format!("log {}", kind(&command)));
                    decided.logged.push(kind(&command));
                }
                Effect::Log(other) => decided.order.push(format!("log {}", kind(&other))),
                Effect::Reply { result, .. } => {
                    decided.order.push(format!("reply {}", shape(&result)));
                    decided.replies.push(result);
                }
                Effect::Observe(event) => decided.order.push(format!("observe {}", kind(&event))),
                Effect::Audit(record) => decided.order.push(format!("audit {}", record.event)),
            }
        }
        decided
    }

    fn ask(&mut self, request: Request) -> Decided {
        let (reply, rx) = crate::reply::channel(self.open.len() as u64);
        self.open.push(rx);
        self.step(Input::Call(Call {
            request,
            reply,
            peer: None,
            caller: None,
            arrived: None,
        }))
    }

    /// The one reply `request` gets at once.
    fn answer(&mut self, request: Request) -> Result<Response, Error> {
        let mut decided = self.ask(request);
        assert_eq!(decided.replies.len(), 1, "one reply: {decided:?}");
        decided.replies.remove(0)
    }

    fn session(&mut self, name: &str) -> SessionToken {
        let created = self.answer(Request::CreateSession(CreateSession {
            name: name.into(),
            lease_ms: Some(LEASE_MS),
            lock_delay_ms: Some(LOCK_DELAY_MS),
            behavior: Behavior::Release,
            checks: Vec::new(),
        }));
        let Ok(Response::SessionCreated {
            session, secret, ..
        }) = created
        else {
            panic!("a session, not {created:?}");
        };
        SessionToken {
            id: session,
            secret,
        }
    }

    /// `session` takes `key`'s lock in `mode`, waiting `wait_ms` if it
    /// asks to; returns the sequencer if it got the lock at once.
    fn acquire(
        &mut self,
        session: SessionToken,
        key: &str,
        mode: LockMode,
        wait_ms: Option<u64>,
    ) -> Decided {
        self.ask(Request::Acquire(Acquire {
            key: key.into(),
            session,
            mode,
            contents: None,
            wait_ms,
            transient: false,
        }))
    }

    /// `session` takes `key`'s lock at once: its sequencer, and the index
    /// of the acquire that a release names (`LOCK-4`).
    fn holds(&mut self, session: SessionToken, key: &str) -> (Sequencer, u64) {
        let decided = self.acquire(session, key, LockMode::Exclusive, None);
        let Some(Ok(Response::Acquired { sequencer, index })) = decided.replies.first() else {
            panic!("acquired, not {decided:?}");
        };
        (
            Sequencer::from_bytes(sequencer).expect("a sequencer"),
            *index,
        )
    }

    fn put(&mut self, key: &str) -> Decided {
        self.ask(put(key))
    }

    /// A session subscribed to `key`, its KeepAlive held.
    fn subscribed_and_held(&mut self, key: &str) -> SessionToken {
        let s = self.session("s");
        let subscribed = self.answer(Request::Subscribe {
            session: s,
            key: key.into(),
            prefix: false,
            mask: event_mask::ALL,
        });
        assert!(subscribed.is_ok(), "{subscribed:?}");
        assert!(self
            .ask(Request::KeepAlive(keepalive(s, true)))
            .replies
            .is_empty());
        s
    }

    /// `request`, which reached the master at `arrived`, read at `now`.
    fn ask_late(&mut self, request: Request, arrived: Millis, now: Millis) -> Decided {
        let (reply, rx) = crate::reply::channel(self.open.len() as u64);
        self.open.push(rx);
        let call = Call {
            request,
            reply,
            peer: None,
            caller: None,
            arrived: Some(arrived),
        };
        self.step_at(Input::Call(call), now)
    }

    /// Timers due at `now`, the master having read every KeepAlive that
    /// arrived by `caught_up`, with one more waiting.
    fn timers_behind(&mut self, caught_up: Millis, now: Millis) -> Decided {
        self.step_at(
            Input::TimersDue {
                caught_up,
                backlog: 1,
            },
            now,
        )
    }

    fn after(&mut self, ms: u64) -> Decided {
        let now = self.now() + Duration::from_millis(ms);
        self.step_at(
            Input::TimersDue {
                caught_up: now,
                backlog: 0,
            },
            now,
        )
    }
}

fn put(key: &str) -> Request {
    Request::Put(Put {
        key: key.into(),
        contents: b"v".to_vec(),
        flags: 0,
        cas: None,
        ephemeral: None,
    })
}

fn keepalive(session: SessionToken, hold: bool) -> KeepAlive {
    KeepAlive {
        session,
        epoch: 1,
        acked_seq: 0,
        hold,
    }
}

/// Every request kind: the reply it gets at once (`None`: it is held),
/// and the commands it logs, on a master where `s` holds `held`, `a`
/// exists and check `c` passes.
#[test]
fn every_request_kind_is_answered_and_logged_as_its_kind_says() {
    type Row = (
        &'static str,
        fn(&Fixture) -> Request,
        Option<&'static str>,
        &'static [&'static str],
    );
    struct Fixture {
        s: SessionToken,
        other: SessionToken,
        acquired: u64,
        sequencer: Vec<u8>,
        subscription: u64,
    }
    let rows: &[Row] = &[
        (
            "create a session",
            |_| {
                Request::CreateSession(CreateSession {
                    name: "new".into(),
                    lease_ms: None,
                    lock_delay_ms: None,
                    behavior: Behavior::Release,
                    checks: Vec::new(),
                })
            },
            Some("SessionCreated"),
            &["CreateSession"],
        ),
        (
            "renew a lease",
            |f| Request::KeepAlive(keepalive(f.s, false)),
            Some("KeepAlive"),
            &[],
        ),
        (
            "hold a keepalive",
            |f| Request::KeepAlive(keepalive(f.s, true)),
            None,
            &[],
        ),
        (
            "renew many leases",
            |f| Request::KeepAliveAll(vec![keepalive(f.s, false)]),
            Some("KeepAliveAll"),
            &[],
        ),
        (
            "destroy a session",
            |f| Request::DestroySession {
                session: f.other.id,
                authority: Authority::Session(f.other),
            },
            Some("Destroyed"),
            &["EndSession"],
        ),
        (
            "describe a session",
            |f| Request::SessionInfo { session: f.s.id },
            Some("SessionInfo"),
            &[],
        ),
        (
            "list sessions",
            |_| Request::ListSessions {
                after: None,
                limit: 0,
            },
            Some("Sessions"),
            &[],
        ),
        (
            "read a node",
            |_| Request::Get {
                key: "a".into(),
                stat_only: false,
            },
            Some("Node"),
            &[],
        ),
        (
            "read a node to cache",
            |f| {
                Request::GetCached(GetCached {
                    key: "a".into(),
                    session: f.s,
                    dropped: Vec::new(),
                })
            },
            Some("Cached"),
            &["MayCache"],
        ),
        (
            "list keys",
            |_| Request::List {
                prefix: String::new(),
                recursive: true,
                after: None,
                limit: 0,
            },
            Some("Keys"),
            &[],
        ),
        ("write a node", |_| put("b"), Some("Written"), &["Put"]),
        (
            "delete a node",
            |_| Request::Delete {
                key: "a".into(),
                cas: None,
                recursive: false,
                authority: Authority::Anonymous,
            },
            Some("Deleted"),
            &["Delete"],
        ),
        (
            "watch a node that changed",
            |_| Request::Watch {
                key: "a".into(),
                after_index: 0,
                timeout_ms: 0,
            },
            Some("Node"),
            &[],
        ),
        (
            "watch a node for a change",
            |_| Request::Watch {
                key: "a".into(),
                after_index: 1_000,
                timeout_ms: 0,
            },
            None,
            &[],
        ),
        (
            "take a free lock",
            |f| {
                Request::Acquire(Acquire {
                    key: "free".into(),
                    session: f.s,
                    mode: LockMode::Exclusive,
                    contents: None,
                    wait_ms: None,
                    transient: false,
                })
            },
            Some("Acquired"),
            &["Acquire"],
        ),
        (
            "wait for a held lock",
            |f| {
                Request::Acquire(Acquire {
                    key: "held".into(),
                    session: f.other,
                    mode: LockMode::Exclusive,
                    contents: None,
                    wait_ms: Some(1_000),
                    transient: false,
                })
            },
            None,
            &["Acquire"],
        ),
        (
            "release a lock",
            |f| Request::Release {
                key: "held".into(),
                session: f.s,
                acquired: f.acquired,
            },
            Some("Released"),
            &["ReleaseAcquired"],
        ),
        (
            "release a lock unfenced",
            |f| Request::ReleaseUnfenced {
                key: "held".into(),
                session: f.s,
            },
            Some("Released"),
            &["Release"],
        ),
        (
            "name a holding's sequencer",
            |f| Request::GetSequencer {
                key: "held".into(),
                session: f.s,
            },
            Some("Sequencer"),
            &[],
        ),
        (
            "check a sequencer",
            |f| Request::CheckSequencer {
                sequencer: f.sequencer.clone(),
            },
            Some("SequencerChecked"),
            &[],
        ),
        (
            "subscribe",
            |f| Request::Subscribe {
                session: f.s,
                key: "a".into(),
                prefix: false,
                mask: event_mask::ALL,
            },
            Some("Subscribed"),
            &[],
        ),
        (
            "unsubscribe",
            |f| Request::Unsubscribe {
                session: f.s,
                subscription: f.subscription,
            },
            Some("Unsubscribed"),
            &[],
        ),
        (
            "set a check",
            |_| Request::SetCheck {
                name: "d".into(),
                status: CheckStatus::Passing,
                note: String::new(),
            },
            Some("CheckSet"),
            &["SetCheck"],
        ),
        (
            "delete a check",
            |_| Request::DeleteCheck { name: "c".into() },
            Some("CheckDeleted"),
            &["DeleteCheck"],
        ),
        (
            "list checks",
            |_| Request::ListChecks {
                after: None,
                limit: 0,
            },
            Some("Checks"),
            &[],
        ),
        (
            "describe a lock",
            |_| Request::LockInfo { key: "held".into() },
            Some("LockInfo"),
            &[],
        ),
        (
            "list a session's locks",
            |f| Request::SessionLocks { session: f.s.id },
            Some("SessionLocks"),
            &[],
        ),
    ];
    for (what, request, reply, logged) in rows {
        let mut bench = Bench::new();
        let (s, other) = (bench.session("s"), bench.session("other"));
        let (grant, acquired) = bench.holds(s, "held");
        bench.put("a");
        bench.ask(Request::SetCheck {
            name: "c".into(),
            status: CheckStatus::Passing,
            note: String::new(),
        });
        let subscribed = bench.answer(Request::Subscribe {
            session: s,
            key: "sub".into(),
            prefix: true,
            mask: event_mask::ALL,
        });
        let Ok(Response::Subscribed { subscription, .. }) = subscribed else {
            panic!("subscribed, not {subscribed:?}");
        };
        let fixture = Fixture {
            s,
            other,
            acquired,
            sequencer: grant.to_bytes(),
            subscription,
        };
        let decided = bench.ask(request(&fixture));
        let replies: Vec<String> = decided.replies.iter().map(shape).collect();
        let expected: Vec<String> = reply.iter().map(|r| r.to_string()).collect();
        assert_eq!(replies, expected, "{what}: {decided:?}");
        assert_eq!(decided.logged, *logged, "{what}: {decided:?}");
    }
}

// STORE-5
#[test]
fn a_write_on_a_full_disk_is_refused_and_logs_nothing() {
    let mut bench = Bench::new();
    bench.engine.disk_full = true;
    let decided = bench.put("a");
    assert_eq!(
        decided.replies.iter().map(shape).collect::<Vec<_>>(),
        ["error StorageFull"]
    );
    assert!(decided.logged.is_empty());
}

#[test]
fn a_reply_comes_after_the_record_it_depends_on() {
    let mut bench = Bench::new();
    let decided = bench.put("a");
    assert_eq!(decided.order, ["log Put", "reply Written"]);
}

#[test]
fn a_refused_command_is_answered_and_not_logged() {
    let mut bench = Bench::new();
    bench.put("a");
    let decided = bench.ask(Request::Put(Put {
        cas: Some(999),
        ..match put("a") {
            Request::Put(put) => put,
            _ => unreachable!(),
        }
    }));
    assert_eq!(decided.replies.len(), 1);
    assert!(decided.replies[0].is_err());
    assert!(decided.logged.is_empty(), "{decided:?}");
}

#[test]
fn in_memory_nothing_is_logged() {
    let config = Config::default();
    let state = State::new(Bounds::from(&config));
    let mut engine = Engine::new(config, state, false, at(0), false);
    let (reply, _rx) = crate::reply::channel(1);
    engine.step(
        Input::Call(Call {
            request: put("a"),
            reply,
            peer: None,
            caller: None,
            arrived: None,
        }),
        at(0),
    );
    let effects = engine.effects();
    assert_eq!(effects.len(), 1);
    assert!(matches!(effects[0], Effect::Reply { .. }));
}

// SES-6
#[test]
fn a_lease_nobody_renews_ends_when_its_timer_fires() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    assert!(bench.after(LEASE_MS - 1).logged.is_empty());
    assert_eq!(bench.after(1).logged, ["EndSession"]);
    assert!(bench.engine.state.session(s.id).is_none());
}

// KA-3
#[test]
fn a_held_keepalive_is_answered_by_its_timer_before_the_lease_ends() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    assert!(bench
        .ask(Request::KeepAlive(keepalive(s, true)))
        .replies
        .is_empty());
    let mut answered = Vec::new();
    for _ in 0..LEASE_MS {
        answered = bench.after(1).replies;
        if !answered.is_empty() {
            break;
        }
    }
    assert_eq!(
        answered.iter().map(shape).collect::<Vec<_>>(),
        ["KeepAlive"]
    );
    assert!(
        bench.engine.state.session(s.id).is_some(),
        "before the lease ended"
    );
}

// OPS-1: a held KeepAlive answered by its timer at its time counts as
// due; one whose timer fired more than a quarter of the margin in force
// late (a master that fell behind) counts as late.
#[test]
fn held_keepalives_are_counted_due_or_late_by_when_their_timer_fired() {
    use crate::tally::Answered;
    let mut bench = Bench::new();
    let s = bench.session("s");
    let count = |bench: &Bench, when: Answered| bench.engine.tally.answered[when as usize];
    bench.ask(Request::KeepAlive(keepalive(s, true)));
    while bench.after(1).replies.is_empty() {}
    assert_eq!(count(&bench, Answered::Due), 1);
    // Renewed now for a lease of LEASE_MS: the next is due a margin of a
    // quarter of it (250 ms) before its end, and is late past 62 ms after.
    assert!(bench
        .ask(Request::KeepAlive(keepalive(s, true)))
        .replies
        .is_empty());
    let due = LEASE_MS - LEASE_MS / 4;
    let answered = bench.after(due + 100).replies;
    assert_eq!(
        answered.iter().map(shape).collect::<Vec<_>>(),
        ["KeepAlive"]
    );
    assert_eq!(count(&bench, Answered::Late), 1);
    assert_eq!(count(&bench, Answered::Due), 1);
    assert_eq!(count(&bench, Answered::AtOnce), 0);
}

// OPS-1, EV-3: a held KeepAlive answered before its time to carry an
// event counts as early.
#[test]
fn a_held_keepalive_woken_by_an_event_counts_as_early() {
    use crate::tally::Answered;
    let mut bench = Bench::new();
    bench.subscribed_and_held("k");
    let decided = bench.put("k");
    assert_eq!(
        decided.order,
        ["log Put", "reply Written", "reply KeepAlive"]
    );
    let answered = bench.engine.tally.answered;
    assert_eq!(answered[Answered::Early as usize], 1, "{answered:?}");
    assert_eq!(answered[Answered::Due as usize], 0, "{answered:?}");
}

// SES-6
#[test]
fn a_keepalive_that_arrived_before_the_lease_ended_renews_it_however_late_it_is_read() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    let end = bench.now() + Duration::from_millis(LEASE_MS);
    let arrived = bench.now() + Duration::from_millis(LEASE_MS - 1);
    let read = end + Duration::from_secs(5);
    let decided = bench.ask_late(Request::KeepAlive(keepalive(s, false)), arrived, read);
    assert_eq!(decided.order, ["reply KeepAlive"]);
    assert!(bench.engine.state.session(s.id).is_some());
}

// SES-6
#[test]
fn a_keepalive_that_arrived_after_the_lease_ended_does_not_revive_it() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    let end = bench.now() + Duration::from_millis(LEASE_MS);
    let decided = bench.ask_late(Request::KeepAlive(keepalive(s, false)), end, end);
    assert_eq!(
        decided.order,
        ["log EndSession", "reply error SessionExpired"]
    );
}

// SES-6
#[test]
fn a_lease_that_ran_out_waits_for_the_master_to_read_the_keepalives_that_came_before_its_end() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    let end = bench.now() + Duration::from_millis(LEASE_MS);
    // A second past the end, the master has read only what arrived up to
    // half a second before it: the session's KeepAlive may be waiting.
    let late = end + Duration::from_secs(1);
    let decided = bench.timers_behind(Millis::from_millis(end.as_millis() - 500), late);
    assert!(decided.order.is_empty(), "{:?}", decided.order);
    let arrived = Millis::from_millis(end.as_millis() - 100);
    let decided = bench.ask_late(Request::KeepAlive(keepalive(s, false)), arrived, late);
    assert_eq!(decided.order, ["reply KeepAlive"]);
    // With nothing more waiting, the renewed lease runs on from the read.
    assert!(bench.engine.state.session(s.id).is_some());
}

// SES-6
#[test]
fn a_lease_that_ran_out_ends_once_the_master_has_read_what_came_before_its_end() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    let end = bench.now() + Duration::from_millis(LEASE_MS);
    let late = end + Duration::from_secs(1);
    let decided = bench.timers_behind(end, late);
    assert_eq!(decided.order, ["log EndSession"]);
    assert!(bench.engine.state.session(s.id).is_none());
}

// EV-3, SES-6: a write wakes a held KeepAlive after its lease's end, the
// master having answered nothing meanwhile (its timers late): the
// KeepAlive came in time, so it renews the lease.
#[test]
fn a_held_keepalive_a_write_wakes_after_the_lease_ended_renews_it() {
    let mut bench = Bench::new();
    let s = bench.subscribed_and_held("k");
    let (reply, rx) = crate::reply::channel(99);
    bench.open.push(rx);
    let late = bench.now() + Duration::from_millis(2 * LEASE_MS);
    let call = Call {
        request: put("k"),
        reply,
        peer: None,
        caller: None,
        arrived: None,
    };
    let decided = bench.step_at(Input::Call(call), late);
    assert_eq!(
        decided.order,
        ["log Put", "reply Written", "reply KeepAlive"]
    );
    assert!(bench.engine.state.session(s.id).is_some());
}

// NS-9
#[test]
fn a_watch_nothing_changes_is_answered_when_its_time_is_up() {
    let mut bench = Bench::new();
    bench.put("a");
    let held = bench.ask(Request::Watch {
        key: "a".into(),
        after_index: 1_000,
        timeout_ms: 100,
    });
    assert!(held.replies.is_empty());
    assert!(
        bench.after(100).replies.is_empty(),
        "not before its timeout has passed"
    );
    assert_eq!(bench.after(1).replies.len(), 1);
}

#[test]
fn a_watch_is_answered_by_the_write_it_waits_for() {
    let mut bench = Bench::new();
    bench.put("a");
    bench.ask(Request::Watch {
        key: "a".into(),
        after_index: 1_000,
        timeout_ms: 100,
    });
    let decided = bench.put("a");
    assert_eq!(decided.order, ["log Put", "reply Node", "reply Written"]);
}

// LOCK-3
#[test]
fn a_wait_whose_time_is_up_leaves_the_line_and_is_refused() {
    let mut bench = Bench::new();
    let (s, other) = (bench.session("s"), bench.session("other"));
    bench.holds(s, "held");
    let waiting = bench.acquire(other, "held", LockMode::Exclusive, Some(100));
    assert!(waiting.replies.is_empty());
    let decided = bench.after(101);
    assert_eq!(decided.logged, ["CancelWait"]);
    assert_eq!(decided.replies.len(), 1);
    assert!(decided.replies[0].is_err());
}

// LOCK-6
#[test]
fn a_waiter_gets_the_lock_when_the_lock_delay_of_an_expired_holder_ends() {
    let mut bench = Bench::new();
    let (holder, waiter) = (bench.session("holder"), bench.session("waiter"));
    bench.holds(holder, "held");
    bench.acquire(waiter, "held", LockMode::Exclusive, Some(0));
    // Only the waiter renews: the holder's lease runs out.
    bench.after(LEASE_MS / 2);
    bench.ask(Request::KeepAlive(keepalive(waiter, false)));
    let expired = bench.after(LEASE_MS / 2);
    assert_eq!(expired.logged, ["EndSession"]);
    assert!(
        expired.replies.is_empty(),
        "lock-delay keeps the waiter waiting"
    );
    bench.ask(Request::KeepAlive(keepalive(waiter, false)));
    let granted = bench.after(LOCK_DELAY_MS);
    assert_eq!(granted.logged, ["GrantWaiters"]);
    assert_eq!(
        granted.replies.iter().map(shape).collect::<Vec<_>>(),
        ["Acquired"]
    );
}

// LOCK-5
#[test]
fn a_waiter_whose_time_is_up_lets_the_shared_waiters_behind_it_in() {
    let mut bench = Bench::new();
    let (holder, writer, reader) = (bench.session("h"), bench.session("w"), bench.session("r"));
    bench.acquire(holder, "held", LockMode::Shared, None);
    bench.acquire(writer, "held", LockMode::Exclusive, Some(100));
    let behind = bench.acquire(reader, "held", LockMode::Shared, Some(10_000));
    assert!(behind.replies.is_empty(), "behind the exclusive waiter");
    // Logged as a command of its own, after the wait's end.
    let moved = bench.after(101);
    assert_eq!(moved.logged, ["CancelWait", "GrantWaiters"]);
    let replies: Vec<String> = moved.replies.iter().map(shape).collect();
    assert_eq!(replies, ["error LockHeld", "Acquired"], "{moved:?}");
}

// CACHE-3, CACHE-5
#[test]
fn a_write_held_for_a_silent_cacher_goes_once_the_cachers_lease_has_run_out() {
    let mut bench = Bench::new();
    let cacher = bench.session("cacher");
    bench.put("a");
    let read = bench.answer(Request::GetCached(GetCached {
        key: "a".into(),
        session: cacher,
        dropped: Vec::new(),
    }));
    assert!(matches!(
        read,
        Ok(Response::Cached {
            cacheable: true,
            ..
        })
    ));
    let held = bench.put("a");
    assert!(
        held.replies.is_empty() && held.logged.is_empty(),
        "{held:?}"
    );
    // The cacher never acknowledges: its lease ends, which ends it, and
    // the loop is told held work may go.
    bench.after(LEASE_MS);
    assert!(bench.engine.held_work_moved());
    let went = bench.step(Input::HeldWork);
    assert!(went.logged.contains(&"Put".to_string()), "{went:?}");
    assert!(went
        .replies
        .iter()
        .any(|r| matches!(r, Ok(Response::Written { .. }))));
}

// LOCK-9
#[test]
fn a_grant_nobody_heard_is_given_back() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    let (grant, _) = bench.holds(s, "held");
    let decided = bench.step(Input::Unheard(grant));
    assert_eq!(decided.logged, ["GiveBack"]);
    assert!(bench.engine.state.sequencer_of("held", s.id).is_none());
}

// LOCK-9
#[test]
fn a_grant_nobody_heard_stays_when_another_reply_told_its_session_of_it() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    let (grant, _) = bench.holds(s, "held");
    // It asks again and is told it holds the lock (`LOCK-2`).
    let again = bench.acquire(s, "held", LockMode::Exclusive, None);
    assert_eq!(
        again.replies.iter().map(shape).collect::<Vec<_>>(),
        ["Acquired"]
    );
    let decided = bench.step(Input::Unheard(grant.clone()));
    assert!(decided.logged.is_empty(), "{decided:?}");
    assert_eq!(bench.engine.state.sequencer_of("held", s.id), Some(grant));
}

// LOCK-9
#[test]
fn a_grant_nobody_heard_changes_nothing_once_the_lock_was_let_go() {
    let mut bench = Bench::new();
    let s = bench.session("s");
    let (grant, _) = bench.holds(s, "held");
    bench.ask(Request::ReleaseUnfenced {
        key: "held".into(),
        session: s,
    });
    let (later, _) = bench.holds(s, "held");
    let decided = bench.step(Input::Unheard(grant));
    assert!(decided.logged.is_empty(), "{decided:?}");
    assert_eq!(bench.engine.state.sequencer_of("held", s.id), Some(later));
}
