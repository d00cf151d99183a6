//! The engine's two hashes for its tables, chosen by who picks the keys.
//!
//! - Keys a client picks (dedup keys, message group ids) are hashed with
//!   [`KeyedHash`]: SipHash-1-3 under this process's random keys, so no
//!   client can choose keys that collide and turn a table's lookups into
//!   scans. It hashes the key's bytes in one pass, without the length
//!   prefix and buffered writes of the standard map's `Hash` path, from a
//!   state set up once from its keys, and reads the last bytes of a key in
//!   at most two loads (the same function as `siphasher`'s, in about 20
//!   fewer instructions on a key of a few bytes: a FIFO send hashes two).
//! - Keys the engine picks (slot indexes, queue incarnations) are hashed
//!   with [`IndexHasher`]: one multiplication. No input can be chosen to
//!   collide, and SipHash would cost more than the lookup it serves.

use core::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::collections::HashMap;
use std::hash::RandomState;

/// SipHash-1-3 of a byte string under this process's random keys (see the
/// [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyedHash {
    /// SipHash's state before the first byte, from the keys.
    v: [u64; 4],
    #[cfg(test)]
    k0: u64,
    #[cfg(test)]
    k1: u64,
}

impl KeyedHash {
    /// Fresh random keys: the standard library's per-process random state,
    /// drawn twice.
    pub fn new() -> KeyedHash {
        let state = RandomState::new();
        KeyedHash::with_keys(state.hash_one(0x6b30_u64), state.hash_one(0x6b31_u64))
    }

    /// The hash under keys `k0` and `k1`.
    fn with_keys(k0: u64, k1: u64) -> KeyedHash {
        KeyedHash {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            #[cfg(test)]
            k0,
            #[cfg(test)]
            k1,
        }
    }

    /// The hash of `bytes`: SipHash-1-3, one round a block of 8 bytes,
    /// the last block holding the bytes left and the length's low byte,
    /// then three rounds.
    #[inline]
    pub fn hash(&self, bytes: &[u8]) -> u64 {
        let [mut v0, mut v1, mut v2, mut v3] = self.v;
        let mut round = |m: u64| {
            v3 ^= m;
            sip_round(&mut v0, &mut v1, &mut v2, &mut v3);
            v0 ^= m;
        };
        let blocks = bytes.chunks_exact(8);
        let tail = blocks.remainder();
        for block in blocks {
            let mut b = [0u8; 8];
            b.copy_from_slice(block);
            round(u64::from_le_bytes(b));
        }
        // The length's low byte, by SipHash's definition.
        round(last_bytes(tail) | (bytes.len() as u64) << 56);
        v2 ^= 0xff;
        for _ in 0..3 {
            sip_round(&mut v0, &mut v1, &mut v2, &mut v3);
        }
        v0 ^ v1 ^ v2 ^ v3
    }
}

/// SipHash's round.
#[inline(always)]
fn sip_round(v0: &mut u64, v1: &mut u64, v2: &mut u64, v3: &mut u64) {
    *v0 = v0.wrapping_add(*v1);
    *v1 = v1.rotate_left(13) ^ *v0;
    *v0 = v0.rotate_left(32);
    *v2 = v2.wrapping_add(*v3);
    *v3 = v3.rotate_left(16) ^ *v2;
    *v0 = v0.wrapping_add(*v3);
    *v3 = v3.rotate_left(21) ^ *v0;
    *v2 = v2.wrapping_add(*v1);
    *v1 = v1.rotate_left(17) ^ *v2;
    *v2 = v2.rotate_left(32);
}

/// The bytes of `tail` (fewer than 8) as a little-endian integer, in at
/// most two loads: from 4 bytes on, the first four and the last four,
/// which overlap where they agree.
#[inline(always)]
fn last_bytes(tail: &[u8]) -> u64 {
    let n = tail.len();
    let le32 = |at: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&tail[at..at + 4]);
        u64::from(u32::from_le_bytes(b))
    };
    match n {
        4..=7 => le32(0) | le32(n - 4) << (8 * (n - 4)),
        // Bytes 0, n/2 and n-1 cover 1 to 3 bytes.
        1..=3 => {
            u64::from(tail[0])
                | u64::from(tail[n / 2]) << (8 * (n / 2))
                | u64::from(tail[n - 1]) << (8 * (n - 1))
        }
        _ => 0,
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
        // Every length from 0 to 3 blocks and past, each byte distinct, so
        // a byte read twice or in the wrong place changes the hash.
        let bytes: Vec<u8> = (1..=200u8).map(|i| i.wrapping_mul(37)).collect();
        for h in [
            KeyedHash::new(),
            KeyedHash::with_keys(0, 0),
            KeyedHash::with_keys(u64::MAX, 1),
        ] {
            for len in 0..=bytes.len() {
                let key = &bytes[..len];
                let mut want = SipHasher13::new_with_keys(h.k0, h.k1);
                core::hash::Hasher::write(&mut want, key);
                assert_eq!(
                    h.hash(key),
                    core::hash::Hasher::finish(&want),
                    "length {len}"
                );
            }
        }
        assert_ne!(KeyedHash::new().hash(b"a"), KeyedHash::new().hash(b"b"));
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
