//! A three-member cell of `leasehold serve` processes on loopback.

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use leasehold_server::cell::query_status;
use tokio::time::Instant;

/// Three free loopback addresses, and the `--cell` list naming them
/// `1=..,2=..,3=..`. Ports are chosen by binding and letting go: the
/// members must know each other's addresses before any of them listens.
pub fn three_members() -> (Vec<String>, String) {
    let addrs: Vec<String> = (0..3)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        })
        .collect();
    let cell = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    (addrs, cell)
}

/// Three members on free loopback ports, each with its own data directory.
pub struct Cell {
    pub members: BTreeMap<u64, (Child, String)>,
    pub dir: std::path::PathBuf,
}

impl Cell {
    pub fn start(name: &str) -> Cell {
        Cell::start_as(name, true)
    }

    /// Without `listen`, members get no `--listen` and `LEASEHOLD_ADDR`
    /// names every member, as a shell set up for the cell's clients has it.
    pub fn start_as(name: &str, listen: bool) -> Cell {
        Cell::start_logging(name, listen, false)
    }

    /// With `logs`, each member's log goes to `log-ID` in the cell's
    /// directory.
    pub fn start_logging(name: &str, listen: bool, logs: bool) -> Cell {
        let dir = std::env::temp_dir().join(format!("leasehold-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (addrs, cell) = three_members();
        let mut members = BTreeMap::new();
        let every = addrs.join(",");
        // As README's cell has it: a secret the members share, which is
        // also the operator's right to change them (`CELL-10`).
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("cell-secret");
        std::fs::write(&secret, format!("the secret of cell {name}\n")).unwrap();
        for (i, addr) in addrs.iter().enumerate() {
            let id = (i + 1) as u64;
            let data = dir.join(format!("m{id}"));
            let node = id.to_string();
            let mut args = vec!["--cell", &cell, "--node", &node, "--cell-id", name];
            args.extend(["--data-dir", data.to_str().unwrap()]);
            args.extend(["--cell-secret-file", secret.to_str().unwrap()]);
            let env: Vec<(&str, &str)> = if listen {
                args.extend(["--listen", addr]);
                Vec::new()
            } else {
                vec![("LEASEHOLD_ADDR", every.as_str())]
            };
            let stderr = if logs {
                let log = std::fs::File::create(dir.join(format!("log-{id}"))).unwrap();
                std::process::Stdio::from(log)
            } else {
                std::process::Stdio::null()
            };
            let (child, listening) = super::spawn_serve_logging(&args, &env, stderr);
            assert_eq!(&listening, addr);
            members.insert(id, (child, addr.clone()));
        }
        Cell { members, dir }
    }

    /// The file holding the cell's secret.
    pub fn secret_file(&self) -> std::path::PathBuf {
        self.dir.join("cell-secret")
    }

    pub fn addrs(&self) -> String {
        self.members
            .values()
            .map(|(_, a)| a.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The member serving as master and its epoch, once one does.
    pub async fn master(&self) -> (u64, u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for (id, (_, addr)) in &self.members {
                if let Ok(status) = query_status(addr).await {
                    if status.master {
                        return (*id, status.epoch);
                    }
                }
            }
            assert!(Instant::now() < deadline, "no member became master");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn kill(&mut self, id: u64) {
        let (mut child, _) = self.members.remove(&id).unwrap();
        child.kill().expect("SIGKILL the member");
        child.wait().unwrap();
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        for (child, _) in self.members.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cell {
    /// The member serving as master, other than `not`, once one does; a
    /// member that does not answer within a second is passed over.
    pub async fn master_other_than(&self, not: Option<u64>) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for (id, (_, addr)) in &self.members {
                if Some(*id) == not {
                    continue;
                }
                let status = tokio::time::timeout(Duration::from_secs(1), query_status(addr));
                if let Ok(Ok(status)) = status.await {
                    if status.master {
                        return *id;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no member became master");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` (e.g. `-STOP`) to member `id`.
    pub fn signal(&self, id: u64, signal: &str) {
        let pid = self.members[&id].0.id().to_string();
        let sent = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill {signal} {pid}");
    }
}
