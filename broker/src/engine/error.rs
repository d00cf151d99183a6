//! The engine's errors: [`EngineError`] when a whole operation fails,
//! [`EntryError`] when one entry of a batch does.
//!
//! Both are plain values: nothing is formatted until someone displays one.
//! The wire carries only an entry's [`ErrorCode`], so a batch's per-entry
//! results cost no string at all; a whole-operation error becomes the
//! error reply's code and text through `From<EngineError> for WireError`.

use sluice_protocol::limits::BATCH_ENTRIES_MAX;
use sluice_protocol::queue_attributes::{
    DELAY_MS_MAX, RECEIVE_WAIT_MS_MAX, VISIBILITY_TIMEOUT_MS_MAX,
};
use sluice_protocol::{ErrorCode, QueueName, SendOutcome, WireError};

/// Why a whole operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// No queue of that name.
    #[error("queue {0} not found")]
    QueueNotFound(QueueName),
    /// The queue was deleted while the operation waited (a parked receive).
    #[error("queue (incarnation {0}) was deleted")]
    QueueDeleted(u32),
    /// CREATE of a queue that exists with other attributes.
    #[error("queue {0} exists with other attributes")]
    QueueExists(QueueName),
    /// CREATE beyond the registry's maximum number of queues.
    #[error("queues: at most {0} queues")]
    TooManyQueues(usize),
    /// An attribute out of its range, or a policy both set and cleared (the
    /// protocol's check, [`sluice_protocol::AttributeUpdate::apply_to`]).
    #[error("{}", .0.message)]
    Attributes(WireError),
    /// CREATE asked to clear a policy.
    #[error("redrive/backoff: only SET can clear a policy")]
    ClearOnCreate,
    /// A queue named as its own dead-letter queue.
    #[error("dead_letter_queue: {0} cannot be its own dead-letter queue")]
    OwnDeadLetterQueue(QueueName),
    /// A dead-letter queue that does not exist.
    #[error("dead_letter_queue: queue {0} does not exist")]
    DeadLetterQueueNotFound(String),
    /// A dead-letter queue whose own chain leads back to the queue.
    #[error("dead_letter_queue: {dead_letter_queue} would form a cycle with {queue}")]
    DeadLetterCycle {
        /// The queue being created or changed.
        queue: QueueName,
        /// The dead-letter queue it names.
        dead_letter_queue: String,
    },
    /// A dead-letter queue of another kind than the queue (FIFO and
    /// standard).
    #[error(
        "dead_letter_queue: {dead_letter_queue} is not of the kind of {queue}: \
         a FIFO queue's dead-letter queue is FIFO, a standard queue's standard"
    )]
    DeadLetterKind {
        /// The queue being created or changed.
        queue: QueueName,
        /// The dead-letter queue it names.
        dead_letter_queue: String,
    },
    /// SET of another kind than the queue's.
    #[error("kind: queue {0} keeps the kind it was created with (FIFO or standard)")]
    KindIsFixed(QueueName),
    /// DELETE of a queue that another names as its dead-letter queue.
    #[error("queue {user} uses {queue} as its dead-letter queue")]
    DeadLetterQueueInUse {
        /// The queue to delete.
        queue: QueueName,
        /// A queue that names it.
        user: QueueName,
    },
    /// The registry ran out of incarnation numbers (2^32 creates).
    #[error("queue incarnations exhausted")]
    IncarnationsExhausted,
    /// A batch without entries.
    #[error("entries: a batch needs at least one entry")]
    EmptyBatch,
    /// A batch above [`BATCH_ENTRIES_MAX`] entries.
    #[error("entries: {0} is more than {BATCH_ENTRIES_MAX}")]
    BatchTooLarge(usize),
    /// A RECEIVE's or PEEK's `max` outside 1 ..= [`BATCH_ENTRIES_MAX`].
    #[error("max: {0} is outside 1 ..= {BATCH_ENTRIES_MAX}")]
    MaxOutOfRange(u32),
    /// A REDRIVE of no message.
    #[error("max: must be at least 1")]
    RedriveMaxZero,
    /// A REDRIVE to the queue it moves from.
    #[error("to: a redrive moves messages to another queue than the one they are in")]
    RedriveToItself,
    /// A REDRIVE between a FIFO and a standard queue.
    #[error("to: a redrive moves messages between queues of one kind (FIFO or standard)")]
    RedriveKind,
    /// A RECEIVE's visibility timeout above [`VISIBILITY_TIMEOUT_MS_MAX`].
    #[error("visibility_timeout_ms: {0} is outside 0 ..= {VISIBILITY_TIMEOUT_MS_MAX}")]
    VisibilityTimeoutOutOfRange(u32),
    /// A RECEIVE's wait above [`RECEIVE_WAIT_MS_MAX`].
    #[error("wait_ms: {0} is outside 0 ..= {RECEIVE_WAIT_MS_MAX}")]
    WaitOutOfRange(u32),
    /// The write-ahead log could not record a change, which was therefore
    /// not made.
    #[error("the write-ahead log could not record the change, so nothing changed: {0}")]
    LogFailed(String),
}

