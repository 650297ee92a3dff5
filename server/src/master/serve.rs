//! Serving: requests to commands to responses, what the master does for
//! each request that admission (`admission.rs`) and, for a write, the cache
//! gate (`cache.rs`) let through. Commands go on to `apply.rs`; replies
//! leave through the outbox (`outbox.rs`).

use leasehold_protocol::{Error, ErrorCode, LeaseGrant, Request, Response, Sequencer, SessionId};

use super::views::page;
use super::{Call, Engine};
use crate::access::Owner;
use crate::config::{MAX_LIST_PAGE, MAX_LIST_SCAN};
use crate::namespace::Put;
use crate::node::check_key;
use crate::observe::MasterEvent;
use crate::session::EndCause;
use crate::state::command::{Delete, DeleteCheck, EndSession, Release, ReleaseAcquired, SetCheck};
use crate::state::command::{OwnedCheck, OwnedSession};
use crate::state::{CheckChanged, Deleted, Kind, NewSession};
use crate::time::Millis;

/// Encoded size of a `SessionInfo` besides its name, generously rounded up.
const SESSION_INFO_SIZE: usize = 64;
/// A bound on a `CheckInfo`'s encoded size besides its name and note.
const CHECK_INFO_SIZE: usize = 32;

/// Whether the audit log records `request` once it is served, done or
/// refused (`AUDIT-2`).
fn audited_once_served(request: &Request) -> bool {
    matches!(
        request,
        Request::SetRule(_)
            | Request::RemoveRule { .. }
            | Request::SetAccessControl { .. }
            | Request::CreateToken { .. }
            | Request::RevokeToken { .. }
            | Request::DestroySession { .. }
            | Request::Authenticate { .. }
            | Request::SaveSnapshot
    )
}

/// The first 1000 of a check's ended sessions, so the reply fits a frame
/// however many were bound to it (`CHK-3`).
fn capped(mut sessions: Vec<SessionId>) -> Vec<SessionId> {
    sessions.truncate(1000);
    sessions
}

impl Engine {
    /// Carries out a request that passed the checks every request passes.
    pub(super) fn serve(&mut self, call: Call, now: Millis) {
        let principal = self.principal_of(call.caller.as_deref());
        // Kept for the audit log, for the few requests it records once
        // served (`AUDIT-2`).
        let operator = principal == crate::access::Principal::Operator
            || matches!(
                &call.request,
                Request::Delete {
                    authority: leasehold_protocol::Authority::Operator(_),
                    ..
                }
            );
        let audited = (self.auditing()
            && (audited_once_served(&call.request)
                || operator && super::admission::writes(&call.request)))
        .then(|| call.request.clone());
        // When the KeepAlive reached the master, however late it is read.
        let arrived = call.arrived.map_or(now, |at| at.min(now));
        let reply = match call.request {
            Request::KeepAlive(ka) => return self.keepalive(ka, call.reply, arrived, now),
            Request::KeepAliveAll(all) => {
                return self.keepalive_all(all, call.reply, &principal, arrived, now)
            }
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
                self.readable_page(&prefix, recursive, after, limit, &principal)
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
                .may_delete_below(&key, recursive, &principal)
                .and_then(|()| self.locked_nodes(&key, &authority, &principal))
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
                let session = NewSession::requested(c, id, secret);
                let created = match Owner::of(&principal) {
                    // ID-5: the session is its creator's as well as its
                    // secret's.
                    Some(owner) => self.apply(OwnedSession { session, owner }, now),
                    None => self.apply(session, now),
                };
                created.map(|s| Response::SessionCreated {
                    session: self.counted_session(s.id, call.peer),
                    secret: s.secret,
                    epoch: self.config.epoch,
                    lease: LeaseGrant::conservative(s.lease.as_millis(), 0),
                })
            }
            Request::DestroySession { session, authority } => self
                .may_destroy(session, &authority, &principal)
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
            Request::SessionInfo { session } => {
                self.may_see_session(session, &principal).and_then(|()| {
                    self.info(session, now)
                        .map(Response::SessionInfo)
                        .ok_or_else(|| self.state.missing_session(session))
                })
            }
            Request::LockInfo { key } => Ok(Response::LockInfo(self.lock_info(&key, now))),
            Request::SessionLocks { session } => self
                .may_see_session(session, &principal)
                .and_then(|()| self.session_locks(session, &principal)),
            Request::ListSessions { after, limit } => {
                let (sessions, more) = page(
                    self.state
                        .sessions_after(after)
                        .filter(|s| self.sees_session(s.id, &principal)),
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
                let check = SetCheck {
                    name: name.clone(),
                    status,
                    note,
                };
                match Owner::of(&principal).filter(|_| creating) {
                    // CHK-6: a check a principal creates is its own.
                    Some(owner) => self.apply(OwnedCheck { check, owner }, now),
                    None => self.apply(check, now),
                }
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
                // Checks are few (`MAX_CHECKS`): skipping those it may not
                // read costs little, and an empty page is the end.
                let (checks, more) = page(
                    self.state
                        .checks
                        .after(after.as_deref())
                        .filter(|c| self.may_read(&principal, &c.name)),
                    limit,
                    self.config.max_frame / 2,
                    |c| CHECK_INFO_SIZE + c.name.len() + c.note.len(),
                );
                Ok(Response::Checks { checks, more })
            }
            Request::Authenticate { token } => {
                self.authenticate(&token, call.caller.as_deref(), now)
            }
            Request::WhoAmI => Ok(Response::Identity(self.identity(call.caller.as_deref()))),
            Request::SetRule(rule) => self.set_rule(rule, &principal, now),
            Request::RemoveRule {
                prefix,
                principal: whose,
            } => self.remove_rule(prefix, whose, &principal, now),
            Request::ListRules => Ok(self.list_rules()),
            Request::SetAccessControl { enabled } => {
                self.set_access_control(enabled, &principal, now)
            }
            Request::CreateToken { principal, note } => self.create_token(principal, note, now),
            Request::RevokeToken { id } => self.revoke_token(id, now),
            Request::ListTokens => Ok(self.list_tokens()),
            Request::ListLocks {
                prefix,
                after,
                limit,
            } => self.list_locks(&prefix, after, limit, &principal, now),
            Request::Status => Ok(Response::Status(self.status(now))),
            Request::SaveSnapshot => Ok(self.save_snapshot(now)),
            Request::ReadSnapshot { id, offset } => self.read_snapshot(id, offset),
        };
        if let Some(request) = audited {
            // Who asked, as the request found it: an Authenticate changes
            // it.
            self.audit_served(&request, (&principal, call.peer), &reply);
        }
        self.deliver(call.reply, reply);
    }

