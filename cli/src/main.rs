//! The `leasehold` command: run a master, or talk to one.

mod duration;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use leasehold::{
    Behavior, Client, ClientError, DeleteOptions, ErrorCode, NodeView, PutOptions, Sequencer,
    SessionId, SessionInfo, SessionOptions,
};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Leasehold: a lock service with Chubby's session semantics"
)]
struct Cli {
    /// Address of the master.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_ADDR",
        default_value = "127.0.0.1:7171"
    )]
    addr: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a master.
    Serve(ServeArgs),
    /// Create, inspect, destroy or keep sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Print a node's contents (or its metadata with --stat).
    Get {
        key: String,
        /// Print the metadata instead of the contents.
        #[arg(long)]
        stat: bool,
    },
    /// Write a node and print its new modify index.
    Put {
        key: String,
        value: String,
        /// Write only if the node's modify index is N (0: only if absent).
        #[arg(long, value_name = "N")]
        cas: Option<u64>,
        /// Opaque flags stored with the node.
        #[arg(long, default_value_t = 0)]
        flags: u64,
    },
    /// Delete a node and print the keys deleted.
    Delete {
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
        #[arg(default_value = "")]
        prefix: String,
        /// List every key below the prefix.
        #[arg(long)]
        recursive: bool,
    },
    /// Check a sequencer (hex, as in LEASEHOLD_SEQUENCER): exit 0 if it
    /// names a current holding, 1 if not.
    CheckSequencer { sequencer: String },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7171")]
    listen: String,
    /// Directory for durable state.
    #[arg(long, default_value = "./leasehold-data")]
    data_dir: std::path::PathBuf,
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
}

#[derive(Subcommand)]
enum SessionCommand {
    /// Create a session and print its id. It stays on the master until its
    /// lease runs out, unless something keeps it alive.
    Create(SessionArgs),
    /// Show a session.
    Info { id: SessionId },
    /// List live sessions.
    List,
    /// Destroy a session (any session: operators may need to).
    Destroy { id: SessionId },
    /// Create a session, keep it alive, and print each state it enters
    /// (normal, jeopardy, safe, expired) until interrupted.
    Keep {
        #[command(flatten)]
        session: SessionArgs,
        /// Grace period after jeopardy before the session is taken as expired.
        #[arg(long, value_parser = duration::parse, default_value = "45s")]
        grace: Duration,
    },
}

#[derive(clap::Args)]
struct SessionArgs {
    /// A label for people.
    #[arg(long, default_value = "cli")]
    name: String,
    /// Lease to ask for (default: the master's).
    #[arg(long, value_parser = duration::parse)]
    lease: Option<Duration>,
    /// Lock-delay to ask for; 0s means none (default: 15s).
    #[arg(long, value_parser = duration::parse)]
    lock_delay: Option<Duration>,
    /// What happens to the session's locks when it is invalidated.
    #[arg(long, value_enum, default_value_t = BehaviorArg::Release)]
    behavior: BehaviorArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum BehaviorArg {
    Release,
    Delete,
}

impl SessionArgs {
    fn options(&self) -> SessionOptions {
        let mut options = SessionOptions::new(self.name.clone()).behavior(match self.behavior {
            BehaviorArg::Release => Behavior::Release,
            BehaviorArg::Delete => Behavior::Delete,
        });
        options.lease = self.lease;
        options.lock_delay = self.lock_delay;
        options
    }
}

/// Exit status for "the thing asked about does not exist".
const NOT_FOUND: u8 = 1;
/// Exit status for "the master could not be reached".
const UNREACHABLE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let result = match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Session(command) => session(&cli.addr, cli.json, command).await,
            command => kv(&cli.addr, cli.json, command).await,
        };
        match result {
            Ok(code) => code,
            Err(e) => {
                let code = match e.downcast_ref::<ClientError>() {
                    Some(ClientError::Connect { .. }) => UNREACHABLE,
                    _ => 1,
                };
                eprintln!("leasehold: {e:#}");
                ExitCode::from(code)
            }
        }
    })
}

async fn kv(addr: &str, json: bool, command: Command) -> anyhow::Result<ExitCode> {
    let client = Client::connect(addr).await?;
    match command {
        Command::Get { key, stat } => {
            let Some(node) = (if stat {
                client.stat(&key).await?.map(|stat| NodeView {
                    key: key.clone(),
                    stat,
                    contents: None,
                })
            } else {
                client.get(&key).await?
            }) else {
                eprintln!("leasehold: no node at {key}");
                return Ok(ExitCode::from(NOT_FOUND));
            };
            print_node(&node, json);
        }
        Command::Put {
            key,
            value,
            cas,
            flags,
        } => {
            let options = PutOptions {
                cas,
                flags,
                ..PutOptions::default()
            };
            let index = client.put(&key, value, options).await?;
            if json {
                println!("{}", json!({ "key": key, "modify_index": index }));
            } else {
                println!("{index}");
            }
        }
        Command::Delete {
            key,
            cas,
            recursive,
        } => {
            let deleted = client
                .delete(&key, DeleteOptions { cas, recursive })
                .await?;
            print_keys(&deleted, json);
        }
        Command::Ls { prefix, recursive } => {
            print_keys(&client.list(&prefix, recursive).await?, json);
        }
        Command::CheckSequencer { sequencer } => {
            let Some(parsed) = Sequencer::from_hex(sequencer.trim()) else {
                anyhow::bail!("'{sequencer}' is not a sequencer");
            };
            let valid = client.check_sequencer(&parsed.to_bytes()).await?;
            if json {
                println!(
                    "{}",
                    json!({
                        "valid": valid,
                        "key": parsed.key,
                        "lock_generation": parsed.lock_generation,
                        "session": parsed.session,
                    })
                );
            } else {
                println!("{}", if valid { "valid" } else { "invalid" });
            }
            if !valid {
                return Ok(ExitCode::from(NOT_FOUND));
            }
        }
        Command::Serve(_) | Command::Session(_) => unreachable!("dispatched in main"),
    }
    Ok(ExitCode::SUCCESS)
}

