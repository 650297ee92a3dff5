//! The `leasehold` command: run a master, or talk to one.

mod access;
mod cell;
mod check;
mod config_file;
mod duration;
mod kv;
mod ops;
mod recipes;
mod run;
mod session;
mod signals;
mod snapshot;

use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use leasehold::{Client, ClientConfig, ClientError, Remedy};

use run::RunArgs;
use session::SessionArgs;

/// Where the master listens, and clients look for it, unless told otherwise.
const DEFAULT_ADDR: &str = "127.0.0.1:7171";

#[derive(Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Leasehold: a lock service with Chubby's session semantics"
)]
struct Cli {
    /// Address of the master [default: 127.0.0.1:7171].
    #[arg(long, global = true, env = "LEASEHOLD_ADDR", value_parser = addr_arg)]
    addr: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// A file holding the operator token. `serve` then lets only a
    /// session's owner or a request with this token destroy the session or
    /// delete a node another session has locked; other commands present it.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_OPERATOR_TOKEN_FILE",
        value_name = "PATH"
    )]
    operator_token_file: Option<std::path::PathBuf>,
    /// A file holding a bearer token (`token create` printed it): every
    /// connection authenticates with it and acts as its principal.
    #[arg(long, global = true, env = "LEASEHOLD_TOKEN_FILE", value_name = "PATH")]
    token_file: Option<std::path::PathBuf>,
    /// How long a request may wait for its answer. Past it the outcome is
    /// unknown (exit status 3): a write held for a session that caches
    /// its key can take up to that session's lease.
    #[arg(long, global = true, value_parser = duration::parse, default_value = "10s")]
    request_timeout: Duration,
    /// TLS: the CA (PEM) that signed the master's certificate; clients
    /// speak TLS when given one.
    #[arg(long, global = true, env = "LEASEHOLD_TLS_CA", value_name = "PATH")]
    tls_ca: Option<std::path::PathBuf>,
    /// TLS: a certificate chain (PEM). For `serve`, the master's own; for
    /// other commands, this client's, for a master that asks for one
    /// (mutual TLS).
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_TLS_CERT",
        value_name = "PATH",
        requires = "tls_key"
    )]
    tls_cert: Option<std::path::PathBuf>,
    /// TLS: the private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_TLS_KEY",
        value_name = "PATH",
        requires = "tls_cert"
    )]
    tls_key: Option<std::path::PathBuf>,
    /// TLS: the name the master's certificate must carry [default: the
    /// host of --addr].
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_TLS_SERVER_NAME",
        value_name = "NAME"
    )]
    tls_server_name: Option<String>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// How clients speak TLS, as the flags say: not at all without
    /// --tls-ca.
    fn client_tls(&self) -> anyhow::Result<Option<leasehold::TlsOptions>> {
        let Some(ca) = &self.tls_ca else {
            let given = match (&self.tls_cert, &self.tls_server_name) {
                (Some(_), Some(_)) => Some("--tls-cert and --tls-server-name need"),
                (Some(_), None) => Some("--tls-cert needs"),
                (None, Some(_)) => Some("--tls-server-name needs"),
                (None, None) => None,
            };
            if let Some(given) = given {
                anyhow::bail!("{given} --tls-ca: the CA that signed the master's certificate");
            }
            return Ok(None);
        };
        let mut options = leasehold::TlsOptions::new(ca);
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options.client_certificate(cert, key);
        }
        if let Some(name) = &self.tls_server_name {
            options = options.server_name(name);
        }
        Ok(Some(options))
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a master.
    Serve(Box<ServeArgs>),
    /// Kills the process group it leads when its standard input closes:
    /// `lock`, `elect` and `semaphore` run it beside CMD, so that CMD dies
    /// with them.
    #[command(name = run::GUARD_SUBCOMMAND, hide = true)]
    SupervisorGuard,
    /// Create, inspect, destroy or keep sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Print a node's contents (or its metadata with --stat).
    Get {
        /// The key, e.g. `jobs/nightly`; a leading `/` is dropped
        /// (`/jobs/nightly` is the same key, as ZooKeeper users write it).
        #[arg(value_parser = key_arg)]
        key: String,
        /// Print the metadata instead of the contents.
        #[arg(long, conflicts_with = "raw")]
        stat: bool,
        /// Write the contents exactly as stored, with no newline after
        /// them: `put KEY - < FILE` then `get KEY --raw > COPY` gives FILE
        /// back, binary or not. Without it the contents must be UTF-8 text
        /// and a newline follows them; `--json` gives them in base64 too.
        #[arg(long)]
        raw: bool,
    },
    /// Write a node and print its new modify index.
    Put {
        /// The key, e.g. `jobs/nightly`; a leading `/` is dropped
        /// (`/jobs/nightly` is the same key, as ZooKeeper users write it).
        #[arg(value_parser = key_arg)]
        key: String,
        /// The contents; `-` reads them from stdin.
        value: String,
        /// Write only if the node's modify index is N (0: only if absent).
        #[arg(long, value_name = "N")]
        cas: Option<u64>,
        /// Opaque flags stored with the node.
        #[arg(long, default_value_t = 0)]
        flags: u64,
        /// Bind the node to the session with this token (as `session
        /// create` printed it): it is deleted when that session ends.
        #[arg(long, value_name = "TOKEN")]
        ephemeral: Option<leasehold::SessionToken>,
    },
    /// Delete a node and print the keys deleted.
    Delete {
        /// The key, e.g. `jobs/nightly`; a leading `/` is dropped
        /// (`/jobs/nightly` is the same key, as ZooKeeper users write it).
        #[arg(value_parser = key_arg)]
        key: String,
        /// Delete only if the node's modify index is N.
        #[arg(long, value_name = "N")]
        cas: Option<u64>,
        /// Delete every node below the key too.
        #[arg(long)]
        recursive: bool,
    },
    /// List the children of a prefix (the root when omitted).
    Ls {
        /// Where to list; empty or `/` is the root, and a leading `/` is
        /// dropped.
        #[arg(default_value = "", value_parser = key_arg)]
        prefix: String,
        /// List every key below the prefix.
        #[arg(long)]
        recursive: bool,
    },
    /// Check a sequencer (hex, as in LEASEHOLD_SEQUENCER): exit 0 if it
    /// names a current holding, 1 if not, 65 if it is not a sequencer.
    CheckSequencer {
        /// The sequencer, in hex.
        sequencer: String,
    },
    /// Set, delete or list health checks; a critical check ends the
    /// sessions bound to it (`session create --check NAME`).
    #[command(subcommand)]
    Check(CheckCommand),
    /// Inspect a replicated cell: give its members with --addr a,b,c.
    #[command(subcommand)]
    Cell(CellCommand),
    /// Set, remove or list access rules, or turn access control on or
    /// off (off by default: every client may do everything).
    #[command(subcommand)]
    Acl(AclCommand),
    /// Create, revoke or list bearer tokens (`--token-file` presents one).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print who this client acts as: its certificate's name, its token's
    /// principal, the operator, or anonymous.
    Whoami,
    /// Print who holds each lock at or below PREFIX (every lock when
    /// omitted) and for how long, who waits, and lock-delay left.
    Locks {
        /// A key or a prefix; empty or `/` is every key, and a leading `/`
        /// is dropped.
        #[arg(default_value = "", value_parser = key_arg)]
        prefix: String,
    },
    /// Print what the master serves: epoch, sessions, nodes, locks,
    /// waiters, what it stores; in a cell, then each member.
    Status,
    /// Save a live master's state to a file, check a saved one, or make a
    /// data directory of one.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Print one line per change at or below KEY (a key or a prefix; the
    /// root when omitted) until interrupted. A line `events-lost` says
    /// changes may have gone by unseen, as after every fail-over (a new
    /// master cannot know what the old one told this watcher) or when the
    /// watcher fell behind: read the keys again.
    Watch {
        /// A key or a prefix; empty or `/` is the root, and a leading `/`
        /// is dropped.
        #[arg(default_value = "", value_parser = key_arg)]
        key: String,
        /// First print each node at or below KEY changed after index N
        /// (as it is now: the master keeps no history, so each once, and
        /// a node deleted since only if it is KEY itself), then every
        /// change from then on.
        #[arg(long, value_name = "N")]
        from_index: Option<u64>,
        /// A label for people [default: watch KEY by HOST:PID].
        #[arg(long)]
        name: Option<String>,
        /// Lease of the session the subscription belongs to (default: the
        /// master's).
        #[arg(long, value_parser = duration::parse)]
        lease: Option<Duration>,
    },
    /// Run CMD while holding the lock of KEY; exit with CMD's status.
    /// CMD gets LEASEHOLD_SEQUENCER, and SIGTERM (then SIGKILL) if the lock
    /// may be lost.
    Lock {
        /// The key whose lock to take, e.g. `jobs/nightly`; a leading `/`
        /// is dropped.
        #[arg(value_parser = key_arg)]
        key: String,
        /// Take the lock shared instead of exclusive.
        #[arg(long)]
        shared: bool,
        /// Give up waiting for the lock after this long (default: 10m);
        /// exit status 75 then, without running CMD.
        #[arg(long, value_parser = duration::parse)]
        timeout: Option<Duration>,
        /// Try once, without waiting: if the lock is held, exit with status
        /// 75 without running CMD.
        #[arg(long = "try", conflicts_with = "timeout")]
        try_once: bool,
        /// Write this to KEY with the acquisition, and keep KEY afterwards.
        /// Without it, a KEY the lock creates is deleted once the lock is
        /// free and nobody waits.
        #[arg(long)]
        value: Option<String>,
        #[command(flatten)]
        session: SessionArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Campaign for leadership of KEY with VALUE, then run CMD while
    /// leading; exit with CMD's status.
    Elect {
        /// The election's key, e.g. `service/db/leader`; a leading `/` is
        /// dropped.
        #[arg(value_parser = key_arg)]
        key: String,
        /// The value readers of the leader see (e.g. this node's address).
        #[arg(long)]
        value: String,
        #[command(flatten)]
        session: SessionArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Print the value of KEY's leader; exit 1 when nobody leads.
    Leader {
        /// The election's key; a leading `/` is dropped.
        #[arg(value_parser = key_arg)]
        key: String,
        /// Print the leader now, then a line each time it (or its value)
        /// changes, until interrupted; a line `-` when nobody leads.
        #[arg(long)]
        follow: bool,
    },
    /// Take one of N slots under PREFIX, then run CMD while holding it; exit
    /// with CMD's status.
    Semaphore {
        /// The semaphore's prefix, e.g. `jobs/builders`: each holder's key
        /// lies below it; a leading `/` is dropped.
        #[arg(value_parser = key_arg)]
        prefix: String,
        /// How many may hold a slot at once; every participant must agree.
        #[arg(long)]
        limit: u32,
        /// Stored in this contender's key, for people.
        #[arg(long, default_value = "")]
        value: String,
        #[command(flatten)]
        session: SessionArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Print a completion script for SHELL, e.g.
    /// `leasehold completions bash > ~/.local/share/bash-completion/completions/leasehold`.
    Completions { shell: clap_complete::Shell },
}

#[derive(Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Save a consistent snapshot of the master's whole state (a cell's
    /// too) to FILE, without stopping it; prints its index and epoch. It
    /// holds every session's secret: keep it as you keep the master's
    /// data directory.
    Save {
        /// Where to write it; written beside it first, then renamed.
        file: std::path::PathBuf,
    },
    /// Verify FILE (its checksum, and that it decodes) and print its
    /// index, epoch and counts; exit 65 if it is damaged.
    Status { file: std::path::PathBuf },
    /// Make a new data directory of FILE for `serve --data-dir DIR`; DIR
    /// must not exist or be empty. With --cell and --node, the first member
    /// of a new cell instead: start it with the same --cell, --node and
    /// --data-dir, start the others with --join, and add them with `cell
    /// add`.
    Restore {
        file: std::path::PathBuf,
        /// The data directory to make.
        #[arg(long)]
        data_dir: std::path::PathBuf,
        /// The new cell's first member, as `ID=ADDR` (serve's --cell, naming
        /// this member alone).
        #[arg(long, requires = "node", value_parser = parse_cell)]
        cell: Option<std::collections::BTreeMap<u64, String>>,
        /// The id --cell gives the member.
        #[arg(long, requires = "cell")]
        node: Option<u64>,
    },
}

#[derive(Subcommand)]
enum CheckCommand {
    /// Create or update a check; prints the sessions it ended.
    Set {
        name: String,
        status: check::StatusArg,
        /// Why, for people.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Remove a check, ending the sessions bound to it.
    Delete { name: String },
    /// List every check with its status and how many sessions it binds.
    List,
}

#[derive(Subcommand)]
enum AclCommand {
    /// Give PRINCIPAL (or `*`, anyone) RIGHTS on every key that starts with
    /// PREFIX (`""`: every key), replacing its rule there. The longest
    /// prefix wins; prints the change's index.
    Set {
        /// Keys that start with it, e.g. `jobs/`; `""` for every key.
        prefix: String,
        /// A certificate's name, a token's principal, or `*` for anyone.
        principal: String,
        /// Comma-separated: read, write, lock, admin; or all, or none.
        rights: leasehold::Rights,
    },
    /// Remove the rule of PREFIX and PRINCIPAL.
    Rm { prefix: String, principal: String },
    /// List every rule, and whether access control is on.
    List,
    /// Turn access control on: what no rule grants is denied. Refused
    /// unless you keep admin on every key (`acl set "" YOU all` first,
    /// or use the operator token).
    Enable,
    /// Turn access control off: every client may do everything.
    Disable,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token that authenticates as PRINCIPAL; prints it, once.
    Create {
        principal: String,
        /// What it is for, shown by `token list`.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Revoke the token with this id: its connections lose its rights at
    /// once.
    Revoke { id: u64 },
    /// List tokens: id, principal, note; never their secrets.
    List,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Read settings from a TOML FILE: any flag of serve (and --tls-cert,
    /// --tls-key, --operator-token-file) under its own name, e.g.
    /// `http-listen = "127.0.0.1:7180"`. Flags and LEASEHOLD_* variables
    /// override it.
    #[arg(long, env = "LEASEHOLD_CONFIG", value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print the settings in force, each with where it comes from, as a
    /// config file would hold them, and exit.
    #[arg(long)]
    print_config: bool,
    /// How log lines are written on stderr: `text` for people, `json` (one
    /// object a line) for log shippers.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Address to listen on [default: --addr or LEASEHOLD_ADDR if given,
    /// else 127.0.0.1:7171].
    #[arg(long)]
    listen: Option<String>,
    /// Directory for durable state.
    #[arg(long, default_value = "./leasehold-data")]
    data_dir: std::path::PathBuf,
    /// Keep all state in memory only, for tests and benchmarks: a restart
    /// forgets every session, node and lock.
    #[arg(long, conflicts_with = "data_dir")]
    in_memory: bool,
    /// Serve the status page at /, Prometheus metrics at /metrics, and
    /// /health and /ready for probes, over HTTP at ADDR (e.g.
    /// 127.0.0.1:7180; HTTPS with --tls-cert). Off unless given.
    #[arg(long, env = "LEASEHOLD_HTTP_LISTEN", value_name = "ADDR")]
    http_listen: Option<String>,
    /// A host name the HTTP port answers its data (/api/status, /metrics)
    /// for, besides IP addresses and localhost: the name operators and
    /// scrapers reach it by. May be given more than once.
    #[arg(
        long,
        env = "LEASEHOLD_HTTP_HOST",
        value_name = "NAME",
        value_delimiter = ','
    )]
    http_host: Vec<String>,
    /// Write an audit log to FILE: a JSON line for every lock granted or
    /// released, rule or token changed, operator action, authentication
    /// and refused request.
    #[arg(long, env = "LEASEHOLD_AUDIT_LOG", value_name = "FILE")]
    audit_log: Option<std::path::PathBuf>,
    /// Rotate the audit log once it would grow past this many bytes.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_AUDIT_MAX_BYTES, requires = "audit_log")]
    audit_log_max_bytes: u64,
    /// Rotated audit logs kept (FILE.1, the newest, ... FILE.N).
    #[arg(long, default_value_t = leasehold_server::DEFAULT_AUDIT_KEEP, requires = "audit_log")]
    audit_log_keep: u32,
    /// TLS: clients must present a certificate this CA (PEM) signed
    /// (mutual TLS). Needs --tls-cert and --tls-key.
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA", value_name = "PATH")]
    tls_client_ca: Option<std::path::PathBuf>,
    /// Lease given to sessions that ask for none.
    #[arg(long, value_parser = duration::parse, default_value = "12s")]
    default_lease: Duration,
    /// Shortest lease a session may ask for.
    #[arg(long, value_parser = duration::parse, default_value = "1s")]
    min_lease: Duration,
    /// Longest lease a session may ask for.
    #[arg(long, value_parser = duration::parse, default_value = "60s")]
    max_lease: Duration,
    /// How long before a lease ends a held KeepAlive is answered (at most a
    /// quarter of the lease).
    #[arg(long, value_parser = duration::parse, default_value = "2s")]
    keepalive_margin: Duration,
    /// Largest frame accepted, in bytes.
    #[arg(long, default_value_t = leasehold_protocol::DEFAULT_MAX_FRAME)]
    max_frame: usize,
    /// Connections served at once; more are refused with a reason.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Connections served at once from one peer address.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_CONNECTIONS_PER_PEER)]
    max_connections_per_peer: usize,
    /// Bytes of unread replies one connection may hold; past it the master
    /// serves it nothing but KeepAlives until its peer reads.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_REPLY_BUDGET)]
    reply_budget: usize,
    /// Health checks one peer address may create.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_CHECKS_PER_PEER)]
    max_checks_per_peer: usize,
    /// Live sessions the master keeps at most; past it CreateSession is
    /// refused with a reason.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,
    /// Live sessions one peer address may have created.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_SESSIONS_PER_PEER)]
    max_sessions_per_peer: usize,
    /// Subscriptions one peer address may have made.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_SUBSCRIPTIONS_PER_PEER)]
    max_subscriptions_per_peer: usize,
    /// Acquires one peer address may have waiting in line.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_WAITERS_PER_PEER)]
    max_waiters_per_peer: usize,
    /// Bytes of nodes (keys and contents) one peer address may have
    /// written, counted against whoever wrote each node last.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_MAX_BYTES_PER_PEER)]
    max_bytes_per_peer: usize,
    /// Bytes of disk set aside in the data directory: when the disk fills,
    /// they let the master finish what it acknowledged and keep ending
    /// sessions while it refuses writes.
    #[arg(long, default_value_t = leasehold_server::DEFAULT_DISK_RESERVE)]
    disk_reserve: u64,
    /// How long a connection with no request in flight may stay silent.
    #[arg(long, value_parser = duration::parse, default_value = "5m")]
    idle_timeout: Duration,
    /// Serve as a member of a replicated cell: every member's id and the
    /// address the other members and clients reach it at, this one's
    /// included, e.g. `1=10.0.0.1:7171,2=10.0.0.2:7171,3=10.0.0.3:7171`.
    /// Without it, serve is a single master.
    #[arg(long, requires = "node", conflicts_with = "in_memory", value_parser = parse_cell)]
    cell: Option<std::collections::BTreeMap<u64, String>>,
    /// This member's id in --cell.
    #[arg(long, requires = "cell")]
    node: Option<u64>,
    /// The cell's name: members of another cell are refused as peers.
    #[arg(long, default_value = "leasehold")]
    cell_id: String,
    /// Join a cell that runs already: wait to be added with `leasehold
    /// cell add` rather than found a new cell. On a --data-dir that holds
    /// a log already it changes nothing: the member comes back as its log
    /// says, so a unit that always passes --join restarts cleanly.
    #[arg(long, requires = "cell")]
    join: bool,
    /// A file holding the cell's shared secret: every member presents it
    /// to the others and refuses a peer without it. Give every member the
    /// same file.
    #[arg(
        long,
        requires = "cell",
        env = "LEASEHOLD_CELL_SECRET_FILE",
        value_name = "PATH"
    )]
    cell_secret_file: Option<std::path::PathBuf>,
}

