//! Queue names: validated once, then shared without copying.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::ops::Deref;

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{DecodeError, Reader};

/// A queue name: 1 to 80 bytes of `[A-Za-z0-9_.-]`, which may also hold one
/// hash tag, `{` then 1 or more of `[A-Za-z0-9_.-]` then `}` (`{orders}`,
/// `{orders}.dlq`, `eu.{orders}.v2`): clients that spread queues over
/// several brokers place a name by its tag alone ([`QueueName::hash_key`]).
/// Decoded names share the frame's
/// buffer; the syntax is checked on every construction, so a `QueueName` is
/// always valid. It hashes, compares and borrows as its `str`, so maps keyed
/// by `QueueName` can be searched with a `&str`.
#[derive(Clone)]
pub struct QueueName(Bytes);

/// A string that is not a valid queue name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a valid queue name: names are 1 to 80 of [A-Za-z0-9_.-], with at most one {{tag}} of them"
)]
pub struct InvalidQueueName;

impl QueueName {
    /// A name from a string, copied.
    ///
    /// # Errors
    /// [`InvalidQueueName`] unless `name` is a valid name (see the type).
    pub fn new(name: &str) -> Result<QueueName, InvalidQueueName> {
        if crate::is_valid_queue_name(name) {
            Ok(QueueName(Bytes::copy_from_slice(name.as_bytes())))
        } else {
            Err(InvalidQueueName)
        }
    }

    /// A name from a static string, without copying; usable in a `const`.
    ///
    /// # Panics
    /// When `name` is not a valid queue name (at compile time, in a
    /// `const`): meant for names written in code.
    #[must_use]
    pub const fn from_static(name: &'static str) -> QueueName {
        assert!(
            is_valid_name_bytes(name.as_bytes()),
            "not a valid queue name: names are 1 to 80 of [A-Za-z0-9_.-], with at most one {{tag}}"
        );
        QueueName(Bytes::from_static(name.as_bytes()))
    }

    /// A name from bytes, without copying.
    ///
    /// # Errors
    /// [`InvalidQueueName`] unless the bytes are a valid name (see the type).
    pub fn from_bytes(bytes: Bytes) -> Result<QueueName, InvalidQueueName> {
        if is_valid_name_bytes(&bytes) {
            Ok(QueueName(bytes))
        } else {
            Err(InvalidQueueName)
        }
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Every constructor checked that the bytes are ASCII, so this never
        // falls back to the empty string.
        core::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// What places the queue on one of several brokers: the tag between
    /// `{` and `}` if the name has one, else the whole name. See
    /// [`hash_key`].
    #[must_use]
    pub fn hash_key(&self) -> &str {
        hash_key(self.as_str())
    }

    /// The name's bytes, shared.
    #[must_use]
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// Bytes on the wire: the `u8` length and the name.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        1 + self.0.len()
    }

    /// Writes the `u8` length and the name.
    pub fn encode(&self, buf: &mut BytesMut) {
        // A valid name has at most 80 bytes, so the length fits a u8.
        #[allow(clippy::cast_possible_truncation, reason = "at most 80 bytes")]
        buf.put_u8(self.0.len() as u8);
        buf.put_slice(&self.0);
    }

    /// Reads a `u8` length and a name, checking its syntax.
    ///
    /// # Errors
    /// `Truncated`, or `InvalidQueueName` naming `field`.
    pub fn decode(r: &mut Reader, field: &'static str) -> Result<QueueName, DecodeError> {
        let len = r.u8(field)?;
        let offset = r.offset();
        let bytes = r.bytes(len.into(), field)?;
        if is_valid_name_bytes(&bytes) {
            Ok(QueueName(bytes))
        } else {
            Err(DecodeError::InvalidQueueName { offset, field })
        }
    }
}

/// Whether `b` is a valid queue name's bytes: 1 to 80 of `[A-Za-z0-9_.-]`
/// with at most one `{tag}`, the tag 1 or more of the same bytes.
pub(crate) const fn is_valid_name_bytes(b: &[u8]) -> bool {
    if b.is_empty() || b.len() > crate::limits::QUEUE_NAME_BYTES_MAX {
        return false;
    }
    // The common name has no tag: one table look-up a byte, then done.
    let mut i = 0;
    while i < b.len() && PLAIN_NAME_BYTES[b[i] as usize] {
        i += 1;
    }
    if i == b.len() {
        return true;
    }
    // Where the tag's `{` is (None: not yet seen), and whether it closed.
    let mut open: Option<usize> = None;
    let mut closed = false;
    while i < b.len() {
        let c = b[i];
        if c == b'{' {
            if open.is_some() {
                return false;
            }
            open = Some(i);
        } else if c == b'}' {
            match open {
                // `{}` (an empty tag), `}` before `{`, a second `}`.
                Some(at) if !closed && i > at + 1 => closed = true,
                _ => return false,
            }
        } else if !is_plain_name_byte(c) {
            return false;
        }
        i += 1;
    }
    open.is_none() || closed
}

/// [`is_plain_name_byte`] of each byte value.
const PLAIN_NAME_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut c: u8 = 0;
    loop {
        t[c as usize] = is_plain_name_byte(c);
        if c == u8::MAX {
            break t;
        }
        c += 1;
    }
};

/// Whether `c` may appear in a queue name outside the braces of its tag.
pub(crate) const fn is_plain_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')
}

/// Whether `c` may appear in a queue name or a prefix of one (`LIST_QUEUES`).
pub(crate) const fn is_name_byte(c: u8) -> bool {
    is_plain_name_byte(c) || matches!(c, b'{' | b'}')
}

