//! Grouped partitions (a FIFO queue's): each message is a member of its
//! group (`partition.rs`, [`crate::engine::groups`]) from its send or move
//! in until it leaves, and a receive takes from the groups instead of the
//! partition's FIFOs.
//!
//! A group learns:
//! - when a receive takes its messages ([`Shard::take_grouped`]): they count
//!   in flight, and a FIFO group delivers nothing more until they are back
//!   or settled;
//! - when a taken message is visible again (its lease released or expired,
//!   and any backoff waited out): it is back, in its place in send order
//!   ([`Shard::group_visible`], from `push_ready`);
//! - when a waiting message becomes visible (a delay ended): the group may
//!   deliver again if it slept on it;
//! - when a message leaves the partition ([`Shard::leave_grouping`]: deleted,
//!   dead-lettered, dropped, purged, redriven): settled if taken, and its
//!   group woken if it was waiting.
//!
//! The partition's ready and age FIFOs keep their entries as for any
//! partition (retention, peek and redrive walk them), but a receive does not
//! serve from them.
//!
//! A FIFO queue's sends all go to one shard, the queue's home
//! ([`Shard::fifo_home`]): its groups, their order and its dedup keys live
//! there, and receives elsewhere steal from it as from any shard.

use sluice_protocol::ReceivedMessage;

use super::lease::{LeaseBatch, ReplyBudget, Take, Took};
use super::{GROUP_MEMBER_BYTES, Shard};
use crate::engine::dedup::owner_shard;
use crate::engine::group_members::Member;
use crate::engine::groups::{GroupIndex, GroupOrder, Readiness};
use crate::engine::partition::{Grouping, Partition};
use crate::engine::prefetch;
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::MessageState;

impl Shard {
    /// The shard that holds the messages of FIFO queue `incarnation`.
    pub(super) fn fifo_home(&self, incarnation: u32) -> u16 {
        owner_shard(incarnation, b"", self.shards)
    }

    /// Makes the message at `key`, just stored in or moved into grouped
    /// partition `p`, a member of group `name`: waiting in its group, or, on
    /// a fair queue, set aside until it is visible (a delayed send).
    /// Charges its membership.
    // Out of line: a standard queue never calls it, and its callers on
    // the hot paths stay lean.
    #[inline(never)]
    pub(super) fn enter_group(&mut self, p: u32, key: SlotKey, name: &[u8]) {
        let Some(m) = self.messages.get(key) else {
            return;
        };
        let (seq, visible) = (m.seq.get(), m.state == MessageState::Visible);
        self.enter_group_as(p, key, seq, visible, name, false);
    }

    /// [`Shard::enter_group`] for a message whose place in send order
    /// (`seq`) and visibility its caller knows already (a send, which
    /// charged the membership with the message: `charged`).
    #[inline(never)]
    pub(super) fn enter_group_as(
        &mut self,
        p: u32,
        key: SlotKey,
        seq: u64,
        visible: bool,
        name: &[u8],
        charged: bool,
    ) {
        let taken = if visible { Taken::No } else { Taken::IfFair };
        self.join(p, key, seq, name, taken, charged);
    }

    /// Makes the message at `key` of grouped partition `p` a member of
    /// group `name`: counted in flight by its group (`taken`), or waiting
    /// in it in send order. Charges its membership.
    pub(super) fn add_member(&mut self, p: u32, key: SlotKey, name: &[u8], taken: bool) {
        if let Some(seq) = self.messages.get(key).map(|m| m.seq.get()) {
            let taken = if taken { Taken::Yes } else { Taken::No };
            self.join(p, key, seq, name, taken, false);
        }
    }

    /// [`Shard::add_member`] for the message at `key`, whose place in send
    /// order is `seq`; charges its membership unless `charged`.
    fn join(&mut self, p: u32, key: SlotKey, seq: u64, name: &[u8], taken: Taken, charged: bool) {
        let Some(grouping) = grouping_mut(&mut self.partitions, p) else {
            // No groups to join (its callers join only grouped
            // partitions): nothing is held, so nothing stays charged.
            if charged {
                self.memory
                    .release(self.registry.memory(), GROUP_MEMBER_BYTES);
            }
            return;
        };
        let taken = match taken {
            Taken::Yes => true,
            Taken::No => false,
            Taken::IfFair => grouping.groups.order() == GroupOrder::Fair,
        };
        // A send's own entry (the one join that comes charged) may come
        // with its name looked up ahead; no other join takes that.
        let ahead = if charged {
            self.grouped.name_ahead.take()
        } else {
            None
        };
        let group = if taken {
            grouping.groups.push_taken(name)
        } else if let Some(ahead) = ahead {
            grouping.groups.push_ahead(name, ahead, seq, key)
        } else {
            grouping.groups.push(name, seq, key)
        };
        self.grouped.members.insert(key, Member { group, taken });
        if !charged {
            self.memory
                .charge(self.registry.memory(), GROUP_MEMBER_BYTES);
        }
    }

