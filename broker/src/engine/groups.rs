//! Message groups of one queue: each group's waiting messages in send
//! order, how many of its messages are in flight, and the turn in which
//! groups deliver. Plain single-threaded data, like a partition; the shard
//! holds the logic that calls it. Two orders:
//!
//! - [`GroupOrder::Fifo`] (a FIFO queue): a group delivers only while none
//!   of its messages is in flight, and then its messages in send order, as
//!   many consecutive ones as the receive takes. A message that comes back
//!   (its lease released or expired) goes back among the group's waiting
//!   messages in send order, ahead of every message never delivered, so
//!   order holds across redelivery, whatever order the returns come in.
//! - [`GroupOrder::Fair`] (a standard queue whose messages carry group
//!   ids): no order and no lock; groups take turns, one message each per
//!   turn, so a group with a large backlog delays the others by at most
//!   one message per group and turn.
//!
//! A group exists while it holds a waiting or in-flight message, and for a
//! while after, idle: a group that empties and fills again (the common
//! case) is found as it was, with its buffer, instead of rebuilt. Idle
//! groups are kept up to as many as the groups that hold messages (and at
//! least [`IDLE_GROUPS_MIN`]); beyond that the one idle longest is
//! forgotten, so memory stays bounded by the messages. Waiting
//! messages are removed lazily: a message dropped while waiting (retention,
//! purge) stays in its group until a [`Groups::take`] meets it and the
//! caller's check says it is gone, as in the partition's FIFOs. A waiting
//! message that cannot be delivered yet (a delay, a retry backoff) puts its
//! group to sleep when a take meets it first in its group: the group
//! delivers nothing until [`Groups::wake`] (or a return into it), since in
//! a FIFO group nothing may overtake it. So the caller wakes a message's
//! group when the message becomes deliverable, and when it goes while
//! waiting.
//!
//! `K` is what names a message for the caller (the shard's slot key); `seq`
//! is its place in the queue's send order, increasing per queue.

use std::collections::VecDeque;

use bytes::Bytes;
use hashbrown::HashTable;
use sluice_protocol::MessageGroupId;

use super::hashing::KeyedHash;
use super::prefetch;
use names::{head_of, same_bytes};

/// How the groups of a queue deliver (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupOrder {
    /// In send order within a group, one delivery in flight per group.
    Fifo,
    /// In turns across groups, without order or lock.
    Fair,
}

/// Where a waiting message stands, as a [`Groups::take`] asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// It can be delivered now.
    Ready,
    /// It exists, but cannot be delivered yet: its group sleeps.
    Later,
    /// It no longer exists: it is forgotten.
    Gone,
}

/// A group's index among the queue's groups, stable while the group exists
/// (a message's record keeps it, to report its return or its end).
pub(crate) type GroupIndex = u32;

/// A group name looked up ahead of its push ([`Groups::look_ahead`]): its
/// hash, and the group that had the name then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NameAhead {
    hash: u64,
    found: Option<GroupIndex>,
}

/// Idle groups a queue keeps at least (see the module docs).
pub(crate) const IDLE_GROUPS_MIN: usize = 64;

/// How many turns ahead a take starts reading a group's record
/// ([`Groups::read_ahead`]).
const READ_AHEAD: usize = 4;

/// How many of a group's waiting messages a take hints ahead of their
/// check, as it takes the group's consecutive messages.
const READ_AHEAD_IN_GROUP: usize = 3;

/// Waiting messages an idle group keeps room for; a larger buffer goes.
const IDLE_WAITING_CAPACITY_MAX: usize = 64;

