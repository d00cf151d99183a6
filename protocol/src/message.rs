//! The per-message parts of SEND, RECEIVE and PEEK: send entries, received
//! and peeked messages (their attributes are in `message_attributes.rs`).
//!
//! The two hot batches, a SEND's entries and a RECEIVE reply's messages, are
//! held as one validated wire-form slice of the frame ([`SendBatch`],
//! [`ReceivedBatch`]) and read through borrowed views ([`SendEntryRef`],
//! [`ReceivedMessageRef`]). Decoding checks every entry once and then costs no
//! allocation and no reference-count traffic per message, whatever the batch
//! size: a broker copies each body straight out of the receive buffer into
//! its own storage. Owned forms ([`SendEntry`], [`ReceivedMessage`]) are there
//! for building batches and for code that wants values.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{Batch, BatchEntry, BatchIter, share_slice};
use crate::codec::{DecodeError, EncodeError, Reader, SliceReader, len_u8, len_u32};
use crate::group_id::{GROUP_ID_BYTES_MAX, MessageGroupId, is_valid_group_id};
use crate::limits::{RECEIVE_ENTRY_OVERHEAD_BYTES, SEND_ENTRY_OVERHEAD_BYTES};
use crate::receipt::{MessageId, RECEIPT_BYTES, Receipt};

pub use crate::message_attributes::{AttributeIter, AttributesRef, BytePairs, MessageAttributes};
use crate::message_attributes::{parse_attributes, read_attributes, wire_len};

/// Wire value of a delay, visibility timeout or wait that means "the queue's
/// default".
pub const USE_QUEUE_DEFAULT: u32 = u32::MAX;
/// Largest first-received delta of a received message; larger deltas saturate
/// here.
pub const FIRST_RECEIVED_DELTA_MS_MAX: u32 = u32::MAX - 1;
/// Wire value of a peeked message's first-received delta when it was never
/// received.
pub const NEVER_RECEIVED: u32 = u32::MAX;

/// The fixed part of a SEND entry, field by field (see PROTOCOL.md).
const SEND_ENTRY_HEAD: [(&str, usize); 4] = [
    ("body_len", 4),
    ("delay_ms", 4),
    ("dedup_len", 1),
    ("attr_count", 1),
];
/// The fixed part of a received message, field by field.
const RECEIVED_MESSAGE_HEAD: [(&str, usize); 7] = [
    ("id", 16),
    ("receipt", RECEIPT_BYTES),
    ("receive_count", 4),
    ("sent_at_ms", 8),
    ("first_received_delta_ms", 4),
    ("body_len", 4),
    ("attr_count", 1),
];

/// Bit 7 of a SEND entry's or a received message's `attr_count` byte: a
/// group id follows (protocol version 5). The count itself is at most 16,
/// so the bit was never set before.
pub const GROUP_FLAG: u8 = 0x80;

/// A group id at the reader's position: its length (u8), then 1 to 128 of
/// `!` to `~`. Its bytes, checked (so they are ASCII).
pub(crate) fn parse_group_bytes<'a>(r: &mut SliceReader<'a>) -> Result<&'a [u8], DecodeError> {
    let len = r.u8("group id length")?;
    let offset = r.offset();
    let g = r.take(len.into(), "group id")?;
    if !is_valid_group_id(g) {
        return Err(DecodeError::InvalidValue {
            offset,
            field: "group id",
            reason: "a group id is 1 to 128 printable ASCII characters ('!' to '~')",
        });
    }
    Ok(g)
}

/// [`parse_group_bytes`] as a string.
fn parse_group<'a>(r: &mut SliceReader<'a>) -> Result<&'a str, DecodeError> {
    // Checked ASCII by the parse.
    Ok(core::str::from_utf8(parse_group_bytes(r)?).unwrap_or_default())
}

/// A group id's wire form: its length byte and its bytes, or `TooLong` when
/// it is not a valid id (so every frame built is one a parser accepts).
/// Out of line: most messages have no group, and their encoding stays lean.
#[cold]
#[inline(never)]
pub(crate) fn group_wire(g: &[u8]) -> Result<(u8, &[u8]), EncodeError> {
    let field = "group id (1 to 128 of '!' to '~')";
    if !is_valid_group_id(g) {
        return Err(EncodeError::TooLong {
            field,
            len: g.len(),
            max: GROUP_ID_BYTES_MAX,
        });
    }
    Ok((len_u8(g.len(), field)?, g))
}

