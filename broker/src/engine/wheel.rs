//! A hierarchical timing wheel: the one clock-driven structure of a shard,
//! behind lease expiry, delivery delays, retry backoff and retention.
//!
//! # Shape
//!
//! Time advances in ticks of 1 ms ([`TICK_NS`]). Six levels of 64 slots
//! each: a slot of level `l` spans `64^l` ticks, so level 0 covers the next
//! 64 ms, level 1 the next ~4 s, ..., level 5 ~795 days. Timers further out
//! than that wait in an overflow list that is re-examined each time time
//! reaches a new 2^36-tick (~795-day) block, so nothing fires early however far
//! out it is.
//!
//! A timer with tick `t` sits at the level of the highest 6-bit digit in which
//! `t` differs from `elapsed` (the last tick processed), in the slot given by
//! `t`'s digit there. Since `t > elapsed`, that digit of `t` is larger than
//! `elapsed`'s, so every occupied slot of a level lies ahead of the wheel's
//! position in it, and every timer of a level fires after every timer of the
//! levels below. The next slot to expire is therefore the lowest set bit of
//! the lowest non-empty level's occupancy bitmap: [`TimerWheel::advance`]
//! jumps straight to it however large the gap, and expires it (a level-0
//! slot fires; a higher slot's timers fire if their tick has come, and move
//! down a level otherwise). Each timer moves down at most five times, so the
//! work per timer is O(1) amortised and an advance costs O(timers fired and
//! moved + non-empty slots visited), never O(ticks skipped).
//!
//! # Storage
//!
//! Timers live in a slab (`Vec`) of entries with a free list threaded through
//! it. Each wheel slot, the overflow list and the due list (timers already due
//! when inserted) is a vector of slab indices, and each entry records its
//! list and its position in it, so:
//!
//! - [`insert`](TimerWheel::insert) pops a free entry and pushes its index on
//!   a list: O(1), no allocation once the slab and lists have grown to their
//!   peak;
//! - [`cancel`](TimerWheel::cancel) frees the entry: the timer is gone at
//!   once (it never fires, its value is returned, its entry is reused), and
//!   only its own entry is touched, plus a live count per list that stays
//!   in cache. Its index is left in the list, where it is recognised as
//!   stale (the entry it names is free, or records another list or
//!   position) and skipped. A list whose live timers all went is emptied
//!   at once. Stale indices are otherwise dropped by the next insert on
//!   the list that finds it holding more than twice as many indices as live
//!   timers (plus [`LIST_STALE_SLACK`]), so an insert leaves a list within
//!   that bound and a cancel never lengthens one. At ten million timers a
//!   cancel in random order is one cache miss (the entry) instead of three
//!   (the entry, its place in the list, and the entry moved into that
//!   place, which the version this replaced swapped in), and it runs few
//!   instructions, so that the CPU keeps many such misses in flight;
//! - expiring a slot walks a contiguous array of indices, so the entries' cache
//!   misses overlap instead of queueing behind one another as they would
//!   along an intrusive linked list.
//!
//! An entry is 16 bytes plus an `Option<T>`, and each live timer has a 4-byte
//! index in its list ([`timer_bytes`]: at most twice that with stale ones,
//! plus the lists' spare capacity). A list whose capacity grew past
//! [`LIST_RETAIN_MAX`] is freed when its slot expires, so a burst does not pin
//! memory. A [`TimerId`] is the entry's index plus a generation that changes
//! every time the entry is freed, so a stale id cancels nothing.
//!
//! # Time
//!
//! Time is nanoseconds of a monotonic clock with an arbitrary origin, passed
//! in by the caller; the wheel never reads a clock. A deadline rounds up to
//! the next whole tick, and the timer fires at the first `advance(now)` with
//! `now >= ` that tick's start, never before its deadline. A deadline that is
//! not after the wheel's current `now` (the latest `now` given to
//! [`new`](TimerWheel::new) or [`advance`](TimerWheel::advance)) fires at the
//! next advance, whatever its `now`. Deadlines in the last, partial tick of the
//! `u64` nanosecond range (584 years after the clock's origin) never fire
//! except through that rule.

use std::fmt;

use super::huge_pages;
pub use super::limits::TICK_NS;
use sluice_protocol::limits::{
    BACKOFF_MAX_MS_MAX, DEDUP_WINDOW_MS_MAX, DELAY_MS_MAX, RECEIVE_WAIT_MS_MAX, RETENTION_MS_MAX,
    VISIBILITY_TIMEOUT_MS_MAX,
};

use super::limits::{LIST_RETAIN_MAX, LIST_STALE_SLACK};

/// Bits of tick per level: each level has `2^SLOT_BITS` slots.
const SLOT_BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << SLOT_BITS;
/// Levels of the wheel.
const LEVELS: usize = 6;
/// Ticks the wheel's levels span: a timer whose tick differs from `elapsed`
/// above this goes to the overflow list.
const WHEEL_TICKS: u64 = 1 << (SLOT_BITS * LEVELS as u32);

