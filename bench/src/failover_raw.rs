//! `failover --keepalive-all`: the sessions of a fail-over held over the
//! raw protocol, each connection renewing its sessions together in
//! `KeepAliveAll` requests (`KA-10`), as `sessions --keepalive-all` holds
//! them: the shape for a million sessions, which a million client-library
//! sessions would not fit beside the master on this machine's two cores.
//!
//! A connection that breaks comes back the way the client library's does:
//! at once, then after waits drawn under a ceiling of 50 ms doubling to
//! 1 s (`CS-2`); to the members of a cell in
//! turn, going where a `Redirect` names (`CELL-7`). On the new connection
//! every session is renewed at once in the epoch its `Welcome` announced;
//! a session is back (`Normal`, `FO-6`) when an answer carries its
//! `Failover` event, which the next request acknowledges at once (`FO-5`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use leasehold_protocol::backoff::retry_delay;
use leasehold_protocol::{
    keepalive_all_limit, ClientFrame, ErrorCode, EventKind, FrameCodec, Hello, KeepAlive,
    KeepAliveGrant, Remedy, Request, Response, ServerFrame, SessionToken, DEFAULT_MAX_FRAME,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;

use crate::failover_peer::Shape;
use crate::sessions::{
    ask_for_session, connect_from, created, destroy, nobody, split, until_created, Framing,
    CREATIONS_IN_FLIGHT,
};

/// Lease of every session: the client library's default.
const LEASE: Duration = Duration::from_secs(12);
/// How long a connection may stay broken before the run fails.
const PATIENCE: Duration = Duration::from_secs(120);

/// What the holding tasks count for the scenario.
#[derive(Default)]
struct Tally {
    created: AtomicU64,
    back: AtomicU64,
    expired: AtomicU64,
    /// Set just before each kill, which starts a round of its own: a
    /// fail-over before the first (a leader starved on a loaded machine
    /// while the run was set up) counts nobody back, and each kill counts
    /// every session back once. 0 until the first.
    round: AtomicU64,
    armed_at: std::sync::Mutex<Option<Instant>>,
    /// Connections made again in this round, and the last of them, in
    /// microseconds from its kill.
    reconnected: AtomicU64,
    last_reconnected_us: AtomicU64,
}

impl Tally {
    fn armed_at(&self) -> Option<Instant> {
        *self.armed_at.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sessions held over the raw protocol until [`RawHeld::close`].
pub struct RawHeld {
    sessions: usize,
    tally: Arc<Tally>,
    closing: watch::Sender<bool>,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl RawHeld {
    /// Opens `shape.sessions` sessions over `shape.connections`
    /// connections to the master at `addr` (or the cell whose members it
    /// lists), and returns once all exist.
    pub async fn open(addr: &str, shape: Shape) -> anyhow::Result<RawHeld> {
        let members = crate::system::members(addr);
        let tally = Arc::new(Tally::default());
        let (closing, _) = watch::channel(false);
        let (shares, addresses) = split(shape.sessions, shape.connections);
        let connections = shares.len();
        let mut tasks = Vec::new();
        for n in shares {
            let index = tasks.len();
            let holder = Holder {
                members: members.clone(),
                first_member: index % members.len().max(1),
                from: index % addresses,
                share: index as f64 / connections as f64,
                tally: tally.clone(),
                closing: closing.subscribe(),
                n,
            };
            tasks.push(tokio::spawn(holder.run()));
        }
        let bar = crate::progress::bar(shape.sessions as u64, "creating sessions");
        until_created(&tally.created, shape.sessions, &mut tasks, &bar).await?;
        bar.finish_and_clear();
        Ok(RawHeld {
            sessions: shape.sessions,
            tally,
            closing,
            tasks,
        })
    }

    /// From now on, a session's next `Failover` event counts it back,
    /// once, for the kill about to come: each call starts the count again.
    pub fn arm(&self) {
        *self
            .tally
            .armed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.tally.back.store(0, Ordering::SeqCst);
        self.tally.reconnected.store(0, Ordering::SeqCst);
        self.tally.last_reconnected_us.store(0, Ordering::SeqCst);
        self.tally.round.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until every session is back, and says when, from `started`.
    pub async fn all_back(&mut self, started: Instant) -> anyhow::Result<Duration> {
        let bar = crate::progress::bar(self.sessions as u64, "sessions back to normal");
        loop {
            let n = self.tally.back.load(Ordering::SeqCst);
            bar.set_position(n);
            if n as usize >= self.sessions {
                bar.finish_and_clear();
                return Ok(started.elapsed());
            }
            if let Some(t) = self.tasks.iter().position(|t| t.is_finished()) {
                self.tasks.remove(t).await??;
                bail!("a connection ended while its sessions came back");
            }
            if started.elapsed() > PATIENCE {
                bail!(
                    "{n} of {} sessions back to normal after {PATIENCE:?} ({} expired)",
                    self.sessions,
                    self.tally.expired.load(Ordering::SeqCst)
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// How long after the kill every connection was made again, once all
    /// were.
    pub fn connections_back(&self) -> Option<Duration> {
        let all = self.tally.reconnected.load(Ordering::SeqCst) as usize >= self.tasks.len();
        all.then(|| Duration::from_micros(self.tally.last_reconnected_us.load(Ordering::SeqCst)))
    }

    /// Ends the sessions and says how many the master had ended before.
    pub async fn close(self) -> anyhow::Result<u64> {
        let expired = self.tally.expired.load(Ordering::SeqCst);
        self.closing.send_replace(true);
        for task in self.tasks {
            task.await?.context("a connection failed")?;
        }
        Ok(expired)
    }
}

/// One connection's share of the sessions, and how it reaches the master.
struct Holder {
    members: Vec<String>,
    /// The member tried first, so connections spread over a list.
    first_member: usize,
    /// The loopback address connected from (`sessions::connect_from`).
    from: usize,
    /// Where in each half lease this connection renews.
    share: f64,
    tally: Arc<Tally>,
    closing: watch::Receiver<bool>,
    n: usize,
}

/// The sessions of one connection, across its reconnections.
struct Sessions {
    tokens: Vec<SessionToken>,
    alive: Vec<bool>,
    /// The last event each session has had in the current epoch, which
    /// its next KeepAlive acknowledges.
    acked: Vec<u64>,
    /// The round (`Tally::round`) each session was last counted back in.
    counted: Vec<u64>,
    epoch: u64,
    /// Creations asked for so far (by index).
    asked_for: usize,
}

/// How a connection ended.
enum Ended {
    /// The run is closing: the sessions are destroyed.
    Closing,
    /// The connection broke: it is made again.
    Broken,
    /// The master answered what the run cannot go on from.
    Failed(anyhow::Error),
}

fn failed(what: String) -> Ended {
    Ended::Failed(anyhow::Error::msg(what))
}

/// A failure to read or write the connection: it broke.
fn broken<E>(_: E) -> Ended {
    Ended::Broken
}

impl Holder {
    async fn run(mut self) -> anyhow::Result<()> {
        let mut sessions = Sessions {
            tokens: vec![nobody(); self.n],
            alive: vec![false; self.n],
            acked: vec![0; self.n],
            counted: vec![0; self.n],
            epoch: 0,
            asked_for: 0,
        };
        let mut framed = self.reconnect(&mut sessions).await?;
        loop {
            let Err(ended) = self.serve(&mut framed, &mut sessions).await;
            match ended {
                Ended::Closing => break,
                Ended::Broken => framed = self.reconnect(&mut sessions).await?,
                Ended::Failed(e) => return Err(e),
            }
        }
        let live: Vec<SessionToken> = (0..self.n)
            .filter(|&i| sessions.alive[i])
            .map(|i| sessions.tokens[i])
            .collect();
        destroy(framed, &live).await
    }

    /// A connection to the master, with the epoch its `Welcome` named
    /// adopted; tried at once, then with the client library's backoff.
    async fn reconnect(&self, sessions: &mut Sessions) -> anyhow::Result<Framing> {
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            for k in 0..self.members.len() {
                let member = &self.members[(self.first_member + k) % self.members.len()];
                if let Ok(Some((framed, epoch))) = self.handshake(member, 0).await {
                    if epoch != sessions.epoch {
                        // Events are numbered afresh in each epoch (`FO-6`).
                        sessions.acked.fill(0);
                        sessions.epoch = epoch;
                    }
                    if let Some(armed) = self.tally.armed_at() {
                        let after = armed.elapsed().as_micros() as u64;
                        self.tally
                            .last_reconnected_us
                            .fetch_max(after, Ordering::SeqCst);
                        self.tally.reconnected.fetch_add(1, Ordering::SeqCst);
                    }
                    return Ok(framed);
                }
            }
            if started.elapsed() > PATIENCE {
                bail!("no master served {:?} within {PATIENCE:?}", self.members);
            }
            attempt += 1;
            // Drawn as the library draws a session's (`CS-2`); the share
            // of the lease differs between connections.
            tokio::time::sleep(retry_delay(attempt, self.share.to_bits())).await;
        }
    }

    /// Hello to `member`, following one `Redirect`: the connection and
    /// the epoch, or `None` where no master answered.
    async fn handshake(
        &self,
        member: &str,
        redirects: u32,
    ) -> anyhow::Result<Option<(Framing, u64)>> {
        let stream = connect_from(member, self.from).await?;
        let mut framed: Framing = Framed::new(stream, FrameCodec::new(DEFAULT_MAX_FRAME));
        framed.send(ClientFrame::Hello(Hello::current())).await?;
        match framed.next().await {
            Some(Ok(ServerFrame::Welcome(w))) => Ok(Some((framed, w.epoch))),
            Some(Ok(ServerFrame::Redirect {
                master: Some(master),
            })) if redirects == 0 && master != member => Box::pin(self.handshake(&master, 1)).await,
            _ => Ok(None),
        }
    }

    /// Creates and renews the sessions on `framed` until the run closes
    /// or the connection breaks.
    async fn serve(
        &mut self,
        framed: &mut Framing,
        sessions: &mut Sessions,
    ) -> Result<std::convert::Infallible, Ended> {
        let n = self.n;
        // A creation whose answer was lost with a connection is asked for
        // again; the session it may have made is left to expire.
        let redo = sessions.asked_for.min(n);
        sessions.asked_for = (0..redo)
            .find(|&i| sessions.tokens[i] == nobody())
            .unwrap_or(redo);
        let mut creating = 0;
        while creating < CREATIONS_IN_FLIGHT && sessions.asked_for < n {
            if sessions.tokens[sessions.asked_for] == nobody() {
                ask_for_session(framed, sessions.asked_for, LEASE)
                    .await
                    .map_err(broken)?;
                creating += 1;
            }
            sessions.asked_for += 1;
        }
        let per_request = keepalive_all_limit(DEFAULT_MAX_FRAME);
        // Connections renew spread over each half lease, by their share.
        let every = LEASE / 2;
        let mut rounds = tokio::time::interval_at(
            tokio::time::Instant::now() + every.mul_f64(self.share),
            every,
        );
        rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut asked: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut next_id = n as u64;
        // Every live session at once on a new connection, as the client
        // library renews them after a reconnection.
        let mut ask: Vec<usize> = (0..n).filter(|&i| sessions.alive[i]).collect();
        loop {
            for chunk in ask.chunks(per_request) {
                let all = chunk
                    .iter()
                    .map(|&i| KeepAlive {
                        session: sessions.tokens[i],
                        epoch: sessions.epoch,
                        acked_seq: sessions.acked[i],
                        hold: false,
                    })
                    .collect();
                let body = Request::KeepAliveAll(all);
                framed
                    .feed(ClientFrame::Request { id: next_id, body })
                    .await
                    .map_err(broken)?;
                asked.insert(next_id, chunk.to_vec());
                next_id += 1;
            }
            framed.flush().await.map_err(broken)?;
            ask.clear();
            let frame = tokio::select! {
                _ = self.closing.changed() => return Err(Ended::Closing),
                _ = rounds.tick() => {
                    // A session whose previous renewal is unanswered is
                    // not asked for twice.
                    let mut waiting = vec![false; n];
                    for &i in asked.values().flatten() {
                        waiting[i] = true;
                    }
                    ask = (0..n).filter(|&i| sessions.alive[i] && !waiting[i]).collect();
                    continue;
                }
                frame = framed.next() => frame,
            };
            let (id, body) = match frame {
                Some(Ok(ServerFrame::Reply { id, body })) => (id, body),
                // A master that stops says so, then closes (`CELL-7`).
                Some(Ok(ServerFrame::Close(_)) | Err(_)) | None => return Err(Ended::Broken),
                Some(Ok(other)) => return Err(failed(format!("unexpected frame {other:?}"))),
            };
            if let Some(token) = sessions.tokens.get_mut(id as usize) {
                if let Err(e) = &body {
                    // A master stopping refuses what it has not done, then
                    // closes (`CELL-7`): asked again of the next master.
                    if matches!(
                        e.code.remedy(),
                        Remedy::Retry | Remedy::RetryAfter(_) | Remedy::OutcomeUnknown
                    ) {
                        return Err(Ended::Broken);
                    }
                }
                *token = created(body).map_err(Ended::Failed)?;
                sessions.alive[id as usize] = true;
                self.tally.created.fetch_add(1, Ordering::Relaxed);
                while sessions.asked_for < n && sessions.tokens[sessions.asked_for] != nobody() {
                    sessions.asked_for += 1;
                }
                if sessions.asked_for < n {
                    ask_for_session(framed, sessions.asked_for, LEASE)
                        .await
                        .map_err(broken)?;
                    sessions.asked_for += 1;
                }
                continue;
            }
            let Some(renewed) = asked.remove(&id) else {
                return Err(failed(format!("a reply to request {id}, never sent")));
            };
            let answers = match body {
                Ok(Response::KeepAliveAll { answers }) if answers.len() == renewed.len() => answers,
                Ok(other) => return Err(failed(format!("unexpected reply {other:?}"))),
                // Refused whole (a master that is stopping): the next
                // round asks again.
                Err(_) => continue,
            };
            for (i, answer) in renewed.into_iter().zip(answers) {
                match answer.map_err(|e| e.code) {
                    Ok(grant) => {
                        if self.heard(sessions, i, grant) {
                            ask.push(i);
                        }
                    }
                    Err(ErrorCode::WrongEpoch { current }) => {
                        if current != sessions.epoch {
                            sessions.acked.fill(0);
                            sessions.epoch = current;
                        }
                        ask.push(i);
                    }
                    Err(ErrorCode::SessionExpired | ErrorCode::UnknownSession) => {
                        self.tally.expired.fetch_add(1, Ordering::Relaxed);
                        sessions.alive[i] = false;
                    }
                    Err(code) => return Err(failed(format!("KeepAlive failed: {code:?}"))),
                }
            }
        }
    }

    /// Takes session `i`'s grant: counts it back on its `Failover` event
    /// and says whether it has events to acknowledge at once.
    fn heard(&self, sessions: &mut Sessions, i: usize, grant: KeepAliveGrant) -> bool {
        if grant.epoch != sessions.epoch {
            // An answer from an earlier epoch, read late: ignored (`FO-1`).
            return false;
        }
        let Some(last) = grant.events.last() else {
            return false;
        };
        let failed_over = grant
            .events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Failover { .. }));
        let round = self.tally.round.load(Ordering::SeqCst);
        if failed_over && round > 0 && sessions.counted[i] != round {
            sessions.counted[i] = round;
            self.tally.back.fetch_add(1, Ordering::SeqCst);
        }
        sessions.acked[i] = sessions.acked[i].max(last.seq);
        true
    }
}
