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
use super::slab::{Slab, SlotKey};
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

/// A table key built on the stack, to look a key up without allocating.
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

#[derive(Debug)]
struct Entry {
    /// The table key (incarnation, then dedup key), copied when recorded.
    key: Box<[u8]>,
    /// Its hash, under which the map finds the entry.
    hash: u64,
    id: MessageId,
    cost: u64,
    /// When the window ends (monotonic ns).
    until_ns: u64,
}

/// One queue's entries in the order they were recorded, and the timer that
/// ends the window of the first.
#[derive(Debug, Default)]
struct QueueKeys {
    order: VecDeque<SlotKey>,
    timer: Option<TimerId>,
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
/// is the same for all of them, like retention for its messages), so a
/// queue has one timer, for its first entry's end, rather than one per key.
/// Should a queue's window shrink, a later entry can end before an earlier
/// one: it is no longer found ([`DedupTable::lookup`] looks at the end) and
/// goes when the entries before it have.
#[derive(Debug, Default)]
pub(crate) struct DedupTable {
    /// Each entry's hash and slot, found by hash and confirmed by the
    /// entry's key. The hash is kept, so the table grows without hashing a
    /// key again.
    map: HashTable<(u64, SlotKey)>,
    /// SipHash with this process's random keys: the keys are the clients'.
    hasher: KeyedHash,
    entries: Slab<Entry>,
    queues: IndexMap<u32, QueueKeys>,
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
        match self.find(hash, k) {
            Some(e) if e.until_ns > now_ns => Probe::Found(e.id),
            found => Probe::Absent(Some(KeyHash {
                hash,
                stale: found.is_some(),
            })),
        }
    }

    /// The entry of table key `k`, whose hash is `hash`.
    fn find(&self, hash: u64, k: &[u8]) -> Option<&Entry> {
        let entries = &self.entries;
        let &(_, slot) = self.map.find(hash, |&(h, slot)| {
            h == hash && entries.get(slot).is_some_and(|e| *e.key == *k)
        })?;
        entries.get(slot)
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
    /// `hash` is what [`DedupTable::probe`] gave for it. `None` when the
    /// key is longer than a dedup key can be, or the table is full (nothing
    /// recorded).
    pub fn insert(
        &mut self,
        incarnation: u32,
        key: &[u8],
        KeyHash { hash, stale }: KeyHash,
        id: MessageId,
        cost: u64,
        until_ns: u64,
    ) -> Option<Recorded> {
        let mut buf = [0; TABLE_KEY_BYTES_MAX];
        let k: Box<[u8]> = Box::from(table_key(incarnation, key, &mut buf)?);
        let slot = self.entries.insert(Entry {
            key: k,
            hash,
            id,
            cost,
            until_ns,
        })?;
        // A key still here past its window (see the type's docs) gives
        // way; its place in the queue's order is skipped when reached.
        // Without one when probed (the common case), there is none to find.
        let entries = &mut self.entries;
        let found = if stale {
            self.map.find_mut(hash, |&(h, s)| {
                h == hash
                    && s != slot
                    && entries
                        .get(s)
                        .zip(entries.get(slot))
                        .is_some_and(|(old, new)| old.key == new.key)
            })
        } else {
            None
        };
        let freed = match found {
            Some(found) => {
                let old = core::mem::replace(&mut found.1, slot);
                entries.remove(old).map_or(0, |e| e.cost)
            }
            None => {
                self.map.insert_unique(hash, (hash, slot), |&(h, _)| h);
                0
            }
        };
        let q = self.queues.entry(incarnation).or_default();
        // A queue's timer runs while it has entries.
        let arm_at = q.order.is_empty().then_some(until_ns);
        q.order.push_back(slot);
        Some(Recorded { freed, arm_at })
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
        let Some(q) = self.queues.get_mut(&incarnation) else {
            return Expired {
                freed,
                next_at: None,
            };
        };
        q.timer = None;
        while let Some(&slot) = q.order.front() {
            match self.entries.get(slot) {
                Some(e) if e.until_ns > now_ns => {
                    return Expired {
                        freed,
                        next_at: Some(e.until_ns),
                    };
                }
                Some(_) => {
                    if let Some(e) = self.entries.remove(slot) {
                        forget(&mut self.map, e.hash, slot);
                        freed += e.cost;
                    }
                }
                // Replaced by a later entry of its key.
                None => {}
            }
            q.order.pop_front();
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
        let Some(q) = self.queues.remove(&incarnation) else {
            return (None, 0);
        };
        let mut cost = 0;
        for slot in q.order {
            if let Some(e) = self.entries.remove(slot) {
                forget(&mut self.map, e.hash, slot);
                cost += e.cost;
            }
        }
        (q.timer, cost)
    }

    /// Every entry, each queue's in the order they were recorded:
    /// `(incarnation, dedup key, id, end of its window)`.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &[u8], MessageId, u64)> + '_ {
        self.queues.values().flat_map(|q| {
            q.order.iter().filter_map(|slot| {
                let e = self.entries.get(*slot)?;
                let (inc, key) = e.key.split_first_chunk::<4>()?;
                Some((u32::from_le_bytes(*inc), key, e.id, e.until_ns))
            })
        })
    }

    /// Entries held.
    #[cfg(any(test, feature = "test-util"))]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Timers the table's queues hold.
    #[cfg(any(test, feature = "test-util"))]
    pub fn timers(&self) -> usize {
        self.queues.values().filter(|q| q.timer.is_some()).count()
    }
}

/// Removes the map's entry for `slot`, recorded under `hash`.
fn forget(map: &mut HashTable<(u64, SlotKey)>, hash: u64, slot: SlotKey) {
    if let Ok(found) = map.find_entry(hash, |&(_, s)| s == slot) {
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
    ) -> Option<Recorded> {
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
        let r = ins(&mut t, 1, key, MessageId(5), 10, 100).unwrap();
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
        let r = ins(&mut t, 1, b"l", MessageId(6), 10, 150).unwrap();
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
        ins(&mut t, 2, key, MessageId(7), 10, 0).unwrap();
        let (_, cost) = t.remove_queue(2);
        assert_eq!(cost, 10);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_window_shrunk_ends_later_entries_first_and_keeps_their_order() {
        let mut t = DedupTable::default();
        // A 100 ns window, then a 10 ns one: b ends before a.
        ins(&mut t, 1, b"a", MessageId(1), 10, 100).unwrap();
        ins(&mut t, 1, b"b", MessageId(2), 10, 20).unwrap();
        assert_eq!(t.lookup(1, b"b", 20), None);
        // b again, past its window: it replaces the old entry, whose
        // memory is freed, and keeps the queue's one timer.
        let r = ins(&mut t, 1, b"b", MessageId(3), 10, 60).unwrap();
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
    fn entries_list_each_queue_in_order() {
        let mut t = DedupTable::default();
        for (i, k) in [b"x", b"y", b"z"].iter().enumerate() {
            ins(&mut t, 4, *k, MessageId(i as u128), 1, 10 + i as u64).unwrap();
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