/// List number of the timers due at the next advance, whatever its `now`.
const DUE: u16 = (LEVELS * SLOTS) as u16;
/// List number of the timers beyond the top level.
const OVERFLOW: u16 = DUE + 1;
/// How many lists there are: the wheel's slots, then due and overflow.
const LISTS: usize = OVERFLOW as usize + 1;
/// Length of the live-count array: a power of two, so that a cancel indexes
/// it with a list number read from an entry as `list % LIVE_SLOTS`, which
/// is the number itself and needs no bounds check.
const LIVE_SLOTS: usize = LISTS.next_power_of_two();
/// The end of the free list.
const NIL: u32 = u32::MAX;
/// An entry's key keeps its list above this many bits of tick.
const TICK_BITS: u32 = 48;
const TICK_MASK: u64 = (1 << TICK_BITS) - 1;

const _: () = assert!(
    SLOTS == u64::BITS as usize,
    "one occupancy bit per slot in a u64"
);
const _: () = assert!(LISTS <= 1 << (u64::BITS - TICK_BITS));
const _: () = assert!(
    u64::MAX.div_ceil(TICK_NS) <= TICK_MASK,
    "every tick fits in a key"
);
/// How far ahead of `now` the wheel's levels reach, in nanoseconds; a later
/// deadline waits in the overflow list. A check below holds it beyond
/// every deadline the engine sets, so overflow is for callers with
/// unusual needs only.
pub const WHEEL_REACH_NS: u64 = WHEEL_TICKS * TICK_NS;

// The wheel's top level reaches past every deadline the engine sets, so
// its overflow list stays empty: retention (the longest), leases, delays,
// backoff, dedup windows and long-poll waits.
const _: () = {
    let reach_ms = WHEEL_REACH_NS / 1_000_000; // ns to ms
    let longest = [
        RETENTION_MS_MAX,
        VISIBILITY_TIMEOUT_MS_MAX,
        DELAY_MS_MAX,
        BACKOFF_MAX_MS_MAX,
        DEDUP_WINDOW_MS_MAX,
        RECEIVE_WAIT_MS_MAX,
    ];
    let mut i = 0;
    while i < longest.len() {
        assert!(reach_ms > longest[i] as u64);
        i += 1;
    }
};

/// Handle to a timer in a [`TimerWheel`], for [`TimerWheel::cancel`]. Ids are
/// small and `Copy`; an id whose timer fired or was cancelled is stale and
/// cancels nothing, even after its entry was reused by another timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId {
    index: u32,
    generation: u32,
}

impl TimerId {
    /// An id that names no timer: cancelling it does nothing.
    pub const NONE: TimerId = TimerId {
        index: NIL,
        generation: 0,
    };

    /// Whether this is [`TimerId::NONE`].
    #[must_use]
    pub fn is_none(self) -> bool {
        self.index == NIL
    }
}

/// Bytes one live timer with a `T` costs: its entry and its index in a list.
#[must_use]
pub const fn timer_bytes<T>() -> usize {
    core::mem::size_of::<Entry<T>>() + core::mem::size_of::<u32>()
}

/// One timer, or a free entry.
struct Entry<T> {
    /// The tick the timer fires at (its deadline rounded up to a tick) in the
    /// low `TICK_BITS` bits, and above them the list it is on: a slot
    /// (`level * 64 + slot`), `DUE` or `OVERFLOW`. A free entry keeps the
    /// list it was last on (its `value` says it is free).
    key: u64,
    /// Bumped each time the entry is freed.
    generation: u32,
    /// The entry's position in its list; for a free entry, the next free one.
    pos: u32,
    /// `Some` exactly while the entry is a live timer.
    value: Option<T>,
}

impl<T> Entry<T> {
    fn tick(&self) -> u64 {
        self.key & TICK_MASK
    }

    fn list(&self) -> u16 {
        // The key's top bits hold a u16 list number; the cast keeps them all.
        (self.key >> TICK_BITS) as u16
    }

    fn set_list(&mut self, list: u16) {
        self.key = (self.key & TICK_MASK) | (u64::from(list) << TICK_BITS);
    }
}

/// A hierarchical timing wheel with 1 ms ticks; see the [module docs](self).
///
/// Single-threaded: each shard owns one. Insert and cancel are O(1); advance
/// fires what is due.
pub struct TimerWheel<T> {
    entries: Vec<Entry<T>>,
    /// Head of the free list, threaded through `Entry::pos`.
    free: u32,
    /// The slab indices on each list, in no particular order; stale ones
    /// (cancelled timers) among them.
    lists: Box<[Vec<u32>]>,
    /// Live timers on each list.
    live: Box<[u32; LIVE_SLOTS]>,
    /// Per level, bit `s` set iff slot `s` of that level is non-empty.
    occupied: [u64; LEVELS],
    /// The last tick processed: every timer with `tick <= elapsed` has fired
    /// or is on the due list, and every other one is placed relative to it.
    elapsed: u64,
    /// The latest `now_ns` given to `new` or `advance`.
    now_ns: u64,
    /// A lower bound of the ticks on the overflow list (exact after each
    /// re-examination; a cancel may leave it low, which is harmless).
    overflow_min: u64,
    /// Live timers.
    len: usize,
    /// Slots expired so far (tests check that advancing over a gap is not
    /// per-tick work).
    #[cfg(test)]
    slots_expired: u64,
}

