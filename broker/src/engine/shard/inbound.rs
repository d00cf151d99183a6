//! Messages from other shards, one handler per [`ShardMsg`] kind.

use sluice_protocol::{ReceivedMessage, SendEntry, SendOutcome};

use super::lease::ReplyBudget;
use super::send::Depth;
use super::{PendingKind, Shard};
use crate::engine::error::EntryError;
use crate::engine::mesh::shard_msg::{ForwardEntry, GatherReply, ReceiptAction, ShardMsg};
use crate::engine::ops::OpResult;

impl Shard {
    pub(super) fn handle_msg(&mut self, from: u16, msg: ShardMsg) {
        match msg {
            ShardMsg::Forward {
                req,
                incarnation,
                action,
                entries,
            } => self.on_forward(from, req, incarnation, action, &entries),
            ShardMsg::ForwardReply { req, results } => self.on_forward_reply(req, results),
            ShardMsg::SendForward {
                req,
                incarnation,
                entries,
            } => self.on_send_forward(from, req, incarnation, &entries),
            ShardMsg::SendReply { req, results } => self.on_send_reply(req, results),
            ShardMsg::Steal {
                req,
                incarnation,
                max,
                visibility_timeout_ms,
                reply_bytes_left,
                holds_any,
                with_source,
            } => {
                let budget = ReplyBudget {
                    bytes_left: reply_bytes_left,
                    holds_any,
                    with_source,
                };
                self.on_steal(from, req, incarnation, max, visibility_timeout_ms, budget);
            }
            ShardMsg::StealReply {
                req,
                messages,
                reply_bytes_left,
            } => self.on_steal_reply(req, messages, reply_bytes_left),
            ShardMsg::Wake { incarnation } => self.on_wake(from, incarnation),
            ShardMsg::Gather {
                req,
                incarnation,
                request,
            } => {
                let reply = self.gather_local(incarnation, request);
                self.send_to(from, ShardMsg::GatherReply { req, reply });
            }
            ShardMsg::GatherReply { req, reply } => self.on_gather_reply(req, reply),
        }
    }

    /// Deletes or changes the visibility of receipts this shard owns, and
    /// answers with one result per entry.
    fn on_forward(
        &mut self,
        from: u16,
        req: u64,
        incarnation: u32,
        action: ReceiptAction,
        entries: &[ForwardEntry],
    ) {
        let p = self.by_incarnation.get(&incarnation).copied();
        let refused = action == ReceiptAction::Delete && self.log_failing.is_some();
        let results = entries
            .iter()
            .map(|e| {
                let result = if refused {
                    Err(EntryError::LogFailing)
                } else {
                    self.apply_receipt(p, &e.receipt, action, e.timeout_ms)
                };
                (e.index, result)
            })
            .collect();
        self.send_to(from, ShardMsg::ForwardReply { req, results });
    }

    /// Folds an owner's receipt results into the pending request, and
    /// finishes it when the last owner has answered.
    fn on_forward_reply(&mut self, req: u64, results: Vec<(u16, Result<(), EntryError>)>) {
        let Some(PendingKind::Receipts {
            action,
            results: acc,
            outstanding,
        }) = self.pending.get_mut(&req).map(|p| &mut p.kind)
        else {
            return;
        };
        for (i, r) in results {
            if let Some(slot) = acc.get_mut(usize::from(i)) {
                *slot = Some(r);
            }
        }
        *outstanding -= 1;
        if *outstanding == 0 {
            let action = *action;
            let acc = core::mem::take(acc);
            let mut r = self.acks_vec();
            r.extend(acc.into_iter().flatten());
            let result = match action {
                ReceiptAction::Delete => OpResult::Deleted(r),
                ReceiptAction::ChangeVisibility | ReceiptAction::Abandon => {
                    OpResult::VisibilityChanged(r)
                }
            };
            self.finish(req, result);
        }
    }

