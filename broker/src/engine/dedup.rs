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
use std::collections::VecDeque;

use hashbrown::HashTable;

use siphasher::sip::SipHasher13;
use sluice_protocol::MessageId;
use sluice_protocol::limits::DEDUP_KEY_BYTES_MAX;

use super::hashing::{IndexMap, KeyedHash};
use super::wheel::TimerId;

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

/// Bytes of a table key: the queue incarnation (4, little-endian), then
/// the dedup key.
const TABLE_KEY_BYTES_MAX: usize = 4 + DEDUP_KEY_BYTES_MAX;

/// A table key built on the stack, to hash a key without allocating.
/// `None` for a dedup key above [`DEDUP_KEY_BYTES_MAX`] (never stored).
fn table_key<'b>(
    incarnation: u32,
    key: &[u8],
    buf: &'b mut [u8; TABLE_KEY_BYTES_MAX],
) -> Option<&'b [u8]> {
    let len = 4 + key.len();
    let out = buf.get_mut(..len)?;
    out[..4].copy_from_slice(&incarnation.to_le_bytes());
    out[4..].copy_from_slice(key);
    Some(out)
}

/// One recorded key, in its queue's log.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The hash of its table key, under which the map finds it.
    hash: u64,
    /// The message it recorded (a `MessageId`'s two halves: 8-byte
    /// alignment keeps the entry at 48 bytes).
    id: [u64; 2],
    /// When the window ends (monotonic ns).
    until_ns: u64,
    /// Where its key's bytes start in the log's arena (an absolute offset:
    /// bytes ever appended before them).
    key_at: u64,
    /// The memory it holds, to release when it goes.
    cost: u32,
    key_len: u8,
    /// Whether it still counts: a later entry of the same key replaces one
    /// past its window, which then waits in the log, dead, until expiry
    /// reaches it.
    live: bool,
}

/// One queue's entries in the order they were recorded (so in the order
/// they end), their keys' bytes in one arena in the same order, and the
/// timer that ends the window of the first. Entries and key bytes are
/// appended at the back and dropped from the front: no allocation per key,
/// and memory written in order.
#[derive(Debug, Default)]
struct QueueLog {
    entries: VecDeque<Entry>,
    /// The position of `entries[0]` (entries ever dropped from the front).
    first: u64,
    /// Key bytes; `arena[i]` is the byte at absolute offset
    /// `arena_base + i`. Bytes before `arena_start` are dropped.
    arena: Vec<u8>,
    arena_base: u64,
    arena_start: usize,
    timer: Option<TimerId>,
}

impl QueueLog {
    fn entry(&self, position: u64) -> Option<&Entry> {
        let i = usize::try_from(position.checked_sub(self.first)?).ok()?;
        self.entries.get(i)
    }

    fn entry_mut(&mut self, position: u64) -> Option<&mut Entry> {
        let i = usize::try_from(position.checked_sub(self.first)?).ok()?;
        self.entries.get_mut(i)
    }

    /// The dedup key of `e` (an entry of this log).
    fn key_of(&self, e: &Entry) -> &[u8] {
        let at = usize::try_from(e.key_at - self.arena_base).unwrap_or(usize::MAX);
        self.arena
            .get(at..at + usize::from(e.key_len))
            .unwrap_or_default()
    }

    /// Drops the first entry and its key's bytes.
    fn pop_front(&mut self) -> Option<Entry> {
        let e = self.entries.pop_front()?;
        self.first += 1;
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

/// A key looked up ([`DedupTable::probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Recorded, within its window: the message it recorded.
    Found(MessageId),
    /// Not recorded (or past its window): the hash that records it
    /// ([`DedupTable::insert`]), or `None` for a key longer than a dedup key
    /// can be, which is never recorded.
    Absent(Option<KeyHash>),
}

/// The hash of a table key, computed once per send, and whether the table
/// still held an entry of the key past its window when it was looked up
/// (which recording it replaces; without one, it is inserted at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHash {
    hash: u64,
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
/// entry's end, rather than one per key. Should a queue's window shrink, a
/// later entry can end before an earlier one: it is no longer found
/// ([`DedupTable::probe`] looks at the end) and goes when the entries
/// before it have.
#[derive(Debug, Default)]
pub(crate) struct DedupTable {
    /// Each live entry's hash, queue and position in its queue's log,
    /// found by hash and confirmed by the entry's key. The hash is kept,
    /// so the table grows without hashing a key again.
    map: HashTable<(u64, u32, u64)>,
    /// SipHash with this process's random keys: the keys are the clients'.
    hasher: KeyedHash,
    queues: IndexMap<u32, QueueLog>,
}

impl DedupTable {
    /// Looks `key` up at `now_ns`: the id recorded for it within its
    /// window, or the hash to record it with.
    pub fn probe(&self, incarnation: u32, key: &[u8], now_ns: u64) -> Probe {
        let mut buf = [0; TABLE_KEY_BYTES_MAX];
        let Some(k) = table_key(incarnation, key, &mut buf) else {
            return Probe::Absent(None);
        };
        let hash = self.hasher.hash(k);
        match self.find(hash, incarnation, key) {
            Some(e) if e.until_ns > now_ns => Probe::Found(id_of(e)),
            found => Probe::Absent(Some(KeyHash {
                hash,
                stale: found.is_some(),
            })),
        }
    }

