//! The namespace: every node by key, in key order (SPEC "Namespace").
//!
//! The hierarchy is implicit, as in Consul's KV: `a/b` needs no node `a`,
//! and deleting `a` leaves `a/b` unless the delete is recursive.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound::{Excluded, Included, Unbounded};

use leasehold_protocol::{Error, ErrorCode, SessionId};

pub use crate::config::DELETIONS_REMEMBERED;
use crate::node::NodeChange;
use crate::node::{check_key, check_prefix, Node, MAX_CONTENTS};

/// A write to a node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Put {
    pub key: String,
    #[serde(with = "serde_bytes")]
    pub contents: Vec<u8>,
    pub flags: u64,
    /// Write only if the node's modify index is this; 0 means "only if the
    /// node does not exist".
    pub cas: Option<u64>,
    /// Bind a new node to this session: it is deleted when the session ends.
    pub ephemeral: Option<SessionId>,
}

impl From<leasehold_protocol::Put> for Put {
    /// The write a request asks for; an ephemeral node's owner is named by
    /// id alone, since the log never carries a secret (`AUTH-1`).
    fn from(put: leasehold_protocol::Put) -> Put {
        Put {
            key: put.key,
            contents: put.contents,
            flags: put.flags,
            cas: put.cas,
            ephemeral: put.ephemeral.map(|token| token.id),
        }
    }
}

/// Every node, with the indexes that make its operations cheap.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Namespace {
    nodes: BTreeMap<String, Node>,
    ephemeral: BTreeMap<SessionId, BTreeSet<String>>,
    deleted_at: BTreeMap<String, u64>,
    /// Deletions in order, to forget the oldest; an entry whose key was
    /// deleted again later is stale and forgets nothing.
    deleted_order: VecDeque<(String, u64)>,
    /// The latest deletion forgotten: a key with no node and no deletion
    /// remembered was last deleted no later than this, if ever, so this is
    /// its index (`NS-8`). It only rises, and so no key's index ever moves
    /// back.
    forgotten: u64,
    /// Last, as it encodes as nothing.
    freed: Freed,
}

/// Bytes of contents (with their keys) deleted or overwritten since this
/// copy of the state was loaded, for deciding when the store compacts
/// (`STORE-2`). Not part of the durable state: it encodes as nothing, so
/// snapshots keep their format, and a copy loaded from one starts at 0.
#[derive(Debug, Clone, Copy, Default)]
struct Freed(u64);

impl serde::Serialize for Freed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_unit()
    }
}

impl<'de> serde::Deserialize<'de> for Freed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Freed, D::Error> {
        <()>::deserialize(deserializer)?;
        Ok(Freed(0))
    }
}

impl Namespace {
    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there is no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Bytes of contents and keys deleted or overwritten since this copy
    /// of the state was loaded (`STORE-2`).
    pub fn freed_bytes(&self) -> u64 {
        self.freed.0
    }

