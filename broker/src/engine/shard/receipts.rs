//! Delete, change visibility and abandon by receipt: checked where they
//! arrive, applied by the owner (forwarded when the receipt names another
//! shard). An abandon is the release a closing connection asks for the
//! leases bound to it: applied only to a lease that is still current and
//! running, so it can race a forwarded delete, an expiry and a redelivery
//! on the owner and never touch a newer delivery.

use sluice_protocol::queue_attributes::VISIBILITY_TIMEOUT_MS_MAX;
use sluice_protocol::{QueueName, Receipt};

use super::{NS_PER_MS, PendingKind, Removal, Shard};
use crate::engine::error::EntryError;
use crate::engine::mesh::shard_msg::{ForwardEntry, ReceiptAction, ShardMsg};
use crate::engine::ops::{LeaseOutcome, OpResult};
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{MessageState, NONE};

impl Shard {
    pub(super) fn op_receipts(
        &mut self,
        ticket: u64,
        queue: &QueueName,
        action: ReceiptAction,
        entries: impl ExactSizeIterator<Item = (Receipt, u32)> + Clone,
    ) {
        let p = match self.partition_of(queue) {
            Ok(p) => p,
            Err(e) => return self.finish_ticket(ticket, e.into()),
        };
        if let Some(e) = Self::batch_error(entries.len()) {
            return self.finish_ticket(ticket, e.into());
        }
        let inc = self.part(p).incarnation;
        let wrap = |action, r: Vec<Result<(), EntryError>>| match action {
            ReceiptAction::Delete => OpResult::Deleted(r),
            ReceiptAction::ChangeVisibility | ReceiptAction::Abandon => {
                OpResult::VisibilityChanged(r)
            }
        };
        if entries.clone().all(|(r, _)| r.shard == self.id) {
            // The common case, every receipt names this shard: the results
            // go straight into a vector of the result pool.
            let mut results = self.acks_vec();
            results.reserve(entries.len());
            for (receipt, timeout_ms) in entries {
                results.push(self.local_receipt(p, inc, &receipt, action, timeout_ms));
            }
            // The FIFOs' stale entries, once for the batch.
            self.maybe_compact(p);
            return self.finish_ticket(ticket, wrap(action, results));
        }
        let mut results: Vec<Option<Result<(), EntryError>>> = vec![None; entries.len()];
        let mut forwards: Vec<(u16, Vec<ForwardEntry>)> = Vec::new();
        for (i, (receipt, timeout_ms)) in entries.enumerate() {
            if let Err(e) = self.check_receipt(inc, &receipt, action, timeout_ms) {
                results[i] = Some(Err(e));
                continue;
            }
            if receipt.shard != self.id {
                let e = ForwardEntry {
                    // Batches hold at most BATCH_ENTRIES_MAX (1024) entries.
                    index: i as u16,
                    receipt,
                    timeout_ms,
                };
                match forwards.iter_mut().find(|(d, _)| *d == receipt.shard) {
                    Some((_, v)) => v.push(e),
                    None => forwards.push((receipt.shard, vec![e])),
                }
                continue;
            }
            results[i] = Some(self.apply_receipt(Some(p), &receipt, action, timeout_ms));
        }
        if forwards.is_empty() {
            let mut r = self.acks_vec();
            r.extend(results.into_iter().flatten());
            return self.finish_ticket(ticket, wrap(action, r));
        }
        let outstanding = forwards.len() as u16;
        let req = self.new_req(
            ticket,
            PendingKind::Receipts {
                action,
                results,
                outstanding,
            },
        );
        for (dest, entries) in forwards {
            self.send_to(
                dest,
                ShardMsg::Forward {
                    req,
                    incarnation: inc,
                    action,
                    entries,
                },
            );
        }
    }

    /// Checks an entry where it arrived: its timeout, the receipt's MAC,
    /// queue incarnation and shard.
    fn check_receipt(
        &self,
        inc: u32,
        receipt: &Receipt,
        action: ReceiptAction,
        timeout_ms: u32,
    ) -> Result<(), EntryError> {
        if action == ReceiptAction::ChangeVisibility && timeout_ms > VISIBILITY_TIMEOUT_MS_MAX {
            return Err(EntryError::VisibilityTimeoutOutOfRange);
        }
        if !self.registry.receipt_key().verify(receipt)
            || receipt.incarnation != inc
            || receipt.shard >= self.shards
        {
            return Err(EntryError::InvalidReceipt);
        }
        Ok(())
    }

