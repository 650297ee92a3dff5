//! A Leasehold master run as a separate process (`leasehold serve`) on a
//! free loopback port with a fresh data directory, so that its CPU and
//! memory can be measured apart from the load generator's, and so that it
//! can be killed and restarted. A member of a cell (`crate::cell`) is the
//! same process with `--cell` and `--node`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use leasehold::Client;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `leasehold serve`; stopped when dropped.
pub struct Master {
    bin: PathBuf,
    scratch: PathBuf,
    listen: String,
    /// Arguments of `serve` besides `--listen` and `--data-dir`.
    args: Vec<String>,
    child: Option<Child>,
    addr: String,
}

/// A CA and a certificate it signed for 127.0.0.1, written in `dir`: the
/// CA's file, the certificate's and its key's.
fn certificates(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "leasehold-bench CA");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?;
    let cert = params.signed_by(&key, &issuer)?;
    let paths = (
        dir.join("ca.pem"),
        dir.join("master.pem"),
        dir.join("master.key"),
    );
    std::fs::write(&paths.0, ca_cert.pem())?;
    std::fs::write(&paths.1, cert.pem())?;
    std::fs::write(&paths.2, key.serialize_pem())?;
    Ok(paths)
}

/// Finds the `leasehold` binary: `explicit`, else `LEASEHOLD_BIN`, else the
/// one Cargo built beside this benchmark.
pub fn find_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("LEASEHOLD_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    // target/<profile>/leasehold-bench, or target/<profile>/deps/<test>.
    for dir in exe.ancestors().skip(1).take(2) {
        let candidate = dir.join("leasehold");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "no `leasehold` binary beside {}: build it first (cargo build --release -p leasehold-cli) \
         or name it with --server-bin",
        exe.display()
    )
}

impl Master {
    /// Starts `bin serve` on a free loopback port over a fresh data
    /// directory under the system's temporary directory.
    pub async fn start(bin: &Path, name: &str) -> anyhow::Result<Master> {
        Master::start_with(bin, name, &[], |_| Ok(())).await
    }

    /// Like [`Master::start`], with `args` given to `serve` too, and the
    /// data directory first filled by `prepare`.
    pub async fn start_with(
        bin: &Path,
        name: &str,
        args: &[String],
        prepare: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<Master> {
        let mut master = Master::new(bin, name, "127.0.0.1:0", args.to_vec())?;
        prepare(&master.scratch.join("data"))?;
        master.spawn().await?;
        // A restart must come back on the same address.
        master.listen = master.addr.clone();
        Ok(master)
    }

    /// Like [`Master::start`], speaking TLS with a certificate made for it
    /// now; what its clients need to speak TLS to it.
    pub async fn start_tls(
        bin: &Path,
        name: &str,
    ) -> anyhow::Result<(Master, leasehold::TlsOptions)> {
        let mut master = Master::new(bin, name, "127.0.0.1:0", Vec::new())?;
        let (ca, cert, key) = certificates(&master.scratch)?;
        for (flag, path) in [("--tls-cert", &cert), ("--tls-key", &key)] {
            master.args.push(flag.to_string());
            master.args.push(path.display().to_string());
        }
        master.spawn().await?;
        master.listen = master.addr.clone();
        Ok((master, leasehold::TlsOptions::new(ca)))
    }

    /// Starts `bin serve` as member `node` of the cell `cell` (`1=ADDR,...`)
    /// named `cell_id`, on the address `cell` gives it, over a fresh data
    /// directory, with `extra` given to `serve` too. It returns once the
    /// member listens, which is before the cell has a master.
    pub async fn start_member(
        bin: &Path,
        name: &str,
        (cell, cell_id): (&str, &str),
        node: u64,
        listen: &str,
        extra: &[String],
    ) -> anyhow::Result<Master> {
        let mut args = vec![
            "--cell".to_string(),
            cell.to_string(),
            "--cell-id".to_string(),
            cell_id.to_string(),
            "--node".to_string(),
            node.to_string(),
        ];
        args.extend_from_slice(extra);
        let mut member = Master::new(bin, &format!("{name}-{node}"), listen, args)?;
        member.spawn().await?;
        Ok(member)
    }

    /// A master not yet started, with a fresh scratch directory under the
    /// system's temporary directory.
    fn new(bin: &Path, name: &str, listen: &str, args: Vec<String>) -> anyhow::Result<Master> {
        let scratch = std::env::temp_dir().join(format!(
            "leasehold-bench-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(scratch.join("data"))?;
        Ok(Master {
            bin: bin.to_path_buf(),
            scratch,
            listen: listen.to_string(),
            args,
            child: None,
            addr: String::new(),
        })
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.scratch.join("master.log"))?;
        let mut child = Command::new(&self.bin)
            .arg("serve")
            .args(&self.args)
            .arg("--listen")
            .arg(&self.listen)
            .arg("--data-dir")
            .arg(self.scratch.join("data"))
            // LEASEHOLD_BENCH_LOG sets the masters' log filter (RUST_LOG's
            // syntax) to find out where a run's time went; warnings only
            // unless told.
            .env(
                "RUST_LOG",
                std::env::var("LEASEHOLD_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        // Recovery of a large data directory comes before the listener.
        let first = tokio::time::timeout(Duration::from_secs(300), lines.next_line())
            .await
            .context("the master did not start within 300 s")??;
        let Some(addr) = first
            .as_deref()
            .and_then(|l| l.strip_prefix("listening on "))
        else {
            bail!(
                "the master did not start: {}",
                std::fs::read_to_string(self.scratch.join("master.log")).unwrap_or_default()
            );
        };
        self.addr = addr.trim().to_string();
        self.child = Some(child);
        Ok(())
    }

    /// `127.0.0.1:PORT` the master serves on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Kills the master with SIGKILL, as a crash would, and waits for it
    /// to be gone.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Starts the master again on the same address and data directory.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await?;
        self.spawn().await
    }

    /// Stops the master with SIGINT (as Ctrl-C would) and removes its data.
    pub async fn stop(mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                // SAFETY: kill(2) with a pid we spawned and still own.
                unsafe { libc::kill(pid as i32, libc::SIGINT) };
            }
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        // LEASEHOLD_BENCH_KEEP keeps the data directory and `master.log`
        // of every master, to find out why a run failed.
        if std::env::var_os("LEASEHOLD_BENCH_KEEP").is_some() {
            eprintln!("kept {}", self.scratch.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

/// Waits until the master at `addr` (or the master of the cell whose
/// members it lists) answers a request.
pub async fn serving(addr: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let probe = async { Client::connect(addr.to_string()).await?.epoch().await };
        match probe.await {
            Ok(_) => return Ok(()),
            Err(e) if started.elapsed() > Duration::from_secs(300) => {
                return Err(anyhow::Error::new(e).context("the master did not serve within 300 s"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
