//! Replies: one type per operation and [`Reply`], which decodes a frame's
//! payload by its opcode and encodes a whole frame. The reply to request
//! opcode `X` has opcode `X | 0x80`; [`Reply::Error`] (`0xFF`) answers any
//! request that failed as a whole.

use bytes::{BufMut, BytesMut};

use crate::codec::{EncodeError, len_u16, len_u32, put_status, put_string_u8};
use crate::error::{ErrorCode, WireError};
use crate::frame::{FRAME_OVERHEAD_BYTES, opcode, put_header};
use crate::limits::{BATCH_ENTRIES_MAX, ERROR_MESSAGE_BYTES_MAX, FRAME_HEADER_BYTES};
use crate::message::{
    PeekedMessage, ReceivedBatch, ReceivedMessage, ReceivedMessageRef, SendOutcome,
};
use crate::name::QueueName;
use crate::queue_attributes::{QueueAttributes, QueueStats};

mod decode;

/// Bytes of a RECEIVE reply holding no message: length prefix, header and
/// the `u16` count. A reply with messages adds
/// [`crate::message::received_message_encoded_len`] for each.
pub const RECEIVE_REPLY_FIXED_BYTES: usize = FRAME_OVERHEAD_BYTES + 2;

/// Writes a RECEIVE reply straight into an output buffer, one message at a
/// time, so a broker can stop before the frame limit without building a
/// batch first and without copying bodies twice.
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use sluice_protocol::{MessageAttributes, MessageId, Receipt, ReceivedMessage, Reply};
/// use sluice_protocol::reply::ReceiveReplyWriter;
///
/// let msg = ReceivedMessage {
///     id: MessageId(1),
///     receipt: Receipt::default(),
///     receive_count: 1,
///     sent_at_ms: 0,
///     first_received_delta_ms: 0,
///     attributes: MessageAttributes::new(),
///     body: Bytes::from_static(&[0; 100]),
///     group: None,
/// };
/// let mut out = BytesMut::new();
/// // A frame limit with room for two such messages only.
/// let mut writer = ReceiveReplyWriter::begin(&mut out, 7, 12 + 2 * 163);
/// assert!(writer.push(&mut out, &msg.as_view()));
/// assert!(writer.push(&mut out, &msg.as_view()));
/// assert!(!writer.push(&mut out, &msg.as_view()), "would exceed the frame limit");
/// writer.finish(&mut out);
/// assert_eq!(out.len(), 12 + 2 * 163);
///
/// let payload = out.split_off(10).freeze();
/// let Ok(Reply::Receive { messages }) = Reply::decode(out[4], payload) else { panic!() };
/// assert_eq!(messages.to_messages(), [msg.clone(), msg]);
/// ```
#[derive(Debug)]
pub struct ReceiveReplyWriter {
    start: usize,
    count: u16,
    frame_bytes_max: usize,
}

impl ReceiveReplyWriter {
    /// Starts a reply to request `request_id` at the end of `buf`. The
    /// whole frame will stay within `frame_bytes_max` (prefix included).
    pub fn begin(buf: &mut BytesMut, request_id: u32, frame_bytes_max: u32) -> ReceiveReplyWriter {
        let start = buf.len();
        buf.reserve(RECEIVE_REPLY_FIXED_BYTES);
        // Length and count are patched by `finish`.
        buf.put_u32_le(0);
        buf.put_u8(opcode::RECEIVE_REPLY);
        buf.put_u8(0);
        buf.put_u32_le(request_id);
        buf.put_u16_le(0);
        ReceiveReplyWriter {
            start,
            count: 0,
            frame_bytes_max: usize::try_from(frame_bytes_max).unwrap_or(usize::MAX),
        }
    }

