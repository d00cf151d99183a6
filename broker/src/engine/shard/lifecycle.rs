//! One message's state: gauges, its one timer, its ready-FIFO and
//! membership entries, removal and moves between queues; and the timers
//! firing (lease expiry, delay and backoff end, retention, dedup windows,
//! long-poll deadlines).

use sluice_protocol::QueueStats;

use super::{NS_PER_MS, Removal, Shard, TimerEvent};
use crate::engine::limits::MESSAGE_STATE_BYTES;
use crate::engine::ops::LeaseOutcome;
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::MessageState;

impl Shard {
    pub(super) fn mark_touched(&mut self, p: u32, gained: bool) {
        let part = self.part_mut(p);
        part.gained |= gained;
        if !part.touched {
            part.touched = true;
            self.touched.push(p);
        }
    }

    pub(super) fn push_ready(&mut self, p: u32, key: SlotKey) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        if !m.in_ready {
            m.in_ready = true;
            self.part_mut(p).ready.push_back(key);
        }
        self.mark_touched(p, true);
    }

    /// (Re)schedules the message's one timer, or cancels it when none is
    /// needed (visible, retention by the partition's FIFO).
    pub(super) fn arm_timer(&mut self, key: SlotKey) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        let deadline = match (m.state, m.in_age_fifo) {
            (MessageState::Visible, true) => None,
            (MessageState::Visible, false) => Some(m.retain_until_ns),
            (MessageState::Delayed | MessageState::InFlight, true) => Some(m.due_ns),
            (MessageState::Delayed | MessageState::InFlight, false) => {
                Some(m.due_ns.min(m.retain_until_ns))
            }
        };
        if let Some(t) = m.timer.take() {
            self.wheel.cancel(t);
        }
        if let Some(deadline) = deadline {
            let t = self.wheel.insert(deadline, TimerEvent::Message(key));
            if let Some(m) = self.messages.get_mut(key) {
                m.timer = Some(t);
            }
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
        while let Some(&key) = self.part(p).age.front() {
            let until = self
                .messages
                .get(key)
                .filter(|m| m.partition == p && m.in_age_fifo)
                .map(|m| m.retain_until_ns);
            match until {
                None => {
                    self.part_mut(p).age.pop_front();
                }
                Some(until) if until <= now => {
                    self.part_mut(p).age.pop_front();
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

    pub(super) fn gauge_mut(stats: &mut QueueStats, state: MessageState) -> &mut u64 {
        match state {
            MessageState::Visible => &mut stats.visible,
            MessageState::Delayed => &mut stats.delayed,
            MessageState::InFlight => &mut stats.in_flight,
        }
    }

    /// Moves a message to `state` (gauges follow).
    pub(super) fn set_state(&mut self, key: SlotKey, state: MessageState, due_ns: u64) {
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        let (old, p) = (m.state, m.partition);
        m.state = state;
        m.due_ns = due_ns;
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
        let backoff = self.part(m.partition).attrs.backoff;
        let wait_ms = match backoff {
            None => 0,
            Some(b) => {
                let n = m.receive_count.max(1);
                let d = if n > 32 {
                    u64::from(b.max_ms)
                } else {
                    (u64::from(b.base_ms) << (n - 1)).min(u64::from(b.max_ms))
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
        let Some(m) = self.messages.remove(key) else {
            return;
        };
        if let Some(t) = m.timer {
            self.wheel.cancel(t);
        }
        let p = m.partition;
        let cost = m.data.len() as u64 + MESSAGE_STATE_BYTES;
        self.memory.release(self.registry.memory(), cost);
        self.bodies.release(m.chunk, m.data.len());
        let (state, in_age_fifo, sent_ns) = (m.state, m.in_age_fifo, m.sent_ns);
        drop(m);
        if self.bodies.needs_compaction() {
            self.compact_bodies();
        }
        let part = self.part_mut(p);
        *Self::gauge_mut(&mut part.stats, state) -= 1;
        match why {
            Removal::Deleted => part.stats.deleted += 1,
            Removal::Dropped => part.stats.dropped += 1,
            Removal::Purged => part.stats.purged += 1,
            Removal::QueueGone => {}
        }
        part.shared.release_depth();
        if !in_age_fifo {
            part.moved.remove(&(sent_ns, key.slot));
        }
        if state == MessageState::Visible {
            self.mark_touched(p, false);
        }
        if why != Removal::QueueGone {
            self.maybe_compact(p);
        }
    }

    /// Copies the messages of sparse retired chunks into the current one,
    /// so those chunks are freed (see `bodies.rs`).
    pub(super) fn compact_bodies(&mut self) {
        let keys: Vec<SlotKey> = self.messages.keys().collect();
        for key in keys {
            let Some(m) = self.messages.get_mut(key) else {
                continue;
            };
            if self.bodies.is_sparse(m.chunk) {
                let (data, chunk) = self.bodies.store(&m.data, &[]);
                self.bodies.release(m.chunk, m.data.len());
                m.data = data;
                m.chunk = chunk;
            }
        }
    }

    pub(super) fn key_live_in(&self, key: SlotKey, p: u32) -> bool {
        self.messages.get(key).is_some_and(|m| m.partition == p)
    }

    pub(super) fn maybe_compact(&mut self, p: u32) {
        let part = self.part(p);
        if part.needs_compaction(part.age.len()) {
            let mut age = core::mem::take(&mut self.part_mut(p).age);
            age.retain(|&k| {
                self.key_live_in(k, p) && self.messages.get(k).is_some_and(|m| m.in_age_fifo)
            });
            // The retention timer stays: its deadline is at or before the
            // new front's. The tail is the back's (the latest) deadline.
            let tail = age
                .back()
                .and_then(|&k| self.messages.get(k))
                .map_or(0, |m| m.retain_until_ns);
            let part = self.part_mut(p);
            part.age = age;
            part.age_tail_until_ns = tail;
        }
        let part = self.part(p);
        if part.needs_compaction(part.ready.len()) {
            let mut ready = core::mem::take(&mut self.part_mut(p).ready);
            ready.retain(|&k| self.key_live_in(k, p));
            self.part_mut(p).ready = ready;
        }
    }

    /// Moves a visible message to partition `to` (dead-letter or redrive):
    /// a new generation, so receipts of the old queue answer `Gone`.
    pub(super) fn move_message(&mut self, key: SlotKey, to: u32, redrive: bool) -> Option<SlotKey> {
        let m = self.messages.get(key)?;
        let (from, sent_ns, in_age, state) = (m.partition, m.sent_ns, m.in_age_fifo, m.state);
        debug_assert_eq!(state, MessageState::Visible);
        let from_inc = self.part(from).incarnation;
        {
            let part = self.part_mut(from);
            part.stats.visible -= 1;
            if redrive {
                part.stats.redriven += 1;
            } else {
                part.stats.dead_lettered += 1;
            }
            part.shared.release_depth();
            if !in_age {
                part.moved.remove(&(sent_ns, key.slot));
            }
        }
        self.mark_touched(from, false);
        let new_key = self.messages.bump(key)?;
        let retention_ns = u64::from(self.part(to).attrs.retention_ms) * NS_PER_MS;
        let m = self.messages.get_mut(new_key)?;
        m.partition = to;
        m.source = if redrive { 0 } else { from_inc };
        if redrive {
            m.receive_count = 0;
        }
        m.in_ready = false;
        m.in_age_fifo = false;
        m.retain_until_ns = sent_ns.saturating_add(retention_ns);
        let part = self.part_mut(to);
        part.stats.moved_in += 1;
        part.stats.visible += 1;
        part.shared.add_depth();
        part.moved.insert((sent_ns, new_key.slot));
        self.push_ready(to, new_key);
        self.arm_timer(new_key);
        self.maybe_compact(from);
        Some(new_key)
    }

    pub(super) fn advance_timers(&mut self) -> usize {
        let mut total = 0;
        loop {
            let mut fired = core::mem::take(&mut self.fired);
            self.wheel.advance(self.now_ns, |_, ev| fired.push(ev));
            if fired.is_empty() {
                self.fired = fired;
                return total;
            }
            total += fired.len();
            for ev in fired.drain(..) {
                match ev {
                    TimerEvent::Message(key) => self.on_message_timer(key),
                    TimerEvent::Retention(p) => self.on_retention_timer(p),
                    TimerEvent::Dedup(slot) => {
                        if let Some(cost) = self.dedup.expire(slot) {
                            self.memory.release(self.registry.memory(), cost);
                        }
                    }
                    TimerEvent::Waiter(req) => self.on_waiter_timeout(req),
                }
            }
            self.fired = fired;
        }
    }

    pub(super) fn on_message_timer(&mut self, key: SlotKey) {
        let now = self.now_ns;
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        m.timer = None;
        if m.retain_until_ns <= now {
            self.remove_message(key, Removal::Dropped);
            return;
        }
        match m.state {
            MessageState::InFlight if m.due_ns <= now => {
                let due = m.due_ns;
                let p = m.partition;
                if let Some(o) = self.observer.0.as_mut() {
                    o.lease_ended(LeaseOutcome::Expired, due.saturating_sub(m.leased_ns));
                    o.redelivery_lateness(now.saturating_sub(due));
                }
                self.part_mut(p).stats.redelivered += 1;
                self.make_available(key, due);
            }
            MessageState::Delayed if m.due_ns <= now => {
                let due = m.due_ns;
                self.set_state(key, MessageState::Visible, due);
            }
            _ => self.arm_timer(key),
        }
    }
}
