//! Writing a section around the page cache (`O_DIRECT`): the section's
//! whole 4 KiB blocks go straight from an aligned buffer to the disk, and
//! the partial blocks at its two ends (which it shares with its neighbours,
//! or the header) are handed back to be written through the page cache
//! once every shard is done. Sections stay back to back: the format does
//! not change. The save falls back to buffered writes when the file system
//! refuses `O_DIRECT`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::crc32c::Crc32c;
use super::format::{Out, WRITE_BLOCK_BYTES};

/// Alignment of `O_DIRECT` offsets, lengths and buffers: a page, which
/// covers every logical block size in use.
pub const ALIGN: usize = 4096;

const _: () = assert!(WRITE_BLOCK_BYTES % ALIGN == 0);

/// What a direct writer leaves to be written through the page cache.
#[derive(Debug, Default)]
pub struct Fragments(pub Vec<(u64, Vec<u8>)>);

/// A section writer whose aligned blocks bypass the page cache.
#[derive(Debug)]
pub struct DirectWriter<'f> {
    file: &'f File,
    /// The buffer, with room to align a window of `WRITE_BLOCK_BYTES`.
    mem: Vec<u8>,
    /// Where the aligned window starts in `mem`.
    base: usize,
    /// Bytes in the window.
    len: usize,
    /// File offset of the window's first byte (aligned once `head_left`
    /// is 0).
    pos: u64,
    /// The bytes before the section's first aligned offset.
    head: Vec<u8>,
    head_at: u64,
    head_left: usize,
    crc: Crc32c,
    written: u64,
    error: Option<io::Error>,
}

impl<'f> DirectWriter<'f> {
    /// A writer of a section starting at `offset` of `file` (opened with
    /// `O_DIRECT`).
    pub fn new(file: &'f File, offset: u64) -> DirectWriter<'f> {
        let mem = vec![0u8; WRITE_BLOCK_BYTES + ALIGN];
        let base = mem.as_ptr().align_offset(ALIGN).min(ALIGN);
        // Both below ALIGN: the cast and the sum are exact.
        let into_block = (offset % ALIGN as u64) as usize;
        let head_left = (ALIGN - into_block) % ALIGN;
        DirectWriter {
            file,
            mem,
            base,
            len: 0,
            pos: offset + head_left as u64,
            head: Vec::with_capacity(head_left),
            head_at: offset,
            head_left,
            crc: Crc32c::new(),
            written: 0,
            error: None,
        }
    }

    fn flush_window(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        if self.error.is_none() {
            let window = &self.mem[self.base..self.base + n];
            if let Err(e) = self.file.write_all_at(window, self.pos) {
                self.error = Some(e);
            }
        }
        self.pos += n as u64;
    }

    /// Writes the aligned rest; `(bytes, CRC32C, fragments)` of the
    /// section, the fragments to be written through the page cache.
    ///
    /// # Errors
    /// The first write error (`EINVAL` when the file system will not take
    /// direct writes: the caller saves again, buffered).
    pub fn finish(mut self) -> io::Result<(u64, u32, Fragments)> {
        let aligned = self.len / ALIGN * ALIGN;
        self.flush_window(aligned);
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let mut fragments = Vec::with_capacity(2);
        if !self.head.is_empty() {
            fragments.push((self.head_at, core::mem::take(&mut self.head)));
        }
        if self.len > aligned {
            let tail = self.mem[self.base + aligned..self.base + self.len].to_vec();
            fragments.push((self.pos, tail));
        }
        Ok((self.written, self.crc.value(), Fragments(fragments)))
    }
}

impl Out for DirectWriter<'_> {
    fn put(&mut self, mut b: &[u8]) {
        self.crc.update(b);
        self.written += b.len() as u64;
        if self.head_left > 0 {
            let n = self.head_left.min(b.len());
            self.head.extend_from_slice(&b[..n]);
            self.head_left -= n;
            b = &b[n..];
        }
        // Each turn fills the window or uses up `b`.
        while !b.is_empty() {
            let n = (WRITE_BLOCK_BYTES - self.len).min(b.len());
            let at = self.base + self.len;
            self.mem[at..at + n].copy_from_slice(&b[..n]);
            self.len += n;
            b = &b[n..];
            if self.len == WRITE_BLOCK_BYTES {
                self.flush_window(WRITE_BLOCK_BYTES);
                self.len = 0;
            }
        }
    }
    fn counting(&self) -> bool {
        false
    }
    fn skip(&mut self, n: u64) {
        debug_assert!(false, "skip({n}) on a writer");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direct writer into an ordinary file (no `O_DIRECT`): the blocks it
    /// writes and the fragments it hands back make up the section.
    #[test]
    fn blocks_and_fragments_make_up_the_section() {
        let dir = std::env::temp_dir().join(format!("sluice-direct-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        for (offset, len) in [
            (0u64, 10usize),
            (100, 5000),
            (4096, 8192),
            (77, WRITE_BLOCK_BYTES * 2 + 333),
        ] {
            let file = File::create(&path).unwrap();
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
            let mut w = DirectWriter::new(&file, offset);
            for piece in data.chunks(1000) {
                w.put(piece);
            }
            let (n, crc, frags) = w.finish().unwrap();
            for (at, bytes) in frags.0 {
                file.write_all_at(&bytes, at).unwrap();
            }
            assert_eq!(n, len as u64);
            assert_eq!(crc, super::super::crc32c::crc32c(&data));
            let got = std::fs::read(&path).unwrap();
            assert_eq!(
                &got[offset as usize..],
                &data[..],
                "offset {offset} len {len}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
