//! A message as the engine stores it.
//!
//! A message's body and attributes live in one place, copied there when the
//! message is accepted: the body followed by the attributes in their wire
//! form (`u16` key length, key, `u16` value length, value, per pair), in a
//! shared chunk (`bodies.rs`). A delivery hands out `Bytes` slices of it,
//! and the attributes go back on the wire as they came, so a receive copies
//! nothing and converts nothing.

use bytes::Bytes;
use sluice_protocol::MessageAttributes;

use super::wheel::TimerId;

/// Where a message stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageState {
    /// Receivable now.
    Visible,
    /// Waiting out a delivery delay or a retry backoff until `due_ns`.
    Delayed,
    /// Leased until `due_ns`.
    InFlight,
}

/// One stored message. Only its owner shard touches it.
#[derive(Debug)]
pub(crate) struct StoredMessage {
    /// Body followed by the attributes' wire form, in its chunk (see
    /// `bodies.rs`).
    pub data: Bytes,
    pub body_len: u32,
    /// Attribute pairs in `data` after the body.
    pub attribute_count: u8,
    /// The chunk `data` lies in.
    pub chunk: u32,
    /// Per-shard sequence number; with the run prefix and the shard it makes
    /// the message id.
    pub seq: u64,
    pub sent_at_ms: u64,
    /// Monotonic time of the original send: retention counts from it.
    pub sent_ns: u64,
    pub retain_until_ns: u64,
    /// End of the lease (in flight) or of the delay (delayed).
    pub due_ns: u64,
    pub delivery: u64,
    /// The check of the receipt of the current delivery (0 before the
    /// first): a receipt that matches this delivery field for field and
    /// carries this check is the one signed, so it needs no second MAC.
    pub check: u32,
    pub first_received_ms: u64,
    /// When the current lease began (monotonic ns), for the lease metrics.
    pub leased_ns: u64,
    pub receive_count: u32,
    /// Local index of the partition (queue) holding it.
    pub partition: u32,
    /// Incarnation of the queue it was dead-lettered from; 0 when none.
    pub source: u32,
    pub state: MessageState,
    /// Whether an entry for it sits in its partition's ready FIFO.
    pub in_ready: bool,
    /// Whether it sits in its partition's age FIFO, which also drops it at
    /// the end of its retention; otherwise it sits in the partition's
    /// `moved` index and its own timer covers retention (see
    /// `partition.rs`).
    pub in_age_fifo: bool,
    pub timer: Option<TimerId>,
}

impl StoredMessage {
    pub fn body(&self) -> Bytes {
        self.data.slice(..self.body_len as usize)
    }

    /// Bytes of the attributes' wire form.
    pub fn attributes_wire_bytes(&self) -> usize {
        self.data.len() - self.body_len as usize
    }

    /// The attributes, sharing the stored data. They were validated when the
    /// message was accepted, so the check here cannot fail; were it to, the
    /// message would go out without attributes rather than not at all.
    pub fn attributes(&self) -> MessageAttributes {
        if self.attribute_count == 0 {
            return MessageAttributes::new();
        }
        let raw = self.data.slice(self.body_len as usize..);
        MessageAttributes::from_wire(self.attribute_count, raw).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_data_splits_back() {
        let a = MessageAttributes::from_pairs([("trace", "abc"), ("", "empty key")]).unwrap();
        let (data, chunk) = crate::engine::bodies::Bodies::new().store(b"hello", a.wire_bytes());
        let m = StoredMessage {
            data,
            body_len: 5,
            attribute_count: a.count(),
            chunk,
            seq: 0,
            sent_at_ms: 0,
            sent_ns: 0,
            retain_until_ns: 0,
            due_ns: 0,
            delivery: 0,
            check: 0,
            first_received_ms: 0,
            leased_ns: 0,
            receive_count: 0,
            partition: 0,
            source: 0,
            state: MessageState::Visible,
            in_ready: false,
            in_age_fifo: false,
            timer: None,
        };
        assert_eq!(&m.body()[..], b"hello");
        assert_eq!(m.attributes(), a);
        assert_eq!(m.attributes_wire_bytes(), a.wire_bytes().len());
    }
}
