//! One client of any system, Leasehold or a peer, offering the same few
//! operations whichever it is, so that one scenario (`lock`, `kv`) drives
//! them all.

use std::time::Duration;

use leasehold::{Client, LockOptions, PutOptions, Session, SessionOptions};

use crate::retry::through_failovers;
use crate::system::{Kind, System};

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

/// How long a client's setup rides through a cell's master changing.
const SETUP_PATIENCE: Duration = Duration::from_secs(60);

/// A Leasehold client of `system`, over TLS when it speaks it.
pub async fn leasehold_client(system: &System) -> anyhow::Result<Client> {
    let config = leasehold::ClientConfig {
        tls: system.tls.clone(),
        ..leasehold::ClientConfig::default()
    };
    through_failovers(SETUP_PATIENCE, || {
        Client::connect_with(system.addr.clone(), config.clone())
    })
    .await
}

/// The CA etcd's certificate is checked against, when it speaks TLS.
#[cfg(feature = "etcd")]
fn etcd_ca(system: &System) -> Option<&std::path::Path> {
    system.tls.as_ref().map(|tls| tls.ca.as_path())
}

impl Locker {
    /// A new connection to `system` with a session of `lease`, ready to
    /// lock.
    pub async fn connect(system: &System, lease: Duration) -> anyhow::Result<Locker> {
        match system.kind {
            Kind::Leasehold | Kind::LeaseholdTls => {
                let client = leasehold_client(system).await?;
                let session = through_failovers(SETUP_PATIENCE, || {
                    client.create_session(
                        SessionOptions::new("bench-lock")
                            .lease(lease)
                            .lock_delay(Duration::ZERO),
                    )
                })
                .await?;
                Ok(Locker::Leasehold(session))
            }
            #[cfg(feature = "etcd")]
            Kind::Etcd | Kind::EtcdTls => Ok(Locker::Etcd(Box::new(
                crate::etcd::Locker::new(&system.addr, etcd_ca(system), lease).await?,
            ))),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => Ok(Locker::Zookeeper(
                crate::zookeeper::Locker::new(&system.addr, lease).await?,
            )),
            #[allow(unreachable_patterns)]
            _ => Err(system.missing()),
        }
    }

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
    /// A new connection to `system` for reads and writes.
    pub async fn connect(system: &System) -> anyhow::Result<Kv> {
        match system.kind {
            Kind::Leasehold | Kind::LeaseholdTls => {
                Ok(Kv::Leasehold(leasehold_client(system).await?))
            }
            #[cfg(feature = "etcd")]
            Kind::Etcd | Kind::EtcdTls => Ok(Kv::Etcd(Box::new(
                crate::etcd::connect(&system.addr, etcd_ca(system)).await?,
            ))),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => Ok(Kv::Zookeeper(
                crate::zookeeper::Kv::new(&system.addr).await?,
            )),
            #[allow(unreachable_patterns)]
            _ => Err(system.missing()),
        }
    }

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
