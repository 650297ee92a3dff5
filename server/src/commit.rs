//! Group commit: applied commands go to a writer, which appends every
//! record waiting, fsyncs once, and reports how far the log is durable.
//! Replies wait in an outbox until everything applied before them is
//! durable, so no client ever sees (or is told of) a change a crash could
//! take back (`STORE-1`).
//!
//! The writer fsyncs only when a reply waits for it. A record nobody waits
//! for (a request joining a lock's line, a lease running out) rides along
//! with the next fsync: until then nothing anyone has seen depends on it,
//! and the log loses only a suffix in a crash, so losing it takes back
//! nothing anyone was told. It costs the hand-off after it no fsync of its
//! own to wait behind.
//!
//! The writer is one loop, run where its store wants it: a store that
//! blocks on I/O gets a thread of its own (with a runtime of its own for
//! the loop's timers), so fsyncs overlap with serving; one that never
//! blocks gets a task on the master's runtime, so that in a simulation
//! appends, fsyncs and crashes happen at instants of virtual time, in an
//! order the seed fixes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_protocol::{Error, ErrorCode, Response, Sequencer};
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::config::{LOG_TO_SNAPSHOT, OUTBOX_KEPT, REPLICATE_IDLE, RETRY_SPACE, SEAL_AFTER};
use crate::disk::{is_disk_full, StoreError};
use crate::reply::ReplyTx;
use crate::store::{Record, Snapshot, Store, StoreSizes};

/// When the master snapshots: after `every` records, or once the log
/// outgrows both `min_log_bytes` and four times the snapshot (`STORE-2`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Compaction {
    pub(crate) every: u64,
    pub(crate) min_log_bytes: u64,
}

impl Compaction {
    /// Whether a store `since` records past its snapshot, of `sizes`, is
    /// due a snapshot, `freed` bytes of contents having been deleted or
    /// overwritten since that snapshot (`STORE-2`, and see
    /// [`Committer::wants_snapshot`]).
    pub(crate) fn due(&self, since: u64, sizes: StoreSizes, freed: u64) -> bool {
        let StoreSizes {
            log_bytes: log,
            snapshot_bytes: snapshot,
        } = sizes;
        let min = self.min_log_bytes;
        since >= self.every.max(1) || log >= min.max(LOG_TO_SNAPSHOT * snapshot) || {
            let live = (snapshot + log).saturating_sub(freed);
            freed >= min.max(LOG_TO_SNAPSHOT * live)
        }
    }
}

/// Where a store's log stands when a committer takes it over: how many
/// records it holds past the snapshot, and what the namespace's count of
/// freed bytes was when that snapshot was taken.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Logged {
    pub(crate) since_snapshot: u64,
    pub(crate) freed_at_snapshot: u64,
}

/// What the writer last reported of the store's sizes, how many
/// compactions it has done, and whether its disk is full.
#[derive(Debug, Default)]
struct Sizes {
    log_bytes: AtomicU64,
    snapshot_bytes: AtomicU64,
    compactions: AtomicU64,
    disk_full: AtomicBool,
}

impl Sizes {
    fn publish(&self, sizes: StoreSizes) {
        self.log_bytes.store(sizes.log_bytes, Ordering::Release);
        self.snapshot_bytes
            .store(sizes.snapshot_bytes, Ordering::Release);
    }
}

/// Work for the writer, in log order.
enum Job {
    Record(Record),
    /// A reply waits for every record sent before this.
    Sync,
    /// Everything before the snapshot's position is in it.
    Compact(Box<Snapshot>),
}

/// How far the log is durable, or why it never will be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Durable {
    /// Records up to (not including) this count are on disk.
    Upto(u64),
    /// The store failed: nothing more is acknowledged.
    Failed(String),
}

/// A reply waiting for the log.
#[derive(Debug)]
struct Pending {
    /// Records appended when the reply was made: it waits for all of them.
    needs: u64,
    reply: ReplyTx,
    result: Result<Response, Error>,
    /// The grant the reply carries, given back if the reply cannot be
    /// delivered (`LOCK-9`).
    undelivered: Option<Sequencer>,
}