    /// A page of the keys below `prefix` that `principal` may read
    /// (`NS-5`, `ACL-4`). Keys it may not read are skipped, not counted,
    /// so that a page is empty only at the end and a client's cursor (the
    /// last key it got) always moves; the skipping stops after
    /// [`MAX_LIST_SCAN`] keys, with a refusal if none of them was readable.
    fn readable_page(
        &self,
        prefix: &str,
        recursive: bool,
        after: Option<String>,
        limit: usize,
        principal: &crate::access::Principal,
    ) -> Result<(Vec<String>, bool), Error> {
        let namespace = self.state.namespace();
        let budget = self.config.max_frame / 2;
        if !self.state.access.enabled {
            return namespace.list_page(prefix, recursive, after.as_deref(), limit, budget);
        }
        let (mut keys, mut cursor, mut scanned, mut used) = (Vec::new(), after, 0, 0);
        loop {
            let (page, more) = namespace.list_page(
                prefix,
                recursive,
                cursor.as_deref(),
                limit - keys.len(),
                budget - used,
            )?;
            scanned += page.len();
            cursor = page.last().cloned();
            for key in page {
                if self.may_read(principal, &key) {
                    used += key.len() + 8;
                    keys.push(key);
                }
            }
            let full = keys.len() >= limit || used >= budget / 2;
            if !more || full || cursor.is_none() {
                return Ok((keys, more));
            }
            if scanned >= MAX_LIST_SCAN {
                if keys.is_empty() {
                    return Err(Error::new(
                        ErrorCode::PermissionDenied,
                        format!(
                            "{} may read none of the next {MAX_LIST_SCAN} keys below {}: \
                             list a prefix it may read",
                            super::rights::described(principal),
                            leasehold_protocol::excerpt(prefix, crate::config::SHOWN_CHARS)
                        ),
                    ));
                }
                return Ok((keys, true));
            }
        }
    }

    /// Whether `principal` may see `session`'s record: with access control
    /// on, its own sessions alone, unless it may read every key (`ACL-4`):
    /// a session's name is its creator's words, often a key it locks.
    pub(super) fn sees_session(
        &self,
        session: SessionId,
        principal: &crate::access::Principal,
    ) -> bool {
        let access = &self.state.access;
        if !access.enabled
            || access.allows_everywhere(principal, leasehold_protocol::access::Rights::READ)
        {
            return true;
        }
        match access.owner(session) {
            Some(owner) => owner.is(principal),
            None => *principal == crate::access::Principal::Anonymous,
        }
    }

    fn may_see_session(
        &self,
        session: SessionId,
        principal: &crate::access::Principal,
    ) -> Result<(), Error> {
        if self.state.session(session).is_none() || self.sees_session(session, principal) {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::PermissionDenied,
            format!(
                "session {session} is another's: {} sees others' sessions only with read on \
                 every key",
                super::rights::described(principal)
            ),
        ))
    }

    /// Refuses a recursive delete unless `principal` may write every key
    /// it would remove (`ACL-3`).
    fn may_delete_below(
        &self,
        key: &str,
        recursive: bool,
        principal: &crate::access::Principal,
    ) -> Result<(), Error> {
        if !recursive || !self.state.access.enabled {
            return Ok(());
        }
        let below = self.state.namespace().list(key, true).unwrap_or_default();
        below
            .iter()
            .try_for_each(|k| self.may(principal, k, leasehold_protocol::access::Rights::WRITE))
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
}
