//! Requests: one type per operation and [`Request`], which decodes a frame's
//! payload by its opcode and encodes a whole frame.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::BatchEntry;
use crate::codec::{DecodeError, EncodeError, Reader, capacity_for, len_u16};
use crate::frame::{flags, opcode, put_header};
use crate::limits::{ADVANCE_CLOCK_MS_MAX, AUTH_TOKEN_BYTES_MAX, BATCH_ENTRIES_MAX};
use crate::message::{SendBatch, SendEntry, SendEntryRef, USE_QUEUE_DEFAULT, VisibilityChange};
use crate::name::{QueueName, is_name_byte};
use crate::queue_attributes::AttributeUpdate;
use crate::receipt::{RECEIPT_BYTES, Receipt};

/// HELLO: the first frame on every connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloRequest {
    /// Protocol version the client speaks ([`crate::limits::PROTOCOL_VERSION`]).
    pub version: u16,
    /// Auth token (at most 1 KiB); empty when the client has none.
    pub token: Bytes,
    /// The session timeout the client asks for, in ms: the server closes
    /// the connection once it has been silent (no request, no PING) this
    /// long. 0 asks for none. On the wire from version 2 on; a version-1
    /// HELLO has no such field (it decodes as 0, and is encoded without
    /// it).
    pub session_timeout_ms: u32,
}

impl HelloRequest {
    /// A HELLO of the current version presenting `token` (empty: none),
    /// without a session timeout.
    #[must_use]
    pub fn new(token: Bytes) -> HelloRequest {
        HelloRequest {
            version: crate::limits::PROTOCOL_VERSION,
            token,
            session_timeout_ms: 0,
        }
    }

    /// Whether this HELLO's version carries the session timeout field.
    #[must_use]
    pub fn has_session_timeout_field(&self) -> bool {
        self.version >= 2
    }
}

/// `CREATE_QUEUE` (and, with the same layout, `SET_QUEUE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueAttributesRequest {
    /// The queue.
    pub queue: QueueName,
    /// Attributes to set; on CREATE, absent ones take their defaults.
    pub attributes: AttributeUpdate,
}

/// SEND: a batch of 1 to 1,024 messages to one queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRequest {
    /// The queue.
    pub queue: QueueName,
    /// The messages, in order: a validated slice of the frame when decoded.
    pub entries: SendBatch,
}

impl SendRequest {
    /// A SEND of `entries` to `queue` (their bytes are copied once).
    ///
    /// # Errors
    /// As [`SendBatch::from_entries`].
    pub fn new<'a>(
        queue: QueueName,
        entries: impl IntoIterator<Item = &'a SendEntry>,
    ) -> Result<SendRequest, EncodeError> {
        Ok(SendRequest {
            queue,
            entries: SendBatch::from_entries(entries)?,
        })
    }

    /// Writes the frame of a SEND of `views` to `queue` at the end of
    /// `buf`: the bytes `Request::Send` of the same entries encodes, written
    /// straight from the views. Where building a [`SendRequest`] copies
    /// every entry into its batch and encoding copies the batch again, this
    /// copies each entry once; a client uses it to write a SEND into its
    /// write buffer.
    ///
    /// # Errors
    /// As [`Request::encode`]: `TooLong` for more than 65,535 views or a
    /// field too long for the wire; `buf` is then as it was.
    pub fn encode_views(
        request_id: u32,
        queue: &QueueName,
        views: &[SendEntryRef<'_>],
        buf: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        let start = buf.len();
        let result = Self::encode_views_inner(request_id, queue, views, buf);
        if result.is_err() {
            buf.truncate(start);
        }
        result
    }

    fn encode_views_inner(
        request_id: u32,
        queue: &QueueName,
        views: &[SendEntryRef<'_>],
        buf: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        let count = len_u16(views.len(), SendEntry::COUNT_FIELD)?;
        let entries_len: usize = views.iter().map(SendEntryRef::encoded_len).sum();
        put_header(
            buf,
            opcode::SEND,
            0,
            request_id,
            queue.encoded_len() + 2 + entries_len,
        )?;
        queue.encode(buf);
        buf.put_u16_le(count);
        for view in views {
            view.encode(buf)?;
        }
        Ok(())
    }
}

/// RECEIVE: lease up to `max_messages` messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiveRequest {
    /// The queue.
    pub queue: QueueName,
    /// 1 ..= 1,024.
    pub max_messages: u16,
    /// Lease length; `None` uses the queue's.
    pub visibility_timeout_ms: Option<u32>,
    /// Long-poll wait; `None` uses the queue's.
    pub wait_ms: Option<u32>,
    /// Bind the leases of the delivered messages to the connection: when it
    /// closes, those still current are released at once. Carried in the
    /// frame header's flags ([`flags::RECEIVE_BIND_LEASES`]), protocol
    /// version 2.
    pub bind_leases: bool,
    /// Name each delivered message's source when it was dead-lettered, in
    /// the attribute [`crate::message::SOURCE_ATTRIBUTE`]. Carried in the
    /// frame header's flags ([`flags::RECEIVE_WITH_SOURCE`]), protocol
    /// version 4.
    pub with_source: bool,
}

