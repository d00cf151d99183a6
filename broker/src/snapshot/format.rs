//! The snapshot file's pieces: the header, the checked readers and writers
//! of sections, and (re-exported from `error.rs`) the errors that name a
//! problem and its byte offset.
//! The layout is documented in ARCHITECTURE.md ("Snapshot file format").

use std::io::{self, Read, Write};

use sluice_protocol::limits::{
    DEDUP_KEY_BYTES_MAX, FRAME_BYTES_MAX_LIMIT, MESSAGE_ATTRIBUTES_BYTES_MAX, QUEUE_NAME_BYTES_MAX,
};

use super::crc32c::Crc32c;
pub use super::error::SnapshotError;
use crate::engine::limits::{PARTITIONS_MAX, SHARDS_MAX};
pub use crate::engine::section::{Counter, Out, SectionRead};

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"SLUICESN";
/// The format version this broker writes. Version 2 gave each queue's
/// attribute block a `u32` length (a queue's tags and annotations can pass
/// 64 KiB); version 3 added FIFO queues (a queue's kind in its attribute
/// block, a message's group in its record). Versions 1 and 2 are still
/// read.
pub const VERSION: u32 = 3;
/// The oldest format version this broker reads.
pub const VERSION_OLDEST: u32 = 1;
/// Bytes of the header before its section table.
pub const HEADER_FIXED_BYTES: usize = 80;
/// Bytes of one entry of the section table.
pub const SECTION_ENTRY_BYTES: usize = 28;
/// Section kind: the registry (keys, queues).
pub const KIND_REGISTRY: u32 = 1;
/// Section kind: one shard's messages and dedup entries.
pub const KIND_SHARD: u32 = 2;
/// Bytes a section reader reads from the file at a time.
pub const READ_BLOCK_BYTES: usize = 4 << 20;
/// Bytes a section writer gathers before it writes.
pub const WRITE_BLOCK_BYTES: usize = 4 << 20;

/// The limits a snapshot depends on, as the header records them: a file
/// from a broker built with other values is refused.
pub const LIMITS: [(&str, u64); 6] = [
    ("FRAME_BYTES_MAX_LIMIT", FRAME_BYTES_MAX_LIMIT as u64),
    (
        "MESSAGE_ATTRIBUTES_BYTES_MAX",
        MESSAGE_ATTRIBUTES_BYTES_MAX as u64,
    ),
    ("DEDUP_KEY_BYTES_MAX", DEDUP_KEY_BYTES_MAX as u64),
    ("QUEUE_NAME_BYTES_MAX", QUEUE_NAME_BYTES_MAX as u64),
    ("PARTITIONS_MAX", PARTITIONS_MAX as u64),
    ("SHARDS_MAX", SHARDS_MAX as u64),
];

/// One entry of the section table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section {
    /// [`KIND_REGISTRY`] or [`KIND_SHARD`].
    pub kind: u32,
    /// 0 for the registry, the shard's index for a shard.
    pub index: u32,
    /// Its first byte in the file.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// CRC32C of its bytes.
    pub crc: u32,
}

impl Section {
    /// "registry section" or "shard 3 section", for errors.
    #[must_use]
    pub fn describe(&self) -> String {
        match self.kind {
            KIND_REGISTRY => "registry section".to_owned(),
            _ => format!("shard {} section", self.index),
        }
    }
}

/// What the header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Shards of the broker that wrote it.
    pub shards: u16,
    /// Wall-clock Unix ms when it was written.
    pub saved_wall_ms: u64,
    /// Bytes of `--memory-max` its messages and dedup entries held.
    pub memory_bytes: u64,
    /// Messages in it.
    pub messages: u64,
    /// Queues in it.
    pub queues: u64,
    /// Its format version ([`VERSION`] when written by this broker).
    pub version: u32,
    /// The registry, then every shard in order.
    pub sections: Vec<Section>,
}

/// Offset of the memory figure in the header, for errors.
pub const MEMORY_BYTES_OFFSET: u64 = 48;
/// Offset of the queue count in the header, for errors.
pub const QUEUES_OFFSET: u64 = 64;

impl Header {
    /// Bytes of the header with `sections` table entries.
    #[must_use]
    pub fn len_for(sections: usize) -> usize {
        HEADER_FIXED_BYTES + SECTION_ENTRY_BYTES * sections + 4
    }

