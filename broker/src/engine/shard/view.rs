//! A read-only view of one stored message.

use sluice_protocol::{MessageId, QueueName};

use crate::engine::stored_message::MessageState;

/// A read-only view of one stored message, for tests and debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageView {
    /// Id.
    pub id: MessageId,
    /// Queue it is in.
    pub queue: QueueName,
    /// Where it stands.
    pub state: MessageState,
    /// End of the lease or delay (in flight or delayed).
    pub due_ns: Option<u64>,
    /// Deliveries since sent or redriven.
    pub receive_count: u32,
    /// Deliveries ever.
    pub delivery: u64,
    /// When retention drops it.
    pub retain_until_ns: u64,
    /// Its message group, in a grouped (FIFO or fair) queue.
    pub group: Option<Box<str>>,
}
