//! Nodes of the namespace: keys, contents and Chubby's counters
//! (SPEC "Namespace").

pub use crate::config::{MAX_CONTENTS, MAX_KEY_DEPTH, MAX_KEY_LEN};
use leasehold_protocol::{NodeStat, SessionId};

/// Checks a key: `/`-separated segments of ASCII letters, digits and
/// `- _ . : @`, no empty segment, no `.` or `..` segment, at most
/// [`MAX_KEY_LEN`] bytes and [`MAX_KEY_DEPTH`] segments (`NS-1`).
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("a key may not be empty".into());
    }
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "a key of {} bytes exceeds the maximum of {MAX_KEY_LEN}",
            key.len()
        ));
    }
    // A refused key may hold anything, control characters included: the
    // messages show it escaped, so it cannot rewrite a terminal or a log.
    let shown = key.escape_debug();
    let mut depth = 0;
    for segment in key.split('/') {
        depth += 1;
        if segment.is_empty() {
            return Err(format!(
                "'{shown}' has an empty segment (leading, trailing or double '/')"
            ));
        }
        if segment == "." || segment == ".." {
            return Err(format!("'{shown}' has a '{segment}' segment"));
        }
        if let Some(c) = segment
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-_.:@".contains(*c)))
        {
            return Err(format!(
                "'{shown}' has the character {c:?}; keys use letters, digits and - _ . : @"
            ));
        }
    }
    if depth > MAX_KEY_DEPTH {
        return Err(format!(
            "'{shown}' has {depth} segments; the maximum is {MAX_KEY_DEPTH}"
        ));
    }
    Ok(())
}

/// Checks a prefix for listing: empty (the root) or a valid key (`NS-5`).
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        Ok(())
    } else {
        check_key(prefix)
    }
}

/// 64-bit FNV-1a: a stable checksum of a node's contents (`NS-2`). Stable
/// across versions and machines, unlike the standard library's hasher.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= b as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A node: contents, flags and counters (`NS-2`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Node {
    #[serde(with = "serde_bytes")]
    pub contents: Vec<u8>,
    pub flags: u64,
    /// Greater than the instance number of any earlier node of the same
    /// name: the global index at which this node was created.
    pub instance: u64,
    /// Rises on every write of the contents, from 1 at creation.
    pub content_generation: u64,
    /// Rises when the lock goes from free to held.
    pub lock_generation: u64,
    /// Global index of the node's last change.
    pub modify_index: u64,
    /// The session the node is bound to, deleted when the session ends.
    pub ephemeral_owner: Option<SessionId>,
    /// Created by a transient acquire and written by nothing else since:
    /// deleted when its lock is free and nobody waits (`LOCK-12`).
    pub transient: bool,
}

impl Node {
    /// The node's metadata as the wire carries it.
    pub fn stat(&self) -> NodeStat {
        NodeStat {
            flags: self.flags,
            instance: self.instance,
            content_generation: self.content_generation,
            lock_generation: self.lock_generation,
            modify_index: self.modify_index,
            checksum: checksum(&self.contents),
            contents_len: self.contents.len() as u64,
            ephemeral_owner: self.ephemeral_owner,
            // Filled in by whoever knows the lock table.
            lock_holders: Vec::new(),
            transient: self.transient,
        }
    }
}

/// How a node changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    /// It came into being.
    Created,
    /// Its contents were written.
    Modified,
    /// Only its metadata changed (its lock).
    Touched,
}

#[cfg(test)]
mod tests {
    use super::*;

    // NS-1
    #[test]
    fn slash_separated_keys_of_allowed_characters_are_valid() {
        for key in ["a", "service/mysql/leader", "v1.2/node-3_x/host:7171@dc1"] {
            assert_eq!(check_key(key), Ok(()), "{key}");
        }
    }

    // NS-1
    #[test]
    fn a_refused_key_is_quoted_without_its_control_characters() {
        let message = check_key("a/\u{1b}[2J/b").unwrap_err();
        assert!(!message.chars().any(char::is_control), "{message:?}");
        assert!(message.contains("\\u{1b}[2J"), "{message}");
        let message = check_key("a//\r").unwrap_err();
        assert!(!message.chars().any(char::is_control), "{message:?}");
    }

    // NS-1
    #[test]
    fn malformed_keys_are_refused() {
        let long = "a".repeat(MAX_KEY_LEN + 1);
        let deep = vec!["a"; MAX_KEY_DEPTH + 1].join("/");
        for key in [
            "", "/a", "a/", "a//b", "a/./b", "a/../b", "a b", "a\u{e9}", "a*", &long, &deep,
        ] {
            assert!(check_key(key).is_err(), "{key:?}");
        }
        assert_eq!(check_key(&vec!["a"; MAX_KEY_DEPTH].join("/")), Ok(()));
    }

    // NS-2
    #[test]
    fn the_checksum_is_fnv1a_64() {
        assert_eq!(checksum(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(checksum(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