/// `1=HOST:PORT,2=HOST:PORT,...`
fn parse_cell(text: &str) -> Result<std::collections::BTreeMap<u64, String>, String> {
    let mut members: std::collections::BTreeMap<u64, String> = std::collections::BTreeMap::new();
    for member in text.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let (id, addr) = member
            .split_once('=')
            .ok_or_else(|| format!("{member:?} is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("{id:?} in {member:?} is not a member id (a number)"))?;
        let addr = addr.trim();
        if addr.contains('=') || addr.contains(|c: char| c == ';' || c.is_whitespace()) {
            return Err(format!(
                "{member:?} is not ID=HOST:PORT: separate the members with commas"
            ));
        }
        if host_port(addr).is_err() {
            return Err(format!(
                "{member:?} is not ID=HOST:PORT: the address needs a host and a port"
            ));
        }
        if let Some((other, _)) = members.iter().find(|(_, a)| a.as_str() == addr) {
            return Err(format!("members {other} and {id} are both at {addr}"));
        }
        if members.insert(id, addr.to_string()).is_some() {
            return Err(format!("member {id} is named twice"));
        }
    }
    if members.is_empty() {
        return Err("a cell has one member at least".into());
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::parse_cell;

    #[test]
    fn a_cell_names_each_member_once_at_an_address_with_a_port() {
        let cell = parse_cell("1=10.0.0.1:7171, 2=[::1]:7171").unwrap();
        assert_eq!(cell[&2], "[::1]:7171");
        let no_port = parse_cell("1=127.0.0.1").unwrap_err();
        assert!(no_port.contains("needs a host and a port"), "{no_port}");
        assert!(parse_cell("1=:7171").is_err());
        let shared = parse_cell("1=127.0.0.1:7171,2=127.0.0.1:7171").unwrap_err();
        assert!(shared.contains("members 1 and 2"), "{shared}");
        assert!(parse_cell("1=a:1,1=b:2").unwrap_err().contains("twice"));
    }

    #[test]
    fn a_cell_list_separated_by_anything_but_commas_is_refused() {
        for list in [
            "1=127.0.0.1:7171;2=127.0.0.1:7172",
            "1=127.0.0.1:7171 2=127.0.0.1:7172",
        ] {
            let refused = parse_cell(list).unwrap_err();
            assert!(
                refused.contains("separate the members with commas"),
                "{refused}"
            );
        }
    }
}

#[derive(Subcommand)]
enum CellCommand {
    /// Every member's role, whether it serves as master, the epoch, its
    /// log and applied index, and on the leader each member's lag: the
    /// members --addr names and every member the cell's configuration
    /// names. Exit status 69 when no member serves as master.
    Status,
    /// Add member ID, which the others reach at ADDR, as a voter: start it
    /// first with `serve --join`. It catches up before it votes. Exit
    /// status 3 when the leader gave no answer within --request-timeout
    /// (the change may still be carried out: see `cell status`).
    Add {
        /// ID=HOST:PORT
        #[arg(value_parser = parse_member)]
        member: (u64, String),
        #[command(flatten)]
        right: ChangeRight,
    },
    /// Remove member ID from the cell; stop its process afterwards. Exit
    /// status 3 as for `add`.
    Remove {
        id: u64,
        #[command(flatten)]
        right: ChangeRight,
    },
}

/// The operator's right to change a cell's members (`CELL-10`): the
/// operator token (`--operator-token-file`) if the members have one,
/// otherwise the cell's secret.
#[derive(clap::Args)]
struct ChangeRight {
    /// The cell's secret, which a change of members presents when the
    /// members have no operator token.
    #[arg(long, env = "LEASEHOLD_CELL_SECRET_FILE", value_name = "PATH")]
    cell_secret_file: Option<std::path::PathBuf>,
}

impl ChangeRight {
    /// The credential to present: the operator token if there is one,
    /// else the cell's secret.
    fn credential(&self) -> anyhow::Result<String> {
        if let Some(token) = OPERATOR_TOKEN.get().cloned().flatten() {
            return Ok(token);
        }
        match &self.cell_secret_file {
            Some(path) => read_secret(path, "cell secret"),
            None => Err(ConfigError {
                status: USAGE,
                why: "changing the cell's members needs the operator's right: \
                      --operator-token-file (LEASEHOLD_OPERATOR_TOKEN_FILE) if the members have \
                      an operator token, otherwise --cell-secret-file (LEASEHOLD_CELL_SECRET_FILE)"
                    .into(),
            }
            .into()),
        }
    }
}

/// `ID=HOST:PORT`
fn parse_member(text: &str) -> Result<(u64, String), String> {
    let members = parse_cell(text)?;
    match members.into_iter().collect::<Vec<_>>()[..] {
        [(id, ref addr)] => Ok((id, addr.clone())),
        _ => Err("name one member: ID=HOST:PORT".into()),
    }
}

#[derive(Subcommand)]
enum SessionCommand {
    /// Create a session and print its token (`<id>:<secret>`): what another
    /// process needs to act for it (`session keep --attach`, `session
    /// destroy`). It stays on the master until its lease runs out, unless
    /// something keeps it alive.
    Create(SessionArgs),
    /// Show a session.
    Info {
        /// The session's id (or its token).
        #[arg(value_name = "ID")]
        target: String,
    },
    /// List live sessions.
    List,
    /// Destroy a session: given its token, as its owner; given only its id,
    /// as the operator (with --operator-token-file when the master has one).
    Destroy {
        /// The session's token, or its id.
        #[arg(value_name = "TOKEN|ID")]
        target: String,
    },
    /// Create a session (or take over one with --attach), keep it alive,
    /// and print each state it enters (normal, jeopardy, safe, expired)
    /// until interrupted, then destroy it.
    Keep {
        #[command(flatten)]
        session: SessionArgs,
        /// Keep alive the session with this token (as `session create`
        /// printed it) instead of creating one.
        #[arg(long, value_name = "TOKEN")]
        attach: Option<leasehold::SessionToken>,
        /// Grace period after jeopardy before the session is taken as expired.
        #[arg(long, value_parser = duration::parse, default_value = "45s")]
        grace: Duration,
    },
}

// Exit statuses, as sysexits.h numbers them where it has a name for the
// outcome; README.md lists them.
/// "No": the thing asked about does not exist, or the check failed.
pub(crate) const NOT_FOUND: u8 = 1;
/// The command line was wrong (EX_USAGE).
pub(crate) const USAGE: u8 = 64;
/// The input was malformed, e.g. not a sequencer (EX_DATAERR).
pub(crate) const MALFORMED: u8 = 65;
/// The request may or may not have been carried out: no answer came in
/// time, or the connection broke with it in flight (`Remedy::OutcomeUnknown`).
pub(crate) const OUTCOME_UNKNOWN: u8 = 3;
/// The master refused: this client lacks the right (EX_NOPERM).
pub(crate) const NO_PERMISSION: u8 = 77;
/// The master could not be reached (EX_UNAVAILABLE).
pub(crate) const UNREACHABLE: u8 = 69;
/// Exit status for "the lock is held by others; try again later" (as
/// sysexits' EX_TEMPFAIL): `lock --try`, or a `--timeout` that ran out.
pub(crate) const BUSY: u8 = 75;
/// This client's own configuration does not work (EX_CONFIG): a token or
/// TLS file cannot be read or holds no secret or certificate, or the
/// master does not accept this client's TLS settings. Nothing was sent.
pub(crate) const CONFIG: u8 = 78;

/// An input file cannot be read (EX_NOINPUT): `snapshot status` or
/// `restore` of a file that is not there.
pub(crate) const NO_INPUT: u8 = 66;

/// An output file or directory cannot be made (EX_CANTCREAT): `snapshot
/// restore` into a directory that is not empty.
pub(crate) const CANT_CREATE: u8 = 73;

/// The data directory could not be read or written (EX_IOERR): `serve`.
pub(crate) const IO_ERROR: u8 = 74;

/// The exit status of an error that is not a client's: `serve` that could
/// not start, or a command's own configuration. Sorted, as README's table
/// says, by what to look at: the command line (64), the data directory's
/// contents (65), its disk (74), a process that holds it (75), the
/// address (69), or the settings (78).
fn setup_status(e: &anyhow::Error) -> u8 {
    use leasehold_server::{cell::MemberError, ServerError, StoreError};
    fn store(e: &StoreError) -> u8 {
        match e {
            StoreError::Corrupt { .. } => MALFORMED,
            StoreError::InUse { .. } => BUSY,
            StoreError::Io { .. } | StoreError::RecoveredTwice => IO_ERROR,
        }
    }
    if let Some(e) = e.downcast_ref::<ConfigError>() {
        return e.status;
    }
    if let Some(e) = e.downcast_ref::<StoreError>() {
        return store(e);
    }
    match e.downcast_ref::<ServerError>() {
        Some(ServerError::Store(e)) => return store(e),
        Some(ServerError::Config(_)) => return CONFIG,
        Some(ServerError::StoreFailed) => return IO_ERROR,
        None => {}
    }
    match e.downcast_ref::<MemberError>() {
        Some(MemberError::Store(e)) => return store(e),
        Some(MemberError::Config(_)) => return CONFIG,
        Some(MemberError::Engine(_)) | None => {}
    }
    if e.downcast_ref::<leasehold_server::ConfigError>().is_some() {
        return CONFIG;
    }
    1
}

/// `text` with its control characters escaped: an error may quote what a
/// user or another client typed, which must not rewrite the terminal.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Restores the default action of SIGPIPE, which Rust programs ignore: a
/// command whose reader went away (`leasehold ls | head -1`) then ends
/// quietly, as other tools do, instead of panicking on its next line.
/// Commands that run a master or supervise another command keep ignoring
/// it: they must never die of a reader's exit.
#[cfg(unix)]
fn end_quietly_when_the_reader_exits() {
    // SAFETY: signal(2) before any thread starts; no memory is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Raises the soft limit on open files to the hard limit: every client
/// connection is a descriptor, and the usual soft limit (1024) is far below
/// what a master serves.
#[cfg(unix)]
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    let raised = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        let before = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        (before < limit.rlim_max && libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0)
            .then_some((before, limit.rlim_max))
    };
    match raised {
        Some((from, to)) => tracing::info!(from, to, "raised the open files limit"),
        None => tracing::debug!(limit = limit.rlim_cur, "open files limit"),
    }
}

/// The operator token this process presents, read once from
/// `--operator-token-file`.
pub(crate) static OPERATOR_TOKEN: OnceLock<Option<String>> = OnceLock::new();

/// The bearer token this process authenticates with, read once from
/// `--token-file`.
static BEARER_TOKEN: OnceLock<Option<String>> = OnceLock::new();

/// A master's address, or a cell's members' separated by commas, each
/// HOST:PORT: refused at once (exit status 64) when it is not one, rather
/// than found unreachable.
fn addr_arg(text: &str) -> Result<String, String> {
    for part in text.split(',').map(str::trim) {
        if let Err(why) = host_port(part) {
            return Err(format!(
                "'{}' is not HOST:PORT (e.g. 127.0.0.1:7171){why}",
                part.escape_debug()
            ));
        }
    }
    Ok(text.to_string())
}

/// Whether `addr` is one HOST:PORT: a host name or an IPv4 address, or an
/// IPv6 address in brackets, and a port from 0 to 65535 (port 0 is how
/// `serve` is told to pick a free port). `Err` carries a hint for the
/// mistakes people make: another separator than a comma between
/// addresses, or a member of `serve --cell`'s list given to a client.
fn host_port(addr: &str) -> Result<(), String> {
    let hint = if addr.contains('=') {
        "; ID=HOST:PORT is how `serve --cell` names members: give clients HOST:PORT alone"
    } else if addr.contains(|c: char| c == ';' || c.is_whitespace()) {
        "; separate a cell's members' addresses with commas"
    } else {
        "; a cell is its members' addresses separated by commas"
    };
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(hint.into());
    };
    let host_ok = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    };
    if host_ok && port.parse::<u16>().is_ok() {
        Ok(())
    } else {
        Err(hint.into())
    }
}