/// The master's side of group commit.
pub(crate) struct Committer {
    /// To the writer, in log order. A closed writer has reported its
    /// failure through `progress`.
    jobs: mpsc::UnboundedSender<Job>,
    writer: Writer,
    /// Log position of the next record.
    pub(crate) next_seq: u64,
    since_snapshot: u64,
    /// What the namespace had counted freed at the last snapshot.
    freed_at_snapshot: u64,
    compaction: Compaction,
    sizes: Arc<Sizes>,
    /// Compactions asked of the writer so far.
    compactions: u64,
    appended: u64,
    /// Records the writer has been asked to make durable.
    requested: u64,
    durable: u64,
    pub(crate) progress: watch::Receiver<Durable>,
    outbox: VecDeque<Pending>,
}

/// Where the writer runs.
enum Writer {
    /// A thread, which fsyncs one batch while the master goes on.
    Thread {
        /// Joined on drop, so a stopped master has finished with its store.
        handle: Option<std::thread::JoinHandle<()>>,
    },
    /// A task on the master's runtime, for a store that never blocks:
    /// spawned with the first job, so that a store can be recovered before
    /// any runtime runs.
    Task {
        unstarted: Option<Box<(Writing, mpsc::UnboundedReceiver<Job>)>>,
        /// Waited for when the master stops (`Committer::finish`).
        running: Option<tokio::task::JoinHandle<()>>,
    },
    /// A task on the master's runtime that hands batches to a consensus
    /// log (a cell's master).
    Replicated {
        unstarted: Option<Box<(Replicating, mpsc::UnboundedReceiver<Job>)>>,
        running: Option<tokio::task::JoinHandle<()>>,
    },
}

/// The future [`Replicate::replicate`] returns.
pub(crate) type ReplicateFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ReplicateError>> + Send + 'a>>;

/// Why a cell's log took no more of a master's records. Whichever it is,
/// the master stops: it acknowledges nothing more, answers every reply
/// still waiting with `OutcomeUnknown` (`ERR-18`), and its member serves
/// clients again only once it leads under a new epoch. The variants say
/// what happened, for the log line and for whoever reads it.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ReplicateError {
    /// A newer master's epoch holds the log: what this master proposed
    /// since is applied by no member (`CELL-3`).
    #[error("epoch {epoch} is no longer the cell's")]
    Superseded { epoch: u64 },
    /// No quorum made the records durable within the master's patience:
    /// they may yet be committed, by this leader or kept by the next.
    #[error("no quorum took the commands within {waited:?}")]
    NoQuorum { waited: Duration },
    /// The consensus engine refused them (this member no longer leads) or
    /// has stopped.
    #[error("the cell's log refused the commands: {0}")]
    Refused(String),
}

/// Where a cell's master sends its records: a log that makes them durable
/// on a quorum of members, in order. The single master's [`Store`] has
/// the same place in the durability path; this is its replicated
/// counterpart.
///
/// # To ensure correctness
///
/// The master answers a request only once `replicate` has returned `Ok`
/// for every record before the answer (`STORE-1`, `CELL-3`), so an
/// implementation must keep all of these:
///
/// - **Durable on a quorum before `Ok`.** When `replicate` returns `Ok`,
///   every record it was given is in the log on a quorum of members,
///   committed, and will be applied by every member that applies the log,
///   whatever fails afterwards.
/// - **In order, after what came before.** The records are applied in the
///   order given, after every record of every earlier call, with nothing
///   between them but what other masters' epochs may have put there and
///   the state machine refuses (`CELL-3`).
/// - **All or an error.** `Ok` covers every record of the call; if only
///   some were committed, or none, or it cannot tell, the call fails. A
///   failed call's records may still be committed later: the master says
///   their outcome is unknown, never that they failed.
/// - **Under this master's epoch only.** Records are applied only while the
///   log's latest epoch is the one this master was elected under; a member
///   that applies a record of an older epoch after a newer one would undo
///   a newer master's answers. Return [`ReplicateError::Superseded`] when
///   the log says the epoch is gone.
/// - **Bounded.** Each proposal of a call (a call of many records may take
///   several) is given up after the master's patience, so a master cut off
///   from its quorum stops by itself ([`ReplicateError::NoQuorum`]) rather
///   than hold requests for ever.
/// - **Nothing after an error.** The master calls `replicate` no more after
///   an `Err`; an implementation need not accept more.
pub(crate) trait Replicate: Send + 'static {
    /// Makes `records` durable after everything replicated before them,
    /// under the contract above.
    fn replicate(&mut self, records: Vec<Record>) -> ReplicateFuture<'_>;
}

