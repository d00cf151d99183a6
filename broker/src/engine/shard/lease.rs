//! Leasing: what one receive's leases from one partition share (their
//! deadline, their lease group, the memory their entries cost), the reply
//! budget they fit in, and leasing one message: its receipt, its lease and
//! counters, written once, or its move to the dead-letter queue.

use sluice_protocol::message::SOURCE_ATTRIBUTE;
use sluice_protocol::message::first_received_delta_ms as first_received_delta_ms_of;
use sluice_protocol::{
    MessageAttributes, MessageGroupId, QueueName, Receipt, ReceivedMessage,
    received_message_encoded_len,
};

use super::{EXT_BYTES, LEASE_BYTES, NS_PER_MS, Shard};
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{Ext, Lease, MessageState, NONE, StoredMessage};

/// Reply-frame room left for a receive, and what its messages carry.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReplyBudget {
    pub(super) bytes_left: usize,
    pub(super) holds_any: bool,
    /// A dead-lettered message carries its source queue's name
    /// ([`SOURCE_ATTRIBUTE`]).
    pub(super) with_source: bool,
}

/// `attributes` and [`SOURCE_ATTRIBUTE`] naming `source`; unchanged when
/// they have that key already or no room left for it.
fn with_source_attribute(attributes: MessageAttributes, source: &QueueName) -> MessageAttributes {
    if attributes.get(SOURCE_ATTRIBUTE).is_some() {
        return attributes;
    }
    let pairs = attributes
        .iter()
        .chain(core::iter::once((SOURCE_ATTRIBUTE, source.as_str())));
    MessageAttributes::from_pairs(pairs).unwrap_or(attributes)
}

impl ReplyBudget {
    /// Takes room for a message of `cost` bytes; the first one always fits.
    pub(super) fn take(&mut self, cost: usize) -> bool {
        if self.holds_any && cost > self.bytes_left {
            return false;
        }
        self.bytes_left = self.bytes_left.saturating_sub(cost);
        self.holds_any = true;
        true
    }
}

/// What the messages leased by one receive from one partition share, and
/// what they add up to.
#[derive(Debug)]
pub(super) struct LeaseBatch {
    /// Their partition.
    pub(super) p: u32,
    /// The end of their leases.
    pub(super) due: u64,
    /// The dead-letter queue's partition and the redrive's max receives.
    pub(super) dlq: Option<(u32, u32)>,
    pub(super) inc: u32,
    /// Their lease group, once one is open.
    pub(super) group: u32,
    pub(super) leased: u64,
    /// Memory their new side entries cost.
    pub(super) charge: u64,
}

/// What became of a message [`Shard::lease_one`] was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Took {
    Leased,
    DeadLettered,
    /// It did not fit the reply: left in place.
    NoRoom,
}

/// Where the next visible message of a partition comes from.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source {
    /// The ready FIFO's front.
    Ready,
    /// The age FIFO at the fresh cursor.
    Fresh,
}

/// Where a message a receive leases comes from.
#[derive(Clone, Debug)]
pub(super) enum Take {
    /// The front of one of its partition's FIFOs.
    Fifo(Source),
    /// Its group, which handed it out (a FIFO queue's message, with its
    /// group's id).
    Group(Option<MessageGroupId>),
}

impl Shard {
    /// What the messages leased by one receive from `p` share.
    pub(super) fn lease_batch(&self, p: u32, visibility_timeout_ms: Option<u32>) -> LeaseBatch {
        let part = self.part(p);
        let dlq = part.attrs.redrive.as_ref().and_then(|r| {
            self.names
                .get(r.dead_letter_queue.as_str())
                .map(|&d| (d, u32::from(r.max_receives)))
        });
        let vis_ms = visibility_timeout_ms.unwrap_or(part.attrs.visibility_timeout.get());
        LeaseBatch {
            p,
            due: self.now_ns.saturating_add(u64::from(vis_ms) * NS_PER_MS),
            dlq,
            inc: part.incarnation,
            group: NONE,
            leased: 0,
            charge: 0,
        }
    }

    /// Arms the lease group of what `batch` leased from `p`, and counts it.
    pub(super) fn close_lease_batch(&mut self, p: u32, batch: &LeaseBatch) {
        if batch.group != NONE {
            self.arm_group(batch.group, batch.due);
        }
        if batch.leased > 0 {
            self.memory.charge(self.registry.memory(), batch.charge);
            let stats = &mut self.part_mut(p).stats;
            stats.visible -= batch.leased;
            stats.in_flight += batch.leased;
            stats.received += batch.leased;
            self.mark_touched(p, false);
        }
    }