    /// The node at `key`.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.nodes.get(key)
    }

    /// The index of the last change to `key`: its modify index, or the index
    /// of its deletion if it was deleted recently, else the latest deletion
    /// forgotten, 0 before any was (`NS-8`).
    pub fn key_index(&self, key: &str) -> u64 {
        match self.nodes.get(key) {
            Some(node) => node.modify_index,
            None => self.deleted_at.get(key).copied().unwrap_or(self.forgotten),
        }
    }

    /// Keys below `prefix` (the root when empty): every node's key when
    /// `recursive`, else the distinct children one level down, whether or
    /// not a node exists at the child itself (`NS-5`).
    pub fn list(&self, prefix: &str, recursive: bool) -> Result<Vec<String>, Error> {
        check_prefix(prefix).map_err(invalid)?;
        let base = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let below = |k: &&String| k.starts_with(&base);
        if recursive {
            let range = self.nodes.range::<String, _>((Included(&base), Unbounded));
            return Ok(range.map(|(k, _)| k).take_while(below).cloned().collect());
        }
        let mut children = BTreeSet::new();
        let mut start = Included(base.clone());
        while let Some((key, _)) = self.nodes.range::<String, _>((start, Unbounded)).next() {
            if !key.starts_with(&base) {
                break;
            }
            let rest = &key[base.len()..];
            match rest.split_once('/') {
                // A descendant: record its child and skip the child's whole
                // subtree ('~' sorts after every character a key may hold).
                Some((child, _)) => {
                    let child = format!("{base}{child}");
                    start = Excluded(format!("{child}/~"));
                    children.insert(child);
                }
                None => {
                    children.insert(key.clone());
                    start = Excluded(key.clone());
                }
            }
        }
        Ok(children.into_iter().collect())
    }

    /// One page of [`Namespace::list`]: the keys after `after`, at most
    /// `limit`, and past the first no more than `budget` bytes; says
    /// whether more follow (`NS-5`). A recursive page costs what it
    /// returns; a page of children costs the number of children.
    pub fn list_page(
        &self,
        prefix: &str,
        recursive: bool,
        after: Option<&str>,
        limit: usize,
        budget: usize,
    ) -> Result<(Vec<String>, bool), Error> {
        check_prefix(prefix).map_err(invalid)?;
        let base = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let mut keys: Box<dyn Iterator<Item = String>> = if recursive {
            let start = match after {
                Some(after) if after >= base.as_str() => Excluded(after.to_string()),
                _ => Included(base.clone()),
            };
            Box::new(
                self.nodes
                    .range::<String, _>((start, Unbounded))
                    .map(|(k, _)| k)
                    .take_while(move |k| k.starts_with(&base))
                    .cloned(),
            )
        } else {
            let children = self.list(prefix, false)?;
            let after = after.map(str::to_string);
            Box::new(
                children
                    .into_iter()
                    .filter(move |k| after.as_ref().is_none_or(|a| k > a)),
            )
        };
        let mut page = Vec::new();
        let mut used = 0;
        let mut next = keys.next();
        while let Some(key) = next.take() {
            let size = key.len() + 2;
            if page.len() >= limit || (!page.is_empty() && used + size > budget) {
                next = Some(key);
                break;
            }
            used += size;
            page.push(key);
            next = keys.next();
        }
        Ok((page, next.is_some()))
    }

    /// Keys of the nodes bound to `session`.
    pub fn ephemeral_of(&self, session: SessionId) -> Vec<String> {
        self.ephemeral
            .get(&session)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Writes a node at global index `index` (`NS-6`). The caller has
    /// checked that an ephemeral owner is a live session.
    pub(crate) fn put(&mut self, put: Put, index: u64) -> Result<NodeChange, Error> {
        check_key(&put.key).map_err(invalid)?;
        if put.contents.len() > MAX_CONTENTS {
            return Err(invalid(format!(
                "contents of {} bytes exceed the maximum of {MAX_CONTENTS}",
                put.contents.len()
            )));
        }
        self.check_cas(&put.key, put.cas)?;
        match self.nodes.get_mut(&put.key) {
            Some(node) => {
                if put.ephemeral.is_some() && put.ephemeral != node.ephemeral_owner {
                    return Err(invalid(format!(
                        "'{}' exists and is not bound to that session; a node is bound only when created",
                        put.key
                    )));
                }
                self.freed.0 += node.contents.len() as u64;
                node.contents = put.contents;
                node.flags = put.flags;
                node.content_generation += 1;
                node.modify_index = index;
                // Someone wrote it: it is no longer there for its lock alone.
                node.transient = false;
                Ok(NodeChange::Modified)
            }
            None => {
                self.deleted_at.remove(&put.key);
                if let Some(owner) = put.ephemeral {
                    self.ephemeral
                        .entry(owner)
                        .or_default()
                        .insert(put.key.clone());
                }
                self.nodes.insert(
                    put.key,
                    Node {
                        contents: put.contents,
                        flags: put.flags,
                        instance: index,
                        content_generation: 1,
                        // Above every generation an earlier node of the
                        // name reached: each of its acquisitions took an
                        // index below this one (`NS-2`).
                        lock_generation: index,
                        modify_index: index,
                        ephemeral_owner: put.ephemeral,
                        transient: false,
                    },
                );
                Ok(NodeChange::Created)
            }
        }
    }

    /// Marks the node at `key`, if any, as changed at `index`.
    pub(crate) fn touch(&mut self, key: &str, index: u64) {
        if let Some(node) = self.nodes.get_mut(key) {
            node.modify_index = index;
        }
    }

    /// The node a lock was just granted on, at `index`: created if missing,
    /// its contents written if given, its lock generation raised if the lock
    /// was free (`LOCK-2`). The key and contents are already checked.
    pub(crate) fn lock_node(
        &mut self,
        key: &str,
        contents: Option<Vec<u8>>,
        transient: bool,
        was_free: bool,
        index: u64,
    ) -> (&Node, NodeChange) {
        let mut change = NodeChange::Touched;
        if !self.nodes.contains_key(key) {
            change = NodeChange::Created;
            self.deleted_at.remove(key);
            self.nodes.insert(
                key.to_string(),
                Node {
                    contents: Vec::new(),
                    flags: 0,
                    instance: index,
                    content_generation: 0,
                    lock_generation: index,
                    modify_index: index,
                    ephemeral_owner: None,
                    transient,
                },
            );
        }
        let node = self.nodes.get_mut(key).unwrap_or_else(|| unreachable!());
        // One acquire that wants the node kept keeps it.
        node.transient &= transient;
        if let Some(contents) = contents {
            self.freed.0 += node.contents.len() as u64;
            node.contents = contents;
            node.content_generation += 1;
            if change == NodeChange::Touched {
                change = NodeChange::Modified;
            }
        } else if node.content_generation == 0 {
            // A node created by a lock starts at generation 1 like any other.
            node.content_generation = 1;
        }
        if was_free {
            node.lock_generation += 1;
        }
        node.modify_index = index;
        (node, change)
    }

    /// Deletes `key` (and, when `recursive`, every key below it) at global
    /// index `index`; returns the keys deleted (`NS-7`). Deleting a node
    /// that does not exist succeeds and deletes nothing.
    pub(crate) fn delete(
        &mut self,
        key: &str,
        cas: Option<u64>,
        recursive: bool,
        index: u64,
    ) -> Result<Vec<String>, Error> {
        check_key(key).map_err(invalid)?;
        self.check_cas(key, cas)?;
        let mut keys = Vec::new();
        if self.nodes.contains_key(key) {
            keys.push(key.to_string());
        }
        if recursive {
            keys.extend(self.list(key, true)?);
        }
        for key in &keys {
            self.remove(key, index);
        }
        Ok(keys)
    }

    /// Removes one node that exists, remembering when.
    pub(crate) fn remove(&mut self, key: &str, index: u64) {
        let Some(node) = self.nodes.remove(key) else {
            return;
        };
        self.freed.0 += (key.len() + node.contents.len()) as u64;
        if let Some(owner) = node.ephemeral_owner {
            if let Some(keys) = self.ephemeral.get_mut(&owner) {
                keys.remove(key);
                if keys.is_empty() {
                    self.ephemeral.remove(&owner);
                }
            }
        }
        if self.deleted_order.len() == DELETIONS_REMEMBERED {
            if let Some((oldest, at)) = self.deleted_order.pop_front() {
                if self.deleted_at.get(&oldest) == Some(&at) {
                    self.deleted_at.remove(&oldest);
                }
                self.forgotten = self.forgotten.max(at);
            }
        }
        self.deleted_order.push_back((key.to_string(), index));
        self.deleted_at.insert(key.to_string(), index);
    }

    fn check_cas(&self, key: &str, cas: Option<u64>) -> Result<(), Error> {
        let Some(expected) = cas else {
            return Ok(());
        };
        let current = self.nodes.get(key).map_or(0, |n| n.modify_index);
        if expected == current {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::CasMismatch { current },
            if current == 0 {
                format!("'{key}' does not exist (expected modify index {expected})")
            } else if expected == 0 {
                format!("'{key}' already exists (modify index {current})")
            } else {
                format!("'{key}' has modify index {current}, not {expected}")
            },
        ))
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorCode::InvalidArgument, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, contents: &str) -> Put {
        Put {
            key: key.into(),
            contents: contents.as_bytes().to_vec(),
            flags: 0,
            cas: None,
            ephemeral: None,
        }
    }

    fn namespace(keys: &[&str]) -> Namespace {
        let mut ns = Namespace::default();
        for (i, key) in keys.iter().enumerate() {
            ns.put(put(key, "x"), i as u64 + 1).unwrap();
        }
        ns
    }

    // NS-2, NS-6
    #[test]
    fn writing_a_node_bumps_its_content_generation_and_modify_index() {
        let mut ns = Namespace::default();
        ns.put(put("a", "one"), 5).unwrap();
        ns.put(put("a", "two"), 9).unwrap();
        let node = ns.get("a").unwrap();
        assert_eq!(node.contents, b"two");
        assert_eq!(
            (node.instance, node.content_generation, node.modify_index),
            (5, 2, 9)
        );
    }

    // NS-8
    #[test]
    fn a_deleted_keys_index_never_moves_back_when_its_deletion_is_forgotten() {
        let mut ns = Namespace::default();
        let mut index = 0;
        let mut next = || {
            index += 1;
            index
        };
        ns.put(put("watched", "x"), next()).unwrap();
        let deleted_at = next();
        ns.delete("watched", None, false, deleted_at).unwrap();
        assert_eq!(ns.key_index("watched"), deleted_at);
        for n in 0..DELETIONS_REMEMBERED + 10 {
            let key = format!("other/{n}");
            ns.put(put(&key, "x"), next()).unwrap();
            ns.delete(&key, None, false, next()).unwrap();
        }
        let now = ns.key_index("watched");
        assert!(now > deleted_at, "went from {deleted_at} to {now}");
        // Every key with no remembered history is at the same floor, at
        // most the latest index.
        assert_eq!(ns.key_index("never/written"), now);
        assert!(now < index);
    }

    // NS-2
    #[test]
    fn a_recreated_node_has_a_greater_instance_number() {
        let mut ns = Namespace::default();
        ns.put(put("a", "one"), 5).unwrap();
        ns.delete("a", None, false, 6).unwrap();
        ns.put(put("a", "again"), 7).unwrap();
        let node = ns.get("a").unwrap();
        assert_eq!((node.instance, node.content_generation), (7, 1));
    }

    // NS-6
    #[test]
    fn cas_zero_creates_only_and_cas_n_writes_only_at_modify_index_n() {
        let mut ns = Namespace::default();
        let create_only = Put {
            cas: Some(0),
            ..put("a", "one")
        };
        ns.put(create_only.clone(), 3).unwrap();
        let again = ns.put(create_only, 4).unwrap_err();
        assert_eq!(again.code, ErrorCode::CasMismatch { current: 3 });
        let stale = ns
            .put(
                Put {
                    cas: Some(2),
                    ..put("a", "two")
                },
                5,
            )
            .unwrap_err();
        assert_eq!(stale.code, ErrorCode::CasMismatch { current: 3 });
        ns.put(
            Put {
                cas: Some(3),
                ..put("a", "two")
            },
            6,
        )
        .unwrap();
        assert_eq!(ns.get("a").unwrap().contents, b"two");
    }

    // NS-7
    #[test]
    fn delete_with_cas_deletes_only_at_that_modify_index() {
        let mut ns = namespace(&["a"]);
        let error = ns.delete("a", Some(7), false, 2).unwrap_err();
        assert_eq!(error.code, ErrorCode::CasMismatch { current: 1 });
        assert_eq!(ns.delete("a", Some(1), false, 3).unwrap(), ["a"]);
    }

    // NS-7
    #[test]
    fn a_plain_delete_leaves_descendants_and_a_recursive_one_takes_them() {
        let mut ns = namespace(&["a", "a/b", "a/b/c", "ab"]);
        assert_eq!(ns.delete("a", None, false, 9).unwrap(), ["a"]);
        assert!(ns.get("a/b").is_some());
        assert_eq!(ns.delete("a", None, true, 10).unwrap(), ["a/b", "a/b/c"]);
        assert!(
            ns.get("ab").is_some(),
            "a sibling that shares the prefix stays"
        );
    }

    // NS-5
    #[test]
    fn listing_gives_children_one_level_down_including_implicit_ones() {
        let ns = namespace(&["a/b", "a/b-x", "a/b/c/d", "a/e", "ab", "z"]);
        assert_eq!(ns.list("a", false).unwrap(), ["a/b", "a/b-x", "a/e"]);
        assert_eq!(ns.list("", false).unwrap(), ["a", "ab", "z"]);
        assert_eq!(
            ns.list("a", true).unwrap(),
            ["a/b", "a/b-x", "a/b/c/d", "a/e"]
        );
    }

    // NS-8
    #[test]
    fn a_deleted_key_keeps_the_index_of_its_deletion() {
        let mut ns = namespace(&["a"]);
        assert_eq!(ns.key_index("a"), 1);
        ns.delete("a", None, false, 4).unwrap();
        assert_eq!(ns.key_index("a"), 4);
        assert_eq!(ns.key_index("never"), 0);
    }

    // NS-4
    #[test]
    fn an_ephemeral_node_is_indexed_by_its_session_until_deleted() {
        let owner = SessionId::from_u128(1);
        let mut ns = Namespace::default();
        let ephemeral = Put {
            ephemeral: Some(owner),
            ..put("svc/a", "x")
        };
        ns.put(ephemeral, 1).unwrap();
        assert_eq!(ns.ephemeral_of(owner), ["svc/a"]);
        let rebind = Put {
            ephemeral: Some(SessionId::from_u128(2)),
            ..put("svc/a", "y")
        };
        assert_eq!(
            ns.put(rebind, 2).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        ns.delete("svc/a", None, false, 3).unwrap();
        assert!(ns.ephemeral_of(owner).is_empty());
    }

    // NS-3
    #[test]
    fn contents_over_the_limit_are_refused() {
        let mut ns = Namespace::default();
        let big = Put {
            contents: vec![0; MAX_CONTENTS + 1],
            ..put("a", "")
        };
        assert_eq!(ns.put(big, 1).unwrap_err().code, ErrorCode::InvalidArgument);
    }
}