/// A key as a user may type it: `jobs/x`, or `/jobs/x` as ZooKeeper and
/// etcd users write it; the master's keys have no leading `/` (`NS-1`).
fn key_arg(text: &str) -> Result<String, String> {
    Ok(text.strip_prefix('/').unwrap_or(text).to_string())
}

/// How every client this process makes speaks TLS (`--tls-ca` and friends).
pub(crate) static CLIENT_TLS: OnceLock<Option<leasehold::TlsOptions>> = OnceLock::new();

/// Clients' TLS flags given to `serve`, which it does not use.
static IGNORED_BY_SERVE: OnceLock<Vec<&'static str>> = OnceLock::new();

/// `--tls-cert`, `--tls-key`: for `serve`, the master's certificate.
static SERVER_TLS: OnceLock<Option<(std::path::PathBuf, std::path::PathBuf)>> = OnceLock::new();

/// `--request-timeout`, for every client this process makes.
pub(crate) static REQUEST_TIMEOUT: OnceLock<Duration> = OnceLock::new();

/// Reads an operator token: the file's contents without surrounding
/// whitespace, so a trailing newline from `echo` does not count.
fn read_operator_token(path: &std::path::Path) -> anyhow::Result<String> {
    read_secret(path, "operator token")
}

/// A local file or setting this client needs is missing or does not
/// work: found before anything is sent, with the exit status it gets
/// ([`CONFIG`], or [`USAGE`] for a flag the command needs).
#[derive(Debug)]
pub(crate) struct ConfigError {
    status: u8,
    why: String,
}

