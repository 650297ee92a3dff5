//! The simulated applications: what each client host does with the real
//! client library, and what it reports to the trace.
//!
//! - contenders take a lock, lead an election or hold a semaphore slot, and
//!   while they believe they hold it, write to the storage host with their
//!   sequencer;
//! - writers put and get keys (no session needed), read them through a
//!   session's cache as well, and put keys of their own exactly once each,
//!   whose loss no later write can hide;
//! - the watcher subscribes to the writers' own keys and reports every
//!   event it receives.
//!
//! A correct contender stops believing the moment its session leaves
//! `Normal` (the local lease is no longer valid) or its lock is lost. The
//! deliberately broken one (`Settings::ignore_jeopardy`) believes until its
//! session expires, as a client that ignores jeopardy would.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    Client, ClientConfig, ClientError, Election, LockOptions, PutOptions, Semaphore, Session,
    SessionOptions, SessionState, SubscribeOptions, SubscriptionEvent,
};
use tokio::time::{sleep, timeout, Instant};

use super::net::{SimCellConnector, SimConnector};
use super::record::Settings;
use super::rng::Rng;
use super::storage::{StorageClient, Written};
use super::trace::{now_ms, Call, Outcome, Trace, What};

/// What a client host does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Contends for the exclusive lock `locks/work`.
    Locker,
    /// Campaigns in the election `election/leader`.
    Elector,
    /// Takes a slot of the semaphore `sem/pool`.
    SemaphoreHolder,
    /// Puts and gets keys, and puts write-once keys.
    Writer,
    /// Subscribes to `kv/own/` and reports the events it hears.
    Watcher,
}

pub const LOCK: &str = "locks/work";
pub const ELECTION: &str = "election/leader";
pub const SEMAPHORE: &str = "sem/pool";
pub const WATCHED: &str = "kv/own";
/// Keys put once each (`kv/once/<writer>/<n>`), outside the watched
/// prefix: an acknowledged put of one must be what the final read finds.
pub const WRITE_ONCE: &str = "kv/once";

/// When each client's local lease runs out, as the fault schedule sees
/// it: in virtual milliseconds since the run began, since hosts' clocks are
/// not comparable and the run's elapsed time is.
/// Also each client's session of the moment, by its name in the trace.
#[derive(Debug, Clone, Default)]
pub struct Leases {
    published: Arc<Mutex<BTreeMap<String, Published>>>,
    /// Clients whose lease is published every step.
    watched: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

/// A client's local lease's end, once known, and its session's name.
type Published = (Option<u64>, String);

impl Leases {
    pub fn until(&self, client: &str) -> Option<u64> {
        self.published
            .lock()
            .unwrap()
            .get(client)
            .and_then(|(until, _)| *until)
    }

    /// The session `client` has now, if it has one.
    pub fn session(&self, client: &str) -> Option<String> {
        let leases = self.published.lock().unwrap();
        leases.get(client).map(|(_, session)| session.clone())
    }

    /// From now on `client`'s lease is published every step rather than
    /// every 50 ms, or no longer.
    pub fn watch(&self, client: &str, watched: bool) {
        let mut watching = self.watched.lock().unwrap();
        if watched {
            watching.insert(client.to_string());
        } else {
            watching.remove(client);
        }
    }

    fn watched(&self, client: &str) -> bool {
        self.watched.lock().unwrap().contains(client)
    }

    fn started(&self, client: &str, session: &str) {
        let entry = (None, session.to_string());
        self.published
            .lock()
            .unwrap()
            .insert(client.to_string(), entry);
    }

    fn set(&self, client: &str, until: u64) {
        if let Some((lease, _)) = self.published.lock().unwrap().get_mut(client) {
            *lease = Some(until);
        }
    }

