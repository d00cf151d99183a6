//! The engine's operations and their results (DESIGN §2 "Operations"). The
//! server maps wire requests onto [`Op`] and [`OpResult`] onto replies; the
//! engine never sees the wire types.

use bytes::Bytes;
use sluice_protocol::{
    AttributeUpdate, MessageId, QueueAttributes, QueueStats, Receipt, WireError,
};

use super::message::MessageAttributes;

/// One message of a send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendEntry {
    /// The body. The engine copies it once into its own storage on accept,
    /// so this may be a slice of a receive buffer.
    pub body: Bytes,
    /// Delivery delay; `None` takes the queue's default.
    pub delay_ms: Option<u32>,
    /// String attributes.
    pub attributes: MessageAttributes,
    /// Dedup key (1 ..= 128 bytes): a second send with the same key within
    /// the queue's window enqueues nothing.
    pub dedup_key: Option<Bytes>,
}

/// A send entry that was accepted (or recognised as a duplicate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendOk {
    /// The message's id: the first message's id for a duplicate.
    pub id: MessageId,
    /// Whether the entry was a duplicate and enqueued nothing.
    pub duplicate: bool,
}

/// One entry of a change visibility batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VisibilityChange {
    /// The delivery whose lease changes.
    pub receipt: Receipt,
    /// The lease ends this long from now; 0 releases the message.
    pub timeout_ms: u32,
}

/// A delivered message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// Id, stable across dead-lettering and redrive.
    pub id: MessageId,
    /// Names this delivery; delete and change visibility take it.
    pub receipt: Receipt,
    /// The body (a slice of the stored message: no copy).
    pub body: Bytes,
    /// The attributes.
    pub attributes: MessageAttributes,
    /// Deliveries since sent or last redriven, this one included.
    pub receive_count: u32,
    /// Deliveries ever, this one included: a fencing token.
    pub delivery: u64,
    /// Unix ms of the original send.
    pub sent_at_ms: u64,
    /// Unix ms of the first delivery.
    pub first_received_at_ms: u64,
}

/// A message read by peek: no lease, no receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeekedMessage {
    /// Id.
    pub id: MessageId,
    /// The body.
    pub body: Bytes,
    /// The attributes.
    pub attributes: MessageAttributes,
    /// Deliveries since sent or last redriven.
    pub receive_count: u32,
    /// Deliveries ever.
    pub delivery: u64,
    /// Unix ms of the original send.
    pub sent_at_ms: u64,
    /// Unix ms of the first delivery; `None` if never delivered.
    pub first_received_at_ms: Option<u64>,
}

/// A queue's description: GET's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// Name.
    pub name: String,
    /// Incarnation (receipts carry it).
    pub incarnation: u32,
    /// Attributes.
    pub attributes: QueueAttributes,
    /// Counters summed over the shards, and the oldest message's age.
    pub stats: QueueStats,
}

/// An operation of DESIGN §2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create a queue; idempotent when the attributes match.
    CreateQueue {
        /// Name, `[A-Za-z0-9_.-]{1,80}`.
        name: String,
        /// Attributes given (others take their defaults).
        attributes: AttributeUpdate,
    },
    /// Change some attributes of a queue.
    SetQueueAttributes {
        /// Queue.
        name: String,
        /// What to change.
        update: AttributeUpdate,
    },
    /// Delete a queue and drop its messages.
    DeleteQueue {
        /// Queue.
        name: String,
    },
    /// Names of the queues that start with `prefix`, sorted.
    ListQueues {
        /// Prefix ("" for all).
        prefix: String,
    },
    /// Attributes and stats of a queue.
    GetQueue {
        /// Queue.
        name: String,
    },
    /// Remove every message of a queue.
    PurgeQueue {
        /// Queue.
        name: String,
    },
    /// Send 1 ..= 1024 messages.
    Send {
        /// Queue.
        queue: String,
        /// Messages.
        entries: Vec<SendEntry>,
    },
    /// Receive up to `max` messages.
    Receive {
        /// Queue.
        queue: String,
        /// 1 ..= 1024.
        max: u32,
        /// Lease length; `None` takes the queue's visibility timeout.
        visibility_timeout_ms: Option<u32>,
        /// Long-poll wait; `None` takes the queue's default receive wait.
        wait_ms: Option<u32>,
    },
    /// Delete 1 ..= 1024 messages by receipt.
    Delete {
        /// Queue.
        queue: String,
        /// Receipts.
        receipts: Vec<Receipt>,
    },
    /// Change the lease of 1 ..= 1024 deliveries.
    ChangeVisibility {
        /// Queue.
        queue: String,
        /// Changes.
        entries: Vec<VisibilityChange>,
    },
    /// Move up to `max` visible messages of a dead-letter queue back to the
    /// queues they came from.
    Redrive {
        /// The dead-letter queue.
        queue: String,
        /// At most this many messages are considered (moved or stayed).
        max: u32,
    },
    /// Read up to `max` (1 ..= 1024) visible messages without leasing them.
    Peek {
        /// Queue.
        queue: String,
        /// Maximum.
        max: u32,
    },
}

/// The result of an [`Op`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The whole operation failed.
    Error(WireError),
    /// CREATE succeeded; `created` is false when the queue existed already
    /// with the same attributes.
    QueueCreated {
        /// The queue's incarnation.
        incarnation: u32,
        /// Whether this call created it.
        created: bool,
    },
    /// SET succeeded.
    QueueUpdated,
    /// DELETE QUEUE succeeded: every shard has dropped its messages.
    QueueDeleted,
    /// LIST's names.
    Queues(Vec<String>),
    /// GET's answer.
    Queue(QueueInfo),
    /// PURGE removed this many messages.
    Purged {
        /// Messages removed.
        messages: u64,
    },
    /// Per-entry results of a send, in entry order.
    Sent(Vec<Result<SendOk, WireError>>),
    /// Delivered messages (possibly none).
    Received(Vec<ReceivedMessage>),
    /// Per-entry results of a delete, in entry order.
    Deleted(Vec<Result<(), WireError>>),
    /// Per-entry results of a change visibility, in entry order.
    VisibilityChanged(Vec<Result<(), WireError>>),
    /// Redrive's counts.
    Redriven {
        /// Messages moved back to their source queue.
        moved: u64,
        /// Messages considered that stayed (source gone or full).
        stayed: u64,
    },
    /// Peeked messages.
    Peeked(Vec<PeekedMessage>),
}

impl OpResult {
    /// A whole-operation error.
    pub fn error(code: sluice_protocol::ErrorCode, message: impl Into<String>) -> OpResult {
        OpResult::Error(WireError::new(code, message))
    }
}

/// How a lease ended, as reported to a [`LeaseObserver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseOutcome {
    /// Deleted while leased.
    Deleted,
    /// Released (visibility set to 0) while leased.
    Released,
    /// The visibility timeout passed: the message is delivered again.
    Expired,
}

/// Told by the owner shard how its leases end, for metrics. Called on the
/// shard's thread, inside the engine's calls: it must be cheap and must not
/// block.
pub trait LeaseObserver: Send {
    /// A lease ended after `held_ns` (from the delivery, or the re-lease by a
    /// change of visibility after expiry, to the end; for an expired lease,
    /// to its deadline).
    fn lease_ended(&mut self, outcome: LeaseOutcome, held_ns: u64);

    /// An expired lease was noticed `lateness_ns` after its deadline: the
    /// time from the lease's end to the message being receivable again
    /// (before any retry backoff, which is deliberate).
    fn redelivery_lateness(&mut self, lateness_ns: u64);
}