impl ConfigError {
    fn config(why: String) -> ConfigError {
        ConfigError {
            status: CONFIG,
            why,
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for ConfigError {}

/// The secret in the file at `path`, trimmed; `what` names it in errors.
fn read_secret(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::config(format!(
            "cannot read the {what} file {}: {e}",
            path.display()
        ))
    })?;
    let secret = text.trim().to_string();
    if secret.is_empty() {
        let why = format!("the {what} file {} is empty", path.display());
        return Err(ConfigError::config(why).into());
    }
    Ok(secret)
}

/// Warns when users other than the owner may read the `what` file at
/// `path`: whoever reads a cell's secret may speak Raft to its members.
fn warn_if_others_may_read(path: &std::path::Path, what: &str) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                "other users may read the {what} file {} (mode {mode:03o}): `chmod 600` it",
                path.display()
            );
        }
    }
}

/// A client of the master at `addr`, presenting the operator token if one
/// was given.
pub(crate) async fn connect(addr: &str) -> Result<Client, ClientError> {
    let operator_token = OPERATOR_TOKEN.get().cloned().flatten();
    // A bearer token, or else the operator token, is who every connection
    // acts as (`ID-2`).
    let token = BEARER_TOKEN
        .get()
        .cloned()
        .flatten()
        .or_else(|| operator_token.clone());
    let mut config = ClientConfig {
        operator_token,
        tls: CLIENT_TLS.get().cloned().flatten(),
        token,
        ..ClientConfig::default()
    };
    if let Some(timeout) = REQUEST_TIMEOUT.get() {
        config.request_timeout = *timeout;
    }
    Client::connect_with(addr, config).await
}

