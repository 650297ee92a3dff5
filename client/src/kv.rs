//! Key/value calls on the namespace (SPEC "Namespace").

use std::time::Duration;

use leasehold_protocol::{Authority, NodeStat, NodeView, Put, Request, Response, SessionToken};

use crate::client::{unexpected, Client};
use crate::error::ClientError;
use crate::session::Session;

/// How to write a node.
///
/// ```
/// use leasehold::PutOptions;
///
/// let create_only = PutOptions::new().cas(0).flags(7);
/// assert_eq!(create_only.cas, Some(0));
/// ```
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// Opaque to the server.
    pub flags: u64,
    /// Write only if the node's modify index is this; 0 means create only.
    pub cas: Option<u64>,
    /// Bind a new node to this session: deleted when the session ends.
    pub ephemeral: Option<SessionToken>,
}

impl PutOptions {
    /// A plain write.
    pub fn new() -> Self {
        PutOptions::default()
    }

    /// Writes only if the node's modify index is `index` (0: create only).
    pub fn cas(mut self, index: u64) -> Self {
        self.cas = Some(index);
        self
    }

    /// Sets the node's flags.
    pub fn flags(mut self, flags: u64) -> Self {
        self.flags = flags;
        self
    }

    /// Binds a new node to `session`, which deletes it when it ends.
    pub fn ephemeral(mut self, session: &Session) -> Self {
        self.ephemeral = Some(session.token());
        self
    }
}

/// How to delete a node, built as [`PutOptions`] are.
///
/// ```
/// use leasehold::DeleteOptions;
///
/// let everything_below = DeleteOptions::new().recursive();
/// assert!(everything_below.recursive);
/// let only_if_unchanged = DeleteOptions::new().cas(7);
/// assert_eq!(only_if_unchanged.cas, Some(7));
/// ```
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Delete only if the node's modify index is this.
    pub cas: Option<u64>,
    /// Delete every node below the key too.
    pub recursive: bool,
    /// Delete on this session's authority: a node whose lock it alone
    /// holds may then be deleted even on a master with an operator token
    /// (`AUTH-4`). Without it, a client configured with the operator token
    /// claims the operator's authority.
    pub holder: Option<SessionToken>,
}

impl DeleteOptions {
    /// A plain delete of the node alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes only if the node's modify index is `index`.
    pub fn cas(mut self, index: u64) -> Self {
        self.cas = Some(index);
        self
    }

    /// Deletes every node below the key too.
    pub fn recursive(mut self) -> Self {
        self.recursive = true;
        self
    }

    /// Deletes as `session`, the holder of the locks the delete takes away.
    pub fn as_holder(mut self, session: &Session) -> Self {
        self.holder = Some(session.token());
        self
    }
}

/// What a delete removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The first 1000 keys deleted, in key order.
    pub keys: Vec<String>,
    /// How many were deleted.
    pub total: u64,
}

/// What a watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The key's index: pass it to the next [`Client::watch`].
    pub index: u64,
    /// The node, or `None` if it does not exist.
    pub node: Option<NodeView>,
}

