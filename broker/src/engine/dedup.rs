//! Dedup windows: which dedup keys a queue accepted recently.
//!
//! Every key has one owner shard, chosen by a fixed hash of (queue
//! incarnation, key) ([`owner_shard`]); sends carrying a key are handled by
//! that owner, so the window holds across shards and within one batch (the
//! owner processes a batch's entries in order). An entry expires `window`
//! after the send it recorded; duplicates do not refresh it. Expiry is a
//! timer on the owner's wheel.

use core::hash::Hasher;
use std::collections::HashMap;

use bytes::Bytes;
use siphasher::sip::SipHasher13;
use sluice_protocol::MessageId;
use sluice_protocol::limits::DEDUP_KEY_BYTES_MAX;

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
    key: Bytes,
    id: MessageId,
    timer: Option<TimerId>,
    cost: u64,
    /// When the window ends (monotonic ns), for snapshots.
    until_ns: u64,
}

/// One shard's dedup entries.
#[derive(Debug, Default)]
pub(crate) struct DedupTable {
    map: HashMap<Bytes, SlotKey>,
    entries: Slab<Entry>,
}

impl DedupTable {
    /// The id recorded for `key`, if it is within its window.
    pub fn lookup(&self, incarnation: u32, key: &[u8]) -> Option<MessageId> {
        let mut buf = [0; TABLE_KEY_BYTES_MAX];
        let k = table_key(incarnation, key, &mut buf)?;
        let slot = self.map.get(k)?;
        self.entries.get(*slot).map(|e| e.id)
    }

    /// Records `key` (its bytes are copied, so the caller's buffer can go)
    /// until `until_ns`, and returns the slot whose expiry the caller
    /// schedules.
    pub fn insert(
        &mut self,
        incarnation: u32,
        key: &[u8],
        id: MessageId,
        cost: u64,
        until_ns: u64,
    ) -> Option<SlotKey> {
        let mut buf = [0; TABLE_KEY_BYTES_MAX];
        let k = Bytes::copy_from_slice(table_key(incarnation, key, &mut buf)?);
        let slot = self.entries.insert(Entry {
            key: k.clone(),
            id,
            timer: None,
            cost,
            until_ns,
        })?;
        self.map.insert(k, slot);
        Some(slot)
    }

    /// Remembers the expiry timer of an entry.
    pub fn set_timer(&mut self, slot: SlotKey, timer: TimerId) {
        if let Some(e) = self.entries.get_mut(slot) {
            e.timer = Some(timer);
        }
    }

    /// Removes an entry (its window ended); returns its memory cost.
    pub fn expire(&mut self, slot: SlotKey) -> Option<u64> {
        let e = self.entries.remove(slot)?;
        self.map.remove(&e.key);
        Some(e.cost)
    }

    /// Removes every entry of a deleted queue; returns their timers and
    /// total cost.
    pub fn remove_queue(&mut self, incarnation: u32) -> (Vec<TimerId>, u64) {
        let slots: Vec<SlotKey> = self
            .map
            .iter()
            .filter(|(k, _)| k.starts_with(&incarnation.to_le_bytes()))
            .map(|(_, s)| *s)
            .collect();
        let mut timers = Vec::with_capacity(slots.len());
        let mut cost = 0;
        for slot in slots {
            if let Some(e) = self.entries.remove(slot) {
                self.map.remove(&e.key);
                timers.extend(e.timer);
                cost += e.cost;
            }
        }
        (timers, cost)
    }

    /// Every entry: `(incarnation, dedup key, id, end of its window)`.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &[u8], MessageId, u64)> + '_ {
        self.map.values().filter_map(|slot| {
            let e = self.entries.get(*slot)?;
            let (inc, key) = e.key.split_first_chunk::<4>()?;
            Some((u32::from_le_bytes(*inc), key, e.id, e.until_ns))
        })
    }

    /// Entries held.
    #[cfg(any(test, feature = "test-util"))]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let key = Bytes::from_static(b"k");
        let slot = t.insert(1, &key, MessageId(5), 10, 0).unwrap();
        assert_eq!(t.lookup(1, &key), Some(MessageId(5)));
        assert_eq!(t.lookup(2, &key), None);
        assert_eq!(t.expire(slot), Some(10));
        assert_eq!(t.lookup(1, &key), None);
        t.insert(2, &key, MessageId(6), 10, 0).unwrap();
        let (_, cost) = t.remove_queue(2);
        assert_eq!(cost, 10);
        assert_eq!(t.len(), 0);
    }
}
