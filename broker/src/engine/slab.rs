//! A slab of slots reused with a generation counter.
//!
//! Slots are stored in pages of [`PAGE_BYTES`] ([`Paged`]): growing adds a
//! page and never moves what is stored, so ten million messages are not
//! copied to a new buffer each time the count doubles, and no abandoned
//! buffer (the allocator does not always return one at once) or doubled
//! capacity stays behind.
//!
//! A slot's generation is bumped every time its occupant is removed, and
//! whenever the owner asks ([`Slab::bump`]: a message moving to another queue
//! is a new occupant as far as old receipts are concerned). A reference is a
//! `(slot, generation)` pair, so one taken before a reuse never reaches the
//! new occupant (no ABA) unless the slot is reused 2^32 times in between.

/// A key into a [`Slab`]: slot index and the generation it was taken at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlotKey {
    /// Slot index.
    pub slot: u32,
    /// Generation of the occupant.
    pub generation: u32,
}

/// Bytes of one page of a [`Paged`] store: an allocation size that
/// allocators serve without rounding up.
pub const PAGE_BYTES: usize = 64 * 1024;

/// The sizes from 32 KiB to 64 KiB the allocator (mimalloc) serves without
/// rounding up are the multiples of 8 KiB.
const ROUND_PAGE_BYTES: usize = 8 * 1024;

/// A growable array in pages of [`PAGE_BYTES`]: what it stores never moves.
#[derive(Debug)]
pub struct Paged<T> {
    pages: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Paged<T> {
    fn default() -> Self {
        Paged {
            pages: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Paged<T> {
    /// Values per page: as many as a page holds, or the power of two below
    /// that when its values fill a size the allocator serves as it is (a
    /// multiple of [`ROUND_PAGE_BYTES`]; a 24-byte value's pages are then
    /// 48 KiB), since an index then finds its page and place with a shift
    /// and a mask instead of a division.
    const SLOTS: usize = {
        let size = core::mem::size_of::<T>();
        if size == 0 {
            PAGE_BYTES
        } else if size >= PAGE_BYTES {
            1
        } else {
            let fit = PAGE_BYTES / size;
            let pow2 = 1 << (usize::BITS - 1 - fit.leading_zeros());
            if (pow2 * size) % ROUND_PAGE_BYTES == 0 {
                pow2
            } else {
                fit
            }
        }
    };

    /// Values stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it stores nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `value` at index `len()`.
    pub fn push(&mut self, value: T) {
        if self.len % Self::SLOTS == 0 {
            self.pages.push(Vec::with_capacity(Self::SLOTS));
        }
        let page = self.len / Self::SLOTS;
        self.pages[page].push(value);
        self.len += 1;
    }

    /// Page and place of index `i`, in 32-bit arithmetic (cheaper than
    /// 64-bit division by a constant): the stores hold fewer than 2^32
    /// values (the slab and the side tables index with `u32`).
    #[inline]
    fn place(i: usize) -> Option<(usize, usize)> {
        let i = u32::try_from(i).ok()?;
        // SLOTS is at most PAGE_BYTES (64 Ki): within u32.
        let slots = Self::SLOTS as u32;
        Some(((i / slots) as usize, (i % slots) as usize))
    }

    /// The value at `i`.
    #[must_use]
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        let (page, at) = Self::place(i)?;
        self.pages.get(page)?.get(at)
    }

    /// The value at `i`, mutably.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let (page, at) = Self::place(i)?;
        self.pages.get_mut(page)?.get_mut(at)
    }

    /// Every value, in index order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.pages.iter().flatten()
    }
}

#[derive(Debug)]
struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// Slots of `T`, reused through a free list.
#[derive(Debug)]
pub struct Slab<T> {
    entries: Paged<Entry<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab::new()
    }
}