/// A received message's fixed part when the message has a group: the flag
/// on its `attr_count` (the last byte), then the group id, `g`, valid
/// (checked by the caller, so at most 128 bytes). Out of line, like
/// [`group_wire`].
#[cold]
#[inline(never)]
fn put_grouped_head(buf: &mut BytesMut, head: &mut [u8; RECEIVE_ENTRY_OVERHEAD_BYTES], g: &[u8]) {
    debug_assert!(is_valid_group_id(g));
    head[RECEIVE_ENTRY_OVERHEAD_BYTES - 1] |= GROUP_FLAG;
    buf.put_slice(head);
    // A valid id has at most 128 bytes.
    buf.put_u8(u8::try_from(g.len()).unwrap_or(u8::MAX));
    buf.put_slice(g);
}

/// [`parse_group_bytes`] on bytes it accepted before.
#[inline]
pub(crate) fn read_group_bytes<'a>(r: &mut SliceReader<'a>) -> Option<&'a [u8]> {
    let [len] = r.next_array::<1>()?;
    r.next_slice(len.into())
}

/// [`parse_group`] on bytes it accepted before.
#[inline]
fn read_group<'a>(r: &mut SliceReader<'a>) -> Option<&'a str> {
    core::str::from_utf8(read_group_bytes(r)?).ok()
}

const fn head_bytes(fields: &[(&str, usize)]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < fields.len() {
        n += fields[i].1;
        i += 1;
    }
    n
}

const _: () = assert!(head_bytes(&SEND_ENTRY_HEAD) == SEND_ENTRY_OVERHEAD_BYTES);
const _: () = assert!(head_bytes(&RECEIVED_MESSAGE_HEAD) == RECEIVE_ENTRY_OVERHEAD_BYTES);

mod send;

pub use self::send::{SendBatch, SendBatchIter, SendEntry, SendEntryRef};

/// The result of one accepted SEND entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SendOutcome {
    /// The message's id; for a duplicate, the id of the message first sent
    /// with that dedup key.
    pub id: MessageId,
    /// Whether the entry was a duplicate and enqueued nothing.
    pub duplicate: bool,
}

/// One visibility change of a `CHANGE_VISIBILITY` batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VisibilityChange {
    /// The delivery to change.
    pub receipt: Receipt,
    /// The lease ends this long from now; 0 releases the message.
    pub visibility_timeout_ms: u32,
}

/// Bytes one received message takes in a RECEIVE reply: 63 fixed bytes, the
/// attributes' wire form ([`MessageAttributes::wire_bytes`]) and the body. A
/// broker adds these up (after [`crate::reply::RECEIVE_REPLY_FIXED_BYTES`])
/// to stop filling a reply before it would exceed the frame limit; see also
/// [`crate::reply::ReceiveReplyWriter`].
#[must_use]
pub const fn received_message_encoded_len(
    attributes_wire_bytes: usize,
    body_bytes: usize,
) -> usize {
    RECEIVE_ENTRY_OVERHEAD_BYTES + attributes_wire_bytes + body_bytes
}

/// The saturated first-received delta of a received message:
/// `first_received_at - sent_at`, 0 when the clock went backwards, at most
/// [`FIRST_RECEIVED_DELTA_MS_MAX`].
#[must_use]
pub fn first_received_delta_ms(sent_at_ms: u64, first_received_at_ms: u64) -> u32 {
    let delta = first_received_at_ms.saturating_sub(sent_at_ms);
    u32::try_from(delta).map_or(FIRST_RECEIVED_DELTA_MS_MAX, |d| {
        d.min(FIRST_RECEIVED_DELTA_MS_MAX)
    })
}

/// The attribute that names a dead-lettered message's source queue in a
/// RECEIVE asked for it ([`crate::frame::flags::RECEIVE_WITH_SOURCE`]). Its
/// `:` keeps it apart from SQS's attribute names, which cannot hold one. A
/// message that already has an attribute of that name, or whose attributes
/// have no room left for it, is delivered without it.
pub const SOURCE_ATTRIBUTE: &str = "sluice:source";

/// A message delivered by RECEIVE, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The message id.
    pub id: MessageId,
    /// The receipt of this delivery; its delivery number is the message's.
    pub receipt: Receipt,
    /// Deliveries since the message was sent or last redriven, this one
    /// included.
    pub receive_count: u32,
    /// When the message was first sent (Unix ms).
    pub sent_at_ms: u64,
    /// Milliseconds from the send to the first delivery, saturating at
    /// [`FIRST_RECEIVED_DELTA_MS_MAX`] (the encoder clamps larger values).
    /// See [`first_received_delta_ms`].
    pub first_received_delta_ms: u32,
    /// Attributes.
    pub attributes: MessageAttributes,
    /// The body.
    pub body: Bytes,
    /// Its message group, on a FIFO queue (protocol version 5).
    pub group: Option<MessageGroupId>,
}

