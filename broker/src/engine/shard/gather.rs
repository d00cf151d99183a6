//! Fan-out operations over every shard: stats, purge, delete-queue (all at
//! once) and peek, redrive (one shard after another until satisfied).

use sluice_protocol::{PeekedMessage, QueueInfo, QueueStats};

use super::{NS_PER_MS, Pending, PendingKind, Removal, Shard};
use crate::engine::mesh::shard_msg::{GatherReply, GatherRequest, ShardMsg};
use crate::engine::ops::OpResult;
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::MessageState;

/// What a fan-out has gathered so far.
#[derive(Debug)]
pub(super) enum GatherAcc {
    Stats(Box<QueueInfo>),
    Purged(u64),
    Peek {
        messages: Vec<PeekedMessage>,
        max: u32,
    },
    Redrive {
        moved: u64,
        stayed: u64,
        max: u32,
        /// The destination's incarnation (0: the sources).
        to: u32,
    },
    Refresh,
}

/// A fan-out in progress.
#[derive(Debug)]
pub(super) struct PendingGather {
    pub(super) incarnation: u32,
    pub(super) acc: GatherAcc,
    pub(super) outstanding: u16,
    /// For the sequential kinds (peek, redrive): the next shard to ask.
    pub(super) next_shard: u16,
}

impl Shard {
    pub(super) fn start_gather(
        &mut self,
        ticket: u64,
        incarnation: u32,
        acc: GatherAcc,
        request: GatherRequest,
    ) {
        let local = self.gather_local(incarnation, request);
        let mut g = PendingGather {
            incarnation,
            acc,
            outstanding: 0,
            next_shard: 0,
        };
        Self::fold(&mut g.acc, local);
        let req = self.new_req(ticket, PendingKind::Gather(g));
        match request {
            GatherRequest::Stats | GatherRequest::Purge | GatherRequest::Refresh => {
                let others: Vec<u16> = self.others().collect();
                if let Some(PendingKind::Gather(g)) =
                    self.pending.get_mut(&req).map(|p| &mut p.kind)
                {
                    g.outstanding = others.len() as u16;
                }
                for d in others {
                    self.send_to(
                        d,
                        ShardMsg::Gather {
                            req,
                            incarnation,
                            request,
                        },
                    );
                }
                self.continue_gather(req);
            }
            GatherRequest::Peek { .. } | GatherRequest::Redrive { .. } => {
                self.continue_gather(req);
            }
        }
    }

    /// What a sequential gather still wants (0 when done).
    pub(super) fn remaining(acc: &GatherAcc) -> u32 {
        match acc {
            GatherAcc::Peek { messages, max } => max.saturating_sub(messages.len() as u32),
            GatherAcc::Redrive {
                moved, stayed, max, ..
            } => u64::from(*max).saturating_sub(moved + stayed) as u32,
            _ => 0,
        }
    }

    pub(super) fn continue_gather(&mut self, req: u64) {
        let Some(PendingKind::Gather(g)) = self.pending.get_mut(&req).map(|p| &mut p.kind) else {
            return;
        };
        if g.outstanding > 0 {
            return;
        }
        let want = Self::remaining(&g.acc);
        if want > 0 {
            // Sequential kinds: ask the next shard for what is still wanted.
            while g.next_shard < self.shards && g.next_shard == self.id {
                g.next_shard += 1;
            }
            if g.next_shard < self.shards {
                let dest = g.next_shard;
                g.next_shard += 1;
                g.outstanding = 1;
                let request = match g.acc {
                    GatherAcc::Peek { .. } => GatherRequest::Peek { max: want },
                    GatherAcc::Redrive { to, .. } => GatherRequest::Redrive { max: want, to },
                    // The other kinds are asked all at once, never here.
                    _ => GatherRequest::Refresh,
                };
                let incarnation = g.incarnation;
                self.send_to(
                    dest,
                    ShardMsg::Gather {
                        req,
                        incarnation,
                        request,
                    },
                );
                return;
            }
        }
        let Some(Pending {
            ticket,
            cancelled,
            kind,
        }) = self.pending.remove(&req)
        else {
            return;
        };
        let PendingKind::Gather(g) = kind else {
            return;
        };
        let result = match g.acc {
            GatherAcc::Stats(info) => OpResult::Queue(info),
            GatherAcc::Purged(n) => OpResult::Purged { messages: n },
            GatherAcc::Peek { messages, .. } => OpResult::Peeked(messages),
            GatherAcc::Redrive { moved, stayed, .. } => OpResult::Redriven { moved, stayed },
            GatherAcc::Refresh => OpResult::QueueDeleted,
        };
        if !cancelled {
            self.tickets.remove(&ticket);
            self.completions.push((ticket, result));
        }
    }

    pub(super) fn fold(acc: &mut GatherAcc, reply: GatherReply) {
        match (acc, reply) {
            (GatherAcc::Stats(info), GatherReply::Stats(s)) => info.stats.merge(&s),
            (GatherAcc::Purged(n), GatherReply::Purged(m)) => *n += m,
            (GatherAcc::Peek { messages, max }, GatherReply::Peeked(more)) => {
                let room = (*max as usize).saturating_sub(messages.len());
                messages.extend(more.into_iter().take(room));
            }
            (
                GatherAcc::Redrive { moved, stayed, .. },
                GatherReply::Redriven {
                    moved: m,
                    stayed: s,
                },
            ) => {
                *moved += m;
                *stayed += s;
            }
            _ => {}
        }
    }

