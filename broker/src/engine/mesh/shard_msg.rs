//! Messages between shards, carried by the SPSC rings of the mesh.
//!
//! Every request names the requester's correlation id (`req`); the owner
//! answers with the matching reply kind to the shard it came from. Requests
//! name queues by incarnation, never by partition index (indices are local to
//! a shard).

use sluice_protocol::{
    PeekedMessage, QueueStats, Receipt, ReceivedMessage, SendEntry, SendOutcome,
};

use crate::engine::error::EntryError;

/// What a forwarded receipt asks of its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiptAction {
    /// Delete the message.
    Delete,
    /// Change the lease (per-entry timeout).
    ChangeVisibility,
    /// Release the lease if it is still current and running: the
    /// connection it was bound to closed.
    Abandon,
}

/// One forwarded receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardEntry {
    /// Position in the client's batch.
    pub index: u16,
    /// The receipt (its check already verified by the requester).
    pub receipt: Receipt,
    /// New lease length for a change visibility (ignored for a delete and
    /// an abandon).
    pub timeout_ms: u32,
}

/// A fan-out request about one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatherRequest {
    /// The partition's counters.
    Stats,
    /// Remove every message of the partition.
    Purge,
    /// Up to `max` visible messages, not leased.
    Peek {
        /// Maximum.
        max: u32,
    },
    /// Consider up to `max` visible messages for redrive.
    Redrive {
        /// Maximum.
        max: u32,
        /// The incarnation of the queue they move to; 0: each back to the
        /// queue it was dead-lettered from.
        to: u32,
    },
    /// Catch up with the registry (a queue was deleted) and acknowledge.
    Refresh,
}

/// A fan-out reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GatherReply {
    /// Partition counters.
    Stats(QueueStats),
    /// Messages purged.
    Purged(u64),
    /// Peeked messages.
    Peeked(Vec<PeekedMessage>),
    /// Redrive counts.
    Redriven {
        /// Moved back.
        moved: u64,
        /// Stayed.
        stayed: u64,
    },
    /// Refreshed.
    Refreshed,
}

/// A message on a shard-to-shard ring.
#[derive(Debug)]
pub enum ShardMsg {
    /// Delete / change visibility for receipts this owner holds.
    Forward {
        /// Requester's correlation id.
        req: u64,
        /// Queue incarnation.
        incarnation: u32,
        /// What to do.
        action: ReceiptAction,
        /// The receipts.
        entries: Vec<ForwardEntry>,
    },
    /// Per-entry results of a [`ShardMsg::Forward`].
    ForwardReply {
        /// Correlation id.
        req: u64,
        /// `(index, result)` per entry.
        results: Vec<(u16, Result<(), EntryError>)>,
    },
    /// Send entries whose dedup key this shard owns.
    SendForward {
        /// Correlation id.
        req: u64,
        /// Queue incarnation.
        incarnation: u32,
        /// `(index, entry)`, in batch order; the entries share the bytes of
        /// the frame they arrived in.
        entries: Vec<(u16, SendEntry)>,
    },
    /// Per-entry results of a [`ShardMsg::SendForward`].
    SendReply {
        /// Correlation id.
        req: u64,
        /// `(index, result)` per entry.
        results: Vec<(u16, Result<SendOutcome, EntryError>)>,
    },
    /// Lease up to `max` visible messages for the requester's receive.
    Steal {
        /// Correlation id.
        req: u64,
        /// Queue incarnation.
        incarnation: u32,
        /// At most this many.
        max: u32,
        /// Lease length; `None` takes the queue's.
        visibility_timeout_ms: Option<u32>,
        /// Reply bytes left in the receive's frame.
        reply_bytes_left: usize,
        /// Whether the receive already holds a message (if not, the first
        /// one always fits).
        holds_any: bool,
        /// Whether the receive names dead-lettered messages' sources.
        with_source: bool,
    },
    /// The messages leased for a [`ShardMsg::Steal`] (receipts name the
    /// owner).
    StealReply {
        /// Correlation id.
        req: u64,
        /// Leased messages.
        messages: Vec<ReceivedMessage>,
        /// Reply bytes left after them.
        reply_bytes_left: usize,
    },
    /// Messages became visible in the sender's partition of this queue and
    /// the receiver has waiters.
    Wake {
        /// Queue incarnation.
        incarnation: u32,
    },
    /// A fan-out request.
    Gather {
        /// Correlation id.
        req: u64,
        /// Queue incarnation (0 for [`GatherRequest::Refresh`]).
        incarnation: u32,
        /// What.
        request: GatherRequest,
    },
    /// A fan-out reply.
    GatherReply {
        /// Correlation id.
        req: u64,
        /// What.
        reply: GatherReply,
    },
}
