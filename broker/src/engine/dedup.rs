//! Dedup windows: which dedup keys a queue accepted recently.
//!
//! Every key has one owner shard, chosen by a fixed hash of (queue
//! incarnation, key) ([`owner_shard`]); sends carrying a key are handled by
//! that owner, so the window holds across shards and within one batch (the
//! owner processes a batch's entries in order). An entry expires `window`
//! after the send it recorded; duplicates do not refresh it. Expiry is one
//! timer per queue on the owner's wheel, for the first of the queue's
//! entries, which end in the order they were recorded.

use core::hash::Hasher;

use siphasher::sip::SipHasher13;
use sluice_protocol::MessageId;
use sluice_protocol::limits::DEDUP_KEY_BYTES_MAX;

use super::block_deque::{BlockDeque, Spare};
use super::hashing::{IndexMap, KeyedHash};
use super::wheel::TimerId;
use index::{PositionIndex, Slot};

mod index;

/// The shard that owns dedup key `key` of queue `incarnation`. Fixed hash
/// keys: every shard must agree, whatever the run.
#[must_use]
pub fn owner_shard(incarnation: u32, key: &[u8], shards: u16) -> u16 {
    let mut h = SipHasher13::new_with_keys(0x736c_7569_6365_6464, 0x6564_7570_6b65_7973);
    h.write(&incarnation.to_le_bytes());
    h.write(key);
    // The remainder is below `shards`, a u16.
    (h.finish() % u64::from(shards)) as u16
}

/// Entries a queue's log holds at most, and bytes of keys: positions and
/// key offsets are kept in 32 bits, wrapping. A queue at either bound
/// records no more keys until some expire (no broker has the memory to
/// reach them: 4 Gi entries are 160 GiB).
const LOG_ENTRIES_MAX: u64 = 1 << 32;
const LOG_ARENA_BYTES_MAX: usize = (1 << 32) - DEDUP_KEY_BYTES_MAX;

/// Entries in a block of a queue's log (40 KiB).
const LOG_BLOCK: usize = 1024;

/// Blocks of emptied logs the table keeps for the next that grows (2.5 MiB).
const LOG_SPARE_BLOCKS: usize = 64;

type LogSpare = Spare<Entry, LOG_BLOCK>;

/// One recorded key, in its queue's log: 40 bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// The message it recorded (a `MessageId`'s two halves: 8-byte
    /// alignment keeps the entry small).
    id: [u64; 2],
    /// When the window ends (monotonic ns).
    until_ns: u64,
    /// The hash of its key, under which the map finds it.
    hash: u32,
    /// Where its key's bytes start in the log's arena: the low 32 bits of
    /// an absolute offset (bytes ever appended before them).
    key_at: u32,
    /// The memory it holds, to release when it goes.
    cost: u32,
    key_len: u8,
    /// Whether it still counts: a later entry of the same key replaces one
    /// past its window, which then waits in the log, dead, until expiry
    /// reaches it.
    live: bool,
}

/// One queue's entries in the order they were recorded (so in the order
/// they end) and their keys' bytes in one arena in the same order.
/// Entries and key bytes are appended at the back and dropped from the
/// front: no allocation per key, and memory written in order. The entries
/// sit in fixed blocks ([`BlockDeque`]): a log that grows allocates a block
/// at a time (from the table's spare blocks first) and never copies what it
/// holds, as a doubling buffer would, with 5 minutes of keys in it.
#[derive(Debug, Default)]
struct Log {
    entries: BlockDeque<Entry, LOG_BLOCK>,
    /// Key bytes; `arena[i]` is the byte at absolute offset
    /// `arena_base + i`. Bytes before `arena_start` are dropped.
    arena: Vec<u8>,
    arena_base: u64,
    arena_start: usize,
}

impl Log {
    /// The position of the entry whose position has `low` as its low 32
    /// bits, if it is one of the log's.
    fn position(&self, low: u32) -> u64 {
        let head = self.entries.head();
        head + u64::from(low.wrapping_sub(low32(head)))
    }

