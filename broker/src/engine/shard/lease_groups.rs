//! Lease groups: one wheel timer for the messages one receive leased.
//!
//! The messages a receive leases share a deadline (the same `now` plus the
//! same visibility timeout), so they share one timer: the group's. A message
//! whose retention is its partition's age FIFO joins its receive's group
//! instead of inserting a timer of its own; a group records its members and
//! how many are still in it. A member leaves when its lease ends any other
//! way (deleted, released, its visibility changed, removed): it is not
//! taken off the member list, only counted out, and a group none of whose
//! members is left cancels its timer at once and is reused. When the timer
//! fires, the members still in the group (in flight, their lease naming it)
//! expire together; the others are skipped.
//!
//! So a receive of 64 messages inserts one timer, and its deletes cancel
//! one, instead of 64 each; a member list costs 8 bytes per message, for
//! as long as the group lives. A message with a retention timer of its own
//! (moved in from another queue) keeps one timer for both, as before, and
//! so does a lease set by a change of visibility.

use super::{Removal, Shard, TimerEvent};
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{MessageState, NONE};
use crate::engine::wheel::TimerId;

/// One receive's leases.
#[derive(Debug, Default)]
pub(super) struct LeaseGroup {
    /// The group's timer, while it has members.
    pub(super) timer: Option<TimerId>,
    /// Members still in the group.
    pub(super) live: u32,
    /// Every message that joined, in order (some may have left).
    pub(super) members: Vec<SlotKey>,
}

/// The shard's lease groups, reused through a free list (with their
/// member lists' room).
#[derive(Debug, Default)]
pub(super) struct LeaseGroups {
    pub(super) groups: Vec<LeaseGroup>,
    free: Vec<u32>,
}

impl LeaseGroups {
    /// A group with no member yet.
    pub(super) fn open(&mut self) -> u32 {
        if let Some(g) = self.free.pop() {
            return g;
        }
        self.groups.push(LeaseGroup::default());
        // One group per receive in flight at most: far fewer than 2^32.
        (self.groups.len() - 1) as u32
    }

    fn close(&mut self, g: u32) {
        let group = &mut self.groups[g as usize];
        group.members.clear();
        group.live = 0;
        group.timer = None;
        self.free.push(g);
    }

    /// Groups in use, for the invariants (tests).
    #[cfg(any(test, feature = "test-util"))]
    pub(super) fn in_use(&self) -> impl Iterator<Item = (u32, &LeaseGroup)> + '_ {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.live > 0)
            .map(|(i, g)| (i as u32, g))
    }
}

impl Shard {
    /// Puts the lease `lease` of the message at `key` in group `g`.
    pub(super) fn join_group(&mut self, g: u32, key: SlotKey, lease: u32) {
        self.leases.get_mut(lease).group = g;
        let group = &mut self.groups.groups[g as usize];
        group.members.push(key);
        group.live += 1;
    }

    /// Arms the timer of a group that received its members (all with the
    /// deadline `due_ns`), or closes it if it got none.
    pub(super) fn arm_group(&mut self, g: u32, due_ns: u64) {
        if self.groups.groups[g as usize].live == 0 {
            self.groups.close(g);
            return;
        }
        let t = self.wheel.insert(due_ns, TimerEvent::LeaseGroup(g));
        self.groups.groups[g as usize].timer = Some(t);
    }

    /// The lease `lease` leaves its group, if it is in one; a group left
    /// empty cancels its timer.
    pub(super) fn leave_group(&mut self, lease: u32) {
        let l = self.leases.get_mut(lease);
        let g = core::mem::replace(&mut l.group, NONE);
        self.count_out(g);
    }

    /// A member of group `g` (none when `NONE`) left it; a group left empty
    /// cancels its timer.
    pub(super) fn count_out(&mut self, g: u32) {
        if g == NONE {
            return;
        }
        let group = &mut self.groups.groups[g as usize];
        group.live -= 1;
        if group.live == 0 {
            if let Some(t) = group.timer.take() {
                self.wheel.cancel(t);
            }
            self.groups.close(g);
        }
    }

    /// A group's timer `id` fired: its members still in it expire. (A group
    /// whose members all left since is closed and its timer is no longer
    /// `id`: nothing to do.)
    pub(super) fn on_group_timer(&mut self, g: u32, id: TimerId) {
        if self.groups.groups[g as usize].timer != Some(id) {
            return;
        }
        let mut members = core::mem::take(&mut self.groups.groups[g as usize].members);
        self.groups.groups[g as usize].timer = None;
        for &key in &members {
            let Some(m) = self.messages.get(key).copied() else {
                continue;
            };
            if m.state != MessageState::InFlight {
                continue;
            }
            let Some(lease) = self.ext_of(&m).map(|e| e.lease).filter(|&l| l != NONE) else {
                continue;
            };
            if self.leases.get(lease).group != g {
                continue;
            }
            self.leases.get_mut(lease).group = NONE;
            self.groups.groups[g as usize].live -= 1;
            if m.retain_until_ns() <= self.now_ns {
                // Its retention ended by now too: dropped, not delivered
                // again (whichever timer fires first).
                self.remove_message(key, Removal::Dropped);
            } else {
                self.expire_lease(key, &m);
            }
        }
        debug_assert_eq!(self.groups.groups[g as usize].live, 0);
        members.clear();
        self.groups.groups[g as usize].members = members;
        self.groups.close(g);
    }
}
