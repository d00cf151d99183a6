//! A SEND's entries: [`SendEntry`] (owned, with its builders) and
//! [`SendEntryRef`] (a view into the frame), and the batch of them.

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    GROUP_FLAG, SEND_ENTRY_HEAD, USE_QUEUE_DEFAULT, group_wire, parse_group_bytes, read_group_bytes,
};
use crate::batch::{Batch, BatchEntry, BatchIter, share_slice};
use crate::codec::{DecodeError, EncodeError, SliceReader, len_u8, len_u32};
use crate::group_id::MessageGroupId;
use crate::limits::{DEDUP_KEY_BYTES_MAX, SEND_ENTRY_OVERHEAD_BYTES};
use crate::message_attributes::{
    AttributesRef, MessageAttributes, parse_attributes, read_attributes, wire_len,
};
use crate::millis::Millis;

/// One message of a SEND, owned: what a client builds a batch from (the
/// client library's `SendEntry` is this type).
///
/// ```
/// use std::time::Duration;
/// use sluice_protocol::{Millis, SendEntry};
///
/// let entry = SendEntry::new("order 42")
///     .delay(Duration::from_secs(5))
///     .dedup_key("order-42");
/// assert_eq!(entry.delay, Some(Millis::new(5_000)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendEntry {
    /// The body.
    pub body: Bytes,
    /// How long the message stays invisible after the send (at most
    /// 15 min); `None` uses the queue's delay. `Some(0xFFFF_FFFF ms)` goes
    /// on the wire as "queue default" too.
    pub delay: Option<Millis>,
    /// A dedup key (1 to 128 bytes): a send with a key the queue accepted
    /// within its dedup window enqueues nothing and returns the first
    /// message's id. `None` (or empty) for no deduplication.
    pub dedup_key: Option<Bytes>,
    /// The message's attributes.
    pub attributes: MessageAttributes,
    /// Its message group (protocol version 5): its place in its group's
    /// order on a FIFO queue, its group's turn on a standard one.
    pub group: Option<MessageGroupId>,
}

impl SendEntry {
    /// What [`SendEntry::delay`] sets for a delay longer than the field
    /// can carry: the longest value it carries below the "queue default"
    /// marker. No broker takes it as a delay (delays are at most 15 min),
    /// and a client can tell it from any delay it can send.
    pub const DELAY_CUT: Millis = Millis::new(u32::MAX - 1);

    /// An entry with just a body.
    #[must_use]
    pub fn new(body: impl Into<Bytes>) -> SendEntry {
        SendEntry {
            body: body.into(),
            ..SendEntry::default()
        }
    }

    /// Sets the delivery delay: a [`Duration`](std::time::Duration) (rounded
    /// up to whole milliseconds) or a [`Millis`]. A delay longer than the
    /// protocol's field can carry becomes [`SendEntry::DELAY_CUT`], which
    /// the broker refuses like any delay above 15 min (`InvalidArgument`)
    /// and the client library refuses before sending.
    #[must_use]
    pub fn delay<T: TryInto<Millis>>(mut self, delay: T) -> SendEntry {
        let cut = SendEntry::DELAY_CUT;
        self.delay = Some(delay.try_into().map_or(cut, |d| d.min(cut)));
        self
    }

    /// Sets the dedup key.
    #[must_use]
    pub fn dedup_key(mut self, key: impl Into<Bytes>) -> SendEntry {
        self.dedup_key = Some(key.into());
        self
    }

    /// Sets the attributes.
    #[must_use]
    pub fn attributes(mut self, attributes: MessageAttributes) -> SendEntry {
        self.attributes = attributes;
        self
    }

    /// Sets the message group.
    #[must_use]
    pub fn group(mut self, group: MessageGroupId) -> SendEntry {
        self.group = Some(group);
        self
    }

    /// A borrowed view.
    #[must_use]
    pub fn as_view(&self) -> SendEntryRef<'_> {
        SendEntryRef {
            body: &self.body,
            delay_ms: self.delay.map(Millis::get),
            dedup_key: self.dedup_key.as_deref().filter(|k| !k.is_empty()),
            attributes: self.attributes.as_view(),
            group: self.group.as_ref().map(|g| &g.as_bytes()[..]),
        }
    }

    /// Bytes on the wire.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        self.as_view().encoded_len()
    }
}