    /// Messages written so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count.into()
    }

    /// Whether no message was written.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether one more message of `encoded_len` bytes (see
    /// [`crate::message::received_message_encoded_len`]) fits: within the
    /// frame limit and the batch limit of 1,024.
    #[must_use]
    pub fn fits(&self, buf: &BytesMut, encoded_len: usize) -> bool {
        let used = buf.len().saturating_sub(self.start);
        usize::from(self.count) < BATCH_ENTRIES_MAX
            && used.saturating_add(encoded_len) <= self.frame_bytes_max
    }

    /// Appends `message` if it [fits](Self::fits); returns whether it did.
    /// Nothing is written when it does not.
    pub fn push(&mut self, buf: &mut BytesMut, message: &ReceivedMessageRef<'_>) -> bool {
        self.push_encoded(buf, message.encoded_len(), |buf| message.encode(buf))
    }

    /// Appends an owned `message` if it [fits](Self::fits), with its group
    /// when `with_group` (a version 5 reply; earlier decoders refuse the
    /// flag that announces one); returns whether it did. Nothing is written
    /// when it does not. Its group id, checked when it was made, goes out
    /// without a second check.
    pub fn push_message(
        &mut self,
        buf: &mut BytesMut,
        message: &ReceivedMessage,
        with_group: bool,
    ) -> bool {
        let mut len = message.encoded_len();
        if !with_group {
            len -= message.group.as_ref().map_or(0, |g| 1 + g.as_bytes().len());
        }
        self.push_encoded(buf, len, |buf| message.encode(buf, with_group))
    }

    /// Appends a message of `len` bytes that `encode` writes, if it fits;
    /// returns whether it did. Nothing is written when it does not.
    fn push_encoded(
        &mut self,
        buf: &mut BytesMut,
        len: usize,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
    ) -> bool {
        if !self.fits(buf, len) {
            return false;
        }
        let before = buf.len();
        buf.reserve(len);
        // Fits within the frame limit, so the body length fits a u32.
        if encode(buf).is_err() {
            buf.truncate(before);
            return false;
        }
        self.count += 1;
        true
    }

    /// Completes the frame: writes its length and the message count.
    ///
    /// # Panics
    /// When `buf` was truncated below the reply's start since
    /// [`Self::begin`]: a bug in the caller.
    pub fn finish(self, buf: &mut BytesMut) {
        let frame_len = buf.len() - self.start - 4;
        debug_assert!(frame_len >= FRAME_HEADER_BYTES + 2);
        // At most the frame limit (itself at most 64 MiB), so it fits a u32.
        let frame_len = u32::try_from(frame_len).unwrap_or(u32::MAX);
        let s = self.start;
        buf[s..s + 4].copy_from_slice(&frame_len.to_le_bytes());
        buf[s + FRAME_OVERHEAD_BYTES..s + RECEIVE_REPLY_FIXED_BYTES]
            .copy_from_slice(&self.count.to_le_bytes());
    }
}

/// Bytes of the stats in a `GET_QUEUE` reply: 14 `u64`s.
const QUEUE_STATS_BYTES: usize = 14 * 8;

/// The limits a server announces in its HELLO reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ServerLimits {
    /// Largest frame, length prefix included.
    pub frame_bytes_max: u32,
    /// Largest batch (SEND, DELETE, `CHANGE_VISIBILITY` entries; RECEIVE and
    /// PEEK messages).
    pub batch_entries_max: u16,
    /// Requests a connection may have in flight before the server stops
    /// reading it.
    pub requests_in_flight_max: u32,
    /// Longest receive wait.
    pub receive_wait_ms_max: u32,
}

/// The reply to HELLO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloReply {
    /// Protocol version the server speaks on this connection.
    pub version: u16,
    /// The server's version string (at most 255 bytes).
    pub server_version: String,
    /// The shard serving this connection.
    pub shard: u16,
    /// Number of shards.
    pub shards: u16,
    /// Limits.
    pub limits: ServerLimits,
}

/// The reply to `GET_QUEUE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue.
    pub queue: QueueName,
    /// Every attribute.
    pub attributes: QueueAttributes,
    /// Its counters, summed over shards.
    pub stats: QueueStats,
    /// When it was created and last changed (protocol version 4; `None`
    /// from an older server).
    pub times: Option<QueueTimes>,
}

/// When a queue was created and when its attributes last changed, in Unix
/// ms of the broker's wall clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueTimes {
    /// When `CREATE_QUEUE` made it.
    pub created_ms: u64,
    /// The last `SET_QUEUE` (the creation, before any).
    pub modified_ms: u64,
}

/// One named server counter of a `SERVER_STATS` reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Counter {
    /// Its name (at most 255 bytes), for example `connections`.
    pub name: String,
    /// Its value.
    pub value: u64,
}

/// The reply to `SERVER_STATS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerStatsReply {
    /// The server's version string.
    pub server_version: String,
    /// The io backend in use (`io_uring` or `epoll`).
    pub io_backend: String,
    /// Number of shards.
    pub shards: u16,
    /// Named counters (an open list: `connections`, `queues`,
    /// `memory_used_bytes`, `memory_max_bytes`, `uptime_ms`, ...).
    pub counters: Vec<Counter>,
}

