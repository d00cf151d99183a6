//! Framing: every frame is
//!
//! | offset | width | field |
//! |---|---|---|
//! | 0 | 4 | `len`: u32 LE, bytes after this prefix (at least 6) |
//! | 4 | 1 | opcode |
//! | 5 | 1 | flags: per opcode (see [`flags`]); bits a request does not define must be 0 |
//! | 6 | 4 | request id: u32 LE |
//! | 10 | `len - 6` | payload |
//!
//! [`FrameDecoder`] cuts frames out of a receive buffer without copying: the
//! payload is split off the buffer. It checks a declared length against its
//! limit before anything is reserved, so a peer cannot make it allocate.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{EncodeError, len_u32};
use crate::error::{ErrorCode, WireError};
use crate::limits::{
    FRAME_BYTES_MAX_BEFORE_HELLO, FRAME_BYTES_MAX_LIMIT, FRAME_HEADER_BYTES, FRAME_PREFIX_BYTES,
};

/// Operation codes. A reply's opcode is its request's with the high bit set;
/// an error reply to any request is [`ERROR`](opcode::ERROR).
pub mod opcode {
    /// HELLO: version and auth token; must be the first frame.
    pub const HELLO: u8 = 0x01;
    /// PING: a nonce, echoed.
    pub const PING: u8 = 0x02;
    /// `CREATE_QUEUE`.
    pub const CREATE_QUEUE: u8 = 0x10;
    /// `DELETE_QUEUE`.
    pub const DELETE_QUEUE: u8 = 0x11;
    /// `LIST_QUEUES`.
    pub const LIST_QUEUES: u8 = 0x12;
    /// `GET_QUEUE`: attributes and stats.
    pub const GET_QUEUE: u8 = 0x13;
    /// `SET_QUEUE`: change attributes.
    pub const SET_QUEUE: u8 = 0x14;
    /// `PURGE_QUEUE`.
    pub const PURGE_QUEUE: u8 = 0x15;
    /// SEND: a batch of messages.
    pub const SEND: u8 = 0x20;
    /// RECEIVE: lease up to N messages, optionally waiting.
    pub const RECEIVE: u8 = 0x21;
    /// DELETE: a batch of receipts.
    pub const DELETE: u8 = 0x22;
    /// `CHANGE_VISIBILITY`: a batch of receipts and timeouts.
    pub const CHANGE_VISIBILITY: u8 = 0x23;
    /// REDRIVE: move messages of a dead-letter queue back.
    pub const REDRIVE: u8 = 0x24;
    /// PEEK: read messages without leasing them.
    pub const PEEK: u8 = 0x25;
    /// `SERVER_STATS`.
    pub const SERVER_STATS: u8 = 0x30;
    /// `ADVANCE_CLOCK`: move a manual clock forward (protocol version 2).
    pub const ADVANCE_CLOCK: u8 = 0x31;
    /// HELLO's reply.
    pub const HELLO_REPLY: u8 = reply_to(HELLO);
    /// PING's reply.
    pub const PONG: u8 = reply_to(PING);
    /// `CREATE_QUEUE`'s reply.
    pub const CREATE_QUEUE_REPLY: u8 = reply_to(CREATE_QUEUE);
    /// `DELETE_QUEUE`'s reply.
    pub const DELETE_QUEUE_REPLY: u8 = reply_to(DELETE_QUEUE);
    /// `LIST_QUEUES`'s reply.
    pub const LIST_QUEUES_REPLY: u8 = reply_to(LIST_QUEUES);
    /// `GET_QUEUE`'s reply.
    pub const GET_QUEUE_REPLY: u8 = reply_to(GET_QUEUE);
    /// `SET_QUEUE`'s reply.
    pub const SET_QUEUE_REPLY: u8 = reply_to(SET_QUEUE);
    /// `PURGE_QUEUE`'s reply.
    pub const PURGE_QUEUE_REPLY: u8 = reply_to(PURGE_QUEUE);
    /// SEND's reply.
    pub const SEND_REPLY: u8 = reply_to(SEND);
    /// RECEIVE's reply.
    pub const RECEIVE_REPLY: u8 = reply_to(RECEIVE);
    /// DELETE's reply.
    pub const DELETE_REPLY: u8 = reply_to(DELETE);
    /// `CHANGE_VISIBILITY`'s reply.
    pub const CHANGE_VISIBILITY_REPLY: u8 = reply_to(CHANGE_VISIBILITY);
    /// REDRIVE's reply.
    pub const REDRIVE_REPLY: u8 = reply_to(REDRIVE);
    /// PEEK's reply.
    pub const PEEK_REPLY: u8 = reply_to(PEEK);
    /// `SERVER_STATS`'s reply.
    pub const SERVER_STATS_REPLY: u8 = reply_to(SERVER_STATS);
    /// `ADVANCE_CLOCK`'s reply.
    pub const ADVANCE_CLOCK_REPLY: u8 = reply_to(ADVANCE_CLOCK);
    /// The bit set in every reply's opcode.
    pub const REPLY_BIT: u8 = 0x80;
    /// ERROR: the reply to any request that failed as a whole.
    pub const ERROR: u8 = 0xFF;

