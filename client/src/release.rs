//! Giving a lock back (SPEC `LOCK-4`): the release names the latest
//! acquire of the lock this client heard answered.
//!
//! Requests on different connections are not ordered (`CONN-2`): a release
//! sent on a connection that then stalled can reach the master after the
//! same session asked for the lock again on another and was told it holds
//! it. Named by its acquire, such a release is refused (`StaleRelease`)
//! and the lock stays with the holding the later answer told of.

use std::future::Future;

use leasehold_protocol::{ErrorCode, Remedy, Request, Response, SessionToken};

use crate::client::{unexpected, Client};
use crate::config::RELEASE_TRIES;
use crate::error::ClientError;

/// Gives back the session's lock of `key`, naming `acquired`, the index of
/// the latest `Acquired` answer heard for it. A release refused because a
/// later acquire renewed the holding (its answer went unheard, or is
/// still on its way) is sent again naming that acquire only if
/// `again(latest)` says nothing of this client may yet hear that answer;
/// otherwise the lock stays with whatever will, and this is `Ok`. A
/// release whose answer never came goes again on the connection the
/// client has now: named by its acquire, a copy of it arriving late
/// changes nothing the second did not. A release that failed so because
/// its master was gone, changing or busy goes again once `back(failures)`
/// says to (`Ok(true)`): waiting for the session to be back in contact, as
/// an acquire does (`LOCK-15`).
pub(crate) async fn release_holding<B>(
    client: &Client,
    session: SessionToken,
    key: &str,
    mut acquired: u64,
    again: impl Fn(u64) -> bool,
    mut back: impl FnMut(u32) -> B,
) -> Result<(), ClientError>
where
    B: Future<Output = Result<bool, ClientError>>,
{
    // Releases refused as stale, and releases that failed for want of a
    // master, each counted on their own.
    let mut renewals = 0;
    let mut failures = 0;
    // Set once a release went out with no answer back: it may have been
    // carried out.
    let mut unanswered = false;
    loop {
        let request = Request::Release {
            key: key.to_string(),
            session,
            acquired,
        };
        match client.call(request).await {
            Ok(Response::Released { .. }) => return Ok(()),
            Ok(other) => return Err(unexpected(other)),
            Err(e) => match e.code() {
                Some(ErrorCode::StaleRelease { acquired: latest }) => {
                    if !again(latest) {
                        return Ok(());
                    }
                    renewals += 1;
                    if renewals >= RELEASE_TRIES {
                        return Err(e);
                    }
                    acquired = latest;
                }
                // The earlier release was carried out after all.
                Some(ErrorCode::LockNotHeld) if unanswered => return Ok(()),
                _ if e.rides_through() => {
                    unanswered |= e.remedy() == Remedy::OutcomeUnknown;
                    if !back(failures).await? {
                        return Err(e);
                    }
                    failures += 1;
                }
                _ => return Err(e),
            },
        }
    }
}
