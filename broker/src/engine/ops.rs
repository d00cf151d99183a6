//! The engine's command API: an [`Op`] in, an [`OpResult`] out.
//!
//! Operations and results are written in the protocol's vocabulary: queue
//! names are the cheap [`QueueName`] (a slice of the frame it came in), a
//! SEND's entries are the validated [`SendBatch`](sluice_protocol::SendBatch) the decoder cut out of the
//! frame, and delivered messages are the protocol's [`ReceivedMessage`] and
//! [`PeekedMessage`], their attributes in wire form. So the server maps a
//! request to an operation, and a result to its reply, without converting a
//! value, and the engine copies a message's body and attributes exactly
//! once: when it accepts the message, straight out of the receive buffer.
//!
//! Results are owned values that borrow nothing from the shard. Their
//! vectors come from a pool the caller refills by handing each result back
//! once used ([`crate::engine::Shard::recycle`]: the server does so after
//! writing the reply), so in steady state a request's result allocates
//! nothing.

use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, PeekedMessage, QueueAttributesRequest, QueueInfo,
    QueueName, ReceiveRequest, ReceivedMessage, SendOutcome, SendRequest,
};

use super::error::{EngineError, EntryError};

/// An operation on queues and messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create a queue; idempotent when the attributes match.
    CreateQueue(QueueAttributesRequest),
    /// Change some attributes of a queue.
    SetQueue(QueueAttributesRequest),
    /// Delete a queue and drop its messages.
    DeleteQueue {
        /// The queue.
        queue: QueueName,
    },
    /// Names of the queues that start with `prefix`, sorted: all of them
    /// ([`OpResult::Queues`]), or one page after a name
    /// ([`OpResult::QueuesPage`]).
    ListQueues {
        /// Prefix ("" for all).
        prefix: String,
        /// One page, of the names after this one ("" from the first).
        after: Option<String>,
    },
    /// Attributes and stats of a queue.
    GetQueue {
        /// The queue.
        queue: QueueName,
    },
    /// Remove every message of a queue.
    PurgeQueue {
        /// The queue.
        queue: QueueName,
    },
    /// Send 1 ..= 1024 messages.
    Send(SendRequest),
    /// Receive up to `max_messages` messages.
    Receive(ReceiveRequest),
    /// Delete 1 ..= 1024 messages by receipt.
    Delete(DeleteRequest),
    /// Change the lease of 1 ..= 1024 deliveries.
    ChangeVisibility(ChangeVisibilityRequest),
    /// Release the leases of 1 ..= 1024 deliveries whose connection closed
    /// (their leases were bound to it): each one still current and running
    /// ends at once as a release would (the queue's backoff applies, the
    /// `released` counter moves) and is reported as
    /// [`LeaseOutcome::Abandoned`]; one that ran out already is left as it
    /// is. Per-entry results as a change of visibility's
    /// ([`OpResult::VisibilityChanged`]): `Ok` for a current receipt,
    /// `StaleReceipt`, `Gone` or `InvalidReceipt` otherwise.
    Abandon(DeleteRequest),
    /// Move up to `max_messages` visible messages of a dead-letter queue back to the
    /// queues they came from.
    Redrive {
        /// The dead-letter queue.
        queue: QueueName,
        /// At most this many messages are considered (moved or stayed).
        max_messages: u32,
        /// The queue they move to; `None`: each back to its source queue.
        to: Option<QueueName>,
    },
    /// Read up to `max_messages` (1 ..= 1024) visible messages without
    /// leasing them.
    Peek {
        /// The queue.
        queue: QueueName,
        /// Maximum.
        max_messages: u16,
    },
}

/// The result of an [`Op`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The whole operation failed.
    Error(EngineError),
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
    Queues(Vec<QueueName>),
    /// LIST's page: the names, as many as one frame holds, and whether
    /// more follow.
    QueuesPage {
        /// The names, sorted.
        names: Vec<QueueName>,
        /// More names follow the last one.
        more: bool,
    },
    /// GET's answer: attributes, and counters summed over the shards.
    Queue(Box<QueueInfo>),
    /// PURGE removed this many messages.
    Purged {
        /// Messages removed.
        messages: u64,
    },
    /// Per-entry results of a send, in entry order.
    Sent(Vec<Result<SendOutcome, EntryError>>),
    /// Delivered messages (possibly none).
    Received(Vec<ReceivedMessage>),
    /// Per-entry results of a delete, in entry order.
    Deleted(Vec<Result<(), EntryError>>),
    /// Per-entry results of a change visibility, in entry order.
    VisibilityChanged(Vec<Result<(), EntryError>>),
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

impl From<EngineError> for OpResult {
    fn from(e: EngineError) -> OpResult {
        OpResult::Error(e)
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
    /// Released because the connection the lease was bound to closed
    /// ([`Op::Abandon`]).
    Abandoned,
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
