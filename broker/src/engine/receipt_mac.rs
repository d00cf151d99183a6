//! The receipt check: a keyed SipHash-1-3 over the receipt's other 22 bytes,
//! truncated to 32 bits.
//!
//! The key is drawn from the run's seed when the [`Registry`] is built, so a
//! receipt minted by an earlier run of the broker (another key) or forged by a
//! client fails the check with overwhelming probability (2^-32 per guess).
//! Every shard of a run shares the key, so any shard can check any receipt
//! before forwarding it to its owner.
//!
//! # Threat model and the choice of SipHash-1-3
//!
//! The adversary is a network client without the key. It sees the receipts
//! of every delivery it receives (chosen inputs, in effect: it can make the
//! broker sign many slots, generations and delivery numbers) and may send
//! any 26 bytes as a receipt, each answered with `InvalidReceipt` or not: an
//! online oracle, one query per receipt sent. It must not be able to produce
//! a valid check for a receipt it was not given (to delete or lease messages
//! of others, or of an earlier delivery), so the MAC must be a PRF under a
//! 128-bit key whose key cannot be recovered from signed receipts.
//!
//! SipHash was designed for exactly this: a PRF for short inputs. SipHash-1-3
//! (one compression round per 8-byte block, three finalization rounds) is
//! the variant Rust's standard library uses to key its hash tables against
//! hash-flooding adversaries; no attack on it better than guessing the key is
//! published. It costs 6 SipRounds here (3 blocks) instead of SipHash-2-4's
//! 10, about half the instructions per receipt. The 32-bit truncation, not
//! the PRF, bounds forgery: 2^-32 per online guess, and guesses are receipts
//! the broker rejects (and the server can rate-limit or log). A keyed
//! multiply-xorshift mix or a plain hash would not do: invertible, so a
//! handful of signed receipts would give the key away.
//!
//! The 22 bytes are read as three little-endian words straight from the
//! receipt's fields, the same bytes `Receipt::checked_bytes` gives (a unit
//! test checks the result against the `siphasher` crate's SipHash-1-3).
//!
//! [`Registry`]: super::Registry

use sluice_protocol::Receipt;

/// The per-run key that signs and checks receipts.
#[derive(Clone, Copy)]
pub struct ReceiptKey {
    k0: u64,
    k1: u64,
}

impl core::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the key itself.
        f.write_str("ReceiptKey(..)")
    }
}

/// One SipRound.
#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

impl ReceiptKey {
    /// A key from two 64-bit halves (drawn from the run's seed).
    #[must_use]
    pub fn new(k0: u64, k1: u64) -> ReceiptKey {
        ReceiptKey { k0, k1 }
    }

    /// The key's two halves (for the snapshot file, which is therefore
    /// written with mode 0600).
    #[must_use]
    pub fn halves(&self) -> (u64, u64) {
        (self.k0, self.k1)
    }

    fn mac(&self, r: &Receipt) -> u32 {
        // The 22 checked bytes (incarnation 4, shard 2, slot 4, generation 4,
        // delivery 8; little-endian) as SipHash reads them: two whole words
        // and a last one with the length in its top byte.
        let slot = u64::from(r.slot);
        let m0 = u64::from(r.incarnation) | u64::from(r.shard) << 32 | (slot & 0xffff) << 48;
        let m1 = slot >> 16 | u64::from(r.generation) << 16 | (r.delivery & 0xffff) << 48;
        let m2 = r.delivery >> 16 | 22 << 56;
        let mut v = [
            self.k0 ^ 0x736f_6d65_7073_6575,
            self.k1 ^ 0x646f_7261_6e64_6f6d,
            self.k0 ^ 0x6c79_6765_6e65_7261,
            self.k1 ^ 0x7465_6462_7974_6573,
        ];
        for m in [m0, m1, m2] {
            v[3] ^= m;
            sip_round(&mut v);
            v[0] ^= m;
        }
        v[2] ^= 0xff;
        sip_round(&mut v);
        sip_round(&mut v);
        sip_round(&mut v);
        // Truncation to the 32 bits the receipt carries is the point.
        (v[0] ^ v[1] ^ v[2] ^ v[3]) as u32
    }

    /// Fills in the receipt's check.
    #[must_use]
    pub fn sign(&self, mut r: Receipt) -> Receipt {
        r.check = self.mac(&r);
        r
    }

    /// Whether the receipt's check is the one this key computes.
    #[must_use]
    pub fn verify(&self, r: &Receipt) -> bool {
        self.mac(r) == r.check
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt() -> Receipt {
        Receipt {
            incarnation: 3,
            shard: 1,
            slot: 42,
            generation: 7,
            delivery: 9,
            check: 0,
        }
    }

    #[test]
    fn signed_receipts_verify_and_any_changed_field_fails() {
        let key = ReceiptKey::new(1, 2);
        let r = key.sign(receipt());
        assert!(key.verify(&r));
        let changes: [fn(&mut Receipt); 6] = [
            |r| r.incarnation ^= 1,
            |r| r.shard ^= 1,
            |r| r.slot ^= 1,
            |r| r.generation ^= 1,
            |r| r.delivery ^= 1,
            |r| r.check ^= 1,
        ];
        for change in changes {
            let mut bad = r;
            change(&mut bad);
            assert!(!key.verify(&bad), "{bad:?}");
        }
    }

    #[test]
    fn the_check_is_siphash_1_3_of_the_checked_bytes() {
        use core::hash::Hasher;
        let mut r = receipt();
        for (k0, k1, delivery, slot) in [
            (1, 2, 9, 42),
            (u64::MAX, 7, u64::MAX, u32::MAX),
            (
                0x0123_4567_89ab_cdef,
                0xfedc_ba98_7654_3210,
                1 << 40,
                0x0001_ffff,
            ),
        ] {
            r.delivery = delivery;
            r.slot = slot;
            r.generation = slot.rotate_left(7);
            let mut h = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
            h.write(&r.checked_bytes());
            assert_eq!(ReceiptKey::new(k0, k1).mac(&r), h.finish() as u32);
        }
    }

    #[test]
    fn another_key_rejects() {
        let r = ReceiptKey::new(1, 2).sign(receipt());
        assert!(!ReceiptKey::new(1, 3).verify(&r));
    }
}
