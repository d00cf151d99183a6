//! [`Batch`]: the entries of a SEND or the messages of a RECEIVE reply, held
//! as one checked wire-form slice of the frame and read through borrowed
//! views.
//!
//! A batch is decoded by parsing every entry once (which checks it) and
//! keeping the bytes; iterating parses them again with the same parser, now
//! on bytes known to be good, so reading a batch costs no allocation and no
//! reference-count traffic per entry whatever its size. (An entry may
//! also have a leaner reader for that second pass, [`BatchEntry::read`],
//! which skips the checks already made.) What differs
//! between the two batches is the layout of one entry: [`BatchEntry`],
//! implemented by [`SendEntry`] and [`ReceivedMessage`] (in `message.rs`),
//! each with one parser.
//!
//! [`SendEntry`]: crate::SendEntry
//! [`ReceivedMessage`]: crate::ReceivedMessage

use core::fmt;
use core::marker::PhantomData;

use bytes::{Bytes, BytesMut};

use crate::codec::{DecodeError, EncodeError, Reader, SliceReader, len_u16};

/// The layout of one entry of a [`Batch`]: the owned value (`Self`), the
/// view borrowed from a batch's bytes, and the one parser that reads (and
/// checks) a view.
pub trait BatchEntry: Sized {
    /// The entry borrowed from a batch's bytes.
    type Ref<'a>: Copy;
    /// What the entry count is called in encoding errors.
    const COUNT_FIELD: &'static str;

    /// Reads one entry at the reader's position, checking everything the
    /// protocol requires of it.
    ///
    /// # Errors
    /// What the entry's layout refuses, with the field and offset.
    fn parse<'a>(r: &mut SliceReader<'a>) -> Result<Self::Ref<'a>, DecodeError>;

    /// Reads one entry that [`parse`](Self::parse) accepted before, again:
    /// what iterating a decoded batch does. It must give what `parse` gives
    /// on those bytes; it may skip the checks, and answers `None` only on
    /// bytes `parse` refuses. By default it is `parse`.
    #[inline]
    fn read<'a>(r: &mut SliceReader<'a>) -> Option<Self::Ref<'a>> {
        Self::parse(r).ok()
    }

    /// Bytes of `entry` on the wire.
    fn encoded_len(entry: &Self::Ref<'_>) -> usize;

    /// Writes `entry` at the end of `buf`.
    ///
    /// # Errors
    /// `TooLong` when a length does not fit its wire field.
    fn encode(entry: &Self::Ref<'_>, buf: &mut BytesMut) -> Result<(), EncodeError>;

    /// `entry` as an owned value whose byte fields share `buf`'s memory
    /// where `entry` lies within it (no copy); a view of other memory is
    /// copied.
    fn share(buf: &Bytes, entry: Self::Ref<'_>) -> Self;
}

/// Bytes [`Batch::from_views`] reserves at most for the entries after the
/// one it is writing, guessed from that one's size.
const GUESS_BYTES_MAX: usize = 64 * 1024;

/// Entries of one layout, in wire form: `count` entries in one slice.
pub struct Batch<E: BatchEntry> {
    count: u16,
    raw: Bytes,
    entry: PhantomData<fn() -> E>,
}

impl<E: BatchEntry> Batch<E> {
    /// A batch of `views`, in order (their bytes are copied once).
    ///
    /// # Errors
    /// `TooLong` for more than 65,535 entries or a field too long for the
    /// wire.
    pub fn from_views<'a>(
        views: impl IntoIterator<Item = E::Ref<'a>>,
    ) -> Result<Self, EncodeError> {
        let mut views = views.into_iter();
        let mut raw = BytesMut::new();
        let mut count = 0usize;
        while let Some(v) = views.next() {
            let len = E::encoded_len(&v);
            if raw.capacity() - raw.len() < len {
                // Room for this entry and, guessed from its size, for the
                // ones the iterator says are left (up to a bound: a large
                // first entry says little of the rest): a batch of like
                // entries is written into one allocation, not a doubling
                // series.
                let guess = len.saturating_mul(views.size_hint().0);
                raw.reserve(len + guess.min(GUESS_BYTES_MAX));
            }
            E::encode(&v, &mut raw)?;
            count += 1;
        }
        Ok(Batch {
            count: len_u16(count, E::COUNT_FIELD)?,
            raw: raw.freeze(),
            entry: PhantomData,
        })
    }

    /// Checks `count` entries at the reader's position and takes them as one
    /// slice.
    pub(crate) fn decode(r: &mut Reader, count: u16) -> Result<Self, DecodeError> {
        let start = r.position();
        let used = {
            let mut s = r.slice_reader();
            for _ in 0..count {
                E::parse(&mut s)?;
            }
            s.position()
        };
        r.skip(used, E::COUNT_FIELD)?;
        Ok(Batch {
            count,
            raw: r.slice_since(start),
            entry: PhantomData,
        })
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count.into()
    }

    /// Number of entries, as the `u16` on the wire.
    #[must_use]
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The entries in wire form (without the count).
    #[must_use]
    pub fn wire_bytes(&self) -> &Bytes {
        &self.raw
    }

    /// The entries, in order, borrowed.
    #[must_use]
    pub fn iter(&self) -> BatchIter<'_, E> {
        BatchIter {
            reader: SliceReader::new(&self.raw, 0),
            left: self.count,
            entry: PhantomData,
        }
    }

    /// One entry (a view from [`Batch::iter`]) as an owned value sharing
    /// this batch's buffer: no copy, one reference count per byte field.
    #[must_use]
    pub fn share(&self, entry: E::Ref<'_>) -> E {
        E::share(&self.raw, entry)
    }

    /// Every entry as an owned value sharing this batch's buffer.
    #[must_use]
    pub fn to_owned_entries(&self) -> Vec<E> {
        self.iter().map(|e| self.share(e)).collect()
    }
}