    /// The live entry of `key` in queue `incarnation`, whose hash is
    /// `hash`.
    fn find(&self, hash: u64, incarnation: u32, key: &[u8]) -> Option<&Entry> {
        let &(_, _, position) = self.map.find(hash, |&(h, inc, position)| {
            h == hash && inc == incarnation && key_at(&self.queues, inc, position) == Some(key)
        })?;
        self.queues.get(&incarnation)?.entry(position)
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
        KeyHash { hash, stale }: KeyHash,
        id: MessageId,
        cost: u64,
        until_ns: u64,
    ) -> Recorded {
        debug_assert!(
            key.len() <= DEDUP_KEY_BYTES_MAX,
            "a KeyHash of a key too long"
        );
        let position = self
            .queues
            .get(&incarnation)
            .map_or(0, |log| log.first + log.entries.len() as u64);
        // A key still here past its window (see the type's docs) gives
        // way: its entry is dead, skipped when expiry reaches it, and the
        // map's entry is the new one's. Without one when probed (the
        // common case), there is none to find.
        let mut freed = 0;
        let mut replaced = false;
        if stale {
            let queues = &mut self.queues;
            if let Some(found) = self.map.find_mut(hash, |&(h, inc, p)| {
                h == hash && inc == incarnation && key_at(queues, inc, p) == Some(key)
            }) {
                let old = core::mem::replace(&mut found.2, position);
                replaced = true;
                if let Some(e) = queues.get_mut(&incarnation).and_then(|l| l.entry_mut(old)) {
                    e.live = false;
                    freed = u64::from(e.cost);
                }
            }
        }
        let log = self.queues.entry(incarnation).or_default();
        // A queue's timer runs while it has entries.
        let arm_at = log.entries.is_empty().then_some(until_ns);
        let key_at = log.arena_base + log.arena.len() as u64;
        log.arena.extend_from_slice(key);
        log.entries.push_back(Entry {
            hash,
            // A u128's halves: the casts keep 64 bits each by design.
            id: [id.0 as u64, (id.0 >> 64) as u64],
            until_ns,
            key_at,
            cost: u32::try_from(cost).unwrap_or(u32::MAX),
            // At most DEDUP_KEY_BYTES_MAX (128): `probe` hashes no longer key.
            key_len: u8::try_from(key.len()).unwrap_or(u8::MAX),
            live: true,
        });
        if !replaced {
            self.map
                .insert_unique(hash, (hash, incarnation, position), |&(h, _, _)| h);
        }
        Recorded { freed, arm_at }
    }

    /// Remembers queue `incarnation`'s timer.
    pub fn set_timer(&mut self, incarnation: u32, timer: TimerId) {
        if let Some(q) = self.queues.get_mut(&incarnation) {
            q.timer = Some(timer);
        }
    }

    /// Queue `incarnation`'s timer fired at `now_ns`: removes its entries
    /// from the first on, while their windows have ended.
    pub fn expire_due(&mut self, incarnation: u32, now_ns: u64) -> Expired {
        let mut freed = 0;
        let Some(log) = self.queues.get_mut(&incarnation) else {
            return Expired {
                freed,
                next_at: None,
            };
        };
        log.timer = None;
        while let Some(e) = log.entries.front() {
            if e.live && e.until_ns > now_ns {
                return Expired {
                    freed,
                    next_at: Some(e.until_ns),
                };
            }
            let position = log.first;
            if let Some(e) = log.pop_front().filter(|e| e.live) {
                forget(&mut self.map, e.hash, incarnation, position);
                freed += u64::from(e.cost);
            }
        }
        self.queues.remove(&incarnation);
        Expired {
            freed,
            next_at: None,
        }
    }

