//! The systems a scenario runs against, Leasehold and its peers, and where
//! each serves. The scenarios, `clients` and the peers' adapters all name
//! these, so this file names none of them.

/// A system under test, reachable at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Leasehold,
    /// Leasehold over TLS, beside Leasehold without it: what TLS costs.
    LeaseholdTls,
    Etcd,
    /// etcd over TLS (`bench/peers/start.sh start` runs it), beside
    /// Leasehold over TLS.
    EtcdTls,
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
            Kind::LeaseholdTls => "leasehold-tls",
            Kind::Etcd => "etcd",
            Kind::EtcdTls => "etcd-tls",
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
    /// How clients speak TLS to it, for `LeaseholdTls` and `EtcdTls`
    /// (which reads only the CA).
    pub tls: Option<leasehold::TlsOptions>,
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

impl System {
    /// What a scenario reports for a system it cannot measure: a peer
    /// whose client this build left out, or a TLS variant outside the
    /// scenarios that measure what TLS costs.
    pub fn missing(&self) -> anyhow::Error {
        let feature = match self.kind {
            Kind::Leasehold => return anyhow::anyhow!("leasehold is measured by every scenario"),
            Kind::Etcd => "etcd",
            Kind::Zookeeper => "zookeeper",
            Kind::LeaseholdTls | Kind::EtcdTls if cfg!(feature = "etcd") => {
                return anyhow::anyhow!(
                    "{} is measured by `lock` and `kv` only: what TLS costs",
                    self.kind.name()
                )
            }
            Kind::LeaseholdTls => {
                return anyhow::anyhow!("leasehold-tls is measured by `lock` and `kv` only")
            }
            Kind::EtcdTls => "etcd",
        };
        anyhow::anyhow!(
            "this build has no {} client: build with `--features {feature}` (see bench/peers/start.sh)",
            self.kind.name()
        )
    }
}
