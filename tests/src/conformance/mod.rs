//! The protocol conformance harness: checks a running server against
//! SPEC.md, rule by rule, with frames built from the protocol types (see
//! [`crate::raw`]), never through the client library.
//!
//! Each [`Case`] names the rule IDs it checks. [`coverage`] compares those,
//! and the rules listed in [`UNOBSERVABLE`] with the reason, against every
//! rule ID in SPEC.md.
//!
//! The cases live in `cases/`, one module per SPEC section, each listing
//! its own; `common.rs` holds what they share: the `case!`, `ensure!`,
//! `expect_reply!`, `expect_error!` and `expect_close!` macros and the
//! helpers that build requests.

mod cases;
mod common;

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use leasehold_protocol::Welcome;

/// What a case concluded: `Err` says what the server did wrong.
pub type Check = Result<(), String>;

/// A case's body.
pub type CaseFn = fn(Ctx) -> Pin<Box<dyn Future<Output = Check> + Send>>;

/// One check of one or more SPEC rules.
#[derive(Clone, Copy)]
pub struct Case {
    pub rules: &'static [&'static str],
    pub name: &'static str,
    pub run: CaseFn,
}

/// Restarts the server under test on the same address and data; resolves
/// once the restart has been started.
pub type Restart =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// What a case is given.
#[derive(Clone)]
pub struct Ctx {
    pub addr: SocketAddr,
    /// How to restart the server, for the failover cases; without it they
    /// are skipped.
    pub restart: Option<Restart>,
    /// How to speak TLS to the server (`TLS-1`); `None`: plaintext.
    pub tls: Option<crate::raw::RawTls>,
}

impl Ctx {
    /// A context for a server that cannot be restarted.
    pub fn new(addr: SocketAddr) -> Ctx {
        Ctx {
            addr,
            restart: None,
            tls: None,
        }
    }

    /// A connection to the server, its handshake not done.
    pub async fn connect(&self) -> crate::raw::RawConnection {
        crate::raw::RawConnection::connect_over(self.addr, self.tls.as_ref()).await
    }

    /// A connection to the server at `addr` (a relay in front of it), its
    /// handshake done.
    pub async fn open_at(&self, addr: SocketAddr) -> (crate::raw::RawConnection, Welcome) {
        crate::raw::RawConnection::open_over(addr, self.tls.as_ref()).await
    }
}

/// A case's result that means "not run", with the reason after it.
pub const SKIPPED: &str = "skipped: ";

/// A restart that runs `command` with `sh -c`.
pub fn restart_command(command: String) -> Restart {
    Arc::new(move || {
        let command = command.clone();
        Box::pin(async move {
            let status = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(&command)
                .status()
                .await
                .map_err(|e| format!("cannot run the restart command: {e}"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("the restart command failed: {status}"))
            }
        })
    })
}

/// The outcome of one case.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub rules: &'static [&'static str],
    pub name: &'static str,
    pub result: Check,
    pub took: Duration,
}

impl Outcome {
    /// Whether the case did not run (it needs a restart command).
    pub fn skipped(&self) -> bool {
        self.result
            .as_ref()
            .err()
            .is_some_and(|e| e.starts_with(SKIPPED))
    }

    /// Whether the case ran and found the server wrong.
    pub fn failed(&self) -> bool {
        self.result.is_err() && !self.skipped()
    }
}

