//! Which member of a cell the next connection goes to (`CELL-7`, `CS-9`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The choice of member a cell's connector makes: the member another
/// member named as master, else the next in turn; once after a connection
/// was given up, any member but its own. [`CellConnector`] makes it over
/// TCP; a [`Connector`] over another transport can make the same one.
///
/// ```
/// use leasehold::MemberChoice;
///
/// let choice = MemberChoice::new(["a:7171", "b:7171", "c:7171"], 0);
/// assert_eq!(choice.pick(), "a:7171");
/// choice.redirected(Some("c:7171"));
/// assert_eq!(choice.pick(), "c:7171");
/// // The connection to c broke: the next connect goes elsewhere first.
/// choice.abandoned();
/// assert_eq!(choice.pick(), "b:7171");
/// ```
///
/// [`CellConnector`]: crate::CellConnector
/// [`Connector`]: crate::Connector
#[derive(Debug)]
pub struct MemberChoice {
    members: Vec<String>,
    next: AtomicUsize,
    /// Where a member said the master is: tried next.
    hint: Mutex<Option<String>>,
    /// The member the last pick went to.
    last: Mutex<Option<String>>,
    /// The member whose connection was given up: not tried first.
    avoid: Mutex<Option<String>>,
}

impl MemberChoice {
    /// A choice among `members` that begins, in turn, with the one at
    /// `start`.
    pub fn new<S: Into<String>>(members: impl IntoIterator<Item = S>, start: usize) -> Self {
        MemberChoice {
            members: members.into_iter().map(Into::into).collect(),
            next: start.into(),
            hint: Mutex::default(),
            last: Mutex::default(),
            avoid: Mutex::default(),
        }
    }

    /// The members, in turn order.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The member the next connection goes to.
    pub fn pick(&self) -> String {
        let (hinted, avoid) = (take(&self.hint), take(&self.avoid));
        let in_turn = || {
            let n = self.members.len().max(1);
            let i = self.next.fetch_add(1, Ordering::Relaxed) % n;
            self.members.get(i).cloned().unwrap_or_default()
        };
        let member = match hinted {
            Some(hinted) if avoid.as_ref() != Some(&hinted) => hinted,
            _ => {
                let member = in_turn();
                if avoid.as_ref() == Some(&member) && self.members.len() > 1 {
                    in_turn()
                } else {
                    member
                }
            }
        };
        *lock(&self.last) = Some(member.clone());
        member
    }

    /// The member last picked is not the master; `master` is where it
    /// said the master is, if it knew.
    pub fn redirected(&self, master: Option<&str>) {
        *lock(&self.hint) = master.map(String::from);
    }

    /// The connection to the member last picked was given up: the next
    /// pick goes to another member first.
    pub fn abandoned(&self) {
        let last = lock(&self.last).clone();
        *lock(&self.avoid) = last;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn take(m: &Mutex<Option<String>>) -> Option<String> {
    lock(m).take()
}

#[cfg(test)]
mod tests {
    use super::MemberChoice;

    // CS-9, CELL-7: a master stopped without closing its connections still
    // accepts new ones; the member of a connection given up is not tried
    // first again, not even when a member names it as master, and only
    // once.
    #[test]
    fn the_member_of_a_connection_given_up_is_not_tried_first_again() {
        let cell = MemberChoice::new(["a:1", "b:1", "c:1"], 0);
        assert_eq!(cell.pick(), "a:1");
        cell.redirected(Some("b:1"));
        assert_eq!(cell.pick(), "b:1");
        cell.abandoned();
        assert_eq!(cell.pick(), "c:1", "b is next in turn, and skipped");
        cell.redirected(Some("c:1"));
        assert_eq!(cell.pick(), "c:1");
        cell.abandoned();
        cell.redirected(Some("c:1"));
        assert_eq!(cell.pick(), "a:1", "a redirect to it is not followed first");
        cell.redirected(Some("c:1"));
        assert_eq!(cell.pick(), "c:1", "only once");
    }

    #[test]
    fn a_single_member_given_up_is_still_the_one_tried() {
        let cell = MemberChoice::new(["a:1"], 0);
        assert_eq!(cell.pick(), "a:1");
        cell.abandoned();
        assert_eq!(cell.pick(), "a:1");
    }

    #[test]
    fn the_turn_begins_at_the_member_asked_for() {
        let cell = MemberChoice::new(["a:1", "b:1", "c:1"], 4);
        assert_eq!(cell.pick(), "b:1");
        assert_eq!(cell.pick(), "c:1");
        assert_eq!(cell.pick(), "a:1");
    }
}
