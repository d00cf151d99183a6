//! The log's frames: what one group commit appends, and the scan that reads
//! a log back and tells a torn end from corruption.
//!
//! A frame is a head and a payload:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic, `SWLF` |
//! | 4..8 | payload length, `u32` LE, at most [`FRAME_PAYLOAD_MAX`] |
//! | 8..16 | sequence number, `u64` LE: the previous frame's plus one |
//! | 16..20 | CRC32C of bytes 4..16 and the payload, `u32` LE |
//! | 20.. | payload: the records of one shard-loop iteration |
//!
//! The rule the scan relies on, which the log's writer (still to come)
//! must keep: one frame per commit, and the next frame's write submitted
//! only once the previous frame's sync has completed. Then a frame that
//! reads whole, in sequence, after one that does not proves that the bad
//! one was synced before it, and so acknowledged: that is corruption (the
//! bytes changed after they were written), and the start stops there. A
//! bad frame that no good frame follows is the commit the crash cut short,
//! whose requests were never answered in `always` mode: a torn end, cut off.

use crate::snapshot::crc32c::Crc32c;

/// A frame's first four bytes.
pub const FRAME_MAGIC: [u8; 4] = *b"SWLF";

/// Bytes of a frame's head.
pub const FRAME_HEAD_BYTES: usize = 20;

/// The largest payload a frame holds (a commit of 64 MiB of records; the
/// writer starts a new frame before it would grow past it).
pub const FRAME_PAYLOAD_MAX: usize = 64 << 20;

/// Appends a frame of `payload`, sequence number `seq`, to `out`.
///
/// # Panics
/// When `payload` is longer than [`FRAME_PAYLOAD_MAX`]: the writer never
/// builds such a frame.
pub fn encode_frame(seq: u64, payload: &[u8], out: &mut Vec<u8>) {
    assert!(
        payload.len() <= FRAME_PAYLOAD_MAX,
        "a frame's payload past the limit"
    );
    // At most FRAME_PAYLOAD_MAX, which fits a u32.
    let len = (payload.len() as u32).to_le_bytes();
    let seq = seq.to_le_bytes();
    let crc = checksum(len, seq, payload);
    out.reserve(FRAME_HEAD_BYTES + payload.len());
    out.extend_from_slice(&FRAME_MAGIC);
    out.extend_from_slice(&len);
    out.extend_from_slice(&seq);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
}

/// The head of a frame, sequence number `seq`, whose payload is `parts`
/// one after the other (written after it as they are: no copy).
///
/// # Panics
/// When the parts are longer than [`FRAME_PAYLOAD_MAX`] together.
#[must_use]
pub fn frame_head(seq: u64, parts: &[&[u8]]) -> [u8; FRAME_HEAD_BYTES] {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    assert!(
        total <= FRAME_PAYLOAD_MAX,
        "a frame's payload past the limit"
    );
    // At most FRAME_PAYLOAD_MAX, which fits a u32.
    let len = (total as u32).to_le_bytes();
    let seq = seq.to_le_bytes();
    let mut c = Crc32c::new();
    c.update(&len);
    c.update(&seq);
    for p in parts {
        c.update(p);
    }
    let mut head = [0u8; FRAME_HEAD_BYTES];
    head[..4].copy_from_slice(&FRAME_MAGIC);
    head[4..8].copy_from_slice(&len);
    head[8..16].copy_from_slice(&seq);
    head[16..].copy_from_slice(&c.value().to_le_bytes());
    head
}

fn checksum(len: [u8; 4], seq: [u8; 8], payload: &[u8]) -> u32 {
    let mut c = Crc32c::new();
    c.update(&len);
    c.update(&seq);
    c.update(payload);
    c.value()
}

/// A frame read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Where it starts, in the file.
    pub offset: u64,
    pub seq: u64,
    pub payload: &'a [u8],
}

/// How a log's good frames end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// At the end of the bytes.
    Clean,
    /// At a bad frame that no good frame follows: the commit a crash cut
    /// short. The log is to be cut at `offset`.
    Torn {
        offset: u64,
        /// What is wrong with the frame there.
        why: &'static str,
    },
}

/// A log read back: its good frames, in order, and how they end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan<'a> {
    pub frames: Vec<Frame<'a>>,
    pub end: End,
}

impl Scan<'_> {
    /// The sequence number the next frame takes.
    #[must_use]
    pub fn next_seq(&self, first_seq: u64) -> u64 {
        self.frames.last().map_or(first_seq, |f| f.seq + 1)
    }
}

/// A log whose bytes changed after they were synced: a bad frame with a
/// good one after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "corrupt log: the frame at byte {offset} is bad ({why}), and a good frame follows at byte {next_good}; the log was synced past it, so it is not a torn end"
)]
pub struct Corrupt {
    /// Where the bad frame starts.
    pub offset: u64,
    pub why: &'static str,
    /// Where the first good frame after it starts.
    pub next_good: u64,
}

