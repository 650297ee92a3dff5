//! Requests to commands to responses: what the master does for each
//! request, after the checks every request passes (authority, a full disk,
//! fan-out behind, an unread connection, quotas, fail-over).

use leasehold_protocol::{
    Error, ErrorCode, LeaseGrant, LockInfo, NodeView, Request, Response, Sequencer, SessionId,
    SessionInfo, SessionLocks,
};

use super::{Call, Engine, ReplyTx};
use crate::config::MAX_LIST_PAGE;
use crate::config::{CONGESTED_RETRY_MS, FAILOVER_RETRY_MS};
use crate::namespace::Put;
use crate::node::check_key;
use crate::observe::MasterEvent;
use crate::session::EndCause;
use crate::state::command::{Delete, DeleteCheck, EndSession, Release, ReleaseAcquired, SetCheck};
use crate::state::{CheckChanged, Deleted, Kind, NewSession};
use crate::time::{whole_millis, Millis};

/// Encoded size of a `SessionInfo` besides its name, generously rounded up.
const SESSION_INFO_SIZE: usize = 64;
/// A bound on a `CheckInfo`'s encoded size besides its name and note.
const CHECK_INFO_SIZE: usize = 32;

/// One page of `items`: at most `limit` (0: the server's page size), and
/// past the first no more than `budget` bytes as `size` counts them, so a
/// reply stays well inside a frame. Says whether more follow.
fn page<T>(
    items: impl Iterator<Item = T>,
    limit: u32,
    budget: usize,
    size: impl Fn(&T) -> usize,
) -> (Vec<T>, bool) {
    let limit = match limit {
        0 => MAX_LIST_PAGE,
        n => n.min(MAX_LIST_PAGE),
    } as usize;
    let mut used = 0;
    let mut items = items.peekable();
    let mut taken = Vec::new();
    while let Some(item) =
        items.next_if(|i| taken.len() < limit && (taken.is_empty() || used + size(i) <= budget))
    {
        used += size(&item);
        taken.push(item);
    }
    (taken, items.peek().is_some())
}

/// The session a request acts for, when it changes or depends on that
/// session's locks, nodes or subscriptions: such requests wait for the
/// session's fail-over acknowledgement (`FO-5`).
fn acting_for(request: &Request) -> Option<SessionId> {
    match request {
        Request::Acquire(a) => Some(a.session.id),
        Request::Release { session, .. }
        | Request::ReleaseUnfenced { session, .. }
        | Request::GetSequencer { session, .. }
        | Request::Subscribe { session, .. }
        | Request::Unsubscribe { session, .. } => Some(session.id),
        Request::Put(put) => put.ephemeral.map(|t| t.id),
        _ => None,
    }
}

/// Whether a request changes the durable state, so that a master on a
/// full disk refuses it (`STORE-5`); only these may change what a cache
/// holds (`CACHE-3`).
fn writes(request: &Request) -> bool {
    matches!(
        request,
        Request::CreateSession(_)
            | Request::DestroySession { .. }
            | Request::Put(_)
            | Request::Delete { .. }
            | Request::Acquire(_)
            | Request::Release { .. }
            | Request::ReleaseUnfenced { .. }
            | Request::SetCheck { .. }
            | Request::DeleteCheck { .. }
    )
}

/// The first 1000 of a check's ended sessions, so the reply fits a frame
/// however many were bound to it (`CHK-3`).
fn capped(mut sessions: Vec<SessionId>) -> Vec<SessionId> {
    sessions.truncate(1000);
    sessions
}

impl Engine {
    /// Answers a request, or refuses it for what every request is checked
    /// for first: authority, a full disk, fan-out behind, an unread
    /// connection, quotas, a fail-over not yet acknowledged.
    pub(super) fn handle(&mut self, call: Call) {
        let Some(call) = self.checked(call) else {
            return;
        };
        // A change to what sessions cache waits for their invalidation
        // (`CACHE-3`); reads and KeepAlives change nothing and go on.
        let call = match writes(&call.request) {
            true => match self.held_for_caches(call) {
                Some(call) => call,
                None => return,
            },
            false => call,
        };
        self.serve(call, self.now);
    }

    /// Answers a request let go after it was held for caches: its checks
    /// again, as things may have changed meanwhile, then the work.
    pub(crate) fn handle_checked(&mut self, call: Call) {
        if let Some(call) = self.checked(call) {
            self.serve(call, self.now);
        }
    }

