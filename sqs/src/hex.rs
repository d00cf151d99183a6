//! Lower-case hex, as SQS writes digests (MD5s, SHA-256s) and ids: one
//! table lookup per digit, not a formatter call per byte (a send and its
//! receive write two MD5s and two message ids each).

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Writes the lower-case hex of `bytes` into `out`, two digits a byte
/// (`out` is at least twice as long).
pub(crate) fn hex_into(out: &mut [u8], bytes: &[u8]) {
    for (pair, &b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
}

/// Appends the lower-case hex of `bytes` to `out`.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    // 32 bytes at a time through a buffer on the stack, appended as one
    // string: a `push` per digit costs more than the digit.
    let mut buf = [0u8; 64];
    for chunk in bytes.chunks(32) {
        hex_into(&mut buf, chunk);
        // Hex digits are ASCII.
        out.push_str(core::str::from_utf8(&buf[..2 * chunk.len()]).unwrap_or_default());
    }
}

/// The lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len());
    push_hex(&mut s, bytes);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_two_lower_case_digits() {
        let all: Vec<u8> = (0..=255).chain(0..=40).collect();
        let want = all.iter().fold(String::new(), |mut s, b| {
            use core::fmt::Write;
            let _ = write!(s, "{b:02x}");
            s
        });
        assert_eq!(hex(&all), want);
        let mut s = "x".to_owned();
        push_hex(&mut s, &[0xAB, 0x01]);
        assert_eq!(s, "xab01");
        assert_eq!(hex(&[]), "");
    }
}
