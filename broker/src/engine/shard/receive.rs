//! Receive: taking visible messages to lease (`lease.rs` leases each one),
//! steals from other shards, long-poll waiters (park, wake, time out), and
//! publishing the visible hints that drive steals and wake-ups (see the
//! registry's ground rules).

use sluice_protocol::limits::{BATCH_ENTRIES_MAX, FRAME_RESERVED_BYTES};
use sluice_protocol::queue_attributes::{RECEIVE_WAIT_MS_MAX, VISIBILITY_TIMEOUT_MS_MAX};
use sluice_protocol::{QueueName, ReceivedMessage};

use super::lease::{ReplyBudget, Source, Take, Took};
use super::{NS_PER_MS, PendingKind, Shard, TimerEvent};
use crate::engine::error::EngineError;
use crate::engine::mesh::shard_msg::ShardMsg;
use crate::engine::ops::OpResult;
use crate::engine::partition::ReadyEntry;
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::MessageState;
use crate::engine::wheel::TimerId;

/// A receive in progress: what it got, whom it still asks, whether it waits.
#[derive(Debug)]
pub(super) struct PendingReceive {
    pub(super) incarnation: u32,
    pub(super) max: usize,
    pub(super) visibility_timeout_ms: Option<u32>,
    pub(super) budget: ReplyBudget,
    pub(super) got: Vec<ReceivedMessage>,
    /// Shards still to ask, last first.
    pub(super) candidates: Vec<u16>,
    pub(super) steal_from: Option<u16>,
    pub(super) deadline_ns: Option<u64>,
    pub(super) timer: Option<TimerId>,
    pub(super) waiting: bool,
    pub(super) expired: bool,
    pub(super) queue_gone: bool,
    pub(super) budget_full: bool,
    /// When the receive began: no message it got was leased earlier.
    pub(super) started_ns: u64,
    /// The shortest lease it hands out: its override, else the queue's
    /// visibility timeout when it began.
    pub(super) lease_ms: u32,
}

impl Shard {
    /// The next visible message of `p` to serve and where it comes from,
    /// without taking it ([`Shard::take_next`] does). Stale entries in front
    /// are dropped on the way. See `partition.rs` for the order.
    pub(super) fn next_visible(&mut self, p: u32) -> Option<(SlotKey, Source)> {
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        let ready = loop {
            let Some(e) = part.ready.front() else {
                break None;
            };
            match self.messages.get_mut(e.key) {
                Some(m) if m.partition() == p => {
                    if m.state == MessageState::Visible {
                        break Some(e);
                    }
                    // Leased again since (a change of visibility after its
                    // lease ended): it comes back when visible.
                    m.set_in_ready(false);
                    part.ready.pop_front(&mut self.ready_spare);
                }
                _ => {
                    part.ready.pop_front(&mut self.ready_spare);
                }
            }
        };
        part.fresh = part.fresh.max(part.age.head());
        let fresh = loop {
            let Some(key) = part.age.get(part.fresh) else {
                break None;
            };
            match self.messages.get(key) {
                Some(m)
                    if m.partition() == p && m.is_plain() && m.in_age_fifo() && !m.in_ready() =>
                {
                    break Some((key, m.seq.get()));
                }
                _ => part.fresh += 1,
            }
        };
        match (ready, fresh) {
            (Some(r), Some((_, seq))) if r.order <= seq => Some((r.key, Source::Ready)),
            (_, Some((key, _))) => Some((key, Source::Fresh)),
            (Some(r), None) => Some((r.key, Source::Ready)),
            (None, None) => None,
        }
    }

    /// Takes the message [`Shard::next_visible`] found out of its FIFO.
    pub(super) fn take_next(&mut self, p: u32, key: SlotKey, source: Source) {
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        match source {
            Source::Ready => {
                part.ready.pop_front(&mut self.ready_spare);
                if let Some(m) = self.messages.get_mut(key) {
                    m.set_in_ready(false);
                }
            }
            Source::Fresh => part.fresh += 1,
        }
    }

    /// Pops the next visible message of `p`.
    pub(super) fn pop_visible(&mut self, p: u32) -> Option<(SlotKey, Source)> {
        let (key, source) = self.next_visible(p)?;
        self.take_next(p, key, source);
        Some((key, source))
    }

