//! The audit log (`AUDIT-1`..`AUDIT-4`): one JSON line per lock granted or
//! released, rule or token changed, operator action, failed
//! authentication and refused request, in a file bounded by size with
//! rotation.
//!
//! The engine decides what to record ([`Audit`], an effect like any
//! other); the master task stamps it with the wall-clock time and hands it
//! to a thread of its own that writes it, so a slow disk never holds up
//! the master. If the thread falls behind by the configured number of
//! records, the newest are counted and dropped, and the next line written
//! says how many (`AUDIT-3`).
//!
//! It imports nothing of the crate's: the configuration (`config.rs`)
//! holds an [`AuditLog`].

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold_protocol::SessionId;
use serde::Serialize;

/// Where the audit log goes and how much of it is kept;
/// `AuditConfig::at` (in `config.rs`, with the other defaults) gives the
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// The file written; rotated ones are `FILE.1` (the newest) ..
    /// `FILE.<keep>`.
    pub path: PathBuf,
    /// A file is rotated once it would grow past this many bytes.
    pub max_bytes: u64,
    /// How many rotated files are kept.
    pub keep: u32,
    /// Records the writer may fall behind by before the newest are
    /// counted and dropped (`AUDIT-3`).
    pub queue: usize,
}

/// How a request or change ended, as the audit log says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Outcome {
    Done,
    Refused,
}

/// One audit record, as the engine decides it (`AUDIT-2`). The engine cuts
/// the strings that came from a client before they are set here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Audit {
    /// What happened: `lock-granted`, `lock-released`, `rule-set`, ...
    pub(crate) event: &'static str,
    pub(crate) outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) principal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) operator: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peer: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<SessionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    /// The global index of the change, for one that was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<u64>,
    /// Anything else: a refusal's reason, a rule, a token's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
}

impl Audit {
    pub(crate) fn new(event: &'static str, outcome: Outcome) -> Audit {
        Audit {
            event,
            outcome,
            principal: None,
            operator: None,
            peer: None,
            session: None,
            key: None,
            index: None,
            detail: None,
        }
    }

    pub(crate) fn key(mut self, key: String) -> Audit {
        self.key = Some(key);
        self
    }

    pub(crate) fn session(mut self, session: SessionId) -> Audit {
        self.session = Some(session);
        self
    }

    pub(crate) fn peer(mut self, peer: Option<IpAddr>) -> Audit {
        self.peer = peer;
        self
    }

    pub(crate) fn index(mut self, index: u64) -> Audit {
        self.index = Some(index);
        self
    }

    pub(crate) fn detail(mut self, detail: String) -> Audit {
        self.detail = Some(detail);
        self
    }
}

/// A line as written: the record and when.
#[derive(Serialize)]
struct Line<'a> {
    /// Milliseconds since the Unix epoch, by the master's wall clock.
    time_ms: u64,
    #[serde(flatten)]
    record: &'a Audit,
}

/// The master's side of the audit log: records go to the writing thread.
#[derive(Debug, Clone)]
pub struct AuditLog {
    records: SyncSender<Audit>,
    lost: Arc<AtomicU64>,
}