    /// Every reply opcode, ERROR last.
    pub const REPLIES: [u8; 17] = [
        HELLO_REPLY,
        PONG,
        CREATE_QUEUE_REPLY,
        DELETE_QUEUE_REPLY,
        LIST_QUEUES_REPLY,
        GET_QUEUE_REPLY,
        SET_QUEUE_REPLY,
        PURGE_QUEUE_REPLY,
        SEND_REPLY,
        RECEIVE_REPLY,
        DELETE_REPLY,
        CHANGE_VISIBILITY_REPLY,
        REDRIVE_REPLY,
        PEEK_REPLY,
        SERVER_STATS_REPLY,
        ADVANCE_CLOCK_REPLY,
        ERROR,
    ];

    /// Every request opcode.
    pub const REQUESTS: [u8; 16] = [
        HELLO,
        PING,
        CREATE_QUEUE,
        DELETE_QUEUE,
        LIST_QUEUES,
        GET_QUEUE,
        SET_QUEUE,
        PURGE_QUEUE,
        SEND,
        RECEIVE,
        DELETE,
        CHANGE_VISIBILITY,
        REDRIVE,
        PEEK,
        SERVER_STATS,
        ADVANCE_CLOCK,
    ];

    /// The opcode of the reply to request `op`.
    #[must_use]
    pub const fn reply_to(op: u8) -> u8 {
        op | REPLY_BIT
    }

    /// The operation's name as PROTOCOL.md writes it, for requests, replies
    /// (`*_REPLY`) and ERROR.
    #[must_use]
    pub const fn name(op: u8) -> Option<&'static str> {
        Some(match op {
            HELLO => "HELLO",
            PING => "PING",
            CREATE_QUEUE => "CREATE_QUEUE",
            DELETE_QUEUE => "DELETE_QUEUE",
            LIST_QUEUES => "LIST_QUEUES",
            GET_QUEUE => "GET_QUEUE",
            SET_QUEUE => "SET_QUEUE",
            PURGE_QUEUE => "PURGE_QUEUE",
            SEND => "SEND",
            RECEIVE => "RECEIVE",
            DELETE => "DELETE",
            CHANGE_VISIBILITY => "CHANGE_VISIBILITY",
            REDRIVE => "REDRIVE",
            PEEK => "PEEK",
            SERVER_STATS => "SERVER_STATS",
            ADVANCE_CLOCK => "ADVANCE_CLOCK",
            HELLO_REPLY => "HELLO_REPLY",
            PONG => "PONG",
            CREATE_QUEUE_REPLY => "CREATE_QUEUE_REPLY",
            DELETE_QUEUE_REPLY => "DELETE_QUEUE_REPLY",
            LIST_QUEUES_REPLY => "LIST_QUEUES_REPLY",
            GET_QUEUE_REPLY => "GET_QUEUE_REPLY",
            SET_QUEUE_REPLY => "SET_QUEUE_REPLY",
            PURGE_QUEUE_REPLY => "PURGE_QUEUE_REPLY",
            SEND_REPLY => "SEND_REPLY",
            RECEIVE_REPLY => "RECEIVE_REPLY",
            DELETE_REPLY => "DELETE_REPLY",
            CHANGE_VISIBILITY_REPLY => "CHANGE_VISIBILITY_REPLY",
            REDRIVE_REPLY => "REDRIVE_REPLY",
            PEEK_REPLY => "PEEK_REPLY",
            SERVER_STATS_REPLY => "SERVER_STATS_REPLY",
            ADVANCE_CLOCK_REPLY => "ADVANCE_CLOCK_REPLY",
            ERROR => "ERROR",
            _ => return None,
        })
    }
}