/// How `serve` writes its log.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The arguments as parsed, with what the config file added to them.
static ARGUMENTS: OnceLock<(Vec<std::ffi::OsString>, config_file::FromFile)> = OnceLock::new();

fn main() -> ExitCode {
    let (argv, from_file) = match config_file::with_config(std::env::args_os().collect()) {
        Ok(configured) => configured,
        Err(why) => {
            eprintln!("leasehold: {why}");
            return ExitCode::from(CONFIG);
        }
    };
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            if let (Some(file), false) = (&from_file.file, from_file.keys.is_empty()) {
                let keys: Vec<&str> = from_file.keys.iter().map(String::as_str).collect();
                eprintln!(
                    "leasehold: the config file {} gave {} as flags",
                    file.display(),
                    keys.join(", ")
                );
            }
            // Help and version are what was asked for, not errors.
            return if e.use_stderr() {
                ExitCode::from(USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::SupervisorGuard => return run::guard(),
        Command::Completions { shell } => {
            #[cfg(unix)]
            end_quietly_when_the_reader_exits();
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "leasehold", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    #[cfg(unix)]
    if !matches!(
        cli.command,
        Command::Serve(_)
            | Command::Lock { .. }
            | Command::Elect { .. }
            | Command::Semaphore { .. }
    ) {
        end_quietly_when_the_reader_exits();
    }
    if matches!(&cli.command, Command::Serve(args) if args.print_config) {
        #[cfg(unix)]
        end_quietly_when_the_reader_exits();
        config_file::print(&argv, &from_file);
        return ExitCode::SUCCESS;
    }
    let json_log =
        matches!(&cli.command, Command::Serve(args) if args.log_format == LogFormat::Json);
    let _ = ARGUMENTS.set((argv, from_file));
    // The replication engine's own account (state dumps, several lines
    // per call to a member that is down, a call every heartbeat) only when
    // RUST_LOG asks for it: the cell logs a member's reach changing once.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=off"));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json_log {
        log.json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        log.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let token = match cli.operator_token_file.as_deref().map(read_operator_token) {
        None => None,
        Some(Ok(token)) => Some(token),
        Some(Err(e)) => {
            eprintln!("leasehold: {}", printable(&format!("{e:#}")));
            return ExitCode::from(CONFIG);
        }
    };
    let _ = OPERATOR_TOKEN.set(token);
    let bearer = match cli.token_file.as_deref().map(|p| read_secret(p, "token")) {
        None => None,
        Some(Ok(token)) => Some(token),
        Some(Err(e)) => {
            eprintln!("leasehold: {}", printable(&format!("{e:#}")));
            return ExitCode::from(CONFIG);
        }
    };
    let _ = BEARER_TOKEN.set(bearer);
    let _ = REQUEST_TIMEOUT.set(cli.request_timeout);
    if matches!(cli.command, Command::Serve(_)) {
        let _ = SERVER_TLS.set(cli.tls_cert.clone().zip(cli.tls_key.clone()));
        // Said once logging is up (in `serve`): these are clients' flags.
        let _ = IGNORED_BY_SERVE.set(
            [
                cli.tls_ca.as_ref().map(|_| {
                    "--tls-ca (LEASEHOLD_TLS_CA) is a client's flag and serve does not use it; \
                     to ask clients for a certificate, give serve --tls-client-ca"
                }),
                cli.tls_server_name.as_ref().map(|_| {
                    "--tls-server-name (LEASEHOLD_TLS_SERVER_NAME) is a client's flag, the name \
                     it checks the master's certificate against; serve does not use it"
                }),
            ]
            .into_iter()
            .flatten()
            .collect(),
        );
    } else {
        match cli.client_tls() {
            Ok(tls) => {
                let _ = CLIENT_TLS.set(tls);
            }
            Err(e) => {
                eprintln!("leasehold: {e:#}");
                return ExitCode::from(USAGE);
            }
        }
    }
    let given_addr = cli.addr.clone();
    let addr = cli.addr.unwrap_or_else(|| DEFAULT_ADDR.to_string());
    runtime.block_on(async {
        let result = match cli.command {
            Command::Serve(args) => serve(*args, given_addr, cli.json).await,
            Command::Session(command) => session::session(&addr, cli.json, command).await,
            Command::Check(command) => check::check(&addr, cli.json, command).await,
            Command::Acl(command) => access::acl(&addr, cli.json, command).await,
            Command::Token(command) => access::token(&addr, cli.json, command).await,
            Command::Whoami => access::whoami(&addr, cli.json).await,
            Command::Locks { prefix } => ops::locks(&addr, cli.json, &prefix).await,
            Command::Status => ops::status(&addr, cli.json).await,
            Command::Snapshot(command) => snapshot::snapshot(&addr, cli.json, command).await,
            Command::Cell(CellCommand::Status) => cell::status(&addr, cli.json).await,
            Command::Cell(CellCommand::Add {
                member: (id, member),
                right,
            }) => {
                let change = leasehold_server::cell::Change::Add { id, addr: member };
                match right.credential() {
                    Ok(credential) => cell::change(&addr, cli.json, change, credential).await,
                    Err(e) => Err(e),
                }
            }
            Command::Cell(CellCommand::Remove { id, right }) => {
                let change = leasehold_server::cell::Change::Remove { id };
                match right.credential() {
                    Ok(credential) => cell::change(&addr, cli.json, change, credential).await,
                    Err(e) => Err(e),
                }
            }
            Command::Watch {
                key,
                from_index,
                name,
                lease,
            } => {
                let watching = recipes::Watching {
                    from_index,
                    name,
                    lease,
                };
                recipes::watch(&addr, cli.json, key, watching).await
            }
            Command::Lock {
                key,
                shared,
                timeout,
                try_once,
                value,
                session,
                run,
            } => {
                let wait = if try_once {
                    recipes::Wait::TryOnce
                } else {
                    recipes::Wait::Up(timeout)
                };
                recipes::lock(&addr, key, shared, wait, value, session, run).await
            }
            Command::Elect {
                key,
                value,
                session,
                run,
            } => recipes::elect(&addr, key, value, session, run).await,
            Command::Leader { key, follow } => recipes::leader(&addr, cli.json, key, follow).await,
            Command::Semaphore {
                prefix,
                limit,
                value,
                session,
                run,
            } => recipes::semaphore(&addr, prefix, limit, value, session, run).await,
            Command::SupervisorGuard | Command::Completions { .. } => {
                unreachable!("handled before the runtime starts")
            }
            command => kv::kv(&addr, cli.json, command).await,
        };
        match result {
            Ok(code) => code,
            Err(e) => {
                let client = e.downcast_ref::<ClientError>();
                let code = match client {
                    None => setup_status(&e),
                    Some(ClientError::Connect { .. }) => UNREACHABLE,
                    Some(ClientError::Tls(_)) => CONFIG,
                    Some(e) if e.code() == Some(leasehold::ErrorCode::PermissionDenied) => {
                        NO_PERMISSION
                    }
                    Some(e) if e.remedy() == Remedy::OutcomeUnknown => OUTCOME_UNKNOWN,
                    _ => 1,
                };
                let mut said = printable(&format!("{e:#}"));
                if code == OUTCOME_UNKNOWN {
                    said.push_str(
                        ": the outcome is unknown, the request may or may not have been carried \
                         out; read before repeating it",
                    );
                }
                eprintln!("leasehold: {said}");
                ExitCode::from(code)
            }
        }
    })
}

async fn serve(args: ServeArgs, addr: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    if let Some((_, from_file)) = ARGUMENTS.get() {
        if let Some(file) = &from_file.file {
            tracing::info!(config = %file.display(), keys = ?from_file.keys, "settings from a config file, under flags and LEASEHOLD_* variables");
        }
    }
    // `--listen` says where to listen; without it, the address clients are
    // given (`--addr`, `LEASEHOLD_ADDR`) is where they will look for it. A
    // cell's member listens where `--cell` says others reach it: clients'
    // `--addr` names every member, so it is no guide.
    let own = match (&args.cell, args.node) {
        (Some(members), Some(node)) => Some(members.get(&node).cloned()),
        _ => None,
    };
    let addr = match own {
        Some(own) => own,
        None => addr,
    };
    let (listen, from) = match (args.listen.clone(), addr) {
        // `--listen` overrides where clients look (LEASEHOLD_ADDR, set for
        // them, or --addr), as a flag overrides the environment.
        (Some(listen), _) => (listen, ""),
        (None, Some(addr)) => (addr, " (from --addr or LEASEHOLD_ADDR)"),
        (None, None) => (DEFAULT_ADDR.to_string(), ""),
    };
    // Before the data directory is opened (which may create it): an
    // address with no port to listen on is the command line's mistake.
    if !listen
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    {
        return Err(ConfigError {
            status: USAGE,
            why: format!(
                "cannot listen on {}{from}: give HOST:PORT, with a port from 0 to 65535",
                printable(&listen)
            ),
        }
        .into());
    }
    #[cfg(unix)]
    raise_open_files_limit();
    let mut config = leasehold_server::Config {
        default_lease: args.default_lease,
        min_lease: args.min_lease,
        max_lease: args.max_lease,
        keepalive_margin: args.keepalive_margin,
        max_frame: args.max_frame,
        max_connections: args.max_connections,
        max_connections_per_peer: args.max_connections_per_peer,
        reply_budget: args.reply_budget,
        idle_timeout: args.idle_timeout,
        http_hosts: args.http_host.clone(),
        disk_reserve: args.disk_reserve,
        max_checks_per_peer: args.max_checks_per_peer,
        max_sessions: args.max_sessions,
        max_sessions_per_peer: args.max_sessions_per_peer,
        max_subscriptions_per_peer: args.max_subscriptions_per_peer,
        max_waiters_per_peer: args.max_waiters_per_peer,
        max_bytes_per_peer: args.max_bytes_per_peer,
        operator_token: OPERATOR_TOKEN.get().cloned().flatten(),
        ..Default::default()
    };
    // Before anything is announced: a data directory another master holds
    // is refused here, and nobody is told of an address that never serves.
    // Checked before the data directory is opened, which may create it or
    // cut a torn log tail: a refused configuration leaves it untouched.
    config.validate()?;
    warn_about_margin(&config);
    config.tls = server_tls(&args).map_err(|e| ConfigError::config(format!("{e:#}")))?;
    if let Some(path) = &args.audit_log {
        let audit = leasehold_server::AuditConfig {
            max_bytes: args.audit_log_max_bytes,
            keep: args.audit_log_keep,
            ..leasehold_server::AuditConfig::at(path)
        };
        let log = leasehold_server::AuditLog::open(&audit)
            .with_context(|| format!("cannot open the audit log {}", path.display()))?;
        tracing::info!(path = %path.display(), "writing the audit log");
        config.audit = Some(log);
    }
    // Bound before anything is announced, as the client port is.
    let http = match &args.http_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| ConfigError {
                    status: UNREACHABLE,
                    why: format!("cannot listen on {addr} (--http-listen): {e}"),
                })?,
        ),
        None => None,
    };
    if let (Some(members), Some(node)) = (args.cell.clone(), args.node) {
        config.metrics = leasehold_server::Metrics::for_member();
        return serve_member(args, config, members, node, (listen, from), http, json).await;
    }
    let data_dir = (!args.in_memory).then_some(&args.data_dir);
    // A directory this start creates holds nothing anybody was told of
    // until the master listens: if it cannot, the directory goes with the
    // failed start, so a port in use leaves no disk reserve behind.
    let created = data_dir.filter(|dir| !dir.exists()).cloned();
    let server = match data_dir {
        Some(dir) => {
            leasehold_server::Server::open(config.clone(), leasehold_server::FileStore::open(dir)?)?
        }
        None => leasehold_server::Server::volatile(config.clone())?,
    };
    let (listener, addr, stop) = match listen_until_stopped(&listen, from, json).await {
        Ok(bound) => bound,
        Err(e) => {
            drop(server);
            if let Some(dir) = &created {
                let _ = std::fs::remove_dir_all(dir);
            }
            return Err(e);
        }
    };
    match data_dir {
        Some(dir) => tracing::info!(%addr, data_dir = %dir.display(), "serving"),
        None => tracing::warn!(%addr, "serving IN MEMORY ONLY: a restart forgets everything"),
    }
    warn_without_operator_token(&config);
    warn_without_tls(&config, addr, false);
    if let Some(tls) = config.tls.clone() {
        tracing::info!(
            cert = %tls.files().cert.display(),
            clients = if tls.mutual() { "must present a certificate the client CA signed" } else { "present no certificate" },
            "speaking TLS; SIGHUP reads the files again"
        );
        reload_on_hangup(tls)?;
    }
    let server = match http {
        Some(http) => {
            let scheme = if config.tls.is_some() {
                "https"
            } else {
                "http"
            };
            announce_http(&http, json, scheme, "status page, metrics and health")?;
            server.with_http(http)
        }
        None => server,
    };
    server.serve(listener, stop).await?;
    Ok(ExitCode::SUCCESS)
}