    fn forget(&self, client: &str) {
        self.published.lock().unwrap().remove(client);
    }
}

/// How a session is named in the trace: the first 8 characters of its id,
/// by the client and the master alike.
pub fn short_id(id: leasehold::SessionId) -> String {
    id.to_string()[..8].to_string()
}

/// What every application gets.
#[derive(Clone)]
pub struct Ctx {
    pub name: String,
    pub trace: Trace,
    pub leases: Leases,
    pub settings: Settings,
    pub rng: Rng,
    /// Virtual time at which to stop working (and close the session).
    pub work_until: u64,
    /// Virtual time at which the watcher stops listening.
    pub listen_until: u64,
    /// Set once the watcher's subscription exists.
    pub watching: Arc<AtomicBool>,
    /// Numbers key/value calls across the run.
    pub ops: Arc<AtomicU64>,
    /// How fast this host's clock runs against true time.
    pub clock_rate: f64,
    /// The single master, or a cell's members.
    pub servers: Vec<String>,
    /// A writer's pause after each call, in ms: from, to.
    pub writer_pause: (u64, u64),
}

pub async fn run(role: Role, mut ctx: Ctx) -> turmoil::Result {
    match role {
        Role::Writer => writer(&mut ctx).await,
        Role::Watcher => watcher(&mut ctx).await,
        _ => contender(role, &mut ctx).await,
    }
    Ok(())
}

pub(super) fn client_config(ctx: &Ctx) -> ClientConfig {
    ClientConfig {
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(3),
        clock_rate: ctx.clock_rate,
        ..ClientConfig::default()
    }
}

async fn connect(ctx: &Ctx) -> Option<Client> {
    let config = client_config(ctx);
    if let [master] = &ctx.servers[..] {
        let connector = SimConnector {
            host: master.clone(),
        };
        return Client::with_connector(connector, config).await.ok();
    }
    // Clients start at different members, as a real deployment's would.
    let start = ctx.name.bytes().map(usize::from).sum::<usize>();
    let connector = SimCellConnector::new(ctx.servers.clone(), start);
    Client::with_connector(connector, config).await.ok()
}

/// What a contender believes it holds, ended by whichever comes first:
/// the end of its work, the loss of the lock, or its session's state.
#[derive(Clone)]
struct Belief {
    trace: Trace,
    who: String,
    /// The lock, its generation and the session holding it.
    held: Arc<Mutex<Option<(String, u64, String)>>>,
}

impl Belief {
    fn start(&self, session: &Session, lock: &str, generation: u64) {
        let id = short_id(session.id());
        *self.held.lock().unwrap() = Some((lock.to_string(), generation, id.clone()));
        let lock = lock.to_string();
        let holding = What::Holding {
            lock,
            generation,
            session: id,
        };
        self.trace.push(&self.who, holding);
    }

    fn holds(&self) -> bool {
        self.held.lock().unwrap().is_some()
    }

    /// Ends the belief if `session` is the one it rests on: a closing
    /// session of this client's past must not end a later one's.
    fn end_of(&self, session: &str, why: &str) {
        let taken = {
            let mut held = self.held.lock().unwrap();
            match held.as_ref() {
                Some((_, _, s)) if s == session => held.take(),
                _ => None,
            }
        };
        self.end_taken(why, taken);
    }

    fn end(&self, why: &str) {
        let taken = self.held.lock().unwrap().take();
        self.end_taken(why, taken);
    }

