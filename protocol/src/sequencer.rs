//! Sequencers: fencing tokens for locks (SPEC `LOCK-7`).
//!
//! A sequencer names one holding of one lock: the key, the mode, the lock
//! generation, the node's instance number and the holding session. A server
//! that is handed one can ask the master whether it is still valid, or
//! compare generations itself and refuse anything older than the newest it
//! has seen. It travels as opaque bytes; [`Sequencer::to_hex`] gives the
//! form the CLI puts in `LEASEHOLD_SEQUENCER`.

use serde::{Deserialize, Serialize};

use crate::codec::{decode_body, encode_body};
use crate::message::{LockMode, SessionId};

/// Leading byte of an encoded sequencer, so a future layout can be told
/// apart.
const SEQUENCER_VERSION: u8 = 1;

/// One holding of a lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sequencer {
    /// The locked key.
    pub key: String,
    /// How it is held.
    pub mode: LockMode,
    /// The node's lock generation when the lock was acquired.
    pub lock_generation: u64,
    /// The node's instance number: a node deleted and created again starts
    /// its lock generation afresh, and this keeps the two apart.
    pub instance: u64,
    /// The holder.
    pub session: SessionId,
}

impl Sequencer {
    /// The opaque bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = vec![SEQUENCER_VERSION];
        // A sequencer is a few dozen bytes; encoding it cannot fail.
        bytes.extend(encode_body(self).unwrap_or_default());
        bytes
    }

    /// Reads the opaque bytes; `None` if they are not a sequencer.
    pub fn from_bytes(bytes: &[u8]) -> Option<Sequencer> {
        match bytes.split_first() {
            Some((&SEQUENCER_VERSION, body)) => decode_body(body).ok(),
            _ => None,
        }
    }

    /// The bytes in lower-case hex.
    pub fn to_hex(&self) -> String {
        self.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads the hex form; `None` if it is not a sequencer.
    pub fn from_hex(hex: &str) -> Option<Sequencer> {
        if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        Sequencer::from_bytes(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequencer() -> Sequencer {
        Sequencer {
            key: "svc/leader".into(),
            mode: LockMode::Exclusive,
            lock_generation: 7,
            instance: 3,
            session: SessionId::from_u128(9),
        }
    }

    // LOCK-7
    #[test]
    fn a_sequencer_round_trips_through_bytes_and_hex() {
        let s = sequencer();
        assert_eq!(Sequencer::from_bytes(&s.to_bytes()), Some(s.clone()));
        assert_eq!(Sequencer::from_hex(&s.to_hex()), Some(s));
    }

    // LOCK-7
    #[test]
    fn bytes_that_are_not_a_sequencer_are_refused() {
        assert_eq!(Sequencer::from_bytes(&[]), None);
        assert_eq!(Sequencer::from_bytes(&[2, 0, 0]), None);
        assert_eq!(Sequencer::from_hex("zz"), None);
        assert_eq!(Sequencer::from_hex("abc"), None);
        let mut bytes = sequencer().to_bytes();
        bytes.push(0);
        assert_eq!(Sequencer::from_bytes(&bytes), None, "trailing bytes");
    }
}
