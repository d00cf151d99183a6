//! Bounds-checked decoding, the decoder's and encoder's errors, and the small
//! writing helpers every message type shares.
//!
//! Every read goes through [`Reader`] (over the payload's [`Bytes`]) or
//! [`SliceReader`] (over borrowed bytes, for the entries of a batch), which
//! never panic and never read past their end: a short read is a
//! [`DecodeError::Truncated`] naming the field and the byte offset (from the
//! start of the payload). Slices share the frame's buffer, so bodies and keys
//! are never copied. Integers are fixed-width little-endian; nothing on the
//! wire is `usize`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{ErrorCode, WireError};

/// Why a payload could not be decoded. Offsets count from the start of the
/// payload (the byte after the request id).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload ended inside a field.
    #[error("truncated at byte {offset}: {field} needs {needed} more byte(s)")]
    Truncated {
        /// Where the field starts.
        offset: usize,
        /// How many more bytes the field needs.
        needed: usize,
        /// The field being read.
        field: &'static str,
    },
    /// Bytes are left after the last field.
    #[error("{count} trailing byte(s) at byte {offset}")]
    TrailingBytes {
        /// Where the unexpected bytes start.
        offset: usize,
        /// How many there are.
        count: usize,
    },
    /// A field holds a value the format does not allow (a reserved bit, a
    /// boolean other than 0 or 1, an unknown status code).
    #[error("malformed {field} at byte {offset}: {reason}")]
    InvalidValue {
        /// Where the field starts.
        offset: usize,
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A string field is not UTF-8.
    #[error("{field} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Where the string starts.
        offset: usize,
        /// The field.
        field: &'static str,
    },
    /// A queue name (or prefix) breaks the syntax (see [`QueueName`](crate::QueueName)).
    #[error(
        "{field} at byte {offset} is not a valid queue name (1 to 80 of [A-Za-z0-9_.-], at most one {{tag}})"
    )]
    InvalidQueueName {
        /// Where the name starts.
        offset: usize,
        /// The field.
        field: &'static str,
    },
    /// A well-formed field breaks a structural limit of the protocol (a dedup
    /// key above 128 bytes, more than 16 attributes, an attribute block above
    /// 4 KiB, an auth token above 1 KiB).
    #[error("{field} at byte {offset} is {len}, at most {max}")]
    TooLong {
        /// Where the field starts.
        offset: usize,
        /// The field.
        field: &'static str,
        /// Its length or count.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A well-formed field holds an argument the protocol rejects before the
    /// broker sees it (an empty batch, a receive of 0 messages).
    #[error("invalid {field} at byte {offset}: {reason}")]
    InvalidArgument {
        /// Where the field starts.
        offset: usize,
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A batch count above 1,024.
    #[error("{field} at byte {offset} is {count}, at most {max}")]
    BatchTooLarge {
        /// Where the count starts.
        offset: usize,
        /// The field.
        field: &'static str,
        /// The count on the wire.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The opcode names no operation of this kind (request or reply).
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The frame header's flags have a bit the opcode does not define.
    #[error(
        "flags {flags:#04x} of opcode {opcode:#04x}: bits {undefined:#04x} are not defined for it"
    )]
    UndefinedFlags {
        /// The request's opcode.
        opcode: u8,
        /// The flags byte as received.
        flags: u8,
        /// The bits the opcode does not define.
        undefined: u8,
    },
}

impl DecodeError {
    /// The error code a server answers this error with. None of these codes
    /// closes the connection: the frame was well delimited.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::Truncated { .. }
            | DecodeError::TrailingBytes { .. }
            | DecodeError::InvalidValue { .. }
            | DecodeError::InvalidUtf8 { .. }
            | DecodeError::UndefinedFlags { .. } => ErrorCode::Malformed,
            DecodeError::InvalidQueueName { .. }
            | DecodeError::TooLong { .. }
            | DecodeError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            DecodeError::BatchTooLarge { .. } => ErrorCode::BatchTooLarge,
            DecodeError::UnknownOpcode(_) => ErrorCode::UnknownOperation,
        }
    }

    /// The error as an ERROR reply carries it: [`Self::code`] and this
    /// error's text.
    #[must_use]
    pub fn to_wire_error(&self) -> WireError {
        WireError::new(self.code(), self.to_string())
    }
}