/// DELETE: a batch of 1 to 1,024 receipts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteRequest {
    /// The queue the messages were received from.
    pub queue: QueueName,
    /// The deliveries to delete.
    pub receipts: Vec<Receipt>,
}

/// `CHANGE_VISIBILITY`: a batch of 1 to 1,024 lease changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeVisibilityRequest {
    /// The queue the messages were received from.
    pub queue: QueueName,
    /// The changes.
    pub entries: Vec<VisibilityChange>,
}

/// Every request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `0x01` HELLO.
    Hello(HelloRequest),
    /// `0x02` PING.
    Ping {
        /// Echoed by the PONG.
        nonce: u64,
    },
    /// `0x10` `CREATE_QUEUE`.
    CreateQueue(QueueAttributesRequest),
    /// `0x11` `DELETE_QUEUE`.
    DeleteQueue {
        /// The queue.
        queue: QueueName,
    },
    /// `0x12` `LIST_QUEUES`.
    ListQueues {
        /// Only names starting with this (0 to 80 name characters; empty
        /// lists every queue).
        prefix: String,
        /// One page: the names after this one (empty: from the first), the
        /// reply saying whether more follow (protocol version 3, the flag
        /// [`flags::LIST_QUEUES_PAGED`]). `None`: every name that fits one
        /// frame, as versions 1 and 2 list them.
        after: Option<String>,
    },
    /// `0x13` `GET_QUEUE`.
    GetQueue {
        /// The queue.
        queue: QueueName,
    },
    /// `0x14` `SET_QUEUE`.
    SetQueue(QueueAttributesRequest),
    /// `0x15` `PURGE_QUEUE`.
    PurgeQueue {
        /// The queue.
        queue: QueueName,
    },
    /// `0x20` SEND.
    Send(SendRequest),
    /// `0x21` RECEIVE.
    Receive(ReceiveRequest),
    /// `0x22` DELETE.
    Delete(DeleteRequest),
    /// `0x23` `CHANGE_VISIBILITY`.
    ChangeVisibility(ChangeVisibilityRequest),
    /// `0x24` REDRIVE: move up to `max_messages` visible messages of a
    /// dead-letter queue back to their source queues, or to `to`.
    Redrive {
        /// The dead-letter queue.
        queue: QueueName,
        /// How many messages to move at most.
        max_messages: u32,
        /// The queue to move them to (flag [`flags::REDRIVE_TO`]); `None`:
        /// each back to the queue it was dead-lettered from.
        to: Option<QueueName>,
    },
    /// `0x25` PEEK.
    Peek {
        /// The queue.
        queue: QueueName,
        /// 1 ..= 1,024.
        max_messages: u16,
    },
    /// `0x30` `SERVER_STATS`.
    ServerStats,
    /// `0x31` `ADVANCE_CLOCK`: move a server's manual clock forward (a
    /// server on the real clock refuses it with `Unsupported`).
    AdvanceClock {
        /// How far, in ms (0 ..= [`ADVANCE_CLOCK_MS_MAX`]; 0 reads the
        /// clock).
        by_ms: u64,
    },
}

/// Bytes of one `CHANGE_VISIBILITY` entry.
const VISIBILITY_CHANGE_BYTES: usize = RECEIPT_BYTES + 4;

impl Request {
    /// The request's opcode.
    #[must_use]
    pub fn opcode(&self) -> u8 {
        match self {
            Request::Hello(_) => opcode::HELLO,
            Request::Ping { .. } => opcode::PING,
            Request::CreateQueue(_) => opcode::CREATE_QUEUE,
            Request::DeleteQueue { .. } => opcode::DELETE_QUEUE,
            Request::ListQueues { .. } => opcode::LIST_QUEUES,
            Request::GetQueue { .. } => opcode::GET_QUEUE,
            Request::SetQueue(_) => opcode::SET_QUEUE,
            Request::PurgeQueue { .. } => opcode::PURGE_QUEUE,
            Request::Send(_) => opcode::SEND,
            Request::Receive(_) => opcode::RECEIVE,
            Request::Delete(_) => opcode::DELETE,
            Request::ChangeVisibility(_) => opcode::CHANGE_VISIBILITY,
            Request::Redrive { .. } => opcode::REDRIVE,
            Request::Peek { .. } => opcode::PEEK,
            Request::ServerStats => opcode::SERVER_STATS,
            Request::AdvanceClock { .. } => opcode::ADVANCE_CLOCK,
        }
    }

