//! A message as the engine stores it, and its attributes.
//!
//! A message's body and attributes live in ONE allocation, made when the
//! message is accepted (DESIGN §3 "Bodies"): the body followed by the
//! attributes' compact encoding. Deliveries hand out `Bytes` slices of it, so
//! a receive copies nothing.

use bytes::{BufMut, Bytes, BytesMut};
use sluice_protocol::limits::{MESSAGE_ATTRIBUTES_BYTES_MAX, MESSAGE_ATTRIBUTES_MAX};
use sluice_protocol::{ErrorCode, WireError};

use super::wheel::TimerId;

/// Largest attribute key, in bytes (its length is stored in one byte).
pub const ATTRIBUTE_KEY_BYTES_MAX: usize = 255;

/// A message's string attributes (up to 16, 4 KiB of keys and values in
/// all), kept in a compact encoding: per attribute `[key_len u8][key]
/// [value_len u16 le][value]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageAttributes {
    encoded: Bytes,
    count: u8,
    bytes: u16,
}

impl MessageAttributes {
    /// No attributes.
    #[must_use]
    pub fn empty() -> MessageAttributes {
        MessageAttributes::default()
    }

    /// Attributes from key/value pairs, checking the limits: at most 16
    /// pairs, keys of 1 ..= 255 bytes, 4 KiB of keys and values in all.
    pub fn from_pairs<K, V>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<MessageAttributes, WireError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut out = BytesMut::new();
        let mut count = 0usize;
        let mut bytes = 0usize;
        for (k, v) in pairs {
            let (k, v) = (k.as_ref().as_bytes(), v.as_ref().as_bytes());
            count += 1;
            bytes += k.len() + v.len();
            if count > MESSAGE_ATTRIBUTES_MAX {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("attributes: more than {MESSAGE_ATTRIBUTES_MAX}"),
                ));
            }
            if k.is_empty() || k.len() > ATTRIBUTE_KEY_BYTES_MAX {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("attributes: a key must have 1 ..= {ATTRIBUTE_KEY_BYTES_MAX} bytes"),
                ));
            }
            if bytes > MESSAGE_ATTRIBUTES_BYTES_MAX {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("attributes: more than {MESSAGE_ATTRIBUTES_BYTES_MAX} bytes"),
                ));
            }
            // Both lengths were bounded just above.
            out.put_u8(k.len() as u8);
            out.put_slice(k);
            out.put_u16_le(v.len() as u16);
            out.put_slice(v);
        }
        Ok(MessageAttributes {
            encoded: out.freeze(),
            // Bounded by the checks above.
            count: count as u8,
            bytes: bytes as u16,
        })
    }

    /// Number of attributes.
    #[must_use]
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of keys and values together: what counts toward the queue's max
    /// message size.
    #[must_use]
    pub fn size_bytes(&self) -> usize {
        usize::from(self.bytes)
    }

    /// The compact encoding.
    #[must_use]
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }

    /// The pairs, in the order given.
    pub fn iter(&self) -> AttributeIter<'_> {
        AttributeIter {
            rest: &self.encoded,
        }
    }

    /// Rebuilds attributes from an encoding this type produced (a slice of a
    /// stored message).
    fn from_stored(encoded: Bytes) -> MessageAttributes {
        let mut count = 0u8;
        let mut bytes = 0u16;
        for (k, v) in (AttributeIter { rest: &encoded }) {
            count += 1;
            bytes += (k.len() + v.len()) as u16;
        }
        MessageAttributes {
            encoded,
            count,
            bytes,
        }
    }
}

/// Iterator over attribute pairs.
#[derive(Debug)]
pub struct AttributeIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for AttributeIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        // The encoding was produced by `from_pairs` from `str`s, so every
        // length and every UTF-8 check below holds; a short or invalid
        // encoding simply ends the iteration.
        let (&klen, rest) = self.rest.split_first()?;
        let (k, rest) = rest.split_at_checked(usize::from(klen))?;
        let (vlen, rest) = rest.split_at_checked(2)?;
        let vlen = usize::from(u16::from_le_bytes([vlen[0], vlen[1]]));
        let (v, rest) = rest.split_at_checked(vlen)?;
        self.rest = rest;
        Some((core::str::from_utf8(k).ok()?, core::str::from_utf8(v).ok()?))
    }
}