/// A value that cannot be put on the wire because it does not fit its length
/// or count field. The buffer is left as it was before the call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A length or count is wider than its wire field.
    #[error("{field} is {len}, the wire field holds at most {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// The value's length or count.
        len: usize,
        /// The largest value the field holds.
        max: usize,
    },
}

/// The fixed-width reads both readers offer, written once on top of their
/// `array`.
macro_rules! fixed_width_reads {
    () => {
        /// A `u8`.
        ///
        /// # Errors
        /// `Truncated` at the end.
        pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
            Ok(self.array::<1>(field)?[0])
        }

        /// A little-endian `u16`.
        ///
        /// # Errors
        /// `Truncated` when fewer than 2 bytes remain.
        pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
            self.array(field).map(u16::from_le_bytes)
        }

        /// A little-endian `u32`.
        ///
        /// # Errors
        /// `Truncated` when fewer than 4 bytes remain.
        pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
            self.array(field).map(u32::from_le_bytes)
        }

        /// A little-endian `u64`.
        ///
        /// # Errors
        /// `Truncated` when fewer than 8 bytes remain.
        pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
            self.array(field).map(u64::from_le_bytes)
        }

        /// A little-endian `u128`.
        ///
        /// # Errors
        /// `Truncated` when fewer than 16 bytes remain.
        pub fn u128(&mut self, field: &'static str) -> Result<u128, DecodeError> {
            self.array(field).map(u128::from_le_bytes)
        }
    };
}

/// A bounds-checked reader over a payload. Reads advance; a failed read
/// leaves the reader where it was.
#[derive(Clone, Debug)]
pub struct Reader {
    bytes: Bytes,
    pos: usize,
    /// Offset of `bytes[0]` in the outermost payload, for error messages.
    base: usize,
}

impl Reader {
    /// A reader over a whole payload.
    #[must_use]
    pub fn new(bytes: Bytes) -> Reader {
        Reader {
            bytes,
            pos: 0,
            base: 0,
        }
    }

    /// Offset of the next byte from the start of the outermost payload.
    #[must_use]
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes not read yet.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Whether every byte was read.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes as a slice sharing the payload's buffer (no copy),
    /// or `None` (and nothing consumed) when fewer remain.
    pub fn take(&mut self, n: usize) -> Option<Bytes> {
        if n > self.remaining() {
            return None;
        }
        let out = self.bytes.slice(self.pos..self.pos + n);
        self.pos += n;
        Some(out)
    }

    /// The next `n` bytes as a borrowed slice, or `None` when fewer remain.
    pub fn take_slice(&mut self, n: usize) -> Option<&[u8]> {
        if n > self.remaining() {
            return None;
        }
        let start = self.pos;
        self.pos += n;
        self.bytes.get(start..start + n)
    }

    /// [`Self::take`], failing with [`DecodeError::Truncated`] naming `field`.
    ///
    /// # Errors
    /// `Truncated` when fewer than `n` bytes remain.
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<Bytes, DecodeError> {
        let offset = self.offset();
        let remaining = self.remaining();
        self.take(n).ok_or_else(|| DecodeError::Truncated {
            offset,
            needed: n - remaining,
            field,
        })
    }