impl<E: BatchEntry> Clone for Batch<E> {
    fn clone(&self) -> Self {
        Batch {
            count: self.count,
            raw: self.raw.clone(),
            entry: PhantomData,
        }
    }
}

impl<E: BatchEntry> Default for Batch<E> {
    fn default() -> Self {
        Batch {
            count: 0,
            raw: Bytes::new(),
            entry: PhantomData,
        }
    }
}

impl<E: BatchEntry> PartialEq for Batch<E> {
    fn eq(&self, other: &Self) -> bool {
        self.count == other.count && self.raw == other.raw
    }
}

impl<E: BatchEntry> Eq for Batch<E> {}

impl<E: BatchEntry> fmt::Debug for Batch<E>
where
    for<'a> E::Ref<'a>: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, E: BatchEntry> IntoIterator for &'a Batch<E> {
    type Item = E::Ref<'a>;
    type IntoIter = BatchIter<'a, E>;
    fn into_iter(self) -> BatchIter<'a, E> {
        self.iter()
    }
}

/// Iterator over a [`Batch`]'s entries, borrowed.
pub struct BatchIter<'a, E: BatchEntry> {
    reader: SliceReader<'a>,
    left: u16,
    entry: PhantomData<fn() -> E>,
}

impl<E: BatchEntry> Clone for BatchIter<'_, E> {
    fn clone(&self) -> Self {
        BatchIter {
            reader: self.reader.clone(),
            left: self.left,
            entry: PhantomData,
        }
    }
}

impl<E: BatchEntry> fmt::Debug for BatchIter<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchIter")
            .field("left", &self.left)
            .finish_non_exhaustive()
    }
}

impl<'a, E: BatchEntry> Iterator for BatchIter<'a, E> {
    type Item = E::Ref<'a>;
    fn next(&mut self) -> Option<E::Ref<'a>> {
        self.left = self.left.checked_sub(1)?;
        // The bytes were checked by the entry's parser when the batch was
        // decoded or built, so this cannot fail; if it did, the iteration
        // would simply end.
        E::read(&mut self.reader)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::from(self.left), Some(usize::from(self.left)))
    }
}

impl<E: BatchEntry> ExactSizeIterator for BatchIter<'_, E> {}

/// `part` as a `Bytes` sharing `buf`'s memory when it lies within `buf` (a
/// view cut from it: no copy), a copy otherwise, so a view of any other
/// buffer cannot make this panic.
pub(crate) fn share_slice(buf: &Bytes, part: &[u8]) -> Bytes {
    if part.is_empty() {
        // Wherever it points (an empty view, such as a message's absent
        // attributes, may point anywhere): nothing to share or copy.
        return Bytes::new();
    }
    let base = buf.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    match at.checked_sub(base) {
        Some(offset)
            if offset
                .checked_add(part.len())
                .is_some_and(|end| end <= buf.len()) =>
        {
            buf.slice(offset..offset + part.len())
        }
        _ => Bytes::copy_from_slice(part),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_slices_never_copy_and_foreign_ones_do() {
        let raw = Bytes::from_static(b"hello world");
        let part = &raw[6..];
        let shared = share_slice(&raw, part);
        assert_eq!(shared.as_ptr(), part.as_ptr());
        let foreign = share_slice(&raw, b"other");
        assert_eq!(&foreign[..], b"other");
        assert!(share_slice(&raw, &[]).is_empty());
    }
}
