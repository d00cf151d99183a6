//! Message attributes: up to 16 string pairs a message carries, owned
//! ([`MessageAttributes`]) or borrowed from a frame ([`AttributesRef`]),
//! and their wire form (`u16` key length, key, `u16` value length, value).

use core::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{DecodeError, Reader, SliceReader};
use crate::error::{ErrorCode, WireError};
use crate::limits::{MESSAGE_ATTRIBUTES_BYTES_MAX, MESSAGE_ATTRIBUTES_MAX};

/// Bytes of a message attribute's framing: `u16` key length and `u16` value
/// length.
const ATTRIBUTE_FRAMING_BYTES: usize = 4;

/// A `u32` length from the wire as a `usize`. On a 16-bit platform a length
/// that does not fit is clamped, and the read that uses it fails as truncated.
pub(crate) fn wire_len(len: u32) -> usize {
    usize::try_from(len).unwrap_or(usize::MAX)
}

/// Attribute pairs that [`parse_attributes`] accepted, read again: their
/// extent only, with no check but the bounds.
pub(crate) fn read_attributes<'a>(r: &mut SliceReader<'a>, count: u8) -> Option<AttributesRef<'a>> {
    let start = r.position();
    let mut probe = r.clone();
    for _ in 0..2 * usize::from(count) {
        let [lo, hi] = probe.next_array::<2>()?;
        probe.next_slice(usize::from(u16::from_le_bytes([lo, hi])))?;
    }
    let raw = r.next_slice(probe.position() - start)?;
    Some(AttributesRef { count, raw })
}

/// The one parser of attribute pairs: `count` pairs at the reader's
/// position, checked (at most 16, 4 KiB of keys and values, UTF-8) and taken
/// as one view. `count_offset` is where the count was read, for errors.
pub(crate) fn parse_attributes<'a>(
    r: &mut SliceReader<'a>,
    count: u8,
    count_offset: usize,
) -> Result<AttributesRef<'a>, DecodeError> {
    if usize::from(count) > MESSAGE_ATTRIBUTES_MAX {
        return Err(DecodeError::TooLong {
            offset: count_offset,
            field: "attr_count",
            len: count.into(),
            max: MESSAGE_ATTRIBUTES_MAX,
        });
    }
    if count == 0 {
        return Ok(AttributesRef::default());
    }
    let start = r.clone();
    let mut content = 0usize;
    for _ in 0..count {
        for field in ["attribute key", "attribute value"] {
            let len = usize::from(r.u16(field)?);
            let offset = r.offset();
            content += len;
            if content > MESSAGE_ATTRIBUTES_BYTES_MAX {
                return Err(DecodeError::TooLong {
                    offset,
                    field: "attributes",
                    len: content,
                    max: MESSAGE_ATTRIBUTES_BYTES_MAX,
                });
            }
            let s = r.take(len, field)?;
            if core::str::from_utf8(s).is_err() {
                return Err(DecodeError::InvalidUtf8 { offset, field });
            }
        }
    }
    let mut whole = start;
    let raw = whole.take(r.position() - whole.position(), "attributes")?;
    Ok(AttributesRef { count, raw })
}

/// A message's attributes: up to 16 UTF-8 key/value pairs, keys and values 4
/// KiB in all. Held in their wire form (`u16 key_len, key, u16 value_len,
/// value` per pair), so decoding validates without allocating and the broker
/// can store and send them back as they came. Pairs keep their order; keys
/// are not required to be unique.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct MessageAttributes {
    pub(crate) count: u8,
    pub(crate) raw: Bytes,
}

impl MessageAttributes {
    /// No attributes.
    #[must_use]
    pub const fn new() -> MessageAttributes {
        MessageAttributes {
            count: 0,
            raw: Bytes::new(),
        }
    }

