//! The status page's data (SPEC `OPS-5`): what `/api/status` on the HTTP
//! port answers, gathered by asking the master the protocol's own
//! questions (`Status`, `ListSessions`, `ListLocks`, `ListChecks`) as the
//! principal the HTTP request proves, so the page shows exactly what that
//! principal could learn from a client, and nothing of keys it may not
//! read. The page itself (`status_page/`) is static: HTML, CSS and a
//! script that polls this.

use std::collections::HashMap;
use std::sync::Arc;

use leasehold_protocol::access::{Identity, Via};
use leasehold_protocol::{
    CheckInfo, CheckStatus, Error, ErrorCode, LockListing, LockMode, MasterStatus, Request,
    Response, SessionInfo,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::caller::Caller;
use crate::config::STATUS_PAGE_ASK_TIMEOUT;
use crate::master::MasterHandle;
use crate::reply::{Flow, ReplyTx};

/// The page, its style and its script, served as they are.
pub(crate) const PAGE_HTML: &str = include_str!("status_page/index.html");
pub(crate) const PAGE_CSS: &str = include_str!("status_page/status.css");
pub(crate) const PAGE_JS: &str = include_str!("status_page/status.js");

/// Why an HTTP request is not answered with the master's data.
#[derive(Debug)]
pub(crate) enum Refused {
    /// It proved no principal, and access control is on; or its token
    /// was refused: `401` with the reason.
    Unauthenticated(String),
    /// The master did not answer: `503` with the reason.
    Unavailable(String),
}

/// What a cell's member says of itself and its cell, as JSON (`CELL-8`).
pub(crate) type CellView = Arc<dyn Fn() -> Value + Send + Sync>;

/// The master a cell's member runs now, if it is the master.
pub(crate) type MasterNow = Arc<dyn Fn() -> Option<MasterHandle> + Send + Sync>;

/// Where the page finds the master it asks.
#[derive(Clone)]
enum MasterAt {
    /// This process's single master.
    Here(MasterHandle),
    /// A cell's member: the master it runs while it is the master, and
    /// what it says of the cell.
    Member { now: MasterNow, cell: CellView },
}

/// The master, asked as the HTTP port's callers.
#[derive(Clone)]
pub(crate) struct Asker {
    master: MasterAt,
    /// Callers that authenticated with a bearer token, by address,
    /// certificate and the token's digest: a page polling every 2 s
    /// authenticates (and is audited, `AUDIT-2`) once, not every time.
    /// Its principal is still resolved for every request, so a revoked
    /// token stops counting at once (`TOK-3`).
    authenticated: Arc<std::sync::Mutex<HashMap<CallerKey, Arc<Caller>>>>,
}

/// Who a cached caller is: its address, certificate and token digest.
type CallerKey = (std::net::IpAddr, Option<String>, [u8; 32]);

/// Callers kept authenticated at most; past it the cache starts over.
const AUTHENTICATED_KEPT: usize = 64;

fn token_digest(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Asker")
    }
}

impl Asker {
    pub(crate) fn new(master: MasterHandle) -> Asker {
        Asker {
            master: MasterAt::Here(master),
            authenticated: Arc::default(),
        }
    }

    /// The page of a cell's member: `now` is the master it runs, if any;
    /// `cell` what it says of the cell.
    pub(crate) fn member(now: MasterNow, cell: CellView) -> Asker {
        Asker {
            master: MasterAt::Member { now, cell },
            authenticated: Arc::default(),
        }
    }

    /// The master to ask now: `None` on a member that does not serve as
    /// the master.
    pub(crate) fn master_now(&self) -> Option<MasterHandle> {
        match &self.master {
            MasterAt::Here(master) => Some(master.clone()),
            MasterAt::Member { now, .. } => now(),
        }
    }

    /// What the member says of its cell; `None` on a single master.
    pub(crate) fn cell(&self) -> Option<Value> {
        match &self.master {
            MasterAt::Here(_) => None,
            MasterAt::Member { cell, .. } => Some(cell()),
        }
    }