    /// The entry whose position has `low` as its low 32 bits.
    fn at(&self, low: u32) -> Option<Entry> {
        self.entries.get(self.position(low))
    }

    fn at_mut(&mut self, low: u32) -> Option<&mut Entry> {
        let position = self.position(low);
        self.entries.get_mut(position)
    }

    /// The position the next entry gets.
    fn end(&self) -> u64 {
        self.entries.end()
    }

    /// Whether it can record no more keys (see [`LOG_ENTRIES_MAX`]).
    fn full(&self) -> bool {
        self.entries.len() as u64 >= LOG_ENTRIES_MAX || self.arena.len() >= LOG_ARENA_BYTES_MAX
    }

    /// The dedup key of `e` (an entry of this log).
    fn key_of(&self, e: &Entry) -> &[u8] {
        let at = e.key_at.wrapping_sub(low32(self.arena_base)) as usize;
        self.arena
            .get(at..at + usize::from(e.key_len))
            .unwrap_or_default()
    }

    /// Appends an entry of `key`, whose other fields are `e`'s.
    fn push(&mut self, key: &[u8], e: Entry, spare: &mut LogSpare) {
        let key_at = low32(self.arena_base + self.arena.len() as u64);
        self.arena.extend_from_slice(key);
        self.entries.push_back(Entry { key_at, ..e }, spare);
    }

    /// Whether the entry at `low` (found under the hash of `key`) is the
    /// entry of `key`.
    fn is_entry_of(&self, low: u32, key: &[u8]) -> bool {
        self.at(low).is_some_and(|e| self.key_of(&e) == key)
    }

    /// The entry at `low`, past its window, gives way to a later one of its
    /// key (see [`Entry::live`]): it is dead, skipped when expiry reaches
    /// it. Returns the memory it held, to release.
    fn retire(&mut self, low: u32) -> u64 {
        self.at_mut(low).map_or(0, |e| {
            e.live = false;
            u64::from(e.cost)
        })
    }

    /// Appends the live entry of `key` (hash `hash`) for message `id`,
    /// costing `cost`, until `until_ns`; returns when to arm the queue's
    /// timer, which runs while it has entries: for this entry, if the log
    /// was empty.
    fn append(
        &mut self,
        key: &[u8],
        hash: u32,
        id: MessageId,
        cost: u64,
        until_ns: u64,
        spare: &mut LogSpare,
    ) -> Option<u64> {
        let arm_at = self.entries.is_empty().then_some(until_ns);
        self.push(
            key,
            Entry {
                // A u128's halves: the casts keep 64 bits each by design.
                id: [id.0 as u64, (id.0 >> 64) as u64],
                until_ns,
                hash,
                key_at: 0,
                cost: u32::try_from(cost).unwrap_or(u32::MAX),
                // At most DEDUP_KEY_BYTES_MAX (128): no hash is given for
                // a longer key.
                key_len: u8::try_from(key.len()).unwrap_or(u8::MAX),
                live: true,
            },
            spare,
        );
        arm_at
    }

    /// Drops the last entry and its key's bytes.
    fn pop_back(&mut self, spare: &mut LogSpare) -> Option<Entry> {
        let e = self.entries.pop_back(spare)?;
        let len = self.arena.len() - usize::from(e.key_len);
        self.arena.truncate(len.max(self.arena_start));
        Some(e)
    }

    /// Drops the first entry and its key's bytes.
    fn pop_front(&mut self, spare: &mut LogSpare) -> Option<Entry> {
        let e = self.entries.pop_front(spare)?;
        self.arena_start += usize::from(e.key_len);
        // Past half the arena, the dropped bytes go (amortized: each byte
        // moves at most once per halving).
        if self.arena_start > 4096 && self.arena_start * 2 > self.arena.len() {
            self.arena.drain(..self.arena_start);
            self.arena_base += self.arena_start as u64;
            self.arena_start = 0;
        }
        Some(e)
    }
}