/// The master's TLS, as --tls-cert, --tls-key and --tls-client-ca say.
fn server_tls(args: &ServeArgs) -> anyhow::Result<Option<leasehold_server::ServerTls>> {
    for ignored in IGNORED_BY_SERVE.get().into_iter().flatten() {
        tracing::warn!("{ignored}");
    }
    let Some((cert, key)) = SERVER_TLS.get().cloned().flatten() else {
        if args.tls_client_ca.is_some() {
            anyhow::bail!("--tls-client-ca needs --tls-cert and --tls-key: the master's own");
        }
        return Ok(None);
    };
    if args.cell.is_some() && args.tls_client_ca.is_none() {
        anyhow::bail!(
            "a cell's members speaking TLS verify each other's certificates: give \
             --tls-client-ca, the CA that signed every member's certificate"
        );
    }
    let files = leasehold_server::TlsFiles {
        cert,
        key,
        client_ca: args.tls_client_ca.clone(),
    };
    Ok(Some(leasehold_server::ServerTls::load(files)?))
}

/// Reads the TLS files again on each SIGHUP (`TLS-4`): connections from
/// then on use them; a bad file is logged and the old ones stay in force.
fn reload_on_hangup(tls: leasehold_server::ServerTls) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = signal(SignalKind::hangup()).context("cannot catch SIGHUP")?;
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                match tls.reload() {
                    Ok(()) => tracing::info!("SIGHUP: TLS certificate and key read again"),
                    Err(error) => tracing::error!(
                        %error,
                        "SIGHUP: the new TLS files are refused; the previous ones stay in force"
                    ),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = tls;
    Ok(())
}