    /// Makes standard partition `p` a fair one, for its first message with a
    /// group: its messages so far (but `except`, the one that asks, if it
    /// is stored already) join the group "" (the messages without a group),
    /// in send order, waiting or set aside as they stand.
    #[cold]
    // Out of line: a standard queue never calls it, and its callers on
    // the hot paths stay lean.
    #[inline(never)]
    pub(super) fn make_fair(&mut self, p: u32, except: Option<SlotKey>) {
        if self.part(p).grouping.is_some() {
            return;
        }
        self.part_mut(p).grouping = Some(Box::new(Grouping::new(GroupOrder::Fair)));
        let mut held: Vec<(u64, SlotKey)> = self
            .members(p)
            .into_iter()
            .filter(|&k| Some(k) != except)
            .filter_map(|k| self.messages.get(k).map(|m| (m.seq.get(), k)))
            .collect();
        held.sort_unstable_by_key(|&(seq, _)| seq);
        for (_, key) in held {
            self.enter_group(p, key, b"");
        }
    }

    /// The message at `key` leaves grouped partition `p`: a taken one is
    /// settled (its group may deliver again), a waiting one wakes its group
    /// (which may have slept on it). Releases its membership.
    // Out of line: a standard queue never calls it, and its callers on
    // the hot paths stay lean.
    #[inline(never)]
    pub(super) fn leave_grouping(&mut self, p: u32, key: SlotKey) {
        let Some(grouping) = grouping_mut(&mut self.partitions, p) else {
            return;
        };
        let Some(member) = self.grouped.members.remove(key) else {
            return;
        };
        if member.taken {
            grouping.groups.settled(member.group);
        } else {
            grouping.groups.wake(member.group);
        }
        self.memory
            .release(self.registry.memory(), GROUP_MEMBER_BYTES);
        self.mark_touched(p, true);
    }

    /// The message at `key` of grouped partition `p` became visible: back in
    /// its group if taken, else its group may deliver it now.
    // Out of line: a standard queue never calls it, and its callers on
    // the hot paths stay lean.
    #[inline(never)]
    pub(super) fn group_visible(&mut self, p: u32, key: SlotKey) {
        let Some((seq, member)) = self.grouped_member(key) else {
            return;
        };
        let Some(grouping) = grouping_mut(&mut self.partitions, p) else {
            return;
        };
        if member.taken {
            grouping.groups.returned(member.group, seq, key);
            self.grouped.members.set_taken(key, false);
        } else {
            grouping.groups.wake(member.group);
        }
    }

    /// The visible message at `key` of grouped partition `p` was leased
    /// again by a change of visibility (its lease had run out): it counts
    /// in flight in its group again, as if a receive had taken it, so a
    /// FIFO group stays locked while it is in flight.
    // Out of line: a standard queue never calls it.
    #[inline(never)]
    pub(super) fn group_leased_again(&mut self, p: u32, key: SlotKey) {
        let Some((seq, member)) = self.grouped_member(key) else {
            return;
        };
        let Some(grouping) = grouping_mut(&mut self.partitions, p) else {
            return;
        };
        if !member.taken {
            grouping.groups.retaken(member.group, seq);
            self.grouped.members.set_taken(key, true);
        }
    }

    /// The groups of `queue` on this shard with a message in flight (a
    /// FIFO queue's locked groups): 0 for a queue without groups, `None`
    /// when there is no such queue. For the metrics.
    #[must_use]
    pub fn local_groups_in_flight(&self, queue: &str) -> Option<u64> {
        let p = *self.names.get(queue)?;
        Some(
            self.part(p)
                .grouping
                .as_ref()
                .map_or(0, |g| g.groups.groups_in_flight() as u64),
        )
    }

    /// The name of the group of the message at `key` in grouped partition
    /// `p`.
    pub(super) fn group_name(&self, p: u32, key: SlotKey) -> Option<Box<str>> {
        let grouping = self.part(p).grouping.as_ref()?;
        let member = self.grouped.members.get(key)?;
        grouping.groups.name(member.group).map(Box::from)
    }

    /// Visible messages of `p` a receive could take now: all of them, but
    /// none in a grouped partition whose groups are all locked or asleep.
    pub(super) fn deliverable(&self, p: u32) -> u64 {
        let part = self.part(p);
        match &part.grouping {
            Some(g) if !g.groups.can_deliver() => 0,
            _ => part.stats.visible,
        }
    }