/// Where the next expiry is.
#[derive(Clone, Copy)]
enum Expiry {
    /// A wheel slot, by list number.
    Slot(u16),
    /// The overflow list.
    Overflow,
}

/// The tick a deadline rounds up to.
fn tick_of_deadline(deadline_ns: u64) -> u64 {
    deadline_ns.div_ceil(TICK_NS)
}

impl<T> TimerWheel<T> {
    /// An empty wheel whose clock reads `now_ns`.
    pub fn new(now_ns: u64) -> Self {
        Self::with_capacity(now_ns, 0)
    }

    /// An empty wheel whose clock reads `now_ns`, with room for `timers`
    /// timers before its slab grows (its lists grow as timers arrive).
    pub fn with_capacity(now_ns: u64, timers: usize) -> Self {
        let entries = Vec::with_capacity(timers);
        huge_pages::advise(&entries);
        Self {
            entries,
            free: NIL,
            lists: (0..LISTS).map(|_| Vec::new()).collect(),
            live: Box::new([0; LIVE_SLOTS]),
            occupied: [0; LEVELS],
            elapsed: now_ns / TICK_NS,
            now_ns,
            overflow_min: u64::MAX,
            len: 0,
            #[cfg(test)]
            slots_expired: 0,
        }
    }

    /// Adds a timer that fires `value` at the first [`advance`](Self::advance)
    /// whose `now_ns` is at or past `deadline_ns` rounded up to the next whole
    /// millisecond; a deadline that is not after the wheel's current `now`
    /// fires at the next advance.
    ///
    /// # Panics
    ///
    /// If the wheel already holds `u32::MAX - 1` entries (live and free).
    #[inline]
    pub fn insert(&mut self, deadline_ns: u64, value: T) -> TimerId {
        let tick = tick_of_deadline(deadline_ns);
        let id = self.allocate(tick, value);
        let list = if deadline_ns <= self.now_ns {
            DUE
        } else {
            self.list_for(tick)
        };
        self.link(id.index, list);
        self.len += 1;
        id
    }