    /// Skips `n` bytes without creating a slice handle (no reference count
    /// is touched), for validating a region that is sliced out as a whole.
    ///
    /// # Errors
    /// `Truncated` when fewer than `n` bytes remain.
    pub fn skip(&mut self, n: usize, field: &'static str) -> Result<(), DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                offset: self.offset(),
                needed: n - self.remaining(),
                field,
            });
        }
        self.pos += n;
        Ok(())
    }

    /// A [`SliceReader`] over the bytes not read yet, reporting the same
    /// offsets; [`Self::skip`] past what it read to move on.
    #[must_use]
    pub fn slice_reader(&self) -> SliceReader<'_> {
        SliceReader {
            bytes: self.bytes.get(self.pos..).unwrap_or_default(),
            pos: 0,
            base: self.offset(),
        }
    }

    /// The reader's position in its own bytes, for [`Self::slice_since`].
    #[must_use]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes read since `position` (an earlier [`Self::position`]), as a
    /// slice sharing the payload's buffer.
    #[must_use]
    pub fn slice_since(&self, position: usize) -> Bytes {
        self.bytes.slice(position.min(self.pos)..self.pos)
    }

    /// A reader over the next `n` bytes, for a length-delimited region; its
    /// errors report offsets in the outer payload.
    ///
    /// # Errors
    /// `Truncated` when fewer than `n` bytes remain.
    pub fn sub(&mut self, n: usize, field: &'static str) -> Result<Reader, DecodeError> {
        let base = self.offset();
        let bytes = self.bytes(n, field)?;
        Ok(Reader {
            bytes,
            pos: 0,
            base,
        })
    }

    /// Everything not read yet (possibly empty).
    pub fn rest(&mut self) -> Bytes {
        let out = self.bytes.slice(self.pos..);
        self.pos = self.bytes.len();
        out
    }

    /// Checks that every byte was read.
    ///
    /// # Errors
    /// `TrailingBytes` when some are left.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                offset: self.offset(),
                count: self.remaining(),
            })
        }
    }

    /// The next `N` bytes as an array.
    ///
    /// # Errors
    /// `Truncated` when fewer than `N` bytes remain.
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let start = self.pos;
        match self.bytes.get(start..start.saturating_add(N)) {
            Some(s) => {
                let mut out = [0u8; N];
                out.copy_from_slice(s);
                self.pos = start + N;
                Ok(out)
            }
            None => Err(DecodeError::Truncated {
                offset: self.offset(),
                needed: N - self.remaining(),
                field,
            }),
        }
    }

    fixed_width_reads!();

    /// A `u8` that must be 0 or 1.
    ///
    /// # Errors
    /// `Truncated`, or `InvalidValue` for any other value.
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        let offset = self.offset();
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::InvalidValue {
                offset,
                field,
                reason: "must be 0 or 1",
            }),
        }
    }

    /// A string of `len` bytes that must be UTF-8, copied out.
    ///
    /// # Errors
    /// `Truncated` or `InvalidUtf8`.
    pub fn string(&mut self, len: usize, field: &'static str) -> Result<String, DecodeError> {
        let offset = self.offset();
        let bytes = self.bytes(len, field)?;
        match core::str::from_utf8(&bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(DecodeError::InvalidUtf8 { offset, field }),
        }
    }

    /// A string with a `u8` length prefix.
    ///
    /// # Errors
    /// `Truncated` or `InvalidUtf8`.
    pub fn string_u8(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let len = self.u8(field)?;
        self.string(len.into(), field)
    }

    /// A batch count (`u16`) that must be in `1 ..= max`.
    ///
    /// # Errors
    /// `Truncated`, `InvalidArgument` for 0, `BatchTooLarge` above `max`.
    pub(crate) fn batch_count(
        &mut self,
        field: &'static str,
        max: usize,
    ) -> Result<u16, DecodeError> {
        let offset = self.offset();
        let count = self.u16(field)?;
        if count == 0 {
            return Err(DecodeError::InvalidArgument {
                offset,
                field,
                reason: "must be at least 1",
            });
        }
        check_batch(offset, field, count.into(), max)?;
        Ok(count)
    }

    /// A reply's entry count (`u16`) that may be 0 but not above `max`.
    ///
    /// # Errors
    /// `Truncated`, or `BatchTooLarge` above `max`.
    pub(crate) fn reply_count(
        &mut self,
        field: &'static str,
        max: usize,
    ) -> Result<u16, DecodeError> {
        let offset = self.offset();
        let count = self.u16(field)?;
        check_batch(offset, field, count.into(), max)?;
        Ok(count)
    }
}

/// A bounds-checked reader over borrowed bytes: what a batch's entries are
/// parsed with, both to check them when the batch is decoded and to read
/// them afterwards, so each layout has one parser. Reads hand out slices of
/// the bytes (no copy, no reference count); errors name the field and the
/// offset from the start of the payload.
#[derive(Clone, Debug)]
pub struct SliceReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Offset of `bytes[0]` in the payload, for error messages.
    base: usize,
}

