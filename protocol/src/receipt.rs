//! The receipt: a fixed-size token naming one delivery of one message.

/// Bytes of a receipt on the wire.
pub const RECEIPT_BYTES: usize = 26;

/// A receipt names one delivery of one message: it stays valid until that
/// message is delivered again, deleted, dead-lettered, purged or dropped
/// (PROTOCOL.md §8). Laid out on the
/// wire as 26 bytes, little-endian:
///
/// | offset | width | field |
/// |---|---|---|
/// | 0 | 4 | queue incarnation |
/// | 4 | 2 | owner shard |
/// | 6 | 4 | slot |
/// | 10 | 4 | slot generation |
/// | 14 | 8 | delivery number |
/// | 22 | 4 | check (keyed hash of bytes 0..22, computed by the broker) |
///
/// Clients treat it as opaque; only the broker computes and verifies the
/// check, with a key chosen at random when it starts, so a receipt from an
/// earlier run or a forged one fails with `InvalidReceipt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Receipt {
    /// Incarnation of the queue the message was received from.
    pub incarnation: u32,
    /// Shard that owns the message.
    pub shard: u16,
    /// Slot of the message in its owner shard.
    pub slot: u32,
    /// Generation of the slot: bumped whenever the slot is reused.
    pub generation: u32,
    /// Delivery number of this delivery.
    pub delivery: u64,
    /// Keyed check over the other fields.
    pub check: u32,
}

impl Receipt {
    /// The receipt's 26 wire bytes.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; RECEIPT_BYTES] {
        let mut out = [0u8; RECEIPT_BYTES];
        out[0..4].copy_from_slice(&self.incarnation.to_le_bytes());
        out[4..6].copy_from_slice(&self.shard.to_le_bytes());
        out[6..10].copy_from_slice(&self.slot.to_le_bytes());
        out[10..14].copy_from_slice(&self.generation.to_le_bytes());
        out[14..22].copy_from_slice(&self.delivery.to_le_bytes());
        out[22..26].copy_from_slice(&self.check.to_le_bytes());
        out
    }

    /// A receipt from its wire bytes. Any 26 bytes parse; validity is the
    /// broker's to judge.
    #[must_use]
    pub fn from_bytes(b: &[u8; RECEIPT_BYTES]) -> Receipt {
        Receipt {
            incarnation: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            shard: u16::from_le_bytes([b[4], b[5]]),
            slot: u32::from_le_bytes([b[6], b[7], b[8], b[9]]),
            generation: u32::from_le_bytes([b[10], b[11], b[12], b[13]]),
            delivery: u64::from_le_bytes([b[14], b[15], b[16], b[17], b[18], b[19], b[20], b[21]]),
            check: u32::from_le_bytes([b[22], b[23], b[24], b[25]]),
        }
    }

    /// The bytes the check covers (everything but the check).
    #[must_use]
    pub fn checked_bytes(&self) -> [u8; RECEIPT_BYTES - 4] {
        let all = self.to_bytes();
        let mut out = [0u8; RECEIPT_BYTES - 4];
        out.copy_from_slice(&all[..RECEIPT_BYTES - 4]);
        out
    }

    /// Lower-case hex of the wire bytes: how people and the CLI pass receipts.
    #[must_use]
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; RECEIPT_BYTES * 2];
        for (pair, b) in hex.chunks_exact_mut(2).zip(self.to_bytes()) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 15)];
        }
        // Hex digits are ASCII.
        core::str::from_utf8(&hex).unwrap_or_default().to_owned()
    }

    /// Parses the hex form; `None` unless it is exactly 52 hex digits.
    #[must_use]
    pub fn from_hex(s: &str) -> Option<Receipt> {
        let s = s.as_bytes();
        if s.len() != RECEIPT_BYTES * 2 {
            return None;
        }
        // Each character's value by table, the faults gathered and looked
        // at once, without a branch a digit: every receipt a consumer
        // deletes is read here.
        let mut b = [0u8; RECEIPT_BYTES];
        let mut faults = 0;
        for (out, pair) in b.iter_mut().zip(s.chunks_exact(2)) {
            let (hi, lo) = (
                HEX_VALUE[usize::from(pair[0])],
                HEX_VALUE[usize::from(pair[1])],
            );
            faults |= hi | lo;
            *out = hi << 4 | lo;
        }
        (faults < 0x10).then(|| Receipt::from_bytes(&b))
    }
}

/// Each byte's value as a hex digit, either case; 0xff for a byte that is
/// none (any value from 0x10 up says so).
const HEX_VALUE: [u8; 256] = {
    let mut t = [0xff; 256];
    let mut d = 0u8;
    while d < 10 {
        t[(b'0' + d) as usize] = d;
        d += 1;
    }
    let mut d = 0u8;
    while d < 6 {
        t[(b'a' + d) as usize] = 10 + d;
        t[(b'A' + d) as usize] = 10 + d;
        d += 1;
    }
    t
};

/// A 128-bit message id, unique across restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MessageId(pub u128);

impl MessageId {
    /// The id's 16 wire bytes (little-endian).
    #[must_use]
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }
    /// An id from its wire bytes.
    #[must_use]
    pub fn from_bytes(b: [u8; 16]) -> MessageId {
        MessageId(u128::from_le_bytes(b))
    }
}

impl core::fmt::Display for MessageId {
    /// 32 lower-case hex digits, most significant first.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_bytes_and_hex_round_trip() {
        let r = Receipt {
            incarnation: 7,
            shard: 1,
            slot: 0xdead_beef,
            generation: 3,
            delivery: u64::MAX - 1,
            check: 0x0102_0304,
        };
        assert_eq!(Receipt::from_bytes(&r.to_bytes()), r);
        assert_eq!(Receipt::from_hex(&r.to_hex()), Some(r));
        assert_eq!(r.to_hex().len(), 52);
        let by_byte = r.to_bytes().iter().fold(String::new(), |mut s, b| {
            use core::fmt::Write;
            let _ = write!(s, "{b:02x}");
            s
        });
        assert_eq!(r.to_hex(), by_byte);
        assert_eq!(Receipt::from_hex(&r.to_hex().to_uppercase()), Some(r));
        assert_eq!(Receipt::from_hex("zz"), None);
        assert_eq!(Receipt::from_hex(&"g".repeat(52)), None);
    }

    #[test]
    fn a_receipt_with_one_character_that_is_no_digit_is_refused() {
        let hex = Receipt::from_bytes(&[0x5a; RECEIPT_BYTES]).to_hex();
        // Every byte that is no hex digit, at every place.
        let digits = b"0123456789abcdefABCDEF";
        for at in 0..hex.len() {
            for c in (0u8..=255).filter(|c| !digits.contains(c)) {
                let mut bad = hex.clone().into_bytes();
                bad[at] = c;
                let Ok(bad) = String::from_utf8(bad) else {
                    continue;
                };
                assert_eq!(Receipt::from_hex(&bad), None, "{c:#x} at {at}");
            }
        }
        // Mixed case reads as either.
        let mixed: String = hex
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        assert_eq!(Receipt::from_hex(&mixed), Receipt::from_hex(&hex));
    }
}
