//! Length-prefixed bincode frames.
//!
//! The length prefix is checked against the connection's maximum before any
//! buffer is reserved, and bincode decodes with a hard allocation limit, so a
//! hostile length field (in the prefix or inside the body) can never make the
//! receiver allocate more than [`MAX_FRAME_CAP`] bytes.

use std::io;
use std::marker::PhantomData;

use bincode::config::{self, BigEndian, Configuration, Limit, Varint};
use bytes::{Buf, BufMut, BytesMut};
use serde::{de::DeserializeOwned, Serialize};
use tokio_util::codec::{Decoder, Encoder};

/// Default maximum frame body, in bytes (SPEC `WIRE-2`).
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// The largest maximum a server or client may be configured with. bincode's
/// allocation limit is a compile-time constant, so it is this cap rather than
/// the configured maximum: a body that claims a long string may make the
/// decoder allocate up to this much before it finds the body too short.
pub const MAX_FRAME_CAP: usize = 4 << 20;

const PREFIX_LEN: usize = 4;

type WireConfig = Configuration<BigEndian, Varint, Limit<MAX_FRAME_CAP>>;

const fn wire_config() -> WireConfig {
    config::standard()
        .with_big_endian()
        .with_limit::<MAX_FRAME_CAP>()
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The length prefix announces a body larger than the maximum (`WIRE-2`).
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The length the prefix announced.
        len: usize,
        /// The largest body this end accepts.
        max: usize,
    },
    /// The body is not a valid message (`WIRE-3`).
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// The transport failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Encodes `Out` messages and decodes `In` messages as length-prefixed frames.
#[derive(Debug)]
pub struct FrameCodec<In, Out> {
    max_frame: usize,
    /// The body length of the last frame decoded.
    last_frame: usize,
    _types: PhantomData<fn(Out) -> In>,
}

impl<In, Out> FrameCodec<In, Out> {
    /// A codec that refuses frames whose body exceeds `max_frame` bytes.
    /// `max_frame` is clamped to [`MAX_FRAME_CAP`].
    pub fn new(max_frame: usize) -> Self {
        FrameCodec {
            max_frame: max_frame.min(MAX_FRAME_CAP),
            last_frame: 0,
            _types: PhantomData,
        }
    }

    /// The largest body this codec accepts.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// The body length of the last frame decoded (0 before the first):
    /// what the message read last costs in memory, for a reader that
    /// budgets the requests it holds.
    pub fn last_frame_len(&self) -> usize {
        self.last_frame
    }
}

impl<In, Out> Clone for FrameCodec<In, Out> {
    fn clone(&self) -> Self {
        FrameCodec::new(self.max_frame)
    }
}

/// Encodes one message body (without the length prefix).
pub fn encode_body<T: Serialize>(message: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(message, wire_config())
        .map_err(|e| CodecError::Malformed(e.to_string()))
}

/// Decodes one message body, which must be consumed exactly.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    let (message, read) = bincode::serde::decode_from_slice(body, wire_config())
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    if read != body.len() {
        // bincode stops at the end of the value; trailing bytes mean the peer
        // and we disagree about the message layout.
        return Err(CodecError::Malformed(format!(
            "{} trailing bytes after the message",
            body.len() - read
        )));
    }
    Ok(message)
}

impl<In: DeserializeOwned, Out> Decoder for FrameCodec<In, Out> {
    type Item = In;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, CodecError> {
        if src.len() < PREFIX_LEN {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if len > self.max_frame {
            return Err(CodecError::FrameTooLarge {
                len,
                max: self.max_frame,
            });
        }
        if src.len() < PREFIX_LEN + len {
            src.reserve(PREFIX_LEN + len - src.len());
            return Ok(None);
        }
        src.advance(PREFIX_LEN);
        let body = src.split_to(len);
        self.last_frame = len;
        decode_body(&body).map(Some)
    }
}

impl<In, Out: Serialize> Encoder<Out> for FrameCodec<In, Out> {
    type Error = CodecError;

