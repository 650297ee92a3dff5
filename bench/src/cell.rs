//! A three-member Leasehold cell (SPEC "The cell") run as three `leasehold
//! serve --cell ... --node N` processes on loopback, each with a fresh data
//! directory: the replicated counterpart of [`Master`], measured beside a
//! three-member etcd cluster and a three-server ZooKeeper ensemble.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use leasehold_server::cell::query_status;

use crate::master::{serving, Master};

/// Members a cell has: the smallest that rides out the loss of one.
pub const MEMBERS: u64 = 3;

/// How long a new cell is given to elect a master that serves.
const ELECTION_PATIENCE: Duration = Duration::from_secs(60);

/// A running cell; its members are stopped when it is dropped.
pub struct Cell {
    members: BTreeMap<u64, Master>,
    /// Members killed and not started again, their data kept.
    down: BTreeMap<u64, Master>,
    addrs: BTreeMap<u64, String>,
}

impl Cell {
    /// Starts the members on free loopback ports, with `args` given to
    /// each one's `serve`, and waits until one of them serves as master.
    pub async fn start(bin: &Path, name: &str, args: &[String]) -> anyhow::Result<Cell> {
        // The ports are found by binding and letting go: every member must
        // know the others' addresses before any of them listens. Another
        // process may take one meanwhile; then the cell is tried again on
        // new ports.
        let mut last = None;
        for _ in 0..3 {
            match Cell::start_once(bin, name, args).await {
                Ok(cell) => {
                    cell.master().await?;
                    // A client served through the list of members, as the
                    // scenarios' clients will be.
                    serving(&cell.addr()).await?;
                    return Ok(cell);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("tried").context("the cell did not start"))
    }

    async fn start_once(bin: &Path, name: &str, args: &[String]) -> anyhow::Result<Cell> {
        let mut addrs = BTreeMap::new();
        for id in 1..=MEMBERS {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            addrs.insert(id, listener.local_addr()?.to_string());
        }
        let spec = addrs
            .iter()
            .map(|(id, addr)| format!("{id}={addr}"))
            .collect::<Vec<_>>()
            .join(",");
        // A name of its own, so that a member of an earlier cell that
        // still runs on a reused port is refused as a peer (`CELL-4`).
        let cell_id = format!("leasehold-bench-{}", uuid::Uuid::new_v4().simple());
        let mut members = BTreeMap::new();
        for (&id, addr) in &addrs {
            let member = Master::start_member(bin, name, (&spec, &cell_id), id, addr, args).await?;
            if member.addr() != addr {
                bail!("member {id} listens on {}, not {addr}", member.addr());
            }
            members.insert(id, member);
        }
        Ok(Cell {
            members,
            down: BTreeMap::new(),
            addrs,
        })
    }

    /// Every member's address, separated by commas: what a client is
    /// given (`Client::connect("a,b,c")`).
    pub fn addr(&self) -> String {
        self.addrs.values().cloned().collect::<Vec<_>>().join(",")
    }

    /// The processes of the members still running.
    pub fn pids(&self) -> Vec<u32> {
        self.members.values().filter_map(Master::pid).collect()
    }

    /// The addresses of the members still running, but `except`.
    pub fn others(&self, except: u64) -> Vec<String> {
        self.members
            .iter()
            .filter(|(id, _)| **id != except)
            .map(|(_, m)| m.addr().to_string())
            .collect()
    }

    /// The member serving as master, and its epoch, once one does.
    pub async fn master(&self) -> anyhow::Result<(u64, u64)> {
        let started = Instant::now();
        let addrs: Vec<String> = self
            .members
            .values()
            .map(|m| m.addr().to_string())
            .collect();
        loop {
            if let Some(found) = master_among(&addrs).await {
                return Ok(found);
            }
            if started.elapsed() > ELECTION_PATIENCE {
                bail!("no member of the cell became master within {ELECTION_PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills member `id` with SIGKILL, as a crash would, and waits for it
    /// to be gone. It stays down, its data kept, until [`Cell::restart`]:
    /// the cell must not need it.
    pub async fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        let mut member = self
            .members
            .remove(&id)
            .with_context(|| format!("the cell has no running member {id}"))?;
        member.kill().await?;
        self.down.insert(id, member);
        Ok(())
    }

    /// Starts the killed member `id` again on its address and data.
    pub async fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let mut member = self
            .down
            .remove(&id)
            .with_context(|| format!("the cell has no killed member {id}"))?;
        member.restart().await?;
        self.members.insert(id, member);
        Ok(())
    }

    /// Waits until every member runs and answers, one of them serves as
    /// master, and it reports no member behind its log: a cell that can
    /// lose its master again with nothing left over from the last loss.
    pub async fn steady(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        let addrs: Vec<String> = self.addrs.values().cloned().collect();
        loop {
            if self.down.is_empty() && steady_among(&addrs).await {
                return Ok(());
            }
            if started.elapsed() > ELECTION_PATIENCE {
                bail!("the cell was not steady within {ELECTION_PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every member with SIGINT and removes their data.
    pub async fn stop(self) {
        for member in self.members.into_values().chain(self.down.into_values()) {
            member.stop().await;
        }
    }
}

/// Whether every member at `addrs` answers, one serves as master, and
/// the master counts every other member as a voter with nothing to catch
/// up.
async fn steady_among(addrs: &[String]) -> bool {
    let mut statuses = Vec::new();
    for addr in addrs {
        match tokio::time::timeout(Duration::from_secs(1), query_status(addr)).await {
            Ok(Ok(status)) => statuses.push(status),
            _ => return false,
        }
    }
    let masters: Vec<_> = statuses.iter().filter(|s| s.master).collect();
    let [master] = masters[..] else {
        return false;
    };
    statuses.iter().all(|s| {
        s.epoch == master.epoch
            && s.applied == master.last_log
            && master.voters.contains(&s.id)
            && master.lag.get(&s.id).copied().unwrap_or(0) == 0
    })
}

/// The id and epoch of whichever member at `addrs` says it serves as
/// master (`CELL-8`), if one does.
pub async fn master_among(addrs: &[String]) -> Option<(u64, u64)> {
    for addr in addrs {
        let asked = tokio::time::timeout(Duration::from_secs(1), query_status(addr)).await;
        if let Ok(Ok(status)) = asked {
            if status.master {
                return Some((status.id, status.epoch));
            }
        }
    }
    None
}