    /// Puts a message popped by [`Shard::pop_visible`] back in front, to be
    /// the next one served (in reverse order when several go back).
    pub(super) fn push_back_front(&mut self, p: u32, key: SlotKey, source: Source) {
        let order = match source {
            // Its place relative to fresh messages: before all those sent
            // after it was pushed (which it already was).
            Source::Ready => 0,
            // Before every fresh message still to come, which were sent
            // after it.
            Source::Fresh => self.messages.get(key).map_or(0, |m| m.seq.get()),
        };
        let Some(m) = self.messages.get_mut(key) else {
            return;
        };
        m.set_in_ready(true);
        let part = self.partitions[p as usize]
            .as_mut()
            .expect("live partition index");
        part.ready
            .push_front(ReadyEntry { key, order }, &mut self.ready_spare);
    }

    /// Leases up to `max` visible messages of `p` into `out`, dead-lettering
    /// those whose next delivery would exceed the redrive policy. The
    /// messages leased here share a deadline, and a lease group's timer
    /// (`lease_groups.rs`). A grouped partition (a FIFO queue) delivers
    /// through its groups (`grouped.rs`).
    pub(super) fn take_visible(
        &mut self,
        p: u32,
        max: usize,
        visibility_timeout_ms: Option<u32>,
        budget: &mut ReplyBudget,
        out: &mut Vec<ReceivedMessage>,
    ) {
        let mut batch = self.lease_batch(p, visibility_timeout_ms);
        if self.part(p).grouping.is_some() {
            self.take_grouped(max, &mut batch, budget, out);
        } else {
            let start = out.len();
            while out.len() - start < max {
                let Some((key, source)) = self.next_visible(p) else {
                    break;
                };
                let Some(m) = self.messages.get(key).copied() else {
                    // next_visible names only messages it found.
                    break;
                };
                if self.lease_one(key, &m, Take::Fifo(source), &mut batch, budget, out)
                    == Took::NoRoom
                {
                    break;
                }
            }
        }
        self.close_lease_batch(p, &batch);
    }

    pub(super) fn op_receive(
        &mut self,
        ticket: u64,
        queue: &QueueName,
        max: u32,
        visibility_timeout_ms: Option<u32>,
        wait_ms: Option<u32>,
        with_source: bool,
    ) {
        let p = match self.partition_of(queue) {
            Ok(p) => p,
            Err(e) => return self.finish_ticket(ticket, e.into()),
        };
        let invalid = if max == 0 || max as usize > BATCH_ENTRIES_MAX {
            Some(EngineError::MaxOutOfRange(max))
        } else if let Some(v) = visibility_timeout_ms.filter(|&v| v > VISIBILITY_TIMEOUT_MS_MAX) {
            Some(EngineError::VisibilityTimeoutOutOfRange(v))
        } else {
            wait_ms
                .filter(|&w| w > RECEIVE_WAIT_MS_MAX)
                .map(EngineError::WaitOutOfRange)
        };
        if let Some(e) = invalid {
            return self.finish_ticket(ticket, e.into());
        }
        let part = self.part(p);
        let inc = part.incarnation;
        let wait = if self.shut_down {
            0
        } else {
            wait_ms.unwrap_or(part.attrs.receive_wait.get())
        };
        let frame = self.registry.config().frame_bytes_max;
        let mut pr = PendingReceive {
            incarnation: inc,
            max: max as usize,
            visibility_timeout_ms,
            budget: ReplyBudget {
                bytes_left: frame.saturating_sub(FRAME_RESERVED_BYTES) as usize,
                holds_any: false,
                with_source,
            },
            got: Vec::new(),
            candidates: Vec::new(),
            steal_from: None,
            deadline_ns: (wait > 0).then(|| self.now_ns + u64::from(wait) * NS_PER_MS),
            timer: None,
            waiting: false,
            expired: false,
            queue_gone: false,
            budget_full: false,
            started_ns: self.now_ns,
            lease_ms: visibility_timeout_ms.unwrap_or(part.attrs.visibility_timeout.get()),
        };
        let visible = usize::try_from(self.part(p).stats.visible).unwrap_or(usize::MAX);
        let mut got = self.received_vec();
        got.reserve(pr.max.min(visible));
        self.take_visible(p, pr.max, visibility_timeout_ms, &mut pr.budget, &mut got);
        pr.budget_full = got.len() < pr.max && self.deliverable(p) > 0;
        pr.got = got;
        if pr.got.len() < pr.max && !pr.budget_full {
            pr.candidates = self.steal_candidates(p);
        }
        if pr.got.len() >= pr.max
            || pr.budget_full
            || (pr.candidates.is_empty() && pr.deadline_ns.is_none())
        {
            // Nothing to ask and no wait: what `continue_receive` would
            // answer at once, without the bookkeeping of a pending request.
            return self.finish_ticket(ticket, OpResult::Received(pr.got));
        }
        let req = self.new_req(ticket, PendingKind::Receive(pr));
        self.continue_receive(req);
    }