/// Says at start that a master listening beyond loopback without TLS
/// sends every secret and value in the clear (`TLS-1`).
fn warn_without_tls(config: &leasehold_server::Config, addr: std::net::SocketAddr, member: bool) {
    if config.tls.is_none() && !addr.ip().is_loopback() {
        let remedy = if member {
            "; give every member --tls-cert, --tls-key and --tls-client-ca (the cell's CA)"
        } else {
            "; give the master --tls-cert and --tls-key"
        };
        tracing::warn!(
            %addr,
            "listening beyond loopback without TLS: session secrets, tokens and every value \
             cross the network in the clear{remedy}"
        );
    }
}

/// Binds `listen` and announces where it listens (on stdout, so scripts
/// and tests can learn the port of `--listen :0`); the future resolves on
/// SIGINT or SIGTERM.
async fn listen_until_stopped(
    listen: &str,
    from: &str,
    json: bool,
) -> anyhow::Result<(
    tokio::net::TcpListener,
    std::net::SocketAddr,
    impl std::future::Future<Output = ()> + Send,
)> {
    let signal = signals::stop_requested(false).context("cannot catch SIGINT and SIGTERM")?;
    let stop = async move {
        let signal = signal.await;
        tracing::info!("{signal}: shutting down");
    };
    let listener = leasehold_server::bind(listen).await.map_err(|e| {
        // A port that is not one is the command line's fault; an address
        // in use, or not this host's, is the address's.
        let status = if e.kind() == std::io::ErrorKind::InvalidInput {
            USAGE
        } else {
            UNREACHABLE
        };
        ConfigError {
            status,
            why: format!("cannot listen on {listen}{from}: {e}"),
        }
    })?;
    let addr = listener.local_addr()?;
    if json {
        println!("{}", serde_json::json!({ "listening": addr.to_string() }));
    } else {
        println!("listening on {addr}");
    }
    Ok((listener, addr, stop))
}

