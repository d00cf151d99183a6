//! The engine's side of a snapshot section: the two traits a shard writes
//! its state into and reads it back from, and the errors a shard finds in
//! what it reads. Pure data: bytes in, bytes out; no files, no threads.
//!
//! The snapshot (`crate::snapshot`) implements these traits over its files
//! (checksummed section writers and readers, direct writes, read-ahead
//! threads) and turns a [`SectionError`] into its own error, whose
//! messages are the same. The engine knows the layout of a shard's section
//! (`engine/shard/snapshot.rs`); it does not know where the bytes go.

/// Where serialized bytes go: a section writer, or a [`Counter`] that only
/// adds up their length (the first pass, which sizes each section).
pub trait Out {
    /// Appends `b`.
    fn put(&mut self, b: &[u8]);
    /// Whether bytes are only counted: data need not be fetched, only
    /// [`Out::skip`]ped.
    fn counting(&self) -> bool;
    /// Counts `n` bytes without giving them (only when counting).
    fn skip(&mut self, n: u64);
    /// Appends a `u8`.
    fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }
    /// Appends a little-endian `u16`.
    fn u16(&mut self, v: u16) {
        self.put(&v.to_le_bytes());
    }
    /// Appends a little-endian `u32`.
    fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    /// Appends a little-endian `u64`.
    fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }
    /// Appends a little-endian `u128`.
    fn u128(&mut self, v: u128) {
        self.put(&v.to_le_bytes());
    }
}

/// Counts bytes.
#[derive(Debug, Default)]
pub struct Counter(pub u64);

impl Out for Counter {
    fn put(&mut self, b: &[u8]) {
        self.0 += b.len() as u64;
    }
    fn counting(&self) -> bool {
        true
    }
    fn skip(&mut self, n: u64) {
        self.0 += n;
    }
}

/// What a shard finds wrong in its section. Every variant names the byte
/// offset (from the start of the file) where the problem lies.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SectionError {
    /// A field holds a value the format does not allow.
    #[error("invalid {field} at byte {offset}: {reason}")]
    Invalid {
        /// Where.
        offset: u64,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// More than `--memory-max` would hold.
    #[error(
        "its messages need {needs} bytes of memory (byte {offset}), more than --memory-max \
         ({max} bytes): raise --memory-max to load it"
    )]
    TooLarge {
        /// Where the figure is.
        offset: u64,
        /// What it needs.
        needs: u64,
        /// The budget.
        max: u64,
    },
}

impl SectionError {
    /// An [`SectionError::Invalid`].
    pub fn invalid(offset: u64, field: &'static str, reason: impl Into<String>) -> Self {
        SectionError::Invalid {
            offset,
            field,
            reason: reason.into(),
        }
    }
}

/// Reads one section: every read names its field and fails with the byte
/// offset rather than panic, never past the section's end. Its error is
/// the reader's own (which names truncation and i/o problems), and takes a
/// [`SectionError`] from the shard that parses it.
pub trait SectionRead {
    /// What a read, or the shard's parse, fails with.
    type Error: From<SectionError>;

    /// The file offset of the next byte to read.
    fn offset(&self) -> u64;

    /// Bytes of the section not yet consumed.
    fn remaining(&self) -> u64;

    /// The next `n` bytes.
    ///
    /// # Errors
    /// When the section has fewer (or they cannot be read).
    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&[u8], Self::Error>;

    /// Reads what is left of the section and compares its checksum. Called
    /// after a parse error too: a checksum that does not match is the
    /// better explanation.
    ///
    /// # Errors
    /// The checksum does not match, or the rest cannot be read.
    fn verify(&mut self) -> Result<(), Self::Error>;

    /// Ends the section: every byte consumed, checksum right.
    ///
    /// # Errors
    /// Bytes left over, or the checksum does not match.
    fn finish(&mut self) -> Result<(), Self::Error>;

