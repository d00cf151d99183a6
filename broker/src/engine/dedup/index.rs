//! The map of a queue's dedup log: each live entry as its key's 32-bit hash
//! and the low 32 bits of its position in the log, found by hash and
//! confirmed by the caller against the entry's key.
//!
//! Open addressing with linear probing over 8-byte slots, each holding the
//! hash and the position side by side. A lookup reads the slot its hash
//! points at and the slots after it, usually within one cache line, and
//! compares whole 32-bit hashes, so the caller compares keys only on a
//! true match (or one in four billion). Because where a key's probe starts
//! is a plain function of its hash ([`PositionIndex::read_soon`]), a batch
//! can have the CPU fetch the slots of all its keys before it looks the
//! first one up: with minutes of keys, the table is far larger than the
//! cache, and these reads are most of what a dedup key costs.
//!
//! The table holds at most three quarters of its slots (an absent key's
//! probe then reads 8.5 slots on average, about two cache lines) and
//! doubles when it would hold more, moving each entry by its hash without
//! hashing a key again. A removal shifts the entries after it back into
//! the gap (no tombstones), so lookups stay as short as the table is full.

use super::spread;
use crate::engine::prefetch;

/// A slot that holds nothing. No entry is stored as this (see [`tag`]),
/// and a table's memory starts as it: zeroed, which the allocator gives
/// without writing it when it comes fresh from the kernel.
const EMPTY: u64 = 0;

/// Slots of a table's first allocation.
const SLOTS_MIN: usize = 16;

/// The hash an entry is stored and compared under: the key's, but that the
/// one value which would make a slot read as [`EMPTY`] is folded onto its
/// neighbour (which only makes the caller compare one more key, rarely).
fn tag(hash: u32) -> u32 {
    hash.max(1)
}

fn pack(hash: u32, low: u32) -> u64 {
    (u64::from(tag(hash)) << 32) | u64::from(low)
}

fn tag_of(slot: u64) -> u32 {
    // The high half: the shift leaves 32 bits.
    (slot >> 32) as u32
}

fn low_of(slot: u64) -> u32 {
    // The low half, by design.
    slot as u32
}

/// Where a probe for a key ended ([`PositionIndex::probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// The slot of the key's entry.
    Found(usize),
    /// The empty slot where an entry of the key goes.
    Vacant(usize),
}

/// The map (see the module docs).
#[derive(Debug, Default)]
pub(super) struct PositionIndex {
    slots: Box<[u64]>,
    len: usize,
}

