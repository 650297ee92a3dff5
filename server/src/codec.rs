//! The encoding of everything the server keeps on disk or sends to a peer:
//! bincode, little-endian with variable-length integers, every length
//! field bounded so that damaged or hostile bytes cannot make a decoder
//! allocate without limit.

use bincode::config::{self, Configuration, Limit};
use serde::{de::DeserializeOwned, Serialize};

use crate::config::MAX_DECODED;

type StoreConfig = Configuration<config::LittleEndian, config::Varint, Limit<MAX_DECODED>>;

const fn store_config() -> StoreConfig {
    config::standard().with_limit::<MAX_DECODED>()
}

pub(crate) fn encode(value: &impl Serialize) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, store_config()).expect("stored types encode")
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, read) =
        bincode::serde::decode_from_slice(bytes, store_config()).map_err(|e| e.to_string())?;
    if read != bytes.len() {
        return Err(format!("{} bytes left over", bytes.len() - read));
    }
    Ok(value)
}