/// The replicated writer: each batch a reply waits for goes to the log
/// as one proposal, and the next waits until it is durable on a quorum,
/// which is group commit with the quorum as the disk.
struct Replicating {
    log: Box<dyn Replicate>,
    progress: watch::Sender<Durable>,
    appended: u64,
    batch: Vec<Record>,
}

impl Replicating {
    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        loop {
            let next = if self.batch.is_empty() {
                jobs.recv().await
            } else {
                match tokio::time::timeout(REPLICATE_IDLE, jobs.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        if !self.flush().await {
                            return;
                        }
                        continue;
                    }
                }
            };
            let Some(first) = next else { break };
            let mut wanted = false;
            let mut job = first;
            loop {
                match job {
                    Job::Record(Record::Command { now, command }) => {
                        self.appended += 1;
                        self.batch.push(Record::Command { now, command });
                    }
                    // Epochs are the log's to assign; snapshots its own.
                    Job::Record(_) | Job::Compact(_) => {}
                    Job::Sync => wanted = true,
                }
                match jobs.try_recv() {
                    Ok(next) => job = next,
                    Err(_) => break,
                }
            }
            if wanted && !self.flush().await {
                return;
            }
        }
        // The master is gone: what it applied goes to the log too, as a
        // crash would not take it back either.
        self.flush().await;
    }

    /// Replicates the batch; says whether the writer may go on.
    async fn flush(&mut self) -> bool {
        let batch = std::mem::take(&mut self.batch);
        if !batch.is_empty() {
            if let Err(e) = self.log.replicate(batch).await {
                warn!(error = %e, "the cell's log took no more: this master stops");
                let _ = self.progress.send(Durable::Failed(e.to_string()));
                return false;
            }
        }
        let _ = self.progress.send(Durable::Upto(self.appended));
        true
    }
}

impl Drop for Committer {
    /// Lets the writer finish what it was given and, if it is a thread,
    /// waits for it, so the data directory is free (and its lock released)
    /// once the master is gone. A task finishes on its own. Replies still
    /// waiting for the log say that their outcome is unknown (`ERR-18`).
    fn drop(&mut self) {
        self.abandon(
            "the master stopped before the change was known durable: it may or may not have \
             taken effect",
        );
        if let Writer::Thread { handle } = &mut self.writer {
            let (closed, _) = mpsc::unbounded_channel();
            drop(std::mem::replace(&mut self.jobs, closed));
            if let Some(handle) = handle.take() {
                let _ = handle.join();
            }
        }
    }
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("next_seq", &self.next_seq)
            .field("appended", &self.appended)
            .field("durable", &self.durable)
            .field("outbox", &self.outbox.len())
            .finish()
    }
}

/// The writer: appends, fsyncs, seals and compacts, in log order, and
/// rides out a full disk on its reserve (`STORE-5`).
struct Writing {
    store: Box<dyn Store>,
    progress: watch::Sender<Durable>,
    sizes: Arc<Sizes>,
    appended: u64,
    synced: u64,
    /// The last batch's end marker is written but not yet on disk: it
    /// rides with the next batch, or `seal` makes it durable once the
    /// master has been idle a moment.
    unsealed: bool,
    /// Records appended since the last fsync, to append again if the disk
    /// fills half way through them.
    batch: Vec<Record>,
    /// Where each fsync's time and batch are counted (`OPS-1`).
    metrics: crate::metrics::Metrics,
}