    /// The header's bytes, checksum last.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let len = Self::len_for(self.sections.len());
        let mut b = Vec::with_capacity(len);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        // At most 1 + SHARDS_MAX sections: far below 4 GiB.
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(&self.shards.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        for (_, v) in LIMITS {
            // Every limit fits 32 bits (checked at compile time below).
            b.extend_from_slice(&(v as u32).to_le_bytes());
        }
        b.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.memory_bytes.to_le_bytes());
        b.extend_from_slice(&self.saved_wall_ms.to_le_bytes());
        b.extend_from_slice(&self.queues.to_le_bytes());
        b.extend_from_slice(&self.messages.to_le_bytes());
        debug_assert_eq!(b.len(), HEADER_FIXED_BYTES);
        for s in &self.sections {
            b.extend_from_slice(&s.kind.to_le_bytes());
            b.extend_from_slice(&s.index.to_le_bytes());
            b.extend_from_slice(&s.offset.to_le_bytes());
            b.extend_from_slice(&s.len.to_le_bytes());
            b.extend_from_slice(&s.crc.to_le_bytes());
        }
        let crc = super::crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads and checks the header of a file of `file_len` bytes: magic,
    /// version, checksum, limits, and a section table that covers the rest
    /// of the file exactly (a registry section, then one per shard, in
    /// order, back to back).
    ///
    /// # Errors
    /// The first problem found, with its offset.
    pub fn read(r: &mut impl Read, file_len: u64) -> Result<Header, SnapshotError> {
        let mut fixed = [0u8; HEADER_FIXED_BYTES];
        // What the file has of the fixed part: the magic and the version
        // are judged before a short file is called truncated.
        let have = usize::try_from(file_len.min(HEADER_FIXED_BYTES as u64)).unwrap_or(0);
        read_prefix(r, &mut fixed[..have], 0, file_len, "header")?;
        let magic_len = have.min(MAGIC.len());
        if fixed[..magic_len] != MAGIC[..magic_len] {
            return Err(SnapshotError::BadMagic {
                found: fixed[..magic_len].to_vec(),
            });
        }
        if have >= 12 {
            let version = u32::from_le_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]);
            if !(VERSION_OLDEST..=VERSION).contains(&version) {
                return Err(SnapshotError::Version { found: version });
            }
        }
        if have < HEADER_FIXED_BYTES {
            return Err(SnapshotError::Truncated {
                offset: file_len,
                field: "header",
                needed: (HEADER_FIXED_BYTES - have) as u64,
            });
        }
        let u16_at = |o: usize| u16::from_le_bytes([fixed[o], fixed[o + 1]]);
        let u32_at =
            |o: usize| u32::from_le_bytes([fixed[o], fixed[o + 1], fixed[o + 2], fixed[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&fixed[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        let header_len = u32_at(12) as usize;
        let sections = u32_at(44) as usize;
        if sections == 0 || sections > 1 + SHARDS_MAX || header_len != Self::len_for(sections) {
            return Err(SnapshotError::invalid(
                12,
                "header length",
                format!(
                    "{header_len} bytes for {sections} section(s) (at most {}, and 76 + 28 per section)",
                    1 + SHARDS_MAX
                ),
            ));
        }
        let mut rest = vec![0u8; header_len - HEADER_FIXED_BYTES];
        read_prefix(
            r,
            &mut rest,
            HEADER_FIXED_BYTES as u64,
            file_len,
            "section table",
        )?;
        let (table, stored) = rest.split_at(rest.len() - 4);
        let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
        let mut crc = Crc32c::new();
        crc.update(&fixed);
        crc.update(table);
        if crc.value() != stored {
            return Err(SnapshotError::Checksum {
                what: "header".to_owned(),
                offset: 0,
                end: header_len as u64,
                stored,
                computed: crc.value(),
            });
        }
        for (i, (name, here)) in LIMITS.iter().enumerate() {
            let at = 20 + 4 * i;
            let file = u64::from(u32_at(at));
            if file != *here {
                return Err(SnapshotError::Limits {
                    offset: at as u64,
                    name,
                    file,
                    here: *here,
                });
            }
        }
        let shards = u16_at(16);
        if shards == 0 || usize::from(shards) > SHARDS_MAX || sections != 1 + usize::from(shards) {
            return Err(SnapshotError::invalid(
                16,
                "shards",
                format!(
                    "{shards} shard(s) with {sections} section(s): one section per shard and the registry's"
                ),
            ));
        }
        let out = Self::read_sections(table, header_len as u64, file_len)?;
        Ok(Header {
            shards,
            memory_bytes: u64_at(48),
            saved_wall_ms: u64_at(56),
            queues: u64_at(64),
            messages: u64_at(72),
            version,
            sections: out,
        })
    }

    /// Reads the section table (checksummed already): a registry section,
    /// then one per shard, in order, back to back from the end of the
    /// header (`header_len`) to the end of the file.
    fn read_sections(
        table: &[u8],
        header_len: u64,
        file_len: u64,
    ) -> Result<Vec<Section>, SnapshotError> {
        let mut out = Vec::with_capacity(table.len() / SECTION_ENTRY_BYTES);
        let mut next = header_len;
        for (i, e) in table.chunks_exact(SECTION_ENTRY_BYTES).enumerate() {
            let at = (HEADER_FIXED_BYTES + i * SECTION_ENTRY_BYTES) as u64;
            let w32 = |o: usize| u32::from_le_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]);
            let w64 = |o: usize| {
                let mut a = [0u8; 8];
                a.copy_from_slice(&e[o..o + 8]);
                u64::from_le_bytes(a)
            };
            let s = Section {
                kind: w32(0),
                index: w32(4),
                offset: w64(8),
                len: w64(16),
                crc: w32(24),
            };
            let (kind, index) = if i == 0 {
                (KIND_REGISTRY, 0)
            } else {
                // i <= SHARDS_MAX.
                (KIND_SHARD, (i - 1) as u32)
            };
            if s.kind != kind || s.index != index {
                return Err(SnapshotError::invalid(
                    at,
                    "section table",
                    format!(
                        "entry {i} is kind {} index {}, expected kind {kind} index {index}",
                        s.kind, s.index
                    ),
                ));
            }
            if s.offset != next {
                return Err(SnapshotError::invalid(
                    at + 8,
                    "section offset",
                    format!(
                        "{} section starts at {}, expected {next}",
                        s.describe(),
                        s.offset
                    ),
                ));
            }
            next = match s.offset.checked_add(s.len) {
                Some(end) if end <= file_len => end,
                _ => {
                    return Err(SnapshotError::Truncated {
                        offset: file_len,
                        field: "section",
                        needed: s.offset.saturating_add(s.len) - file_len,
                    });
                }
            };
            out.push(s);
        }
        if next != file_len {
            return Err(SnapshotError::invalid(
                next,
                "file length",
                format!("{} byte(s) after the last section", file_len - next),
            ));
        }
        Ok(out)
    }
}