impl EngineError {
    /// The code an error reply carries.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::QueueNotFound(_) | EngineError::QueueDeleted(_) => {
                ErrorCode::QueueNotFound
            }
            EngineError::QueueExists(_) => ErrorCode::QueueExists,
            EngineError::Attributes(e) => e.code,
            EngineError::BatchTooLarge(_) => ErrorCode::BatchTooLarge,
            EngineError::IncarnationsExhausted => ErrorCode::Internal,
            EngineError::LogFailed(_) => ErrorCode::Busy,
            EngineError::TooManyQueues(_)
            | EngineError::ClearOnCreate
            | EngineError::OwnDeadLetterQueue(_)
            | EngineError::DeadLetterQueueNotFound(_)
            | EngineError::DeadLetterCycle { .. }
            | EngineError::DeadLetterKind { .. }
            | EngineError::KindIsFixed(_)
            | EngineError::DeadLetterQueueInUse { .. }
            | EngineError::EmptyBatch
            | EngineError::MaxOutOfRange(_)
            | EngineError::RedriveMaxZero
            | EngineError::RedriveToItself
            | EngineError::RedriveKind
            | EngineError::VisibilityTimeoutOutOfRange(_)
            | EngineError::WaitOutOfRange(_) => ErrorCode::InvalidArgument,
        }
    }
}

impl From<EngineError> for WireError {
    fn from(e: EngineError) -> WireError {
        match e {
            EngineError::Attributes(e) => e,
            e => WireError::new(e.code(), e.to_string()),
        }
    }
}

/// Why one entry of a SEND, DELETE or CHANGE_VISIBILITY batch failed.
///
/// Fieldless and two bytes, like the [`ErrorCode`] the wire carries for it:
/// a batch's results hold one per entry, and the server turns the engine's
/// results into the reply's in place, without a new vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u16)]
#[non_exhaustive]
pub enum EntryError {
    /// A delivery delay above [`DELAY_MS_MAX`].
    #[error("delay_ms: outside 0 ..= {DELAY_MS_MAX}")]
    DelayOutOfRange,
    /// Body and attributes above the queue's max message size.
    #[error("message: body and attributes exceed the queue's max message size")]
    MessageTooLarge,
    /// The queue holds its max depth.
    #[error("the queue holds its max depth")]
    QueueFull,
    /// The broker's memory budget is spent.
    #[error("the broker's memory budget is spent; retry later")]
    MemoryFull,
    /// The shard has no message slot left.
    #[error("no message slot left on this shard")]
    SlotsFull,
    /// The queue was deleted while the entry was forwarded to its owner.
    #[error("queue was deleted")]
    QueueDeleted,
    /// A change of visibility above [`VISIBILITY_TIMEOUT_MS_MAX`].
    #[error("timeout_ms: outside 0 ..= {VISIBILITY_TIMEOUT_MS_MAX}")]
    VisibilityTimeoutOutOfRange,
    /// A receipt that is malformed, forged, or from another queue,
    /// incarnation or run.
    #[error("receipt is malformed, forged, or from another queue, incarnation or run")]
    InvalidReceipt,
    /// A receipt of an older delivery: the message is untouched.
    #[error("receipt names an older delivery; the message is untouched")]
    StaleReceipt,
    /// The message no longer exists.
    #[error("the message no longer exists")]
    Gone,
    /// A FIFO queue's message without a group id.
    #[error("group: a FIFO queue's messages carry a group id")]
    GroupRequired,
    /// A FIFO queue's message without a dedup key, on a queue without
    /// content-based deduplication.
    #[error(
        "dedup_key: a FIFO queue's messages carry a dedup key, unless the queue \
         deduplicates by content"
    )]
    DedupKeyRequired,
    /// A per-message delay on a FIFO queue (its delay is the queue's).
    #[error("delay_ms: a FIFO queue's messages take the queue's delay, not their own")]
    DelayOnFifo,
    /// The owner's write-ahead log cannot be written: nothing changed.
    #[error("the owning shard's write-ahead log cannot be written; nothing changed, retry later")]
    LogFailing,
}