impl AuditLog {
    /// Opens (or creates) the audit log and starts its thread. A file that
    /// cannot be opened is an error at start, not a silent gap.
    ///
    /// ```
    /// use leasehold_server::{AuditConfig, AuditLog, Config};
    ///
    /// let path = std::env::temp_dir().join(format!("leasehold-audit-doc-{}", std::process::id()));
    /// let config = Config {
    ///     audit: Some(AuditLog::open(&AuditConfig::at(&path))?),
    ///     ..Config::default()
    /// };
    /// # drop(config);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn open(config: &AuditConfig) -> io::Result<AuditLog> {
        let file = open_append(&config.path)?;
        let written = file.metadata()?.len();
        let (records, queue) = sync_channel(config.queue);
        let lost = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            config: config.clone(),
            file: BufWriter::new(file),
            written,
            lost: lost.clone(),
        };
        std::thread::Builder::new()
            .name("leasehold-audit".into())
            .spawn(move || writer.run(queue))?;
        Ok(AuditLog { records, lost })
    }

    /// Queues `record`; drops and counts it if the writer is that far
    /// behind.
    pub(crate) fn record(&self, record: Audit) {
        match self.records.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

struct Writer {
    config: AuditConfig,
    file: BufWriter<File>,
    written: u64,
    lost: Arc<AtomicU64>,
}

impl Writer {
    fn run(mut self, queue: Receiver<Audit>) {
        while let Ok(record) = queue.recv() {
            let lost = self.lost.swap(0, Ordering::Relaxed);
            if lost > 0 {
                let note = Audit::new("records-lost", Outcome::Done)
                    .detail(format!("{lost} records dropped: the audit log fell behind"));
                self.write(&note);
            }
            self.write(&record);
            // Flushed whenever the queue is empty: a line is on its way to
            // the disk as soon as the master is idle, and a burst costs one
            // write, not one per line.
            while let Ok(record) = queue.try_recv() {
                self.write(&record);
            }
            if let Err(error) = self.file.flush() {
                tracing::warn!(%error, path = %self.config.path.display(), "the audit log cannot be written");
            }
        }
        let _ = self.file.flush();
    }

    fn write(&mut self, record: &Audit) {
        let time_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let Ok(mut line) = serde_json::to_vec(&Line { time_ms, record }) else {
            return;
        };
        line.push(b'\n');
        if self.written > 0 && self.written + line.len() as u64 > self.config.max_bytes {
            if let Err(error) = self.rotate() {
                tracing::warn!(%error, path = %self.config.path.display(), "the audit log cannot be rotated");
            }
        }
        match self.file.write_all(&line) {
            Ok(()) => self.written += line.len() as u64,
            Err(error) => {
                tracing::warn!(%error, path = %self.config.path.display(), "the audit log cannot be written")
            }
        }
    }

    /// `FILE` becomes `FILE.1`, `FILE.1` `FILE.2`, and so on; the oldest
    /// beyond `keep` is removed (`AUDIT-4`).
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let path = &self.config.path;
        let numbered = |n: u32| {
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.config.keep == 0 {
            std::fs::remove_file(path)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.config.keep));
            for n in (1..self.config.keep).rev() {
                let _ = std::fs::rename(numbered(n), numbered(n + 1));
            }
            std::fs::rename(path, numbered(1))?;
        }
        self.file = BufWriter::new(open_append(path)?);
        self.written = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;

    fn dir(name: &str) -> Scratch {
        Scratch::new(&format!("audit-{name}"))
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn wait_for(path: &Path, count: usize) -> Vec<serde_json::Value> {
        for _ in 0..500 {
            let found = lines(path);
            if found.len() >= count {
                return found;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("fewer than {count} lines in {}", path.display());
    }

    // AUDIT-2
    #[test]
    fn a_record_is_one_json_line_with_its_fields() {
        let dir = dir("line");
        let path = dir.join("audit.log");
        let log = AuditLog::open(&AuditConfig::at(&path)).unwrap();
        let mut record = Audit::new("lock-granted", Outcome::Done)
            .key("jobs/a".into())
            .index(7);
        record.principal = Some("ci".into());
        log.record(record);
        let found = wait_for(&path, 1);
        assert_eq!(found[0]["event"], "lock-granted");
        assert_eq!(found[0]["outcome"], "done");
        assert_eq!(found[0]["principal"], "ci");
        assert_eq!(found[0]["key"], "jobs/a");
        assert_eq!(found[0]["index"], 7);
        assert!(found[0]["time_ms"].as_u64().unwrap() > 0);
    }

    // AUDIT-4
    #[test]
    fn the_log_rotates_by_size_and_keeps_the_newest_files() {
        let dir = dir("rotate");
        let path = dir.join("audit.log");
        let config = AuditConfig {
            path: path.clone(),
            max_bytes: 300,
            keep: 2,
            ..AuditConfig::at(&path)
        };
        let log = AuditLog::open(&config).unwrap();
        for n in 0..40 {
            log.record(Audit::new("lock-granted", Outcome::Done).index(n));
        }
        // The last record is written once every earlier one is.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let last = lines(&path);
            if last.last().is_some_and(|l| l["index"] == 39) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never wrote the last record"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for file in [
            path.clone(),
            dir.join("audit.log.1"),
            dir.join("audit.log.2"),
        ] {
            let size = std::fs::metadata(&file).unwrap().len();
            assert!(size <= 300, "{} is {size} bytes", file.display());
        }
        assert!(!dir.join("audit.log.3").exists());
        let first_kept = lines(&dir.join("audit.log.2"))[0]["index"]
            .as_u64()
            .unwrap();
        assert!(first_kept > 0, "the oldest records were rotated away");
    }
}
