//! Lower-case hex, as SQS writes digests (MD5s, SHA-256s) and ids: one
//! table lookup per digit, not a formatter call per byte (a send and its
//! receive write two MD5s and two message ids each).

use core::fmt;

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `N` bytes of hex text (digits, and a UUID's dashes) kept inline: a
/// digest, a message id, a receipt handle on its way into a reply, made
/// and written without an allocation or a UTF-8 check.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct HexText<const N: usize>([u8; N]);

impl<const N: usize> HexText<N> {
    /// The lower-case hex of `bytes`, which are `N / 2` long (a shorter
    /// input leaves zeros after its digits; the callers' are exact).
    pub fn of(bytes: &[u8]) -> Self {
        let mut text = [b'0'; N];
        hex_into(&mut text, bytes);
        HexText(text)
    }

    /// `text` when it is `N` lower-case hex digits.
    pub fn parse(text: &[u8]) -> Option<Self> {
        let text: [u8; N] = text.try_into().ok()?;
        let mut words = text.chunks_exact(8);
        let whole = words.all(|w| {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            lower_hex_word(u64::from_le_bytes(b))
        });
        let rest = words.remainder();
        (whole && rest.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then_some(HexText(text))
    }

    /// Text already made of hex digits and dashes.
    pub fn from_ascii(text: [u8; N]) -> Self {
        debug_assert!(text.iter().all(|b| b.is_ascii_hexdigit() || *b == b'-'));
        HexText(text)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As a `&str` (a UTF-8 check: for the slow paths).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl<const N: usize> fmt::Debug for HexText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for HexText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<const N: usize> PartialEq<&str> for HexText<N> {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other.as_bytes()
    }
}

impl<const N: usize> serde::Serialize for HexText<N> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Whether all eight bytes of `w` are lower-case hex digits: ASCII, and
/// each in `0`..=`9` or `a`..=`f`. Adding `0x80 - c` to an ASCII byte sets
/// its top bit exactly when it is `c` or above, without a carry into the
/// next byte, so each bound is one addition for all eight. (A byte that
/// is not ASCII can carry into the next one; the word is refused for it
/// anyway.)
fn lower_hex_word(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    let at_least = |c: u8| w.wrapping_add((0x80 - u64::from(c)) * ONES);
    let digit = at_least(b'0') & !at_least(b'9' + 1);
    let letter = at_least(b'a') & !at_least(b'f' + 1);
    w & TOPS == 0 && (digit | letter) & TOPS == TOPS
}

/// Writes the lower-case hex of `bytes` into `out`, two digits a byte
/// (`out` is at least twice as long). Four bytes at a time in a word:
/// their nibbles spread a byte apart, and each turned into its digit by
/// adding `'0'`, and 39 more for the ones above 9 (found by adding 6,
/// which carries into bit 4 exactly for them).
pub(crate) fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const LOW: u64 = 0x0f0f_0f0f_0f0f_0f0f;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut words = out.chunks_exact_mut(8).zip(bytes.chunks_exact(4));
    for (digits, four) in &mut words {
        let mut b = [0u8; 4];
        b.copy_from_slice(four);
        let x = u64::from(u32::from_le_bytes(b));
        // Byte i at bytes 2i: its high nibble there, its low at 2i + 1.
        let x = (x | x << 16) & 0x0000_ffff_0000_ffff;
        let x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
        let nibbles = (x >> 4 | x << 8) & LOW;
        let above_9 = ((nibbles + 6 * ONES) >> 4) & ONES;
        let text = nibbles + u64::from(b'0') * ONES + above_9 * 39;
        digits.copy_from_slice(&text.to_le_bytes());
    }
    let done = bytes.len().min(out.len() / 2) / 4 * 4;
    for (pair, &b) in out[2 * done..].chunks_exact_mut(2).zip(&bytes[done..]) {
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

    #[test]
    fn hex_text_holds_its_digits_inline() {
        let t = HexText::<6>::of(&[0xAB, 0x01, 0xFF]);
        assert_eq!((t.as_str(), t.as_bytes()), ("ab01ff", &b"ab01ff"[..]));
        assert_eq!(t, "ab01ff");
        assert_eq!(format!("{t} {t:?}"), "ab01ff \"ab01ff\"");
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"ab01ff\"");
        let uuid = HexText::from_ascii(*b"0a-b");
        assert_eq!(uuid.as_str(), "0a-b");
        assert_eq!(HexText::<6>::parse(b"ab01ff"), Some(t));
        // Every byte at every place of a 32-digit (word-wise) text.
        let good = *b"0123456789abcdef0123456789abcdef";
        assert!(HexText::<32>::parse(&good).is_some());
        for at in 0..32 {
            for b in 0..=255u8 {
                let mut text = good;
                text[at] = b;
                let want = matches!(b, b'0'..=b'9' | b'a'..=b'f');
                let got = HexText::<32>::parse(&text).is_some();
                assert_eq!(got, want, "byte {b:#x} at {at}");
            }
        }
        for bad in [
            "ab01f",
            "ab01ff0",
            "AB01FF",
            "ab01fg",
            "ab-1ff",
            "ab01f\u{e9}",
        ] {
            assert_eq!(HexText::<6>::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