const _: () = {
    let mut i = 0;
    while i < LIMITS.len() {
        assert!(LIMITS[i].1 <= u32::MAX as u64);
        i += 1;
    }
};

/// Reads `buf.len()` bytes at `offset` of a file of `file_len` bytes.
fn read_prefix(
    r: &mut impl Read,
    buf: &mut [u8],
    offset: u64,
    file_len: u64,
    field: &'static str,
) -> Result<(), SnapshotError> {
    let want = buf.len() as u64;
    if offset + want > file_len {
        return Err(SnapshotError::Truncated {
            offset: file_len,
            field,
            needed: offset + want - file_len,
        });
    }
    r.read_exact(buf)
        .map_err(|source| SnapshotError::Io { offset, source })
}

/// Writes a section: gathers bytes in blocks, checksums them and hands each
/// block to `W`. The first write error is kept and reported by
/// [`SectionWriter::finish`].
#[derive(Debug)]
pub struct SectionWriter<W: Write> {
    inner: W,
    buf: Vec<u8>,
    crc: Crc32c,
    written: u64,
    error: Option<io::Error>,
}

impl<W: Write> SectionWriter<W> {
    /// A writer into `inner`.
    pub fn new(inner: W) -> SectionWriter<W> {
        SectionWriter {
            inner,
            buf: Vec::with_capacity(WRITE_BLOCK_BYTES),
            crc: Crc32c::new(),
            written: 0,
            error: None,
        }
    }

    fn flush_block(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        self.crc.update(&self.buf);
        self.written += self.buf.len() as u64;
        if self.error.is_none() {
            if let Err(e) = self.inner.write_all(&self.buf) {
                self.error = Some(e);
            }
        }
        self.buf.clear();
    }

    /// Writes what is gathered; `(bytes, CRC32C)` of the whole section.
    ///
    /// # Errors
    /// The first write error.
    pub fn finish(mut self) -> io::Result<(u64, u32)> {
        self.flush_block();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.inner.flush()?;
        Ok((self.written, self.crc.value()))
    }
}

