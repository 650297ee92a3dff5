//! CPU time and resident memory of a process on this machine, read from
//! `/proc`, and the process listening on a loopback port.

use std::time::Duration;

/// What a process has used so far.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// User plus system CPU time since the process started.
    pub cpu: Duration,
    /// Resident set size in bytes.
    pub rss: u64,
}

/// Reads `pid`'s usage; `None` if the process is gone or not readable.
pub fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start
    // after the last ')'. utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(Usage {
        cpu: Duration::from_nanos(ticks * 1_000_000_000 / per_second),
        rss: rss_kb * 1024,
    })
}

/// The process with a socket listening on TCP `port`, if it is on this
/// machine and readable: how the benchmark finds a master or a peer it did
/// not start, to measure its CPU and memory.
pub fn listening_on(port: u16) -> Option<u32> {
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            text.lines().skip(1).find_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
                // State 0A is LISTEN.
                (local_port == port && *f.get(3)? == "0A")
                    .then(|| f.get(9).map(|s| s.to_string()))?
            })
        })?;
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_str() == Some(wanted.as_str())) {
                return Some(pid);
            }
        }
    }
    None
}

/// CPU used and memory held by a process between two samples.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub cpu: Duration,
    pub wall: Duration,
    pub rss_before: u64,
    pub rss_after: u64,
}

impl Span {
    /// CPU time as a percentage of one core over the span.
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Samples the processes of a server (one, or each member of a cluster)
/// at the start of a measured span; their figures are summed.
pub struct Meter {
    pids: Vec<u32>,
    start: Option<Usage>,
    started: std::time::Instant,
}

/// The summed usage of `pids`; `None` if there are none or one of them is
/// gone or not readable.
fn total(pids: &[u32]) -> Option<Usage> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold(
        Usage {
            cpu: Duration::ZERO,
            rss: 0,
        },
        |sum, pid| {
            let one = usage(*pid)?;
            Some(Usage {
                cpu: sum.cpu + one.cpu,
                rss: sum.rss + one.rss,
            })
        },
    )
}

impl Meter {
    pub fn start(pids: &[u32]) -> Meter {
        Meter {
            pids: pids.to_vec(),
            start: total(pids),
            started: std::time::Instant::now(),
        }
    }

    /// The span so far; `None` when a process could not be read.
    pub fn span(&self) -> Option<Span> {
        let start = self.start?;
        let now = total(&self.pids)?;
        Some(Span {
            cpu: now.cpu.saturating_sub(start.cpu),
            wall: self.started.elapsed(),
            rss_before: start.rss,
            rss_after: now.rss,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_usage() {
        let me = usage(std::process::id()).expect("own /proc entry");
        assert!(me.rss > 0);
    }

    #[test]
    fn finds_the_process_listening_on_a_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(listening_on(port), Some(std::process::id()));
    }

    #[test]
    fn a_meter_sums_its_processes_and_needs_them_all() {
        let me = std::process::id();
        let twice = Meter::start(&[me, me]);
        let once = usage(me).unwrap();
        let span = twice.span().expect("both readable");
        assert!(span.rss_after >= once.rss);
        assert!(Meter::start(&[]).span().is_none());
        assert!(Meter::start(&[me, u32::MAX]).span().is_none());
    }
}