impl ReceivedMessage {
    /// A borrowed view.
    #[must_use]
    pub fn as_view(&self) -> ReceivedMessageRef<'_> {
        ReceivedMessageRef {
            group: self.group.as_ref().map(MessageGroupId::as_str),
            ..self.view_without_group()
        }
    }

    fn view_without_group(&self) -> ReceivedMessageRef<'_> {
        ReceivedMessageRef {
            id: self.id,
            receipt: self.receipt,
            receive_count: self.receive_count,
            sent_at_ms: self.sent_at_ms,
            first_received_delta_ms: self.first_received_delta_ms,
            attributes: self.attributes.as_view(),
            body: &self.body,
            group: None,
        }
    }

    /// Encodes the message, with its group when `with_group` (a version 5
    /// reply) and it has one. Its group id was checked when it was made,
    /// so it goes out as it is, unchecked again and never converted.
    pub(crate) fn encode(&self, buf: &mut BytesMut, with_group: bool) -> Result<(), EncodeError> {
        let group = self.group.as_ref().filter(|_| with_group);
        self.view_without_group()
            .encode_with(buf, group.map(|g| &g.as_bytes()[..]))
    }

    /// The message's delivery number (its fencing token).
    #[must_use]
    pub fn delivery(&self) -> u64 {
        self.receipt.delivery
    }

    /// When the message was first delivered (Unix ms).
    #[must_use]
    pub fn first_received_at_ms(&self) -> u64 {
        self.as_view().first_received_at_ms()
    }

    /// Bytes on the wire; see [`received_message_encoded_len`].
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        received_message_encoded_len(self.attributes.wire_bytes().len(), self.body.len())
            + self.group.as_ref().map_or(0, |g| 1 + g.as_bytes().len())
    }
}

/// A message delivered by RECEIVE, borrowed from the frame (when decoded) or
/// from a broker's storage (when encoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceivedMessageRef<'a> {
    /// The message id.
    pub id: MessageId,
    /// The receipt of this delivery.
    pub receipt: Receipt,
    /// Deliveries since the message was sent or last redriven, this one
    /// included.
    pub receive_count: u32,
    /// When the message was first sent (Unix ms).
    pub sent_at_ms: u64,
    /// Milliseconds from the send to the first delivery (clamped to
    /// [`FIRST_RECEIVED_DELTA_MS_MAX`] when encoded).
    pub first_received_delta_ms: u32,
    /// Attributes.
    pub attributes: AttributesRef<'a>,
    /// The body.
    pub body: &'a [u8],
    /// Its message group (1 to 128 of `!` to `~`), if any.
    pub group: Option<&'a str>,
}

impl ReceivedMessageRef<'_> {
    /// The message's delivery number (its fencing token).
    #[must_use]
    pub fn delivery(&self) -> u64 {
        self.receipt.delivery
    }

    /// When the message was first delivered (Unix ms).
    #[must_use]
    pub fn first_received_at_ms(&self) -> u64 {
        self.sent_at_ms
            .saturating_add(self.first_received_delta_ms.into())
    }

    /// Bytes on the wire; see [`received_message_encoded_len`].
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        received_message_encoded_len(self.attributes.wire_bytes().len(), self.body.len())
            + self.group.map_or(0, |g| 1 + g.len())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match self.group {
            None => self.encode_with(buf, None),
            Some(g) => self.encode_with(buf, Some(group_wire(g.as_bytes())?.1)),
        }
    }

    /// Encodes the message with `group`, a valid group id's bytes (checked
    /// by the caller), in place of its own.
    fn encode_with(&self, buf: &mut BytesMut, group: Option<&[u8]>) -> Result<(), EncodeError> {
        let body_len = len_u32(self.body.len(), "body")?;
        // The fixed part is assembled on the stack and written at once: one
        // capacity check instead of eight.
        let mut head = [0u8; RECEIVE_ENTRY_OVERHEAD_BYTES];
        head[0..16].copy_from_slice(&self.id.to_bytes());
        head[16..42].copy_from_slice(&self.receipt.to_bytes());
        head[42..46].copy_from_slice(&self.receive_count.to_le_bytes());
        head[46..54].copy_from_slice(&self.sent_at_ms.to_le_bytes());
        let delta = self
            .first_received_delta_ms
            .min(FIRST_RECEIVED_DELTA_MS_MAX);
        head[54..58].copy_from_slice(&delta.to_le_bytes());
        head[58..62].copy_from_slice(&body_len.to_le_bytes());
        head[62] = self.attributes.count();
        match group {
            None => buf.put_slice(&head),
            Some(g) => put_grouped_head(buf, &mut head, g),
        }
        buf.put_slice(self.attributes.wire_bytes());
        buf.put_slice(self.body);
        Ok(())
    }

    /// An owned copy.
    #[must_use]
    pub fn to_owned(&self) -> ReceivedMessage {
        ReceivedMessage {
            id: self.id,
            receipt: self.receipt,
            receive_count: self.receive_count,
            sent_at_ms: self.sent_at_ms,
            first_received_delta_ms: self.first_received_delta_ms,
            attributes: self.attributes.to_owned(),
            body: Bytes::copy_from_slice(self.body),
            group: self.group.and_then(|g| MessageGroupId::new(g).ok()),
        }
    }
}