impl EntryError {
    /// The code the entry's result carries on the wire.
    #[must_use]
    pub fn code(self) -> ErrorCode {
        match self {
            EntryError::DelayOutOfRange
            | EntryError::VisibilityTimeoutOutOfRange
            | EntryError::GroupRequired
            | EntryError::DedupKeyRequired
            | EntryError::DelayOnFifo => ErrorCode::InvalidArgument,
            EntryError::MessageTooLarge => ErrorCode::MessageTooLarge,
            EntryError::QueueFull => ErrorCode::QueueFull,
            EntryError::MemoryFull | EntryError::SlotsFull | EntryError::LogFailing => {
                ErrorCode::Busy
            }
            EntryError::QueueDeleted => ErrorCode::QueueNotFound,
            EntryError::InvalidReceipt => ErrorCode::InvalidReceipt,
            EntryError::StaleReceipt => ErrorCode::StaleReceipt,
            EntryError::Gone => ErrorCode::Gone,
        }
    }
}

// The reply's per-entry results are the engine's, mapped in place: that
// takes the same size and alignment.
const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<Result<(), EntryError>>() == size_of::<Result<(), ErrorCode>>());
    assert!(align_of::<Result<(), EntryError>>() == align_of::<Result<(), ErrorCode>>());
    type Sent<E> = Result<SendOutcome, E>;
    assert!(size_of::<Sent<EntryError>>() == size_of::<Sent<ErrorCode>>());
    assert!(align_of::<Sent<EntryError>>() == align_of::<Sent<ErrorCode>>());
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_operation_errors_keep_their_wire_text() {
        let q = QueueName::from_static("orders");
        let e = WireError::from(EngineError::QueueNotFound(q.clone()));
        assert_eq!(e.code, ErrorCode::QueueNotFound);
        assert_eq!(e.message, "queue orders not found");
        let e = WireError::from(EngineError::BatchTooLarge(2000));
        assert_eq!(e.code, ErrorCode::BatchTooLarge);
        assert_eq!(e.message, "entries: 2000 is more than 1024");
        let inner = WireError::new(ErrorCode::InvalidArgument, "delay_ms: 1 is outside 0 ..= 0");
        assert_eq!(
            WireError::from(EngineError::Attributes(inner.clone())),
            inner
        );
        assert_eq!(
            EngineError::DeadLetterQueueInUse {
                queue: q,
                user: QueueName::from_static("a")
            }
            .to_string(),
            "queue a uses orders as its dead-letter queue"
        );
    }

    #[test]
    fn entry_errors_map_to_their_codes() {
        assert_eq!(EntryError::MemoryFull.code(), ErrorCode::Busy);
        assert_eq!(EntryError::SlotsFull.code(), ErrorCode::Busy);
        assert_eq!(EntryError::Gone.code(), ErrorCode::Gone);
        assert_eq!(
            EntryError::MessageTooLarge.code(),
            ErrorCode::MessageTooLarge
        );
        assert_eq!(
            EntryError::DelayOutOfRange.code(),
            ErrorCode::InvalidArgument
        );
    }
}
