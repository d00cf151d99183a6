//! One message's state: gauges, its one timer, its ready-FIFO and
//! membership entries, removal and moves between queues; and the timers
//! firing (lease expiry, delay and backoff end, retention, dedup windows,
//! long-poll deadlines).

use sluice_protocol::QueueStats;

use super::{
    EXT_BYTES, LEASE_BYTES, LogGone, LogPut, MESSAGE_BYTES, NS_PER_MS, Removal, Shard, TimerEvent,
};
use crate::engine::ops::LeaseOutcome;
use crate::engine::partition::ReadyEntry;
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{Ext, MessageState, NONE, StoredMessage};
use crate::engine::wheel::TimerId;

impl Shard {
    #[inline]
    pub(super) fn mark_touched(&mut self, p: u32, gained: bool) {
        let part = self.part_mut(p);
        part.gained |= gained;
        if !part.touched {
            part.touched = true;
            self.touched.push(p);
        }
    }

    /// Puts a visible message in its partition's ready FIFO (unless it has
    /// an entry there already), stamped with the next sequence number (see
    /// `partition.rs`).
    pub(super) fn push_ready(&mut self, p: u32, key: SlotKey) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        if !m.in_ready() {
            m.set_in_ready(true);
            let entry = ReadyEntry {
                key,
                order: self.next_seq,
            };
            let part = self.partitions[p as usize]
                .as_mut()
                .expect("live partition index");
            part.ready.push_back(entry, &mut self.ready_spare);
        }
        if self.part(p).grouping.is_some() {
            self.group_visible(p, key);
        }
        self.mark_touched(p, true);
    }

    /// (Re)schedules the message's one timer, or cancels it when none is
    /// needed (visible, retention by the partition's FIFO).
    pub(super) fn arm_timer(&mut self, key: SlotKey) {
        let Some(m) = self.messages.get(key).copied() else {
            return;
        };
        if m.ext == NONE {
            // Never delivered, delayed or moved: visible, and its retention
            // is its partition's age FIFO.
            debug_assert!(m.state == MessageState::Visible && m.in_age_fifo());
            return;
        }
        let retain_until = m.retain_until_ns();
        let (due, grouped) = self
            .lease_of(&m)
            .map_or((0, false), |l| (l.due_ns, l.group != NONE));
        let deadline = match (m.state, m.in_age_fifo()) {
            (MessageState::Visible, true) => None,
            (MessageState::InFlight, true) if grouped => None,
            (MessageState::Visible, false) => Some(retain_until),
            (MessageState::Delayed | MessageState::InFlight, true) => Some(due),
            (MessageState::Delayed | MessageState::InFlight, false) => Some(due.min(retain_until)),
        };
        let ext = self.exts.get_mut(m.ext);
        let old = core::mem::replace(&mut ext.timer, TimerId::NONE);
        if !old.is_none() {
            self.wheel.cancel(old);
        }
        if let Some(deadline) = deadline {
            let t = self.wheel.insert(deadline, TimerEvent::Message(key));
            self.exts.get_mut(m.ext).timer = t;
        }
    }

    /// The retention timer of `p`'s age FIFO: drops the front entries whose
    /// retention ended (skipping stale ones) and re-arms at the next one.
    pub(super) fn on_retention_timer(&mut self, p: u32) {
        let now = self.now_ns;
        let Some(part) = self.partitions.get_mut(p as usize).and_then(Option::as_mut) else {
            return;
        };
        part.retention_timer = None;
        while let Some(key) = self.part(p).age.front() {
            let until = self
                .messages
                .get(key)
                .filter(|m| m.partition() == p && m.in_age_fifo())
                .map(|m| m.retain_until_ns());
            match until {
                None => {
                    self.pop_age_front(p);
                }
                Some(until) if until <= now => {
                    self.pop_age_front(p);
                    self.remove_message(key, Removal::Dropped);
                }
                Some(until) => {
                    let t = self.wheel.insert(until, TimerEvent::Retention(p));
                    self.part_mut(p).retention_timer = Some(t);
                    return;
                }
            }
        }
    }

    /// Pops the gone entries at the front of partition `p`'s age FIFO,
    /// each once. A grouped partition's receives take from its groups and
    /// never pop the FIFO, and a standard one's deletes pop it only when
    /// they come in send order (`remove_with`), so without this a draining
    /// backlog would leave the FIFO to the whole-FIFO compaction, a walk of
    /// up to twice the messages held, in one go: a stall of tens of
    /// milliseconds behind a million messages, where popping the front as
    /// it dies costs a message once.
    fn trim_age_front(&mut self, p: u32) {
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        let messages = &self.messages;
        while let Some(key) = part.age.front() {
            let live = messages
                .get(key)
                .is_some_and(|m| m.partition() == p && m.in_age_fifo());
            if live {
                break;
            }
            part.age.pop_front(&mut self.age_spare);
        }
        part.fresh = part.fresh.max(part.age.head());
    }

    /// Pops the front of `p`'s age FIFO; the fresh cursor never lies before
    /// the front.
    pub(super) fn pop_age_front(&mut self, p: u32) {
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        part.age.pop_front(&mut self.age_spare);
        part.fresh = part.fresh.max(part.age.head());
    }

    pub(super) fn gauge_mut(stats: &mut QueueStats, state: MessageState) -> &mut u64 {
        match state {
            MessageState::Visible => &mut stats.visible,
            MessageState::Delayed => &mut stats.delayed,
            MessageState::InFlight => &mut stats.in_flight,
        }
    }

    /// Moves a message to `state` (gauges follow); `due_ns` is the end of
    /// the lease or delay. A message that leaves visibility gets a lease
    /// entry; one that becomes visible gives its back.
    pub(super) fn set_state(&mut self, key: SlotKey, state: MessageState, due_ns: u64) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        let (old, p) = (m.state, m.partition());
        m.state = state;
        let m = *m;
        if state == MessageState::Visible {
            self.drop_lease(&m);
        } else {
            let lease = self.ensure_lease(key);
            // A new deadline: the message's own timer ends it, not its
            // group's.
            self.leave_group(lease);
            self.leases.get_mut(lease).due_ns = due_ns;
        }
        let part = self.part_mut(p);
        *Self::gauge_mut(&mut part.stats, old) -= 1;
        *Self::gauge_mut(&mut part.stats, state) += 1;
        if state == MessageState::Visible {
            self.push_ready(p, key);
        } else if old == MessageState::Visible {
            self.mark_touched(p, false);
        }
        self.arm_timer(key);
    }

    /// After a release or an expired lease at `at_ns`: visible now, or
    /// delayed by the queue's backoff (equal jitter).
    pub(super) fn make_available(&mut self, key: SlotKey, at_ns: u64) {
        let Some(m) = self.messages.get(key) else {
            return;
        };
        let backoff = self.part(m.partition()).attrs.backoff;
        let (receive_count, _) = self.counters(m);
        let wait_ms = match backoff {
            None => 0,
            Some(b) => {
                let n = receive_count.max(1);
                let d = if n > 32 {
                    u64::from(b.max.get())
                } else {
                    (u64::from(b.base.get()) << (n - 1)).min(u64::from(b.max.get()))
                };
                d / 2 + self.rng.below_inclusive(d - d / 2)
            }
        };
        if wait_ms == 0 {
            self.set_state(key, MessageState::Visible, at_ns);
        } else {
            self.set_state(key, MessageState::Delayed, at_ns + wait_ms * NS_PER_MS);
        }
    }

    pub(super) fn remove_message(&mut self, key: SlotKey, why: Removal) {
        let Some(m) = self.messages.get(key).copied() else {
            return;
        };
        self.remove_known(key, &m, why);
        if why != Removal::QueueGone {
            self.maybe_compact(m.partition());
        }
    }

    /// Removes the message `m` at `key`: its side entries and timer, its
    /// data, its memory, its counters. Its FIFO entries go stale; the
    /// caller compacts the partition's FIFOs ([`Shard::maybe_compact`])
    /// when it is done removing.
    pub(super) fn remove_known(&mut self, key: SlotKey, m: &StoredMessage, why: Removal) {
        let side = (m.ext != NONE).then(|| {
            let e = *self.exts.get(m.ext);
            let group = (e.lease != NONE).then(|| self.leases.get(e.lease).group);
            (e, group)
        });
        self.remove_with(key, m, side, why);
    }

    /// [`Shard::remove_known`] with the message's ext entry and its lease's
    /// group (when it has a lease) already read.
    pub(super) fn remove_with(
        &mut self,
        key: SlotKey,
        m: &StoredMessage,
        side: Option<(Ext, Option<u32>)>,
        why: Removal,
    ) {
        if self.wal.is_some() {
            let gone = match why {
                Removal::Deleted => Some(LogGone::Deleted),
                Removal::Dropped => Some(LogGone::Dropped),
                Removal::Purged => Some(LogGone::Purged),
                // Its queue's deletion says it (a put of a queue no
                // longer there is skipped).
                Removal::QueueGone => None,
            };
            if let Some(gone) = gone {
                self.logged_gone(key, gone);
            }
        }
        let data_len = self.data_len(m);
        let mut cost = data_len as u64 + MESSAGE_BYTES;
        if let Some((e, group)) = side {
            cost += EXT_BYTES;
            if !e.timer.is_none() {
                self.wheel.cancel(e.timer);
            }
            if let Some(group) = group {
                cost += LEASE_BYTES;
                self.count_out(group);
                self.leases.remove(e.lease);
            }
            self.exts.remove(m.ext);
        }
        let p = m.partition();
        self.messages.remove(key);
        self.memory.release(self.registry.memory(), cost);
        self.bodies.release(m.chunk, data_len);
        if self.bodies.needs_compaction() {
            self.compact_bodies();
        }
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        *Self::gauge_mut(&mut part.stats, m.state) -= 1;
        match why {
            Removal::Deleted => part.stats.deleted += 1,
            Removal::Dropped => part.stats.dropped += 1,
            Removal::Purged => part.stats.purged += 1,
            Removal::QueueGone => {}
        }
        part.shared.release_depth();
        if m.in_age_fifo() {
            // A message removed in send order (a consumer deleting what it
            // received, oldest first: the common case) is the front of its
            // age FIFO, and its entry goes now rather than in a later walk
            // (`trim_age_front`, `maybe_compact`).
            if part.age.pop_front_if(key, &mut self.age_spare) {
                part.fresh = part.fresh.max(part.age.head());
            }
        } else {
            part.moved.remove(&(m.sent_ns(), key.slot));
        }
        if part.grouping.is_some() {
            self.leave_grouping(p, key);
        }
        if m.state == MessageState::Visible {
            self.mark_touched(p, false);
        }
    }

    /// Copies the messages of sparse retired chunks into the current one,
    /// so those chunks are freed (see `bodies.rs`).
    pub(super) fn compact_bodies(&mut self) {
        let keys: Vec<SlotKey> = self.messages.keys().collect();
        for key in keys {
            let Some(m) = self.messages.get(key).copied() else {
                continue;
            };
            if self.bodies.is_sparse(m.chunk) {
                let len = self.data_len(&m);
                let data = self.bodies.data(m.chunk, u32::from(m.offset), len);
                let (chunk, offset) = self.bodies.store(&data, &[]);
                self.bodies.release(m.chunk, len);
                if let Some(m) = self.messages.get_mut(key) {
                    m.relocate(chunk, offset);
                }
            }
        }
    }

    pub(super) fn maybe_compact(&mut self, p: u32) {
        self.trim_age_front(p);
        let part = self.part(p);
        if part.needs_compaction(part.age.len()) {
            let part = self.partitions[p as usize]
                .as_mut()
                .expect("live partition index");
            let messages = &self.messages;
            let fresh = part.fresh;
            part.fresh = part.age.retain(
                |k| {
                    messages
                        .get(k)
                        .is_some_and(|m| m.partition() == p && m.in_age_fifo())
                },
                fresh,
                &mut self.age_spare,
            );
            // The retention timer stays: its deadline is at or before the
            // new front's. The tail is the back's (the latest) deadline.
            part.age_tail_until_ns = part
                .age
                .back()
                .and_then(|k| messages.get(k))
                .map_or(0, |m| m.retain_until_ns());
        }
        let part = self.part(p);
        if part.needs_compaction(part.ready.len()) {
            let part = self.partitions[p as usize]
                .as_mut()
                .expect("live partition index");
            let messages = &self.messages;
            let end = part.ready.end();
            part.ready.retain(
                |e| messages.get(e.key).is_some_and(|m| m.partition() == p),
                end,
                &mut self.ready_spare,
            );
        }
    }

    /// Moves a visible message to partition `to` (dead-letter or redrive):
    /// a new generation, so receipts of the old queue answer `Gone`.
    pub(super) fn move_message(&mut self, key: SlotKey, to: u32, redrive: bool) -> Option<SlotKey> {
        let m = *self.messages.get(key)?;
        let (from, sent_ns) = (m.partition(), m.sent_ns());
        debug_assert_eq!(m.state, MessageState::Visible);
        let from_inc = self.part(from).incarnation;
        let group = self.group_name(from, key);
        if self.part(from).grouping.is_some() {
            self.leave_grouping(from, key);
        }
        {
            let part = self.part_mut(from);
            part.stats.visible -= 1;
            if redrive {
                part.stats.redriven += 1;
            } else {
                part.stats.dead_lettered += 1;
            }
            part.shared.release_depth();
            if !m.in_age_fifo() {
                part.moved.remove(&(sent_ns, key.slot));
            }
        }
        self.mark_touched(from, false);
        if self.wal.is_some() {
            let gone = if redrive {
                LogGone::Redriven
            } else {
                LogGone::DeadLettered
            };
            self.logged_gone(key, gone);
        }
        let new_key = self.messages.bump(key)?;
        // The timer names the old key: it goes, and is set again below.
        let ext = self.ensure_ext(new_key);
        let old_timer = core::mem::replace(&mut self.exts.get_mut(ext).timer, TimerId::NONE);
        if !old_timer.is_none() {
            self.wheel.cancel(old_timer);
        }
        let retention_ms = self.part(to).attrs.retention.get();
        let m = self.messages.get_mut(new_key)?;
        m.set_partition(to);
        m.set_in_ready(false);
        m.set_in_age_fifo(false);
        m.retention_ms = retention_ms;
        let e = self.exts.get_mut(ext);
        e.source = if redrive { 0 } else { from_inc };
        if redrive {
            e.receive_count = 0;
        }
        let part = self.part_mut(to);
        part.stats.moved_in += 1;
        part.stats.visible += 1;
        part.shared.add_depth();
        part.moved.insert((sent_ns, new_key.slot));
        if group.as_deref().is_some_and(|g| !g.is_empty()) && self.part(to).grouping.is_none() {
            // A fair queue's message with a group makes a standard queue
            // fair (queues of one kind only: a FIFO queue's has its groups).
            self.make_fair(to, Some(new_key));
        }
        if self.part(to).grouping.is_some() {
            self.enter_group(to, new_key, group.as_deref().map_or(b"", str::as_bytes));
        }
        self.push_ready(to, new_key);
        self.arm_timer(new_key);
        self.maybe_compact(from);
        if self.wal.is_some() {
            self.logged_put(new_key, LogPut::MovedIn);
        }
        Some(new_key)
    }

    pub(super) fn advance_timers(&mut self) -> usize {
        let mut total = 0;
        loop {
            let mut fired = core::mem::take(&mut self.fired);
            self.wheel
                .advance(self.now_ns, |id, ev| fired.push((id, ev)));
            if fired.is_empty() {
                self.fired = fired;
                return total;
            }
            total += fired.len();
            for (id, ev) in fired.drain(..) {
                match ev {
                    TimerEvent::Message(key) => self.on_message_timer(key),
                    TimerEvent::LeaseGroup(g) => self.on_group_timer(g, id),
                    TimerEvent::Retention(p) => self.on_retention_timer(p),
                    TimerEvent::Dedup(inc) => self.on_dedup_timer(inc),
                    TimerEvent::Waiter(req) => self.on_waiter_timeout(req),
                }
            }
            self.fired = fired;
        }
    }

    /// Queue `inc`'s dedup entries whose window ended go; the timer is
    /// armed again for the next one's end.
    fn on_dedup_timer(&mut self, inc: u32) {
        let done = self.dedup.expire_due(inc, self.now_ns);
        if done.freed > 0 {
            self.memory.release(self.registry.memory(), done.freed);
        }
        if let Some(at) = done.next_at {
            let t = self.wheel.insert(at, TimerEvent::Dedup(inc));
            self.dedup.set_timer(inc, t);
        }
    }

    pub(super) fn on_message_timer(&mut self, key: SlotKey) {
        let now = self.now_ns;
        let Some(m) = self.messages.get(key).copied() else {
            return;
        };
        if m.ext == NONE {
            return;
        }
        self.exts.get_mut(m.ext).timer = TimerId::NONE;
        if m.retain_until_ns() <= now {
            self.remove_message(key, Removal::Dropped);
            return;
        }
        let due = self.due_ns(&m);
        match m.state {
            MessageState::InFlight if due <= now => self.expire_lease(key, &m),
            MessageState::Delayed if due <= now => {
                self.set_state(key, MessageState::Visible, due);
            }
            _ => self.arm_timer(key),
        }
    }

    /// The lease of the message `m` at `key` ended by its deadline: it is
    /// delivered again (after the queue's backoff, if any).
    pub(super) fn expire_lease(&mut self, key: SlotKey, m: &StoredMessage) {
        let now = self.now_ns;
        let (due, leased_ns) = self
            .lease_of(m)
            .map_or((now, now), |l| (l.due_ns, l.leased_ns));
        if let Some(o) = self.observer.0.as_mut() {
            o.lease_ended(LeaseOutcome::Expired, due.saturating_sub(leased_ns));
            o.redelivery_lateness(now.saturating_sub(due));
        }
        self.part_mut(m.partition()).stats.redelivered += 1;
        self.make_available(key, due);
    }
}
