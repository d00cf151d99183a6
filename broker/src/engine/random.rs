//! The engine's randomness: a small deterministic PRNG seeded at
//! construction (no OS entropy here: the server supplies the seed, tests fix
//! it).

/// SplitMix64 to expand a seed, then xoshiro256** for the stream.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

/// One SplitMix64 step: used to derive independent values from one seed.
#[must_use]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole stream follows from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Rng {
        let mut st = seed;
        Rng {
            s: [
                splitmix64(&mut st),
                splitmix64(&mut st),
                splitmix64(&mut st),
                splitmix64(&mut st),
            ],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform value in `0 ..= max` (Lemire's multiply-shift; the bias is
    /// below 2^-32 for the ranges used here, which is irrelevant for jitter).
    pub fn below_inclusive(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        ((u128::from(self.next_u64()) * u128::from(max + 1)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_bounds_hold() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            let x = a.below_inclusive(10);
            assert_eq!(x, b.below_inclusive(10));
            assert!(x <= 10);
        }
        let mut c = Rng::new(8);
        assert_ne!(Rng::new(7).next_u64(), c.next_u64());
        assert_eq!(c.below_inclusive(0), 0);
    }
}
