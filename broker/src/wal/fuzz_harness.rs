//! The harness of the log reader's fuzz target (`broker/fuzz`, `wal_scan`):
//! always compiled, so the target is one line and the harness is built and
//! tested with the library.
//!
//! Random bytes almost never carry the right CRC32C, so [`scan`] reads each
//! input twice: as it is, and with the checksum of every frame head it
//! finds recomputed, so that mutations reach the length, sequence and
//! resynchronising logic behind the checksum. It checks what any scan must
//! give, so that a wrong answer is a finding like a panic.

use super::frame::{self, FRAME_HEAD_BYTES, FRAME_MAGIC, FRAME_PAYLOAD_MAX};
use crate::snapshot::crc32c::Crc32c;

/// The sequence number the fuzz target's logs start at.
pub const FIRST_SEQ: u64 = 1;

/// Scans `data` as a log, as is and with its frames' checksums fixed,
/// and checks the outcome.
///
/// # Panics
/// When a scan breaks its promises: frames that overlap, leave a gap, lie
/// outside the bytes or break the sequence; a torn end or a corruption
/// named where no frame could start.
pub fn scan(data: &[u8]) {
    check(data);
    let mut fixed = data.to_vec();
    if fix_checksums(&mut fixed) {
        check(&fixed);
    }
}

fn check(data: &[u8]) {
    let base = 4096;
    let end = base + data.len() as u64;
    match frame::scan(data, base, FIRST_SEQ) {
        Ok(s) => {
            let mut at = base;
            for (i, f) in s.frames.iter().enumerate() {
                assert_eq!(f.offset, at, "frames follow one another");
                assert_eq!(f.seq, FIRST_SEQ + i as u64, "frames in sequence");
                at += (FRAME_HEAD_BYTES + f.payload.len()) as u64;
            }
            assert!(at <= end, "frames within the bytes");
            match s.end {
                frame::End::Clean => assert_eq!(at, end, "a clean end is the end"),
                frame::End::Torn { offset, .. } => {
                    assert_eq!(offset, at, "torn where the good frames end");
                    assert!(offset < end);
                }
            }
        }
        Err(e) => {
            assert!(e.offset >= base && e.offset < e.next_good && e.next_good < end);
        }
    }
}

/// Recomputes the checksum of every frame head whose payload lies within
/// `b`; returns whether any changed.
fn fix_checksums(b: &mut [u8]) -> bool {
    let mut changed = false;
    let mut at = 0;
    while at + FRAME_HEAD_BYTES <= b.len() {
        if b[at..at + 4] != FRAME_MAGIC {
            at += 1;
            continue;
        }
        let len = u32::from_le_bytes([b[at + 4], b[at + 5], b[at + 6], b[at + 7]]) as usize;
        let start = at + FRAME_HEAD_BYTES;
        if len <= FRAME_PAYLOAD_MAX && start + len <= b.len() {
            let mut c = Crc32c::new();
            c.update(&b[at + 4..at + 16]);
            c.update(&b[start..start + len]);
            let crc = c.value().to_le_bytes();
            changed |= b[at + 16..at + 20] != crc;
            b[at + 16..at + 20].copy_from_slice(&crc);
        }
        at += 1;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::frame::encode_frame;

    /// The fuzz target's seed: a log of three frames, as the tests write
    /// it (`SLUICE_WRITE_FUZZ_SEEDS=1` writes it again).
    fn seed() -> Vec<u8> {
        let mut b = Vec::new();
        for (i, p) in [&b""[..], b"one record", &[7u8; 100][..]]
            .iter()
            .enumerate()
        {
            encode_frame(FIRST_SEQ + i as u64, p, &mut b);
        }
        b
    }

    #[test]
    fn the_fuzz_seed_is_a_clean_log() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/seeds-wal/three-frames.log");
        if std::env::var_os("SLUICE_WRITE_FUZZ_SEEDS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, seed()).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk, seed(), "the seed file is the tests' log");
        let s = frame::scan(&on_disk, 0, FIRST_SEQ).unwrap();
        assert_eq!((s.frames.len(), s.end), (3, frame::End::Clean));
    }

    #[test]
    fn the_harness_takes_good_bad_and_fixed_logs() {
        let good = seed();
        scan(&good);
        scan(&[]);
        scan(&good[..good.len() - 1]);
        let mut flipped = good.clone();
        flipped[45] ^= 1;
        scan(&flipped);
        // A changed payload with its checksum fixed reads as good.
        let mut fixed = flipped.clone();
        assert!(fix_checksums(&mut fixed));
        assert!(!fix_checksums(&mut fixed.clone()));
        let s = frame::scan(&fixed, 0, FIRST_SEQ).unwrap();
        assert_eq!(s.frames.len(), 3);
    }
}