    /// Other shards whose hint says they have visible messages, best last.
    pub(super) fn steal_candidates(&self, p: u32) -> Vec<u16> {
        let shared = &self.part(p).shared;
        let mut c: Vec<(u64, u16)> = self
            .others()
            .map(|s| (shared.visible_hint(s), s))
            .filter(|(v, _)| *v > 0)
            .collect();
        c.sort_unstable();
        c.into_iter().map(|(_, s)| s).collect()
    }

    pub(super) fn receive_mut(&mut self, req: u64) -> Option<&mut PendingReceive> {
        match self.pending.get_mut(&req).map(|p| &mut p.kind) {
            Some(PendingKind::Receive(r)) => Some(r),
            _ => None,
        }
    }

    /// Drives a receive one step: steal, park, or finish.
    pub(super) fn continue_receive(&mut self, req: u64) {
        loop {
            let Some(pending) = self.pending.get_mut(&req) else {
                return;
            };
            let cancelled = pending.cancelled;
            let PendingKind::Receive(r) = &mut pending.kind else {
                return;
            };
            if r.steal_from.is_some() {
                return;
            }
            if cancelled {
                self.drop_receive(req);
                return;
            }
            if r.queue_gone {
                let inc = r.incarnation;
                self.unpark(req);
                self.finish_receive(req, EngineError::QueueDeleted(inc).into());
                return;
            }
            let done = r.got.len() >= r.max || r.budget_full;
            if !done {
                if let Some(dest) = r.candidates.pop() {
                    r.steal_from = Some(dest);
                    let msg = ShardMsg::Steal {
                        req,
                        incarnation: r.incarnation,
                        max: (r.max - r.got.len()) as u32,
                        visibility_timeout_ms: r.visibility_timeout_ms,
                        reply_bytes_left: r.budget.bytes_left,
                        holds_any: r.budget.holds_any,
                        with_source: r.budget.with_source,
                    };
                    self.send_to(dest, msg);
                    return;
                }
            }
            let may_wait = r.got.is_empty() && !r.expired && r.deadline_ns.is_some() && !done;
            if !may_wait {
                let mut got = core::mem::take(&mut r.got);
                // A receive that took long (a long poll that gathered from
                // slow shards, or a lease of 0) may have seen a message's
                // lease end and got the message again: one receive never
                // returns a message twice, so keep its newest delivery (the
                // older receipt is stale already).
                let lease_end = r.started_ns + u64::from(r.lease_ms) * NS_PER_MS;
                if self.now_ns + NS_PER_MS >= lease_end {
                    keep_newest_deliveries(&mut got);
                }
                self.unpark(req);
                self.finish_receive(req, OpResult::Received(got));
                return;
            }
            if r.waiting {
                return;
            }
            // Park: FIFO per queue on this shard; register, then re-read the
            // hints (the Dekker pairing of registry.rs).
            r.waiting = true;
            let inc = r.incarnation;
            let deadline = r.deadline_ns.unwrap_or(self.now_ns);
            let Some(&p) = self.by_incarnation.get(&inc) else {
                if let Some(r) = self.receive_mut(req) {
                    r.waiting = false;
                    r.queue_gone = true;
                }
                continue;
            };
            let t = self.wheel.insert(deadline, TimerEvent::Waiter(req));
            self.part_mut(p).waiters.push_back(req);
            self.part(p).shared.add_waiter(self.id);
            let candidates = self.steal_candidates(p);
            if let Some(r) = self.receive_mut(req) {
                r.timer = Some(t);
                r.candidates = candidates;
            }
        }
    }

