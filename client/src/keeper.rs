//! [`SessionKeeper`]: one live session at a time, reused while it lives and
//! replaced after it expires.

use tokio::sync::Mutex;

use crate::client::Client;
use crate::config::SessionOptions;
use crate::error::ClientError;
use crate::session::Session;

/// Hands out the same live session to every caller, creating a new one
/// only after the previous one expired or was closed. Safe to share.
///
/// ```no_run
/// use leasehold::{Client, SessionKeeper, SessionOptions};
///
/// # async fn example() -> Result<(), leasehold::ClientError> {
/// let client = Client::connect("127.0.0.1:7171").await?;
/// let keeper = SessionKeeper::new(client, SessionOptions::new("scheduler"));
/// loop {
///     let session = keeper.session().await?;
///     // ... take locks with `session`, do the work ...
///     session.expired().await; // invalidated: stop, then loop for a new one
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct SessionKeeper {
    client: Client,
    options: SessionOptions,
    current: Mutex<Option<Session>>,
}

impl SessionKeeper {
    /// A keeper that creates sessions with `options` through `client`.
    pub fn new(client: Client, options: SessionOptions) -> Self {
        SessionKeeper {
            client,
            options,
            current: Mutex::new(None),
        }
    }

    /// The live session, created if there is none or the last one expired.
    pub async fn session(&self) -> Result<Session, ClientError> {
        let mut current = self.current.lock().await;
        if let Some(session) = current.as_ref() {
            if !session.state().is_final() {
                return Ok(session.clone());
            }
        }
        let session = self.client.create_session(self.options.clone()).await?;
        *current = Some(session.clone());
        Ok(session)
    }

    /// Destroys the current session, if any; the next call to
    /// [`SessionKeeper::session`] creates a new one.
    pub async fn close(&self) -> Result<(), ClientError> {
        let session = self.current.lock().await.take();
        match session {
            Some(session) => session.close().await,
            None => Ok(()),
        }
    }
}
