//! A message's record and its side-table entries: reading what a message
//! holds (its data, counters, lease), and creating and freeing its [`Ext`]
//! and [`Lease`] entries with the memory they are charged.

use bytes::Bytes;
use sluice_protocol::{MessageAttributes, QueueName};

use super::{EXT_BYTES, LEASE_BYTES, Shard};
use crate::engine::slab::SlotKey;
use crate::engine::stored_message::{self, Ext, Lease, NONE, StoredMessage};

/// A message's body and attributes, sharing its chunk.
pub(super) struct Payload {
    pub(super) body: Bytes,
    pub(super) attributes: MessageAttributes,
}

impl Shard {
    /// Bytes of a message's data (body and attributes).
    pub(super) fn data_len(&self, m: &StoredMessage) -> usize {
        if m.solo() {
            self.bodies.solo_len(m.chunk)
        } else {
            usize::from(m.len)
        }
    }

    /// Bytes of the memory budget a message holds: its data, its record and
    /// FIFO entry, and its side-table entries (for the invariants checker).
    #[cfg(any(test, feature = "test-util"))]
    pub(super) fn message_cost(&self, m: &StoredMessage) -> u64 {
        let mut cost = self.data_len(m) as u64 + super::MESSAGE_BYTES;
        if self.part(m.partition()).grouping.is_some() {
            cost += super::GROUP_MEMBER_BYTES;
        }
        if m.ext != NONE {
            cost += EXT_BYTES;
            if self.exts.get(m.ext).lease != NONE {
                cost += LEASE_BYTES;
            }
        }
        cost
    }

    /// The message's side entry, if it has one.
    pub(super) fn ext_of(&self, m: &StoredMessage) -> Option<&Ext> {
        (m.ext != NONE).then(|| self.exts.get(m.ext))
    }

    /// The name of the queue `m` was dead-lettered from, while that queue
    /// lives.
    pub(super) fn source_name(&self, m: &StoredMessage) -> Option<QueueName> {
        let inc = self.ext_of(m)?.source;
        if inc == 0 {
            return None;
        }
        let p = *self.by_incarnation.get(&inc)?;
        Some(self.part(p).name.clone())
    }

    /// The message's lease entry, if it has one.
    pub(super) fn lease_of(&self, m: &StoredMessage) -> Option<&Lease> {
        let ext = self.ext_of(m)?;
        (ext.lease != NONE).then(|| self.leases.get(ext.lease))
    }

    /// `(receive count, delivery number)`.
    pub(super) fn counters(&self, m: &StoredMessage) -> (u32, u64) {
        self.ext_of(m)
            .map_or((0, 0), |e| (e.receive_count, e.delivery))
    }

    /// End of the lease or delay (0 when visible).
    pub(super) fn due_ns(&self, m: &StoredMessage) -> u64 {
        self.lease_of(m).map_or(0, |l| l.due_ns)
    }

    /// The body and attributes of the message at `key`.
    pub(super) fn payload(&mut self, key: SlotKey) -> Payload {
        let Some(m) = self.messages.get(key).copied() else {
            return Payload {
                body: Bytes::new(),
                attributes: MessageAttributes::new(),
            };
        };
        self.payload_of(&m)
    }

    /// The body and attributes of the message `m`.
    pub(super) fn payload_of(&mut self, m: &StoredMessage) -> Payload {
        let data_len = self.data_len(m);
        let attrs_len = m.attrs_len();
        let body_len = data_len - attrs_len;
        let offset = u32::from(m.offset);
        let body = self.bodies.data(m.chunk, offset, body_len);
        let attributes = if attrs_len == 0 {
            MessageAttributes::new()
        } else {
            // Within the chunk: offset + data_len fits (limits.rs).
            let raw = self
                .bodies
                .data(m.chunk, offset + body_len as u32, attrs_len);
            stored_message::attributes(raw)
        };
        Payload { body, attributes }
    }

    /// The message's [`Ext`] entry, created (and charged) if it has none.
    /// Returns its index.
    pub(super) fn ensure_ext(&mut self, key: SlotKey) -> u32 {
        let Some(m) = self.messages.get(key) else {
            return NONE;
        };
        if m.ext != NONE {
            return m.ext;
        }
        // At most one entry per message, and the slab holds fewer than
        // u32::MAX messages (slab.rs): the table has room.
        let ext = self
            .exts
            .insert(Ext::default())
            .expect("an ext entry per message at most");
        if let Some(m) = self.messages.get_mut(key) {
            m.ext = ext;
        }
        self.memory.charge(self.registry.memory(), EXT_BYTES);
        ext
    }

    /// The message's [`Lease`] entry (its ext created if need be), created
    /// (and charged) if it has none. Returns its index.
    pub(super) fn ensure_lease(&mut self, key: SlotKey) -> u32 {
        let ext = self.ensure_ext(key);
        if ext == NONE {
            return NONE;
        }
        let lease = self.exts.get(ext).lease;
        if lease != NONE {
            return lease;
        }
        // As for the ext entries: one per message at most.
        let lease = self
            .leases
            .insert(Lease::default())
            .expect("a lease entry per message at most");
        self.exts.get_mut(ext).lease = lease;
        self.memory.charge(self.registry.memory(), LEASE_BYTES);
        lease
    }

    /// Frees the message's lease entry, if any (the lease or delay ended).
    pub(super) fn drop_lease(&mut self, m: &StoredMessage) {
        if m.ext == NONE {
            return;
        }
        let lease = self.exts.get(m.ext).lease;
        if lease != NONE {
            self.leave_group(lease);
            self.exts.get_mut(m.ext).lease = NONE;
            self.leases.remove(lease);
            self.memory.release(self.registry.memory(), LEASE_BYTES);
        }
    }
}