/// Says at start when `--keepalive-margin` is past a quarter of the
/// longest lease: every session's margin is then a quarter of its lease
/// (`KA-2`), and the flag changes nothing a session sees.
fn warn_about_margin(config: &leasehold_server::Config) {
    if config.keepalive_margin > config.max_lease / 4 {
        tracing::warn!(
            "--keepalive-margin {:?} is more than a quarter of the longest lease (--max-lease \
             {:?}): every session's margin is capped at a quarter of its lease",
            config.keepalive_margin,
            config.max_lease
        );
    }
}

/// Says at start, on a single master and on each cell member alike, that
/// without an operator token anyone may end any session.
fn warn_without_operator_token(config: &leasehold_server::Config) {
    if config.operator_token.is_none() {
        tracing::warn!(
            "no --operator-token-file: any client may destroy any session and delete locked \
             nodes; give the master an operator token to allow that to owners and the operator only"
        );
    }
}

/// `serve --cell ... --node ID`: one member of a replicated cell.
/// Says where the HTTP port listens: a line, or a JSON object. Whoever
/// started the server may have stopped reading its output once it said
/// where it listens: a closed stdout must not stop the server.
fn announce_http(
    http: &tokio::net::TcpListener,
    json: bool,
    scheme: &str,
    what: &str,
) -> anyhow::Result<()> {
    use std::io::Write;
    let at = http.local_addr()?;
    let line = if json {
        serde_json::json!({ "http": at.to_string() }).to_string()
    } else {
        format!("{what} on {scheme}://{at}")
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    Ok(())
}

async fn serve_member(
    args: ServeArgs,
    config: leasehold_server::Config,
    members: std::collections::BTreeMap<u64, String>,
    node: u64,
    (listen, from): (String, &str),
    http: Option<tokio::net::TcpListener>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if !members.contains_key(&node) {
        return Err(ConfigError {
            status: USAGE,
            why: format!(
                "--node {node} is not among the members --cell names ({})",
                members
                    .keys()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
        .into());
    }
    let secret = match &args.cell_secret_file {
        Some(path) => {
            warn_if_others_may_read(path, "cell secret");
            Some(read_secret(path, "cell secret")?)
        }
        // Peers prove themselves by their certificates (`CELL-11`).
        None if config.tls.is_some() => None,
        None => {
            tracing::warn!(
                "no --cell-secret-file: anyone who reaches this member's port and knows the \
                 cell's name can speak Raft to it"
            );
            None
        }
    };
    let member = leasehold_server::cell::MemberConfig {
        cell: args.cell_id.clone(),
        secret,
        id: node,
        members,
        storage: leasehold_server::cell::Storage::Dir(args.data_dir.clone()),
        timing: Default::default(),
        snapshot_every: leasehold_server::cell::DEFAULT_SNAPSHOT_EVERY,
        broken: Default::default(),
        join: args.join,
    };
    // Said at once, as the settings are read: the member's start waits
    // (CELL-5) before it listens.
    warn_without_operator_token(&config);
    // The data directory first: one refused (in use, another member's,
    // unreadable) is reported before any port is announced.
    let dialer = std::sync::Arc::new(leasehold_server::cell::TcpDialer);
    let member = leasehold_server::cell::start_member(&config, member, dialer).await?;
    let (listener, addr, stop) = match listen_until_stopped(&listen, from, json).await {
        Ok(bound) => bound,
        Err(e) => {
            member.shutdown().await;
            return Err(e);
        }
    };
    tracing::info!(%addr, node, cell = %args.cell_id, data_dir = %args.data_dir.display(), "serving as a cell member");
    warn_without_tls(&config, addr, true);
    if let Some(tls) = config.tls.clone() {
        tracing::info!(
            cert = %tls.files().cert.display(),
            "speaking TLS to clients and peers; a peer must present the certificate of the \
             member it says it is; SIGHUP reads the files again"
        );
        reload_on_hangup(tls)?;
    }
    if let Some(http) = &http {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        announce_http(http, json, scheme, "status page, metrics and health")?;
    }
    leasehold_server::cell::serve_member_with_http(listener, config, member, http, stop).await?;
    Ok(ExitCode::SUCCESS)
}
