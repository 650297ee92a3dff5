//! Health checks: named statuses that sessions can be bound to, as Consul's
//! session checks (SPEC `CHK-1`..`CHK-5`).

use leasehold_protocol::{CheckInfo, CheckStatus, Request, Response, SessionId};

use crate::client::{unexpected, Client};
use crate::error::ClientError;

impl Client {
    /// Creates or updates a health check. Setting it `Critical` ends every
    /// session bound to it, as its lease running out would (lock-delay and
    /// all); returns those sessions (the first 1000).
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// use leasehold::{CheckStatus, SessionOptions};
    ///
    /// client.set_check("disk:/var", CheckStatus::Passing, "93% free").await?;
    /// let session = client
    ///     .create_session(SessionOptions::new("db-primary").check("disk:/var"))
    ///     .await?;
    /// // Later, the disk fills: the session, and with it its locks, end.
    /// let ended = client.set_check("disk:/var", CheckStatus::Critical, "0% free").await?;
    /// assert_eq!(ended, [session.id()]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_check(
        &self,
        name: &str,
        status: CheckStatus,
        note: &str,
    ) -> Result<Vec<SessionId>, ClientError> {
        let request = Request::SetCheck {
            name: name.to_string(),
            status,
            note: note.to_string(),
        };
        match self.call(request).await? {
            Response::CheckSet { invalidated, .. } => Ok(invalidated),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a health check, ending every session bound to it; returns
    /// those sessions (the first 1000).
    pub async fn delete_check(&self, name: &str) -> Result<Vec<SessionId>, ClientError> {
        let request = Request::DeleteCheck {
            name: name.to_string(),
        };
        match self.call(request).await? {
            Response::CheckDeleted { invalidated, .. } => Ok(invalidated),
            other => Err(unexpected(other)),
        }
    }

    /// Every health check, in name order, fetched a page at a time.
    pub async fn list_checks(&self) -> Result<Vec<CheckInfo>, ClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            match self.call(Request::ListChecks { after, limit: 0 }).await? {
                Response::Checks { checks, more } => {
                    after = checks.last().map(|c| c.name.clone());
                    all.extend(checks);
                    if !more || after.is_none() {
                        return Ok(all);
                    }
                }
                other => return Err(unexpected(other)),
            }
        }
    }
}