impl ServerStatsReply {
    /// The value of the counter with this name.
    #[must_use]
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value)
    }
}

/// Every reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `0x81` HELLO reply.
    Hello(HelloReply),
    /// `0x82` PONG.
    Pong {
        /// The PING's nonce.
        nonce: u64,
    },
    /// `0x90` `CREATE_QUEUE` reply.
    CreateQueue {
        /// True when the queue is new, false when it existed with the same
        /// attributes.
        created: bool,
    },
    /// `0x91` `DELETE_QUEUE` reply.
    DeleteQueue,
    /// `0x92` `LIST_QUEUES` reply.
    ListQueues {
        /// The names, in the server's order.
        queues: Vec<QueueName>,
        /// For a paged request (protocol version 3): whether more names
        /// follow the last one here. `None` for an unpaged one.
        more: Option<bool>,
    },
    /// `0x93` `GET_QUEUE` reply.
    GetQueue(Box<QueueInfo>),
    /// `0x94` `SET_QUEUE` reply.
    SetQueue,
    /// `0x95` `PURGE_QUEUE` reply.
    PurgeQueue {
        /// Messages removed.
        purged: u64,
    },
    /// `0xA0` SEND reply: one result per entry, in order.
    Send {
        /// The id, or why the entry was refused.
        results: Vec<Result<SendOutcome, ErrorCode>>,
    },
    /// `0xA1` RECEIVE reply.
    Receive {
        /// The messages leased (possibly none): a validated slice of the
        /// frame when decoded.
        messages: ReceivedBatch,
    },
    /// `0xA2` DELETE reply: one status per receipt, in order.
    Delete {
        /// Success or why not.
        results: Vec<Result<(), ErrorCode>>,
    },
    /// `0xA3` `CHANGE_VISIBILITY` reply: one status per entry, in order.
    ChangeVisibility {
        /// Success or why not.
        results: Vec<Result<(), ErrorCode>>,
    },
    /// `0xA4` REDRIVE reply.
    Redrive {
        /// Messages moved back to their source queue.
        moved: u64,
        /// Messages that stayed (source queue gone or full).
        stayed: u64,
    },
    /// `0xA5` PEEK reply.
    Peek {
        /// The messages (possibly none).
        messages: Vec<PeekedMessage>,
        /// Protocol version 3: whether visible messages were left out
        /// because the reply frame was full (ask for fewer). `None` in
        /// versions 1 and 2, which do not say.
        cut: Option<bool>,
    },
    /// `0xB0` `SERVER_STATS` reply.
    ServerStats(ServerStatsReply),
    /// `0xB1` `ADVANCE_CLOCK` reply: the manual clock after the advance.
    AdvanceClock {
        /// Manual time since the server started: every advance so far.
        elapsed_ms: u64,
        /// The wall-clock time the broker now stamps messages with (Unix
        /// ms).
        wall_ms: u64,
    },
    /// `0xFF` ERROR: the request failed as a whole. Messages above 1,024
    /// bytes are cut (at a character boundary) when encoded.
    Error(WireError),
}

/// Bytes of one per-entry result of a SEND reply.
fn send_result_len(r: &Result<SendOutcome, ErrorCode>) -> usize {
    match r {
        Ok(_) => 2 + 16 + 1,
        Err(_) => 2,
    }
}