impl From<Bytes> for SendEntry {
    fn from(body: Bytes) -> SendEntry {
        SendEntry::new(body)
    }
}

impl From<&'static str> for SendEntry {
    fn from(body: &'static str) -> SendEntry {
        SendEntry::new(body)
    }
}

impl From<Vec<u8>> for SendEntry {
    fn from(body: Vec<u8>) -> SendEntry {
        SendEntry::new(body)
    }
}

/// One message of a SEND, borrowed from the frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendEntryRef<'a> {
    /// The body.
    pub body: &'a [u8],
    /// Delivery delay; `None` uses the queue's.
    pub delay_ms: Option<u32>,
    /// Dedup key (1 to 128 bytes), if any.
    pub dedup_key: Option<&'a [u8]>,
    /// Attributes.
    pub attributes: AttributesRef<'a>,
    /// Message group id, if any: its bytes, 1 to 128 of `!` to `~` (so
    /// ASCII; checked when the entry was decoded, and again when it is
    /// encoded). Bytes rather than a `&str`: a broker hashes and stores
    /// them, and a UTF-8 check per entry would cost it more than the rest
    /// of the id's handling.
    pub group: Option<&'a [u8]>,
}

impl<'a> SendEntryRef<'a> {
    /// An entry from its wire fields: `delay_ms` [`USE_QUEUE_DEFAULT`] and an
    /// empty dedup key mean none.
    #[inline]
    fn from_parts(
        body: &'a [u8],
        delay_ms: u32,
        dedup_key: &'a [u8],
        attributes: AttributesRef<'a>,
        group: Option<&'a [u8]>,
    ) -> SendEntryRef<'a> {
        SendEntryRef {
            body,
            delay_ms: (delay_ms != USE_QUEUE_DEFAULT).then_some(delay_ms),
            dedup_key: (!dedup_key.is_empty()).then_some(dedup_key),
            attributes,
            group,
        }
    }
}

impl SendEntryRef<'_> {
    /// Bytes on the wire: [`SEND_ENTRY_OVERHEAD_BYTES`] plus dedup key,
    /// attributes and body.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        SEND_ENTRY_OVERHEAD_BYTES
            + self.dedup_key.map_or(0, <[u8]>::len)
            + self.group.map_or(0, |g| 1 + g.len())
            + self.attributes.wire_bytes().len()
            + self.body.len()
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let dedup = self.dedup_key.unwrap_or_default();
        // Every batch, decoded or built, is one the parser accepts.
        if dedup.len() > DEDUP_KEY_BYTES_MAX {
            return Err(EncodeError::TooLong {
                field: "dedup key",
                len: dedup.len(),
                max: DEDUP_KEY_BYTES_MAX,
            });
        }
        let group = self.group.map(group_wire).transpose()?;
        let mut head = [0u8; SEND_ENTRY_OVERHEAD_BYTES];
        head[0..4].copy_from_slice(&len_u32(self.body.len(), "body")?.to_le_bytes());
        head[4..8].copy_from_slice(&self.delay_ms.unwrap_or(USE_QUEUE_DEFAULT).to_le_bytes());
        head[8] = len_u8(dedup.len(), "dedup key")?;
        head[9] = self.attributes.count() | if group.is_some() { GROUP_FLAG } else { 0 };
        buf.put_slice(&head);
        buf.put_slice(dedup);
        if let Some((len, g)) = group {
            buf.put_u8(len);
            buf.put_slice(g);
        }
        buf.put_slice(self.attributes.wire_bytes());
        buf.put_slice(self.body);
        Ok(())
    }
}

/// The SEND entry layout: its one parser, used to check a batch when it is
/// decoded and to read its entries after. See PROTOCOL.md for the bytes.
impl BatchEntry for SendEntry {
    type Ref<'a> = SendEntryRef<'a>;
    const COUNT_FIELD: &'static str = "entry count";