impl<W: Write> Out for SectionWriter<W> {
    fn put(&mut self, b: &[u8]) {
        if self.buf.len() + b.len() > WRITE_BLOCK_BYTES {
            self.flush_block();
        }
        if b.len() >= WRITE_BLOCK_BYTES {
            self.crc.update(b);
            self.written += b.len() as u64;
            if self.error.is_none() {
                if let Err(e) = self.inner.write_all(b) {
                    self.error = Some(e);
                }
            }
            return;
        }
        self.buf.extend_from_slice(b);
    }
    fn counting(&self) -> bool {
        false
    }
    fn skip(&mut self, n: u64) {
        debug_assert!(false, "skip({n}) on a writer");
    }
}

/// Reads one section: in blocks of [`READ_BLOCK_BYTES`], never past the
/// section's length, checksumming what it reads. Every read names its
/// field and fails with the byte offset rather than panic.
#[derive(Debug)]
pub struct SectionReader<R: Read> {
    inner: R,
    section: Section,
    buf: Vec<u8>,
    pos: usize,
    /// Bytes not yet read from `inner`.
    left: u64,
    crc: Crc32c,
}

impl<R: Read> SectionReader<R> {
    /// A reader of `section`, whose bytes `inner` yields from its start.
    pub fn new(inner: R, section: Section) -> SectionReader<R> {
        SectionReader {
            inner,
            section,
            buf: Vec::new(),
            pos: 0,
            left: section.len,
            crc: Crc32c::new(),
        }
    }

    /// The section.
    pub fn section(&self) -> &Section {
        &self.section
    }

    /// Makes `n` bytes available at `pos`.
    fn need(&mut self, n: usize, field: &'static str) -> Result<(), SnapshotError> {
        let have = self.buf.len() - self.pos;
        if have >= n {
            return Ok(());
        }
        if (n - have) as u64 > self.left {
            return Err(SnapshotError::Truncated {
                offset: self.offset(),
                field,
                needed: (n - have) as u64 - self.left,
            });
        }
        self.buf.drain(..self.pos);
        self.pos = 0;
        // At least what is needed, and a block when the section has it.
        let want =
            (n - have).max(READ_BLOCK_BYTES.min(usize::try_from(self.left).unwrap_or(usize::MAX)));
        let want = want.min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let at = self.offset() + have as u64;
        let start = self.buf.len();
        self.buf.resize(start + want, 0);
        if let Err(source) = self.inner.read_exact(&mut self.buf[start..]) {
            self.buf.truncate(start);
            return Err(if source.kind() == io::ErrorKind::UnexpectedEof {
                SnapshotError::Truncated {
                    offset: at,
                    field,
                    needed: want as u64,
                }
            } else {
                SnapshotError::Io { offset: at, source }
            });
        }
        self.crc.update(&self.buf[start..]);
        self.left -= want as u64;
        Ok(())
    }
}

impl<R: Read> SectionRead for SectionReader<R> {
    type Error = SnapshotError;

    /// The file offset of the next byte to read.
    fn offset(&self) -> u64 {
        (self.section.offset + self.section.len).saturating_sub(self.remaining())
    }

    /// Bytes of the section not yet consumed.
    fn remaining(&self) -> u64 {
        self.left + (self.buf.len() - self.pos) as u64
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// `Truncated` when the section has fewer.
    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&[u8], SnapshotError> {
        self.need(n, field)?;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Reads what is left of the section (bounded by its length) and
    /// compares the checksum. Called after a parse error too: a checksum
    /// that does not match is the better explanation.
    ///
    /// # Errors
    /// `Checksum`, or an i/o error reading the rest.
    fn verify(&mut self) -> Result<(), SnapshotError> {
        self.pos = self.buf.len();
        let mut guard = 0u64;
        while self.left > 0 && guard <= self.section.len / READ_BLOCK_BYTES as u64 + 1 {
            guard += 1;
            let n =
                usize::try_from(self.left.min(READ_BLOCK_BYTES as u64)).unwrap_or(READ_BLOCK_BYTES);
            self.need(n, "section")?;
            self.pos = self.buf.len();
        }
        let computed = self.crc.value();
        if computed != self.section.crc {
            return Err(SnapshotError::Checksum {
                what: self.section.describe(),
                offset: self.section.offset,
                end: self.section.offset + self.section.len,
                stored: self.section.crc,
                computed,
            });
        }
        Ok(())
    }

    /// Ends the section: every byte consumed, checksum right.
    ///
    /// # Errors
    /// Bytes left over, or `Checksum`.
    fn finish(&mut self) -> Result<(), SnapshotError> {
        let left = self.remaining();
        let at = self.offset();
        self.verify()?;
        if left > 0 {
            return Err(SnapshotError::invalid(
                at,
                "section end",
                format!(
                    "{left} byte(s) after the last record of the {}",
                    self.section.describe()
                ),
            ));
        }
        Ok(())
    }
}