/// `message` cut to at most [`ERROR_MESSAGE_BYTES_MAX`] bytes at a character
/// boundary.
fn error_message(message: &str) -> &str {
    let mut end = message.len().min(ERROR_MESSAGE_BYTES_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

impl Reply {
    /// An ERROR reply.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
        Reply::Error(WireError::new(code, message))
    }

    /// The reply's opcode.
    #[must_use]
    pub fn opcode(&self) -> u8 {
        let request = match self {
            Reply::Hello(_) => opcode::HELLO,
            Reply::Pong { .. } => opcode::PING,
            Reply::CreateQueue { .. } => opcode::CREATE_QUEUE,
            Reply::DeleteQueue => opcode::DELETE_QUEUE,
            Reply::ListQueues { .. } => opcode::LIST_QUEUES,
            Reply::GetQueue(_) => opcode::GET_QUEUE,
            Reply::SetQueue => opcode::SET_QUEUE,
            Reply::PurgeQueue { .. } => opcode::PURGE_QUEUE,
            Reply::Send { .. } => opcode::SEND,
            Reply::Receive { .. } => opcode::RECEIVE,
            Reply::Delete { .. } => opcode::DELETE,
            Reply::ChangeVisibility { .. } => opcode::CHANGE_VISIBILITY,
            Reply::Redrive { .. } => opcode::REDRIVE,
            Reply::Peek { .. } => opcode::PEEK,
            Reply::ServerStats(_) => opcode::SERVER_STATS,
            Reply::AdvanceClock { .. } => opcode::ADVANCE_CLOCK,
            Reply::Error(_) => return opcode::ERROR,
        };
        opcode::reply_to(request)
    }

    /// Bytes of the payload.
    #[must_use]
    pub fn payload_len(&self) -> usize {
        match self {
            Reply::Hello(h) => 2 + 1 + h.server_version.len() + 2 + 2 + 4 + 2 + 4 + 4,
            Reply::Pong { .. } | Reply::PurgeQueue { .. } => 8,
            Reply::CreateQueue { .. } => 1,
            Reply::DeleteQueue | Reply::SetQueue => 0,
            Reply::ListQueues { queues, more } => {
                4 + queues.iter().map(QueueName::encoded_len).sum::<usize>()
                    + usize::from(more.is_some())
            }
            Reply::GetQueue(info) => {
                info.queue.encoded_len()
                    + info.attributes.encoded_len()
                    + QUEUE_STATS_BYTES
                    + info.times.map_or(0, |_| 16)
            }
            Reply::Send { results } => 2 + results.iter().map(send_result_len).sum::<usize>(),
            Reply::Receive { messages } => 2 + messages.wire_bytes().len(),
            Reply::Delete { results } | Reply::ChangeVisibility { results } => {
                2 + 2 * results.len()
            }
            Reply::Redrive { .. } | Reply::AdvanceClock { .. } => 16,
            Reply::Peek { messages, cut } => {
                2 + messages
                    .iter()
                    .map(PeekedMessage::encoded_len)
                    .sum::<usize>()
                    + usize::from(cut.is_some())
            }
            Reply::ServerStats(s) => {
                1 + s.server_version.len()
                    + 1
                    + s.io_backend.len()
                    + 2
                    + 2
                    + s.counters
                        .iter()
                        .map(|c| 1 + c.name.len() + 8)
                        .sum::<usize>()
            }
            Reply::Error(e) => 2 + 2 + error_message(&e.message).len(),
        }
    }

    /// Bytes of the whole frame, length prefix included.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        FRAME_OVERHEAD_BYTES + self.payload_len()
    }

    /// Makes the reply fit a frame of `frame_bytes_max` bytes and returns how
    /// many entries it lost. A PEEK or `LIST_QUEUES` reply loses its last
    /// entries until it fits (nothing is leased by them); any other reply
    /// that does not fit becomes an `Internal` error. (A broker writes
    /// RECEIVE replies with [`ReceiveReplyWriter`], which stops at the
    /// limit.)
    pub fn fit_frame(&mut self, frame_bytes_max: usize) -> usize {
        let mut dropped = 0;
        let mut len = self.encoded_len();
        if len <= frame_bytes_max {
            return 0;
        }
        match self {
            Reply::Peek { messages, cut } => {
                while len > frame_bytes_max {
                    let Some(m) = messages.pop() else { break };
                    len -= m.encoded_len();
                    dropped += 1;
                }
                if let Some(cut) = cut {
                    *cut = true;
                }
            }
            Reply::ListQueues { queues, more } => {
                while len > frame_bytes_max {
                    let Some(q) = queues.pop() else { break };
                    len -= q.encoded_len();
                    dropped += 1;
                }
                // A page says that it was cut: the next one starts after
                // its last name.
                if let Some(more) = more {
                    *more = true;
                }
            }
            _ => {
                *self = Reply::error(
                    ErrorCode::Internal,
                    format!(
                        "the reply of {len} bytes is above the frame limit of {frame_bytes_max}"
                    ),
                );
            }
        }
        dropped
    }

    /// Writes the whole frame (prefix, header with flags 0, payload):
    /// exactly [`Self::encoded_len`] bytes. Batch limits are not checked
    /// here; only values that do not fit their wire fields are errors.
    ///
    /// # Errors
    /// `TooLong` when a length or count does not fit its field (a string above
    /// 255 bytes, more than 65,535 entries); `buf` is then as it was.
    pub fn encode(&self, request_id: u32, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let start = buf.len();
        let result = self.encode_inner(request_id, buf);
        if result.is_err() {
            buf.truncate(start);
        }
        result
    }

    fn encode_inner(&self, request_id: u32, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_header(buf, self.opcode(), 0, request_id, self.payload_len())?;
        match self {
            Reply::Hello(h) => {
                buf.put_u16_le(h.version);
                put_string_u8(buf, &h.server_version, "server_version")?;
                buf.put_u16_le(h.shard);
                buf.put_u16_le(h.shards);
                buf.put_u32_le(h.limits.frame_bytes_max);
                buf.put_u16_le(h.limits.batch_entries_max);
                buf.put_u32_le(h.limits.requests_in_flight_max);
                buf.put_u32_le(h.limits.receive_wait_ms_max);
            }
            Reply::Pong { nonce } => buf.put_u64_le(*nonce),
            Reply::CreateQueue { created } => buf.put_u8(u8::from(*created)),
            Reply::DeleteQueue | Reply::SetQueue => {}
            Reply::ListQueues { queues, more } => {
                buf.put_u32_le(len_u32(queues.len(), "queue count")?);
                for q in queues {
                    q.encode(buf);
                }
                if let Some(more) = more {
                    buf.put_u8(u8::from(*more));
                }
            }
            Reply::GetQueue(info) => {
                info.queue.encode(buf);
                info.attributes.encode(buf)?;
                put_stats(buf, &info.stats);
                if let Some(t) = info.times {
                    buf.put_u64_le(t.created_ms);
                    buf.put_u64_le(t.modified_ms);
                }
            }
            Reply::PurgeQueue { purged } => buf.put_u64_le(*purged),
            Reply::Send { results } => {
                buf.put_u16_le(len_u16(results.len(), "result count")?);
                for r in results {
                    match r {
                        Ok(outcome) => {
                            buf.put_u16_le(0);
                            buf.put_slice(&outcome.id.to_bytes());
                            buf.put_u8(u8::from(outcome.duplicate));
                        }
                        Err(code) => buf.put_u16_le(code.to_u16()),
                    }
                }
            }
            Reply::Receive { messages } => {
                buf.put_u16_le(messages.count());
                buf.put_slice(messages.wire_bytes());
            }
            Reply::Delete { results } | Reply::ChangeVisibility { results } => {
                buf.put_u16_le(len_u16(results.len(), "result count")?);
                for r in results {
                    put_status(buf, *r);
                }
            }
            Reply::Redrive { moved, stayed } => {
                buf.put_u64_le(*moved);
                buf.put_u64_le(*stayed);
            }
            Reply::Peek { messages, cut } => {
                buf.put_u16_le(len_u16(messages.len(), "message count")?);
                for m in messages {
                    m.encode(buf)?;
                }
                if let Some(cut) = cut {
                    buf.put_u8(u8::from(*cut));
                }
            }
            Reply::ServerStats(s) => {
                put_string_u8(buf, &s.server_version, "server_version")?;
                put_string_u8(buf, &s.io_backend, "io_backend")?;
                buf.put_u16_le(s.shards);
                buf.put_u16_le(len_u16(s.counters.len(), "counter count")?);
                for c in &s.counters {
                    put_string_u8(buf, &c.name, "counter name")?;
                    buf.put_u64_le(c.value);
                }
            }
            Reply::AdvanceClock {
                elapsed_ms,
                wall_ms,
            } => {
                buf.put_u64_le(*elapsed_ms);
                buf.put_u64_le(*wall_ms);
            }
            Reply::Error(e) => {
                let message = error_message(&e.message);
                buf.put_u16_le(e.code.to_u16());
                buf.put_u16_le(len_u16(message.len(), "error message")?);
                buf.put_slice(message.as_bytes());
            }
        }
        Ok(())
    }
}

