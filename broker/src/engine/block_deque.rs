//! A deque of small `Copy` entries stored in fixed blocks: the partitions'
//! ready and age lists, used first in, first out. (Named for what it is:
//! the FIFO queues of message groups are another thing.)
//!
//! A `VecDeque` doubles its buffer as it grows and never gives the room
//! back: a queue that once held ten million messages would keep the
//! memory of ten million entries (and, while growing, copy them all at
//! every doubling). Here the entries sit in blocks of `N`; a block that
//! empties goes back to a [`Spare`] pool shared by every FIFO of the
//! shard (bounded, so a shrunk FIFO's room returns to the allocator), and
//! a new block comes from that pool first. So memory follows the entries,
//! up to one partly filled block at each end, and a FIFO in steady use
//! allocates nothing.
//!
//! Every entry has an absolute position that it keeps while it stays in the
//! FIFO: the front's is [`BlockDeque::head`], and each push takes the next one.
//! A position outlives pops in front of it, so a cursor into the FIFO is a
//! plain number (the age FIFO's fresh-message cursor, `partition.rs`).

use std::collections::VecDeque;

/// The position of the first push: room in front for [`BlockDeque::push_front`]
/// without wrapping.
const FIRST_POSITION: u64 = 1 << 62;

/// Blocks no FIFO holds at the moment, kept for the next one that grows.
#[derive(Debug)]
pub(crate) struct Spare<T, const N: usize> {
    blocks: Vec<Box<[T; N]>>,
    max: usize,
}

impl<T: Copy + Default, const N: usize> Spare<T, N> {
    /// A pool that keeps at most `max` blocks.
    pub fn new(max: usize) -> Spare<T, N> {
        Spare {
            blocks: Vec::with_capacity(max),
            max,
        }
    }

    fn take(&mut self) -> Box<[T; N]> {
        self.blocks.pop().unwrap_or_else(new_block)
    }

    fn give(&mut self, block: Box<[T; N]>) {
        if self.blocks.len() < self.max {
            self.blocks.push(block);
        }
    }
}

/// A block of `N` default entries, written in place on the heap:
/// `Box::new([T::default(); N])` builds the array on the stack and copies
/// it over (for the dedup log's 40 KiB blocks, some 80 instructions an
/// entry as a log grows).
fn new_block<T: Copy + Default, const N: usize>() -> Box<[T; N]> {
    let entries = vec![T::default(); N].into_boxed_slice();
    // `vec!` made exactly `N`: the conversion does not fail.
    entries
        .try_into()
        .unwrap_or_else(|_| Box::new([T::default(); N]))
}

/// A FIFO of `T` in blocks of `N` entries; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct BlockDeque<T, const N: usize> {
    blocks: VecDeque<Box<[T; N]>>,
    /// Index of the front entry in `blocks[0]`.
    first: usize,
    len: usize,
    /// Position of the front entry.
    head: u64,
}

impl<T: Copy + Default, const N: usize> Default for BlockDeque<T, N> {
    fn default() -> Self {
        BlockDeque::new()
    }
}

impl<T: Copy + Default, const N: usize> BlockDeque<T, N> {
    /// An empty FIFO (no block yet).
    pub fn new() -> BlockDeque<T, N> {
        BlockDeque {
            blocks: VecDeque::new(),
            first: 0,
            len: 0,
            head: FIRST_POSITION,
        }
    }

