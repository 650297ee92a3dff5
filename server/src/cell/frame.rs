//! The frames members, and the cell's tools, exchange (SPEC `CELL-4`): a
//! 4-byte big-endian length, then that many bytes.
//!
//! A frame may be large (a batch of entries, a snapshot chunk: up to
//! [`MAX_PEER_FRAME`](super::network::MAX_PEER_FRAME)), so the decoder
//! reserves nothing for a length it has only been announced: the buffer
//! grows with the bytes that actually arrive. A peer that announces the
//! largest frame and sends nothing more costs the member a few bytes,
//! not the frame.

use std::io;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

const PREFIX: usize = 4;

/// Length-prefixed frames, at most `max` bytes each.
#[derive(Debug, Clone, Copy)]
pub struct FrameCodec {
    max: usize,
}

impl FrameCodec {
    /// Frames of at most `max` bytes.
    pub fn new(max: usize) -> FrameCodec {
        FrameCodec { max }
    }

    /// From now on, frames of at most `max` bytes.
    pub fn set_max_frame_length(&mut self, max: usize) {
        self.max = max;
    }

    fn too_long(&self, len: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes exceeds the limit of {}", self.max),
        )
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<BytesMut>> {
        let Some(prefix) = src.get(..PREFIX) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(prefix.try_into().expect("4 bytes")) as usize;
        if len > self.max {
            return Err(self.too_long(len));
        }
        if src.len() < PREFIX + len {
            return Ok(None);
        }
        src.advance(PREFIX);
        Ok(Some(src.split_to(len)))
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = io::Error;

    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> io::Result<()> {
        if frame.len() > self.max {
            return Err(self.too_long(frame.len()));
        }
        dst.reserve(PREFIX + frame.len());
        dst.put_u32(frame.len() as u32);
        dst.extend_from_slice(&frame);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // CELL-4
    #[test]
    fn a_frame_round_trips() {
        let mut codec = FrameCodec::new(1 << 10);
        let mut wire = BytesMut::new();
        codec
            .encode(Bytes::from_static(b"hello"), &mut wire)
            .unwrap();
        codec.encode(Bytes::new(), &mut wire).unwrap();
        assert_eq!(&wire[..4], &[0, 0, 0, 5]);
        assert_eq!(&codec.decode(&mut wire).unwrap().unwrap()[..], b"hello");
        assert!(codec.decode(&mut wire).unwrap().unwrap().is_empty());
        assert!(codec.decode(&mut wire).unwrap().is_none());
    }

    // CELL-4: memory follows the bytes received, not the length announced.
    #[test]
    fn an_announced_frame_reserves_nothing_before_its_bytes_arrive() {
        let mut codec = FrameCodec::new(64 << 20);
        let mut src = BytesMut::with_capacity(64);
        src.put_u32(64 << 20);
        src.extend_from_slice(b"a little");
        assert!(codec.decode(&mut src).unwrap().is_none());
        assert!(src.capacity() < 1 << 10, "{} reserved", src.capacity());
    }

    // CELL-4
    #[test]
    fn a_frame_over_the_limit_is_refused_from_its_length_alone() {
        let mut codec = FrameCodec::new(100);
        let mut src = BytesMut::new();
        src.put_u32(101);
        let error = codec.decode(&mut src).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("101 bytes"), "{error}");
        let mut dst = BytesMut::new();
        assert!(codec.encode(Bytes::from(vec![0; 101]), &mut dst).is_err());
    }
}