impl<T> Slab<T> {
    /// An empty slab.
    #[must_use]
    pub fn new() -> Slab<T> {
        Slab {
            entries: Paged::default(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Bytes of one slot (occupied or free) of a `Slab<T>`.
    #[must_use]
    pub const fn slot_bytes() -> usize {
        core::mem::size_of::<Entry<T>>()
    }

    /// Occupied slots.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no slot is occupied.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores `value` and returns its key. `None` when the slab already
    /// holds `u32::MAX` slots (the caller answers `Busy`).
    pub fn insert(&mut self, value: T) -> Option<SlotKey> {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.entries.len())
                    .ok()
                    .filter(|&s| s != u32::MAX)?;
                self.entries.push(Entry {
                    generation: 0,
                    value: None,
                });
                slot
            }
        };
        let entry = self.entries.get_mut(slot as usize)?;
        debug_assert!(entry.value.is_none());
        entry.value = Some(value);
        self.len += 1;
        Some(SlotKey {
            slot,
            generation: entry.generation,
        })
    }

    /// The occupant of `slot` if its generation is `generation`.
    #[must_use]
    pub fn get(&self, key: SlotKey) -> Option<&T> {
        let e = self.entries.get(key.slot as usize)?;
        if e.generation == key.generation {
            e.value.as_ref()
        } else {
            None
        }
    }

    /// Hints that the entry of `key`'s slot will be read soon (a
    /// prefetch): reads nothing of it now.
    #[inline]
    pub fn read_soon(&self, key: SlotKey) {
        if let Some(e) = self.entries.get(key.slot as usize) {
            crate::engine::prefetch::read_soon(e);
        }
    }

    /// Mutable access to the occupant of `slot` if its generation matches.
    pub fn get_mut(&mut self, key: SlotKey) -> Option<&mut T> {
        let e = self.entries.get_mut(key.slot as usize)?;
        if e.generation == key.generation {
            e.value.as_mut()
        } else {
            None
        }
    }

    /// The occupant of `slot` and its current generation, whatever it is.
    #[must_use]
    pub fn get_any(&self, slot: u32) -> Option<(u32, &T)> {
        let e = self.entries.get(slot as usize)?;
        e.value.as_ref().map(|v| (e.generation, v))
    }

    /// Removes the occupant if the generation matches, bumping the
    /// generation so older keys no longer reach this slot.
    pub fn remove(&mut self, key: SlotKey) -> Option<T> {
        let e = self.entries.get_mut(key.slot as usize)?;
        if e.generation != key.generation {
            return None;
        }
        let v = e.value.take()?;
        e.generation = e.generation.wrapping_add(1);
        self.free.push(key.slot);
        self.len -= 1;
        Some(v)
    }

    /// Bumps the generation of an occupied slot and returns the new key:
    /// every key taken before now misses.
    pub fn bump(&mut self, key: SlotKey) -> Option<SlotKey> {
        let e = self.entries.get_mut(key.slot as usize)?;
        if e.generation != key.generation || e.value.is_none() {
            return None;
        }
        e.generation = e.generation.wrapping_add(1);
        Some(SlotKey {
            slot: key.slot,
            generation: e.generation,
        })
    }

    /// Slots, occupied or free (the highest slot index plus one).
    #[must_use]
    pub fn slots(&self) -> usize {
        self.entries.len()
    }

    /// The highest generation of any slot, occupied or free.
    #[must_use]
    pub fn generation_max(&self) -> u32 {
        self.entries.iter().map(|e| e.generation).max().unwrap_or(0)
    }

    /// Puts `value` at `slot` under `generation` (loading a snapshot:
    /// receipts name the slot and generation). Slots it adds on the way
    /// start free at `hole_generation`. `None` when the slot is taken or is
    /// `u32::MAX`. The free list is stale until [`Slab::rebuild_free`].
    pub fn insert_at(&mut self, key: SlotKey, value: T, hole_generation: u32) -> Option<SlotKey> {
        if key.slot == u32::MAX {
            return None;
        }
        let want = key.slot as usize + 1;
        // Bounded by the slot index (below u32::MAX).
        while self.entries.len() < want {
            self.entries.push(Entry {
                generation: hole_generation,
                value: None,
            });
        }
        let e = self.entries.get_mut(key.slot as usize)?;
        if e.value.is_some() {
            return None;
        }
        e.generation = key.generation;
        e.value = Some(value);
        self.len += 1;
        Some(key)
    }

