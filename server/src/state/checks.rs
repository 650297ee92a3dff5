//! The state machine's side of health checks (SPEC `CHK-1`..): setting and
//! deleting them, and ending the sessions a critical check ends.

use leasehold_protocol::{CheckStatus, Error, ErrorCode, SessionId};

use super::command::{DeleteCheck, SetCheck};
use super::{Applied, CheckChanged, Kind, State, StateEvent};
use crate::check::{check_name, Check, MAX_CHECKS, MAX_CHECKS_PER_SESSION, MAX_CHECK_NOTE};
use crate::session::EndCause;
use crate::time::Millis;

impl State {
    /// Refuses a new session's checks unless each exists and is not
    /// critical (`CHK-2`).
    pub(crate) fn check_session_checks(&self, names: &[String]) -> Result<(), Error> {
        if names.len() > MAX_CHECKS_PER_SESSION {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "a session may name at most {MAX_CHECKS_PER_SESSION} checks, not {}",
                    names.len()
                ),
            ));
        }
        for name in names {
            match self.checks.get(name) {
                None => {
                    return Err(Error::new(
                        ErrorCode::InvalidArgument,
                        format!("there is no check named '{}'", name.escape_debug()),
                    ))
                }
                Some(c) if c.status == CheckStatus::Critical => {
                    return Err(Error::new(
                        ErrorCode::InvalidArgument,
                        format!("check '{name}' is critical: {}", c.note),
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    pub(crate) fn set_check(
        &mut self,
        name: String,
        status: CheckStatus,
        note: String,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<CheckChanged, Error> {
        check_name(&name).map_err(|e| Error::new(ErrorCode::InvalidArgument, e))?;
        if note.len() > MAX_CHECK_NOTE {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "a check note of {} bytes exceeds the maximum of {MAX_CHECK_NOTE}",
                    note.len()
                ),
            ));
        }
        if self.checks.get(&name).is_none() && self.checks.checks.len() >= MAX_CHECKS {
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!("the master holds its maximum of {MAX_CHECKS} checks"),
            ));
        }
        self.checks.checks.insert(
            name.clone(),
            Check {
                status,
                note,
                modify_index: index,
            },
        );
        let invalidated = if status == CheckStatus::Critical {
            self.invalidate_bound(&name, index, now, events)
        } else {
            Vec::new()
        };
        Ok(CheckChanged { index, invalidated })
    }

    pub(crate) fn delete_check(
        &mut self,
        name: &str,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<CheckChanged, Error> {
        if self.checks.checks.remove(name).is_none() {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("there is no check named '{}'", name.escape_debug()),
            ));
        }
        let invalidated = self.invalidate_bound(name, index, now, events);
        Ok(CheckChanged { index, invalidated })
    }

    /// Ends every session bound to check `name` (`CHK-3`, `CHK-4`).
    fn invalidate_bound(
        &mut self,
        name: &str,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Vec<SessionId> {
        let sessions = self.checks.bound_to(name);
        for &id in &sessions {
            // Each is live: ending a session unbinds it from every check.
            let _ = self.end_session(id, EndCause::CheckFailed, index, now, events);
        }
        sessions
    }
}

impl Kind for SetCheck {
    type Reply = CheckChanged;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<CheckChanged, Error> {
        state.set_check(self.name, self.status, self.note, index, now, events)
    }
    fn applied(CheckChanged { index, invalidated }: CheckChanged) -> Applied {
        Applied::CheckSet { index, invalidated }
    }
}

impl Kind for DeleteCheck {
    type Reply = CheckChanged;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<CheckChanged, Error> {
        let changed = state.delete_check(&self.name, index, now, events)?;
        state.access.check_owners.remove(&self.name);
        Ok(changed)
    }
    fn applied(CheckChanged { index, invalidated }: CheckChanged) -> Applied {
        Applied::CheckDeleted { index, invalidated }
    }
}

#[cfg(test)]
mod tests {
    use crate::state::command;
    use std::time::Duration;

    use leasehold_protocol::{Behavior, CheckInfo, LockMode};

    use super::*;
    use crate::check::MAX_CHECK_NAME;
    use crate::config::Config;
    use crate::state::NewSession;
    use crate::state::{Bounds, Command};
    use crate::time::at;

    fn id(n: u128) -> SessionId {
        SessionId::from_u128(n)
    }

    fn create(s: &mut State, n: u128, checks: &[&str]) -> Result<Applied, Error> {
        let command = Command::CreateSession(NewSession {
            id: id(n),
            secret: leasehold_protocol::SessionSecret::from_bytes([7; 16]),
            name: format!("s{n}"),
            lease: None,
            lock_delay: Some(Duration::from_secs(5)),
            behavior: Behavior::Release,
            checks: checks.iter().map(|c| c.to_string()).collect(),
        });
        s.apply(command, at(0)).0
    }

    fn set(s: &mut State, name: &str, status: CheckStatus, now: Millis) -> Vec<SessionId> {
        let command = Command::SetCheck(command::SetCheck {
            name: name.into(),
            status,
            note: String::new(),
        });
        match s.apply(command, now).0 {
            Ok(Applied::CheckSet { invalidated, .. }) => invalidated,
            other => panic!("expected the check set, got {other:?}"),
        }
    }

    fn state() -> State {
        State::new(Bounds::from(&Config::default()))
    }