    /// Leases the visible message `m` at `key` of the batch's partition into
    /// `out`, or moves it to the dead-letter queue when its next delivery
    /// would exceed the redrive policy. A message that does not fit the
    /// reply is left where it is.
    // Inlined into each receive loop, as the loop's body was before it was
    // shared with the grouped path: the call and its arguments through
    // memory cost about 60 instructions a message (callgrind).
    #[inline(always)]
    pub(super) fn lease_one(
        &mut self,
        key: SlotKey,
        m: &StoredMessage,
        take: Take,
        batch: &mut LeaseBatch,
        budget: &mut ReplyBudget,
        out: &mut Vec<ReceivedMessage>,
    ) -> Took {
        let p = batch.p;
        let (receive_count, delivery) = self.counters(m);
        let (source, group) = match take {
            Take::Fifo(source) => (Some(source), None),
            Take::Group(group) => (None, group),
        };
        if let Some((d, max_receives)) = batch.dlq {
            if receive_count >= max_receives && d != p {
                if let Some(source) = source {
                    self.take_next(p, key, source);
                }
                self.move_message(key, d, false);
                return Took::DeadLettered;
            }
        }
        // Body and attributes go on the wire as they are stored, with
        // the source's name when asked for.
        let source_name = if budget.with_source {
            self.source_name(m)
        } else {
            None
        };
        let extra = source_name
            .as_ref()
            .map_or(0, |n| 4 + SOURCE_ATTRIBUTE.len() + n.len())
            + group.as_ref().map_or(0, |g| 1 + g.as_bytes().len());
        let data_len = self.data_len(m);
        let cost = received_message_encoded_len(m.attrs_len() + extra, data_len - m.attrs_len());
        if !budget.take(cost) {
            return Took::NoRoom;
        }
        if let Some(source) = source {
            self.take_next(p, key, source);
        }
        let delivery = delivery + 1;
        let receive_count = receive_count.saturating_add(1);
        let sent_at_ms = m.sent_at_ms.get();
        let receipt = self.registry.receipt_key().sign(Receipt {
            incarnation: batch.inc,
            shard: self.id,
            slot: key.slot,
            generation: key.generation,
            delivery,
            check: 0,
        });
        // The lease and the counters, each written once. A visible
        // message has no lease entry.
        let lease = Lease {
            due_ns: batch.due,
            leased_ns: self.now_ns,
            check: receipt.check,
            group: NONE,
        };
        let (lease, first_received_delta_ms, cost) =
            self.write_lease(key, m, lease, delivery, receive_count);
        batch.charge += cost;
        if self.wal.is_some() {
            self.logged_lease(key, delivery, receive_count, first_received_delta_ms);
        }
        if m.in_age_fifo() {
            if batch.group == NONE {
                batch.group = self.groups.open();
            }
            self.join_group(batch.group, key, lease);
        } else {
            // Its own timer covers its retention too.
            self.arm_timer(key);
        }
        let mut payload = self.payload_of(m);
        if let Some(name) = source_name {
            payload.attributes = with_source_attribute(payload.attributes, &name);
        }
        out.push(ReceivedMessage {
            id: self.message_id(m.seq.get()),
            receipt,
            receive_count,
            sent_at_ms,
            first_received_delta_ms,
            attributes: payload.attributes,
            body: payload.body,
            group,
        });
        batch.leased += 1;
        Took::Leased
    }

    /// Writes a leased message's lease entry and counters (each once) and
    /// marks it in flight. Returns the lease's index, the message's
    /// first-received delta and the bytes the new entries cost.
    #[inline(always)]
    fn write_lease(
        &mut self,
        key: SlotKey,
        m: &StoredMessage,
        lease: Lease,
        delivery: u64,
        receive_count: u32,
    ) -> (u32, u32, u64) {
        let wall = self.wall_ms;
        let sent_at_ms = m.sent_at_ms.get();
        let mut charge = 0u64;
        let lease = self
            .leases
            .insert(lease)
            .expect("a lease entry per message at most");
        charge += LEASE_BYTES;
        let first_received_delta_ms;
        let ext = if m.ext == NONE {
            first_received_delta_ms = first_received_delta_ms_of(sent_at_ms, wall);
            charge += EXT_BYTES;
            self.exts
                .insert(Ext {
                    delivery,
                    receive_count,
                    first_received_delta_ms,
                    lease,
                    ..Ext::default()
                })
                .expect("an ext entry per message at most")
        } else {
            let e = self.exts.get_mut(m.ext);
            debug_assert_eq!(e.lease, NONE, "a visible message has no lease");
            e.delivery = delivery;
            e.receive_count = receive_count;
            if delivery == 1 {
                e.first_received_delta_ms = first_received_delta_ms_of(sent_at_ms, wall);
            }
            first_received_delta_ms = e.first_received_delta_ms;
            e.lease = lease;
            m.ext
        };
        if let Some(m) = self.messages.get_mut(key) {
            m.state = MessageState::InFlight;
            m.ext = ext;
        }
        (lease, first_received_delta_ms, charge)
    }
}