    /// The flags of the request's frame header (see [`flags`]).
    #[must_use]
    pub fn flags(&self) -> u8 {
        match self {
            Request::Receive(r) => {
                let bind = if r.bind_leases {
                    flags::RECEIVE_BIND_LEASES
                } else {
                    0
                };
                let source = if r.with_source {
                    flags::RECEIVE_WITH_SOURCE
                } else {
                    0
                };
                bind | source
            }
            Request::ListQueues { after: Some(_), .. } => flags::LIST_QUEUES_PAGED,
            Request::Redrive { to: Some(_), .. } => flags::REDRIVE_TO,
            _ => 0,
        }
    }

    /// The queue the request is about, if any.
    #[must_use]
    pub fn queue(&self) -> Option<&QueueName> {
        match self {
            Request::CreateQueue(r) | Request::SetQueue(r) => Some(&r.queue),
            Request::DeleteQueue { queue }
            | Request::GetQueue { queue }
            | Request::PurgeQueue { queue }
            | Request::Redrive { queue, .. }
            | Request::Peek { queue, .. } => Some(queue),
            Request::Send(r) => Some(&r.queue),
            Request::Receive(r) => Some(&r.queue),
            Request::Delete(r) => Some(&r.queue),
            Request::ChangeVisibility(r) => Some(&r.queue),
            Request::Hello(_)
            | Request::Ping { .. }
            | Request::ListQueues { .. }
            | Request::ServerStats
            | Request::AdvanceClock { .. } => None,
        }
    }

    /// Bytes of the payload.
    #[must_use]
    pub fn payload_len(&self) -> usize {
        match self {
            Request::Hello(h) => {
                2 + 2 + h.token.len() + if h.has_session_timeout_field() { 4 } else { 0 }
            }
            Request::Ping { .. } | Request::AdvanceClock { .. } => 8,
            Request::CreateQueue(r) | Request::SetQueue(r) => {
                r.queue.encoded_len() + r.attributes.encoded_len()
            }
            Request::DeleteQueue { queue }
            | Request::GetQueue { queue }
            | Request::PurgeQueue { queue } => queue.encoded_len(),
            Request::ListQueues { prefix, after } => {
                1 + prefix.len() + after.as_ref().map_or(0, |a| 1 + a.len())
            }
            Request::Send(r) => r.queue.encoded_len() + 2 + r.entries.wire_bytes().len(),
            Request::Receive(r) => r.queue.encoded_len() + 2 + 4 + 4,
            Request::Delete(r) => r.queue.encoded_len() + 2 + RECEIPT_BYTES * r.receipts.len(),
            Request::ChangeVisibility(r) => {
                r.queue.encoded_len() + 2 + VISIBILITY_CHANGE_BYTES * r.entries.len()
            }
            Request::Redrive { queue, to, .. } => {
                queue.encoded_len() + 4 + to.as_ref().map_or(0, QueueName::encoded_len)
            }
            Request::Peek { queue, .. } => queue.encoded_len() + 2,
            Request::ServerStats => 0,
        }
    }