/// What reading a frame at some place found.
enum Read<'a> {
    Good(Frame<'a>),
    Bad(&'static str),
}

/// The frame at `at` of `bytes` (the file's bytes from `base` on), if it
/// is a good one with sequence number `seq`.
fn read_at(bytes: &[u8], base: u64, at: usize, seq: u64) -> Read<'_> {
    let Some(head) = bytes
        .get(at..)
        .and_then(|rest| rest.first_chunk::<FRAME_HEAD_BYTES>())
    else {
        return Read::Bad("the head is cut short");
    };
    if head[0..4] != FRAME_MAGIC {
        return Read::Bad("no frame magic");
    }
    let field = |from: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[from..from + 8]);
        u64::from_le_bytes(b)
    };
    let len_bytes = [head[4], head[5], head[6], head[7]];
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > FRAME_PAYLOAD_MAX {
        return Read::Bad("a payload length past the limit");
    }
    let found_seq = field(8);
    let stored = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
    let start = at + FRAME_HEAD_BYTES;
    let Some(payload) = bytes.get(start..start + len) else {
        return Read::Bad("the payload is cut short");
    };
    if checksum(len_bytes, found_seq.to_le_bytes(), payload) != stored {
        return Read::Bad("the checksum does not match");
    }
    if found_seq != seq {
        return Read::Bad("out of sequence");
    }
    Read::Good(Frame {
        offset: base + at as u64,
        seq,
        payload,
    })
}

/// Reads the frames of `bytes`, the file's bytes from offset `base` on,
/// the first with sequence number `first_seq`.
///
/// # Errors
/// [`Corrupt`] when a bad frame has a good one after it (a frame in
/// sequence after the last good one, found by its magic anywhere past the
/// bad one's start).
pub fn scan(bytes: &[u8], base: u64, first_seq: u64) -> Result<Scan<'_>, Corrupt> {
    scan_synced(bytes, base, first_seq, &|_| Some(u64::MAX))
}

/// [`scan`] for a writer that may write frames before the earlier ones
/// are synced (`batch`): `synced_of` reads from a frame's payload the
/// highest sequence number that was synced when the frame was written. A
/// bad frame is corruption only when a good frame after it says it was
/// synced by then; otherwise it is a torn end (a crash of the machine kept
/// some later frames and lost it), and the scan ends before it.
///
/// # Errors
/// [`Corrupt`] as above.
pub fn scan_synced<'a>(
    bytes: &'a [u8],
    base: u64,
    first_seq: u64,
    synced_of: &dyn Fn(&[u8]) -> Option<u64>,
) -> Result<Scan<'a>, Corrupt> {
    let mut frames = Vec::new();
    let mut at = 0;
    let mut seq = first_seq;
    while at < bytes.len() {
        match read_at(bytes, base, at, seq) {
            Read::Good(f) => {
                at += FRAME_HEAD_BYTES + f.payload.len();
                seq += 1;
                frames.push(f);
            }
            Read::Bad(why) => {
                let offset = base + at as u64;
                return match good_after(bytes, base, at, seq, synced_of) {
                    Some(next_good) => Err(Corrupt {
                        offset,
                        why,
                        next_good,
                    }),
                    None => Ok(Scan {
                        frames,
                        end: End::Torn { offset, why },
                    }),
                };
            }
        }
    }
    Ok(Scan {
        frames,
        end: End::Clean,
    })
}

/// Where the first good frame after the bad one at `bad` starts that
/// says the bad one was synced when it was written, if any: one whose
/// sequence number is `seq` (the bad frame's) or later, and whose
/// `synced_of` is at least `seq`. Only read at start-up.
fn good_after(
    bytes: &[u8],
    base: u64,
    bad: usize,
    seq: u64,
    synced_of: &dyn Fn(&[u8]) -> Option<u64>,
) -> Option<u64> {
    let mut from = bad + 1;
    while let Some(found) = find_magic(bytes, from) {
        if let Some(later) = frame_seq_at(bytes, found).filter(|&s| s >= seq) {
            if let Read::Good(f) = read_at(bytes, base, found, later) {
                if synced_of(f.payload).is_some_and(|synced| synced >= seq) {
                    return Some(f.offset);
                }
            }
        }
        from = found + 1;
    }
    None
}

/// The sequence number a frame head at `at` claims.
fn frame_seq_at(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at + 8..at + 16)?;
    let mut s = [0u8; 8];
    s.copy_from_slice(b);
    Some(u64::from_le_bytes(s))
}

/// The first place at or after `from` where the frame magic starts.
fn find_magic(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    rest.windows(FRAME_MAGIC.len())
        .position(|w| w == FRAME_MAGIC)
        .map(|i| from + i)
}

#[cfg(test)]
mod tests;