    /// Removes every entry of a deleted queue; returns its timer and their
    /// total cost.
    pub fn remove_queue(&mut self, incarnation: u32) -> (Option<TimerId>, u64) {
        let Some(log) = self.queues.remove(&incarnation) else {
            return (None, 0);
        };
        let mut cost = 0;
        for (i, e) in log.entries.iter().enumerate() {
            if e.live {
                forget(&mut self.map, e.hash, incarnation, log.first + i as u64);
                cost += u64::from(e.cost);
            }
        }
        (log.timer, cost)
    }

    /// Every entry, each queue's in the order they were recorded:
    /// `(incarnation, dedup key, id, end of its window)`.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &[u8], MessageId, u64)> + '_ {
        self.queues.iter().flat_map(|(&inc, log)| {
            log.entries
                .iter()
                .filter(|e| e.live)
                .map(move |e| (inc, log.key_of(e), id_of(e), e.until_ns))
        })
    }

    /// Entries held: the live ones, each found by one map entry.
    #[cfg(any(test, feature = "test-util"))]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Timers the table's queues hold.
    #[cfg(any(test, feature = "test-util"))]
    pub fn timers(&self) -> usize {
        self.queues.values().filter(|q| q.timer.is_some()).count()
    }
}

/// The dedup key of the entry at `position` of queue `incarnation`'s log.
/// A function of the logs alone, so that the map can be searched (even
/// mutably) while it reads them.
fn key_at(queues: &IndexMap<u32, QueueLog>, incarnation: u32, position: u64) -> Option<&[u8]> {
    let log = queues.get(&incarnation)?;
    log.entry(position).map(|e| log.key_of(e))
}

fn id_of(e: &Entry) -> MessageId {
    MessageId(u128::from(e.id[0]) | u128::from(e.id[1]) << 64)
}