    // CHK-2
    #[test]
    fn a_session_cannot_bind_to_a_missing_check() {
        let mut s = state();
        let refused = create(&mut s, 1, &["disk"]).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidArgument);
        assert!(
            refused.message.contains("no check named 'disk'"),
            "{refused}"
        );
        assert!(s.session(id(1)).is_none());
    }

    // CHK-2
    #[test]
    fn a_session_cannot_bind_to_a_critical_check() {
        let mut s = state();
        set(&mut s, "disk", CheckStatus::Critical, at(0));
        let refused = create(&mut s, 1, &["disk"]).unwrap_err();
        assert!(refused.message.contains("critical"), "{refused}");
    }

    // CHK-3
    #[test]
    fn a_critical_check_ends_exactly_the_sessions_bound_to_it() {
        let mut s = state();
        set(&mut s, "disk", CheckStatus::Passing, at(0));
        set(&mut s, "net", CheckStatus::Passing, at(0));
        create(&mut s, 1, &["disk"]).unwrap();
        create(&mut s, 2, &["disk", "net"]).unwrap();
        create(&mut s, 3, &["net"]).unwrap();
        create(&mut s, 4, &[]).unwrap();
        assert_eq!(
            set(&mut s, "disk", CheckStatus::Critical, at(10)),
            [id(1), id(2)]
        );
        assert!(s.session(id(1)).is_none() && s.session(id(2)).is_none());
        assert!(s.session(id(3)).is_some() && s.session(id(4)).is_some());
        let gone = s.missing_session(id(1));
        assert_eq!(gone.code, ErrorCode::SessionExpired);
        assert!(gone.message.contains("health check"), "{gone}");
    }

    // CHK-3
    #[test]
    fn warning_and_passing_end_nothing() {
        let mut s = state();
        set(&mut s, "disk", CheckStatus::Passing, at(0));
        create(&mut s, 1, &["disk"]).unwrap();
        assert_eq!(
            set(&mut s, "disk", CheckStatus::Warning, at(1)),
            Vec::<SessionId>::new()
        );
        assert_eq!(
            set(&mut s, "disk", CheckStatus::Passing, at(2)),
            Vec::<SessionId>::new()
        );
        assert!(s.session(id(1)).is_some());
    }

    // CHK-3, LOCK-6
    #[test]
    fn a_critical_check_puts_the_sessions_locks_in_lock_delay() {
        let mut s = state();
        set(&mut s, "disk", CheckStatus::Passing, at(0));
        create(&mut s, 1, &["disk"]).unwrap();
        create(&mut s, 2, &[]).unwrap();
        let acquire = |who: u128| {
            Command::Acquire(command::Acquire {
                key: "k".into(),
                session: id(who),
                mode: LockMode::Exclusive,
                contents: None,
                transient: false,
                wait: false,
            })
        };
        s.apply(acquire(1), at(0)).0.unwrap();
        set(&mut s, "disk", CheckStatus::Critical, at(1_000));
        let refused = s.apply(acquire(2), at(2_000)).0.unwrap_err();
        assert_eq!(
            refused.code,
            ErrorCode::LockDelayed {
                remaining_ms: 4_000
            }
        );
    }

    // CHK-4
    #[test]
    fn deleting_a_check_ends_its_sessions() {
        let mut s = state();
        set(&mut s, "disk", CheckStatus::Passing, at(0));
        create(&mut s, 1, &["disk"]).unwrap();
        let (reply, _) = s.apply(
            Command::DeleteCheck(command::DeleteCheck {
                name: "disk".into(),
            }),
            at(1),
        );
        assert!(matches!(
            reply,
            Ok(Applied::CheckDeleted { ref invalidated, .. }) if invalidated == &[id(1)]
        ));
        assert!(s.session(id(1)).is_none());
        assert!(s.checks.get("disk").is_none());
    }

    // CHK-5
    #[test]
    fn a_listing_counts_only_live_bound_sessions() {
        let mut s = state();
        set(&mut s, "disk", CheckStatus::Passing, at(0));
        create(&mut s, 1, &["disk"]).unwrap();
        create(&mut s, 2, &["disk"]).unwrap();
        let end = Command::EndSession(command::EndSession {
            id: id(1),
            cause: EndCause::Destroyed,
        });
        s.apply(end, at(1)).0.unwrap();
        let listed: Vec<CheckInfo> = s.checks.after(None).collect();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].sessions, 1);
        assert_eq!(listed[0].status, CheckStatus::Passing);
    }

    // CHK-1
    #[test]
    fn names_and_notes_are_checked() {
        let mut s = state();
        for name in ["", "has space", &"x".repeat(MAX_CHECK_NAME + 1)] {
            let command = Command::SetCheck(command::SetCheck {
                name: name.into(),
                status: CheckStatus::Passing,
                note: String::new(),
            });
            let refused = s.apply(command, at(0)).0.unwrap_err();
            assert_eq!(refused.code, ErrorCode::InvalidArgument, "{name:?}");
        }
        let command = Command::SetCheck(command::SetCheck {
            name: "ok".into(),
            status: CheckStatus::Passing,
            note: "n".repeat(MAX_CHECK_NOTE + 1),
        });
        assert_eq!(
            s.apply(command, at(0)).0.unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert!(check_name("service:db-1/disk_2.ok").is_ok());
    }
}
