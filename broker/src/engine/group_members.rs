//! Where each message of a grouped partition stands in its group, found
//! by its slot: one table for the whole shard, since a slot holds one
//! message at a time, of one partition. A lookup is an index, not a hash,
//! and the table costs 12 bytes a slot once the shard has a grouped
//! partition (the slab's records cost 44). The shard keeps it beside its
//! grouped partitions (`shard/grouped.rs`): a message is a member from its
//! send (or move in) until it leaves, and the shard's removal paths all
//! pass through `leave_grouping`, which removes it here.

use super::groups::{GroupIndex, NameAhead};
use super::slab::SlotKey;

/// Where one message of a grouped partition stands in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub group: GroupIndex,
    /// Whether its group counts it in flight (taken, and not yet back or
    /// settled).
    pub taken: bool,
}

/// A slot's entry: its member, while the slot's message (of this
/// generation) is one.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    generation: u32,
    group: GroupIndex,
    taken: bool,
    used: bool,
}

/// Bytes the table holds per member (at most: per slot of the shard).
pub(crate) const MEMBER_BYTES: usize = size_of::<Place>();

/// The members of a shard's grouped partitions (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct GroupMembers {
    by_slot: Vec<Place>,
    len: usize,
}

impl GroupMembers {
    /// The member at `key`, if it is one.
    #[inline]
    pub fn get(&self, key: SlotKey) -> Option<Member> {
        self.by_slot
            .get(key.slot as usize)
            .filter(|p| p.used && p.generation == key.generation)
            .map(|p| Member {
                group: p.group,
                taken: p.taken,
            })
    }

    /// Hints that the member at `key` will be read soon (see
    /// [`crate::engine::prefetch`]).
    #[inline]
    pub fn read_soon(&self, key: SlotKey) {
        if let Some(p) = self.by_slot.get(key.slot as usize) {
            crate::engine::prefetch::read_soon(p);
        }
    }

    /// Makes the message at `key` member `m`, in place of any member its
    /// slot held.
    pub fn insert(&mut self, key: SlotKey, m: Member) {
        let i = key.slot as usize;
        if i >= self.by_slot.len() {
            self.by_slot.resize(i + 1, Place::default());
        }
        let place = &mut self.by_slot[i];
        self.len += usize::from(!place.used);
        *place = Place {
            generation: key.generation,
            group: m.group,
            taken: m.taken,
            used: true,
        };
    }

    /// Removes the member at `key`, if it is one.
    #[inline]
    pub fn remove(&mut self, key: SlotKey) -> Option<Member> {
        let place = self
            .by_slot
            .get_mut(key.slot as usize)
            .filter(|p| p.used && p.generation == key.generation)?;
        place.used = false;
        self.len -= 1;
        Some(Member {
            group: place.group,
            taken: place.taken,
        })
    }

    /// Records whether the member at `key` (if it is one) counts in flight
    /// in its group.
    #[inline]
    pub fn set_taken(&mut self, key: SlotKey, taken: bool) {
        if let Some(p) = self.by_slot.get_mut(key.slot as usize) {
            if p.used && p.generation == key.generation {
                p.taken = taken;
            }
        }
    }

    /// Members held.
    #[cfg(any(test, feature = "test-util"))]
    pub fn len(&self) -> usize {
        self.len
    }
}

/// A shard's side of its grouped partitions: every member, and the list a
/// receive's take from the groups fills (reused).
#[derive(Debug, Default)]
pub(crate) struct GroupSide {
    pub members: GroupMembers,
    pub taken: Vec<(GroupIndex, u64, SlotKey)>,
    /// The group name of the entry being sent, when its batch looked its
    /// names up ahead (`Groups::look_ahead`): set for one entry's send,
    /// and taken by the entry's join.
    pub name_ahead: Option<NameAhead>,
    /// The batch's names looked up, one per entry (kept for the next
    /// batch).
    pub names_ahead: Vec<Option<NameAhead>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(slot: u32, generation: u32) -> SlotKey {
        SlotKey { slot, generation }
    }

    #[test]
    fn a_member_is_found_by_its_key_only() {
        let mut t = GroupMembers::default();
        let m = Member {
            group: 3,
            taken: false,
        };
        t.insert(key(5, 1), m);
        assert_eq!(t.get(key(5, 1)), Some(m));
        assert_eq!(t.get(key(5, 2)), None, "another generation of the slot");
        assert_eq!(t.get(key(4, 1)), None, "a slot below, never a member");
        assert_eq!(t.get(key(900, 1)), None, "a slot past the table");
        t.set_taken(key(5, 2), true);
        assert_eq!(t.get(key(5, 1)), Some(m), "set_taken of a stale key");
        t.set_taken(key(5, 1), true);
        assert!(t.get(key(5, 1)).is_some_and(|m| m.taken));
        assert_eq!(t.remove(key(5, 2)), None);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.remove(key(5, 1)),
            Some(Member {
                group: 3,
                taken: true
            })
        );
        assert_eq!(
            (t.remove(key(5, 1)), t.get(key(5, 1)), t.len()),
            (None, None, 0)
        );
    }

    #[test]
    fn a_slot_reused_holds_its_new_member() {
        let mut t = GroupMembers::default();
        let a = Member {
            group: 1,
            taken: true,
        };
        let b = Member {
            group: 2,
            taken: false,
        };
        t.insert(key(0, 7), a);
        t.insert(key(0, 8), b);
        assert_eq!(
            (t.get(key(0, 7)), t.get(key(0, 8)), t.len()),
            (None, Some(b), 1)
        );
        t.insert(key(3, 0), a);
        assert_eq!(t.len(), 2);
        assert_eq!(t.remove(key(0, 8)), Some(b));
        assert_eq!(t.get(key(3, 0)), Some(a));
    }
}