impl Writing {
    /// Ends when the master drops its sender, or when the store fails.
    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        loop {
            let wait = if self.sizes.disk_full.load(Ordering::Acquire) {
                Some(if self.unsealed {
                    SEAL_AFTER
                } else {
                    RETRY_SPACE
                })
            } else if self.unsealed {
                Some(SEAL_AFTER)
            } else {
                None
            };
            let next = match wait {
                Some(wait) => match tokio::time::timeout(wait, jobs.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        if let Err(e) = self.idle() {
                            return self.fail(e);
                        }
                        continue;
                    }
                },
                None => jobs.recv().await,
            };
            let Some(first) = next else { break };
            let batch = self.take(first, &mut jobs);
            let wanted = matches!(batch, Ok(true));
            let mut outcome = batch.map(|_| ());
            if wanted && self.appended > self.synced {
                // Jobs sent meanwhile wait for the next batch, as they
                // would behind a real fsync.
                let latency = self.store.sync_latency();
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                outcome = self.sync();
            }
            self.sizes.publish(self.store.sizes());
            if let Err(e) = outcome {
                return self.fail(e);
            }
            if wanted {
                let _ = self.progress.send(Durable::Upto(self.synced));
            }
        }
        // The master is gone: what it appended is made durable too.
        if self.appended > self.synced || self.unsealed {
            if let Err(e) = self.sync().and_then(|()| self.store.seal()) {
                self.fail(e);
            }
        }
    }

    /// Carries out `first` and every job already waiting behind it, in
    /// log order; says whether a reply waits for them to be durable.
    fn take(
        &mut self,
        first: Job,
        jobs: &mut mpsc::UnboundedReceiver<Job>,
    ) -> Result<bool, StoreError> {
        let mut wanted = false;
        let mut job = first;
        loop {
            match job {
                Job::Record(record) => self.append(record)?,
                Job::Sync => wanted = true,
                Job::Compact(snapshot) => self.compact(&snapshot)?,
            }
            match jobs.try_recv() {
                Ok(next) => job = next,
                Err(_) => return Ok(wanted),
            }
        }
    }

    fn fail(&self, e: StoreError) {
        error!(error = %e, "the store failed: no further change is acknowledged");
        let _ = self.progress.send(Durable::Failed(e.to_string()));
    }

    /// Nothing to write for a moment: seal the last batch, and on a full
    /// disk see whether space has come back.
    fn idle(&mut self) -> Result<(), StoreError> {
        if self.unsealed {
            match self.store.seal() {
                Err(e) if is_disk_full(&e) => self.make_room(e)?,
                other => other?,
            }
            self.unsealed = false;
        }
        if self.sizes.disk_full.load(Ordering::Acquire) && self.store.restore_reserve() {
            self.sizes.disk_full.store(false, Ordering::Release);
            info!("the data directory's disk has room again: writes are accepted");
        }
        Ok(())
    }

    fn append(&mut self, record: Record) -> Result<(), StoreError> {
        self.appended += 1;
        let appended = self.store.append(&record);
        self.batch.push(record);
        match appended {
            Err(e) if is_disk_full(&e) => self.make_room(e),
            other => other,
        }
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        let began = std::time::Instant::now();
        match self.store.sync() {
            Err(e) if is_disk_full(&e) => {
                self.make_room(e)?;
                self.store.sync()?;
            }
            other => other?,
        }
        let records = usize::try_from(self.appended - self.synced).unwrap_or(usize::MAX);
        self.metrics.synced(records, began.elapsed());
        self.synced = self.appended;
        self.unsealed = true;
        self.batch.clear();
        Ok(())
    }

    /// The disk is full: frees the reserve, has the master refuse writes
    /// until space returns, and appends the unsynced batch again from its
    /// start. With no reserve left to free, the store has failed.
    fn make_room(&mut self, full: StoreError) -> Result<(), StoreError> {
        if !self.store.release_reserve() {
            return Err(full);
        }
        self.sizes.disk_full.store(true, Ordering::Release);
        warn!(
            error = %full,
            "the data directory's disk is full: writes are refused until space returns; \
             reads, KeepAlives and expiries go on, on the reserve"
        );
        self.store.rewind()?;
        for record in &self.batch {
            self.store.append(record)?;
        }
        Ok(())
    }

    fn compact(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.sync()?;
        // The new log starts empty: nothing to seal.
        self.unsealed = false;
        let done = self.store.compact(snapshot);
        self.sizes.compactions.fetch_add(1, Ordering::AcqRel);
        if done.is_ok() {
            self.metrics.snapshot_written();
        }
        match done {
            // A snapshot is an optimisation: without room for one, the log
            // goes on as it is.
            Err(e) if is_disk_full(&e) => {
                warn!(error = %e, "no room for a snapshot: the log goes on uncompacted");
                self.sizes.disk_full.store(true, Ordering::Release);
                Ok(())
            }
            other => other,
        }
    }
}