    fn encode(&mut self, message: Out, dst: &mut BytesMut) -> Result<(), CodecError> {
        let body = encode_body(&message)?;
        if body.len() > self.max_frame {
            return Err(CodecError::FrameTooLarge {
                len: body.len(),
                max: self.max_frame,
            });
        }
        dst.reserve(PREFIX_LEN + body.len());
        dst.put_u32(body.len() as u32);
        dst.put_slice(&body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientFrame, Hello, Request};

    type ServerSide = FrameCodec<ClientFrame, ClientFrame>;

    fn frame(body: &[u8]) -> BytesMut {
        let mut buf = BytesMut::new();
        buf.put_u32(body.len() as u32);
        buf.put_slice(body);
        buf
    }

    #[test]
    fn the_codec_tells_the_length_of_the_last_frame_it_decoded() {
        let mut codec = ServerSide::new(DEFAULT_MAX_FRAME);
        assert_eq!(codec.last_frame_len(), 0);
        let mut buf = BytesMut::new();
        codec
            .encode(ClientFrame::Hello(Hello::current()), &mut buf)
            .unwrap();
        let body = buf.len() - PREFIX_LEN;
        assert!(codec.decode(&mut buf).unwrap().is_some());
        assert_eq!(codec.last_frame_len(), body);
    }

    #[test]
    fn a_frame_split_across_reads_decodes_once_complete() {
        let mut codec = ServerSide::new(DEFAULT_MAX_FRAME);
        let mut whole = BytesMut::new();
        let msg = ClientFrame::Request {
            id: 7,
            body: Request::ListSessions {
                after: None,
                limit: 0,
            },
        };
        codec.encode(msg.clone(), &mut whole).unwrap();
        let mut partial = whole.split_to(3);
        assert!(codec.decode(&mut partial).unwrap().is_none());
        partial.unsplit(whole);
        assert_eq!(codec.decode(&mut partial).unwrap(), Some(msg));
    }

    // WIRE-2
    #[test]
    fn an_oversized_length_prefix_is_refused_before_the_body_arrives() {
        let mut codec = ServerSide::new(1024);
        let mut buf = BytesMut::new();
        buf.put_u32(1025);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(CodecError::FrameTooLarge {
                len: 1025,
                max: 1024
            })
        ));
        assert!(
            buf.capacity() < 1025,
            "nothing reserved for the refused body"
        );
    }

    // WIRE-3
    #[test]
    fn a_body_claiming_a_huge_string_is_malformed_not_an_allocation() {
        // Request variant, id 7, CreateSession, then a session name whose
        // varint length claims 2^45 bytes.
        let mut body = vec![1u8, 7, 0];
        body.push(253); // varint marker: a big-endian u64 follows
        body.extend_from_slice(&(1u64 << 45).to_be_bytes());
        let mut codec = ServerSide::new(DEFAULT_MAX_FRAME);
        assert!(matches!(
            codec.decode(&mut frame(&body)),
            Err(CodecError::Malformed(_))
        ));
    }

    // WIRE-3
    #[test]
    fn trailing_bytes_after_a_message_are_malformed() {
        let mut body = encode_body(&ClientFrame::Hello(Hello::current())).unwrap();
        body.push(0);
        let mut codec = ServerSide::new(DEFAULT_MAX_FRAME);
        assert!(matches!(
            codec.decode(&mut frame(&body)),
            Err(CodecError::Malformed(_))
        ));
    }

    // WIRE-3
    #[test]
    fn an_unknown_message_kind_is_malformed() {
        let mut codec = ServerSide::new(DEFAULT_MAX_FRAME);
        assert!(matches!(
            codec.decode(&mut frame(&[99])),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn an_empty_body_is_malformed() {
        let mut codec = ServerSide::new(DEFAULT_MAX_FRAME);
        assert!(matches!(
            codec.decode(&mut frame(&[])),
            Err(CodecError::Malformed(_))
        ));
    }

    /// Contents and sequencers are encoded as one run of bytes, which must
    /// be exactly the bytes protocol 8 always sent for them element by
    /// element: these were encoded before the change (`WIRE-1`).
    #[test]
    fn contents_and_sequencers_encode_as_they_always_did() {
        use crate::{Put, Response};
        let put = Request::Put(Put {
            key: "k".into(),
            contents: vec![0, 1, 255, 7],
            flags: 3,
            cas: Some(9),
            ephemeral: None,
        });
        let before = [
            0x07, 0x01, 0x6b, 0x04, 0x00, 0x01, 0xff, 0x07, 0x03, 0x01, 0x09, 0x00,
        ];
        assert_eq!(encode_body(&put).unwrap(), before);
        assert_eq!(decode_body::<Request>(&before).unwrap(), put);
        let acquired = Response::Acquired {
            index: 5,
            sequencer: vec![9, 8, 7],
        };
        let before = [0x09, 0x05, 0x03, 0x09, 0x08, 0x07];
        assert_eq!(encode_body(&acquired).unwrap(), before);
        assert_eq!(decode_body::<Response>(&before).unwrap(), acquired);
    }
}