    /// Removes the timer `id` and returns its value, or `None` if it already
    /// fired or was cancelled. O(1): it touches the timer's own entry and its
    /// list's live count (see the [module docs](self)).
    #[inline]
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        // At ten million timers the entry is a cache miss, and the CPU
        // overlaps the misses of consecutive cancels only as far as their
        // instructions fit its window: this path is kept short. It writes
        // the entry's generation, free-list link and value, and neither
        // the list it is on nor that list's indices.
        let entry = self.entries.get_mut(id.index as usize)?;
        // A free entry's generation moved on when it was freed, and no id
        // carries the new one until the entry is reused.
        if entry.generation != id.generation {
            return None;
        }
        entry.generation = entry.generation.wrapping_add(1);
        entry.pos = self.free;
        let value = entry.value.take();
        let list = usize::from(entry.list()) % LIVE_SLOTS;
        self.free = id.index;
        self.len -= 1;
        self.live[list] -= 1;
        if self.live[list] == 0 {
            self.empty_list(list);
        }
        value
    }

    /// Moves the wheel's clock to `now_ns` and fires, in no particular order,
    /// every timer that is due: those whose rounded-up deadline is at or
    /// before `now_ns`, and those inserted with a deadline that was already
    /// past. `fire` receives each timer's id (now stale) and value.
    ///
    /// A `now_ns` before the wheel's current `now` is taken as the current
    /// `now`: the clock is monotonic. Skipping far ahead costs work per
    /// non-empty slot, not per tick.
    pub fn advance(&mut self, now_ns: u64, mut fire: impl FnMut(TimerId, T)) {
        if !self.lists[usize::from(DUE)].is_empty() {
            self.expire_list(DUE, &mut fire);
        }
        if now_ns <= self.now_ns {
            return;
        }
        self.now_ns = now_ns;
        let target = now_ns / TICK_NS;
        while let Some((expiry, start)) = self.next_expiry() {
            if start > target {
                break;
            }
            // No timer is due before `start`: lower levels are empty, higher
            // levels and the overflow list lie beyond this slot.
            self.elapsed = start;
            #[cfg(test)]
            {
                self.slots_expired += 1;
            }
            match expiry {
                Expiry::Slot(list) => {
                    let (level, slot) = (usize::from(list) / SLOTS, usize::from(list) % SLOTS);
                    self.occupied[level] &= !(1 << slot);
                    self.expire_list(list, &mut fire);
                }
                Expiry::Overflow => {
                    // Recomputed exactly from what goes back on the list.
                    self.overflow_min = u64::MAX;
                    self.expire_list(OVERFLOW, &mut fire);
                }
            }
        }
        // Every slot left lies beyond `target`; moving `elapsed` there keeps
        // each timer at the level and slot it is on (see the module docs).
        self.elapsed = self.elapsed.max(target);
    }

    /// The earliest time at which an [`advance`](Self::advance) may fire
    /// something, for the server's wait timeout; `None` when the wheel is
    /// empty. When some timer is already due this is the current `now`.
    ///
    /// Exact when the next timers are within the next 64 ms; otherwise a lower
    /// bound (the start of the next non-empty higher-level slot), at which an
    /// advance moves timers down a level and this answer gets closer. Never
    /// after the true next deadline, so a caller that sleeps until it never
    /// fires a timer late.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        if !self.lists[usize::from(DUE)].is_empty() {
            return Some(self.now_ns);
        }
        self.next_expiry()
            .map(|(_, start)| start.saturating_mul(TICK_NS))
    }

    /// Live timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes an entry from the free list (or grows the slab) for a new timer;
    /// the caller links it.
    #[inline]
    fn allocate(&mut self, tick: u64, value: T) -> TimerId {
        if self.free != NIL {
            let index = self.free;
            let entry = &mut self.entries[index as usize];
            self.free = entry.pos;
            entry.key = tick;
            entry.value = Some(value);
            TimerId {
                index,
                generation: entry.generation,
            }
        } else {
            let index = u32::try_from(self.entries.len())
                .ok()
                .filter(|&index| index != NIL)
                .expect("a timing wheel holds fewer than u32::MAX entries");
            let grows = self.entries.len() == self.entries.capacity();
            self.entries.push(Entry {
                key: tick,
                generation: 0,
                pos: NIL,
                value: Some(value),
            });
            if grows {
                // A new buffer: huge pages for it once it is large.
                huge_pages::advise(&self.entries);
            }
            TimerId {
                index,
                generation: 0,
            }
        }
    }

    /// Puts an unlinked entry on the free list and returns its value; its
    /// generation moves on, so ids issued for it go stale.
    #[inline]
    fn release(&mut self, index: u32) -> Option<T> {
        let entry = &mut self.entries[index as usize];
        entry.generation = entry.generation.wrapping_add(1);
        entry.pos = self.free;
        self.free = index;
        entry.value.take()
    }

    /// The list a timer with `tick > elapsed` belongs on.
    #[inline]
    fn list_for(&self, tick: u64) -> u16 {
        debug_assert!(tick > self.elapsed);
        let differing = tick ^ self.elapsed;
        if differing >= WHEEL_TICKS {
            return OVERFLOW;
        }
        let level = (u64::BITS - 1 - differing.leading_zeros()) / SLOT_BITS;
        let slot = (tick >> (level * SLOT_BITS)) & (SLOTS as u64 - 1);
        // Both fit: level < LEVELS and slot < SLOTS, so the list is < DUE.
        (level as u16) * (SLOTS as u16) + slot as u16
    }

    /// Appends an entry that is on no list to `list`, first dropping the
    /// list's stale indices if they outnumber its live timers by more than
    /// [`LIST_STALE_SLACK`].
    #[inline]
    fn link(&mut self, index: u32, list: u16) {
        let l = usize::from(list);
        if self.lists[l].len() > 2 * self.live[l] as usize + LIST_STALE_SLACK {
            self.compact_list(list);
        }
        let members = &mut self.lists[l];
        // Lists hold slab indices, which fit in u32 (see `allocate`).
        let pos = members.len() as u32;
        members.push(index);
        self.live[usize::from(list)] += 1;
        let entry = &mut self.entries[index as usize];
        entry.set_list(list);
        entry.pos = pos;
        if list < DUE {
            let (level, slot) = (usize::from(list) / SLOTS, usize::from(list) % SLOTS);
            self.occupied[level] |= 1 << slot;
        } else if list == OVERFLOW {
            self.overflow_min = self.overflow_min.min(entry.tick());
        }
    }

    /// The last live timer of list `l` was cancelled: drops its (stale)
    /// indices, and marks its slot free.
    #[cold]
    fn empty_list(&mut self, l: usize) {
        self.lists[l].clear();
        if l < usize::from(DUE) {
            let (level, slot) = (l / SLOTS, l % SLOTS);
            self.occupied[level] &= !(1 << slot);
        } else if l == usize::from(OVERFLOW) {
            self.overflow_min = u64::MAX;
        }
    }

    /// Drops the stale indices of `list` (see [`compact`](Self::compact)).
    #[cold]
    fn compact_list(&mut self, list: u16) {
        let mut members = std::mem::take(&mut self.lists[usize::from(list)]);
        self.compact(list, &mut members);
        self.lists[usize::from(list)] = members;
    }

    /// Whether the index at `pos` of `list` names a live timer on it (a
    /// cancelled timer's index is left behind, stale: its entry is free, or
    /// has been reused on another list or at a later position).
    #[inline]
    fn is_member(&self, index: u32, list: u16, pos: usize) -> bool {
        let entry = &self.entries[index as usize];
        entry.value.is_some() && entry.list() == list && entry.pos as usize == pos
    }

    /// Drops the stale indices of `members` (the indices of `list`, taken
    /// out of it) and renumbers the positions of the rest.
    fn compact(&mut self, list: u16, members: &mut Vec<u32>) {
        let mut kept = 0;
        for i in 0..members.len() {
            let index = members[i];
            // An entry renumbered earlier in this pass has a position below
            // its old one, so it cannot match a later stale index.
            if self.is_member(index, list, i) {
                // Lists hold at most the slab's indices: within u32.
                self.entries[index as usize].pos = kept as u32;
                members[kept] = index;
                kept += 1;
            }
        }
        members.truncate(kept);
    }

    /// The next slot (or the overflow list) to expire, and the tick at which
    /// it starts.
    fn next_expiry(&self) -> Option<(Expiry, u64)> {
        for (level, &occupied) in self.occupied.iter().enumerate() {
            if occupied != 0 {
                let shift = level as u32 * SLOT_BITS;
                let slot = u64::from(occupied.trailing_zeros());
                debug_assert!(
                    slot > (self.elapsed >> shift) & (SLOTS as u64 - 1),
                    "occupied slots lie ahead of the wheel's position"
                );
                let level_span = (SLOTS as u64) << shift;
                let start = (self.elapsed & !(level_span - 1)) | (slot << shift);
                let list = (level * SLOTS) as u16 + slot as u16;
                return Some((Expiry::Slot(list), start));
            }
        }
        if !self.lists[usize::from(OVERFLOW)].is_empty() {
            let start = self.overflow_min & !(WHEEL_TICKS - 1);
            debug_assert!(start > self.elapsed, "overflow lies beyond the wheel");
            return Some((Expiry::Overflow, start));
        }
        None
    }

    /// Detaches `list` and walks it: fires the timers whose tick has come (all
    /// of them for the due list) and re-files the others relative to
    /// `elapsed` (always on a lower level, except overflow timers still out of
    /// reach, which go back on the overflow list). Stale indices are skipped.
    fn expire_list(&mut self, list: u16, fire: &mut impl FnMut(TimerId, T)) {
        let mut members = std::mem::take(&mut self.lists[usize::from(list)]);
        self.live[usize::from(list)] = 0;
        if list == OVERFLOW {
            // Timers re-filed onto the overflow list get new positions there,
            // which a stale index further on could match: drop the stale
            // ones first.
            self.compact(list, &mut members);
        }
        for (pos, &index) in members.iter().enumerate() {
            if list != OVERFLOW && !self.is_member(index, list, pos) {
                continue;
            }
            let entry = &self.entries[index as usize];
            let tick = entry.tick();
            if tick <= self.elapsed || list == DUE {
                self.len -= 1;
                let generation = entry.generation;
                if let Some(value) = self.release(index) {
                    fire(TimerId { index, generation }, value);
                }
            } else {
                let to = self.list_for(tick);
                self.link(index, to);
            }
        }
        // Keep the buffer for the slot's next turn, unless a burst grew it
        // large or re-filing refilled the list (overflow only).
        members.clear();
        let slot = &mut self.lists[usize::from(list)];
        if slot.is_empty() && members.capacity() <= LIST_RETAIN_MAX {
            *slot = members;
        }
    }
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("len", &self.len)
            .field("now_ns", &self.now_ns)
            .field("elapsed_ticks", &self.elapsed)
            .field("next_deadline_ns", &self.next_deadline_ns())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const MS: u64 = TICK_NS;

    /// Advances to `now` and returns the values fired, sorted.
    fn fired_at(wheel: &mut TimerWheel<u64>, now: u64) -> Vec<u64> {
        let mut fired = Vec::new();
        wheel.advance(now, |_, value| fired.push(value));
        fired.sort_unstable();
        fired
    }

    #[test]
    fn entries_stay_small() {
        // Plus 4 bytes per live timer in its list.
        assert_eq!(std::mem::size_of::<Entry<()>>(), 24);
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 24);
        assert_eq!(std::mem::size_of::<Entry<u64>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<Box<u8>>>(), 24);
    }

    #[test]
    fn deadlines_round_up_to_the_next_tick() {
        let start = 1_000 * MS;
        let mut wheel = TimerWheel::new(start);
        wheel.insert(start + 1, 1); // rounds up to start + 1 ms
        wheel.insert(start + MS, 2); // on a tick: stays
        wheel.insert(start + MS + 1, 3); // rounds up to start + 2 ms
        assert_eq!(wheel.next_deadline_ns(), Some(start + MS));
        assert_eq!(fired_at(&mut wheel, start + MS - 1), [] as [u64; 0]);
        assert_eq!(fired_at(&mut wheel, start + MS), [1, 2]);
        assert_eq!(fired_at(&mut wheel, start + 2 * MS - 1), [] as [u64; 0]);
        assert_eq!(fired_at(&mut wheel, start + 2 * MS), [3]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_deadline_ns(), None);
    }

    #[test]
    fn past_deadlines_fire_at_the_next_advance() {
        let now = 5 * MS + MS / 2;
        let mut wheel = TimerWheel::new(now);
        wheel.insert(0, 1);
        wheel.insert(5 * MS + 1, 2); // past, though its tick (6 ms) is not
        wheel.insert(now, 3); // exactly now: due
        wheel.insert(now + 1, 4); // future: waits for its tick
        assert_eq!(wheel.next_deadline_ns(), Some(now));
        assert_eq!(fired_at(&mut wheel, now), [1, 2, 3]);
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.next_deadline_ns(), Some(6 * MS));
        assert_eq!(fired_at(&mut wheel, 6 * MS - 1), [] as [u64; 0]);
        assert_eq!(fired_at(&mut wheel, 6 * MS), [4]);
    }

    #[test]
    fn level_boundaries_fire_exactly_at_their_tick() {
        // Offsets around each level's span, from a start that is not aligned.
        let start_tick = 12_345_678;
        let mut offsets = Vec::new();
        for level in 0..LEVELS as u32 {
            let span = 1u64 << (SLOT_BITS * (level + 1));
            offsets.extend([span - 1, span, span + 1]);
        }
        for &offset in &offsets {
            let mut wheel = TimerWheel::new(start_tick * MS);
            let tick = start_tick + offset;
            wheel.insert(tick * MS, offset);
            // Step across in ~100 jumps, then up to one nanosecond before.
            let step = (offset / 97).max(1) * MS;
            let mut now = start_tick * MS;
            while now + step < tick * MS - 1 {
                now += step;
                assert!(fired_at(&mut wheel, now).is_empty(), "offset {offset}");
                assert!(wheel.next_deadline_ns().unwrap() <= tick * MS);
            }
            assert!(
                fired_at(&mut wheel, tick * MS - 1).is_empty(),
                "offset {offset}"
            );
            assert_eq!(wheel.next_deadline_ns(), Some(tick * MS), "offset {offset}");
            assert_eq!(fired_at(&mut wheel, tick * MS), [offset]);
        }
    }

    #[test]
    fn far_future_and_overflow_never_fire_early() {
        let day = 24 * 3600 * 1_000 * MS;
        let start = 3 * day + 17;
        let mut wheel = TimerWheel::new(start);
        let deadlines = [
            14 * day,
            15 * day + 3,
            800 * day,
            3 * 365 * day + 1,
            5_000 * day,
        ];
        for (i, &deadline) in deadlines.iter().enumerate() {
            wheel.insert(start + deadline, i as u64);
        }
        for (i, &deadline) in deadlines.iter().enumerate() {
            let tick_start = (start + deadline).div_ceil(MS) * MS;
            assert!(
                fired_at(&mut wheel, tick_start - 1).is_empty(),
                "timer {i} fired early"
            );
            assert!(wheel.next_deadline_ns().unwrap() <= tick_start);
            assert_eq!(fired_at(&mut wheel, tick_start), [i as u64]);
        }
        assert!(wheel.is_empty());
    }

    #[test]
    fn overflow_timers_on_block_starts_fire_on_their_tick() {
        // Ticks that are exact multiples of the wheel's span are where the
        // overflow list is re-examined; they must fire then, not a tick later.
        let mut wheel = TimerWheel::new(5 * MS);
        for block in [1, 2, 7] {
            wheel.insert(block * WHEEL_TICKS * MS, block);
        }
        for block in [1, 2, 7] {
            let start = block * WHEEL_TICKS * MS;
            assert!(fired_at(&mut wheel, start - 1).is_empty());
            assert_eq!(wheel.next_deadline_ns(), Some(start));
            assert_eq!(fired_at(&mut wheel, start), [block]);
        }
    }

    #[test]
    fn one_jump_fires_everything_without_per_tick_work() {
        let mut wheel = TimerWheel::new(0);
        let mut deadlines: Vec<u64> = (0..60).map(|i| (1u64 << i) + i).collect();
        deadlines.push(u64::MAX - TICK_NS);
        for (i, &deadline) in deadlines.iter().enumerate() {
            wheel.insert(deadline, i as u64);
        }
        let fired = fired_at(&mut wheel, u64::MAX);
        assert_eq!(fired, (0..deadlines.len() as u64).collect::<Vec<_>>());
        // Each timer expires at most once per level it passes through, plus
        // the overflow re-examinations (one per 2^36-tick block holding one).
        assert!(
            wheel.slots_expired <= (deadlines.len() * (LEVELS + 2)) as u64,
            "{} slots expired",
            wheel.slots_expired
        );
    }

    #[test]
    fn cancel_after_fire_or_twice_is_none() {
        let mut wheel = TimerWheel::new(0);
        let a = wheel.insert(3 * MS, 1);
        let b = wheel.insert(10 * MS, 2);
        let mut fired_ids = Vec::new();
        wheel.advance(5 * MS, |id, _| fired_ids.push(id));
        assert_eq!(fired_ids, [a]);
        assert_eq!(wheel.cancel(a), None);
        assert_eq!(wheel.cancel(b), Some(2));
        assert_eq!(wheel.cancel(b), None);
        assert!(wheel.is_empty());
        assert_eq!(fired_at(&mut wheel, 100 * MS), [] as [u64; 0]);
    }

    #[test]
    fn stale_id_does_not_cancel_the_entry_reused() {
        let mut wheel = TimerWheel::new(0);
        let old = wheel.insert(50 * MS, 1);
        assert_eq!(wheel.cancel(old), Some(1));
        let new = wheel.insert(60 * MS, 2);
        assert_eq!(new.index, old.index, "the entry is reused");
        assert_ne!(new, old);
        assert_eq!(wheel.cancel(old), None);
        assert_eq!(wheel.len(), 1);
        assert_eq!(fired_at(&mut wheel, 60 * MS), [2]);
        assert_eq!(wheel.cancel(new), None);
    }

    #[test]
    fn cancel_from_the_middle_and_ends_of_a_slot() {
        let mut wheel = TimerWheel::new(0);
        let ids: Vec<_> = (0..5).map(|i| wheel.insert(7 * MS, i)).collect();
        assert_eq!(wheel.cancel(ids[2]), Some(2));
        assert_eq!(wheel.cancel(ids[4]), Some(4));
        assert_eq!(wheel.cancel(ids[3]), Some(3));
        assert_eq!(wheel.cancel(ids[0]), Some(0));
        assert_eq!(wheel.len(), 1);
        // Entries reused on the same slot meet their own stale indices there.
        let again: Vec<_> = (10..14).map(|i| wheel.insert(7 * MS, i)).collect();
        assert_eq!(wheel.cancel(again[1]), Some(11));
        assert_eq!(fired_at(&mut wheel, 7 * MS), [1, 10, 12, 13]);
        // Emptying a slot by cancels clears its occupancy bit.
        let id = wheel.insert(9 * MS, 9);
        wheel.cancel(id);
        assert_eq!(wheel.next_deadline_ns(), None);
    }

    #[test]
    fn many_cancels_in_one_slot_keep_the_rest() {
        let mut wheel = TimerWheel::new(0);
        let ids: Vec<_> = (0..1_000u64).map(|i| wheel.insert(40 * MS, i)).collect();
        // Cancel every value not coprime with 6, in a scrambled order.
        let mut cancelled: Vec<u64> = (0..1_000).filter(|v| v % 2 == 0 || v % 3 == 0).collect();
        cancelled.sort_by_key(|v| (v * 7_919) % 1_009);
        for &v in &cancelled {
            assert_eq!(wheel.cancel(ids[v as usize]), Some(v));
        }
        let kept: Vec<u64> = (0..1_000).filter(|v| v % 2 != 0 && v % 3 != 0).collect();
        assert_eq!(wheel.len(), kept.len());
        assert_eq!(fired_at(&mut wheel, 40 * MS), kept);
    }

    #[test]
    fn stale_indices_are_bounded_and_skipped_on_the_overflow_list() {
        let mut wheel = TimerWheel::new(0);
        let far = 3 * WHEEL_TICKS * MS;
        // Churn on one overflow list: cancelled indices pile up only to the
        // bound (inserts compact the list, cancels never lengthen it), and
        // entries reused there meet their stale indices.
        let mut compacted = false;
        for round in 0..50u64 {
            let ids: Vec<_> = (0..40)
                .map(|i| wheel.insert(far + (round * 40 + i) * MS, round * 40 + i))
                .collect();
            let list = &wheel.lists[usize::from(OVERFLOW)];
            let (held, live) = (list.len(), wheel.live[usize::from(OVERFLOW)] as usize);
            assert!(
                held <= 2 * live + LIST_STALE_SLACK,
                "{held} held for {live} live"
            );
            compacted |= held < live + 35 * round as usize;
            for &id in &ids[..35] {
                assert!(wheel.cancel(id).is_some());
            }
            assert_eq!(wheel.lists[usize::from(OVERFLOW)].len(), held);
        }
        assert!(compacted, "the churn reached the bound");
        let mut want: Vec<u64> = (0..50u64)
            .flat_map(|round| (35..40).map(move |i| round * 40 + i))
            .collect();
        want.sort_unstable();
        // A block boundary re-examines the overflow list: those still out
        // of reach go back on it, once each.
        assert!(fired_at(&mut wheel, WHEEL_TICKS * MS).is_empty());
        assert_eq!(wheel.len(), want.len());
        assert_eq!(fired_at(&mut wheel, far + 2_000 * MS), want);
        assert!(wheel.is_empty());
    }

    #[test]
    fn a_burst_does_not_pin_list_memory() {
        let mut wheel = TimerWheel::new(0);
        let burst = LIST_RETAIN_MAX as u64 + 1;
        for i in 0..burst {
            wheel.insert(5 * MS, i);
        }
        assert_eq!(fired_at(&mut wheel, 5 * MS).len() as u64, burst);
        assert!(wheel.lists.iter().all(|list| list.capacity() == 0));
        // A modest slot keeps its buffer for next time.
        for i in 0..10 {
            wheel.insert(6 * MS, i);
        }
        assert_eq!(fired_at(&mut wheel, 6 * MS).len(), 10);
        assert!(wheel.lists.iter().any(|list| list.capacity() >= 10));
    }

    #[test]
    fn time_going_backwards_is_ignored() {
        let mut wheel = TimerWheel::new(100 * MS);
        wheel.insert(101 * MS, 1);
        assert!(fired_at(&mut wheel, 50 * MS).is_empty());
        assert_eq!(fired_at(&mut wheel, 101 * MS), [1]);
    }

    #[test]
    fn drops_live_values_with_the_wheel() {
        let value = std::rc::Rc::new(());
        let mut wheel = TimerWheel::new(0);
        for i in 0..100 {
            wheel.insert(i * 1_000 * MS, value.clone());
        }
        let mut fired = 0;
        wheel.advance(10_000 * MS, |_, _| fired += 1);
        assert_eq!(std::rc::Rc::strong_count(&value), 1 + 100 - fired);
        drop(wheel);
        assert_eq!(std::rc::Rc::strong_count(&value), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert with a deadline `now + offset` (saturating; may be past).
        Insert(i128),
        /// Cancel the n-th id ever issued (mod the count), live or not.
        Cancel(usize),
        /// Advance by this many nanoseconds (saturating).
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let ms = MS as i128;
        let offset = prop_oneof![
            3 => -3 * ms..=0,
            4 => 0..=3 * ms,
            4 => 0..=300 * ms,
            3 => 0..=(1 << 20) * ms,
            2 => 0..=(1 << 38) * ms,
            1 => Just(i128::from(u64::MAX)),
        ];
        let step = prop_oneof![
            3 => 0..=2 * MS,
            3 => 0..=100 * MS,
            2 => 0..=(1 << 22) * MS,
            1 => 0..=(1 << 40) * MS,
            1 => Just(u64::MAX),
        ];
        prop_oneof![
            5 => offset.prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Cancel),
            3 => step.prop_map(Op::Advance),
        ]
    }

    /// What the reference knows about a live timer.
    struct Expected {
        deadline: u64,
        /// Inserted with a deadline not after the wheel's `now`: due at the
        /// next advance.
        due: bool,
    }

    impl Expected {
        /// Whether an advance to `now` must have fired it. A tick start past
        /// the end of `u64` is never reached.
        fn must_fire_by(&self, now: u64) -> bool {
            self.due
                || tick_of_deadline(self.deadline)
                    .checked_mul(TICK_NS)
                    .is_some_and(|start| start <= now)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Random inserts, cancels and advances against a `BTreeMap`: the same
        /// timers fire, each once, never before its deadline and no later
        /// than the first advance at or after its rounded-up tick.
        #[test]
        fn agrees_with_a_reference_model(
            start in prop_oneof![0..=10 * MS, 0..=(1u64 << 62), Just(u64::MAX - 1_000 * MS)],
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let mut wheel = TimerWheel::new(start);
            let mut reference: BTreeMap<u64, Expected> = BTreeMap::new();
            let mut ids: Vec<TimerId> = Vec::new();
            let mut now = start;
            for op in ops {
                let held_before: Vec<usize> = wheel.lists.iter().map(Vec::len).collect();
                match op {
                    Op::Insert(offset) => {
                        let deadline = (i128::from(now) + offset)
                            .clamp(0, i128::from(u64::MAX)) as u64;
                        let value = ids.len() as u64;
                        ids.push(wheel.insert(deadline, value));
                        reference.insert(value, Expected { deadline, due: deadline <= now });
                    }
                    Op::Cancel(n) => {
                        if ids.is_empty() {
                            continue;
                        }
                        let value = (n % ids.len()) as u64;
                        let expected = reference.remove(&value).map(|_| value);
                        prop_assert_eq!(wheel.cancel(ids[value as usize]), expected);
                    }
                    Op::Advance(step) => {
                        now = now.saturating_add(step);
                        let mut fired = Vec::new();
                        wheel.advance(now, |id, value| fired.push((id, value)));
                        for (id, value) in fired {
                            prop_assert_eq!(id, ids[value as usize]);
                            let expected = reference.remove(&value);
                            prop_assert!(expected.is_some(), "timer {} fired twice or after cancel", value);
                            let expected = expected.unwrap();
                            prop_assert!(expected.deadline <= now, "timer {} fired early", value);
                            prop_assert!(expected.must_fire_by(now), "timer {} fired before its tick", value);
                        }
                        for (value, expected) in &reference {
                            prop_assert!(!expected.must_fire_by(now), "timer {} late at {}", value, now);
                        }
                    }
                }
                prop_assert_eq!(wheel.len(), reference.len());
                let next = wheel.next_deadline_ns();
                if reference.values().any(|e| e.due) {
                    prop_assert!(next.is_some_and(|next| next <= now));
                } else if let Some(earliest) = reference
                    .values()
                    .map(|e| tick_of_deadline(e.deadline).saturating_mul(TICK_NS))
                    .min()
                {
                    let next = next.expect("non-empty wheel has a next deadline");
                    prop_assert!(next <= earliest, "next {} after earliest {}", next, earliest);
                    prop_assert!(next > now || now == u64::MAX, "next {} not after now {}", next, now);
                } else {
                    prop_assert_eq!(next, None);
                }
                for (list, members) in wheel.lists.iter().enumerate() {
                    let live = wheel.live[list] as usize;
                    // Only inserts lengthen a list, and they leave it within
                    // the bound; a list with no live timer is empty.
                    prop_assert!(
                        members.len() <= held_before[list] || members.len() <= 2 * live + LIST_STALE_SLACK,
                        "list {} holds {} for {} live", list, members.len(), live
                    );
                    prop_assert!(live > 0 || members.is_empty(), "list {} holds {} stale", list, members.len());
                    prop_assert_eq!(members.iter().enumerate().filter(|&(pos, &i)| wheel.is_member(i, list as u16, pos)).count(), live);
                }
            }
        }
    }
}