    /// Sends entries into a queue this shard owns, and answers with one
    /// result per entry.
    fn on_send_forward(
        &mut self,
        from: u16,
        req: u64,
        incarnation: u32,
        entries: &[(u16, SendEntry)],
    ) {
        let results = match self.by_incarnation.get(&incarnation).copied() {
            _ if self.log_failing.is_some() => entries
                .iter()
                .map(|(i, _)| (*i, Err(EntryError::LogFailing)))
                .collect(),
            Some(p) => entries
                .iter()
                .map(|(i, e)| (*i, self.send_entry(p, e.as_view(), Depth::Reserve, None)))
                .collect(),
            None => entries
                .iter()
                .map(|(i, _)| (*i, Err(EntryError::QueueDeleted)))
                .collect(),
        };
        self.send_to(from, ShardMsg::SendReply { req, results });
    }

    /// Folds an owner's send results into the pending request, and finishes
    /// it when the last owner has answered.
    fn on_send_reply(&mut self, req: u64, results: Vec<(u16, Result<SendOutcome, EntryError>)>) {
        let Some(PendingKind::Send {
            results: acc,
            outstanding,
        }) = self.pending.get_mut(&req).map(|p| &mut p.kind)
        else {
            return;
        };
        for (i, r) in results {
            if let Some(slot) = acc.get_mut(usize::from(i)) {
                *slot = Some(r);
            }
        }
        *outstanding -= 1;
        if *outstanding == 0 {
            let acc = core::mem::take(acc);
            let mut r = self.sent_vec();
            r.extend(acc.into_iter().flatten());
            self.finish(req, OpResult::Sent(r));
        }
    }

    /// Leases visible messages of a queue this shard owns for another
    /// shard's receive, within that receive's reply budget.
    fn on_steal(
        &mut self,
        from: u16,
        req: u64,
        incarnation: u32,
        max: u32,
        visibility_timeout_ms: Option<u32>,
        mut budget: ReplyBudget,
    ) {
        let mut messages = self.received_vec();
        if let Some(p) = self.by_incarnation.get(&incarnation).copied() {
            self.take_visible(
                p,
                max as usize,
                visibility_timeout_ms,
                &mut budget,
                &mut messages,
            );
        }
        self.send_to(
            from,
            ShardMsg::StealReply {
                req,
                messages,
                reply_bytes_left: budget.bytes_left,
            },
        );
    }

    /// Adds stolen messages to the pending receive and drives it on.
    fn on_steal_reply(
        &mut self,
        req: u64,
        mut messages: Vec<ReceivedMessage>,
        reply_bytes_left: usize,
    ) {
        let Some(r) = self.receive_mut(req) else {
            return;
        };
        r.steal_from = None;
        if !messages.is_empty() {
            r.budget.holds_any = true;
        }
        r.budget.bytes_left = reply_bytes_left;
        if r.got.is_empty() {
            let empty = core::mem::replace(&mut r.got, messages);
            self.recycle(OpResult::Received(empty));
        } else {
            r.got.append(&mut messages);
            self.recycle(OpResult::Received(messages));
        }
        self.continue_receive(req);
    }

    /// Another shard has visible messages of a queue: points one waiting
    /// receive (one not already stealing, if any) at it.
    fn on_wake(&mut self, from: u16, incarnation: u32) {
        let Some(&p) = self.by_incarnation.get(&incarnation) else {
            return;
        };
        let waiters: Vec<u64> = self.part(p).waiters.iter().copied().collect();
        let mut target = None;
        for req in &waiters {
            if let Some(r) = self.receive_mut(*req) {
                if r.steal_from.is_none() {
                    target = Some(*req);
                    break;
                }
            }
        }
        let target = target.or_else(|| waiters.first().copied());
        if let Some(req) = target {
            if let Some(r) = self.receive_mut(req) {
                if !r.candidates.contains(&from) {
                    r.candidates.push(from);
                }
            }
            self.continue_receive(req);
        }
    }

    /// Folds a shard's gather reply into the pending gather and drives it on.
    fn on_gather_reply(&mut self, req: u64, reply: GatherReply) {
        let Some(PendingKind::Gather(g)) = self.pending.get_mut(&req).map(|p| &mut p.kind) else {
            return;
        };
        Self::fold(&mut g.acc, reply);
        g.outstanding = g.outstanding.saturating_sub(1);
        self.continue_gather(req);
    }
}