fn print_keys(keys: &[String], json: bool) {
    for key in keys {
        if json {
            println!("{}", json!({ "key": key }));
        } else {
            println!("{key}");
        }
    }
}

fn print_node(node: &NodeView, json: bool) {
    let s = &node.stat;
    let owner = s.ephemeral_owner.map(|o| o.to_string());
    let value = node
        .contents
        .as_ref()
        .map(|c| String::from_utf8_lossy(c).into_owned());
    if json {
        println!(
            "{}",
            json!({
                "key": node.key,
                "value": value,
                "flags": s.flags,
                "instance": s.instance,
                "content_generation": s.content_generation,
                "lock_generation": s.lock_generation,
                "modify_index": s.modify_index,
                "checksum": format!("{:016x}", s.checksum),
                "length": s.contents_len,
                "ephemeral_owner": owner,
            })
        );
    } else if let Some(value) = value {
        println!("{value}");
    } else {
        println!(
            "key={} flags={} instance={} content_generation={} lock_generation={} modify_index={} checksum={:016x} length={} ephemeral_owner={}",
            node.key,
            s.flags,
            s.instance,
            s.content_generation,
            s.lock_generation,
            s.modify_index,
            s.checksum,
            s.contents_len,
            owner.as_deref().unwrap_or("-"),
        );
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = leasehold_server::Config {
        default_lease: args.default_lease,
        min_lease: args.min_lease,
        max_lease: args.max_lease,
        keepalive_margin: args.keepalive_margin,
        max_frame: args.max_frame,
        ..Default::default()
    };
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // On stdout, so scripts and tests can learn the port of `--listen :0`.
    println!("listening on {addr}");
    tracing::info!(
        %addr,
        epoch = config.epoch,
        "serving; state is kept in memory only (durable storage in {} is not implemented yet)",
        args.data_dir.display()
    );
    leasehold_server::run(listener, config, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}

async fn session(addr: &str, json: bool, command: SessionCommand) -> anyhow::Result<ExitCode> {
    let client = Client::connect(addr).await?;
    match command {
        SessionCommand::Create(args) => {
            let id = client.create_session(args.options()).await?.detach().await;
            if json {
                println!("{}", json!({ "session": id }));
            } else {
                println!("{id}");
            }
        }
        SessionCommand::Info { id } => match client.session_info(id).await {
            Ok(info) => print_info(&info, json),
            Err(e) => return missing(e),
        },
        SessionCommand::List => {
            for info in client.list_sessions().await? {
                print_info(&info, json);
            }
        }
        SessionCommand::Destroy { id } => match client.destroy_session(id).await {
            Ok(()) => {
                if json {
                    println!("{}", json!({ "session": id, "destroyed": true }));
                }
            }
            Err(e) => return missing(e),
        },
        SessionCommand::Keep { session, grace } => return keep(client, session, grace, json).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// A session that does not exist is a message and exit status 1.
fn missing(e: ClientError) -> anyhow::Result<ExitCode> {
    match e.code() {
        Some(ErrorCode::UnknownSession | ErrorCode::SessionExpired) => {
            eprintln!("leasehold: {e}");
            Ok(ExitCode::from(NOT_FOUND))
        }
        _ => Err(e.into()),
    }
}

fn print_info(info: &SessionInfo, json: bool) {
    let behavior = match info.behavior {
        Behavior::Release => "release",
        Behavior::Delete => "delete",
    };
    if json {
        println!(
            "{}",
            json!({
                "session": info.session,
                "name": info.name,
                "lease_ms": info.lease_ms,
                "lock_delay_ms": info.lock_delay_ms,
                "behavior": behavior,
                "lease_remaining_ms": info.lease_remaining_ms,
                "keepalive_held": info.keepalive_held,
            })
        );
    } else {
        println!(
            "{}  name={} lease={} lock-delay={} behavior={} remaining={} held={}",
            info.session,
            info.name,
            duration::format(Duration::from_millis(info.lease_ms)),
            duration::format(Duration::from_millis(info.lock_delay_ms)),
            behavior,
            duration::format(Duration::from_millis(info.lease_remaining_ms)),
            info.keepalive_held,
        );
    }
}

async fn keep(
    client: Client,
    args: SessionArgs,
    grace: Duration,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let session = client.create_session(args.options().grace(grace)).await?;
    let (tx, mut states) = tokio::sync::mpsc::unbounded_channel();
    session.on_state_change(move |state| {
        let _ = tx.send(state);
    });
    let print = |state: leasehold::SessionState| {
        if json {
            println!(
                "{}",
                json!({ "session": session.id(), "state": state.as_str() })
            );
        } else {
            println!("{}", state.as_str());
        }
    };
    if !json {
        eprintln!("session {}", session.id());
    }
    print(session.state());
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        tokio::select! {
            state = states.recv() => match state {
                Some(state) => {
                    print(state);
                    if state == leasehold::SessionState::Expired {
                        return Ok(ExitCode::from(NOT_FOUND));
                    }
                }
                None => return Ok(ExitCode::SUCCESS),
            },
            _ = &mut interrupted => {
                session.close().await?;
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}