    /// Sends `request` as `caller` and waits for the answer, at most
    /// [`STATUS_PAGE_ASK_TIMEOUT`].
    async fn ask(&self, caller: &Arc<Caller>, request: Request) -> Result<Response, Error> {
        let Some(master) = self.master_now() else {
            return Err(Error::new(
                ErrorCode::Internal,
                "this member does not serve as the master now",
            ));
        };
        let (to, mut replies) = mpsc::unbounded_channel();
        let reply = ReplyTx::new(to, Arc::new(Flow::default()), 0, false);
        master.call(request, reply, caller).await;
        match tokio::time::timeout(STATUS_PAGE_ASK_TIMEOUT, replies.recv()).await {
            Ok(Some(reply)) => reply.into_body(),
            Ok(None) => Err(Error::new(ErrorCode::Internal, "the master stopped")),
            Err(_) => Err(Error::new(
                ErrorCode::Internal,
                format!("the master did not answer within {STATUS_PAGE_ASK_TIMEOUT:?}"),
            )),
        }
    }

    /// The caller an HTTP request from `peer` acts as: the principal of
    /// its bearer token, if it gave one (`ID-2`, throttled as `ID-6`
    /// says), else the one its TLS client certificate names (`certified`,
    /// `ID-1`), else anonymous. Refused when its token is, or when access
    /// control is on and it proved nobody.
    pub(crate) async fn caller(
        &self,
        peer: std::net::IpAddr,
        certified: Option<&str>,
        bearer: Option<&str>,
    ) -> Result<(Arc<Caller>, Identity), Refused> {
        let key = bearer.map(|token| (peer, certified.map(str::to_string), token_digest(token)));
        if let Some(key) = &key {
            if let Some(known) = self.known(key).await {
                return Ok(known);
            }
        }
        let caller = Arc::new(Caller::new(peer, certified.map(str::to_string)));
        let request = match bearer {
            Some(token) => Request::Authenticate {
                token: token.to_string(),
            },
            None => Request::WhoAmI,
        };
        let identity = match self.ask(&caller, request).await {
            Ok(Response::Identity(identity)) => identity,
            Ok(other) => return Err(Refused::Unavailable(format!("unexpected {other:?}"))),
            Err(e) if e.code == ErrorCode::Internal => return Err(Refused::Unavailable(e.message)),
            Err(e) => return Err(Refused::Unauthenticated(e.message)),
        };
        if identity.access_control && identity.via == Via::Anonymous {
            return Err(Refused::Unauthenticated(
                "access control is on: present a bearer token (Authorization: Bearer ...) or, \
                 over HTTPS, a client certificate"
                    .into(),
            ));
        }
        if let Some(key) = key {
            let mut kept = self.authenticated.lock().unwrap_or_else(|e| e.into_inner());
            if kept.len() >= AUTHENTICATED_KEPT {
                kept.clear();
            }
            kept.insert(key, caller.clone());
        }
        Ok((caller, identity))
    }

    /// The caller that authenticated as `key` says before, if its token
    /// still counts: asked who it is (`WhoAmI`, not audited). One whose
    /// token no longer counts is forgotten, and authenticates again.
    async fn known(&self, key: &CallerKey) -> Option<(Arc<Caller>, Identity)> {
        let caller = {
            let kept = self.authenticated.lock().unwrap_or_else(|e| e.into_inner());
            kept.get(key).cloned()
        }?;
        match self.ask(&caller, Request::WhoAmI).await {
            Ok(Response::Identity(identity))
                if matches!(identity.via, Via::Token { .. } | Via::Operator) =>
            {
                Some((caller, identity))
            }
            _ => {
                let mut kept = self.authenticated.lock().unwrap_or_else(|e| e.into_inner());
                kept.remove(key);
                None
            }
        }
    }

