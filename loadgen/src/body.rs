//! The message body the load generator sends: a fixed 32-byte header that
//! carries everything needed to measure latency and check correctness from
//! the body alone, padded to `--size`.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `SLG1` |
//! | 4 | 4 | run tag: random per pass, so a stray message is recognised |
//! | 8 | 8 | sequence number, unique within the pass |
//! | 16 | 8 | intended send time, ns since the pass's epoch |
//! | 24 | 8 | actual send time, ns since the pass's epoch |
//!
//! Integers are little-endian; the padding is `.` bytes.

/// Bytes taken by the header; the smallest `--size`.
pub const HEADER_BYTES: usize = 32;
const MAGIC: [u8; 4] = *b"SLG1";
const PAD: u8 = b'.';

/// What a body says about its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The pass's run tag.
    pub run_tag: u32,
    /// Sequence number within the pass.
    pub seq: u64,
    /// When the message was meant to be sent (ns since the pass's epoch).
    pub intended_ns: u64,
    /// When it was sent (ns since the pass's epoch).
    pub sent_ns: u64,
}

/// A body that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Shorter than the header.
    #[error("body of {0} bytes is shorter than the {HEADER_BYTES}-byte header")]
    Short(usize),
    /// The magic is wrong.
    #[error("body does not start with the load generator's magic")]
    Magic,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(raw)
}

/// Fills `buf` with a body of `size` bytes (at least [`HEADER_BYTES`]).
pub fn write_body(buf: &mut Vec<u8>, size: usize, stamp: Stamp) {
    assert!(
        size >= HEADER_BYTES,
        "size is validated against HEADER_BYTES"
    );
    buf.clear();
    buf.resize(size, PAD);
    put_header(buf, stamp);
}

/// Writes the header of `stamp` over the first [`HEADER_BYTES`] of `body`.
fn put_header(body: &mut [u8], stamp: Stamp) {
    body[0..4].copy_from_slice(&MAGIC);
    body[4..8].copy_from_slice(&stamp.run_tag.to_le_bytes());
    body[8..16].copy_from_slice(&stamp.seq.to_le_bytes());
    body[16..24].copy_from_slice(&stamp.intended_ns.to_le_bytes());
    body[24..32].copy_from_slice(&stamp.sent_ns.to_le_bytes());
}

/// A producer's buffer for one body, stamped again for every message it
/// sends. It always holds a whole body, so a new stamp of the same size
/// rewrites the header alone: the padding is written once.
#[derive(Clone, Debug, Default)]
pub struct BodyBuf(Vec<u8>);

impl BodyBuf {
    /// Makes the body of `stamp`, `size` bytes (at least [`HEADER_BYTES`]).
    pub fn stamp(&mut self, size: usize, stamp: Stamp) {
        if self.0.len() == size {
            put_header(&mut self.0, stamp);
        } else {
            write_body(&mut self.0, size, stamp);
        }
    }

    /// The body as last stamped (empty before the first stamp).
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
}

/// Rewrites the actual send time of a body made by [`write_body`], just
/// before it goes out.
pub fn set_sent(body: &mut [u8], sent_ns: u64) {
    body[24..32].copy_from_slice(&sent_ns.to_le_bytes());
}

/// Reads the header of a received body.
pub fn read_stamp(body: &[u8]) -> Result<Stamp, BodyError> {
    if body.len() < HEADER_BYTES {
        return Err(BodyError::Short(body.len()));
    }
    if body[..4] != MAGIC {
        return Err(BodyError::Magic);
    }
    let mut tag = [0u8; 4];
    tag.copy_from_slice(&body[4..8]);
    Ok(Stamp {
        run_tag: u32::from_le_bytes(tag),
        seq: u64_at(body, 8),
        intended_ns: u64_at(body, 16),
        sent_ns: u64_at(body, 24),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_padding() {
        let stamp = Stamp {
            run_tag: 0xdead_beef,
            seq: 42,
            intended_ns: 1_000,
            sent_ns: 2_000,
        };
        let mut buf = Vec::new();
        write_body(&mut buf, 100, stamp);
        assert_eq!(buf.len(), 100);
        assert!(buf[HEADER_BYTES..].iter().all(|&b| b == PAD));
        assert_eq!(read_stamp(&buf).unwrap(), stamp);
        set_sent(&mut buf, 3_000);
        assert_eq!(read_stamp(&buf).unwrap().sent_ns, 3_000);
        write_body(&mut buf, HEADER_BYTES, stamp);
        assert_eq!(buf.len(), HEADER_BYTES);
    }

    #[test]
    fn a_body_stamped_again_is_the_body_written_afresh() {
        let stamp = |seq| Stamp {
            run_tag: 7,
            seq,
            intended_ns: seq * 10,
            sent_ns: seq * 20,
        };
        let mut body = BodyBuf::default();
        assert!(body.as_slice().is_empty());
        let mut fresh = Vec::new();
        for (seq, size) in [(1, 100), (2, 100), (3, HEADER_BYTES), (4, 64), (5, 64)] {
            body.stamp(size, stamp(seq));
            write_body(&mut fresh, size, stamp(seq));
            assert_eq!(body.as_slice(), &fresh[..], "seq {seq}, size {size}");
            assert_eq!(read_stamp(body.as_slice()).unwrap(), stamp(seq));
        }
    }

    #[test]
    fn foreign_bodies_are_refused() {
        assert_eq!(read_stamp(b"short"), Err(BodyError::Short(5)));
        assert_eq!(read_stamp(&[0u8; 40]), Err(BodyError::Magic));
    }
}