/// Removes the map's entry for the entry at `position` of queue
/// `incarnation`, recorded under `hash`.
fn forget(map: &mut HashTable<(u64, u32, u64)>, hash: u64, incarnation: u32, position: u64) {
    if let Ok(found) = map.find_entry(hash, |&(_, inc, p)| inc == incarnation && p == position) {
        found.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records `key` as a send does: probed first, for its hash.
    fn ins(
        t: &mut DedupTable,
        inc: u32,
        key: &[u8],
        id: MessageId,
        cost: u64,
        until: u64,
    ) -> Recorded {
        let Probe::Absent(Some(hash)) = t.probe(inc, key, u64::MAX) else {
            panic!("{key:?} is recorded already");
        };
        t.insert(inc, key, hash, id, cost, until)
    }

    #[test]
    fn owner_is_stable_and_in_range() {
        for shards in 1..5u16 {
            for i in 0..100u32 {
                let k = i.to_le_bytes();
                let o = owner_shard(7, &k, shards);
                assert!(o < shards);
                assert_eq!(o, owner_shard(7, &k, shards));
            }
        }
    }

    #[test]
    fn insert_lookup_expire() {
        let mut t = DedupTable::default();
        let key = b"k";
        let r = ins(&mut t, 1, key, MessageId(5), 10, 100);
        assert_eq!(
            r,
            Recorded {
                freed: 0,
                arm_at: Some(100)
            }
        );
        assert_eq!(t.lookup(1, key, 99), Some(MessageId(5)));
        assert_eq!(t.lookup(1, key, 100), None, "the window ended");
        assert_eq!(t.lookup(2, key, 0), None);
        let r = ins(&mut t, 1, b"l", MessageId(6), 10, 150);
        assert_eq!(r.arm_at, None, "the queue's timer is armed already");
        assert_eq!(
            t.expire_due(1, 120),
            Expired {
                freed: 10,
                next_at: Some(150)
            }
        );
        assert_eq!(t.lookup(1, b"l", 120), Some(MessageId(6)));
        assert_eq!(
            t.expire_due(1, 150),
            Expired {
                freed: 10,
                next_at: None
            }
        );
        assert_eq!(t.len(), 0);
        ins(&mut t, 2, key, MessageId(7), 10, 0);
        let (_, cost) = t.remove_queue(2);
        assert_eq!(cost, 10);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_window_shrunk_ends_later_entries_first_and_keeps_their_order() {
        let mut t = DedupTable::default();
        // A 100 ns window, then a 10 ns one: b ends before a.
        ins(&mut t, 1, b"a", MessageId(1), 10, 100);
        ins(&mut t, 1, b"b", MessageId(2), 10, 20);
        assert_eq!(t.lookup(1, b"b", 20), None);
        // b again, past its window: it replaces the old entry, whose
        // memory is freed, and keeps the queue's one timer.
        let r = ins(&mut t, 1, b"b", MessageId(3), 10, 60);
        assert_eq!(
            r,
            Recorded {
                freed: 10,
                arm_at: None
            }
        );
        assert_eq!(t.lookup(1, b"b", 30), Some(MessageId(3)));
        assert_eq!(
            t.expire_due(1, 100),
            Expired {
                freed: 20,
                next_at: None
            }
        );
        assert_eq!((t.len(), t.timers()), (0, 0));
    }

    #[test]
    fn the_logs_agree_with_a_plain_map_through_expiry_and_compaction() {
        // Keys of 1 to 128 bytes over three queues, sent at a rising clock
        // with a 50-tick window, some again past their window; expiry runs
        // as the queues' timers would. A plain map of the live keys says
        // what each probe must find.
        let mut t = DedupTable::default();
        let mut model: std::collections::HashMap<(u32, Vec<u8>), (MessageId, u64)> =
            std::collections::HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut cost_held = 0u64;
        for now in 0..20_000u64 {
            let inc = (next() % 3) as u32 + 1;
            let len = (next() % 128) as usize + 1;
            let key = vec![b'a' + (next() % 4) as u8; len];
            let want = model
                .get(&(inc, key.clone()))
                .filter(|&&(_, until)| until > now)
                .map(|&(id, _)| id);
            match t.probe(inc, &key, now) {
                Probe::Found(id) => assert_eq!(Some(id), want, "{inc} {len} at {now}"),
                Probe::Absent(Some(h)) => {
                    assert_eq!(want, None, "{inc} {len} at {now}");
                    let id = MessageId(u128::from(now) << 64 | u128::from(now));
                    let cost = len as u64 + 96;
                    let r = t.insert(inc, &key, h, id, cost, now + 50);
                    cost_held += cost;
                    cost_held -= r.freed;
                    model.insert((inc, key), (id, now + 50));
                }
                Probe::Absent(None) => panic!("a key of {len} bytes is recordable"),
            }
            if now % 7 == 0 {
                for q in 1..=3 {
                    cost_held -= t.expire_due(q, now).freed;
                }
                model.retain(|_, &mut (_, until)| until > now);
                assert_eq!(t.len(), model.len(), "at {now}");
            }
        }
        let listed = t.entries().count();
        assert_eq!(listed, t.len());
        let mut removed = 0;
        for q in 1..=3 {
            removed += t.remove_queue(q).1;
        }
        assert_eq!(removed, cost_held);
        assert_eq!((t.len(), t.map.len()), (0, 0));
    }

    #[test]
    fn keys_up_to_the_longest_are_kept_whole() {
        let mut t = DedupTable::default();
        let keys: Vec<Vec<u8>> = [1, 40, 127, DEDUP_KEY_BYTES_MAX]
            .iter()
            .flat_map(|&n| [vec![b'k'; n], [vec![b'k'; n - 1], vec![b'j']].concat()])
            .collect();
        for (i, k) in keys.iter().enumerate() {
            ins(&mut t, 3, k, MessageId(i as u128 | 1 << 100), 1, 10);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(t.lookup(3, k, 0), Some(MessageId(i as u128 | 1 << 100)));
        }
        let listed: Vec<Vec<u8>> = t.entries().map(|(_, k, _, _)| k.to_vec()).collect();
        assert_eq!(listed, keys);
        let long = vec![b'k'; DEDUP_KEY_BYTES_MAX + 1];
        assert_eq!(t.probe(3, &long, 0), Probe::Absent(None));
    }

    #[test]
    fn entries_list_each_queue_in_order() {
        let mut t = DedupTable::default();
        for (i, k) in [b"x", b"y", b"z"].iter().enumerate() {
            ins(&mut t, 4, *k, MessageId(i as u128), 1, 10 + i as u64);
        }
        let got: Vec<(u32, Vec<u8>, u64)> =
            t.entries().map(|(q, k, _, u)| (q, k.to_vec(), u)).collect();
        assert_eq!(
            got,
            [
                (4, b"x".to_vec(), 10),
                (4, b"y".to_vec(), 11),
                (4, b"z".to_vec(), 12)
            ]
        );
    }
}
