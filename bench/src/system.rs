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
    /// How Leasehold's clients speak TLS to it, for `LeaseholdTls`.
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
    /// What a scenario reports for a peer whose client this build left out.
    pub fn missing(&self) -> anyhow::Error {
        anyhow::anyhow!(
            "this build has no {0} client: build with `--features {0}` (see bench/peers/start.sh)",
            self.kind.name()
        )
    }
}
