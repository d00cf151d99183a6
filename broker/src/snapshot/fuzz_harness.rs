//! The harness of the snapshot reader's fuzz target (`broker/fuzz`):
//! always compiled, so the target is one line and the harness is built and
//! tested with the library.
//!
//! Random bytes almost never carry the right CRC32C, so most inputs would
//! stop at the first checksum. [`load`] therefore reads each input twice:
//! as it is, and with every checksum the layout lets it find recomputed,
//! so that mutations reach the parser of every field behind them.

use super::format::{HEADER_FIXED_BYTES, SECTION_ENTRY_BYTES};
use super::{Source, check_within, crc32c::crc32c};

/// Memory budget of the fuzz target's scratch engine: small, so a lying
/// slot count is refused rather than allocated.
pub const MEMORY_MAX: u64 = 16 << 20;
/// Most shards the fuzz target builds.
pub const SHARDS_MAX: usize = 4;

/// Reads `data` as a snapshot, as is and with its checksums fixed. Any
/// outcome is fine but a panic (or a hang, or memory beyond the budget):
/// that is the finding.
pub fn load(data: &[u8]) {
    let wall = 1_800_000_000_000;
    let _ = check_within(Source::Bytes(data), wall, MEMORY_MAX, SHARDS_MAX);
    let mut fixed = data.to_vec();
    if fix_checksums(&mut fixed) {
        let _ = check_within(Source::Bytes(&fixed), wall, MEMORY_MAX, SHARDS_MAX);
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

/// Recomputes the CRC32C of every section the table points at within the
/// data, then the header's. False when there is no table to follow.
pub fn fix_checksums(data: &mut [u8]) -> bool {
    let Some(sections) = u32_at(data, 44) else {
        return false;
    };
    let sections = sections as usize;
    let Some(header_len) = sections
        .checked_mul(SECTION_ENTRY_BYTES)
        .and_then(|n| n.checked_add(HEADER_FIXED_BYTES + 4))
    else {
        return false;
    };
    if header_len > data.len() {
        return false;
    }
    for i in 0..sections {
        let at = HEADER_FIXED_BYTES + i * SECTION_ENTRY_BYTES;
        let (Some(offset), Some(len)) = (u64_at(data, at + 8), u64_at(data, at + 16)) else {
            return false;
        };
        let (Ok(offset), Ok(len)) = (usize::try_from(offset), usize::try_from(len)) else {
            continue;
        };
        let Some(end) = offset.checked_add(len) else {
            continue;
        };
        let Some(bytes) = data.get(offset..end) else {
            continue;
        };
        let crc = crc32c(bytes);
        data[at + 24..at + 28].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32c(&data[..header_len - 4]);
    data[header_len - 4..header_len].copy_from_slice(&crc.to_le_bytes());
    true
}