    fn parse<'a>(r: &mut SliceReader<'a>) -> Result<SendEntryRef<'a>, DecodeError> {
        let at = r.offset();
        // SEND_ENTRY_HEAD's fields: body_len at +0, delay_ms at +4,
        // dedup_len at +8, attr_count at +9 (the offsets errors name).
        let [b0, b1, b2, b3, d0, d1, d2, d3, dedup_len, attr_count] =
            r.head::<SEND_ENTRY_OVERHEAD_BYTES>(&SEND_ENTRY_HEAD)?;
        if usize::from(dedup_len) > DEDUP_KEY_BYTES_MAX {
            return Err(DecodeError::TooLong {
                offset: at + 8,
                field: "dedup key",
                len: dedup_len.into(),
                max: DEDUP_KEY_BYTES_MAX,
            });
        }
        let dedup_key = r.take(dedup_len.into(), "dedup key")?;
        let group = if attr_count & GROUP_FLAG == 0 {
            None
        } else {
            Some(parse_group_bytes(r)?)
        };
        let attr_count = attr_count & !GROUP_FLAG;
        let attributes = if attr_count == 0 {
            AttributesRef::default()
        } else {
            parse_attributes(r, attr_count, at + 9)?
        };
        let body = r.take(wire_len(u32::from_le_bytes([b0, b1, b2, b3])), "body")?;
        Ok(SendEntryRef::from_parts(
            body,
            u32::from_le_bytes([d0, d1, d2, d3]),
            dedup_key,
            attributes,
            group,
        ))
    }

    #[inline]
    fn read<'a>(r: &mut SliceReader<'a>) -> Option<SendEntryRef<'a>> {
        // The same layout as `parse`, on bytes `parse` accepted: no limit is
        // checked again and no error is built, only the bounds.
        let [b0, b1, b2, b3, d0, d1, d2, d3, dedup_len, attr_count] =
            r.next_array::<SEND_ENTRY_OVERHEAD_BYTES>()?;
        let dedup_key = r.next_slice(dedup_len.into())?;
        let group = if attr_count & GROUP_FLAG == 0 {
            None
        } else {
            Some(read_group_bytes(r)?)
        };
        let attr_count = attr_count & !GROUP_FLAG;
        let attributes = if attr_count == 0 {
            AttributesRef::default()
        } else {
            read_attributes(r, attr_count)?
        };
        let body = r.next_slice(wire_len(u32::from_le_bytes([b0, b1, b2, b3])))?;
        Some(SendEntryRef::from_parts(
            body,
            u32::from_le_bytes([d0, d1, d2, d3]),
            dedup_key,
            attributes,
            group,
        ))
    }

    fn encoded_len(entry: &SendEntryRef<'_>) -> usize {
        entry.encoded_len()
    }

    fn encode(entry: &SendEntryRef<'_>, buf: &mut BytesMut) -> Result<(), EncodeError> {
        entry.encode(buf)
    }

    fn share(buf: &Bytes, entry: SendEntryRef<'_>) -> SendEntry {
        SendEntry {
            body: share_slice(buf, entry.body),
            delay: entry.delay_ms.map(Millis::new),
            dedup_key: entry.dedup_key.map(|k| share_slice(buf, k)),
            attributes: MessageAttributes {
                count: entry.attributes.count(),
                raw: share_slice(buf, entry.attributes.wire_bytes()),
            },
            // The view's id was checked when it was made.
            group: entry
                .group
                .and_then(|g| MessageGroupId::from_bytes(share_slice(buf, g)).ok()),
        }
    }
}

/// The entries of a SEND, in wire form: one slice of the frame, checked
/// when decoded. Iterate with [`Batch::iter`]; build with
/// [`SendBatch::from_entries`].
pub type SendBatch = Batch<SendEntry>;

/// Iterator over a [`SendBatch`].
pub type SendBatchIter<'a> = BatchIter<'a, SendEntry>;

impl Batch<SendEntry> {
    /// A batch holding `entries`, in order (their bytes are copied once).
    ///
    /// # Errors
    /// `TooLong` for more than 65,535 entries, a body above 4 GiB or a dedup
    /// key above 128 bytes (so every batch is one a receiver's parser
    /// accepts; the protocol's 1,024 entries are the receiver's to enforce).
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = &'a SendEntry>,
    ) -> Result<SendBatch, EncodeError> {
        Batch::from_views(entries.into_iter().map(SendEntry::as_view))
    }

    /// The entries as owned values whose bodies, keys and attributes share
    /// this batch's buffer (no copy).
    #[must_use]
    pub fn to_entries(&self) -> Vec<SendEntry> {
        self.to_owned_entries()
    }
}