    /// The request, if it passes the checks every request passes; if not,
    /// it is answered with the refusal.
    fn checked(&mut self, call: Call) -> Option<Call> {
        if let Err(refused) = self.authorize(&call.request) {
            self.deliver(call.reply, Err(refused));
            return None; // AUTH-2
        }
        if self.disk_full && writes(&call.request) {
            let refusal = Error::new(
                ErrorCode::StorageFull,
                "the master's disk is full: nothing was written; reads and KeepAlives are \
                 served, and writes are accepted again once it has room",
            );
            self.deliver(call.reply, Err(refusal));
            return None; // STORE-5
        }
        if self.events.backlogged(self.config.fanout_backlog) && writes(&call.request) {
            let refusal = Error::new(
                ErrorCode::Congested {
                    retry_after_ms: CONGESTED_RETRY_MS,
                },
                "the master is behind telling subscribers of earlier writes: nothing was done; retry",
            );
            self.deliver(call.reply, Err(refusal));
            return None; // EV-9
        }
        // A peer that leaves its replies unread gets nothing more to leave
        // unread, and nothing is done for it, but its leases are kept
        // (`CONN-9`).
        let keepalive = matches!(
            call.request,
            Request::KeepAlive(_) | Request::KeepAliveAll(_)
        );
        if !keepalive && self.congested(&call.reply) {
            let refusal = self.congested_refusal();
            self.deliver(call.reply, Err(refusal));
            return None;
        }
        if let Some(refusal) = self.over_quota(&call.request, call.peer) {
            self.deliver(call.reply, Err(refusal));
            return None; // QUOTA-1..QUOTA-5
        }
        if let Some(session) = acting_for(&call.request) {
            // Its lease ran out; its end waits for caches (`CACHE-5`).
            if self.cache.ending.contains(&session) {
                let ended = Error::new(
                    ErrorCode::SessionExpired,
                    format!("session {session} expired: its lease ran out"),
                );
                self.deliver(call.reply, Err(ended));
                return None;
            }
            if self.failover_pending.contains(&session) {
                let error = Error::new(
                    ErrorCode::FailoverInProgress {
                        retry_after_ms: FAILOVER_RETRY_MS,
                    },
                    format!(
                        "failover in progress: session {session} must acknowledge the fail-over event on its next KeepAlive; retry"
                    ),
                );
                self.deliver(call.reply, Err(error));
                return None;
            }
        }
        Some(call)
    }

