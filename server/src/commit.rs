//! Group commit: applied commands go to a writer thread, which appends
//! every record waiting, fsyncs once, and reports how far the log is
//! durable. Replies wait in an outbox until everything applied before them
//! is durable, so no client ever sees (or is told of) a change a crash
//! could take back (`STORE-1`).

use std::collections::VecDeque;
use std::sync::mpsc as std_mpsc;

use leasehold_protocol::{Error, ErrorCode, Response};
use tokio::sync::watch;
use tracing::error;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::master::ReplyTx;
use crate::state::Command;
use crate::store::{Record, Snapshot, Store};

/// fsyncs of the log by every master in this process, for benchmarks.
static FSYNCS: AtomicU64 = AtomicU64::new(0);

/// How many times masters in this process have fsynced their log: with
/// group commit, far fewer than the writes they acknowledged.
pub fn fsync_count() -> u64 {
    FSYNCS.load(Ordering::Relaxed)
}

/// Work for the writer thread, in log order.
enum Job {
    Record(Record),
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

/// Outbox slots kept once it empties after a burst.
const OUTBOX_KEPT: usize = 1024;

/// A reply waiting for the log.
#[derive(Debug)]
struct Pending {
    /// Records appended when the reply was made: it waits for all of them.
    needs: u64,
    reply: ReplyTx,
    result: Result<Response, Error>,
    /// Applied if the reply cannot be delivered (`LOCK-9`).
    undelivered: Option<Command>,
}

/// The master's side of group commit.
pub(crate) struct Committer {
    writer: Writer,
    /// Log position of the next record.
    pub(crate) next_seq: u64,
    since_snapshot: u64,
    compact_every: u64,
    appended: u64,
    durable: u64,
    pub(crate) progress: watch::Receiver<Durable>,
    outbox: VecDeque<Pending>,
}

/// Who writes the log.
enum Writer {
    /// A thread, which fsyncs one batch while the master goes on.
    Thread {
        jobs: std_mpsc::Sender<Job>,
        /// Joined on drop, so a stopped master has finished with its store.
        handle: Option<std::thread::JoinHandle<()>>,
    },
    /// The master itself, record by record: for a store in memory, where
    /// a thread would only make a simulation's timing nondeterministic.
    Inline {
        store: Box<dyn Store>,
        progress: watch::Sender<Durable>,
        failed: bool,
    },
}

impl Drop for Committer {
    /// Lets the writer finish what it was given and waits for it, so the
    /// data directory is free (and its lock released) once the master is
    /// gone.
    fn drop(&mut self) {
        if let Writer::Thread { jobs, handle } = &mut self.writer {
            let (closed, _) = std_mpsc::channel();
            drop(std::mem::replace(jobs, closed));
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

impl Committer {
    /// Starts writing to `store`, whose next record is at `next_seq`: from
    /// a writer thread, or from the master itself when `inline`.
    pub(crate) fn start(
        store: Box<dyn Store>,
        next_seq: u64,
        compact_every: u64,
        inline: bool,
    ) -> Committer {
        let (progress_tx, progress) = watch::channel(Durable::Upto(0));
        let writer = if inline {
            Writer::Inline {
                store,
                progress: progress_tx,
                failed: false,
            }
        } else {
            Self::spawn_writer(store, progress_tx)
        };
        Committer {
            writer,
            next_seq,
            since_snapshot: 0,
            compact_every: compact_every.max(1),
            appended: 0,
            durable: 0,
            progress,
            outbox: VecDeque::new(),
        }
    }

    fn spawn_writer(mut store: Box<dyn Store>, progress_tx: watch::Sender<Durable>) -> Writer {
        let (jobs, rx) = std_mpsc::channel::<Job>();
        let writer = std::thread::Builder::new()
            .name("leasehold-commit".into())
            .spawn(move || {
                let mut written = 0u64;
                // Ends when the master drops its sender.
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let mut records = 0u64;
                    let outcome = batch.iter().try_for_each(|job| match job {
                        Job::Record(r) => {
                            records += 1;
                            store.append(r)
                        }
                        Job::Compact(snapshot) => store.sync().and_then(|()| {
                            FSYNCS.fetch_add(1, Ordering::Relaxed);
                            store.compact(snapshot)
                        }),
                    });
                    let outcome = outcome.and_then(|()| store.sync());
                    if let Err(e) = outcome {
                        error!(error = %e, "the store failed: no further change is acknowledged");
                        let _ = progress_tx.send(Durable::Failed(e.to_string()));
                        return;
                    }
                    FSYNCS.fetch_add(1, Ordering::Relaxed);
                    written += records;
                    let _ = progress_tx.send(Durable::Upto(written));
                }
            })
            .expect("spawn the commit thread");
        Writer::Thread {
            jobs,
            handle: Some(writer),
        }
    }

    fn write(&mut self, job: Job) {
        let appended = self.appended;
        match &mut self.writer {
            // A closed writer has reported its failure through `progress`.
            Writer::Thread { jobs, .. } => {
                let _ = jobs.send(job);
            }
            Writer::Inline {
                store,
                progress,
                failed,
            } => {
                if *failed {
                    return;
                }
                let outcome = match &job {
                    Job::Record(r) => store.append(r),
                    Job::Compact(snapshot) => store.compact(snapshot),
                };
                match outcome.and_then(|()| store.sync()) {
                    Ok(()) => {
                        let _ = progress.send(Durable::Upto(appended));
                    }
                    Err(e) => {
                        error!(error = %e, "the store failed: no further change is acknowledged");
                        *failed = true;
                        let _ = progress.send(Durable::Failed(e.to_string()));
                    }
                }
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

    /// Whether the log has grown enough since the last snapshot to take one.
    pub(crate) fn wants_snapshot(&self) -> bool {
        self.since_snapshot >= self.compact_every
    }

    /// Has the writer replace the log so far with `snapshot`, taken of the
    /// state as of `next_seq`.
    pub(crate) fn compact(&mut self, snapshot: Snapshot) {
        self.write(Job::Compact(Box::new(snapshot)));
        self.since_snapshot = 0;
    }

    /// Sends `result` now if everything applied so far is durable, else
    /// once it is. Replies leave in the order they were made.
    pub(crate) fn reply(
        &mut self,
        reply: ReplyTx,
        result: Result<Response, Error>,
        undelivered: Option<Command>,
    ) -> Option<Command> {
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
        None
    }

    /// Sends the replies the log now covers; returns the commands to apply
    /// for the ones nobody was there to receive.
    pub(crate) fn advance(&mut self) -> Result<Vec<Command>, String> {
        let durable = self.progress.borrow_and_update().clone();
        let upto = match durable {
            Durable::Upto(n) => n,
            Durable::Failed(reason) => {
                for pending in self.outbox.drain(..) {
                    let _ = pending.reply.send(Err(Error::new(
                        ErrorCode::Internal,
                        format!("the master's storage failed: {reason}"),
                    )));
                }
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