impl<'a> SliceReader<'a> {
    /// A reader over `bytes`, which start `base_offset` bytes into the
    /// payload.
    #[must_use]
    pub fn new(bytes: &'a [u8], base_offset: usize) -> SliceReader<'a> {
        SliceReader {
            bytes,
            pos: 0,
            base: base_offset,
        }
    }

    /// Offset of the next byte from the start of the payload.
    #[must_use]
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes read so far.
    #[must_use]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// `Truncated` (naming `field`) when fewer than `n` bytes remain; nothing
    /// is consumed then.
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        match self.bytes.get(start..start.saturating_add(n)) {
            Some(s) => {
                self.pos = start + n;
                Ok(s)
            }
            None => Err(DecodeError::Truncated {
                offset: self.offset(),
                needed: n - self.remaining(),
                field,
            }),
        }
    }

    /// The next `n` bytes, or `None` (nothing consumed) when fewer remain:
    /// for bytes checked before, where no error needs building.
    #[inline]
    pub fn next_slice(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    /// The next `N` bytes as an array, or `None` (nothing consumed) when
    /// fewer remain.
    #[inline]
    pub fn next_array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, _) = self.bytes.get(self.pos..)?.split_first_chunk::<N>()?;
        self.pos += N;
        Some(*head)
    }

    /// The fixed part of an entry, `fields` (name and width, in order,
    /// `N` bytes in all) read at once: one bounds check instead of one per
    /// field. When fewer than `N` bytes remain, the error is the one reading
    /// the fields one by one would give: `Truncated`, naming the first field
    /// cut short.
    ///
    /// # Errors
    /// `Truncated` when fewer than `N` bytes remain.
    pub fn head<const N: usize>(
        &mut self,
        fields: &[(&'static str, usize)],
    ) -> Result<[u8; N], DecodeError> {
        let remaining = self.remaining();
        if remaining >= N {
            return self.array(fields.first().map_or("", |f| f.0));
        }
        let mut start = 0;
        for &(field, width) in fields {
            if start + width > remaining {
                return Err(DecodeError::Truncated {
                    offset: self.offset() + start,
                    needed: start + width - remaining,
                    field,
                });
            }
            start += width;
        }
        // The widths add up to less than N: a wrong table, reported as the
        // last field cut short.
        Err(DecodeError::Truncated {
            offset: self.offset() + start,
            needed: N - remaining,
            field: fields.last().map_or("", |f| f.0),
        })
    }

    /// The next `N` bytes as an array.
    ///
    /// # Errors
    /// `Truncated` when fewer than `N` bytes remain.
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let s = self.take(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fixed_width_reads!();
}

fn check_batch(
    offset: usize,
    field: &'static str,
    count: usize,
    max: usize,
) -> Result<(), DecodeError> {
    if count > max {
        Err(DecodeError::BatchTooLarge {
            offset,
            field,
            count,
            max,
        })
    } else {
        Ok(())
    }
}

/// Capacity to reserve for `count` entries of at least `min_entry_bytes` wire
/// bytes each, when `remaining` bytes are left: never more entries than the
/// bytes could hold, so a forged count cannot make the decoder allocate.
pub(crate) fn capacity_for(count: usize, remaining: usize, min_entry_bytes: usize) -> usize {
    count.min(remaining / min_entry_bytes.max(1))
}

/// A length as a `u8` field.
pub(crate) fn len_u8(len: usize, field: &'static str) -> Result<u8, EncodeError> {
    u8::try_from(len).map_err(|_| EncodeError::TooLong {
        field,
        len,
        max: u8::MAX.into(),
    })
}

/// A length as a `u16` field.
pub(crate) fn len_u16(len: usize, field: &'static str) -> Result<u16, EncodeError> {
    u16::try_from(len).map_err(|_| EncodeError::TooLong {
        field,
        len,
        max: u16::MAX.into(),
    })
}

/// A length as a `u32` field.
pub(crate) fn len_u32(len: usize, field: &'static str) -> Result<u32, EncodeError> {
    u32::try_from(len).map_err(|_| EncodeError::TooLong {
        field,
        len,
        max: usize::try_from(u32::MAX).unwrap_or(usize::MAX),
    })
}

/// Writes a string with a `u8` length prefix.
pub(crate) fn put_string_u8(
    buf: &mut BytesMut,
    s: &str,
    field: &'static str,
) -> Result<(), EncodeError> {
    buf.put_u8(len_u8(s.len(), field)?);
    buf.put_slice(s.as_bytes());
    Ok(())
}

/// Writes a `u16` status: 0 for success, else the error code.
pub(crate) fn put_status(buf: &mut BytesMut, status: Result<(), crate::ErrorCode>) {
    buf.put_u16_le(match status {
        Ok(()) => 0,
        Err(code) => code.to_u16(),
    });
}

/// Reads a `u16` status: 0 is success, any other value must be a known code.
pub(crate) fn read_status(
    r: &mut Reader,
    field: &'static str,
) -> Result<Result<(), ErrorCode>, DecodeError> {
    let offset = r.offset();
    match r.u16(field)? {
        0 => Ok(Ok(())),
        v => match ErrorCode::from_u16(v) {
            Some(code) => Ok(Err(code)),
            None => Err(DecodeError::InvalidValue {
                offset,
                field,
                reason: "unknown error code",
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_tracks_offsets() {
        let mut r = Reader::new(Bytes::from_static(&[
            1, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9,
        ]));
        assert_eq!(r.u8("a"), Ok(1));
        assert_eq!(r.u16("b"), Ok(2));
        assert_eq!(r.u32("c"), Ok(3));
        assert_eq!(r.offset(), 7);
        assert_eq!(r.u64("d"), Ok(4));
        assert_eq!(
            r.u16("e"),
            Err(DecodeError::Truncated {
                offset: 15,
                needed: 1,
                field: "e"
            })
        );
        // A failed read consumes nothing.
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.u8("f"), Ok(9));
        assert!(r.finish().is_ok());
    }

    #[test]
    fn take_shares_the_buffer_and_sub_readers_report_outer_offsets() {
        let payload = Bytes::from_static(b"xxhello!");
        let mut r = Reader::new(payload.clone());
        assert!(r.take(2).is_some());
        let mut sub = r.sub(5, "s").unwrap();
        assert_eq!(sub.offset(), 2);
        let hello = sub.take(5).unwrap();
        assert_eq!(&hello[..], b"hello");
        assert_eq!(hello.as_ptr(), payload[2..].as_ptr(), "no copy");
        assert_eq!(
            sub.u8("t"),
            Err(DecodeError::Truncated {
                offset: 7,
                needed: 1,
                field: "t"
            })
        );
        assert_eq!(r.take(2), None);
        assert_eq!(
            r.finish(),
            Err(DecodeError::TrailingBytes {
                offset: 7,
                count: 1
            })
        );
    }

    #[test]
    fn booleans_strings_and_statuses_are_strict() {
        let mut r = Reader::new(Bytes::from_static(&[2, 2, 0xff, 0xfe, 0x10, 0x00]));
        assert!(matches!(r.bool("b"), Err(DecodeError::InvalidValue { .. })));
        assert!(matches!(
            r.string_u8("s"),
            Err(DecodeError::InvalidUtf8 { offset: 2, .. })
        ));
        let mut r = Reader::new(Bytes::from_static(&[0x10, 0x00, 0x99, 0x00]));
        assert_eq!(read_status(&mut r, "st"), Ok(Err(ErrorCode::HelloRequired)));
        assert!(matches!(
            read_status(&mut r, "st"),
            Err(DecodeError::InvalidValue { .. })
        ));
    }

    #[test]
    fn batch_counts_map_to_their_codes() {
        let mut r = Reader::new(Bytes::from_static(&[0, 0, 0x01, 0x04, 0x00, 0x04]));
        let zero = r.batch_count("count", 1024).unwrap_err();
        assert_eq!(zero.code(), ErrorCode::InvalidArgument);
        let big = r.batch_count("count", 1024).unwrap_err();
        assert_eq!(big.code(), ErrorCode::BatchTooLarge);
        assert_eq!(r.batch_count("count", 1024), Ok(1024));
    }

    #[test]
    fn capacity_never_exceeds_what_the_bytes_can_hold() {
        assert_eq!(capacity_for(1024, 30, 10), 3);
        assert_eq!(capacity_for(2, 30, 10), 2);
        assert_eq!(capacity_for(5, 30, 0), 5);
    }
}