impl Committer {
    /// Starts writing to `store`, whose next record is at `next_seq`: from
    /// a writer thread if it blocks, else from a task on the master's
    /// runtime.
    pub(crate) fn start(
        store: Box<dyn Store>,
        next_seq: u64,
        compaction: Compaction,
        logged: Logged,
        metrics: crate::metrics::Metrics,
    ) -> Committer {
        let (progress_tx, progress) = watch::channel(Durable::Upto(0));
        let sizes = Arc::new(Sizes::default());
        sizes.publish(store.sizes());
        let blocking = store.blocking();
        let writing = Writing {
            store,
            progress: progress_tx,
            sizes: sizes.clone(),
            appended: 0,
            synced: 0,
            unsealed: false,
            batch: Vec::new(),
            metrics,
        };
        let (jobs, rx) = mpsc::unbounded_channel::<Job>();
        let writer = if blocking {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime for the commit thread");
            let handle = std::thread::Builder::new()
                .name("leasehold-commit".into())
                .spawn(move || runtime.block_on(writing.run(rx)))
                .expect("spawn the commit thread");
            Writer::Thread {
                handle: Some(handle),
            }
        } else {
            Writer::Task {
                unstarted: Some(Box::new((writing, rx))),
                running: None,
            }
        };
        Committer {
            jobs,
            writer,
            next_seq,
            since_snapshot: logged.since_snapshot,
            freed_at_snapshot: logged.freed_at_snapshot,
            compaction: Compaction {
                every: compaction.every.max(1),
                ..compaction
            },
            sizes,
            compactions: 0,
            appended: 0,
            requested: 0,
            durable: 0,
            progress,
            outbox: VecDeque::new(),
        }
    }

    /// A cell master's committer: records go to `log`, whose next record
    /// is at `next_seq`. The cell snapshots on its own, so this one never
    /// asks for a snapshot.
    pub(crate) fn replicated(log: Box<dyn Replicate>, next_seq: u64) -> Committer {
        let (progress_tx, progress) = watch::channel(Durable::Upto(0));
        let (jobs, rx) = mpsc::unbounded_channel::<Job>();
        let replicating = Replicating {
            log,
            progress: progress_tx,
            appended: 0,
            batch: Vec::new(),
        };
        Committer {
            jobs,
            writer: Writer::Replicated {
                unstarted: Some(Box::new((replicating, rx))),
                running: None,
            },
            next_seq,
            since_snapshot: 0,
            freed_at_snapshot: 0,
            compaction: Compaction {
                every: u64::MAX,
                min_log_bytes: u64::MAX,
            },
            sizes: Arc::new(Sizes::default()),
            compactions: 0,
            appended: 0,
            requested: 0,
            durable: 0,
            progress,
            outbox: VecDeque::new(),
        }
    }

    fn write(&mut self, job: Job) {
        match &mut self.writer {
            Writer::Task { unstarted, running } => {
                if let Some(start) = unstarted.take() {
                    let (writing, rx) = *start;
                    *running = Some(tokio::spawn(writing.run(rx)));
                }
            }
            Writer::Replicated { unstarted, running } => {
                if let Some(start) = unstarted.take() {
                    let (replicating, rx) = *start;
                    *running = Some(tokio::spawn(replicating.run(rx)));
                }
            }
            Writer::Thread { .. } => {}
        }
        let _ = self.jobs.send(job);
    }

    /// Lets a writer task finish what it was given and waits for it: a
    /// master started next on the same store must find everything this one
    /// appended, and nothing of it written after it has recovered.
    pub(crate) async fn finish(&mut self) {
        if let Writer::Task { running, .. } | Writer::Replicated { running, .. } = &mut self.writer
        {
            let (closed, _) = mpsc::unbounded_channel();
            drop(std::mem::replace(&mut self.jobs, closed));
            if let Some(running) = running.take() {
                let _ = running.await;
            }
        }
    }

    /// Queues a record for the log.
    pub(crate) fn append(&mut self, record: Record) {
        self.appended += 1;
        self.write(Job::Record(record));
        self.next_seq += 1;
        self.since_snapshot += 1;
    }

