//! The engine's two hashes for its tables, chosen by who picks the keys.
//!
//! - Keys a client picks (dedup keys, message group ids) are hashed with
//!   [`KeyedHash`]: SipHash-1-3 under this process's random keys, so no
//!   client can choose keys that collide and turn a table's lookups into
//!   scans. It hashes the key's bytes in one pass, without the length
//!   prefix and buffered writes of the standard map's `Hash` path (half the
//!   instructions on a short key, the same function).
//! - Keys the engine picks (slot indexes, queue incarnations) are hashed
//!   with [`IndexHasher`]: one multiplication. No input can be chosen to
//!   collide, and SipHash would cost more than the lookup it serves.

use core::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::collections::HashMap;
use std::hash::RandomState;

use siphasher::sip::SipHasher13;

/// SipHash-1-3 of a byte string under this process's random keys (see the
/// [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyedHash {
    k0: u64,
    k1: u64,
}

impl KeyedHash {
    /// Fresh random keys: the standard library's per-process random state,
    /// drawn twice.
    pub fn new() -> KeyedHash {
        let state = RandomState::new();
        KeyedHash {
            k0: state.hash_one(0x6b30_u64),
            k1: state.hash_one(0x6b31_u64),
        }
    }

    /// The hash of `bytes`.
    #[inline]
    pub fn hash(&self, bytes: &[u8]) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(bytes);
        h.finish()
    }
}

impl Default for KeyedHash {
    fn default() -> KeyedHash {
        KeyedHash::new()
    }
}

/// The hash of an index the engine assigned (see the [module docs](self)):
/// one multiplication (Fibonacci hashing) per integer written.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(32) ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by indexes the engine assigned.
pub(crate) type IndexMap<K, V> = HashMap<K, V, BuildHasherDefault<IndexHasher>>;

#[cfg(test)]
mod tests {
    use core::hash::{BuildHasher, BuildHasherDefault};

    use siphasher::sip::SipHasher13;

    use super::{IndexHasher, IndexMap, KeyedHash};

    #[test]
    fn the_keyed_hash_is_siphash_1_3_of_the_bytes_under_its_keys() {
        let h = KeyedHash::new();
        for key in [&b""[..], b"g", b"order-42", &[7u8; 100]] {
            let mut want = SipHasher13::new_with_keys(h.k0, h.k1);
            core::hash::Hasher::write(&mut want, key);
            assert_eq!(h.hash(key), core::hash::Hasher::finish(&want));
        }
        assert_ne!(h.hash(b"a"), h.hash(b"b"));
    }

    #[test]
    fn each_keyed_hash_draws_its_own_keys() {
        let (a, b) = (KeyedHash::new(), KeyedHash::new());
        assert_ne!((a.k0, a.k1), (b.k0, b.k1));
        assert_ne!(a.hash(b"same"), b.hash(b"same"));
    }

    #[test]
    fn indexes_spread_over_the_table() {
        let b = BuildHasherDefault::<IndexHasher>::default();
        let mut low_bits: Vec<u64> = (0u32..64).map(|i| b.hash_one(i) >> 58).collect();
        low_bits.sort_unstable();
        low_bits.dedup();
        // 64 consecutive indexes land in most of the 64 top-bit buckets.
        assert!(low_bits.len() > 32, "{}", low_bits.len());
        let mut m: IndexMap<u32, u32> = IndexMap::default();
        for i in 0..1000 {
            m.insert(i, i * 2);
        }
        assert!((0..1000).all(|i| m.get(&i) == Some(&(i * 2))));
    }
}