    /// Bytes of the whole frame, length prefix included.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        crate::frame::FRAME_OVERHEAD_BYTES + self.payload_len()
    }

    /// Writes the whole frame (prefix, header with [`Self::flags`], payload):
    /// exactly [`Self::encoded_len`] bytes. Limits the decoder enforces (batch
    /// sizes, token and prefix lengths) are not checked here, so a client can
    /// send what a server must refuse; only values that do not fit their wire
    /// fields are errors.
    ///
    /// # Errors
    /// `TooLong` when a length or count does not fit its field; `buf` is then
    /// as it was.
    pub fn encode(&self, request_id: u32, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let start = buf.len();
        let result = self.encode_inner(request_id, buf);
        if result.is_err() {
            buf.truncate(start);
        }
        result
    }

    fn encode_inner(&self, request_id: u32, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_header(
            buf,
            self.opcode(),
            self.flags(),
            request_id,
            self.payload_len(),
        )?;
        match self {
            Request::Hello(h) => {
                buf.put_u16_le(h.version);
                buf.put_u16_le(len_u16(h.token.len(), "token")?);
                buf.put_slice(&h.token);
                if h.has_session_timeout_field() {
                    buf.put_u32_le(h.session_timeout_ms);
                }
            }
            Request::Ping { nonce } => buf.put_u64_le(*nonce),
            Request::CreateQueue(r) | Request::SetQueue(r) => {
                r.queue.encode(buf);
                r.attributes.encode(buf)?;
            }
            Request::DeleteQueue { queue }
            | Request::GetQueue { queue }
            | Request::PurgeQueue { queue } => {
                queue.encode(buf);
            }
            Request::ListQueues { prefix, after } => {
                crate::codec::put_string_u8(buf, prefix, "prefix")?;
                if let Some(after) = after {
                    crate::codec::put_string_u8(buf, after, "after")?;
                }
            }
            Request::Send(r) => {
                r.queue.encode(buf);
                buf.put_u16_le(r.entries.count());
                buf.put_slice(r.entries.wire_bytes());
            }
            Request::Receive(r) => {
                r.queue.encode(buf);
                buf.put_u16_le(r.max_messages);
                buf.put_u32_le(r.visibility_timeout_ms.unwrap_or(USE_QUEUE_DEFAULT));
                buf.put_u32_le(r.wait_ms.unwrap_or(USE_QUEUE_DEFAULT));
            }
            Request::Delete(r) => {
                r.queue.encode(buf);
                buf.put_u16_le(len_u16(r.receipts.len(), "receipt count")?);
                for receipt in &r.receipts {
                    buf.put_slice(&receipt.to_bytes());
                }
            }
            Request::ChangeVisibility(r) => {
                r.queue.encode(buf);
                buf.put_u16_le(len_u16(r.entries.len(), "entry count")?);
                for e in &r.entries {
                    buf.put_slice(&e.receipt.to_bytes());
                    buf.put_u32_le(e.visibility_timeout_ms);
                }
            }
            Request::Redrive {
                queue,
                max_messages,
                to,
            } => {
                queue.encode(buf);
                buf.put_u32_le(*max_messages);
                if let Some(to) = to {
                    to.encode(buf);
                }
            }
            Request::Peek {
                queue,
                max_messages,
            } => {
                queue.encode(buf);
                buf.put_u16_le(*max_messages);
            }
            Request::ServerStats => {}
            Request::AdvanceClock { by_ms } => buf.put_u64_le(*by_ms),
        }
        Ok(())
    }

    /// Decodes a request from its frame's opcode, header flags and payload.
    /// Bodies, dedup keys and the token share `payload`'s buffer.
    ///
    /// # Errors
    /// [`DecodeError`]: `UnknownOpcode` for an opcode that is not a request;
    /// `UndefinedFlags` for a flag bit the opcode does not define;
    /// structural violations (queue name syntax, batch counts, dedup key and
    /// attribute limits, token length) and malformed or trailing bytes.
    /// [`DecodeError::code`] gives the error reply's code.
    pub fn decode(opcode: u8, frame_flags: u8, payload: Bytes) -> Result<Request, DecodeError> {
        let undefined = frame_flags & !flags::defined(opcode);
        if undefined != 0 && opcode::REQUESTS.contains(&opcode) {
            return Err(DecodeError::UndefinedFlags {
                opcode,
                flags: frame_flags,
                undefined,
            });
        }
        let mut r = Reader::new(payload);
        let request = match opcode {
            opcode::HELLO => decode_hello(&mut r)?,
            opcode::PING => Request::Ping {
                nonce: r.u64("nonce")?,
            },
            opcode::CREATE_QUEUE => Request::CreateQueue(decode_attributes_request(&mut r)?),
            opcode::DELETE_QUEUE => Request::DeleteQueue {
                queue: QueueName::decode(&mut r, "queue")?,
            },
            opcode::LIST_QUEUES => Request::ListQueues {
                prefix: decode_prefix(&mut r, "prefix")?,
                after: if frame_flags & flags::LIST_QUEUES_PAGED != 0 {
                    Some(decode_prefix(&mut r, "after")?)
                } else {
                    None
                },
            },
            opcode::GET_QUEUE => Request::GetQueue {
                queue: QueueName::decode(&mut r, "queue")?,
            },
            opcode::SET_QUEUE => Request::SetQueue(decode_attributes_request(&mut r)?),
            opcode::PURGE_QUEUE => Request::PurgeQueue {
                queue: QueueName::decode(&mut r, "queue")?,
            },
            opcode::SEND => decode_send(&mut r)?,
            opcode::RECEIVE => decode_receive(&mut r, frame_flags)?,
            opcode::DELETE => decode_delete(&mut r)?,
            opcode::CHANGE_VISIBILITY => decode_change_visibility(&mut r)?,
            opcode::REDRIVE => Request::Redrive {
                queue: QueueName::decode(&mut r, "queue")?,
                max_messages: r.u32("max_messages")?,
                to: if frame_flags & flags::REDRIVE_TO != 0 {
                    Some(QueueName::decode(&mut r, "to")?)
                } else {
                    None
                },
            },
            opcode::PEEK => {
                let queue = QueueName::decode(&mut r, "queue")?;
                let max = r.batch_count("max_messages", BATCH_ENTRIES_MAX)?;
                Request::Peek {
                    queue,
                    max_messages: max,
                }
            }
            opcode::SERVER_STATS => Request::ServerStats,
            opcode::ADVANCE_CLOCK => decode_advance_clock(&mut r)?,
            other => return Err(DecodeError::UnknownOpcode(other)),
        };
        r.finish()?;
        Ok(request)
    }
}

