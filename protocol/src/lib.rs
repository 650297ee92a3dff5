//! Wire format of the Leasehold lock service.
//!
//! Every frame is a 4-byte big-endian length followed by a bincode body
//! (SPEC.md, section "Wire format"). A connection opens with [`Hello`] and the
//! server answers [`Welcome`]; after that the client sends
//! [`ClientFrame::Request`]s, each with a request id the server echoes in its
//! [`ServerFrame::Reply`]. Replies may come in any order.
//!
//! # Layout
//! - [`codec`]: framing and encoding, with the size limits enforced before
//!   anything is allocated.
//! - [`message`]: every frame and message.
//! - [`error`]: the typed error codes a request can be answered with.
//! - [`sequencer`]: fencing tokens for locks.
//! - [`access`]: principals, bearer tokens and access rules.
//! - [`auth`]: session secrets and tokens, and the authority a request
//!   claims.
//!
//! # Example
//! ```
//! use leasehold_protocol::{ClientFrame, Hello, FrameCodec, ServerFrame};
//! use tokio_util::codec::{Decoder, Encoder};
//! use bytes::BytesMut;
//!
//! let mut client: FrameCodec<ServerFrame, ClientFrame> = FrameCodec::new(1 << 20);
//! let mut server: FrameCodec<ClientFrame, ServerFrame> = FrameCodec::new(1 << 20);
//! let mut wire = BytesMut::new();
//! client.encode(ClientFrame::Hello(Hello::current()), &mut wire).unwrap();
//! let frame = server.decode(&mut wire).unwrap().unwrap();
//! assert_eq!(frame, ClientFrame::Hello(Hello::current()));
//! ```

#![warn(missing_docs)]

pub mod access;
pub mod auth;
pub mod backoff;
pub mod codec;
pub mod error;
pub mod hold;
pub mod message;
pub mod sequencer;

pub use auth::{Authority, SessionSecret, SessionToken, TokenParseError};
pub use codec::{CodecError, FrameCodec, DEFAULT_MAX_FRAME, MAX_FRAME_CAP};
pub use error::{excerpt, Error, ErrorCode, Remedy};
pub use message::*;
pub use sequencer::Sequencer;