/// What places queue `name` on one of several brokers: the tag between its
/// `{` and `}` if it has one, else the whole name. Queues that share a tag
/// (`{orders}`, `{orders}.dlq`) share a broker.
///
/// ```
/// use sluice_protocol::name::hash_key;
/// assert_eq!(hash_key("{orders}.dlq"), "orders");
/// assert_eq!(hash_key("eu.{orders}"), "orders");
/// assert_eq!(hash_key("orders.dlq"), "orders.dlq");
/// ```
#[must_use]
pub fn hash_key(name: &str) -> &str {
    // No let chains: they need Rust 1.88, above the workspace's
    // rust-version.
    let tag = name.find('{').and_then(|open| {
        let rest = &name[open + 1..];
        rest.find('}')
            .filter(|&len| len > 0)
            .map(|len| &rest[..len])
    });
    tag.unwrap_or(name)
}

impl Deref for QueueName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for QueueName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for QueueName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for QueueName {
    fn eq(&self, other: &QueueName) -> bool {
        self.0 == other.0
    }
}

impl Eq for QueueName {}

impl PartialEq<str> for QueueName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for QueueName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for QueueName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must hash like the `str` it borrows as.
        self.as_str().hash(state);
    }
}

impl PartialOrd for QueueName {
    fn partial_cmp(&self, other: &QueueName) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for QueueName {
    fn cmp(&self, other: &QueueName) -> core::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::str::FromStr for QueueName {
    type Err = InvalidQueueName;
    fn from_str(s: &str) -> Result<QueueName, InvalidQueueName> {
        QueueName::new(s)
    }
}

impl TryFrom<&str> for QueueName {
    type Error = InvalidQueueName;
    fn try_from(s: &str) -> Result<QueueName, InvalidQueueName> {
        QueueName::new(s)
    }
}

impl TryFrom<String> for QueueName {
    type Error = InvalidQueueName;
    fn try_from(s: String) -> Result<QueueName, InvalidQueueName> {
        if crate::is_valid_queue_name(&s) {
            Ok(QueueName(Bytes::from(s.into_bytes())))
        } else {
            Err(InvalidQueueName)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn syntax_is_checked_everywhere() {
        assert!(QueueName::new("orders.v2_eu-1").is_ok());
        assert_eq!(QueueName::new(""), Err(InvalidQueueName));
        assert_eq!(QueueName::new("a b"), Err(InvalidQueueName));
        assert_eq!(QueueName::new(&"a".repeat(81)), Err(InvalidQueueName));
        assert!(QueueName::new(&"a".repeat(80)).is_ok());
        assert_eq!(QueueName::try_from("é".to_owned()), Err(InvalidQueueName));
        assert_eq!(
            QueueName::from_bytes(Bytes::from_static(b"q\0")),
            Err(InvalidQueueName)
        );
    }

    #[test]
    fn one_tag_may_be_written_in_braces() {
        for ok in ["{orders}", "{orders}.dlq", "eu.{orders}.v2", "{a}", "x{y}"] {
            assert!(QueueName::new(ok).is_ok(), "{ok}");
        }
        let bad = [
            "{}", "{", "}", "}a{", "{a", "a}", "{a}{b}", "{a}}", "{{a}", "{a b}", "{a}.{b}",
        ];
        for bad in bad {
            assert_eq!(QueueName::new(bad), Err(InvalidQueueName), "{bad}");
        }
        // Braces count against the 80 bytes like any other.
        assert!(QueueName::new(&format!("{{{}}}", "a".repeat(78))).is_ok());
        assert!(QueueName::new(&format!("{{{}}}", "a".repeat(79))).is_err());
    }

    #[test]
    fn the_hash_key_is_the_tag_or_the_whole_name() {
        assert_eq!(QueueName::from_static("{orders}").hash_key(), "orders");
        assert_eq!(QueueName::from_static("{orders}.dlq").hash_key(), "orders");
        assert_eq!(
            QueueName::from_static("eu.{orders}.v2").hash_key(),
            "orders"
        );
        assert_eq!(QueueName::from_static("orders").hash_key(), "orders");
        assert_eq!(
            QueueName::from_static("orders.dlq").hash_key(),
            "orders.dlq"
        );
        // Strings that are not names still get a key, the whole string.
        assert_eq!(hash_key("{}"), "{}");
        assert_eq!(hash_key("a{"), "a{");
    }

    #[test]
    fn maps_keyed_by_name_are_searched_with_str() {
        let mut m = HashMap::new();
        m.insert(QueueName::from_static("jobs"), 1);
        assert_eq!(m.get("jobs"), Some(&1));
        assert_eq!(QueueName::from_static("jobs"), "jobs");
    }

    #[test]
    fn decode_names_the_field_and_offset() {
        let mut r = Reader::new(Bytes::from_static(b"\x02a!"));
        assert_eq!(
            QueueName::decode(&mut r, "queue"),
            Err(DecodeError::InvalidQueueName {
                offset: 1,
                field: "queue"
            })
        );
        let mut r = Reader::new(Bytes::from_static(b"\x00"));
        assert!(matches!(
            QueueName::decode(&mut r, "queue"),
            Err(DecodeError::InvalidQueueName { .. })
        ));
        let name = QueueName::from_static("q-1");
        let mut buf = BytesMut::new();
        name.encode(&mut buf);
        assert_eq!(buf.len(), name.encoded_len());
        assert_eq!(
            QueueName::decode(&mut Reader::new(buf.freeze()), "queue"),
            Ok(name)
        );
    }
}
