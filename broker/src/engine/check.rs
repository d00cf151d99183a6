//! The receipt check: a keyed SipHash-2-4 over the receipt's other 22 bytes,
//! truncated to 32 bits.
//!
//! The key is drawn from the run's seed when the [`Registry`] is built, so a
//! receipt minted by an earlier run of the broker (another key) or forged by a
//! client fails the check with overwhelming probability (2^-32 per guess).
//! Every shard of a run shares the key, so any shard can check any receipt
//! before forwarding it to its owner.
//!
//! [`Registry`]: super::Registry

use core::hash::Hasher;

use siphasher::sip::SipHasher24;
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

impl ReceiptKey {
    /// A key from two 64-bit halves (drawn from the run's seed).
    #[must_use]
    pub fn new(k0: u64, k1: u64) -> ReceiptKey {
        ReceiptKey { k0, k1 }
    }

    fn mac(&self, r: &Receipt) -> u32 {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write(&r.checked_bytes());
        // Truncation to the 32 bits the receipt carries is the point.
        h.finish() as u32
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
    fn another_key_rejects() {
        let r = ReceiptKey::new(1, 2).sign(receipt());
        assert!(!ReceiptKey::new(1, 3).verify(&r));
    }
}