    /// Attributes from key/value pairs, in order.
    ///
    /// # Errors
    /// `InvalidArgument` for more than 16 pairs or keys and values above 4 KiB
    /// in all.
    pub fn from_pairs<K, V, I>(pairs: I) -> Result<MessageAttributes, WireError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
        I: IntoIterator<Item = (K, V)>,
    {
        // Room for a few short pairs at once (a door's system attributes),
        // not a reallocation at each of the first puts.
        let mut raw = BytesMut::with_capacity(128);
        let mut count = 0u8;
        let mut content = 0usize;
        for (k, v) in pairs {
            let (k, v) = (k.as_ref().as_bytes(), v.as_ref().as_bytes());
            if usize::from(count) == MESSAGE_ATTRIBUTES_MAX {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!("attributes: more than {MESSAGE_ATTRIBUTES_MAX}"),
                ));
            }
            count += 1;
            content += k.len() + v.len();
            if content > MESSAGE_ATTRIBUTES_BYTES_MAX {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "attributes: keys and values above {MESSAGE_ATTRIBUTES_BYTES_MAX} bytes"
                    ),
                ));
            }
            for s in [k, v] {
                // At most 4 KiB (checked above), so the length fits a u16.
                raw.put_u16_le(u16::try_from(s.len()).unwrap_or(u16::MAX));
                raw.put_slice(s);
            }
        }
        Ok(MessageAttributes {
            count,
            raw: raw.freeze(),
        })
    }

    /// Attributes from their wire form as their holder stored them after
    /// checking them (a broker's message store, delivering what a send
    /// brought in): nothing is checked again. Should `raw` not be what
    /// [`MessageAttributes::from_wire`] accepts after all, iterating stops
    /// at the first pair that is not, and nothing worse happens.
    #[must_use]
    pub fn from_stored(count: u8, raw: Bytes) -> MessageAttributes {
        MessageAttributes { count, raw }
    }

    /// Attributes from their wire form: `count` pairs in `raw`, for example as
    /// a broker stored them. Checks everything decoding checks.
    ///
    /// # Errors
    /// As for decoding, with offsets counted from the start of `raw`.
    pub fn from_wire(count: u8, raw: Bytes) -> Result<MessageAttributes, DecodeError> {
        let mut r = Reader::new(raw);
        let attrs = MessageAttributes::decode(&mut r, count, 0)?;
        r.finish()?;
        Ok(attrs)
    }

    /// Reads `count` pairs; `count_offset` is where the count was read, for
    /// errors. The attributes share the reader's buffer.
    ///
    /// # Errors
    /// `TooLong` for more than 16 pairs or more than 4 KiB of keys and values,
    /// `Truncated`, `InvalidUtf8`.
    pub fn decode(
        r: &mut Reader,
        count: u8,
        count_offset: usize,
    ) -> Result<MessageAttributes, DecodeError> {
        if count == 0 {
            return Ok(MessageAttributes::new());
        }
        let start = r.position();
        let used = {
            let mut s = r.slice_reader();
            parse_attributes(&mut s, count, count_offset)?;
            s.position()
        };
        r.skip(used, "attributes")?;
        Ok(MessageAttributes {
            count,
            raw: r.slice_since(start),
        })
    }

    /// A borrowed view.
    #[must_use]
    pub fn as_view(&self) -> AttributesRef<'_> {
        AttributesRef {
            count: self.count,
            raw: &self.raw,
        }
    }

    /// Number of pairs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count.into()
    }

    /// Number of pairs, as the `u8` on the wire.
    #[must_use]
    pub fn count(&self) -> u8 {
        self.count
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of keys and values together: what the 4 KiB limit and a queue's
    /// max message size count.
    #[must_use]
    pub fn content_bytes(&self) -> usize {
        self.as_view().content_bytes()
    }

    /// The pairs in their wire form (without the count).
    #[must_use]
    pub fn wire_bytes(&self) -> &Bytes {
        &self.raw
    }

    /// The pairs, in order.
    #[must_use]
    pub fn iter(&self) -> AttributeIter<'_> {
        self.as_view().iter()
    }

    /// The value of the first pair with this key.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.as_view().get(key)
    }
}

impl fmt::Debug for MessageAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.as_view(), f)
    }
}

impl<'a> IntoIterator for &'a MessageAttributes {
    type Item = (&'a str, &'a str);
    type IntoIter = AttributeIter<'a>;
    fn into_iter(self) -> AttributeIter<'a> {
        self.iter()
    }
}