/// SPEC rules a client cannot observe over the wire, and why.
pub const UNOBSERVABLE: &[(&str, &str)] = &[
    // TLS itself: every case runs over it when the harness is given
    // --tls-ca (CI runs it so), but what a server says of its own files is
    // not observable from a client.
    (
        "TLS-1",
        "the master's TLS files; every case runs over TLS with --tls-ca, and tests/tests/tls.rs",
    ),
    (
        "TLS-2",
        "the client library's checks and messages; tests/tests/tls.rs",
    ),
    (
        "TLS-4",
        "a signal to the master's process; cli/tests/tls.rs",
    ),
    // The harness has no operator token.
    (
        "CHK-6",
        "owners of checks on a master with an operator token; tests/tests/access.rs",
    ),
    // The operator's HTTP port is another port than the protocol's.
    ("OPS-1", "figures read from the HTTP port; tests/tests/metrics.rs"),
    ("OPS-2", "the HTTP port; tests/tests/metrics.rs"),
    ("OPS-3", "the HTTP port's probes; tests/tests/metrics.rs"),
    (
        "OPS-5",
        "the HTTP port's status page, in a browser; tests/tests/status_page.rs",
    ),
    (
        "OPS-7",
        "how serve reads its settings; cli/tests/serve.rs",
    ),
    // The audit log is a file on the master's machine.
    ("AUDIT-1", "a file the master writes; tests/tests/audit.rs"),
    ("AUDIT-2", "a file the master writes; tests/tests/audit.rs"),
    ("AUDIT-3", "the master's writer thread; server/src/audit.rs"),
    ("AUDIT-4", "rotation of a file; server/src/audit.rs"),
    // The harness speaks to one server; a cell's rules need its members.
    (
        "CELL-10",
        "a cell's membership changes; server/src/cell/membership.rs and cli/tests/cell.rs",
    ),
    ("CELL-1", "a cell's membership; cli/tests/cell.rs and tests/tests/cell.rs start cells"),
    (
        "CELL-11",
        "traffic between members; server/src/cell/tests.rs, tests/tests/cell.rs and cli/tests/tls.rs",
    ),
    (
        "CELL-12",
        "elections inside the members; server/src/cell/rounds.rs tests and the cell-removal-crash simulation",
    ),
    ("CELL-2", "a member's data directory; server/src/cell/log.rs tests"),
    ("CELL-3", "what every member applies; server/src/cell/tests.rs"),
    ("CELL-4", "traffic between members; server/src/cell/tests.rs"),
    ("CELL-5", "Raft's timers inside the members"),
    ("CELL-6", "the master lease's bookkeeping; server/src/cell/lease.rs tests"),
    (
        "CELL-7",
        "a master change in a cell; tests/tests/cell.rs and cli/tests/cell.rs",
    ),
    ("CELL-8", "a member's status; cli/tests/cell.rs through leasehold cell status"),
    (
        "CELL-9",
        "changing a cell's members; server/src/cell/tests.rs and the cell-membership simulation",
    ),
    (
        "ERR-18",
        "a master that stops with replies waiting for its log; server/src/commit.rs tests and the cell simulations",
    ),
    (
        "LOCK-13",
        "client library: which holding a late LockLost ends; tests/tests/locks.rs and tests/tests/recipes.rs",
    ),
    (
        "CONN-12",
        "the master's memory, read from outside its process; cli/tests/abuse.rs",
    ),
    (
        "CONN-13",
        "which waiting request the master takes next depends on what has reached it, which no \
         client sees; server/src/master/turns.rs, and leasehold-bench noisy's bystander",
    ),
    (
        "EV-9",
        "the order of the master's own work; server/src/events.rs tests and `leasehold-bench noisy`",
    ),
    (
        "KA-11",
        "which waiting KeepAlive the master takes next depends on what has reached it, which no \
         client sees; server/src/master/run_tests.rs, and `leasehold-bench failover --keepalive-all`",
    ),
    ("AUTH-5", "what the master writes to its log and its log lines"),
    (
        "QUOTA-1",
        "needs a second peer address and a thousand checks; tests/tests/connection_limits.rs",
    ),
    (
        "QUOTA-2",
        "needs a second peer address and 100,000 sessions; tests/tests/quotas.rs",
    ),
    (
        "QUOTA-3",
        "needs a second peer address and 100,000 subscriptions; tests/tests/quotas.rs",
    ),
    (
        "QUOTA-4",
        "needs a second peer address and 100,000 waiting acquires; tests/tests/quotas.rs",
    ),
    (
        "QUOTA-5",
        "needs a second peer address and 256 MiB of nodes; tests/tests/quotas.rs",
    ),
    (
        "WIRE-5",
        "no reply outgrows the default frame now that lists are paged; server/src/connection.rs tests",
    ),
    (
        "STORE-5",
        "needs a full disk under the master; cli/tests/full_disk.rs",
    ),
    (
        "ERR-17",
        "needs a full disk under the master; cli/tests/full_disk.rs",
    ),
    (
        "CONN-8",
        "needs thousands of connections at the default limits; tests/tests/connection_limits.rs",
    ),
    (
        "CONN-10",
        "takes 10 to 20 s at the default timeout; tests/tests/connection_limits.rs",
    ),
    (
        "CONN-11",
        "takes 5 min at the default timeout; tests/tests/connection_limits.rs",
    ),
    ("CONN-7", "how the client library closes connections"),
    ("SES-8", "client library: destroy on close"),
    ("SES-9", "client library: detach without destroying"),
    ("LEASE-4", "the client's local lease formula"),
    ("LEASE-5", "the client's clock-drift allowance"),
    ("KA-1", "client library: one KeepAlive outstanding"),
    (
        "KA-9",
        "client library: when it asks for an unheld KeepAlive (the short-partition simulation checks it)",
    ),
    ("LOCK-10", "client library: when a guard counts as lost"),
    (
        "LOCK-17",
        "client library: what it sends when its caller gives up a wait; on the wire it is LOCK-3's replacement of a wait; tests/tests/locks.rs",
    ),
    (
        "LOCK-15",
        "client library: a wait that rides through a fail-over; tests/tests/durability.rs and cli/tests",
    ),
    (
        "LOCK-11",
        "client library: close releases before destroying",
    ),
    ("ELECT-1", "a client recipe over public requests"),
    ("ELECT-2", "a client recipe over public requests"),
    ("SEM-1", "a client recipe over public requests"),
    ("SEM-2", "a client recipe over public requests"),
    ("SEM-3", "a client recipe over public requests"),
    ("SEM-4", "a client recipe over public requests"),
    ("EV-7", "client library: delivery once and in order"),
    ("EV-8", "client library: session states in streams"),
    ("CS-1", "client session states"),
    ("CS-2", "client session states"),
    ("CS-3", "client session states"),
    ("CS-4", "client session states"),
    ("CS-5", "client session states"),
    ("CS-6", "client session states"),
    ("CS-7", "client session states"),
    ("CS-8", "client session states"),
    ("CS-9", "client session states: when the client probes"),
    ("FO-6", "client library: reaction to the fail-over event"),
    ("STORE-2", "the data directory's layout, not the wire"),
    (
        "STORE-6",
        "reading an earlier data directory, not the wire; tests/tests/upgrade.rs",
    ),
    (
        "STORE-3",
        "the data directory's damage handling, not the wire",
    ),
    ("CONN-6", "server shutdown, not driven by a client"),
    (
        "SES-5",
        "reaching 1,000,000 sessions is impractical from a harness",
    ),
    ("ERR-7", "sent only when the server itself fails"),
    (
        "CACHE-1",
        "client library: reads served from a session's cache; tests/tests/cache.rs",
    ),
    (
        "CACHE-6",
        "client library's flushes, and a reply that cannot carry events; tests/tests/cache.rs and server/src/master/tests.rs",
    ),
];