/// One group. Its first cache line holds what a send and a take read
/// (how its name starts, its waiting messages' buffer and counts), so
/// that finding a group and joining it or taking from it cost one line
/// of the group's, whichever of a thousand groups it is; its name and id,
/// read on a name of more than 8 bytes and by a delivery, fill the second.
#[derive(Debug)]
#[repr(C, align(64))]
struct Group<K> {
    /// The first 8 bytes of its name, as [`head_of`] packs them: a name of
    /// up to 8 bytes (most) is compared without reading `name`.
    head: u64,
    /// Waiting messages by `seq`, lowest first.
    waiting: VecDeque<(u64, K)>,
    /// At least the `seq` of its last waiting message (the highest it
    /// has held): a send, whose `seq` is above every earlier one, goes to
    /// the back without reading the buffer's last entry.
    high: u64,
    in_flight: u32,
    stamp: u32,
    /// Whether the group is in `turn`.
    in_turn: bool,
    /// Whether its first waiting message cannot be delivered yet.
    asleep: bool,
    /// Whether it holds nothing (and is in `Groups::idle`, under `stamp`).
    idle: bool,
    /// Its name's bytes (UTF-8: a `&str` made them).
    name: Bytes,
    /// Its name as a message group id, checked once (`None` for a name
    /// that is not a valid one: a fair queue's group "" of the messages
    /// without a group), shared with every delivery that names the group.
    id: Option<MessageGroupId>,
}

impl<K> Group<K> {
    /// Whether its name is `name`, whose [`head_of`] is `head`.
    #[inline]
    fn is_named(&self, name: &[u8], head: u64) -> bool {
        self.head == head
            && self.name.len() == name.len()
            && (name.len() <= 8 || same_bytes(&self.name, name))
    }

    /// Whether it joins the turn now: it can deliver, as far as it knows
    /// (a message waits, it does not sleep, and in FIFO order none of its
    /// messages flies), and is not in the turn yet. Marks it in the turn
    /// if so; the caller puts it at the turn's back.
    #[inline]
    fn enters_turn(&mut self, order: GroupOrder) -> bool {
        let enters = !self.in_turn
            && !self.waiting.is_empty()
            && !self.asleep
            && (order == GroupOrder::Fair || self.in_flight == 0);
        self.in_turn |= enters;
        enters
    }

    /// One of its messages left flight; returns whether none flies now.
    #[inline]
    fn lands_one(&mut self) -> bool {
        debug_assert!(self.in_flight > 0, "a group's message left flight twice");
        self.in_flight = self.in_flight.saturating_sub(1);
        self.in_flight == 0
    }
}

/// The groups of one queue (see the module docs).
#[derive(Debug)]
pub(crate) struct Groups<K> {
    order: GroupOrder,
    /// Each group by the hash of its name (clients pick names: a keyed
    /// hash), with the hash kept so the table grows without hashing again.
    index: HashTable<(u64, GroupIndex)>,
    hasher: KeyedHash,
    groups: Vec<Option<Group<K>>>,
    free: Vec<GroupIndex>,
    /// Groups that can deliver now, in turn order; each at most once.
    turn: VecDeque<GroupIndex>,
    /// Groups with a message in flight.
    groups_in_flight: usize,
    /// Idle groups, the longest idle first, each with the stamp it went
    /// idle under; an entry whose group was used again since (its stamp
    /// moved on, or it is no longer idle) is stale and skipped.
    idle: VecDeque<(GroupIndex, u32)>,
    /// Groups idle now.
    idle_groups: usize,
    /// The stamp the last group to go idle got.
    stamp: u32,
}

impl<K: Copy> Groups<K> {
    /// No groups yet.
    pub fn new(order: GroupOrder) -> Groups<K> {
        Groups {
            order,
            index: HashTable::new(),
            hasher: KeyedHash::new(),
            groups: Vec::new(),
            free: Vec::new(),
            turn: VecDeque::new(),
            groups_in_flight: 0,
            idle: VecDeque::new(),
            idle_groups: 0,
            stamp: 0,
        }
    }

    /// How the groups deliver.
    pub fn order(&self) -> GroupOrder {
        self.order
    }

