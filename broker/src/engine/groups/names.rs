//! Group names compared: a send finds its group by name among many, and
//! most names are short.

/// Whether `a` and `b` hold the same bytes: a group's name compared with a
/// send's. Names of up to 8 bytes (most) in two loads each, without the
/// call a slice comparison makes.
#[inline]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let n = a.len();
    let le32 = |s: &[u8], at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_le_bytes(w)
    };
    match n {
        // The first four and the last four, which overlap where they agree.
        4..=8 => le32(a, 0) == le32(b, 0) && le32(a, n - 4) == le32(b, n - 4),
        _ => a == b,
    }
}

/// The first 8 bytes of `name`, zero-padded, as a little-endian word.
/// Names of 4 to 8 bytes in two loads (the first four and the last four,
/// which overlap where they agree), shorter ones byte by byte.
#[inline]
pub(super) fn head_of(name: &[u8]) -> u64 {
    let le32 = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&name[at..at + 4]);
        u64::from(u32::from_le_bytes(w))
    };
    match name.len() {
        n @ 4..=8 => le32(0) | le32(n - 4) << (8 * (n - 4)),
        0..=3 => name.iter().rev().fold(0, |h, &b| h << 8 | u64::from(b)),
        _ => {
            let mut w = [0u8; 8];
            w.copy_from_slice(&name[..8]);
            u64::from_le_bytes(w)
        }
    }
}