    /// Checks and applies an entry whose receipt names this shard.
    fn local_receipt(
        &mut self,
        p: u32,
        inc: u32,
        receipt: &Receipt,
        action: ReceiptAction,
        timeout_ms: u32,
    ) -> Result<(), EntryError> {
        // The receipt of the message's current delivery, as signed (every
        // field and the check equal): the MAC would pass, skip it. Any
        // other receipt (older delivery, gone, forged) takes the full check.
        let key = SlotKey {
            slot: receipt.slot,
            generation: receipt.generation,
        };
        let mut current = false;
        if let Some(m) = self.messages.get(key).copied() {
            if receipt.incarnation == inc && m.partition() == p && m.ext != NONE {
                let e = *self.exts.get(m.ext);
                if e.lease != NONE && e.delivery == receipt.delivery && receipt.delivery > 0 {
                    let l = *self.leases.get(e.lease);
                    current = l.check != 0 && l.check == receipt.check;
                    if current && action == ReceiptAction::Delete {
                        // The common delete: the message in hand, removed at
                        // once (the batch compacts the FIFOs once, at its
                        // end).
                        if m.state == MessageState::InFlight {
                            let held_ns = self.now_ns.saturating_sub(l.leased_ns);
                            if let Some(o) = self.observer.0.as_mut() {
                                o.lease_ended(LeaseOutcome::Deleted, held_ns);
                            }
                        }
                        self.remove_with(key, &m, Some((e, Some(l.group))), Removal::Deleted);
                        return Ok(());
                    }
                }
            }
        }
        if current {
            if action == ReceiptAction::ChangeVisibility && timeout_ms > VISIBILITY_TIMEOUT_MS_MAX {
                self.check_receipt(inc, receipt, action, timeout_ms)?;
            }
        } else {
            self.check_receipt(inc, receipt, action, timeout_ms)?;
        }
        self.apply_receipt(Some(p), receipt, action, timeout_ms)
    }

    /// Applies a checked receipt naming this shard to its queue's partition
    /// `p` (`None`: the queue is gone here).
    pub(super) fn apply_receipt(
        &mut self,
        p: Option<u32>,
        receipt: &Receipt,
        action: ReceiptAction,
        timeout_ms: u32,
    ) -> Result<(), EntryError> {
        let Some(p) = p else {
            return Err(EntryError::Gone);
        };
        let key = SlotKey {
            slot: receipt.slot,
            generation: receipt.generation,
        };
        let Some(m) = self.messages.get(key) else {
            return Err(EntryError::Gone);
        };
        if m.partition() != p {
            return Err(EntryError::Gone);
        }
        let (_, delivery) = self.counters(m);
        if receipt.delivery < delivery {
            return Err(EntryError::StaleReceipt);
        }
        if receipt.delivery > delivery {
            return Err(EntryError::InvalidReceipt);
        }
        let state = m.state;
        let leased_ns = self.lease_of(m).map_or(self.now_ns, |l| l.leased_ns);
        let held_ns = self.now_ns.saturating_sub(leased_ns);
        match action {
            ReceiptAction::Delete => {
                if state == MessageState::InFlight {
                    if let Some(o) = self.observer.0.as_mut() {
                        o.lease_ended(LeaseOutcome::Deleted, held_ns);
                    }
                }
                self.remove_message(key, Removal::Deleted);
            }
            ReceiptAction::Abandon => {
                // Only a running lease: one that ran out already made the
                // message available (and may have been re-leased by a
                // change of visibility, then it is running again).
                if state == MessageState::InFlight {
                    if let Some(o) = self.observer.0.as_mut() {
                        o.lease_ended(LeaseOutcome::Abandoned, held_ns);
                    }
                    self.part_mut(p).stats.released += 1;
                    self.make_available(key, self.now_ns);
                }
            }
            ReceiptAction::ChangeVisibility if timeout_ms == 0 => {
                if state == MessageState::InFlight {
                    if let Some(o) = self.observer.0.as_mut() {
                        o.lease_ended(LeaseOutcome::Released, held_ns);
                    }
                    self.part_mut(p).stats.released += 1;
                    self.make_available(key, self.now_ns);
                }
            }
            ReceiptAction::ChangeVisibility => {
                let due = self
                    .now_ns
                    .saturating_add(u64::from(timeout_ms) * NS_PER_MS);
                self.set_state(key, MessageState::InFlight, due);
                if state != MessageState::InFlight {
                    // Leased again after its lease ended: a new lease.
                    let lease = self.ensure_lease(key);
                    self.leases.get_mut(lease).leased_ns = self.now_ns;
                    if state == MessageState::Visible && self.part(p).grouping.is_some() {
                        self.group_leased_again(p, key);
                    }
                }
            }
        }
        Ok(())
    }
}