/// A queue's dedup window: its log, the map that finds a live entry by
/// key, and the timer that ends the window of the first entry.
#[derive(Debug, Default)]
struct QueueLog {
    /// The queue's incarnation.
    incarnation: u32,
    log: Log,
    /// Each live entry as (its key's hash, the low 32 bits of its
    /// position), found by hash and confirmed by the entry's key: 8 bytes a
    /// key, and no hashing again as the table grows.
    map: PositionIndex,
    timer: Option<TimerId>,
}

impl QueueLog {
    /// The live entry of `key`, whose hash is `hash`.
    fn find(&self, hash: u32, key: &[u8]) -> Option<Entry> {
        let log = &self.log;
        let i = self.map.find(hash, |low| log.is_entry_of(low, key))?;
        log.at(self.map.low_at(i))
    }
}

impl QueueLog {
    /// Looks `key`, whose hash is `hash`, up at `now_ns`: the id recorded
    /// for it within its window, or the hash to record it with (none when
    /// the log is full).
    fn look(&self, hash: u32, key: &[u8], now_ns: u64) -> Probe {
        match self.find(hash, key) {
            Some(e) if e.until_ns > now_ns => Probe::Found(id_of(&e)),
            _ if self.log.full() => Probe::Absent(None),
            found => Probe::Absent(Some(KeyHash {
                hash,
                stale: found.is_some(),
            })),
        }
    }

    /// Records `key` (its `hash` from a probe) for message `id` until
    /// `until_ns`, after the entries recorded before.
    fn record(
        &mut self,
        key: &[u8],
        KeyHash { hash, stale }: KeyHash,
        id: MessageId,
        cost: u64,
        until_ns: u64,
        spare: &mut LogSpare,
    ) -> Recorded {
        let QueueLog { log, map, .. } = self;
        let position = low32(log.end());
        // A key still here past its window (see the type's docs) gives
        // way: its entry is dead, skipped when expiry reaches it, and the
        // map's entry is the new one's. Without one when probed (the
        // common case), there is none to find.
        let mut freed = 0;
        let mut replaced = false;
        if stale {
            if let Some(i) = map.find(hash, |low| log.is_entry_of(low, key)) {
                let old = map.low_at(i);
                map.set_low(i, position);
                replaced = true;
                freed = log.retire(old);
            }
        }
        let arm_at = log.append(key, hash, id, cost, until_ns, spare);
        if !replaced {
            map.insert(hash, position);
        }
        Recorded { freed, arm_at }
    }

    /// [`QueueLog::look`], then [`QueueLog::record`] when the key is
    /// absent, in one probe of the map: the slot a key absent takes is the
    /// one its look-up ended at.
    #[allow(clippy::too_many_arguments)]
    fn check_in(
        &mut self,
        hash: u32,
        key: &[u8],
        now_ns: u64,
        id: MessageId,
        cost: u64,
        until_ns: u64,
        spare: &mut LogSpare,
    ) -> CheckIn {
        let QueueLog { log, map, .. } = self;
        let full = log.full();
        let found = map.probe(hash, |low| log.is_entry_of(low, key));
        let position = low32(log.end());
        match found {
            Slot::Found(i) => {
                let old = map.low_at(i);
                let Some(e) = log.at(old) else {
                    return CheckIn::Unrecordable;
                };
                if e.until_ns > now_ns {
                    return CheckIn::Found(id_of(&e));
                }
                if full {
                    return CheckIn::Unrecordable;
                }
                // Past its window: the new entry takes its place in the
                // map, and it waits in the log, dead.
                map.set_low(i, position);
                let freed = log.retire(old);
                let arm_at = log.append(key, hash, id, cost, until_ns, spare);
                CheckIn::Recorded(Recorded { freed, arm_at })
            }
            Slot::Vacant(i) => {
                if full {
                    return CheckIn::Unrecordable;
                }
                map.put(i, hash, position);
                let arm_at = log.append(key, hash, id, cost, until_ns, spare);
                CheckIn::Recorded(Recorded { freed: 0, arm_at })
            }
        }
    }
}

