//! Message group ids: validated once, then shared without copying. A SEND
//! entry's group id orders it among the messages of its group on a FIFO
//! queue, and takes turns with other groups on a fair standard queue.

use core::fmt;

use bytes::Bytes;

/// Most bytes of a group id.
pub const GROUP_ID_BYTES_MAX: usize = 128;

/// A message group id: 1 to 128 printable ASCII characters other than the
/// space (`!` to `~`: letters, digits and punctuation), as SQS's
/// `MessageGroupId`. The syntax is checked on every construction, so a
/// `MessageGroupId` is always valid.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageGroupId(Bytes);

/// Bytes that are not a valid message group id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a valid message group id: ids are 1 to 128 printable ASCII characters \
     (letters, digits and punctuation, no spaces)"
)]
pub struct InvalidGroupId;

/// Whether `bytes` is a valid message group id.
#[must_use]
#[inline]
pub fn is_valid_group_id(bytes: &[u8]) -> bool {
    (1..=GROUP_ID_BYTES_MAX).contains(&bytes.len()) && all_printable(bytes)
}

/// Whether every byte of `bytes` is `!` to `~`: every send to a FIFO or
/// fair queue checks its group id. Eight bytes at a time from 8 bytes on
/// (an id such as a UUID costs a few words, not 36 byte checks); a
/// shorter id byte by byte, which costs less than building a word of it.
#[inline]
fn all_printable(bytes: &[u8]) -> bool {
    let n = bytes.len();
    if n < 8 {
        return bytes.iter().all(|b| (b'!'..=b'~').contains(b));
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let mut at = 0;
    while at + 8 <= n {
        if !printable_word(word(at)) {
            return false;
        }
        at += 8;
    }
    // The last 8 bytes, overlapping the words checked (a byte checked twice
    // is checked the same).
    at == n || printable_word(word(n - 8))
}

/// Whether each byte of `w` is `!` (0x21) to `~` (0x7e): below 0x80, and
/// then adding 0x5f to a byte sets its top bit exactly when it is 0x21 or
/// more, and adding 1 exactly when it is 0x7f; no sum carries into the
/// next byte.
#[inline]
fn printable_word(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    w & TOPS == 0 && w.wrapping_add(0x5f * ONES) & TOPS == TOPS && w.wrapping_add(ONES) & TOPS == 0
}

impl MessageGroupId {
    /// An id from a string, copied.
    ///
    /// # Errors
    /// [`InvalidGroupId`] unless `id` is valid (see the type).
    pub fn new(id: &str) -> Result<MessageGroupId, InvalidGroupId> {
        MessageGroupId::from_bytes(Bytes::copy_from_slice(id.as_bytes()))
    }

    /// An id from bytes (a frame's, say), without copying.
    ///
    /// # Errors
    /// [`InvalidGroupId`] unless the bytes are a valid id (see the type).
    pub fn from_bytes(bytes: Bytes) -> Result<MessageGroupId, InvalidGroupId> {
        if is_valid_group_id(&bytes) {
            Ok(MessageGroupId(bytes))
        } else {
            Err(InvalidGroupId)
        }
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Valid ids are ASCII, so this never fails; an empty string would
        // stand for the impossible.
        core::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The id's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }
}

impl fmt::Display for MessageGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for MessageGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageGroupId({:?})", self.as_str())
    }
}

impl TryFrom<&str> for MessageGroupId {
    type Error = InvalidGroupId;

    fn try_from(id: &str) -> Result<MessageGroupId, InvalidGroupId> {
        MessageGroupId::new(id)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{GROUP_ID_BYTES_MAX, InvalidGroupId, MessageGroupId, is_valid_group_id};

    #[test]
    fn ids_are_printable_ascii_without_spaces() {
        for ok in ["a", "order-42", "tenant:7/device#3", "!~", &"x".repeat(128)] {
            let id = MessageGroupId::new(ok).unwrap();
            assert_eq!(id.as_str(), ok);
            assert_eq!(id.to_string(), ok);
        }
        for bad in ["", " ", "a b", "tab\t", "é", "\u{7f}", &"x".repeat(129)] {
            assert_eq!(MessageGroupId::new(bad), Err(InvalidGroupId), "{bad:?}");
        }
        assert!(
            InvalidGroupId
                .to_string()
                .contains("1 to 128 printable ASCII")
        );
        assert_eq!(
            format!("{:?}", MessageGroupId::try_from("g1").unwrap()),
            "MessageGroupId(\"g1\")"
        );
    }

    /// The plain definition, one byte at a time.
    fn valid_by_bytes(bytes: &[u8]) -> bool {
        (1..=GROUP_ID_BYTES_MAX).contains(&bytes.len())
            && bytes.iter().all(|b| (b'!'..=b'~').contains(b))
    }

    #[test]
    fn every_byte_in_every_place_of_every_length_is_checked() {
        // Each length 0 to 140, each position, each byte value: the word
        // checks (overlapping tails, short words) agree with the bytes.
        for len in 0..=140usize {
            let mut bytes = vec![b'a'; len];
            assert_eq!(
                is_valid_group_id(&bytes),
                valid_by_bytes(&bytes),
                "len {len}"
            );
            for at in 0..len {
                for b in 0..=255u8 {
                    bytes[at] = b;
                    assert_eq!(
                        is_valid_group_id(&bytes),
                        valid_by_bytes(&bytes),
                        "len {len}, byte {b:#x} at {at}"
                    );
                }
                bytes[at] = b'~';
            }
        }
    }

    proptest! {
        #[test]
        fn exactly_the_printable_ids_are_valid(bytes in proptest::collection::vec(any::<u8>(), 0..140)) {
            let printable = bytes.iter().all(|b| (0x21..=0x7e).contains(b));
            let fits = (1..=GROUP_ID_BYTES_MAX).contains(&bytes.len());
            prop_assert_eq!(is_valid_group_id(&bytes), printable && fits);
            let id = MessageGroupId::from_bytes(bytes.clone().into());
            prop_assert_eq!(id.is_ok(), printable && fits);
            if let Ok(id) = id {
                prop_assert_eq!(id.as_str().as_bytes(), &bytes[..]);
            }
        }

        #[test]
        fn printable_ids_of_1_to_128_are_kept_as_they_are(id in "[!-~]{0,130}") {
            let valid = (1..=GROUP_ID_BYTES_MAX).contains(&id.len());
            let got = MessageGroupId::new(&id);
            prop_assert_eq!(got.is_ok(), valid);
            if let Ok(got) = got {
                prop_assert_eq!(got.as_str(), id.as_str());
            }
        }
    }
}