    /// [`Shard::take_visible`] for grouped partition `batch.p`: up to `max`
    /// messages as its groups hand them out. A message a take hands out
    /// that goes to the dead-letter queue instead takes no room in the
    /// reply: the groups are asked again for what is left (its group, once
    /// its messages in flight allow, may deliver the next one), until the
    /// reply is full or they have nothing more.
    pub(super) fn take_grouped(
        &mut self,
        max: usize,
        batch: &mut LeaseBatch,
        budget: &mut ReplyBudget,
        out: &mut Vec<ReceivedMessage>,
    ) {
        let start = out.len();
        loop {
            let want = max - (out.len() - start);
            if want == 0 || !self.take_grouped_once(want, batch, budget, out) {
                return;
            }
        }
    }

    /// One take from the groups of `batch.p`, of up to `max` messages.
    /// Returns whether the groups may have more to give: some message
    /// went to the dead-letter queue, and all else fitted the reply.
    fn take_grouped_once(
        &mut self,
        max: usize,
        batch: &mut LeaseBatch,
        budget: &mut ReplyBudget,
        out: &mut Vec<ReceivedMessage>,
    ) -> bool {
        let p = batch.p;
        let mut taken = core::mem::take(&mut self.grouped.taken);
        taken.clear();
        let mut aside = Vec::new();
        {
            let Some(grouping) = grouping_mut(&mut self.partitions, p) else {
                return false;
            };
            let messages = &self.messages;
            let members = &self.grouped.members;
            grouping.groups.take(
                max,
                |key| match messages.get(key) {
                    Some(m) if m.partition() == p => match m.state {
                        MessageState::Visible => Readiness::Ready,
                        MessageState::Delayed | MessageState::InFlight => Readiness::Later,
                    },
                    _ => Readiness::Gone,
                },
                // The check reads the record, and the take then marks the
                // membership taken.
                |key| {
                    messages.read_soon(key);
                    members.read_soon(key);
                },
                &mut taken,
                &mut aside,
            );
            let members = &mut self.grouped.members;
            for &(_, _, key) in &taken {
                members.set_taken(key, true);
            }
            // A fair queue's message that is not visible is set aside, and
            // back in its group when it is (`group_visible`).
            for &(_, key) in &aside {
                members.set_taken(key, true);
            }
        }
        let mut at = 0;
        let mut dead_lettered = false;
        while at < taken.len() {
            let (g, _, key) = taken[at];
            let Some(m) = self.messages.get(key).copied() else {
                at += 1;
                continue;
            };
            let id = self
                .part(p)
                .grouping
                .as_ref()
                .and_then(|grouping| grouping.groups.id(g));
            match self.lease_one(key, &m, Take::Group(id), batch, budget, out) {
                Took::NoRoom => break,
                Took::DeadLettered => dead_lettered = true,
                Took::Leased => {
                    // A FIFO receive reads its messages out of send order
                    // (the waiting ones of a group, then the next group's),
                    // where the CPU's own prefetching cannot follow: the
                    // body's lines are fetched now, so that they are in
                    // cache when the reply copies them, after the batch.
                    if let Some(r) = out.last() {
                        prefetch::bytes_soon(&r.body);
                    }
                }
            }
            at += 1;
        }
        let all_fitted = at == taken.len();
        // What did not fit the reply goes back to its group.
        self.give_back(p, &taken[at..]);
        self.grouped.taken = taken;
        dead_lettered && all_fitted
    }

    fn give_back(&mut self, p: u32, taken: &[(GroupIndex, u64, SlotKey)]) {
        let Some(grouping) = grouping_mut(&mut self.partitions, p) else {
            return;
        };
        for &(g, seq, key) in taken {
            grouping.groups.returned(g, seq, key);
            self.grouped.members.set_taken(key, false);
        }
    }
}

impl Shard {
    /// The message at `key` of a grouped partition: its place in the
    /// queue's send order and its membership, when it is a member.
    fn grouped_member(&self, key: SlotKey) -> Option<(u64, Member)> {
        let seq = self.messages.get(key)?.seq.get();
        let member = self.grouped.members.get(key)?;
        Some((seq, member))
    }
}

/// Whether a message joins its group counted in flight
/// ([`Shard::add_member`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Taken {
    Yes,
    No,
    /// On a fair queue (set aside until it is visible, as a fair group does
    /// with a message it cannot deliver yet); on a FIFO queue, no.
    IfFair,
}

/// The groups of partition `p`, when it has them. A function of the
/// partitions alone, so that the messages can be read beside it.
fn grouping_mut(partitions: &mut [Option<Box<Partition>>], p: u32) -> Option<&mut Grouping> {
    partitions[p as usize]
        .as_mut()
        .expect("live partition index")
        .grouping
        .as_deref_mut()
}