/// The received-message layout: its one parser, used to check a RECEIVE
/// reply when it is decoded and to read its messages after.
impl BatchEntry for ReceivedMessage {
    type Ref<'a> = ReceivedMessageRef<'a>;
    const COUNT_FIELD: &'static str = "message count";

    fn parse<'a>(r: &mut SliceReader<'a>) -> Result<ReceivedMessageRef<'a>, DecodeError> {
        let at = r.offset();
        let head: [u8; RECEIVE_ENTRY_OVERHEAD_BYTES] = r.head(&RECEIVED_MESSAGE_HEAD)?;
        let mut h = SliceReader::new(&head, at);
        let id = MessageId::from_bytes(h.array("id")?);
        let receipt = Receipt::from_bytes(&h.array::<RECEIPT_BYTES>("receipt")?);
        let receive_count = h.u32("receive_count")?;
        let sent_at_ms = h.u64("sent_at_ms")?;
        let delta_offset = h.offset();
        let first_received_delta_ms = h.u32("first_received_delta_ms")?;
        if first_received_delta_ms > FIRST_RECEIVED_DELTA_MS_MAX {
            return Err(DecodeError::InvalidValue {
                offset: delta_offset,
                field: "first_received_delta_ms",
                reason: "0xFFFFFFFF (never received) in a received message",
            });
        }
        let body_len = h.u32("body_len")?;
        let attr_offset = h.offset();
        let attr_count = h.u8("attr_count")?;
        let group = if attr_count & GROUP_FLAG == 0 {
            None
        } else {
            Some(parse_group(r)?)
        };
        let attr_count = attr_count & !GROUP_FLAG;
        let attributes = if attr_count == 0 {
            AttributesRef::default()
        } else {
            parse_attributes(r, attr_count, attr_offset)?
        };
        let body = r.take(wire_len(body_len), "body")?;
        Ok(ReceivedMessageRef {
            id,
            receipt,
            receive_count,
            sent_at_ms,
            first_received_delta_ms,
            attributes,
            body,
            group,
        })
    }

    #[inline]
    fn read<'a>(r: &mut SliceReader<'a>) -> Option<ReceivedMessageRef<'a>> {
        // The same layout as `parse`, on bytes `parse` accepted: no limit is
        // checked again and no error is built, only the bounds (which the
        // compiler folds for the fixed part).
        let head = r.next_array::<RECEIVE_ENTRY_OVERHEAD_BYTES>()?;
        let mut h = SliceReader::new(&head, 0);
        let id = MessageId::from_bytes(h.next_array()?);
        let receipt = Receipt::from_bytes(&h.next_array::<RECEIPT_BYTES>()?);
        let receive_count = u32::from_le_bytes(h.next_array()?);
        let sent_at_ms = u64::from_le_bytes(h.next_array()?);
        let first_received_delta_ms = u32::from_le_bytes(h.next_array()?);
        let body_len = u32::from_le_bytes(h.next_array()?);
        let [attr_count] = h.next_array()?;
        let group = if attr_count & GROUP_FLAG == 0 {
            None
        } else {
            Some(read_group(r)?)
        };
        let attr_count = attr_count & !GROUP_FLAG;
        let attributes = if attr_count == 0 {
            AttributesRef::default()
        } else {
            read_attributes(r, attr_count)?
        };
        let body = r.next_slice(wire_len(body_len))?;
        Some(ReceivedMessageRef {
            id,
            receipt,
            receive_count,
            sent_at_ms,
            first_received_delta_ms,
            attributes,
            body,
            group,
        })
    }

    fn encoded_len(message: &ReceivedMessageRef<'_>) -> usize {
        message.encoded_len()
    }

    fn encode(message: &ReceivedMessageRef<'_>, buf: &mut BytesMut) -> Result<(), EncodeError> {
        message.encode(buf)
    }

    fn share(buf: &Bytes, m: ReceivedMessageRef<'_>) -> ReceivedMessage {
        ReceivedMessage {
            id: m.id,
            receipt: m.receipt,
            receive_count: m.receive_count,
            sent_at_ms: m.sent_at_ms,
            first_received_delta_ms: m.first_received_delta_ms,
            attributes: MessageAttributes {
                count: m.attributes.count(),
                raw: share_slice(buf, m.attributes.wire_bytes()),
            },
            body: share_slice(buf, m.body),
            // The view's id was checked when it was made.
            group: m
                .group
                .and_then(|g| MessageGroupId::from_bytes(share_slice(buf, g.as_bytes())).ok()),
        }
    }
}