/// The low 32 bits of a position or an offset, as entries and the map keep
/// them.
fn low32(n: u64) -> u32 {
    // Truncation is the point: the log's bounds keep 32 bits unambiguous.
    n as u32
}

/// The 64-bit hash under which a map places a key whose hash is `h`: one
/// multiplication spreads it, so that its high bits, where the map's
/// probe starts, vary with all of `h`'s.
fn spread(h: u32) -> u64 {
    u64::from(h).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A key looked up ([`DedupTable::probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Recorded, within its window: the message it recorded.
    Found(MessageId),
    /// Not recorded (or past its window): the hash that records it
    /// ([`DedupTable::insert`]), or `None` for a key that is never
    /// recorded: longer than a dedup key can be, or for a queue whose log
    /// is full (see [`LOG_ENTRIES_MAX`]).
    Absent(Option<KeyHash>),
}

/// A key checked in ([`DedupTable::check_in`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckIn {
    /// Recorded, within its window: the message it recorded.
    Found(MessageId),
    /// Absent, and now recorded.
    Recorded(Recorded),
    /// Absent, and never recorded (see [`Probe::Absent`]).
    Unrecordable,
}

/// The hash of a key, computed once per send, and whether the table still
/// held an entry of the key past its window when it was looked up (which
/// recording it replaces; without one, it is inserted at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHash {
    hash: u32,
    stale: bool,
}

/// What [`DedupTable::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The memory of an entry of the same key past its window that it
    /// replaced, to release.
    pub freed: u64,
    /// The queue had no entry: the caller arms its timer for this time
    /// ([`DedupTable::set_timer`]).
    pub arm_at: Option<u64>,
}

/// What [`DedupTable::expire_due`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expired {
    /// The memory of the entries it removed, to release.
    pub freed: u64,
    /// When the window of the queue's next entry ends: the caller arms the
    /// queue's timer again for it ([`DedupTable::set_timer`]).
    pub next_at: Option<u64>,
}

/// One shard's dedup entries.
///
/// Each queue's entries expire in the order they were recorded (its window
/// is the same for all of them, like retention for its messages), so they
/// are a log per queue ([`QueueLog`]), with one timer for its first
/// entry's end, rather than one per key, and a map of its own. Should a
/// queue's window shrink, a later entry can end before an earlier one: it
/// is no longer found ([`DedupTable::probe`] looks at the end) and goes
/// when the entries before it have.
#[derive(Debug)]
pub(crate) struct DedupTable {
    /// SipHash with this process's random keys: the keys are the clients'.
    hasher: KeyedHash,
    /// The queues' logs, each found by its incarnation through `by_queue`.
    logs: Vec<QueueLog>,
    by_queue: IndexMap<u32, usize>,
    /// The log checked in last, tried before `by_queue`: a batch's keys are
    /// all one queue's (an index into `logs`, confirmed by its
    /// incarnation, so a stale one only misses).
    last: usize,
    spare: LogSpare,
}

impl Default for DedupTable {
    fn default() -> DedupTable {
        DedupTable {
            hasher: KeyedHash::default(),
            logs: Vec::new(),
            by_queue: IndexMap::default(),
            last: 0,
            spare: Spare::new(LOG_SPARE_BLOCKS),
        }
    }
}

impl DedupTable {
    /// Where queue `incarnation`'s log is in `logs`, if it has one.
    #[inline]
    fn log_at(&self, incarnation: u32) -> Option<usize> {
        if self
            .logs
            .get(self.last)
            .is_some_and(|q| q.incarnation == incarnation)
        {
            return Some(self.last);
        }
        self.by_queue.get(&incarnation).copied()
    }

    /// Where queue `incarnation`'s log is, made if it has none; it is the
    /// one tried first from now on.
    #[inline]
    fn log_or_new(&mut self, incarnation: u32) -> usize {
        let i = match self.log_at(incarnation) {
            Some(i) => i,
            None => {
                self.logs.push(QueueLog {
                    incarnation,
                    ..QueueLog::default()
                });
                let i = self.logs.len() - 1;
                self.by_queue.insert(incarnation, i);
                i
            }
        };
        self.last = i;
        i
    }

    fn log_mut(&mut self, incarnation: u32) -> Option<&mut QueueLog> {
        let i = self.log_at(incarnation)?;
        self.logs.get_mut(i)
    }

    /// Takes queue `incarnation`'s log out of the table.
    fn remove_log(&mut self, incarnation: u32) -> Option<QueueLog> {
        let i = self.by_queue.remove(&incarnation)?;
        let q = self.logs.swap_remove(i);
        if let Some(moved) = self.logs.get(i) {
            self.by_queue.insert(moved.incarnation, i);
        }
        Some(q)
    }

    /// Looks `key` up at `now_ns`: the id recorded for it within its
    /// window, or the hash to record it with.
    pub fn probe(&self, incarnation: u32, key: &[u8], now_ns: u64) -> Probe {
        if key.len() > DEDUP_KEY_BYTES_MAX {
            return Probe::Absent(None);
        }
        // 32 bits of the key's hash: a queue's map keeps no more.
        let hash = low32(self.hasher.hash(key));
        match self.log_at(incarnation) {
            Some(i) => self.logs[i].look(hash, key, now_ns),
            None => Probe::Absent(Some(KeyHash { hash, stale: false })),
        }
    }

    /// The id recorded for `key`, if it is within its window at `now_ns`.
    #[cfg(test)]
    pub fn lookup(&self, incarnation: u32, key: &[u8], now_ns: u64) -> Option<MessageId> {
        match self.probe(incarnation, key, now_ns) {
            Probe::Found(id) => Some(id),
            Probe::Absent(_) => None,
        }
    }

    /// Records `key` (its bytes are copied, so the caller's buffer can go)
    /// until `until_ns`, after any entry of the queue recorded before;
    /// `hash` is what [`DedupTable::probe`] gave for it, which it gives
    /// only for a key no longer than a dedup key can be.
    pub fn insert(
        &mut self,
        incarnation: u32,
        key: &[u8],
        hash: KeyHash,
        id: MessageId,
        cost: u64,
        until_ns: u64,
    ) -> Recorded {
        debug_assert!(
            key.len() <= DEDUP_KEY_BYTES_MAX,
            "a KeyHash of a key too long"
        );
        let i = self.log_or_new(incarnation);
        self.logs[i].record(key, hash, id, cost, until_ns, &mut self.spare)
    }

    /// The hashes of a batch's dedup keys (`None` for an entry without
    /// one, or with one longer than a dedup key can be), into `out`, in
    /// order, for [`DedupTable::check_in`]; and for each, a hint to the CPU
    /// to fetch the part of queue `incarnation`'s map its check-in will
    /// read first. So the batch waits for its keys' cache misses together,
    /// not one after the other.
    pub fn hash_ahead<'k>(
        &self,
        incarnation: u32,
        keys: impl Iterator<Item = Option<&'k [u8]>>,
        out: &mut Vec<Option<u32>>,
    ) {
        let q = self.log_at(incarnation).map(|i| &self.logs[i]);
        out.extend(keys.map(|key| {
            let key = key.filter(|k| k.len() <= DEDUP_KEY_BYTES_MAX)?;
            let hash = low32(self.hasher.hash(key));
            if let Some(q) = q {
                q.map.read_soon(hash);
            }
            Some(hash)
        }));
    }

    /// [`DedupTable::probe`], then [`DedupTable::insert`] for message `id`
    /// when the key is absent, in one lookup: a send that will store
    /// message `id` records its key as it checks it, and calls
    /// [`DedupTable::undo_last`] should it fail after all. `hashed` is the
    /// key's hash from [`DedupTable::hash_ahead`], when the caller has it.
    #[allow(clippy::too_many_arguments)]
    pub fn check_in(
        &mut self,
        incarnation: u32,
        key: &[u8],
        hashed: Option<u32>,
        now_ns: u64,
        id: MessageId,
        cost: u64,
        until_ns: u64,
    ) -> CheckIn {
        if key.len() > DEDUP_KEY_BYTES_MAX {
            return CheckIn::Unrecordable;
        }
        let hash = hashed.unwrap_or_else(|| low32(self.hasher.hash(key)));
        debug_assert_eq!(hash, low32(self.hasher.hash(key)), "a hash of another key");
        let i = self.log_or_new(incarnation);
        self.logs[i].check_in(hash, key, now_ns, id, cost, until_ns, &mut self.spare)
    }

    /// Takes back the entry recorded last for queue `incarnation` (by a
    /// [`DedupTable::check_in`] whose send failed). An entry it replaced
    /// stays dead: its memory, freed, is the caller's to release as if the
    /// send had gone through.
    pub fn undo_last(&mut self, incarnation: u32) {
        let Some(i) = self.log_at(incarnation) else {
            return;
        };
        let q = &mut self.logs[i];
        let position = low32(q.log.end().wrapping_sub(1));
        if let Some(e) = q.log.pop_back(&mut self.spare) {
            q.map.remove(e.hash, position);
        }
        // A log emptied so has no timer yet: its send would have armed it.
        if q.log.entries.is_empty() && q.timer.is_none() {
            self.remove_log(incarnation);
        }
    }

    /// Remembers queue `incarnation`'s timer.
    pub fn set_timer(&mut self, incarnation: u32, timer: TimerId) {
        if let Some(q) = self.log_mut(incarnation) {
            q.timer = Some(timer);
        }
    }

    /// Queue `incarnation`'s timer fired at `now_ns`: removes its entries
    /// from the first on, while their windows have ended.
    pub fn expire_due(&mut self, incarnation: u32, now_ns: u64) -> Expired {
        let mut freed = 0;
        let Some(i) = self.log_at(incarnation) else {
            return Expired {
                freed,
                next_at: None,
            };
        };
        let q = &mut self.logs[i];
        q.timer = None;
        while let Some(e) = q.log.entries.front() {
            if e.live && e.until_ns > now_ns {
                return Expired {
                    freed,
                    next_at: Some(e.until_ns),
                };
            }
            let position = low32(q.log.entries.head());
            if let Some(e) = q.log.pop_front(&mut self.spare).filter(|e| e.live) {
                q.map.remove(e.hash, position);
                freed += u64::from(e.cost);
            }
        }
        self.remove_log(incarnation);
        Expired {
            freed,
            next_at: None,
        }
    }

    /// Removes every entry of a deleted queue; returns its timer and their
    /// total cost.
    pub fn remove_queue(&mut self, incarnation: u32) -> (Option<TimerId>, u64) {
        let Some(mut q) = self.remove_log(incarnation) else {
            return (None, 0);
        };
        let live = q.log.entries.iter().filter(|e| e.live);
        let cost = live.map(|e| u64::from(e.cost)).sum();
        q.log.entries.clear(&mut self.spare);
        (q.timer, cost)
    }

    /// Every entry, each queue's in the order they were recorded:
    /// `(incarnation, dedup key, id, end of its window)`.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &[u8], MessageId, u64)> + '_ {
        self.logs.iter().flat_map(|q| {
            q.log
                .entries
                .iter()
                .filter(|e| e.live)
                .map(move |e| (q.incarnation, q.log.key_of(&e), id_of(&e), e.until_ns))
        })
    }

    /// Entries held: the live ones, each found by one map entry.
    #[cfg(any(test, feature = "test-util"))]
    pub fn len(&self) -> usize {
        self.logs.iter().map(|q| q.map.len()).sum()
    }

    /// Timers the table's queues hold.
    #[cfg(any(test, feature = "test-util"))]
    pub fn timers(&self) -> usize {
        self.logs.iter().filter(|q| q.timer.is_some()).count()
    }
}

fn id_of(e: &Entry) -> MessageId {
    MessageId(u128::from(e.id[0]) | u128::from(e.id[1]) << 64)
}

#[cfg(test)]
mod tests;
