//! CRC-32C (Castagnoli, the iSCSI and ext4 checksum: reflected polynomial
//! 0x82F63B78, initial value and final XOR all ones), the snapshot file's
//! checksum. The `crc32c` crate computes it, with the CPU's CRC32
//! instruction (SSE 4.2) when there is one: a snapshot checksums every byte
//! it writes and reads, and the table-driven form would cost more than the
//! rest of the save.

/// A running CRC-32C.
#[derive(Clone, Copy, Debug, Default)]
pub struct Crc32c(u32);

impl Crc32c {
    /// A checksum of nothing yet.
    #[must_use]
    pub const fn new() -> Crc32c {
        Crc32c(0)
    }

    /// Adds `data`.
    pub fn update(&mut self, data: &[u8]) {
        self.0 = ::crc32c::crc32c_append(self.0, data);
    }

    /// The checksum of everything added.
    #[must_use]
    pub const fn value(&self) -> u32 {
        self.0
    }
}

/// The CRC-32C of `data`.
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one bit at a time.
    fn reference(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn known_vectors() {
        // RFC 3720, B.4, and the usual check value.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn pieces_add_up_and_match_the_definition() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(crc32c(&data), reference(&data));
        for split in [0, 1, 7, 8, 9, 500, 999, 1000] {
            let mut c = Crc32c::new();
            c.update(&data[..split]);
            c.update(&data[split..]);
            assert_eq!(c.value(), crc32c(&data), "split at {split}");
        }
    }
}