/// The messages of a RECEIVE reply, in wire form: one slice of the frame,
/// checked when decoded. Iterate with [`Batch::iter`]; build with
/// [`ReceivedBatch::from_messages`] (a broker writes replies directly with
/// [`crate::reply::ReceiveReplyWriter`]).
pub type ReceivedBatch = Batch<ReceivedMessage>;

/// Iterator over a [`ReceivedBatch`].
pub type ReceivedBatchIter<'a> = BatchIter<'a, ReceivedMessage>;

impl Batch<ReceivedMessage> {
    /// A batch holding `messages`, in order (their bytes are copied once).
    ///
    /// # Errors
    /// `TooLong` for more than 65,535 messages or a body above 4 GiB.
    pub fn from_messages<'a>(
        messages: impl IntoIterator<Item = ReceivedMessageRef<'a>>,
    ) -> Result<ReceivedBatch, EncodeError> {
        Batch::from_views(messages)
    }

    /// The messages as owned values whose bodies and attributes share this
    /// batch's buffer (no copy).
    #[must_use]
    pub fn to_messages(&self) -> Vec<ReceivedMessage> {
        self.to_owned_entries()
    }
}

/// Fixed bytes of a peeked message before its attributes and body.
pub const PEEK_ENTRY_OVERHEAD_BYTES: usize = 16 + 4 + 8 + 8 + 4 + 4 + 1;

/// A message read by PEEK, without a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeekedMessage {
    /// The message id.
    pub id: MessageId,
    /// Deliveries since the message was sent or last redriven.
    pub receive_count: u32,
    /// The message's delivery number (that of its latest delivery; 0 if never
    /// delivered).
    pub delivery: u64,
    /// When the message was first sent (Unix ms).
    pub sent_at_ms: u64,
    /// Milliseconds from the send to the first delivery (saturating at
    /// [`FIRST_RECEIVED_DELTA_MS_MAX`]); `None` if never received.
    pub first_received_delta_ms: Option<u32>,
    /// Attributes.
    pub attributes: MessageAttributes,
    /// The body.
    pub body: Bytes,
}

impl PeekedMessage {
    /// When the message was first delivered (Unix ms); `None` if never.
    #[must_use]
    pub fn first_received_at_ms(&self) -> Option<u64> {
        self.first_received_delta_ms
            .map(|d| self.sent_at_ms.saturating_add(d.into()))
    }