    /// What `/api/status` answers for `caller`: the master's figures, and
    /// a page each of the sessions, locks and checks it may see.
    pub(crate) async fn status(
        &self,
        caller: &Arc<Caller>,
        identity: &Identity,
    ) -> Result<Value, Refused> {
        let unavailable = |e: Error| Refused::Unavailable(e.message);
        let master = match self.ask(caller, Request::Status).await {
            Ok(Response::Status(status)) => status,
            Ok(other) => return Err(Refused::Unavailable(format!("unexpected {other:?}"))),
            Err(e) => return Err(unavailable(e)),
        };
        let sessions = Request::ListSessions {
            after: None,
            limit: 0,
        };
        let (sessions, more_sessions) = match self.ask(caller, sessions).await {
            Ok(Response::Sessions { sessions, more }) => (sessions, more),
            Ok(_) => (Vec::new(), false),
            Err(e) => return Err(unavailable(e)),
        };
        let locks = Request::ListLocks {
            prefix: String::new(),
            after: None,
            limit: 0,
        };
        // A list the master refuses (a principal that may read none of
        // the first keys locked) is said so, not shown as empty.
        let (locks, more_locks, locks_error) = match self.ask(caller, locks).await {
            Ok(Response::Locks { locks, more }) => (locks, more, None),
            Ok(other) => (Vec::new(), false, Some(format!("unexpected {other:?}"))),
            Err(e) => (Vec::new(), false, Some(e.message)),
        };
        let checks = Request::ListChecks {
            after: None,
            limit: 0,
        };
        let (checks, more_checks, checks_error) = match self.ask(caller, checks).await {
            Ok(Response::Checks { checks, more }) => (checks, more, None),
            Ok(other) => (Vec::new(), false, Some(format!("unexpected {other:?}"))),
            Err(e) => (Vec::new(), false, Some(e.message)),
        };
        Ok(json!({
            "identity": identity_json(identity),
            "cell": self.cell(),
            "master": master_json(&master),
            "sessions": sessions.iter().map(session_json).collect::<Vec<_>>(),
            "more_sessions": more_sessions,
            "locks": locks.iter().map(lock_json).collect::<Vec<_>>(),
            "more_locks": more_locks,
            "locks_error": locks_error,
            "checks": checks.iter().map(check_json).collect::<Vec<_>>(),
            "more_checks": more_checks,
            "checks_error": checks_error,
        }))
    }

    /// Whether `/metrics` may be read by a request from `peer` with
    /// `certified` and `bearer`: as `/api/status` may.
    pub(crate) async fn may_read_metrics(
        &self,
        peer: std::net::IpAddr,
        certified: Option<&str>,
        bearer: Option<&str>,
    ) -> Result<(), Refused> {
        self.caller(peer, certified, bearer).await.map(|_| ())
    }
}

fn mode(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::Shared => "shared",
    }
}

fn identity_json(identity: &Identity) -> Value {
    let via = match identity.via {
        Via::Anonymous => "anonymous",
        Via::Certificate => "certificate",
        Via::Token { .. } => "token",
        Via::Operator => "operator",
    };
    json!({
        "principal": identity.principal,
        "via": via,
        "access_control": identity.access_control,
    })
}

/// `Status`'s answer as JSON, as `/api/status` and the CLI's `status
/// --json` print it (`OPS-4`).
pub fn master_json(s: &MasterStatus) -> Value {
    let ended: serde_json::Map<String, Value> = s
        .recently_ended
        .iter()
        .map(|(cause, n)| (cause.clone(), (*n).into()))
        .collect();
    json!({
        "version": s.version,
        "epoch": s.epoch,
        "index": s.index,
        "sessions": s.sessions,
        "keepalives_held": s.keepalives_held,
        "recently_ended": ended,
        "nodes": s.nodes,
        "locks_held": s.locks_held,
        "holdings": s.holdings,
        "waiters": s.waiters,
        "locks_in_delay": s.locks_in_delay,
        "checks": s.checks,
        "access_control": s.access_control,
        "stored_bytes": s.stored_bytes,
    })
}

fn session_json(s: &SessionInfo) -> Value {
    json!({
        "session": s.session,
        "name": s.name,
        "lease_ms": s.lease_ms,
        "lease_remaining_ms": s.lease_remaining_ms,
        "lock_delay_ms": s.lock_delay_ms,
        "keepalive_held": s.keepalive_held,
        "checks": s.checks,
    })
}

/// A lock as `ListLocks` lists it, as JSON, as `/api/status` and the
/// CLI's `locks --json` print it (`LOCK-16`).
pub fn lock_json(l: &LockListing) -> Value {
    json!({
        "key": l.key,
        "lock_generation": l.lock_generation,
        "holders": l.holders.iter().map(|h| json!({
            "session": h.session,
            "name": h.name,
            "mode": mode(h.mode),
            "held_ms": h.held_ms,
        })).collect::<Vec<_>>(),
        "holders_total": l.holders_total,
        "waiters": l.waiters.iter().map(|w| json!({
            "session": w.session,
            "name": w.name,
            "mode": mode(w.mode),
        })).collect::<Vec<_>>(),
        "waiters_total": l.waiters_total,
        "delay_remaining_ms": l.delay_remaining_ms,
    })
}

fn check_json(c: &CheckInfo) -> Value {
    let status = match c.status {
        CheckStatus::Passing => "passing",
        CheckStatus::Warning => "warning",
        CheckStatus::Critical => "critical",
    };
    json!({
        "name": c.name,
        "status": status,
        "note": c.note,
        "sessions": c.sessions,
    })
}