impl PositionIndex {
    /// Entries held.
    #[cfg(any(test, feature = "test-util"))]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The slot where the probe for `hash` starts.
    fn home(&self, tag: u32) -> usize {
        // The high bits of the spread hash: `slots.len()` is a power of two
        // (at least SLOTS_MIN), so the shift is below 64 and the result a
        // slot index.
        let bits = self.slots.len().trailing_zeros();
        (spread(tag) >> (64 - bits)) as usize
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Hints that a probe for `hash` will read its first slot soon.
    #[inline]
    pub fn read_soon(&self, hash: u32) {
        if !self.slots.is_empty() {
            prefetch::read_soon(&self.slots[self.home(tag(hash))]);
        }
    }

    /// The slot of the entry with hash `hash` that `is` confirms (given
    /// its position's low bits), if there is one.
    pub fn find(&self, hash: u32, is: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        match self.scan(hash, is) {
            Slot::Found(i) => Some(i),
            Slot::Vacant(_) => None,
        }
    }

    /// [`PositionIndex::find`], or the empty slot an entry with hash
    /// `hash` goes to. Makes room for one more entry first, so the slot
    /// given stays valid for [`PositionIndex::put`] until the table changes
    /// otherwise.
    pub fn probe(&mut self, hash: u32, is: impl FnMut(u32) -> bool) -> Slot {
        self.reserve_one();
        self.scan(hash, is)
    }

    /// The probe for `hash` along the slots from its home, in a table that
    /// has some (and so an empty one: it is never full).
    fn scan(&self, hash: u32, mut is: impl FnMut(u32) -> bool) -> Slot {
        let t = tag(hash);
        let mask = self.mask();
        let mut i = self.home(t);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return Slot::Vacant(i);
            }
            if tag_of(s) == t && is(low_of(s)) {
                return Slot::Found(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The position's low bits that slot `i` holds.
    pub fn low_at(&self, i: usize) -> u32 {
        low_of(self.slots[i])
    }

    /// Points slot `i`, which holds an entry, at position `low`.
    pub fn set_low(&mut self, i: usize, low: u32) {
        let s = &mut self.slots[i];
        *s = (*s & !u64::from(u32::MAX)) | u64::from(low);
    }

    /// Puts an entry (`hash`, `low`) into slot `i`, a [`Slot::Vacant`] of
    /// the last probe for `hash`.
    pub fn put(&mut self, i: usize, hash: u32, low: u32) {
        debug_assert_eq!(self.slots[i], EMPTY, "put into a slot in use");
        self.slots[i] = pack(hash, low);
        self.len += 1;
    }

    /// Adds an entry (`hash`, `low`) that the table does not hold.
    pub fn insert(&mut self, hash: u32, low: u32) {
        self.reserve_one();
        let i = self.vacant_for(tag(hash));
        self.slots[i] = pack(hash, low);
        self.len += 1;
    }

    /// Removes the entry (`hash`, `low`), if the table holds it.
    pub fn remove(&mut self, hash: u32, low: u32) -> bool {
        match self.find(hash, |l| l == low) {
            Some(i) => {
                self.remove_at(i);
                true
            }
            None => false,
        }
    }

    /// The first empty slot from where a probe for `tag` starts.
    fn vacant_for(&self, tag: u32) -> usize {
        let mask = self.mask();
        let mut i = self.home(tag);
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        i
    }

    /// Empties slot `i` and shifts back into it each entry after it whose
    /// probe starts at or before it, so that every entry stays reachable
    /// from its home without crossing an empty slot.
    fn remove_at(&mut self, mut i: usize) {
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            let home = self.home(tag_of(s));
            // The entry at j may move to i when i is no further from its
            // home than j is (distances along the probe, wrapping).
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(i) & mask) {
                self.slots[i] = s;
                i = j;
            }
        }
        self.slots[i] = EMPTY;
        self.len -= 1;
    }

    /// Doubles the table (or makes its first) when one more entry would
    /// fill more than three quarters of it.
    fn reserve_one(&mut self) {
        let slots = self.slots.len();
        if (self.len + 1) * 4 <= slots * 3 {
            return;
        }
        let grown = (slots * 2).max(SLOTS_MIN);
        let old = core::mem::replace(&mut self.slots, vec![EMPTY; grown].into_boxed_slice());
        // As `vacant_for`, with the table's size read once.
        let (shift, mask) = (64 - grown.trailing_zeros(), grown - 1);
        let new = &mut self.slots;
        for s in old.iter().copied().filter(|&s| s != EMPTY) {
            // Below `grown`: the shift leaves its bits.
            let mut i = (spread(tag_of(s)) >> shift) as usize;
            while new[i] != EMPTY {
                i = (i + 1) & mask;
            }
            new[i] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A model of the index: every (hash, low) it holds.
    fn check(ix: &PositionIndex, model: &HashMap<u32, u32>) {
        assert_eq!(ix.len(), model.len());
        for (&low, &hash) in model {
            let i = ix.find(hash, |l| l == low).expect("an entry held is found");
            assert_eq!(ix.low_at(i), low);
        }
        let held = ix.slots.iter().filter(|&&s| s != EMPTY).count();
        assert_eq!(held, model.len(), "no slot holds a removed entry");
    }

    #[test]
    fn an_empty_index_finds_nothing() {
        let mut ix = PositionIndex::default();
        assert_eq!(ix.find(7, |_| true), None);
        assert!(!ix.remove(7, 0));
        ix.read_soon(7);
        assert_eq!(ix.len(), 0);
    }

    #[test]
    fn entries_are_found_by_hash_and_confirmed_by_position() {
        let mut ix = PositionIndex::default();
        ix.insert(5, 100);
        ix.insert(5, 101);
        ix.insert(9, 102);
        assert_eq!(ix.find(5, |l| l == 101).map(|i| ix.low_at(i)), Some(101));
        assert_eq!(ix.find(5, |l| l == 100).map(|i| ix.low_at(i)), Some(100));
        assert_eq!(ix.find(5, |l| l == 102), None, "another hash's entry");
        assert_eq!(ix.find(6, |_| true), None);
        let Slot::Found(i) = ix.probe(9, |l| l == 102) else {
            panic!("a held entry probes as found");
        };
        ix.set_low(i, 7);
        assert_eq!(ix.find(9, |_| true).map(|i| ix.low_at(i)), Some(7));
        let Slot::Vacant(v) = ix.probe(11, |_| true) else {
            panic!("an absent hash probes as vacant");
        };
        ix.put(v, 11, 8);
        assert_eq!(ix.len(), 4);
        assert!(ix.remove(5, 100));
        assert!(!ix.remove(5, 100), "removed once");
        assert_eq!(ix.find(5, |l| l == 101).map(|i| ix.low_at(i)), Some(101));
    }

    #[test]
    fn the_hash_that_would_read_as_empty_is_kept() {
        let mut ix = PositionIndex::default();
        ix.insert(0, 0);
        ix.insert(1, 3);
        assert_eq!(ix.len(), 2);
        assert!(ix.find(0, |l| l == 0).is_some());
        assert!(ix.find(1, |l| l == 3).is_some());
        assert!(ix.remove(0, 0));
        assert!(ix.find(1, |l| l == 3).is_some());
        assert!(ix.find(0, |l| l == 0).is_none());
    }

    /// Colliding hashes (a few values) force long clusters that wrap
    /// around the table's end; inserts and removes in a pseudo-random order
    /// keep every entry reachable and the model's count.
    #[test]
    fn removals_keep_clusters_reachable_as_the_table_grows() {
        let mut ix = PositionIndex::default();
        let mut model = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for low in 0..4_000_u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Eight hashes only, and some of the spread's extremes.
            let hash = match x % 10 {
                8 => u32::MAX,
                9 => 0,
                k => (k as u32).wrapping_mul(0x9e37_79b9),
            };
            ix.insert(hash, low);
            model.insert(low, hash);
            if x % 3 == 0 {
                let victim = low / 2;
                if let Some(h) = model.remove(&victim) {
                    assert!(ix.remove(h, victim));
                }
            }
            if low % 500 == 0 {
                check(&ix, &model);
            }
        }
        check(&ix, &model);
        let lows: Vec<u32> = model.keys().copied().collect();
        for low in lows {
            let h = model.remove(&low).expect("held");
            assert!(ix.remove(h, low));
        }
        check(&ix, &model);
    }

    #[test]
    fn the_table_stays_at_most_three_quarters_full() {
        let mut ix = PositionIndex::default();
        for i in 0..10_000_u32 {
            ix.insert(i.wrapping_mul(2_654_435_761), i);
            assert!(ix.len() * 4 <= ix.slots.len() * 3);
        }
        assert_eq!(ix.slots.len(), 16_384);
    }
}