    /// This shard's part of a fan-out.
    pub(super) fn gather_local(&mut self, incarnation: u32, request: GatherRequest) -> GatherReply {
        if request == GatherRequest::Refresh {
            if self.registry.epoch() != self.epoch {
                self.refresh();
            }
            return GatherReply::Refreshed;
        }
        let p = self.by_incarnation.get(&incarnation).copied();
        match request {
            GatherRequest::Stats => {
                GatherReply::Stats(p.map(|p| self.partition_stats(p)).unwrap_or_default())
            }
            GatherRequest::Purge => {
                let mut n = 0;
                if let Some(p) = p {
                    for key in self.members(p) {
                        self.remove_message(key, Removal::Purged);
                        n += 1;
                    }
                    self.maybe_compact(p);
                }
                GatherReply::Purged(n)
            }
            GatherRequest::Peek { max } => {
                GatherReply::Peeked(p.map(|p| self.peek_local(p, max)).unwrap_or_default())
            }
            GatherRequest::Redrive { max, to } => {
                let (moved, stayed) = p.map_or((0, 0), |p| self.redrive_local(p, max, to));
                GatherReply::Redriven { moved, stayed }
            }
            GatherRequest::Refresh => GatherReply::Refreshed,
        }
    }

    pub(super) fn partition_stats(&mut self, p: u32) -> QueueStats {
        let mut oldest: Option<u64> = None;
        while let Some(key) = self.part(p).age.front() {
            match self.messages.get(key) {
                Some(m) if m.partition() == p && m.in_age_fifo() => {
                    oldest = Some(m.sent_ns());
                    break;
                }
                _ => self.pop_age_front(p),
            }
        }
        let part = self.part(p);
        if let Some(&(sent, _)) = part.moved.first() {
            oldest = Some(oldest.map_or(sent, |o| o.min(sent)));
        }
        let mut s = part.stats;
        s.oldest_age_ms = oldest.map_or(0, |o| self.now_ns.saturating_sub(o) / NS_PER_MS);
        s
    }

    /// Up to `max` visible messages of `p`, in the order a receive would
    /// take them, without taking them.
    pub(super) fn peek_local(&mut self, p: u32, max: u32) -> Vec<PeekedMessage> {
        let mut keys = Vec::new();
        {
            let part = self.part(p);
            let visible = |key: SlotKey| {
                self.messages
                    .get(key)
                    .filter(|m| m.partition() == p && m.state == MessageState::Visible)
            };
            let mut ready = part
                .ready
                .iter()
                .filter(|e| visible(e.key).is_some_and(|m| m.in_ready()))
                .peekable();
            let mut fresh = part
                .age
                .iter_from(part.fresh)
                .filter_map(|key| {
                    visible(key)
                        .filter(|m| m.is_plain() && m.in_age_fifo() && !m.in_ready())
                        .map(|m| (key, m.seq.get()))
                })
                .peekable();
            while keys.len() < max as usize {
                let from_ready = match (ready.peek(), fresh.peek()) {
                    (Some(r), Some(&(_, seq))) => r.order <= seq,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                if from_ready {
                    keys.extend(ready.next().map(|e| e.key));
                } else {
                    keys.extend(fresh.next().map(|(key, _)| key));
                }
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(m) = self.messages.get(key).copied() else {
                continue;
            };
            let (receive_count, delivery) = self.counters(&m);
            let first = self.ext_of(&m).map_or(0, |e| e.first_received_delta_ms);
            let payload = self.payload(key);
            out.push(PeekedMessage {
                id: self.message_id(m.seq.get()),
                receive_count,
                delivery,
                sent_at_ms: m.sent_at_ms.get(),
                first_received_delta_ms: (delivery > 0).then_some(first),
                attributes: payload.attributes,
                body: payload.body,
            });
        }
        out
    }

    /// Moves up to `max` visible messages of partition `p` to the queue of
    /// incarnation `to`, or (0) each back to its source queue; those whose
    /// target is gone or full stay, in their order.
    pub(super) fn redrive_local(&mut self, p: u32, max: u32, to: u32) -> (u64, u64) {
        let (mut moved, mut stayed) = (0u64, 0u64);
        let mut keep = Vec::new();
        while moved + stayed < u64::from(max) {
            let Some((key, source)) = self.pop_visible(p) else {
                break;
            };
            let Some(m) = self.messages.get(key) else {
                continue;
            };
            let target_inc = if to == 0 {
                self.ext_of(m).map_or(0, |e| e.source)
            } else {
                to
            };
            let target = (target_inc != 0)
                .then(|| self.by_incarnation.get(&target_inc).copied())
                .flatten()
                .filter(|&t| t != p);
            let ok = target.is_some_and(|t| {
                let part = self.part(t);
                part.shared.try_reserve_depth(part.attrs.max_depth)
            });
            match target.filter(|_| ok) {
                Some(t) => {
                    // move_message counts the depth in again; undo the
                    // reservation that checked the limit.
                    self.part(t).shared.release_depth();
                    self.move_message(key, t, true);
                    moved += 1;
                }
                None => {
                    stayed += 1;
                    keep.push((key, source));
                }
            }
        }
        for (key, source) in keep.into_iter().rev() {
            self.push_back_front(p, key, source);
        }
        (moved, stayed)
    }
}