    /// Whether the disk is full, so that the master refuses writes until
    /// it has room again (`STORE-5`).
    pub(crate) fn disk_full(&self) -> bool {
        self.sizes.disk_full.load(Ordering::Acquire)
    }

    /// What the store holds, log and snapshot, as the writer last said;
    /// `None` for a cell's log, whose members keep their own.
    pub(crate) fn stored_bytes(&self) -> Option<u64> {
        if matches!(self.writer, Writer::Replicated { .. }) {
            return None;
        }
        let log = self.sizes.log_bytes.load(Ordering::Acquire);
        Some(log + self.sizes.snapshot_bytes.load(Ordering::Acquire))
    }

    /// Whether to snapshot now: after `every` records, once the log
    /// outgrows both its minimum and four times the snapshot, or once
    /// contents deleted or overwritten since the last snapshot (`freed`,
    /// as the namespace counts them) outgrow both that minimum and four
    /// times what the snapshot and log hold besides, so the disk holds a
    /// bounded multiple of the live state however large the records and
    /// however much was deleted, and a mass delete snapshots what is left
    /// about once, not at every halving (`STORE-2`). Never while a
    /// compaction is on its way.
    pub(crate) fn wants_snapshot(&self, freed: u64) -> bool {
        if self.sizes.compactions.load(Ordering::Acquire) < self.compactions || self.disk_full() {
            return false;
        }
        let sizes = StoreSizes {
            log_bytes: self.sizes.log_bytes.load(Ordering::Acquire),
            snapshot_bytes: self.sizes.snapshot_bytes.load(Ordering::Acquire),
        };
        let freed = freed.saturating_sub(self.freed_at_snapshot);
        self.compaction.due(self.since_snapshot, sizes, freed)
    }

    /// Has the writer replace the log so far with `snapshot`, taken of the
    /// state as of `next_seq`, when the namespace had counted `freed`.
    pub(crate) fn compact(&mut self, snapshot: Snapshot, freed: u64) {
        self.write(Job::Compact(Box::new(snapshot)));
        self.since_snapshot = 0;
        self.freed_at_snapshot = freed;
        self.compactions += 1;
    }

    /// Sends `result` now if everything applied so far is durable, else
    /// once it is. Replies leave in the order they were made.
    pub(crate) fn reply(
        &mut self,
        reply: ReplyTx,
        result: Result<Response, Error>,
        undelivered: Option<Sequencer>,
    ) -> Option<Sequencer> {
        if self.durable >= self.appended && self.outbox.is_empty() {
            return match reply.send(result) {
                Ok(()) => None,
                Err(_) => undelivered,
            };
        }
        self.outbox.push_back(Pending {
            needs: self.appended,
            reply,
            result,
            undelivered,
        });
        if self.appended > self.requested {
            self.requested = self.appended;
            self.write(Job::Sync);
        }
        None
    }

    /// Tells every reply still waiting for the log that its request's
    /// outcome is unknown: the change was applied, and may yet be durable.
    fn abandon(&mut self, why: &str) {
        for pending in self.outbox.drain(..) {
            let _ = pending
                .reply
                .send(Err(Error::new(ErrorCode::OutcomeUnknown, why)));
        }
    }

    /// Sends the replies the log now covers; returns the grants of the
    /// ones nobody was there to receive.
    pub(crate) fn advance(&mut self) -> Result<Vec<Sequencer>, String> {
        let durable = self.progress.borrow_and_update().clone();
        let upto = match durable {
            Durable::Upto(n) => n,
            Durable::Failed(reason) => {
                // What failed may have been written all the same, or kept
                // by the cell's log for the next master (`ERR-18`).
                self.abandon(&format!(
                    "the master's log failed before the change was known durable ({reason}): \
                     it may or may not have taken effect"
                ));
                return Err(reason);
            }
        };
        self.durable = upto;
        let mut undelivered = Vec::new();
        while self.outbox.front().is_some_and(|p| p.needs <= upto) {
            let pending = self.outbox.pop_front().expect("checked");
            if pending.reply.send(pending.result).is_err() {
                undelivered.extend(pending.undelivered);
            }
        }
        // A burst (a hundred thousand sessions created at once) grows the
        // outbox to megabytes it would otherwise keep for good.
        if self.outbox.is_empty() && self.outbox.capacity() > OUTBOX_KEPT {
            self.outbox.shrink_to(OUTBOX_KEPT);
        }
        Ok(undelivered)
    }
}

