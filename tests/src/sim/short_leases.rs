//! A deliberately broken master, to show the `failover` check fires: one
//! that gives the sessions it recovers a lease far shorter than they were
//! created with. It reads its log through [`ShortLeases`], which shortens
//! every recovered session's lease to [`SHORT`] on the way in, so the
//! master's own promotion (`FO-2`) grants that, and a client that is not
//! quick to come back loses a session it was never cut off from.

use std::time::Duration;

use leasehold_server::{Command, Record, Recovered, Snapshot, Store, StoreError, StoreSizes};

/// The lease a broken master gives the sessions it recovers.
pub const SHORT: Duration = Duration::from_millis(100);

/// A store that hands the master its records with every session's lease
/// cut to [`SHORT`], when `broken`; otherwise `S` unchanged. The recovered
/// sessions keep the short lease for good, not only for the promotion.
/// Only the log's records are rewritten, not a snapshot: runs with it on
/// snapshot no more often than a master does by default, so that the
/// sessions a crash recovers are still in the log.
#[derive(Debug)]
pub struct ShortLeases<S> {
    pub inner: S,
    pub broken: bool,
}

impl<S: Store> Store for ShortLeases<S> {
    fn recover(&mut self) -> Result<Recovered, StoreError> {
        let mut recovered = self.inner.recover()?;
        if self.broken {
            for record in &mut recovered.records {
                if let Record::Command {
                    command: Command::CreateSession(session),
                    ..
                } = record
                {
                    session.lease = Some(SHORT);
                }
            }
        }
        Ok(recovered)
    }

    fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        self.inner.append(record)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.inner.sync()
    }

    fn seal(&mut self) -> Result<(), StoreError> {
        self.inner.seal()
    }

    fn compact(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.inner.compact(snapshot)
    }

    fn sizes(&self) -> StoreSizes {
        self.inner.sizes()
    }

    fn set_reserve(&mut self, bytes: u64) -> Result<(), StoreError> {
        self.inner.set_reserve(bytes)
    }

    fn release_reserve(&mut self) -> bool {
        self.inner.release_reserve()
    }

    fn restore_reserve(&mut self) -> bool {
        self.inner.restore_reserve()
    }

    fn rewind(&mut self) -> Result<(), StoreError> {
        self.inner.rewind()
    }

    fn blocking(&self) -> bool {
        self.inner.blocking()
    }

    fn sync_latency(&mut self) -> Duration {
        self.inner.sync_latency()
    }

    fn location(&self) -> String {
        self.inner.location()
    }
}