    /// Takes a receive out of its queue's waiter FIFO (if parked) and
    /// cancels its deadline.
    pub(super) fn unpark(&mut self, req: u64) {
        let Some(r) = self.receive_mut(req) else {
            return;
        };
        let timer = r.timer.take();
        let was_waiting = core::mem::replace(&mut r.waiting, false);
        let inc = r.incarnation;
        if let Some(t) = timer {
            self.wheel.cancel(t);
        }
        if was_waiting {
            if let Some(&p) = self.by_incarnation.get(&inc) {
                let id = self.id;
                let part = self.part_mut(p);
                if let Some(pos) = part.waiters.iter().position(|&w| w == req) {
                    part.waiters.remove(pos);
                }
                part.shared.remove_waiter(id);
            }
        }
    }

    pub(super) fn drop_receive(&mut self, req: u64) {
        self.unpark(req);
        if let Some(p) = self.pending.remove(&req) {
            if self.tickets.get(&p.ticket) == Some(&req) {
                self.tickets.remove(&p.ticket);
            }
        }
    }

    pub(super) fn finish_receive(&mut self, req: u64, result: OpResult) {
        self.finish(req, result);
    }

    pub(super) fn on_waiter_timeout(&mut self, req: u64) {
        if let Some(r) = self.receive_mut(req) {
            r.timer = None;
            r.expired = true;
            self.continue_receive(req);
        }
    }

    /// Serves parked receives from `p`'s own visible messages.
    pub(super) fn serve_local_waiters(&mut self, p: u32) {
        let mut waiters = core::mem::take(&mut self.scratch_reqs);
        waiters.clear();
        waiters.extend(self.part(p).waiters.iter().copied());
        for &req in &waiters {
            if self.deliverable(p) == 0 {
                break;
            }
            let Some(r) = self.receive_mut(req) else {
                continue;
            };
            if r.steal_from.is_some() {
                continue;
            }
            let (max, vis) = (r.max - r.got.len().min(r.max), r.visibility_timeout_ms);
            let mut budget = r.budget;
            let mut got = core::mem::take(&mut r.got);
            if got.capacity() == 0 {
                got = self.received_vec();
            }
            self.take_visible(p, max, vis, &mut budget, &mut got);
            if let Some(r) = self.receive_mut(req) {
                r.budget = budget;
                r.got = got;
            }
            self.continue_receive(req);
        }
        self.scratch_reqs = waiters;
    }

    pub(super) fn flush_touched(&mut self) {
        while let Some(p) = self.touched.pop() {
            let Some(part) = self.partitions[p as usize].as_mut() else {
                continue;
            };
            part.touched = false;
            let gained = core::mem::take(&mut part.gained);
            if gained && !part.waiters.is_empty() {
                self.serve_local_waiters(p);
                let Some(part) = self.partitions[p as usize].as_mut() else {
                    continue;
                };
                part.touched = false;
            }
            // A FIFO queue's messages that its locked groups hold back are
            // not worth a steal or a wake-up.
            let visible = self.deliverable(p);
            let part = self.part(p);
            part.shared.store_visible_hint(self.id, visible);
            if gained && visible > 0 {
                let shared = part.shared.clone();
                let inc = part.incarnation;
                let wake: Vec<u16> = shared.waiting_shards(self.id).collect();
                for d in wake {
                    self.send_to(d, ShardMsg::Wake { incarnation: inc });
                }
            }
        }
    }
}

/// Drops every delivery of a message but its newest, keeping the order of
/// the rest.
fn keep_newest_deliveries(got: &mut Vec<ReceivedMessage>) {
    let mut newest: std::collections::HashMap<sluice_protocol::MessageId, u64> =
        std::collections::HashMap::with_capacity(got.len());
    for m in got.iter() {
        let d = newest.entry(m.id).or_insert(m.delivery());
        *d = (*d).max(m.delivery());
    }
    if newest.len() < got.len() {
        got.retain(|m| newest.get(&m.id) == Some(&m.delivery()));
    }
}
