//! Session id and secret generation, injectable so simulations replay
//! exactly.

use leasehold_protocol::{SessionId, SessionSecret};

use crate::config::IdSource;

/// Produces session ids.
#[derive(Debug)]
pub(crate) enum Ids {
    Random,
    Seeded(u64),
}

impl Ids {
    pub(crate) fn new(source: IdSource) -> Self {
        match source {
            IdSource::Random => Ids::Random,
            IdSource::Seeded(seed) => Ids::Seeded(seed),
        }
    }

    pub(crate) fn next_id(&mut self) -> SessionId {
        match self {
            Ids::Random => SessionId::new_v4(),
            Ids::Seeded(state) => {
                let hi = splitmix64(state);
                let lo = splitmix64(state);
                SessionId::from_u128(((hi as u128) << 64) | lo as u128)
            }
        }
    }
}

impl Ids {
    /// A session's secret (`AUTH-1`): 128 bits from the operating system's
    /// generator, which nobody can predict from the ids or earlier secrets.
    /// A seeded source makes them from its seed, for simulations only.
    pub(crate) fn next_secret(&mut self) -> SessionSecret {
        let mut bytes = [0u8; 16];
        self.fill(&mut bytes);
        SessionSecret::from_bytes(bytes)
    }

    /// A bearer token's secret (`TOK-1`): 256 bits, from the same source.
    pub(crate) fn next_token_secret(&mut self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        self.fill(&mut bytes);
        bytes
    }

    fn fill(&mut self, bytes: &mut [u8]) {
        match self {
            Ids::Random => {
                // The OS generator failing leaves no safe secret to hand out.
                getrandom::fill(bytes).expect("the OS random number generator failed");
            }
            Ids::Seeded(state) => {
                for chunk in bytes.chunks_mut(8) {
                    let word = splitmix64(state).to_be_bytes();
                    chunk.copy_from_slice(&word[..chunk.len()]);
                }
            }
        }
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