/// The bits of a frame's `flags` byte. Each is defined for one request
/// opcode; a request with a bit its opcode does not define is `Malformed`.
/// Replies carry 0.
pub mod flags {
    /// RECEIVE: bind the leases of the messages this receive delivers to the
    /// connection, so that they are released at once when it closes
    /// (protocol version 2).
    pub const RECEIVE_BIND_LEASES: u8 = 0x01;

    /// RECEIVE: a delivered message that the broker dead-lettered carries
    /// one more attribute, [`crate::message::SOURCE_ATTRIBUTE`], naming the
    /// queue it was dead-lettered from (protocol version 4).
    pub const RECEIVE_WITH_SOURCE: u8 = 0x02;

    /// `LIST_QUEUES`: one page, after a name; the payload carries that name
    /// after the prefix, and the reply ends with a byte that says whether
    /// more queues follow (protocol version 3).
    pub const LIST_QUEUES_PAGED: u8 = 0x01;

    /// REDRIVE: move the messages to the queue named after `max` instead of
    /// back to the queues they were dead-lettered from (protocol version 4).
    pub const REDRIVE_TO: u8 = 0x01;

    /// The flag bits request `op` defines.
    #[must_use]
    pub const fn defined(op: u8) -> u8 {
        match op {
            super::opcode::RECEIVE => RECEIVE_BIND_LEASES | RECEIVE_WITH_SOURCE,
            super::opcode::LIST_QUEUES => LIST_QUEUES_PAGED,
            super::opcode::REDRIVE => REDRIVE_TO,
            _ => 0,
        }
    }
}

/// Bytes of the length prefix and the header together: the smallest frame.
pub const FRAME_OVERHEAD_BYTES: usize = FRAME_PREFIX_BYTES + FRAME_HEADER_BYTES;

/// One frame, cut out of the receive buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// What the frame is (see [`opcode`]).
    pub opcode: u8,
    /// Per-opcode flags (see [`flags`]).
    pub flags: u8,
    /// Chosen by the client; a reply echoes its request's.
    pub request_id: u32,
    /// The payload, split off the receive buffer without copying.
    pub payload: Bytes,
}

impl Frame {
    /// Bytes of the whole frame, length prefix included.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        FRAME_OVERHEAD_BYTES + self.payload.len()
    }

    /// Writes the whole frame (flags as they are).
    ///
    /// # Errors
    /// `TooLong` when the frame's length does not fit the `u32` prefix.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let len = frame_len(self.payload.len())?;
        buf.reserve(self.encoded_len());
        buf.put_u32_le(len);
        buf.put_u8(self.opcode);
        buf.put_u8(self.flags);
        buf.put_u32_le(self.request_id);
        buf.put_slice(&self.payload);
        Ok(())
    }
}

/// The length prefix of a frame whose payload has `payload_len` bytes.
fn frame_len(payload_len: usize) -> Result<u32, EncodeError> {
    len_u32(
        payload_len.saturating_add(FRAME_HEADER_BYTES),
        "frame length",
    )
}

/// Writes a frame's prefix and header for a payload of `payload_len` bytes,
/// after reserving room for the whole frame.
pub(crate) fn put_header(
    buf: &mut BytesMut,
    opcode: u8,
    flags: u8,
    request_id: u32,
    payload_len: usize,
) -> Result<(), EncodeError> {
    let len = frame_len(payload_len)?;
    buf.reserve(FRAME_OVERHEAD_BYTES + payload_len);
    buf.put_u32_le(len);
    buf.put_u8(opcode);
    buf.put_u8(flags);
    buf.put_u32_le(request_id);
    Ok(())
}