    fn end_taken(&self, why: &str, taken: Option<(String, u64, String)>) {
        if let Some((lock, generation, _)) = taken {
            let why = why.to_string();
            self.trace.push(
                &self.who,
                What::Released {
                    lock,
                    generation,
                    why,
                },
            );
        }
    }
}

/// A session and the task that publishes its local lease.
struct Live {
    session: Session,
    publisher: tokio::task::JoinHandle<()>,
}

impl Live {
    async fn finish(self, ctx: &Ctx) {
        self.publisher.abort();
        if !self.session.state().is_final() {
            ctx.trace.push(&ctx.name, What::Closing);
            let _ = timeout(Duration::from_secs(2), self.session.close()).await;
        }
    }
}

async fn open_session(ctx: &mut Ctx, belief: Option<&Belief>, until: u64) -> Option<Live> {
    while now_ms() < until {
        if let Some(client) = connect(ctx).await {
            let options = SessionOptions::new(ctx.name.clone())
                .lease(ctx.settings.lease)
                .grace(ctx.settings.grace)
                .lock_delay(ctx.settings.lock_delay.unwrap_or_default())
                .clock_drift(ctx.settings.clock_drift);
            if let Ok(Ok(session)) =
                timeout(Duration::from_secs(3), client.create_session(options)).await
            {
                let id = short_id(session.id());
                ctx.leases.started(&ctx.name, &id);
                ctx.trace.push(
                    &ctx.name,
                    What::SessionStarted {
                        session: id.clone(),
                    },
                );
                let (trace, who) = (ctx.trace.clone(), ctx.name.clone());
                let belief = belief.cloned();
                let ignore = ctx.settings.ignore_jeopardy;
                session.on_state_change(move |state| {
                    trace.push(
                        &who,
                        What::State {
                            state: state.as_str().to_string(),
                            session: id.clone(),
                        },
                    );
                    if let Some(belief) = &belief {
                        if state.is_final() || (!ignore && state != SessionState::Normal) {
                            belief.end_of(&id, state.as_str());
                        }
                    }
                });
                let publisher = tokio::spawn(publish_lease(
                    session.clone(),
                    ctx.leases.clone(),
                    ctx.name.clone(),
                ));
                return Some(Live { session, publisher });
            }
        }
        sleep(Duration::from_millis(ctx.rng.range(200, 600))).await;
    }
    None
}

async fn publish_lease(session: Session, leases: Leases, name: String) {
    while !session.state().is_final() {
        let expiry = session.local_lease_expiry();
        let left = expiry.saturating_duration_since(Instant::now()).as_millis() as u64;
        leases.set(&name, now_ms() + left);
        // Every step while a fault waits for a renewal (`Edge::Hold`): it
        // must begin before the KeepAlive the renewal sets off arrives.
        let every = if leases.watched(&name) { 1 } else { 50 };
        sleep(Duration::from_millis(every)).await;
    }
    leases.forget(&name);
}

async fn contender(role: Role, ctx: &mut Ctx) {
    let belief = Belief {
        trace: ctx.trace.clone(),
        who: ctx.name.clone(),
        held: Arc::default(),
    };
    let mut storage = StorageClient::default();
    while now_ms() < ctx.work_until {
        let until = ctx.work_until;
        let Some(live) = open_session(ctx, Some(&belief), until).await else {
            break;
        };
        while now_ms() < ctx.work_until && !live.session.state().is_final() {
            let session = &live.session;
            match role {
                Role::Locker => lock_round(ctx, session, &belief, &mut storage).await,
                Role::Elector => election_round(ctx, session, &belief, &mut storage).await,
                _ => semaphore_round(ctx, session, &belief).await,
            }
            sleep(Duration::from_millis(ctx.rng.range(0, 400))).await;
        }
        belief.end("work done");
        live.finish(ctx).await;
    }
}

/// How long a contender waits in line: three seconds, and never past the
/// work. It asks once, and leaves lost connections and fail-overs to the
/// library, which rides through them (`LOCK-15`).
fn patience(ctx: &Ctx) -> Duration {
    let left = ctx.work_until.saturating_sub(now_ms()).max(1);
    Duration::from_millis(left.min(3_000))
}

/// Traces how a wait for `lock` ended.
fn waited<T>(ctx: &Ctx, lock: &str, outcome: &Option<Result<T, ClientError>>) {
    let outcome = match outcome {
        None => "gave_up".to_string(),
        Some(Ok(_)) => "granted".to_string(),
        Some(Err(e)) if e.is_lock_refusal() => "refused".to_string(),
        Some(Err(ClientError::SessionExpired)) => "expired".to_string(),
        Some(Err(e))
            if matches!(
                e.code(),
                Some(leasehold::ErrorCode::SessionExpired | leasehold::ErrorCode::UnknownSession)
            ) =>
        {
            "expired".to_string()
        }
        Some(Err(ClientError::Timeout(_))) => "timeout".to_string(),
        Some(Err(e)) => format!("error: {e}"),
    };
    let what = What::Waited {
        lock: lock.to_string(),
        outcome,
    };
    ctx.trace.push(&ctx.name, what);
}

/// `wait`, given up on when the work is over.
async fn until_work_ends<T>(ctx: &Ctx, wait: impl Future<Output = T>) -> Option<T> {
    let left = ctx.work_until.saturating_sub(now_ms());
    timeout(Duration::from_millis(left), wait).await.ok()
}

async fn lock_round(
    ctx: &mut Ctx,
    session: &Session,
    belief: &Belief,
    storage: &mut StorageClient,
) {
    let options = LockOptions::exclusive().timeout(patience(ctx));
    let outcome = until_work_ends(ctx, session.lock(LOCK, options)).await;
    waited(ctx, LOCK, &outcome);
    let Some(Ok(guard)) = outcome else {
        return;
    };
    let generation = guard.sequencer().lock_generation;
    let still = || guard.is_held();
    hold(
        ctx,
        session,
        belief,
        Some(storage),
        LOCK,
        generation,
        guard.lost(),
        still,
    )
    .await;
    let _ = timeout(Duration::from_secs(2), guard.release()).await;
}

async fn election_round(
    ctx: &mut Ctx,
    session: &Session,
    belief: &Belief,
    storage: &mut StorageClient,
) {
    let election = Election::new(session, ELECTION);
    let campaign = timeout(patience(ctx), election.campaign(ctx.name.clone()));
    // The campaign waits as long as its session lives; the contender lets
    // it go after a while (not a failure: an application's choice).
    let outcome = match until_work_ends(ctx, campaign).await {
        Some(Ok(outcome)) => Some(outcome),
        _ => None,
    };
    waited(ctx, ELECTION, &outcome);
    let Some(Ok(term)) = outcome else {
        return;
    };
    let generation = term.sequencer().lock_generation;
    let still = || term.is_leader();
    hold(
        ctx,
        session,
        belief,
        Some(storage),
        ELECTION,
        generation,
        term.lost(),
        still,
    )
    .await;
    let _ = timeout(Duration::from_secs(2), term.resign()).await;
}

async fn semaphore_round(ctx: &mut Ctx, session: &Session, belief: &Belief) {
    let semaphore = Semaphore::new(session, SEMAPHORE, ctx.settings.semaphore_limit);
    let acquire = semaphore.acquire(ctx.name.clone(), Some(patience(ctx)));
    let outcome = until_work_ends(ctx, acquire).await;
    // The semaphore's own timeout is the application giving up, not a
    // failure of the wait.
    let outcome = match outcome {
        Some(Err(ClientError::Timeout(_))) => None,
        outcome => outcome,
    };
    waited(ctx, SEMAPHORE, &outcome);
    let Some(Ok(permit)) = outcome else {
        return;
    };
    let still = || permit.is_held();
    hold(
        ctx,
        session,
        belief,
        None,
        SEMAPHORE,
        0,
        permit.lost(),
        still,
    )
    .await;
    let _ = timeout(Duration::from_secs(2), permit.release()).await;
}

/// Believes in the holding for a while, writing under it when there is a
/// sequencer to write with, and stops believing as soon as the holding
/// can no longer be relied on (unless this client is the broken one).
#[allow(clippy::too_many_arguments)]
async fn hold(
    ctx: &mut Ctx,
    session: &Session,
    belief: &Belief,
    mut storage: Option<&mut StorageClient>,
    lock: &str,
    generation: u64,
    lost: impl Future<Output = ()>,
    still: impl Fn() -> bool,
) {
    let ignore = ctx.settings.ignore_jeopardy;
    // A grant that arrives in jeopardy, or after a loss, proves nothing.
    if !ignore && (session.state() != SessionState::Normal || !still()) {
        return;
    }
    belief.start(session, lock, generation);
    // The broken client holds on like a leader does, for long stretches.
    let (shortest, longest) = if ignore {
        (10_000, 20_000)
    } else {
        (500, 6_000)
    };
    let until = now_ms() + ctx.rng.range(shortest, longest);
    tokio::pin!(lost);
    while now_ms() < until && belief.holds() {
        if let Some(storage) = storage.as_deref_mut() {
            if storage.write(&ctx.name, lock, generation).await == Written::Stale && !ignore {
                // Someone newer has written: this holding is over.
                break;
            }
        }
        let pause = sleep(Duration::from_millis(ctx.rng.range(100, 400)));
        tokio::select! {
            () = pause => {}
            () = &mut lost, if !ignore => break,
        }
    }
    belief.end("released");
}

async fn writer(ctx: &mut Ctx) {
    let client = loop {
        if let Some(client) = connect(ctx).await {
            break client;
        }
        if now_ms() >= ctx.work_until {
            return;
        }
        sleep(Duration::from_millis(300)).await;
    };
    // Events are checked from the subscription on.
    let ready_by = now_ms() + 10_000;
    while !ctx.watching.load(Ordering::Acquire) && now_ms() < ready_by {
        sleep(Duration::from_millis(50)).await;
    }
    let own = [
        format!("{WATCHED}/{}/a", ctx.name),
        format!("{WATCHED}/{}/b", ctx.name),
    ];
    let shared = ["kv/shared/0".to_string(), "kv/shared/1".to_string()];
    let mut turn = 0;
    let mut written = 0;
    let mut once = 0;
    // A session whose cache serves reads again (`CACHE-1`).
    let mut reader: Option<Live> = None;
    // Writers that contend (the cache scenarios') mostly read, through
    // their caches, what the bystanders mostly write.
    let writes = if ctx.name.starts_with('c') { 3 } else { 9 };
    while now_ms() < ctx.work_until {
        let dice = ctx.rng.range(0, 12);
        if dice < writes {
            let key = if dice < writes * 4 / 9 {
                turn += 1;
                own[turn % 2].clone()
            } else if dice < writes * 7 / 9 {
                ctx.rng.pick(&shared).clone()
            } else {
                once += 1;
                format!("{WRITE_ONCE}/{}/{once}", ctx.name)
            };
            written += 1;
            let value = format!("{}-{written}", ctx.name);
            put(ctx, &client, &key, value).await;
        } else {
            let key = if ctx.rng.chance(0.5) {
                ctx.rng.pick(&shared).clone()
            } else {
                ctx.rng.pick(&own).clone()
            };
            if ctx.rng.chance(0.3) {
                get(ctx, &client, &key).await;
            } else {
                if reader.as_ref().is_none_or(|r| r.session.state().is_final()) {
                    if let Some(old) = reader.take() {
                        old.finish(ctx).await;
                    }
                    let until = (now_ms() + 3_000).min(ctx.work_until);
                    reader = open_session(ctx, None, until).await;
                }
                match &reader {
                    Some(live) => cached_get(ctx, &live.session, &key).await,
                    None => {
                        get(ctx, &client, &key).await;
                    }
                }
            }
        }
        let (from, to) = ctx.writer_pause;
        sleep(Duration::from_millis(ctx.rng.range(from, to))).await;
    }
    if let Some(live) = reader {
        live.finish(ctx).await;
    }
}

/// Reads `key` through `session`'s cache, and says in the trace whether
/// the cache served it.
async fn cached_get(ctx: &Ctx, session: &Session, key: &str) {
    let op = invoke(ctx, key, Call::CachedGet);
    let hits = session.cache_stats().hits;
    let result = timeout(Duration::from_secs(4), session.get(key)).await;
    let hit = session.cache_stats().hits > hits;
    let result = outcome(result, |node| {
        node.and_then(|n| n.contents)
            .map(|c| String::from_utf8_lossy(&c).into_owned())
    });
    ctx.trace.push(&ctx.name, What::Complete { op, result });
    if hit {
        ctx.trace.push(&ctx.name, What::CacheHit { op });
    }
}

fn outcome<T>(
    result: Result<Result<T, ClientError>, tokio::time::error::Elapsed>,
    value: impl FnOnce(T) -> Option<String>,
) -> Outcome {
    match result {
        Ok(Ok(v)) => Outcome::Ok { value: value(v) },
        // A master that stopped before its change was durable (`ERR-18`).
        Ok(Err(e)) if e.outcome_unknown() => Outcome::Unknown {
            error: e.to_string(),
        },
        // The master answered with a refusal, or nothing was sent.
        Ok(Err(e @ (ClientError::Server(_) | ClientError::Connect { .. }))) => Outcome::Failed {
            error: e.to_string(),
        },
        Ok(Err(e)) => Outcome::Unknown {
            error: e.to_string(),
        },
        Err(_) => Outcome::Unknown {
            error: "no answer in time".into(),
        },
    }
}

fn invoke(ctx: &Ctx, key: &str, call: Call) -> u64 {
    let op = ctx.ops.fetch_add(1, Ordering::Relaxed);
    let key = key.to_string();
    ctx.trace.push(&ctx.name, What::Invoke { op, key, call });
    op
}

async fn put(ctx: &Ctx, client: &Client, key: &str, value: String) {
    let op = invoke(
        ctx,
        key,
        Call::Put {
            value: value.clone(),
        },
    );
    // A write to a key a cut-off session caches waits up to that
    // session's lease (`CACHE-3`): wait for it, and then some.
    let patience = ctx.settings.lease + Duration::from_secs(4);
    let result = timeout(
        patience,
        client.put(key, value.into_bytes(), PutOptions::new()),
    )
    .await;
    let result = outcome(result, |_| None);
    ctx.trace.push(&ctx.name, What::Complete { op, result });
}

/// Reads `key`; returns whether the read succeeded.
pub async fn get(ctx: &Ctx, client: &Client, key: &str) -> bool {
    let op = invoke(ctx, key, Call::Get);
    let result = timeout(Duration::from_secs(4), client.get(key)).await;
    let result = outcome(result, |node| {
        node.and_then(|n| n.contents)
            .map(|c| String::from_utf8_lossy(&c).into_owned())
    });
    let ok = matches!(result, Outcome::Ok { .. });
    ctx.trace.push(&ctx.name, What::Complete { op, result });
    ok
}

async fn watcher(ctx: &mut Ctx) {
    while now_ms() < ctx.listen_until {
        let until = ctx.listen_until;
        let Some(live) = open_session(ctx, None, until).await else {
            break;
        };
        let subscribe = live.session.subscribe(WATCHED, SubscribeOptions::prefix());
        let Ok(Ok(mut events)) = timeout(Duration::from_secs(3), subscribe).await else {
            live.finish(ctx).await;
            continue;
        };
        ctx.trace.push(
            &ctx.name,
            What::Subscribed {
                prefix: WATCHED.into(),
            },
        );
        ctx.watching.store(true, Ordering::Release);
        let left = ctx.listen_until.saturating_sub(now_ms());
        let end = sleep(Duration::from_millis(left));
        tokio::pin!(end);
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(SubscriptionEvent::Changed { key, change, .. }) => {
                        let change = format!("{change:?}").to_lowercase();
                        ctx.trace.push(&ctx.name, What::Event { key, change });
                    }
                    Some(SubscriptionEvent::EventsLost) => ctx.trace.push(&ctx.name, What::EventsLost),
                    Some(_) => {}
                    None => {
                        ctx.trace.push(&ctx.name, What::Unsubscribed);
                        break;
                    }
                },
                () = &mut end => break,
            }
        }
        drop(events);
        live.finish(ctx).await;
    }
}

/// Reads every key the run wrote, once the network has healed: the reads
/// the durability check compares with the acknowledged writes.
pub async fn final_reads(mut ctx: Ctx) -> turmoil::Result {
    let left = ctx.listen_until.saturating_sub(now_ms());
    sleep(Duration::from_millis(left)).await;
    let mut keys: Vec<String> = ctx
        .trace
        .entries()
        .into_iter()
        .filter_map(|e| match e.what {
            What::Invoke { key, .. } => Some(key),
            _ => None,
        })
        .collect();
    keys.sort();
    keys.dedup();
    let Some(client) = connect(&ctx).await else {
        return Err("the final reader could not reach the master".into());
    };
    for key in keys {
        let mut tries = 0;
        while !get(&ctx, &client, &key).await {
            tries += 1;
            if tries == 10 {
                return Err(format!("the final read of {key} kept failing").into());
            }
            sleep(Duration::from_millis(ctx.rng.range(100, 500))).await;
        }
    }
    Ok(())
}