#[cfg(test)]
mod tests {
    use crate::state::command;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    /// A store that only notes what was asked of it.
    const NEVER: Compaction = Compaction {
        every: u64::MAX,
        min_log_bytes: u64::MAX,
    };

    #[derive(Clone, Default)]
    struct Noting(Arc<Mutex<Vec<&'static str>>>, Option<Duration>);

    impl Noting {
        /// A store that never blocks, whose syncs take `latency`.
        fn slow(latency: Duration) -> Noting {
            Noting(Arc::default(), Some(latency))
        }

        fn calls(&self) -> Vec<&'static str> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Store for Noting {
        fn recover(&mut self) -> Result<crate::store::Recovered, crate::disk::StoreError> {
            Ok(crate::store::Recovered {
                snapshot: None,
                records: Vec::new(),
                next_seq: 0,
                carried_forward: false,
                snapshot_written: None,
            })
        }
        fn location(&self) -> String {
            "noting".into()
        }
        fn append(&mut self, _: &Record) -> Result<(), crate::disk::StoreError> {
            self.0.lock().unwrap().push("append");
            Ok(())
        }
        fn sync(&mut self) -> Result<(), crate::disk::StoreError> {
            self.0.lock().unwrap().push("sync");
            Ok(())
        }
        fn compact(&mut self, _: &Snapshot) -> Result<(), crate::disk::StoreError> {
            self.0.lock().unwrap().push("compact");
            Ok(())
        }
        fn blocking(&self) -> bool {
            self.1.is_none()
        }
        fn sync_latency(&mut self) -> Duration {
            self.1.unwrap_or_default()
        }
    }

    async fn until_durable(commit: &mut Committer, upto: u64) {
        let wait = commit
            .progress
            .wait_for(|d| matches!(d, Durable::Upto(n) if *n >= upto));
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .expect("durable in time")
            .expect("writer alive");
    }

    // STORE-3: once the master is idle, the last acknowledged batch's end
    // marker reaches the disk, so damage to that batch is refused rather
    // than taken for a torn write.
    #[tokio::test]
    async fn an_idle_writer_makes_the_last_batch_end_durable() {
        let dir = std::env::temp_dir().join(format!("leasehold-seal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = crate::file_store::FileStore::open(&dir).unwrap();
        let mut commit = Committer::start(
            Box::new(store),
            0,
            NEVER,
            Logged::default(),
            crate::metrics::Metrics::new(),
        );
        commit.append(Record::Epoch(7));
        let (reply, _replies) = crate::reply::channel(1);
        commit.reply(reply, Ok(Response::Destroyed), None);
        until_durable(&mut commit, 1).await;
        let log = dir.join("log");
        let acknowledged = std::fs::metadata(&log).unwrap().len();
        // The marker follows within moments, with no further batch.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(&log).unwrap().len() == acknowledged {
            assert!(tokio::time::Instant::now() < deadline, "never sealed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A copy whose acknowledged record is damaged is refused.
        let copy = dir.with_extension("copy");
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::copy(dir.join("FORMAT"), copy.join("FORMAT")).unwrap();
        let mut bytes = std::fs::read(&log).unwrap();
        bytes[acknowledged as usize - 1] ^= 0xff;
        std::fs::write(copy.join("log"), bytes).unwrap();
        let refused = crate::file_store::FileStore::open(&copy).unwrap_err();
        assert!(refused.to_string().contains("damaged"), "{refused}");
        drop(commit);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&copy);
    }

    /// A cell's log that takes nothing: it never answers, or it fails.
    struct Stuck {
        fails: bool,
    }

    impl Replicate for Stuck {
        fn replicate(&mut self, _: Vec<Record>) -> ReplicateFuture<'_> {
            let fails = self.fails;
            Box::pin(async move {
                if fails {
                    Err(ReplicateError::NoQuorum {
                        waited: Duration::from_secs(1),
                    })
                } else {
                    std::future::pending().await
                }
            })
        }
    }

    fn code_of(replies: &mut mpsc::UnboundedReceiver<crate::reply::Reply>) -> ErrorCode {
        match replies.try_recv().expect("a reply").into_body() {
            Err(e) => e.code,
            Ok(r) => panic!("{r:?}"),
        }
    }

    // ERR-18: the master applied the change; whether the log keeps it is
    // not known when it stops, so the reply says neither yes nor no.
    #[tokio::test]
    async fn a_reply_still_waiting_for_the_log_when_the_master_stops_has_an_unknown_outcome() {
        let mut commit = Committer::replicated(Box::new(Stuck { fails: false }), 0);
        commit.append(Record::Epoch(7));
        let (reply, mut replies) = crate::reply::channel(1);
        assert!(commit.reply(reply, Ok(Response::Destroyed), None).is_none());
        drop(commit);
        assert_eq!(code_of(&mut replies), ErrorCode::OutcomeUnknown);
    }

    // ERR-18: a log that failed may still have kept the change (a cell's
    // next master may commit it).
    #[tokio::test]
    async fn a_reply_waiting_when_the_log_fails_has_an_unknown_outcome() {
        let mut commit = Committer::replicated(Box::new(Stuck { fails: true }), 0);
        commit.append(Record::Command {
            now: crate::time::Millis::ZERO,
            command: crate::state::Command::CancelWait(command::CancelWait {
                key: "k".into(),
                ticket: 1,
            }),
        });
        let (reply, mut replies) = crate::reply::channel(1);
        assert!(commit.reply(reply, Ok(Response::Destroyed), None).is_none());
        let failed = commit
            .progress
            .wait_for(|d| matches!(d, Durable::Failed(_)));
        tokio::time::timeout(Duration::from_secs(5), failed)
            .await
            .expect("failed in time")
            .expect("writer alive");
        assert!(commit.advance().is_err());
        assert_eq!(code_of(&mut replies), ErrorCode::OutcomeUnknown);
    }

    // STORE-1
    #[tokio::test]
    async fn a_record_no_reply_waits_for_is_not_fsynced_on_its_own() {
        let store = Noting::default();
        let mut commit = Committer::start(
            Box::new(store.clone()),
            0,
            NEVER,
            Logged::default(),
            crate::metrics::Metrics::new(),
        );
        commit.append(Record::Epoch(7));
        let appended = async {
            while store.calls().is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), appended)
            .await
            .expect("appended in time");
        // Time for the fsync this test says must not come.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(store.calls(), ["append"]);
    }

    // STORE-1
    #[tokio::test]
    async fn a_reply_waits_for_an_fsync_of_every_record_before_it() {
        let store = Noting::default();
        let mut commit = Committer::start(
            Box::new(store.clone()),
            0,
            NEVER,
            Logged::default(),
            crate::metrics::Metrics::new(),
        );
        commit.append(Record::Epoch(7));
        commit.append(Record::Epoch(8));
        let (reply, mut replies) = crate::reply::channel(1);
        assert!(commit.reply(reply, Ok(Response::Destroyed), None).is_none());
        assert!(replies.try_recv().is_err(), "not before the fsync");
        until_durable(&mut commit, 2).await;
        commit.advance().unwrap();
        assert!(replies.try_recv().is_ok());
        assert_eq!(store.calls(), ["append", "append", "sync"]);
    }

    // STORE-1: a store that never blocks is written from a task, which
    // spends the store's sync latency before the sync, in the runtime's
    // time; the reply waits all the while.
    #[tokio::test(start_paused = true)]
    async fn a_reply_waits_out_the_sync_latency_of_a_store_that_never_blocks() {
        let store = Noting::slow(Duration::from_millis(5));
        let mut commit = Committer::start(
            Box::new(store.clone()),
            0,
            NEVER,
            Logged::default(),
            crate::metrics::Metrics::new(),
        );
        let began = tokio::time::Instant::now();
        commit.append(Record::Epoch(7));
        let (reply, mut replies) = crate::reply::channel(1);
        assert!(commit.reply(reply, Ok(Response::Destroyed), None).is_none());
        tokio::time::sleep(Duration::from_millis(4)).await;
        assert_eq!(store.calls(), ["append"], "appended, not yet synced");
        until_durable(&mut commit, 1).await;
        assert_eq!(began.elapsed(), Duration::from_millis(5));
        assert_eq!(store.calls(), ["append", "sync"]);
        commit.advance().unwrap();
        assert!(replies.try_recv().is_ok());
    }
}