    /// Carries out a request that passed the checks every request passes.
    fn serve(&mut self, call: Call, now: Millis) {
        let reply = match call.request {
            Request::KeepAlive(ka) => return self.keepalive(ka, call.reply, now),
            Request::KeepAliveAll(all) => return self.keepalive_all(all, call.reply, now),
            Request::GetCached(get) => self.get_cached(get),
            Request::Watch {
                key,
                after_index,
                timeout_ms,
            } => return self.watch(key, after_index, timeout_ms, call.reply),
            Request::Acquire(acquire) => return self.acquire(acquire, call.reply, call.peer, now),
            Request::Subscribe {
                session,
                key,
                prefix,
                mask,
            } => self.subscribe(session.id, key, prefix, mask, call.peer),
            Request::Unsubscribe {
                session,
                subscription,
            } => self.unsubscribe(session.id, subscription),
            Request::Release { key, session, .. } if self.config.unsafe_unfenced_releases => {
                let release = Release {
                    key,
                    session: session.id,
                };
                self.release(release, None, now)
            }
            Request::Release {
                key,
                session,
                acquired,
            } => {
                let named = (key.clone(), session.id, acquired);
                let release = ReleaseAcquired {
                    key,
                    session: session.id,
                    acquired,
                };
                self.release(release, Some(named), now)
            }
            Request::ReleaseUnfenced { key, session } => {
                let release = Release {
                    key,
                    session: session.id,
                };
                self.release(release, None, now)
            }
            Request::GetSequencer { key, session } => self
                .state
                .sequencer_of(&key, session.id)
                .map(|s| Response::Sequencer {
                    sequencer: s.to_bytes(),
                })
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::LockNotHeld,
                        format!("the session does not hold '{}'", key.escape_debug()),
                    )
                }),
            Request::CheckSequencer { sequencer } => match Sequencer::from_bytes(&sequencer) {
                Some(s) => Ok(Response::SequencerChecked {
                    // A holder whose lease ran out holds nothing, even while
                    // its end waits for caches (`CACHE-5`).
                    valid: self.state.sequencer_is_valid(&s)
                        && !self.cache.ending.contains(&s.session),
                }),
                None => Err(Error::new(
                    ErrorCode::InvalidArgument,
                    "those bytes are not a sequencer",
                )),
            },
            Request::Get { key, stat_only } => check_key(&key)
                .map_err(|e| Error::new(ErrorCode::InvalidArgument, e))
                .map(|()| Response::Node {
                    index: self.state.namespace().key_index(&key),
                    node: self.node_view(&key, stat_only),
                }),
            Request::List {
                prefix,
                recursive,
                after,
                limit,
            } => {
                let limit = match limit {
                    0 => MAX_LIST_PAGE,
                    n => n.min(MAX_LIST_PAGE),
                } as usize;
                self.state
                    .namespace()
                    .list_page(
                        &prefix,
                        recursive,
                        after.as_deref(),
                        limit,
                        self.config.max_frame / 2,
                    )
                    .map(|(keys, more)| Response::Keys {
                        index: self.state.index(),
                        keys,
                        more,
                    })
            }
            Request::Put(put) => {
                let key = put.key.clone();
                self.apply(Put::from(put), now).map(|index| {
                    self.count_node_bytes(key, call.peer);
                    Response::Written { index }
                })
            }
            Request::Delete {
                key,
                cas,
                recursive,
                authority,
            } => self
                .locked_nodes(&authority)
                .and_then(|locked| {
                    self.apply(
                        Delete {
                            key,
                            cas,
                            recursive,
                            locked,
                        },
                        now,
                    )
                })
                .map(|Deleted { index, mut keys }| {
                    // Bounded, so the reply fits a frame however many keys
                    // a recursive delete removed (`NS-7`).
                    let deleted_total = keys.len() as u64;
                    keys.truncate(1000);
                    Response::Deleted {
                        index,
                        keys,
                        deleted_total,
                    }
                }),
            Request::CreateSession(c) => {
                let (id, secret) = (self.ids.next_id(), self.ids.next_secret());
                let command = NewSession::requested(c, id, secret);
                self.apply(command, now).map(|s| Response::SessionCreated {
                    session: self.counted_session(s.id, call.peer),
                    secret: s.secret,
                    epoch: self.config.epoch,
                    lease: LeaseGrant::conservative(s.lease.as_millis() as u64, 0),
                })
            }
            Request::DestroySession { session, authority } => self
                .may_destroy(session, &authority)
                .and_then(|()| {
                    self.apply(
                        EndSession {
                            id: session,
                            cause: EndCause::Destroyed,
                        },
                        now,
                    )
                })
                .map(|_| Response::Destroyed),
            Request::SessionInfo { session } => self
                .info(session, now)
                .map(Response::SessionInfo)
                .ok_or_else(|| self.state.missing_session(session)),
            Request::LockInfo { key } => Ok(Response::LockInfo(self.lock_info(&key, now))),
            Request::SessionLocks { session } => self.session_locks(session),
            Request::ListSessions { after, limit } => {
                let (sessions, more) = page(
                    self.state.sessions_after(after),
                    limit,
                    self.config.max_frame / 2,
                    |s| {
                        SESSION_INFO_SIZE
                            + s.name.len()
                            + s.checks.iter().map(|c| c.len() + 1).sum::<usize>()
                    },
                );
                let ids: Vec<SessionId> = sessions.into_iter().map(|s| s.id).collect();
                Ok(Response::Sessions {
                    sessions: ids
                        .into_iter()
                        .filter_map(|id| self.info(id, now))
                        .collect(),
                    more,
                })
            }
            Request::SetCheck { name, status, note } => {
                let creating = self.state.checks.get(&name).is_none();
                self.apply(
                    SetCheck {
                        name: name.clone(),
                        status,
                        note,
                    },
                    now,
                )
                .map(|CheckChanged { index, invalidated }| {
                    if let (true, Some(peer)) = (creating, call.peer) {
                        self.quotas.checks.take(name, peer, 1);
                    }
                    Response::CheckSet {
                        index,
                        invalidated_total: invalidated.len() as u64,
                        invalidated: capped(invalidated),
                    }
                })
            }
            Request::DeleteCheck { name } => self
                .apply(DeleteCheck { name: name.clone() }, now)
                .inspect(|_| self.quotas.checks.give_back(&name))
                .map(
                    |CheckChanged { index, invalidated }| Response::CheckDeleted {
                        index,
                        invalidated_total: invalidated.len() as u64,
                        invalidated: capped(invalidated),
                    },
                ),
            Request::ListChecks { after, limit } => {
                let (checks, more) = page(
                    self.state.checks.after(after.as_deref()),
                    limit,
                    self.config.max_frame / 2,
                    |c| CHECK_INFO_SIZE + c.name.len() + c.note.len(),
                );
                Ok(Response::Checks { checks, more })
            }
        };
        self.deliver(call.reply, reply);
    }

    /// Carries out a release (`LOCK-4`); a refused stale one is observed,
    /// so that a trace says why a lock its client let go stayed held.
    /// `named`: the key, session and acquire a fenced release names.
    fn release<K: Kind<Reply = u64> + Clone>(
        &mut self,
        release: K,
        named: Option<(String, SessionId, u64)>,
        now: Millis,
    ) -> Result<Response, Error> {
        match self.apply(release, now) {
            Ok(index) => Ok(Response::Released { index }),
            Err(e) => {
                if let (ErrorCode::StaleRelease { acquired }, Some((key, session, named))) =
                    (e.code, named)
                {
                    self.observe(|| MasterEvent::ReleaseRefused {
                        session,
                        key,
                        named,
                        acquired,
                        now,
                    });
                }
                Err(e)
            }
        }
    }

    /// The refusal of a request that would take `peer` past one of its
    /// quotas (`QUOTA-1`..`QUOTA-5`).
    fn over_quota(&self, request: &Request, peer: Option<std::net::IpAddr>) -> Option<Error> {
        use crate::quota::over;
        let (c, q) = (&self.config, &self.quotas);
        let node_bytes = |key: &str, contents: usize| (key.len() + contents) as u64;
        match request {
            Request::CreateSession(_) => over(
                peer,
                |p| q.sessions.used(p) + 1,
                c.max_sessions_per_peer,
                "live sessions",
            ),
            Request::SetCheck { name, .. } if self.state.checks.get(name).is_none() => over(
                peer,
                |p| q.checks.used(p) + 1,
                c.max_checks_per_peer,
                "health checks",
            ),
            Request::Subscribe {
                session,
                key,
                prefix,
                ..
            } if !self.events.subscribed(session.id, key, *prefix) => over(
                peer,
                |p| q.subscriptions.used(p) + 1,
                c.max_subscriptions_per_peer,
                "subscriptions",
            ),
            Request::Put(put) => over(
                peer,
                |p| {
                    q.bytes
                        .used_with(p, &put.key, node_bytes(&put.key, put.contents.len()))
                },
                c.max_bytes_per_peer,
                "bytes of nodes",
            ),
            Request::Acquire(a) => {
                let waiting = a.wait_ms.is_some().then(|| {
                    over(
                        peer,
                        |p| q.waiters.used(p) + 1,
                        c.max_waiters_per_peer,
                        "acquires waiting",
                    )
                });
                let writing = a.contents.as_ref().map(|contents| {
                    over(
                        peer,
                        |p| {
                            q.bytes
                                .used_with(p, &a.key, node_bytes(&a.key, contents.len()))
                        },
                        c.max_bytes_per_peer,
                        "bytes of nodes",
                    )
                });
                waiting.flatten().or(writing.flatten())
            }
            _ => None,
        }
    }

    /// Counts the node at `key`, just written by `peer`, against it; the
    /// node's previous writer gets its bytes back (`QUOTA-5`).
    pub(crate) fn count_node_bytes(&mut self, key: String, peer: Option<std::net::IpAddr>) {
        let (Some(peer), Some(node)) = (peer, self.state.namespace().get(&key)) else {
            return;
        };
        let bytes = (key.len() + node.contents.len()) as u64;
        self.quotas.bytes.take(key, peer, bytes);
    }

    /// Counts a new session against the peer that created it (`QUOTA-2`).
    fn counted_session(&mut self, id: SessionId, peer: Option<std::net::IpAddr>) -> SessionId {
        if let Some(peer) = peer {
            self.quotas.sessions.take(id, peer, 1);
        }
        id
    }

    /// The node at `key` as a reply carries it.
    pub(crate) fn node_view(&self, key: &str, stat_only: bool) -> Option<NodeView> {
        let node = self.state.namespace().get(key)?;
        let mut stat = node.stat();
        if let Some(lock) = self.state.locks().get(key) {
            stat.lock_holders = lock.holders.iter().map(|(s, h)| (*s, h.mode)).collect();
        }
        Some(NodeView {
            key: key.to_string(),
            stat,
            contents: (!stat_only).then(|| node.contents.clone()),
        })
    }

    /// Who holds `key`'s lock, who waits (a page of them), and its
    /// lock-delay (`LOCK-14`).
    fn lock_info(&self, key: &str, now: Millis) -> LockInfo {
        let index = self.state.namespace().key_index(key);
        let Some(lock) = self.state.locks().get(key) else {
            return LockInfo {
                index,
                holders: Vec::new(),
                waiters: Vec::new(),
                waiters_total: 0,
                delay_remaining_ms: None,
            };
        };
        let waiters = lock.waiters.iter().map(|w| (w.session, w.mode));
        let (waiters, _) = page(waiters, 0, usize::MAX, |_| 0);
        LockInfo {
            index,
            holders: lock.holders.iter().map(|(s, h)| (*s, h.mode)).collect(),
            waiters,
            waiters_total: lock.waiters.len() as u64,
            delay_remaining_ms: lock.delay_remaining(now).map(whole_millis),
        }
    }

    /// The locks `session` holds and waits for (`SES-11`), as many as fit
    /// half a frame.
    fn session_locks(&self, session: SessionId) -> Result<Response, Error> {
        if self.state.session(session).is_none() {
            return Err(self.state.missing_session(session));
        }
        let locks = self.state.locks();
        let held = locks.held_by(session).into_iter().filter_map(|key| {
            let mode = locks.get(&key)?.holders.get(&session)?.mode;
            Some((true, key, mode))
        });
        let waiting = locks.waited_by(session).into_iter().filter_map(|key| {
            let waiter = locks
                .get(&key)?
                .waiters
                .iter()
                .find(|w| w.session == session)?;
            Some((false, key.clone(), waiter.mode))
        });
        let (listed, more) = page(held.chain(waiting), 0, self.config.max_frame / 2, |e| {
            e.1.len() + 8
        });
        let (mut held, mut waiting) = (Vec::new(), Vec::new());
        for (holds, key, mode) in listed {
            if holds { &mut held } else { &mut waiting }.push((key, mode));
        }
        Ok(Response::SessionLocks(SessionLocks {
            held,
            waiting,
            more,
        }))
    }

    fn info(&self, id: SessionId, now: Millis) -> Option<SessionInfo> {
        let s = self.state.session(id)?;
        Some(SessionInfo {
            session: s.id,
            name: s.name.to_string(),
            lease_ms: s.lease.as_millis() as u64,
            lock_delay_ms: s.lock_delay.as_millis() as u64,
            behavior: s.behavior,
            lease_remaining_ms: self.leases.remaining(id, now).map_or(0, whole_millis),
            keepalive_held: self.leases.held(id).is_some_and(|h| !h.reply.is_closed()),
            checks: s.checks.to_vec(),
        })
    }

    /// Whether the connection of `reply` has too many bytes of replies
    /// unread to be sent more (`CONN-9`).
    pub(crate) fn congested(&self, reply: &ReplyTx) -> bool {
        let c = &self.config;
        reply.congested(c.reply_budget, c.all_reply_budget, c.max_frame)
    }

    /// Whether events may go on a KeepAlive reply to `reply`'s connection:
    /// not while it is congested, so pipelined KeepAlives cannot pile events
    /// up (`CONN-9`, `EV-3`).
    pub(crate) fn may_carry_events(&self, reply: &ReplyTx) -> bool {
        !self.congested(reply)
    }

    /// The refusal for a request on a connection whose unread replies
    /// have used up its budget (`CONN-9`).
    pub(crate) fn congested_refusal(&self) -> Error {
        Error::new(
            ErrorCode::Congested {
                retry_after_ms: CONGESTED_RETRY_MS,
            },
            format!(
                "this connection's unread replies exceed its budget of {} bytes: nothing was done; read them, then retry",
                self.config.reply_budget
            ),
        )
    }

    /// `answer()`, unless the connection of `reply` is congested, which
    /// gets the refusal instead (`CONN-9`).
    pub(crate) fn unless_congested(
        &self,
        reply: &ReplyTx,
        answer: impl FnOnce() -> Response,
    ) -> Result<Response, Error> {
        if self.congested(reply) {
            Err(self.congested_refusal())
        } else {
            Ok(answer())
        }
    }

    pub(crate) fn wrong_epoch(&self, epoch: u64) -> Error {
        Error::new(
            ErrorCode::WrongEpoch {
                current: self.config.epoch,
            },
            format!(
                "request names epoch {epoch}; the master's epoch is {}",
                self.config.epoch
            ),
        )
    }
}