fn decode_hello(r: &mut Reader) -> Result<Request, DecodeError> {
    let version = r.u16("version")?;
    let len_offset = r.offset();
    let len = usize::from(r.u16("token_len")?);
    if len > AUTH_TOKEN_BYTES_MAX {
        return Err(DecodeError::TooLong {
            offset: len_offset,
            field: "token",
            len,
            max: AUTH_TOKEN_BYTES_MAX,
        });
    }
    let token = r.bytes(len, "token")?;
    // Version 1 ends here; version 2 (and the layout a server of this crate
    // assumes for any later one, which it refuses before decoding) adds the
    // session timeout.
    let session_timeout_ms = if version >= 2 {
        r.u32("session_timeout_ms")?
    } else {
        0
    };
    Ok(Request::Hello(HelloRequest {
        version,
        token,
        session_timeout_ms,
    }))
}

#[inline]
fn decode_send(r: &mut Reader) -> Result<Request, DecodeError> {
    let queue = QueueName::decode(r, "queue")?;
    let count = r.batch_count("entry count", BATCH_ENTRIES_MAX)?;
    let entries = SendBatch::decode(r, count)?;
    Ok(Request::Send(SendRequest { queue, entries }))
}

#[inline]
fn decode_receive(r: &mut Reader, frame_flags: u8) -> Result<Request, DecodeError> {
    let queue = QueueName::decode(r, "queue")?;
    let max = r.batch_count("max_messages", BATCH_ENTRIES_MAX)?;
    let visibility_timeout_ms = r.u32("visibility_timeout_ms")?;
    let wait_ms = r.u32("wait_ms")?;
    Ok(Request::Receive(ReceiveRequest {
        queue,
        max_messages: max,
        visibility_timeout_ms: (visibility_timeout_ms != USE_QUEUE_DEFAULT)
            .then_some(visibility_timeout_ms),
        wait_ms: (wait_ms != USE_QUEUE_DEFAULT).then_some(wait_ms),
        bind_leases: frame_flags & flags::RECEIVE_BIND_LEASES != 0,
        with_source: frame_flags & flags::RECEIVE_WITH_SOURCE != 0,
    }))
}

#[inline]
fn decode_delete(r: &mut Reader) -> Result<Request, DecodeError> {
    let queue = QueueName::decode(r, "queue")?;
    let count = r.batch_count("receipt count", BATCH_ENTRIES_MAX)?;
    let mut receipts = Vec::with_capacity(capacity_for(count.into(), r.remaining(), RECEIPT_BYTES));
    for _ in 0..count {
        receipts.push(Receipt::from_bytes(&r.array("receipt")?));
    }
    Ok(Request::Delete(DeleteRequest { queue, receipts }))
}

fn decode_change_visibility(r: &mut Reader) -> Result<Request, DecodeError> {
    let queue = QueueName::decode(r, "queue")?;
    let count = r.batch_count("entry count", BATCH_ENTRIES_MAX)?;
    let mut entries = Vec::with_capacity(capacity_for(
        count.into(),
        r.remaining(),
        VISIBILITY_CHANGE_BYTES,
    ));
    for _ in 0..count {
        entries.push(VisibilityChange {
            receipt: Receipt::from_bytes(&r.array("receipt")?),
            visibility_timeout_ms: r.u32("visibility_timeout_ms")?,
        });
    }
    Ok(Request::ChangeVisibility(ChangeVisibilityRequest {
        queue,
        entries,
    }))
}