    /// Rebuilds the free list after [`Slab::insert_at`]: every free slot,
    /// the lowest reused first.
    pub fn rebuild_free(&mut self) {
        self.free.clear();
        let n = self.entries.len();
        for i in (0..n).rev() {
            if self.entries.get(i).is_some_and(|e| e.value.is_none()) {
                // Fewer than 2^32 slots (see insert).
                self.free.push(i as u32);
            }
        }
    }

    /// Every occupied slot's key, in slot order.
    pub fn keys(&self) -> impl Iterator<Item = SlotKey> + '_ {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            e.value.as_ref().map(|_| SlotKey {
                // The slab never holds more than 2^32 slots (see insert).
                slot: i as u32,
                generation: e.generation,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_hold_a_power_of_two_where_it_costs_no_memory() {
        // 24-byte values (leases): 2,048 in 48 KiB, an allocator size class.
        assert_eq!(Paged::<[u8; 24]>::SLOTS, 2048);
        assert_eq!(Paged::<[u8; 32]>::SLOTS, 2048);
        // 44-byte slots: 1,024 would take 45,056 bytes, rounded up to 48 KiB;
        // a full 64 KiB page holds 1,489.
        assert_eq!(Paged::<[u8; 44]>::SLOTS, 1489);
        assert_eq!(Paged::<()>::SLOTS, PAGE_BYTES);
        assert_eq!(Paged::<[u8; 70_000]>::SLOTS, 1);
        let mut p = Paged::<[u8; 24]>::default();
        for i in 0..5000u32 {
            let mut v = [0u8; 24];
            v[..4].copy_from_slice(&i.to_le_bytes());
            p.push(v);
        }
        for i in [0u32, 2047, 2048, 4095, 4096, 4999] {
            assert_eq!(p.get(i as usize).unwrap()[..4], i.to_le_bytes());
        }
        assert!(p.get(5000).is_none());
    }

    #[test]
    fn reuse_bumps_generation_and_old_keys_miss() {
        let mut s = Slab::new();
        let a = s.insert("a").unwrap();
        assert_eq!(s.get(a), Some(&"a"));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None);
        let b = s.insert("b").unwrap();
        assert_eq!(b.slot, a.slot);
        assert_ne!(b.generation, a.generation);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn insert_at_places_and_the_free_list_follows() {
        let mut s = Slab::new();
        let k = SlotKey {
            slot: 3,
            generation: 9,
        };
        assert_eq!(s.insert_at(k, "c", 5), Some(k));
        assert_eq!(s.insert_at(k, "again", 5), None, "taken");
        assert_eq!(
            s.insert_at(
                SlotKey {
                    slot: u32::MAX,
                    generation: 0
                },
                "x",
                0
            ),
            None
        );
        s.rebuild_free();
        assert_eq!((s.len(), s.slots(), s.generation_max()), (1, 4, 9));
        assert_eq!(s.get(k), Some(&"c"));
        let a = s.insert("a").unwrap();
        assert_eq!(
            a,
            SlotKey {
                slot: 0,
                generation: 5
            }
        );
        assert_eq!(s.insert("b").unwrap().slot, 1);
        assert_eq!(s.insert("d").unwrap().slot, 2);
        assert_eq!(s.insert("e").unwrap().slot, 4);
    }

    #[test]
    fn bump_invalidates_old_keys_but_keeps_the_value() {
        let mut s = Slab::new();
        let a = s.insert(1).unwrap();
        let a2 = s.bump(a).unwrap();
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(a2), Some(&1));
        assert_eq!(s.bump(a), None);
        assert_eq!(s.keys().collect::<Vec<_>>(), vec![a2]);
    }
}
