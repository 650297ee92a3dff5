//! A `leasehold serve` child process for the CLI's tests.
#![allow(dead_code)] // each test binary uses its own part

pub mod cell;
pub mod traffic;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// PATH with the binary's directory first, so commands run under `lock` or
/// `elect` can call `leasehold` themselves.
fn path_with_bin() -> std::ffi::OsString {
    let dir = std::path::Path::new(BIN).parent().expect("a directory");
    let mut paths = vec![dir.to_path_buf()];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(paths).expect("a PATH")
}

/// Starts `leasehold serve` with `args` (and short leases allowed); returns
/// the process and the address it printed.
pub fn spawn_serve(args: &[&str]) -> (Child, String) {
    spawn_serve_with_env(args, &[])
}

/// [`spawn_serve`] with `env` set for the server.
pub fn spawn_serve_with_env(args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    spawn_serve_logging(args, env, Stdio::null())
}

/// [`spawn_serve_with_env`], the server's log going to `stderr`.
pub fn spawn_serve_logging(args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> (Child, String) {
    try_spawn_serve(args, env, stderr)
        .unwrap_or_else(|line| panic!("unexpected first line {line:?}"))
}

/// [`spawn_serve_logging`], or the first line the server printed instead
/// of where it listens (empty if it exited first), the server reaped.
#[allow(dead_code)]
pub fn try_spawn_serve(
    args: &[&str],
    env: &[(&str, &str)],
    stderr: Stdio,
) -> Result<(Child, String), String> {
    let mut child = Command::new(BIN)
        .args(["serve", "--min-lease", "100ms"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start leasehold serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("read the listening line");
    match line.trim().strip_prefix("listening on ") {
        Some(addr) => Ok((child, addr.to_string())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(line)
        }
    }
}

/// A `leasehold serve` on a free loopback port, killed on drop.
pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Serve {
    pub fn start() -> Serve {
        let (child, addr) = spawn_serve(&["--listen", "127.0.0.1:0", "--in-memory"]);
        Serve { child, addr }
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(["--addr", &self.addr])
            .args(args)
            .env("LEASEHOLD_ADDR", &self.addr)
            .env("PATH", path_with_bin())
            .output()
            .expect("run leasehold")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A `leasehold` command running in the background, its output read line
/// by line; killed on drop.
pub struct Running {
    child: Child,
    pub stdout: std::sync::mpsc::Receiver<String>,
    stderr: std::sync::mpsc::Receiver<String>,
    /// Every stderr line read so far.
    seen: std::cell::RefCell<Vec<String>>,
}

fn lines(pipe: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

impl Running {
    pub fn start(addr: &str, args: &[&str]) -> Running {
        let mut child = Command::new(BIN)
            .args(["--addr", addr])
            .args(args)
            .env("LEASEHOLD_ADDR", addr)
            .env("PATH", path_with_bin())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run leasehold");
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        Running {
            child,
            stdout,
            stderr,
            seen: Default::default(),
        }
    }

    /// The next line of stdout, within `within`.
    pub fn stdout_line(&self, within: std::time::Duration) -> String {
        self.stdout
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("no stdout line within {within:?}: {e}"))
    }

    /// Waits until stderr has had a line containing `text` (perhaps one
    /// read earlier: lines from different tasks may come in either order).
    pub fn stderr_until(&self, text: &str, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        loop {
            if self.seen.borrow().iter().any(|l| l.contains(text)) {
                return;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => self.seen.borrow_mut().push(line),
                Err(e) => panic!(
                    "no stderr line with {text:?} within {within:?} ({e}); saw {:?}",
                    self.seen.borrow()
                ),
            }
        }
    }

    /// Every stderr line read so far, and those waiting to be read.
    pub fn stderr_so_far(&self) -> Vec<String> {
        let mut seen = self.seen.borrow_mut();
        seen.extend(self.stderr.try_iter());
        seen.clone()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("poll the child").is_none()
    }

    /// Its exit status, within `within`.
    pub fn wait(&mut self, within: std::time::Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running after {within:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether any process's command line contains `needle` (Linux: /proc).
pub fn process_running(needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline")).is_ok_and(|raw| {
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            line.contains(needle)
        })
    })
}

impl Running {
    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}