/// Why the byte stream cannot be framed. Every such error loses the framing,
/// so the connection must be closed after the error reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The declared frame size is above the limit. Nothing was reserved.
    #[error(
        "frame of {declared_bytes} bytes (length prefix included) is above the limit of {max_bytes}"
    )]
    FrameTooLarge {
        /// Declared size, length prefix included.
        declared_bytes: u64,
        /// The decoder's limit.
        max_bytes: u32,
    },
    /// The declared length is below the 6-byte header.
    #[error("frame length {len} is below the 6-byte header")]
    LengthTooSmall {
        /// The declared length.
        len: u32,
    },
}

impl FrameError {
    /// The error code of the error reply.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            FrameError::LengthTooSmall { .. } => ErrorCode::Malformed,
        }
    }

    /// Always true: once the framing is lost, the stream cannot be read on.
    #[must_use]
    pub fn closes_connection(&self) -> bool {
        true
    }

    /// The error as an ERROR reply carries it.
    #[must_use]
    pub fn to_wire_error(&self) -> WireError {
        WireError::new(self.code(), self.to_string())
    }
}

/// Cuts frames out of a receive buffer.
///
/// ```
/// use bytes::BytesMut;
/// use sluice_protocol::frame::{FrameDecoder, opcode};
///
/// let mut decoder = FrameDecoder::new(4096);
/// let mut buf = BytesMut::from(&[14u8, 0, 0, 0, opcode::PING, 0, 7, 0, 0, 0][..]);
/// assert_eq!(decoder.decode(&mut buf), Ok(None)); // the nonce is missing
/// buf.extend_from_slice(&42u64.to_le_bytes());
/// let frame = decoder.decode(&mut buf).unwrap().unwrap();
/// assert_eq!((frame.opcode, frame.request_id, frame.payload.len()), (opcode::PING, 7, 8));
/// assert!(buf.is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameDecoder {
    frame_bytes_max: u32,
}

impl Default for FrameDecoder {
    /// A decoder with the limit before HELLO (4 KiB).
    fn default() -> FrameDecoder {
        FrameDecoder::new(FRAME_BYTES_MAX_BEFORE_HELLO)
    }
}

impl FrameDecoder {
    /// A decoder accepting frames of up to `frame_bytes_max` bytes, length
    /// prefix included.
    ///
    /// # Panics
    /// When the limit is below the 10-byte empty frame or above
    /// [`FRAME_BYTES_MAX_LIMIT`]: the server's configuration checks this.
    #[must_use]
    pub fn new(frame_bytes_max: u32) -> FrameDecoder {
        let mut d = FrameDecoder { frame_bytes_max: 0 };
        d.set_frame_bytes_max(frame_bytes_max);
        d
    }

    /// The limit, length prefix included.
    #[must_use]
    pub fn frame_bytes_max(&self) -> u32 {
        self.frame_bytes_max
    }

    /// Changes the limit (servers allow 4 KiB before HELLO and their
    /// configured limit after).
    ///
    /// # Panics
    /// As [`FrameDecoder::new`].
    pub fn set_frame_bytes_max(&mut self, frame_bytes_max: u32) {
        assert!(
            (FRAME_OVERHEAD_BYTES as u64..=u64::from(FRAME_BYTES_MAX_LIMIT))
                .contains(&u64::from(frame_bytes_max)),
            "frame limit {frame_bytes_max} outside {FRAME_OVERHEAD_BYTES} ..= {FRAME_BYTES_MAX_LIMIT}"
        );
        self.frame_bytes_max = frame_bytes_max;
    }

    /// Checks the next frame's declared length, if its prefix is in `buf`,
    /// and returns the frame's total size (prefix included).
    ///
    /// # Errors
    /// As [`FrameDecoder::decode`].
    pub fn peek_frame_len(&self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        let Some(prefix) = buf.first_chunk::<FRAME_PREFIX_BYTES>() else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(*prefix);
        if (len as usize) < FRAME_HEADER_BYTES {
            return Err(FrameError::LengthTooSmall { len });
        }
        let declared = u64::from(len) + FRAME_PREFIX_BYTES as u64;
        if declared > u64::from(self.frame_bytes_max) {
            return Err(FrameError::FrameTooLarge {
                declared_bytes: declared,
                max_bytes: self.frame_bytes_max,
            });
        }
        // Below the limit, so it fits a usize on every platform with a u32 limit.
        Ok(usize::try_from(declared).ok())
    }

