//! The sluice wire protocol: a sans-IO frame codec and the message types of
//! every operation. No sockets, no threads, no clock. PROTOCOL.md at the
//! repository root specifies the bytes; this crate is its reference
//! implementation.
//!
//! - [`frame`]: cutting frames out of a byte stream ([`FrameDecoder`]) and
//!   the opcodes.
//! - [`request`] and [`reply`]: one type per operation; [`Request::decode`]
//!   and [`Reply::decode`] take a frame's opcode and payload,
//!   [`Request::encode`] and [`Reply::encode`] write a whole frame into a
//!   caller-owned buffer.
//! - [`codec`]: the bounds-checked [`Reader`] every decoder reads through, and
//!   [`DecodeError`], which maps to the [`ErrorCode`] a server answers with.
//!
//! Decoding never copies bodies, dedup keys or attributes: they are slices of
//! the receive buffer ([`Bytes`] handles, or borrowed views for the hot
//! batches: a SEND's entries and a RECEIVE reply's messages are validated
//! once and then read without allocating or touching a reference count).
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use sluice_protocol::{FrameDecoder, QueueName, Request, SendEntry, SendRequest};
//!
//! // A client encodes a SEND of one message...
//! let entries = [SendEntry::new(Bytes::from_static(b"hello"))];
//! let request = Request::Send(SendRequest::new(QueueName::new("orders").unwrap(), &entries).unwrap());
//! let mut wire = BytesMut::new();
//! request.encode(7, &mut wire).unwrap();
//! assert_eq!(wire.len(), request.encoded_len());
//!
//! // ...and a server cuts the frame out of its receive buffer and decodes it.
//! let mut decoder = FrameDecoder::new(1 << 20);
//! let frame = decoder.decode(&mut wire).unwrap().expect("a whole frame");
//! assert_eq!(frame.request_id, 7);
//! let decoded = Request::decode(frame.opcode, frame.flags, frame.payload).unwrap();
//! assert_eq!(decoded, request);
//! // Entries are borrowed views of the frame: no copy, no allocation.
//! let Request::Send(send) = decoded else { unreachable!() };
//! for entry in &send.entries {
//!     assert_eq!(entry.body, b"hello");
//! }
//! ```
//!
//! [`Bytes`]: bytes::Bytes
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::pedantic)]
#![doc(test(attr(deny(warnings))))]

pub mod batch;
pub mod codec;
pub mod error;
pub mod frame;
pub mod fuzz_harness;
pub mod group_id;
pub mod labels;
pub mod limits;
pub mod message;
pub mod message_attributes;
pub mod millis;
pub mod name;
mod queue_attribute_block;
pub mod queue_attributes;
pub mod receipt;
pub mod reply;
pub mod request;
pub mod units;

pub use batch::{Batch, BatchEntry, BatchIter};
pub use codec::{DecodeError, EncodeError, Reader, SliceReader};
pub use error::{ErrorCode, WireError};
pub use frame::{Frame, FrameDecoder, FrameError, flags, opcode};
pub use group_id::{InvalidGroupId, MessageGroupId};
pub use labels::{Labels, LabelsUpdate};
pub use message::{
    AttributesRef, MessageAttributes, PeekedMessage, ReceivedBatch, ReceivedMessage,
    ReceivedMessageRef, SendBatch, SendEntry, SendEntryRef, SendOutcome, VisibilityChange,
    received_message_encoded_len,
};
pub use millis::{Millis, MillisOutOfRange};
pub use name::{InvalidQueueName, QueueName};
pub use queue_attribute_block::bits as attribute_bits;
pub use queue_attributes::{
    AttributeUpdate, Backoff, LabelChanges, QueueAttributes, QueueKind, QueueStats, RedrivePolicy,
    Setting,
};
pub use receipt::{MessageId, RECEIPT_BYTES, Receipt};
pub use reply::{
    Counter, HelloReply, QueueInfo, QueueTimes, ReceiveReplyWriter, Reply, ServerLimits,
    ServerStatsReply,
};
pub use request::{
    ChangeVisibilityRequest, DeleteRequest, HelloRequest, QueueAttributesRequest, ReceiveRequest,
    Request, SendRequest,
};

/// Whether `name` is a valid queue name: 1 to 80 of `[A-Za-z0-9_.-]`, with
/// at most one `{tag}` (see [`QueueName`]).
#[must_use]
pub fn is_valid_queue_name(name: &str) -> bool {
    name::is_valid_name_bytes(name.as_bytes())
}
