//! The systems a scenario runs against: Leasehold through its client
//! library, and the peers through their native Rust clients. Each offers
//! the same small set of operations, so one scenario drives them all.

use std::time::Duration;

use leasehold::{Client, LockOptions, PutOptions, Session, SessionOptions};

/// A system under test, reachable at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Leasehold,
    Etcd,
    Zookeeper,
}

impl Kind {
    /// Sessions a scenario holds at most: ZooKeeper needs a connection,
    /// and so a file descriptor on each side, per session.
    pub fn max_sessions(self) -> usize {
        match self {
            Kind::Zookeeper => 8_000,
            _ => usize::MAX,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Leasehold => "leasehold",
            Kind::Etcd => "etcd",
            Kind::Zookeeper => "zookeeper",
        }
    }
}

/// A system and where it serves: one server, or the members of a
/// cluster, separated by commas (`HOST:PORT,HOST:PORT,...`).
#[derive(Debug, Clone)]
pub struct System {
    pub kind: Kind,
    pub addr: String,
    /// The serving processes that run on this machine (one, or one per
    /// member), for CPU and memory figures: their sum.
    pub pids: Vec<u32>,
}

/// The addresses in a comma-separated list, blanks left out.
pub fn members(addrs: &str) -> Vec<String> {
    addrs
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect()
}

/// The port of `HOST:PORT`.
pub fn port(addr: &str) -> Option<u16> {
    addr.rsplit(':').next()?.parse().ok()
}

fn peer_missing(kind: Kind) -> anyhow::Error {
    anyhow::anyhow!(
        "this build has no {0} client: build with `--features {0}` (see bench/peers/start.sh)",
        kind.name()
    )
}

/// One client holding one session (a lease), taking and releasing locks.
pub enum Locker {
    Leasehold(Session),
    #[cfg(feature = "etcd")]
    Etcd(Box<crate::etcd::Locker>),
    #[cfg(feature = "zookeeper")]
    Zookeeper(crate::zookeeper::Locker),
}

/// One client connection reading and writing keys.
#[derive(Clone)]
pub enum Kv {
    Leasehold(Client),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd_client::Client>),
    #[cfg(feature = "zookeeper")]
    Zookeeper(crate::zookeeper::Kv),
}

impl System {
    /// A new connection with a session of `lease`, ready to lock.
    pub async fn locker(&self, lease: Duration) -> anyhow::Result<Locker> {
        match self.kind {
            Kind::Leasehold => {
                let client = Client::connect(self.addr.clone()).await?;
                let session = client
                    .create_session(
                        SessionOptions::new("bench-lock")
                            .lease(lease)
                            .lock_delay(Duration::ZERO),
                    )
                    .await?;
                Ok(Locker::Leasehold(session))
            }
            #[cfg(feature = "etcd")]
            Kind::Etcd => Ok(Locker::Etcd(Box::new(
                crate::etcd::Locker::new(&self.addr, lease).await?,
            ))),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => Ok(Locker::Zookeeper(
                crate::zookeeper::Locker::new(&self.addr, lease).await?,
            )),
            #[allow(unreachable_patterns)]
            other => Err(peer_missing(other)),
        }
    }

    /// A new connection for reads and writes.
    pub async fn kv(&self) -> anyhow::Result<Kv> {
        match self.kind {
            Kind::Leasehold => Ok(Kv::Leasehold(Client::connect(self.addr.clone()).await?)),
            #[cfg(feature = "etcd")]
            Kind::Etcd => Ok(Kv::Etcd(Box::new(crate::etcd::connect(&self.addr).await?))),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => Ok(Kv::Zookeeper(crate::zookeeper::Kv::new(&self.addr).await?)),
            #[allow(unreachable_patterns)]
            other => Err(peer_missing(other)),
        }
    }

    pub fn missing(&self) -> anyhow::Error {
        peer_missing(self.kind)
    }
}

impl Locker {
    /// Takes the exclusive lock of `key`, waiting in line if it is held,
    /// then releases it.
    pub async fn cycle(&self, key: &str) -> anyhow::Result<()> {
        match self {
            Locker::Leasehold(session) => {
                let guard = session.lock(key, LockOptions::exclusive()).await?;
                guard.release().await?;
            }
            #[cfg(feature = "etcd")]
            Locker::Etcd(locker) => locker.cycle(key).await?,
            #[cfg(feature = "zookeeper")]
            Locker::Zookeeper(locker) => locker.cycle(key).await?,
        }
        Ok(())
    }

    /// Ends the session.
    pub async fn close(self) {
        match self {
            Locker::Leasehold(session) => {
                let _ = session.close().await;
            }
            #[cfg(feature = "etcd")]
            Locker::Etcd(locker) => (*locker).close().await,
            #[cfg(feature = "zookeeper")]
            Locker::Zookeeper(locker) => locker.close().await,
        }
    }
}

impl Kv {
    pub async fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        match self {
            Kv::Leasehold(client) => {
                client.put(key, value.to_vec(), PutOptions::new()).await?;
            }
            #[cfg(feature = "etcd")]
            Kv::Etcd(client) => {
                client.clone().put(key, value, None).await?;
            }
            #[cfg(feature = "zookeeper")]
            Kv::Zookeeper(kv) => kv.put(key, value).await?,
        }
        Ok(())
    }

    /// Reads `key`; `true` if it exists.
    pub async fn get(&self, key: &str) -> anyhow::Result<bool> {
        match self {
            Kv::Leasehold(client) => Ok(client.get(key).await?.is_some()),
            #[cfg(feature = "etcd")]
            Kv::Etcd(client) => Ok(!client.clone().get(key, None).await?.kvs().is_empty()),
            #[cfg(feature = "zookeeper")]
            Kv::Zookeeper(kv) => kv.get(key).await,
        }
    }
}