fn stats_fields(s: &QueueStats) -> [u64; 14] {
    [
        s.visible,
        s.delayed,
        s.in_flight,
        s.sent,
        s.moved_in,
        s.received,
        s.deleted,
        s.redelivered,
        s.released,
        s.dead_lettered,
        s.redriven,
        s.dropped,
        s.purged,
        s.oldest_age_ms,
    ]
}

fn put_stats(buf: &mut BytesMut, s: &QueueStats) {
    for v in stats_fields(s) {
        buf.put_u64_le(v);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::codec::DecodeError;
    use crate::receipt::MessageId;

    #[test]
    fn oversized_peek_replies_shed_their_last_messages() {
        use crate::message::PeekedMessage;
        let m = |i: u8| PeekedMessage {
            id: MessageId(u128::from(i)),
            receive_count: 0,
            delivery: 0,
            sent_at_ms: 0,
            first_received_delta_ms: None,
            attributes: crate::message::MessageAttributes::new(),
            body: Bytes::from(vec![0; 100]),
        };
        let mut reply = Reply::Peek {
            messages: (0..10).map(m).collect(),
            cut: None,
        };
        let limit = reply.encoded_len() - 1;
        assert_eq!(reply.fit_frame(limit), 1);
        assert!(reply.encoded_len() <= limit);
        // Version 3 says so.
        let mut reply = Reply::Peek {
            messages: (0..10).map(m).collect(),
            cut: Some(false),
        };
        let limit = reply.encoded_len() - 1;
        assert_eq!(reply.fit_frame(limit), 1);
        assert!(matches!(
            reply,
            Reply::Peek {
                cut: Some(true),
                ..
            }
        ));
        let mut list = Reply::ListQueues {
            queues: vec![QueueName::from_static("a"), QueueName::from_static("bb")],
            more: None,
        };
        let limit = list.encoded_len() - 1;
        assert_eq!(list.fit_frame(limit), 1);
        assert_eq!(
            list,
            Reply::ListQueues {
                queues: vec![QueueName::from_static("a")],
                more: None,
            }
        );
        // A page that is cut says more follow.
        let mut page = Reply::ListQueues {
            queues: vec![QueueName::from_static("a"), QueueName::from_static("bb")],
            more: Some(false),
        };
        let limit = page.encoded_len() - 1;
        assert_eq!(page.fit_frame(limit), 1);
        assert_eq!(
            page,
            Reply::ListQueues {
                queues: vec![QueueName::from_static("a")],
                more: Some(true),
            }
        );
        let mut pong = Reply::Pong { nonce: 1 };
        assert_eq!(pong.fit_frame(100), 0);
        pong.fit_frame(10);
        assert!(matches!(pong, Reply::Error(e) if e.code == ErrorCode::Internal));
    }

    use super::*;
    use crate::message::{MessageAttributes, ReceivedMessage, received_message_encoded_len};
    use crate::receipt::Receipt;

    #[test]
    fn error_messages_are_cut_at_a_char_boundary() {
        let long = "é".repeat(600); // 1,200 bytes
        let reply = Reply::error(ErrorCode::Internal, long);
        let mut buf = BytesMut::new();
        reply.encode(3, &mut buf).unwrap();
        assert_eq!(buf.len(), reply.encoded_len());
        let payload = buf.split_off(FRAME_OVERHEAD_BYTES).freeze();
        match Reply::decode(opcode::ERROR, payload).unwrap() {
            Reply::Error(e) => assert_eq!(e.message.len(), 1024),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn error_replies_need_a_known_nonzero_code() {
        let zero = Bytes::from_static(&[0, 0, 0, 0]);
        assert!(matches!(
            Reply::decode(opcode::ERROR, zero),
            Err(DecodeError::InvalidValue { .. })
        ));
        let unknown = Bytes::from_static(&[0x99, 0, 0, 0]);
        assert!(matches!(
            Reply::decode(opcode::ERROR, unknown),
            Err(DecodeError::InvalidValue { .. })
        ));
    }

    #[test]
    fn receive_reply_size_is_predictable() {
        let msg = ReceivedMessage {
            id: MessageId(9),
            receipt: Receipt::default(),
            receive_count: 1,
            sent_at_ms: 1,
            first_received_delta_ms: 0,
            attributes: MessageAttributes::from_pairs([("a", "b")]).unwrap(),
            body: Bytes::from_static(&[7; 100]),
            group: None,
        };
        let reply = Reply::Receive {
            messages: ReceivedBatch::from_messages([msg.as_view(), msg.as_view()]).unwrap(),
        };
        let expected = RECEIVE_REPLY_FIXED_BYTES
            + 2 * received_message_encoded_len(msg.attributes.wire_bytes().len(), 100);
        let mut buf = BytesMut::new();
        reply.encode(1, &mut buf).unwrap();
        assert_eq!(buf.len(), expected);
        assert_eq!(reply.encoded_len(), expected);
    }

    #[test]
    fn the_writer_matches_the_encoder() {
        let msgs: Vec<ReceivedMessage> = (0..3u8)
            .map(|i| ReceivedMessage {
                id: MessageId(i.into()),
                receipt: Receipt::default(),
                receive_count: 1,
                sent_at_ms: 5,
                first_received_delta_ms: u32::MAX,
                attributes: MessageAttributes::from_pairs([("k", "v")]).unwrap(),
                body: Bytes::from(vec![i; usize::from(i) * 10]),
                group: None,
            })
            .collect();
        let mut expected = BytesMut::new();
        Reply::Receive {
            messages: ReceivedBatch::from_messages(msgs.iter().map(ReceivedMessage::as_view))
                .unwrap(),
        }
        .encode(9, &mut expected)
        .unwrap();
        let mut out = BytesMut::from(&b"before"[..]);
        let mut w = ReceiveReplyWriter::begin(&mut out, 9, 1 << 20);
        for m in &msgs {
            assert!(w.push(&mut out, &m.as_view()));
        }
        assert_eq!(w.len(), 3);
        w.finish(&mut out);
        assert_eq!(&out[6..], &expected[..]);

        let mut out = BytesMut::new();
        let w = ReceiveReplyWriter::begin(&mut out, 1, 1 << 20);
        assert!(w.is_empty());
        w.finish(&mut out);
        let frame = crate::FrameDecoder::new(1 << 20)
            .decode(&mut out)
            .unwrap()
            .unwrap();
        assert_eq!(
            Reply::decode(frame.opcode, frame.payload),
            Ok(Reply::Receive {
                messages: ReceivedBatch::default()
            })
        );
    }

    #[test]
    fn owned_messages_are_written_as_their_views_are() {
        let msgs: Vec<ReceivedMessage> = (0..4u8)
            .map(|i| ReceivedMessage {
                id: MessageId(i.into()),
                receipt: Receipt::default(),
                receive_count: 2,
                sent_at_ms: 7,
                first_received_delta_ms: 3,
                attributes: MessageAttributes::from_pairs([("k", "v")]).unwrap(),
                body: Bytes::from(vec![i; usize::from(i) * 3]),
                group: (i % 2 == 0).then(|| crate::MessageGroupId::new(&format!("g-{i}")).unwrap()),
            })
            .collect();
        for with_group in [true, false] {
            let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
            let mut wa = ReceiveReplyWriter::begin(&mut a, 3, 1 << 20);
            let mut wb = ReceiveReplyWriter::begin(&mut b, 3, 1 << 20);
            for m in &msgs {
                let mut view = m.as_view();
                if !with_group {
                    view.group = None;
                }
                assert!(wa.push(&mut a, &view));
                assert!(wb.push_message(&mut b, m, with_group));
            }
            wa.finish(&mut a);
            wb.finish(&mut b);
            assert_eq!(a, b, "with_group {with_group}");
            let frame = crate::FrameDecoder::new(1 << 20)
                .decode(&mut b)
                .unwrap()
                .unwrap();
            let Ok(Reply::Receive { messages }) = Reply::decode(frame.opcode, frame.payload) else {
                panic!("not a receive reply");
            };
            let groups: Vec<Option<&str>> = messages.iter().map(|m| m.group).collect();
            let want: Vec<Option<&str>> = msgs
                .iter()
                .map(|m| {
                    m.group
                        .as_ref()
                        .filter(|_| with_group)
                        .map(crate::MessageGroupId::as_str)
                })
                .collect();
            assert_eq!(groups, want);
        }
        // A message that does not fit is not written, as with a view.
        let mut out = BytesMut::new();
        let mut w = ReceiveReplyWriter::begin(&mut out, 3, 100);
        let before = out.len();
        let big = ReceivedMessage {
            body: Bytes::from(vec![0; 200]),
            ..msgs[0].clone()
        };
        assert!(!w.push_message(&mut out, &big, true));
        assert_eq!(out.len(), before);
        assert!(w.is_empty());
    }

    #[test]
    fn reply_counts_above_the_batch_limit_are_refused() {
        let mut p = BytesMut::new();
        p.put_u16_le(1025);
        let err = Reply::decode(opcode::DELETE_REPLY, p.freeze()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::BatchTooLarge);
        assert_eq!(
            Reply::decode(0x01, Bytes::new()).unwrap_err(),
            DecodeError::UnknownOpcode(1)
        );
    }
}