/// Where a message stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageState {
    /// Receivable now.
    Visible,
    /// Waiting out a delivery delay or a retry backoff until `due_ns`.
    Delayed,
    /// Leased until `due_ns`.
    InFlight,
}

/// One stored message. Only its owner shard touches it.
#[derive(Debug)]
pub(crate) struct Message {
    /// Body followed by the attributes' encoding, in its chunk (see
    /// `bodies.rs`).
    pub data: Bytes,
    pub body_len: u32,
    /// The chunk `data` lies in.
    pub chunk: u32,
    /// Per-shard sequence number; with the run prefix and the shard it makes
    /// the message id.
    pub seq: u64,
    pub sent_at_ms: u64,
    /// Monotonic time of the original send: retention counts from it.
    pub sent_ns: u64,
    pub retain_until_ns: u64,
    /// End of the lease (in flight) or of the delay (delayed).
    pub due_ns: u64,
    pub delivery: u64,
    /// The check of the receipt of the current delivery (0 before the
    /// first): a receipt that matches this delivery field for field and
    /// carries this check is the one signed, so it needs no second MAC.
    pub check: u32,
    pub first_received_ms: u64,
    /// When the current lease began (monotonic ns), for the lease metrics.
    pub leased_ns: u64,
    pub receive_count: u32,
    /// Local index of the partition (queue) holding it.
    pub partition: u32,
    /// Incarnation of the queue it was dead-lettered from; 0 when none.
    pub source: u32,
    pub state: MessageState,
    /// Whether an entry for it sits in its partition's ready FIFO.
    pub in_ready: bool,
    /// Whether it sits in its partition's age FIFO, which also drops it at
    /// the end of its retention; otherwise it sits in the partition's
    /// `moved` index and its own timer covers retention (see
    /// `partition.rs`).
    pub in_age_fifo: bool,
    pub timer: Option<TimerId>,
}

impl Message {
    pub fn body(&self) -> Bytes {
        self.data.slice(..self.body_len as usize)
    }

    pub fn attributes(&self) -> MessageAttributes {
        if self.data.len() == self.body_len as usize {
            return MessageAttributes::empty();
        }
        MessageAttributes::from_stored(self.data.slice(self.body_len as usize..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_limits() {
        let a = MessageAttributes::from_pairs([("k", "v"), ("key2", "")]).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a.size_bytes(), 6);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![("k", "v"), ("key2", "")]);

        let too_many = (0..17).map(|i| (format!("k{i}"), String::new()));
        let e = MessageAttributes::from_pairs(too_many).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        let big = "x".repeat(4096);
        assert!(MessageAttributes::from_pairs([("k", big.as_str())]).is_err());
        assert!(MessageAttributes::from_pairs([("", "v")]).is_err());
        let ok = "x".repeat(4095);
        assert!(MessageAttributes::from_pairs([("k", ok.as_str())]).is_ok());
    }

    #[test]
    fn stored_data_splits_back() {
        let a = MessageAttributes::from_pairs([("trace", "abc")]).unwrap();
        let (data, chunk) = crate::engine::bodies::Bodies::new().store(b"hello", a.encoded());
        let m = Message {
            data,
            body_len: 5,
            chunk,
            seq: 0,
            sent_at_ms: 0,
            sent_ns: 0,
            retain_until_ns: 0,
            due_ns: 0,
            delivery: 0,
            check: 0,
            first_received_ms: 0,
            leased_ns: 0,
            receive_count: 0,
            partition: 0,
            source: 0,
            state: MessageState::Visible,
            in_ready: false,
            in_age_fifo: false,
            timer: None,
        };
        assert_eq!(&m.body()[..], b"hello");
        assert_eq!(m.attributes(), a);
    }
}