impl Client {
    /// A node's contents and metadata, or `None` if it does not exist.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// use leasehold::PutOptions;
    ///
    /// client.put("service/db/primary", "10.0.0.5:5432", PutOptions::new()).await?;
    /// let node = client.get("service/db/primary").await?.expect("just written");
    /// assert_eq!(node.contents.as_deref(), Some(&b"10.0.0.5:5432"[..]));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(&self, key: &str) -> Result<Option<NodeView>, ClientError> {
        self.get_node(key, false).await.map(|w| w.node)
    }

    /// A node's metadata alone, or `None` if it does not exist.
    pub async fn stat(&self, key: &str) -> Result<Option<NodeStat>, ClientError> {
        Ok(self.get_node(key, true).await?.node.map(|n| n.stat))
    }

    /// The key's index (`NS-8`) with the node's metadata, `None` if it has
    /// no node: the index then says when it was last deleted, so a caller
    /// can tell whether the key changed after an index it saw.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client, seen: u64) -> Result<(), leasehold::ClientError> {
    /// let (index, stat) = client.stat_at("service/db/primary").await?;
    /// if index > seen && stat.is_none() {
    ///     println!("deleted since");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn stat_at(&self, key: &str) -> Result<(u64, Option<NodeStat>), ClientError> {
        let watched = self.get_node(key, true).await?;
        Ok((watched.index, watched.node.map(|n| n.stat)))
    }

    pub(crate) async fn get_node(
        &self,
        key: &str,
        stat_only: bool,
    ) -> Result<Watched, ClientError> {
        let request = Request::Get {
            key: key.to_string(),
            stat_only,
        };
        watched(self.call(request).await?)
    }

    /// The children of `prefix` one level down (the root when empty), or
    /// every key below it when `recursive`, fetched a page at a time.
    pub async fn list(&self, prefix: &str, recursive: bool) -> Result<Vec<String>, ClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let (keys, more) = self.list_page(prefix, recursive, after, 0).await?;
            after = keys.last().cloned();
            all.extend(keys);
            if !more || after.is_none() {
                return Ok(all);
            }
        }
    }

    /// One page of [`Client::list`]: the keys after `after`, at most
    /// `limit` (0: the master's page size, 1000), and whether more follow.
    /// Pass the last key of a page as `after` to get the next.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// let mut after = None;
    /// loop {
    ///     let (keys, more) = client.list_page("jobs", true, after, 0).await?;
    ///     for key in &keys {
    ///         println!("{key}");
    ///     }
    ///     after = keys.last().cloned();
    ///     if !more {
    ///         break;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list_page(
        &self,
        prefix: &str,
        recursive: bool,
        after: Option<String>,
        limit: u32,
    ) -> Result<(Vec<String>, bool), ClientError> {
        let request = Request::List {
            prefix: prefix.to_string(),
            recursive,
            after,
            limit,
        };
        match self.call(request).await? {
            Response::Keys { keys, more, .. } => Ok((keys, more)),
            other => Err(unexpected(other)),
        }
    }

    /// Writes a node; returns its new modify index. A failed compare-and-set
    /// is a [`ClientError::Server`] with code `CasMismatch`.
    pub async fn put(
        &self,
        key: &str,
        contents: impl Into<Vec<u8>>,
        options: PutOptions,
    ) -> Result<u64, ClientError> {
        let request = Request::Put(Put {
            key: key.to_string(),
            contents: contents.into(),
            flags: options.flags,
            cas: options.cas,
            ephemeral: options.ephemeral,
        });
        match self.call(request).await? {
            Response::Written { index } => Ok(index),
            other => Err(unexpected(other)),
        }
    }

    /// Deletes a node (and everything below it when `recursive`); returns
    /// the keys deleted (the first 1000) and how many were, none if there
    /// was nothing to delete.
    pub async fn delete(&self, key: &str, options: DeleteOptions) -> Result<Deleted, ClientError> {
        let request = Request::Delete {
            key: key.to_string(),
            cas: options.cas,
            recursive: options.recursive,
            authority: match options.holder {
                Some(token) => Authority::Session(token),
                None => self.authority(),
            },
        };
        match self.call(request).await? {
            Response::Deleted {
                keys,
                deleted_total,
                ..
            } => Ok(Deleted {
                keys,
                total: deleted_total,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Waits until the key's index exceeds `after_index` (the node was
    /// created, written or deleted) or `timeout` passes (at most 10 minutes),
    /// then returns the node as it is.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// use std::time::Duration;
    ///
    /// let mut index = 0;
    /// loop {
    ///     let seen = client.watch("config/feature", index, Duration::from_secs(60)).await?;
    ///     if seen.index != index {
    ///         println!("now {:?}", seen.node.and_then(|n| n.contents));
    ///     }
    ///     index = seen.index;
    /// }
    /// # }
    /// ```
    pub async fn watch(
        &self,
        key: &str,
        after_index: u64,
        timeout: Duration,
    ) -> Result<Watched, ClientError> {
        let request = Request::Watch {
            key: key.to_string(),
            after_index,
            timeout_ms: (timeout.as_millis() as u64).max(1),
        };
        // The master holds a watch for its timeout on purpose.
        watched(self.call_waiting(request, timeout).await?)
    }
}

fn watched(response: Response) -> Result<Watched, ClientError> {
    match response {
        Response::Node { index, node } => Ok(Watched { index, node }),
        other => Err(unexpected(other)),
    }
}