    /// An empty FIFO whose first push takes position `head`.
    #[cfg(test)]
    pub fn starting_at(head: u64) -> BlockDeque<T, N> {
        BlockDeque {
            head,
            ..BlockDeque::new()
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Position of the front entry (of the next push when empty).
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Position the next push takes.
    pub fn end(&self) -> u64 {
        self.head + self.len as u64
    }

    fn at(&self, i: usize) -> T {
        let k = self.first + i;
        self.blocks[k / N][k % N]
    }

    /// Appends `value`.
    pub fn push_back(&mut self, value: T, spare: &mut Spare<T, N>) {
        let k = self.first + self.len;
        if k == self.blocks.len() * N {
            self.blocks.push_back(spare.take());
        }
        self.blocks[k / N][k % N] = value;
        self.len += 1;
    }

    /// Puts `value` in front (it takes the position before the front's).
    pub fn push_front(&mut self, value: T, spare: &mut Spare<T, N>) {
        if self.first == 0 {
            self.blocks.push_front(spare.take());
            self.first = N;
        }
        self.first -= 1;
        self.blocks[0][self.first] = value;
        self.len += 1;
        self.head -= 1;
    }

    /// The front entry.
    #[inline]
    pub fn front(&self) -> Option<T> {
        // The front block's entry `first` (always below N): no position
        // arithmetic.
        let block = self.blocks.front().filter(|_| self.len > 0)?;
        Some(block[self.first])
    }

    /// The back entry.
    pub fn back(&self) -> Option<T> {
        (self.len > 0).then(|| self.at(self.len - 1))
    }

    /// Removes and returns the back entry.
    pub fn pop_back(&mut self, spare: &mut Spare<T, N>) -> Option<T> {
        let value = self.back()?;
        self.len -= 1;
        if self.len == 0 {
            self.release_all(spare);
        } else if (self.first + self.len) % N == 0 {
            // The last block held only the entry popped.
            if let Some(block) = self.blocks.pop_back() {
                spare.give(block);
            }
        }
        Some(value)
    }

    /// Removes and returns the front entry.
    pub fn pop_front(&mut self, spare: &mut Spare<T, N>) -> Option<T> {
        let value = self.front()?;
        self.drop_front(spare);
        Some(value)
    }

    /// Removes the front entry if it is `value`; returns whether it was.
    #[inline]
    pub fn pop_front_if(&mut self, value: T, spare: &mut Spare<T, N>) -> bool
    where
        T: PartialEq,
    {
        let hit = self.front() == Some(value);
        if hit {
            self.drop_front(spare);
        }
        hit
    }

    /// Removes the front entry, of a FIFO that holds one.
    #[inline]
    fn drop_front(&mut self, spare: &mut Spare<T, N>) {
        self.first += 1;
        self.len -= 1;
        self.head += 1;
        if self.first == N || self.len == 0 {
            if let Some(block) = self.blocks.pop_front() {
                spare.give(block);
            }
            self.first = 0;
            if self.len == 0 {
                self.release_all(spare);
            }
        }
    }

    /// The entry at position `pos`, if held.
    pub fn get(&self, pos: u64) -> Option<T> {
        let i = pos.checked_sub(self.head)?;
        (i < self.len as u64).then(|| self.at(i as usize))
    }

    /// The entry at position `pos`, if held, to change in place.
    pub fn get_mut(&mut self, pos: u64) -> Option<&mut T> {
        let i = pos.checked_sub(self.head)?;
        if i >= self.len as u64 {
            return None;
        }
        let k = self.first + i as usize;
        Some(&mut self.blocks[k / N][k % N])
    }

    /// Every entry from position `pos` on (from the front when `pos` lies
    /// before it), front to back.
    pub fn iter_from(&self, pos: u64) -> impl Iterator<Item = T> + '_ {
        let start = pos.saturating_sub(self.head).min(self.len as u64) as usize;
        (start..self.len).map(move |i| self.at(i))
    }

    /// Every entry, front to back.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.iter_from(self.head)
    }

    /// Keeps the entries for which `keep` holds, in order, and returns the
    /// position `mark` maps to afterwards: that of the first kept entry that
    /// was at or after `mark` (the end when none). Positions are renumbered
    /// from the same head.
    pub fn retain(
        &mut self,
        mut keep: impl FnMut(T) -> bool,
        mark: u64,
        spare: &mut Spare<T, N>,
    ) -> u64 {
        let mut kept = 0usize;
        let mut kept_before_mark = 0usize;
        // Entries before `mark` (an index from the front): the first ones.
        let before_mark = usize::try_from(mark.saturating_sub(self.head)).unwrap_or(usize::MAX);
        // Read block by block as slices, written back at a cursor behind
        // the read (one index into the blocks per entry kept, none per
        // entry read).
        let blocks = self.blocks.make_contiguous();
        let end = self.first + self.len;
        let mut at = self.first;
        while at < end {
            let b = at / N;
            let stop = end.min((b + 1) * N);
            for o in at % N..stop - b * N {
                let value = blocks[b][o];
                if keep(value) {
                    if b * N + o - self.first < before_mark {
                        kept_before_mark += 1;
                    }
                    let k = self.first + kept;
                    blocks[k / N][k % N] = value;
                    kept += 1;
                }
            }
            at = stop;
        }
        self.len = kept;
        // Blocks past the last kept entry go back to the pool.
        let needed = (self.first + kept).div_ceil(N);
        while self.blocks.len() > needed {
            if let Some(block) = self.blocks.pop_back() {
                spare.give(block);
            }
        }
        if self.len == 0 {
            self.release_all(spare);
        }
        self.head + kept_before_mark as u64
    }

    /// Empties the FIFO, its blocks back to the pool.
    pub fn clear(&mut self, spare: &mut Spare<T, N>) {
        self.head += self.len as u64;
        self.len = 0;
        self.release_all(spare);
    }