fn decode_advance_clock(r: &mut Reader) -> Result<Request, DecodeError> {
    let offset = r.offset();
    let by_ms = r.u64("by_ms")?;
    if by_ms > ADVANCE_CLOCK_MS_MAX {
        return Err(DecodeError::InvalidArgument {
            offset,
            field: "by_ms",
            reason: "above 31,622,400,000 ms (366 days)",
        });
    }
    Ok(Request::AdvanceClock { by_ms })
}

fn decode_attributes_request(r: &mut Reader) -> Result<QueueAttributesRequest, DecodeError> {
    Ok(QueueAttributesRequest {
        queue: QueueName::decode(r, "queue")?,
        attributes: AttributeUpdate::decode(r)?,
    })
}

/// A queue name or a prefix of one (0 to 80 name characters), as
/// `LIST_QUEUES` carries its prefix and its page's start.
fn decode_prefix(r: &mut Reader, field: &'static str) -> Result<String, DecodeError> {
    let len = r.u8(field)?;
    let offset = r.offset();
    let bytes = r.bytes(len.into(), field)?;
    let err = DecodeError::InvalidQueueName { offset, field };
    if bytes.len() > crate::limits::QUEUE_NAME_BYTES_MAX || !bytes.iter().all(|&c| is_name_byte(c))
    {
        return Err(err);
    }
    // Name characters are ASCII, so this conversion succeeds.
    core::str::from_utf8(&bytes)
        .map(str::to_owned)
        .map_err(|_| err)
}