    /// The next frame, split off the front of `buf`; `Ok(None)` when `buf`
    /// does not hold a whole frame yet (nothing is consumed then, and nothing
    /// is ever reserved: reading more is the caller's business).
    ///
    /// # Errors
    /// [`FrameError`] when the declared length is below the header or above
    /// the limit. The buffer is left as it was; the connection should be
    /// closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some(total) = self.peek_frame_len(buf)? else {
            return Ok(None);
        };
        if buf.len() < total {
            return Ok(None);
        }
        let Some(header) = buf
            .get(FRAME_PREFIX_BYTES..FRAME_OVERHEAD_BYTES)
            .and_then(|h| h.first_chunk::<FRAME_HEADER_BYTES>())
        else {
            // Unreachable: total >= FRAME_OVERHEAD_BYTES and buf holds total bytes.
            return Ok(None);
        };
        let opcode = header[0];
        let flags = header[1];
        let request_id = u32::from_le_bytes([header[2], header[3], header[4], header[5]]);
        buf.advance(FRAME_OVERHEAD_BYTES);
        let payload = buf.split_to(total - FRAME_OVERHEAD_BYTES).freeze();
        Ok(Some(Frame {
            opcode,
            flags,
            request_id,
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_the_prefix() {
        let mut d = FrameDecoder::new(20);
        let mut buf = BytesMut::new();
        buf.put_u32_le(16);
        buf.put_slice(&[0x02, 0, 1, 0, 0, 0]);
        buf.put_slice(&[0; 10]);
        let frame = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.payload.len(), 10);
        let mut buf = BytesMut::new();
        buf.put_u32_le(17);
        assert_eq!(
            d.decode(&mut buf),
            Err(FrameError::FrameTooLarge {
                declared_bytes: 21,
                max_bytes: 20
            })
        );
        assert_eq!(buf.len(), 4, "nothing consumed");
    }

    #[test]
    fn short_lengths_lose_the_framing() {
        let mut d = FrameDecoder::default();
        let mut buf = BytesMut::from(&[5u8, 0, 0, 0][..]);
        let err = d.decode(&mut buf).unwrap_err();
        assert_eq!(err, FrameError::LengthTooSmall { len: 5 });
        assert_eq!(err.code(), ErrorCode::Malformed);
        assert!(err.closes_connection());
    }

    #[test]
    fn the_largest_declared_length_is_refused_without_overflow() {
        let mut d = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT);
        let mut buf = BytesMut::from(&[0xff; 4][..]);
        let err = d.decode(&mut buf).unwrap_err();
        assert_eq!(err.code(), ErrorCode::FrameTooLarge);
    }

    #[test]
    fn frames_split_off_in_order_and_payloads_share_the_buffer() {
        let mut buf = BytesMut::new();
        for (id, payload) in [(1u32, &b"ab"[..]), (2, b"")] {
            Frame {
                opcode: 0x02,
                flags: 9,
                request_id: id,
                payload: Bytes::copy_from_slice(payload),
            }
            .encode(&mut buf)
            .unwrap();
        }
        let base = buf.as_ptr();
        let mut d = FrameDecoder::default();
        let a = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!((a.request_id, a.flags, &a.payload[..]), (1, 9, &b"ab"[..]));
        assert_eq!(
            a.payload.as_ptr(),
            base.wrapping_add(10),
            "payload not copied"
        );
        let b = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!((b.request_id, b.payload.len()), (2, 0));
        assert_eq!(d.decode(&mut buf), Ok(None));
    }

    #[test]
    #[should_panic(expected = "frame limit")]
    fn a_limit_below_the_empty_frame_is_a_bug() {
        let _ = FrameDecoder::new(9);
    }

    #[test]
    fn opcode_names_cover_every_request_and_reply() {
        for op in opcode::REQUESTS {
            assert!(opcode::name(op).is_some());
            assert!(opcode::name(opcode::reply_to(op)).is_some());
            assert_ne!(opcode::reply_to(op), opcode::ERROR);
        }
        assert_eq!(opcode::name(opcode::ERROR), Some("ERROR"));
        assert_eq!(opcode::name(0x03), None);
    }
}