    fn release_all(&mut self, spare: &mut Spare<T, N>) {
        while let Some(block) = self.blocks.pop_front() {
            spare.give(block);
        }
        self.first = 0;
    }

    /// Blocks held.
    #[cfg(test)]
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn positions_survive_pops_and_blocks_return_to_the_pool() {
        let mut spare = Spare::<u32, 4>::new(8);
        let mut f = BlockDeque::<u32, 4>::new();
        for v in 0..10 {
            f.push_back(v, &mut spare);
        }
        assert_eq!(f.block_count(), 3);
        let base = f.head();
        assert_eq!(f.get(base + 7), Some(7));
        for v in 0..5 {
            assert_eq!(f.pop_front(&mut spare), Some(v));
        }
        assert_eq!(f.head(), base + 5);
        assert_eq!(f.get(base + 4), None);
        assert_eq!(f.get(base + 7), Some(7));
        assert_eq!(f.block_count(), 2);
        assert_eq!(spare.blocks.len(), 1);
        assert_eq!(f.iter_from(base + 8).collect::<Vec<_>>(), [8, 9]);
        f.clear(&mut spare);
        assert_eq!(f.block_count(), 0);
        assert_eq!(spare.blocks.len(), 3);
        assert_eq!(f.end(), base + 10);
    }

    #[test]
    fn retain_maps_the_mark_and_frees_trailing_blocks() {
        let mut spare = Spare::<u32, 4>::new(1);
        let mut f = BlockDeque::<u32, 4>::new();
        for v in 0..12 {
            f.push_back(v, &mut spare);
        }
        let base = f.head();
        let mark = f.retain(|v| v % 3 == 0, base + 5, &mut spare);
        assert_eq!(f.iter().collect::<Vec<_>>(), [0, 3, 6, 9]);
        // 0 and 3 were before position 5: 6 is now at position 2.
        assert_eq!(mark, base + 2);
        assert_eq!(f.get(mark), Some(6));
        assert_eq!(f.block_count(), 1);
        assert_eq!(spare.blocks.len(), 1, "the pool keeps at most one");
    }

    proptest! {
        #[test]
        fn behaves_like_a_vecdeque(ops in prop::collection::vec(0u8..8, 0..300)) {
            let mut spare = Spare::<u32, 3>::new(2);
            let mut f = BlockDeque::<u32, 3>::new();
            let mut model: VecDeque<u32> = VecDeque::new();
            let mut model_head = f.head();
            for (i, op) in ops.into_iter().enumerate() {
                let v = i as u32;
                match op {
                    0 | 1 => {
                        f.push_back(v, &mut spare);
                        model.push_back(v);
                    }
                    2 => {
                        let popped = model.pop_front();
                        if popped.is_some() {
                            model_head += 1;
                        }
                        prop_assert_eq!(f.pop_front(&mut spare), popped);
                    }
                    3 => {
                        f.push_front(v, &mut spare);
                        model.push_front(v);
                        model_head -= 1;
                    }
                    4 => {
                        let mark = model_head + model.len() as u64 / 2;
                        let before = model.iter().take(model.len() / 2).filter(|&&x| x % 2 == 0).count();
                        let got = f.retain(|x| x % 2 == 0, mark, &mut spare);
                        model.retain(|&x| x % 2 == 0);
                        prop_assert_eq!(got, model_head + before as u64);
                    }
                    7 => {
                        prop_assert_eq!(f.pop_back(&mut spare), model.pop_back());
                    }
                    5 => {
                        let pos = model_head + model.len() as u64 / 3;
                        prop_assert_eq!(f.get(pos), model.get(model.len() / 3).copied());
                    }
                    _ => {
                        // Changes in place; past the end, nothing.
                        let i = model.len() * 2 / 3;
                        let pos = model_head + i as u64;
                        if let Some(x) = f.get_mut(pos) {
                            *x += 1_000;
                        }
                        if let Some(x) = model.get_mut(i) {
                            *x += 1_000;
                        }
                        prop_assert_eq!(f.get_mut(model_head + model.len() as u64), None);
                        prop_assert_eq!(f.get_mut(model_head.wrapping_sub(1)), None);
                    }
                }
                prop_assert_eq!(f.len(), model.len());
                prop_assert_eq!(f.head(), model_head);
                prop_assert_eq!(f.front(), model.front().copied());
                prop_assert_eq!(f.back(), model.back().copied());
                prop_assert_eq!(f.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
                prop_assert!(f.block_count() <= model.len().div_ceil(3) + 2);
            }
        }
    }
}