    /// Bytes on the wire.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        PEEK_ENTRY_OVERHEAD_BYTES + self.attributes.wire_bytes().len() + self.body.len()
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let body_len = len_u32(self.body.len(), "body")?;
        buf.put_slice(&self.id.to_bytes());
        buf.put_u32_le(self.receive_count);
        buf.put_u64_le(self.delivery);
        buf.put_u64_le(self.sent_at_ms);
        buf.put_u32_le(
            self.first_received_delta_ms
                .map_or(NEVER_RECEIVED, |d| d.min(FIRST_RECEIVED_DELTA_MS_MAX)),
        );
        buf.put_u32_le(body_len);
        buf.put_u8(self.attributes.count());
        buf.put_slice(self.attributes.wire_bytes());
        buf.put_slice(&self.body);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<PeekedMessage, DecodeError> {
        let id = MessageId::from_bytes(r.array("id")?);
        let receive_count = r.u32("receive_count")?;
        let delivery = r.u64("delivery")?;
        let sent_at_ms = r.u64("sent_at_ms")?;
        let delta = r.u32("first_received_delta_ms")?;
        let body_len = r.u32("body_len")?;
        let attr_offset = r.offset();
        let attr_count = r.u8("attr_count")?;
        let attributes = MessageAttributes::decode(r, attr_count, attr_offset)?;
        let body = r.bytes(wire_len(body_len), "body")?;
        Ok(PeekedMessage {
            id,
            receive_count,
            delivery,
            sent_at_ms,
            first_received_delta_ms: (delta != NEVER_RECEIVED).then_some(delta),
            attributes,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::limits::MESSAGE_ATTRIBUTES_BYTES_MAX;
    use crate::millis::Millis;

    /// The same of a received message.
    #[test]
    fn a_received_message_reads_as_it_parses_and_a_cut_one_not_at_all() {
        let message = ReceivedMessage {
            id: MessageId::from_bytes([7; 16]),
            receipt: Receipt::from_bytes(&[9; RECEIPT_BYTES]),
            receive_count: 3,
            sent_at_ms: 1_700_000_000_000,
            first_received_delta_ms: 12,
            attributes: MessageAttributes::from_pairs([("k", "v")]).unwrap(),
            body: Bytes::from_static(b"body"),
            group: None,
        };
        for m in [
            message.clone(),
            ReceivedMessage {
                attributes: MessageAttributes::default(),
                ..message
            },
        ] {
            let mut wire = BytesMut::new();
            m.as_view().encode(&mut wire).unwrap();
            let parsed = ReceivedMessage::parse(&mut SliceReader::new(&wire, 0)).unwrap();
            let mut r = SliceReader::new(&wire, 0);
            assert_eq!(ReceivedMessage::read(&mut r), Some(parsed));
            assert_eq!(r.remaining(), 0);
            for cut in 0..wire.len() {
                assert_eq!(
                    ReceivedMessage::read(&mut SliceReader::new(&wire[..cut], 0)),
                    None,
                    "cut at {cut}"
                );
            }
        }
    }

    /// The lean second-pass reader of a SEND entry gives what the parser
    /// gives on whole entries, and `None` (never a panic, never an entry) on
    /// every cut of one.
    #[test]
    fn a_delay_goes_as_whole_milliseconds_and_an_empty_key_as_none() {
        let entry = SendEntry::new("x")
            .delay(std::time::Duration::from_micros(2500))
            .dedup_key("");
        let wire = entry.as_view();
        assert_eq!(wire.delay_ms, Some(3), "rounded up");
        assert_eq!(wire.dedup_key, None, "an empty key is no key");
        assert_eq!(entry.encoded_len(), wire.encoded_len());
        assert_eq!(SendEntry::new("x").as_view().delay_ms, None);
        // Too long for the field: the longest it carries (not the "queue
        // default" marker), which the broker refuses as out of range.
        let long = SendEntry::new("x").delay(std::time::Duration::from_secs(u64::MAX));
        assert_eq!(long.as_view().delay_ms, Some(u32::MAX - 1));
        let marker = SendEntry::new("x").delay(Millis::new(u32::MAX));
        assert_eq!(marker.as_view().delay_ms, Some(u32::MAX - 1));
    }

    #[test]
    fn a_send_entry_reads_as_it_parses_and_a_cut_one_not_at_all() {
        let entries = [
            SendEntry::new("plain"),
            SendEntry {
                body: Bytes::from_static(b"with everything"),
                delay: Some(Millis::new(250)),
                dedup_key: Some(Bytes::from_static(b"key-1")),
                attributes: MessageAttributes::from_pairs([("k", "v"), ("trace", "")]).unwrap(),
                group: Some(crate::MessageGroupId::new("account-7").unwrap()),
            },
            SendEntry::new(""),
        ];
        for entry in &entries {
            let mut wire = BytesMut::new();
            entry.as_view().encode(&mut wire).unwrap();
            let parsed = SendEntry::parse(&mut SliceReader::new(&wire, 0)).unwrap();
            let mut r = SliceReader::new(&wire, 0);
            assert_eq!(SendEntry::read(&mut r), Some(parsed));
            assert_eq!(r.remaining(), 0);
            for cut in 0..wire.len() {
                let mut r = SliceReader::new(&wire[..cut], 0);
                assert_eq!(SendEntry::read(&mut r), None, "cut at {cut}");
                assert!(SendEntry::parse(&mut SliceReader::new(&wire[..cut], 0)).is_err());
            }
        }
    }

    /// Reading an entry's fixed part at once fails exactly as reading it
    /// field by field would: same field, offset and shortfall.
    #[test]
    fn a_cut_head_names_the_field_cut() {
        fn field_by_field(bytes: &[u8], fields: &[(&'static str, usize)]) -> DecodeError {
            let mut r = SliceReader::new(bytes, 7);
            for &(field, width) in fields {
                if let Err(e) = r.take(width, field) {
                    return e;
                }
            }
            unreachable!("the bytes were cut short")
        }
        let bytes = [0u8; RECEIVE_ENTRY_OVERHEAD_BYTES];
        for n in 0..SEND_ENTRY_OVERHEAD_BYTES {
            let mut r = SliceReader::new(&bytes[..n], 7);
            let got = r.head::<SEND_ENTRY_OVERHEAD_BYTES>(&SEND_ENTRY_HEAD);
            assert_eq!(
                got,
                Err(field_by_field(&bytes[..n], &SEND_ENTRY_HEAD)),
                "{n}"
            );
        }
        for n in 0..RECEIVE_ENTRY_OVERHEAD_BYTES {
            let mut r = SliceReader::new(&bytes[..n], 7);
            let got = r.head::<RECEIVE_ENTRY_OVERHEAD_BYTES>(&RECEIVED_MESSAGE_HEAD);
            assert_eq!(
                got,
                Err(field_by_field(&bytes[..n], &RECEIVED_MESSAGE_HEAD)),
                "{n}"
            );
        }
        let mut whole = SliceReader::new(&bytes, 0);
        assert!(
            whole
                .head::<SEND_ENTRY_OVERHEAD_BYTES>(&SEND_ENTRY_HEAD)
                .is_ok()
        );
        assert_eq!(whole.position(), SEND_ENTRY_OVERHEAD_BYTES);
    }

    #[test]
    fn attributes_round_trip_and_count_content() {
        let a = MessageAttributes::from_pairs([("k", "v1"), ("type", "order")]).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a.content_bytes(), 1 + 2 + 4 + 5);
        assert_eq!(a.get("type"), Some("order"));
        assert_eq!(a.get("nope"), None);
        let pairs: Vec<_> = a.iter().collect();
        assert_eq!(pairs, vec![("k", "v1"), ("type", "order")]);
        let back = MessageAttributes::from_wire(a.count(), a.wire_bytes().clone()).unwrap();
        assert_eq!(back, a);
        assert_eq!(
            AttributesRef::from_wire(a.count(), a.wire_bytes()),
            Ok(a.as_view())
        );
        assert_eq!(a.as_view().to_owned(), a);
    }

    #[test]
    fn attribute_limits_hold_both_ways() {
        let seventeen: Vec<(String, String)> =
            (0..17).map(|i| (i.to_string(), String::new())).collect();
        assert_eq!(
            MessageAttributes::from_pairs(seventeen).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let big = "x".repeat(MESSAGE_ATTRIBUTES_BYTES_MAX);
        assert!(MessageAttributes::from_pairs([("", big.as_str())]).is_ok());
        assert!(MessageAttributes::from_pairs([("k", big.as_str())]).is_err());

        // 4 KiB + 1 on the wire: two values of 2049 and 2048 bytes.
        let mut raw = BytesMut::new();
        for len in [2049u16, 2048] {
            raw.put_u16_le(0);
            raw.put_u16_le(len);
            raw.put_slice(&vec![b'a'; len.into()]);
        }
        let err = MessageAttributes::from_wire(2, raw.freeze()).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::TooLong {
                    field: "attributes",
                    ..
                }
            ),
            "{err}"
        );
        let err = MessageAttributes::from_wire(17, Bytes::new()).unwrap_err();
        assert!(matches!(
            err,
            DecodeError::TooLong {
                field: "attr_count",
                ..
            }
        ));
        let err = MessageAttributes::from_wire(1, Bytes::from_static(b"\x01\x00\xff\x00\x00"))
            .unwrap_err();
        assert!(
            matches!(err, DecodeError::InvalidUtf8 { offset: 2, .. }),
            "{err}"
        );
        assert!(AttributesRef::from_wire(1, b"\x01\x00").is_err());
    }

    #[test]
    fn deltas_saturate() {
        assert_eq!(first_received_delta_ms(10, 5), 0);
        assert_eq!(first_received_delta_ms(10, 15), 5);
        assert_eq!(
            first_received_delta_ms(0, u64::MAX),
            FIRST_RECEIVED_DELTA_MS_MAX
        );
        assert_eq!(
            first_received_delta_ms(0, u64::from(u32::MAX)),
            FIRST_RECEIVED_DELTA_MS_MAX
        );
    }

    #[test]
    fn entry_framing_matches_the_design_limits() {
        let entry = SendEntry::new(Bytes::from_static(b"body"));
        let batch = SendBatch::from_entries([&entry]).unwrap();
        assert_eq!(batch.wire_bytes().len(), SEND_ENTRY_OVERHEAD_BYTES + 4);
        assert_eq!(entry.encoded_len(), batch.wire_bytes().len());

        let msg = ReceivedMessage {
            id: MessageId(1),
            receipt: Receipt::default(),
            receive_count: 1,
            sent_at_ms: 2,
            first_received_delta_ms: 3,
            attributes: MessageAttributes::new(),
            body: Bytes::from_static(b"body"),
            group: None,
        };
        let batch = ReceivedBatch::from_messages([msg.as_view()]).unwrap();
        assert_eq!(batch.wire_bytes().len(), RECEIVE_ENTRY_OVERHEAD_BYTES + 4);
        assert_eq!(msg.encoded_len(), batch.wire_bytes().len());
    }

    #[test]
    fn batches_iterate_what_they_were_built_from_without_copying() {
        let entries = vec![
            SendEntry::new(Bytes::from_static(b"a")),
            SendEntry {
                body: Bytes::from_static(b"bb"),
                delay: Some(Millis::new(5)),
                dedup_key: Some(Bytes::from_static(b"k")),
                attributes: MessageAttributes::from_pairs([("x", "y")]).unwrap(),
                group: None,
            },
        ];
        let batch = SendBatch::from_entries(&entries).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.iter().len(), 2);
        let views: Vec<_> = batch.iter().collect();
        assert_eq!(views[1].body, b"bb");
        assert_eq!(views[1].attributes.get("x"), Some("y"));
        assert_eq!(batch.to_entries(), entries);
        let owned = batch.to_entries();
        let base = batch.wire_bytes().as_ptr_range();
        assert!(
            base.contains(&owned[1].body.as_ptr()),
            "to_entries shares the buffer"
        );

        let mut r = Reader::new(batch.wire_bytes().clone());
        assert_eq!(SendBatch::decode(&mut r, 2).as_ref(), Ok(&batch));
        let mut r = Reader::new(batch.wire_bytes().clone());
        assert!(SendBatch::decode(&mut r, 3).is_err());
    }

    #[test]
    fn a_group_id_on_the_wire_is_checked_both_ways() {
        fn parse(w: &[u8]) -> Result<SendEntryRef<'_>, DecodeError> {
            SendEntry::parse(&mut SliceReader::new(w, 0))
        }
        let grouped = SendEntry::new("b").group(MessageGroupId::new("g-1").unwrap());
        let mut wire = BytesMut::new();
        grouped.as_view().encode(&mut wire).unwrap();
        assert_eq!(wire[9], GROUP_FLAG, "no attributes, and the group flag");
        assert_eq!(&wire[10..14], b"\x03g-1");
        assert_eq!(parse(&wire).unwrap().group, Some(&b"g-1"[..]));
        // Empty, a space, a byte above '~', 129 bytes: each refused, at the id.
        let mut long = wire[..10].to_vec();
        long.push(129);
        long.extend([b'a'; 129]);
        long.push(b'b');
        for bad in [&b"\x00"[..], b"\x03g 1", b"\x03g\x7f1"] {
            let mut w = wire[..10].to_vec();
            w.extend_from_slice(bad);
            w.push(b'b');
            assert!(
                matches!(
                    parse(&w),
                    Err(DecodeError::InvalidValue {
                        field: "group id",
                        offset: 11,
                        ..
                    })
                ),
                "{bad:?}: {:?}",
                parse(&w)
            );
        }
        assert!(matches!(
            parse(&long),
            Err(DecodeError::InvalidValue {
                field: "group id",
                ..
            })
        ));
        // Cut inside the id: truncated, never a panic.
        assert!(parse(&wire[..12]).is_err());
        // The encoder refuses an id no parser accepts.
        let bad = SendEntryRef {
            group: Some(&b"no spaces"[..]),
            ..grouped.as_view()
        };
        assert!(bad.encode(&mut BytesMut::new()).is_err());
        // A received message's id, the same way.
        let m = ReceivedMessage {
            id: MessageId(1),
            receipt: Receipt::default(),
            receive_count: 1,
            sent_at_ms: 0,
            first_received_delta_ms: 0,
            attributes: MessageAttributes::new(),
            body: Bytes::from_static(b"x"),
            group: Some(MessageGroupId::new("account-7").unwrap()),
        };
        let mut wire = BytesMut::new();
        m.as_view().encode(&mut wire).unwrap();
        assert_eq!(wire.len(), m.encoded_len());
        let back = ReceivedMessage::parse(&mut SliceReader::new(&wire, 0)).unwrap();
        assert_eq!(back.group, Some("account-7"));
        wire[RECEIVE_ENTRY_OVERHEAD_BYTES + 1] = b' ';
        assert!(ReceivedMessage::parse(&mut SliceReader::new(&wire, 0)).is_err());
    }
}