    /// Groups that hold a waiting or in-flight message.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.index.len() - self.idle_groups
    }

    /// Whether no group holds a message.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Groups kept idle, and the entries of the idle list.
    #[cfg(test)]
    pub fn idle_counts(&self) -> (usize, usize) {
        (self.idle_groups, self.idle.len())
    }

    /// Groups with a message in flight (a FIFO queue's locked groups).
    pub fn groups_in_flight(&self) -> usize {
        self.groups_in_flight
    }

    /// The index of group `name`, if it exists.
    #[cfg(test)]
    pub fn find(&self, name: &str) -> Option<GroupIndex> {
        self.lookup(self.hasher.hash(name.as_bytes()), name.as_bytes())
    }

    /// The group named `name`, whose hash is `hash`.
    fn lookup(&self, hash: u64, name: &[u8]) -> Option<GroupIndex> {
        let head = head_of(name);
        self.index
            .find(hash, |&(h, g)| {
                h == hash
                    && self
                        .group(g)
                        .is_some_and(|group| group.is_named(name, head))
            })
            .map(|&(_, g)| g)
    }

    /// The group named `name`, created if new (and no longer idle), and
    /// its record. One look-up of the index and one of the groups, for
    /// every send to a grouped queue; none of the index for a name looked
    /// up ahead (`ahead`, [`Groups::look_ahead`]), when the group it found
    /// still has that name.
    #[inline]
    fn find_or_create(&mut self, name: &[u8], ahead: NameAhead) -> (GroupIndex, &mut Group<K>) {
        let found = ahead.found.filter(|&g| {
            self.group(g)
                .is_some_and(|group| group.is_named(name, head_of(name)))
        });
        let g = match found.or_else(|| self.lookup(ahead.hash, name)) {
            Some(g) => g,
            None => self.create(name, ahead.hash),
        };
        let group = self.groups[g as usize]
            .as_mut()
            .expect("the index names live groups");
        if group.idle {
            group.idle = false;
            self.idle_groups -= 1;
        }
        (g, group)
    }

    /// The name of group `g`.
    pub fn name(&self, g: GroupIndex) -> Option<&str> {
        self.group(g)
            .and_then(|group| core::str::from_utf8(&group.name).ok())
    }

    /// The name of group `g` as a message group id sharing the group's
    /// bytes (no copy), when it is a valid one.
    pub fn id(&self, g: GroupIndex) -> Option<MessageGroupId> {
        self.group(g).and_then(|group| group.id.clone())
    }

    fn group(&self, g: GroupIndex) -> Option<&Group<K>> {
        self.groups.get(g as usize).and_then(Option::as_ref)
    }

    fn group_mut(&mut self, g: GroupIndex) -> Option<&mut Group<K>> {
        self.groups.get_mut(g as usize).and_then(Option::as_mut)
    }

    /// A message that joins group `name` (created if new) among its
    /// waiting messages, in send order: at the back when sent after every
    /// other (a send), in its place otherwise (a message moved in from
    /// another queue, or loaded from a snapshot). Returns its group.
    pub fn push(&mut self, name: &[u8], seq: u64, key: K) -> GroupIndex {
        let ahead = NameAhead {
            hash: self.hasher.hash(name),
            found: None,
        };
        self.push_ahead(name, ahead, seq, key)
    }

    /// Group name `name` looked up, as [`Groups::push_ahead`] takes it,
    /// with the reads its push will make started now: a send looks the
    /// groups of its batch up ahead, so that the batch waits for the
    /// groups' cache lines once, together, rather than one entry after
    /// another.
    pub fn look_ahead(&self, name: &[u8]) -> NameAhead {
        let hash = self.hasher.hash(name);
        let found = self.lookup(hash, name);
        if let Some(back) = found
            .and_then(|g| self.group(g))
            .and_then(|group| group.waiting.back())
        {
            prefetch::read_soon(back);
        }
        NameAhead { hash, found }
    }

    /// [`Groups::push`] of a name looked up ahead ([`Groups::look_ahead`],
    /// since when no group was forgotten or made).
    pub fn push_ahead(&mut self, name: &[u8], ahead: NameAhead, seq: u64, key: K) -> GroupIndex {
        let order = self.order;
        let (g, group) = self.find_or_create(name, ahead);
        if seq > group.high || group.waiting.is_empty() {
            group.waiting.push_back((seq, key));
            group.high = group.high.max(seq);
        } else {
            let at = group.waiting.partition_point(|&(s, _)| s < seq);
            group.waiting.insert(at, (seq, key));
            // It may be the new first one: let a take look.
            group.asleep = false;
        }
        if group.enters_turn(order) {
            self.turn.push_back(g);
        }
        g
    }

    /// A message of group `name` (created if new) that is in flight
    /// already, as if a take had handed it out: a message loaded from a
    /// snapshot in flight, or waiting out the backoff after a lease.
    /// Returns its group.
    pub fn push_taken(&mut self, name: &[u8]) -> GroupIndex {
        let ahead = NameAhead {
            hash: self.hasher.hash(name),
            found: None,
        };
        let (g, group) = self.find_or_create(name, ahead);
        group.in_flight += 1;
        if group.in_flight == 1 {
            self.groups_in_flight += 1;
        }
        g
    }

    fn create(&mut self, name: &[u8], hash: u64) -> GroupIndex {
        let name = Bytes::copy_from_slice(name);
        let group = Group {
            head: head_of(&name),
            waiting: VecDeque::new(),
            high: 0,
            in_flight: 0,
            stamp: 0,
            in_turn: false,
            asleep: false,
            idle: false,
            id: MessageGroupId::from_bytes(name.clone()).ok(),
            name,
        };
        let g = match self.free.pop() {
            Some(g) => {
                self.groups[g as usize] = Some(group);
                g
            }
            None => {
                // A queue holds fewer messages than u32::MAX, so fewer groups.
                let g = u32::try_from(self.groups.len()).unwrap_or(u32::MAX);
                self.groups.push(Some(group));
                g
            }
        };
        self.index.insert_unique(hash, (hash, g), |&(h, _)| h);
        g
    }

    /// Puts group `g` in the turn if it can deliver and is not there yet.
    fn offer(&mut self, g: GroupIndex) {
        let order = self.order;
        let Some(group) = self.group_mut(g) else {
            return;
        };
        if group.enters_turn(order) {
            self.turn.push_back(g);
        }
    }

    /// Whether some group can deliver now (as far as the groups know: its
    /// first waiting message may turn out gone or not ready).
    pub fn can_deliver(&self) -> bool {
        !self.turn.is_empty()
    }

    /// Takes up to `max` messages to deliver into `out` (group, seq, key),
    /// which then count as in flight. `check` says where a waiting message
    /// stands (see [`Readiness`]). In a fair order, a waiting message that
    /// cannot be delivered yet does not hold its group: it is set aside
    /// into `aside`, counted in flight like a delivered one, until the
    /// caller reports it back ([`Groups::returned`]) when it can be.
    ///
    /// `soon(key)` hints that the message `key` names will be checked
    /// soon (the caller prefetches what `check` reads). The groups in turn
    /// are read ahead in a pipeline, since with many groups each is in a
    /// cache line of its own, far apart (see [`Groups::read_ahead`]).
    pub fn take(
        &mut self,
        max: usize,
        mut check: impl FnMut(K) -> Readiness,
        mut soon: impl FnMut(K),
        out: &mut Vec<(GroupIndex, u64, K)>,
        aside: &mut Vec<(GroupIndex, K)>,
    ) {
        let mut taken = 0;
        while taken < max {
            self.read_ahead(&mut soon);
            let Some(g) = self.turn.pop_front() else {
                return;
            };
            let order = self.order;
            let Some(group) = self.group_mut(g) else {
                continue;
            };
            group.in_turn = false;
            let was_idle = group.in_flight == 0;
            if order == GroupOrder::Fifo && !was_idle {
                // Locked since it was offered (a message leased again).
                continue;
            }
            let mut took = 0;
            let mut set_aside = 0u32;
            // FIFO: consecutive messages of the group; fair: one.
            let want = match order {
                GroupOrder::Fifo => max - taken,
                GroupOrder::Fair => 1,
            };
            let mut started = false;
            while took < want {
                let Some((seq, key)) = group.waiting.pop_front() else {
                    break;
                };
                // The group's next messages, which this take may want too,
                // [`READ_AHEAD_IN_GROUP`] ahead of their check (all of them
                // at the group's first).
                let end = READ_AHEAD_IN_GROUP.min(group.waiting.len());
                let from = if started { READ_AHEAD_IN_GROUP - 1 } else { 0 };
                started = true;
                for &(_, next) in group.waiting.range(from.min(end)..end) {
                    soon(next);
                }
                match check(key) {
                    Readiness::Ready => {
                        out.push((g, seq, key));
                        took += 1;
                    }
                    Readiness::Later if order == GroupOrder::Fair => {
                        aside.push((g, key));
                        set_aside += 1;
                    }
                    Readiness::Later => {
                        group.waiting.push_front((seq, key));
                        group.asleep = true;
                        break;
                    }
                    Readiness::Gone => {}
                }
            }
            group.in_flight += u32::try_from(took).unwrap_or(u32::MAX) + set_aside;
            if was_idle && (took > 0 || set_aside > 0) {
                self.groups_in_flight += 1;
            }
            taken += took;
            self.offer(g);
            self.idle_if_empty(g);
        }
    }

    /// The reads of the groups next in turn, started ahead of their take
    /// in three steps, each a take after the one before: the record of the
    /// group [`READ_AHEAD`] turns away, then the first line of its waiting
    /// messages two turns away, then (through `soon`) what the first of
    /// them names one turn away. Each step reads only lines the step before
    /// asked for, so the take that comes to a group finds it in cache.
    #[inline]
    fn read_ahead(&self, soon: &mut impl FnMut(K)) {
        let turn = &self.turn;
        if let Some(slot) = turn
            .get(READ_AHEAD)
            .and_then(|&g| self.groups.get(g as usize))
        {
            prefetch::read_soon(slot);
        }
        if let Some(first) = turn
            .get(2)
            .and_then(|&g| self.group(g))
            .and_then(|group| group.waiting.front())
        {
            prefetch::read_soon(first);
        }
        if let Some(&(_, key)) = turn
            .get(1)
            .and_then(|&g| self.group(g))
            .and_then(|group| group.waiting.front())
        {
            soon(key);
        }
    }

    /// A message of group `g` taken by [`Groups::take`] is waiting again
    /// (its lease was released or expired): it goes back in send order.
    pub fn returned(&mut self, g: GroupIndex, seq: u64, key: K) {
        let Some(group) = self.group_mut(g) else {
            return;
        };
        let at = group.waiting.partition_point(|&(s, _)| s < seq);
        group.waiting.insert(at, (seq, key));
        group.asleep = false;
        self.leave_flight(g);
        self.offer(g);
    }

    /// The waiting message `seq` of group `g` is in flight again without a
    /// take (a change of visibility leased it again after its lease ran
    /// out): it leaves the waiting messages and counts in flight, so that a
    /// FIFO group is locked until it is back or settled.
    pub fn retaken(&mut self, g: GroupIndex, seq: u64) {
        let Some(group) = self.group_mut(g) else {
            return;
        };
        let at = group.waiting.partition_point(|&(s, _)| s < seq);
        if group.waiting.get(at).is_some_and(|&(s, _)| s == seq) {
            group.waiting.remove(at);
        }
        group.in_flight += 1;
        if group.in_flight == 1 {
            self.groups_in_flight += 1;
        }
    }

    /// A waiting message of group `g` that could not be delivered yet now
    /// can: the group delivers again if it slept.
    pub fn wake(&mut self, g: GroupIndex) {
        let order = self.order;
        let Some(group) = self.group_mut(g) else {
            return;
        };
        group.asleep = false;
        if group.enters_turn(order) {
            self.turn.push_back(g);
        }
    }

    /// A message of group `g` taken by [`Groups::take`] is gone for good
    /// (deleted, dead-lettered, dropped in flight).
    pub fn settled(&mut self, g: GroupIndex) {
        let order = self.order;
        let Some(group) = self.group_mut(g) else {
            return;
        };
        if !group.lands_one() {
            return;
        }
        // Its last message in flight: a group with waiting messages may
        // deliver again; one without is idle.
        let waits = !group.waiting.is_empty();
        if group.enters_turn(order) {
            self.turn.push_back(g);
        }
        self.groups_in_flight = self.groups_in_flight.saturating_sub(1);
        if !waits {
            self.idle_if_empty(g);
        }
    }

    fn leave_flight(&mut self, g: GroupIndex) {
        let Some(group) = self.group_mut(g) else {
            return;
        };
        if group.lands_one() {
            self.groups_in_flight = self.groups_in_flight.saturating_sub(1);
        }
    }

    /// Checks the groups against their members, given as (group, seq,
    /// key, taken): each group counts in flight exactly its taken members,
    /// a member not taken waits in its group, and the groups with a message
    /// in flight are counted. For the shard's invariant checks.
    #[cfg(any(test, feature = "test-util"))]
    pub fn check(&self, members: &[(GroupIndex, u64, K, bool)]) -> Result<(), String>
    where
        K: PartialEq + core::fmt::Debug,
    {
        let mut taken = vec![0u32; self.groups.len()];
        for &(g, seq, key, is_taken) in members {
            let group = self
                .group(g)
                .ok_or_else(|| format!("a member of group {g}, which does not exist"))?;
            if is_taken {
                taken[g as usize] += 1;
            } else if !group.waiting.iter().any(|&(s, k)| s == seq && k == key) {
                return Err(format!(
                    "{key:?} (seq {seq}) is not taken but does not wait in its group {g}"
                ));
            }
        }
        let mut busy = 0;
        for (g, group) in self.groups.iter().enumerate() {
            let Some(group) = group else { continue };
            if group.in_flight != taken[g] {
                return Err(format!(
                    "group {g} counts {} in flight, its members {}",
                    group.in_flight, taken[g]
                ));
            }
            busy += usize::from(group.in_flight > 0);
        }
        if busy != self.groups_in_flight {
            return Err(format!(
                "{} groups have a message in flight, the groups count {}",
                busy, self.groups_in_flight
            ));
        }
        Ok(())
    }

    /// Makes group `g` idle once it holds nothing, and forgets the groups
    /// idle longest beyond those kept (see the module docs).
    fn idle_if_empty(&mut self, g: GroupIndex) {
        let stamp = self.stamp.wrapping_add(1);
        let Some(group) = self.group_mut(g) else {
            return;
        };
        if group.idle || !group.waiting.is_empty() || group.in_flight > 0 {
            return;
        }
        group.idle = true;
        group.stamp = stamp;
        if group.waiting.capacity() > IDLE_WAITING_CAPACITY_MAX {
            group.waiting = VecDeque::new();
        }
        self.stamp = stamp;
        self.idle.push_back((g, stamp));
        self.idle_groups += 1;
        let keep = (self.index.len() - self.idle_groups).max(IDLE_GROUPS_MIN);
        while self.idle_groups > keep {
            let Some((g, stamp)) = self.idle.pop_front() else {
                break;
            };
            if self.is_idle(g, stamp) {
                self.forget(g);
            }
        }
        // Stale entries: at most as many as the live ones, and a few.
        if self.idle.len() > 2 * self.idle_groups + IDLE_GROUPS_MIN {
            let mut idle = core::mem::take(&mut self.idle);
            idle.retain(|&(g, stamp)| self.is_idle(g, stamp));
            self.idle = idle;
        }
    }

    /// Whether group `g` is idle under `stamp`.
    fn is_idle(&self, g: GroupIndex, stamp: u32) -> bool {
        self.group(g)
            .is_some_and(|group| group.idle && group.stamp == stamp)
    }

    /// Forgets idle group `g`.
    fn forget(&mut self, g: GroupIndex) {
        if let Some(group) = self.groups[g as usize].take() {
            // Hashed again: a group is forgotten once, and its record
            // keeps its first line for what the hot paths read.
            let hash = self.hasher.hash(&group.name);
            if let Ok(found) = self.index.find_entry(hash, |&(_, i)| i == g) {
                found.remove();
            }
            self.free.push(g);
            self.idle_groups -= 1;
        }
    }
}

mod names;
#[cfg(test)]
mod tests;