    /// A `u8`.
    ///
    /// # Errors
    /// As [`SectionRead::bytes`].
    fn u8(&mut self, field: &'static str) -> Result<u8, Self::Error> {
        Ok(array::<1, _>(self, field)?[0])
    }

    /// A little-endian `u16`.
    ///
    /// # Errors
    /// As [`SectionRead::bytes`].
    fn u16(&mut self, field: &'static str) -> Result<u16, Self::Error> {
        Ok(u16::from_le_bytes(array(self, field)?))
    }

    /// A little-endian `u32`.
    ///
    /// # Errors
    /// As [`SectionRead::bytes`].
    fn u32(&mut self, field: &'static str) -> Result<u32, Self::Error> {
        Ok(u32::from_le_bytes(array(self, field)?))
    }

    /// A little-endian `u64`.
    ///
    /// # Errors
    /// As [`SectionRead::bytes`].
    fn u64(&mut self, field: &'static str) -> Result<u64, Self::Error> {
        Ok(u64::from_le_bytes(array(self, field)?))
    }

    /// A little-endian `u128`.
    ///
    /// # Errors
    /// As [`SectionRead::bytes`].
    fn u128(&mut self, field: &'static str) -> Result<u128, Self::Error> {
        Ok(u128::from_le_bytes(array(self, field)?))
    }
}

/// The next `N` bytes of `r`, as an array.
fn array<const N: usize, R: SectionRead + ?Sized>(
    r: &mut R,
    field: &'static str,
) -> Result<[u8; N], R::Error> {
    let mut a = [0u8; N];
    a.copy_from_slice(r.bytes(N, field)?);
    Ok(a)
}

/// A section held in memory, such as a write-ahead log frame's payload
/// (whose frame carries the checksum): [`SectionRead`] over a byte slice,
/// its offsets counted from `base`, a read past the end refused with the
/// offset.
#[derive(Debug)]
pub struct SliceRead<'a> {
    bytes: &'a [u8],
    at: usize,
    base: u64,
}

impl<'a> SliceRead<'a> {
    /// Reads `bytes`, whose first byte is at offset `base` of its file.
    #[must_use]
    pub fn new(bytes: &'a [u8], base: u64) -> SliceRead<'a> {
        SliceRead { bytes, at: 0, base }
    }
}

impl SectionRead for SliceRead<'_> {
    type Error = SectionError;

    fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.at) as u64
    }

    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&[u8], SectionError> {
        let Some(b) = self.bytes.get(self.at..).and_then(|rest| rest.get(..n)) else {
            return Err(SectionError::invalid(
                self.offset(),
                field,
                format!("{n} bytes wanted, {} left", self.remaining()),
            ));
        };
        self.at += n;
        Ok(b)
    }

    fn verify(&mut self) -> Result<(), SectionError> {
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SectionError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(SectionError::invalid(
                self.offset(),
                "end",
                format!("{n} bytes left over"),
            )),
        }
    }
}

/// Bytes gathered in memory: [`Out`] over a vector.
impl Out for Vec<u8> {
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn counting(&self) -> bool {
        false
    }
    fn skip(&mut self, _n: u64) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_reads_its_bytes_and_refuses_past_the_end() {
        let mut out = Vec::new();
        out.u8(1);
        out.u32(0x0403_0201);
        out.u64(9);
        let mut r = SliceRead::new(&out, 100);
        assert_eq!(r.u8("a").unwrap(), 1);
        assert_eq!(r.offset(), 101);
        assert_eq!(r.u32("b").unwrap(), 0x0403_0201);
        assert_eq!(r.remaining(), 8);
        let e = r.u128("c").unwrap_err().to_string();
        assert!(e.contains("byte 105") && e.contains("c"), "{e}");
        assert!(r.finish().is_err(), "8 bytes left");
        assert_eq!(r.u64("d").unwrap(), 9);
        r.finish().unwrap();
    }
}
