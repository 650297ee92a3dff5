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

/// Starts three `leasehold serve` members on fresh loopback ports, each
/// with the arguments and environment `member(id, addr, cell, every)`
/// gives (`cell`: the `--cell` list; `every`: the addresses joined by
/// commas), its log in `log-ID` under `dir`.
///
/// The ports are chosen before any member listens, and on a busy machine
/// another process can take one in between (an outgoing connection's
/// port comes from the same range): that member says the address is in
/// use and exits, the others are stopped, and the three start again on new
/// ports: `member` is asked again, and must name a fresh data directory
/// (a member that started founded a cell on the old ports). Any other
/// failure to start fails the test with the member's log.
#[allow(dead_code)]
pub fn start_three(
    dir: impl AsRef<std::path::Path>,
    member: impl Fn(u64, &str, &str, &str) -> (Vec<String>, Vec<(String, String)>),
) -> BTreeMap<u64, (Child, String)> {
    'ports: for _attempt in 0..5 {
        let (addrs, cell) = three_members();
        let every = addrs.join(",");
        let mut members = BTreeMap::new();
        for (i, addr) in addrs.iter().enumerate() {
            let id = (i + 1) as u64;
            let (args, env) = member(id, addr, &cell, &every);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let log_path = dir.as_ref().join(format!("log-{id}"));
            let log = std::fs::File::create(&log_path).unwrap();
            match super::try_spawn_serve(&args, &env, std::process::Stdio::from(log)) {
                Ok((child, listening)) => {
                    assert_eq!(&listening, addr);
                    members.insert(id, (child, addr.clone()));
                }
                Err(_) => {
                    for (child, _) in members.values_mut() {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    if log.contains("Address already in use") {
                        continue 'ports;
                    }
                    panic!("member {id} did not start:\n{log}");
                }
            }
        }
        return members;
    }
    panic!("five sets of ports were each taken before the members listened");
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
    /// Each member's log goes to `log-ID` in the cell's directory.
    pub fn start_as(name: &str, listen: bool) -> Cell {
        let dir = std::env::temp_dir().join(format!("leasehold-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // As README's cell has it: a secret the members share, which is
        // also the operator's right to change them (`CELL-10`).
        let secret = dir.join("cell-secret");
        std::fs::write(&secret, format!("the secret of cell {name}\n")).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let owner_only = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(&secret, owner_only).unwrap();
        }
        let members = start_three(&dir, |id, addr, cell, every| {
            let data = dir.join(format!("m{id}"));
            let _ = std::fs::remove_dir_all(&data);
            let mut args: Vec<String> = ["--cell", cell, "--node", &id.to_string()]
                .iter()
                .map(|a| a.to_string())
                .collect();
            args.extend(["--cell-id".into(), name.into()]);
            args.extend(["--data-dir".into(), data.to_str().unwrap().into()]);
            args.extend(["--cell-secret-file".into(), secret.to_str().unwrap().into()]);
            let mut env = Vec::new();
            if listen {
                args.extend(["--listen".into(), addr.into()]);
            } else {
                env.push(("LEASEHOLD_ADDR".to_string(), every.to_string()));
            }
            (args, env)
        });
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

/// Runs `leasehold` with `args`, and again (up to five times in all, 200
/// ms apart) while it exits 3 (the outcome is unknown) or 69 (no master
/// reached). On a loaded machine a new cell's members can hold an election
/// again soon after the first master was seen, and a command cut off by it
/// learns only that. For commands whose repetition changes nothing the
/// test looks at.
#[allow(dead_code)]
pub fn cli_riding_elections(args: &[&str]) -> std::process::Output {
    let run = || {
        std::process::Command::new(super::BIN)
            .args(args)
            .output()
            .expect("run leasehold")
    };
    let mut out = run();
    for _ in 1..5 {
        if !matches!(out.status.code(), Some(3 | 69)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        out = run();
    }
    out
}