/// The protocol version of a HELLO payload: its first two bytes in every
/// version of the protocol, so a server can answer `UnsupportedVersion` to a
/// HELLO whose rest it cannot parse.
#[must_use]
pub fn hello_version(payload: &[u8]) -> Option<u16> {
    payload.first_chunk::<2>().map(|b| u16::from_le_bytes(*b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn decode(op: u8, payload: &[u8]) -> Result<Request, DecodeError> {
        Request::decode(op, 0, Bytes::copy_from_slice(payload))
    }

    #[test]
    fn batch_limits_map_to_codes() {
        let mut p = vec![1, b'q'];
        p.extend_from_slice(&1025u16.to_le_bytes());
        assert_eq!(
            decode(opcode::SEND, &p).unwrap_err().code(),
            ErrorCode::BatchTooLarge
        );
        assert_eq!(
            decode(opcode::DELETE, &p).unwrap_err().code(),
            ErrorCode::BatchTooLarge
        );
        assert_eq!(
            decode(opcode::PEEK, &p).unwrap_err().code(),
            ErrorCode::BatchTooLarge
        );
        let empty = [1, b'q', 0, 0];
        assert_eq!(
            decode(opcode::SEND, &empty).unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            decode(opcode::CHANGE_VISIBILITY, &empty)
                .unwrap_err()
                .code(),
            ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn a_send_written_from_views_is_the_send_request_encoded() {
        let queue = QueueName::new("orders").unwrap();
        let mut entries: Vec<SendEntry> = (0..40u8)
            .map(|i| SendEntry::new(vec![i; usize::from(i) * 5]))
            .collect();
        entries[3].delay = Some(crate::millis::Millis::new(1_500));
        entries[7].dedup_key = Some(Bytes::from_static(b"order-7"));
        entries[9].attributes =
            crate::message::MessageAttributes::from_pairs([("trace", "abc")]).unwrap();
        let views: Vec<_> = entries.iter().map(SendEntry::as_view).collect();
        let request = Request::Send(SendRequest::new(queue.clone(), &entries).unwrap());
        // Written after other bytes, as into a write buffer that holds frames.
        let mut expected = BytesMut::from(&b"earlier"[..]);
        request.encode(77, &mut expected).unwrap();
        let mut got = BytesMut::from(&b"earlier"[..]);
        SendRequest::encode_views(77, &queue, &views, &mut got).unwrap();
        assert_eq!(got, expected);
        // And it decodes to the same request.
        let mut frames = crate::frame::FrameDecoder::new(1 << 20);
        let mut read = got.split_off(b"earlier".len());
        let frame = frames.decode(&mut read).unwrap().unwrap();
        assert_eq!(frame.request_id, 77);
        let decoded = Request::decode(frame.opcode, frame.flags, frame.payload).unwrap();
        assert_eq!(decoded, request);
    }

    #[test]
    fn a_send_of_views_that_cannot_be_written_leaves_the_buffer_as_it_was() {
        let queue = QueueName::new("q").unwrap();
        let entry = SendEntry::new(Bytes::new());
        let too_many = vec![entry.as_view(); usize::from(u16::MAX) + 1];
        let mut buf = BytesMut::from(&b"earlier"[..]);
        let err = SendRequest::encode_views(1, &queue, &too_many, &mut buf).unwrap_err();
        assert!(
            matches!(err, EncodeError::TooLong { len: 65_536, .. }),
            "{err:?}"
        );
        assert_eq!(&buf[..], b"earlier");
        let long_key = SendEntry {
            dedup_key: Some(Bytes::from(vec![b'k'; 200])),
            ..SendEntry::new(Bytes::from_static(b"body"))
        };
        let views = [entry.as_view(), long_key.as_view()];
        let err = SendRequest::encode_views(1, &queue, &views, &mut buf).unwrap_err();
        assert!(
            matches!(
                err,
                EncodeError::TooLong {
                    field: "dedup key",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(&buf[..], b"earlier");
    }

    #[test]
    fn forged_counts_do_not_allocate_up_front() {
        // 1,024 entries declared, none present: fails as truncated.
        let mut p = vec![1, b'q'];
        p.extend_from_slice(&1024u16.to_le_bytes());
        let err = decode(opcode::SEND, &p).unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { offset: 4, .. }),
            "{err}"
        );
    }

    #[test]
    fn structural_limits_are_invalid_arguments() {
        // dedup key of 129 bytes
        let mut p = vec![1, b'q', 1, 0];
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&[129, 0]);
        p.extend_from_slice(&[b'k'; 129]);
        let err = decode(opcode::SEND, &p).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("dedup key"), "{err}");
        let mut hello = vec![1, 0];
        hello.extend_from_slice(&1025u16.to_le_bytes());
        assert_eq!(
            decode(opcode::HELLO, &hello).unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            decode(opcode::LIST_QUEUES, b"\x02a/").unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
        let err = decode(opcode::DELETE_QUEUE, b"\x03a b").unwrap_err();
        assert_eq!(
            err.to_string(),
            "queue at byte 1 is not a valid queue name (1 to 80 of [A-Za-z0-9_.-], at most one {tag})"
        );
    }

    #[test]
    fn unknown_opcodes_and_trailing_bytes() {
        assert_eq!(
            decode(0x03, &[]).unwrap_err(),
            DecodeError::UnknownOpcode(0x03)
        );
        assert_eq!(
            decode(0x82, &[]).unwrap_err().code(),
            ErrorCode::UnknownOperation
        );
        assert_eq!(
            decode(opcode::SERVER_STATS, &[0]).unwrap_err(),
            DecodeError::TrailingBytes {
                offset: 0,
                count: 1
            }
        );
        assert_eq!(
            decode(opcode::LIST_QUEUES, &[0]),
            Ok(Request::ListQueues {
                prefix: String::new(),
                after: None,
            })
        );
        // A page: the flag, then the name it starts after.
        assert_eq!(
            Request::decode(
                opcode::LIST_QUEUES,
                flags::LIST_QUEUES_PAGED,
                Bytes::from_static(b"\x01o\x02ob")
            ),
            Ok(Request::ListQueues {
                prefix: "o".into(),
                after: Some("ob".into()),
            })
        );
        assert!(
            Request::decode(
                opcode::LIST_QUEUES,
                flags::LIST_QUEUES_PAGED,
                Bytes::from_static(b"\x01o")
            )
            .is_err()
        );
    }

    #[test]
    fn encode_is_exact_and_restores_the_buffer_on_error() {
        let req = Request::ListQueues {
            prefix: "x".repeat(300),
            after: None,
        };
        let mut buf = BytesMut::from(&b"keep"[..]);
        assert!(matches!(
            req.encode(1, &mut buf),
            Err(EncodeError::TooLong {
                field: "prefix",
                ..
            })
        ));
        assert_eq!(&buf[..], b"keep");
        let req = Request::Receive(ReceiveRequest {
            queue: QueueName::from_static("q"),
            max_messages: 10,
            visibility_timeout_ms: None,
            wait_ms: Some(5),
            bind_leases: true,
            with_source: false,
        });
        req.encode(7, &mut buf).unwrap();
        assert_eq!(buf.len(), 4 + req.encoded_len());
    }

    #[test]
    fn a_receive_binds_its_leases_by_a_header_flag() {
        let mut p = vec![1, b'q'];
        p.extend_from_slice(&3u16.to_le_bytes());
        p.extend_from_slice(&USE_QUEUE_DEFAULT.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        let payload = Bytes::from(p);
        let bound = Request::decode(opcode::RECEIVE, flags::RECEIVE_BIND_LEASES, payload.clone());
        let Ok(Request::Receive(r)) = &bound else {
            panic!("{bound:?}")
        };
        assert!(r.bind_leases);
        assert_eq!(bound.as_ref().unwrap().flags(), flags::RECEIVE_BIND_LEASES);
        let Ok(Request::Receive(r)) = Request::decode(opcode::RECEIVE, 0, payload.clone()) else {
            panic!()
        };
        assert!(!r.bind_leases && !r.with_source);
        let both = flags::RECEIVE_BIND_LEASES | flags::RECEIVE_WITH_SOURCE;
        let Ok(Request::Receive(r)) = Request::decode(opcode::RECEIVE, both, payload.clone())
        else {
            panic!()
        };
        assert!(r.bind_leases && r.with_source);
        assert_eq!(Request::Receive(r).flags(), both);
        // Any other bit, on RECEIVE or on a request that defines none, is
        // refused as Malformed.
        for (op, f, body) in [
            (opcode::RECEIVE, 0x04, payload.clone()),
            (opcode::RECEIVE, 0x81, payload),
            (
                opcode::PING,
                flags::RECEIVE_BIND_LEASES,
                Bytes::from(vec![0; 8]),
            ),
            (opcode::SERVER_STATS, 0x40, Bytes::new()),
        ] {
            let err = Request::decode(op, f, body).unwrap_err();
            assert!(matches!(err, DecodeError::UndefinedFlags { .. }), "{err}");
            assert_eq!(err.code(), ErrorCode::Malformed);
        }
        // An unknown opcode stays UnknownOperation, whatever its flags.
        assert_eq!(
            Request::decode(0x7e, 0xff, Bytes::new()).unwrap_err(),
            DecodeError::UnknownOpcode(0x7e)
        );
    }

    #[test]
    fn hello_layouts_by_version() {
        // Version 1: version, token; no session timeout.
        let v1 = decode(opcode::HELLO, &[1, 0, 2, 0, b'a', b'b']).unwrap();
        let Request::Hello(h) = &v1 else { panic!() };
        assert_eq!(
            (h.version, &h.token[..], h.session_timeout_ms),
            (1, &b"ab"[..], 0)
        );
        assert_eq!(v1.payload_len(), 6);
        assert_eq!(
            decode(opcode::HELLO, &[1, 0, 0, 0, 0x10, 0x27, 0, 0]).unwrap_err(),
            DecodeError::TrailingBytes {
                offset: 4,
                count: 4
            }
        );
        // Version 2: the session timeout follows the token.
        let v2 = decode(opcode::HELLO, &[2, 0, 0, 0, 0x10, 0x27, 0, 0]).unwrap();
        let Request::Hello(h) = &v2 else { panic!() };
        assert_eq!((h.version, h.session_timeout_ms), (2, 10_000));
        let mut out = BytesMut::new();
        v2.encode(1, &mut out).unwrap();
        assert_eq!(&out[10..], &[2, 0, 0, 0, 0x10, 0x27, 0, 0]);
        for short in [&[2u8, 0, 0, 0][..], &[2, 0, 0, 0, 0x10, 0x27, 0]] {
            let err = decode(opcode::HELLO, short).unwrap_err();
            assert!(
                matches!(
                    err,
                    DecodeError::Truncated {
                        field: "session_timeout_ms",
                        ..
                    }
                ),
                "{err}"
            );
            assert_eq!(err.code(), ErrorCode::Malformed);
        }
        assert_eq!(
            decode(opcode::HELLO, &[2, 0, 0, 0, 0, 0, 0, 0, 9]).unwrap_err(),
            DecodeError::TrailingBytes {
                offset: 8,
                count: 1
            }
        );
    }

    #[test]
    fn advance_clock_is_bounded() {
        let max = ADVANCE_CLOCK_MS_MAX.to_le_bytes();
        assert_eq!(
            decode(opcode::ADVANCE_CLOCK, &max),
            Ok(Request::AdvanceClock {
                by_ms: ADVANCE_CLOCK_MS_MAX
            })
        );
        let over = (ADVANCE_CLOCK_MS_MAX + 1).to_le_bytes();
        let err = decode(opcode::ADVANCE_CLOCK, &over).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("by_ms"), "{err}");
        assert_eq!(
            decode(opcode::ADVANCE_CLOCK, &[1, 2, 3])
                .unwrap_err()
                .code(),
            ErrorCode::Malformed
        );
        assert_eq!(
            decode(opcode::ADVANCE_CLOCK, &[0; 9]).unwrap_err(),
            DecodeError::TrailingBytes {
                offset: 8,
                count: 1
            }
        );
    }

    #[test]
    fn hello_version_reads_the_first_two_bytes() {
        assert_eq!(hello_version(&[2, 0, 0xff]), Some(2));
        assert_eq!(hello_version(&[2]), None);
    }
}