/// Every case the harness knows.
pub fn cases() -> Vec<Case> {
    cases::all()
}

/// Runs `cases` against `ctx`, each in its own task, so a case that panics
/// fails alone; at most `timeout` each.
pub async fn run(ctx: &Ctx, cases: &[Case], timeout: Duration) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for case in cases {
        let started = tokio::time::Instant::now();
        let task = tokio::spawn((case.run)(ctx.clone()));
        let result = match tokio::time::timeout(timeout, task).await {
            Err(_) => Err(format!("no verdict within {timeout:?}")),
            Ok(Err(e)) if e.is_panic() => {
                let panic = e.into_panic();
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into());
                Err(text)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(result)) => result,
        };
        outcomes.push(Outcome {
            rules: case.rules,
            name: case.name,
            result,
            took: started.elapsed(),
        });
    }
    common::clean_up(ctx).await;
    outcomes
}

/// Every rule ID in SPEC.md: bold `**ID**` rules and the error table's.
pub fn spec_rules(spec: &str) -> BTreeSet<String> {
    let mut rules = BTreeSet::new();
    for line in spec.lines() {
        let trimmed = line.trim_start_matches("- ").trim_start();
        if let Some(rest) = trimmed.strip_prefix("**") {
            if let Some(end) = rest.find("**") {
                rules.insert(rest[..end].to_string());
            }
        }
        if let Some(rest) = line.strip_prefix("| ERR-") {
            if let Some(end) = rest.find(' ') {
                rules.insert(format!("ERR-{}", &rest[..end]));
            }
        }
    }
    rules
}

/// SPEC rules with neither a case nor an entry in [`UNOBSERVABLE`].
pub fn coverage(spec: &str, cases: &[Case]) -> Vec<String> {
    let covered: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| c.rules.iter().copied())
        .chain(UNOBSERVABLE.iter().map(|(id, _)| *id))
        .collect();
    spec_rules(spec)
        .into_iter()
        .filter(|id| !covered.contains(id.as_str()))
        .collect()
}

/// The SPEC this harness was built against.
pub const SPEC: &str = include_str!("../../../SPEC.md");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_id_in_the_spec_is_found() {
        let rules = spec_rules(SPEC);
        for id in ["WIRE-1", "KA-7", "LOCK-11", "ERR-14", "FO-6", "CHK-5"] {
            assert!(rules.contains(id), "{id} not found");
        }
    }

    // What CI's `--coverage` checks, in the default test run as well.
    #[test]
    fn every_spec_rule_has_a_case_or_a_reason() {
        let uncovered = coverage(SPEC, &cases());
        assert!(uncovered.is_empty(), "without a case: {uncovered:?}");
    }

    #[test]
    fn unobservable_rules_exist_in_the_spec() {
        let rules = spec_rules(SPEC);
        for (id, _) in UNOBSERVABLE {
            assert!(rules.contains(*id), "{id} is not a SPEC rule");
        }
    }
}