/// A borrowed view of validated message attributes (see
/// [`MessageAttributes`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AttributesRef<'a> {
    pub(crate) count: u8,
    pub(crate) raw: &'a [u8],
}

impl<'a> AttributesRef<'a> {
    /// A view of attributes in wire form, checked like decoding checks them.
    ///
    /// # Errors
    /// As for decoding, with offsets counted from the start of `raw`.
    pub fn from_wire(count: u8, raw: &'a [u8]) -> Result<AttributesRef<'a>, DecodeError> {
        let mut r = SliceReader::new(raw, 0);
        let attributes = parse_attributes(&mut r, count, 0)?;
        if r.remaining() > 0 {
            return Err(DecodeError::TrailingBytes {
                offset: r.offset(),
                count: r.remaining(),
            });
        }
        Ok(attributes)
    }

    /// Number of pairs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count.into()
    }

    /// Number of pairs, as the `u8` on the wire.
    #[must_use]
    pub fn count(&self) -> u8 {
        self.count
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of keys and values together.
    #[must_use]
    pub fn content_bytes(&self) -> usize {
        self.raw.len() - ATTRIBUTE_FRAMING_BYTES * self.len()
    }

    /// The pairs in their wire form (without the count).
    #[must_use]
    pub fn wire_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The pairs, in order.
    #[must_use]
    pub fn iter(&self) -> AttributeIter<'a> {
        AttributeIter {
            pairs: self.byte_pairs(),
        }
    }

    /// The value of the first pair with this key (keys compared as bytes:
    /// only the value found is read as text).
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.get_bytes(key)
            .and_then(|v| core::str::from_utf8(v).ok())
    }

    /// [`AttributesRef::get`]'s value as its bytes, not read as text.
    #[must_use]
    pub fn get_bytes(&self, key: &str) -> Option<&'a [u8]> {
        self.byte_pairs()
            .find(|(k, _)| *k == key.as_bytes())
            .map(|(_, v)| v)
    }

    /// The pairs, in order, as bytes: the UTF-8 they were checked to be
    /// when the attributes were built, not read as text again (for a
    /// reader that skips most of them by key).
    #[must_use]
    pub fn byte_pairs(&self) -> BytePairs<'a> {
        BytePairs {
            reader: SliceReader::new(self.raw, 0),
        }
    }

    /// An owned copy.
    #[must_use]
    pub fn to_owned(&self) -> MessageAttributes {
        MessageAttributes {
            count: self.count,
            raw: Bytes::copy_from_slice(self.raw),
        }
    }
}

impl<'a> IntoIterator for AttributesRef<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = AttributeIter<'a>;
    fn into_iter(self) -> AttributeIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &AttributesRef<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = AttributeIter<'a>;
    fn into_iter(self) -> AttributeIter<'a> {
        self.iter()
    }
}

impl fmt::Debug for AttributesRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Iterator over a message's attribute pairs as bytes
/// ([`AttributesRef::byte_pairs`]).
#[derive(Clone, Debug)]
pub struct BytePairs<'a> {
    reader: SliceReader<'a>,
}

impl<'a> BytePairs<'a> {
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.reader.u16("attribute").ok()?;
        self.reader.take(len.into(), "attribute").ok()
    }
}

impl<'a> Iterator for BytePairs<'a> {
    type Item = (&'a [u8], &'a [u8]);
    fn next(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        // Validated when the attributes were built: cannot stop part way.
        let key = self.bytes()?;
        let value = self.bytes()?;
        Some((key, value))
    }
}

/// Iterator over a message's attribute pairs.
#[derive(Clone, Debug)]
pub struct AttributeIter<'a> {
    pairs: BytePairs<'a>,
}

impl<'a> Iterator for AttributeIter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        // The pairs were validated when the attributes were built, so
        // reading them as text cannot stop part way.
        let (key, value) = self.pairs.next()?;
        Some((
            core::str::from_utf8(key).ok()?,
            core::str::from_utf8(value).ok()?,
        ))
    }
}
