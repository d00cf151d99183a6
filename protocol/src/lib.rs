//! The sluice wire protocol: a sans-IO frame codec and the message types of
//! every operation. No sockets, no threads, no clock.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod attributes;
pub mod error;
pub mod limits;
pub mod receipt;

pub use attributes::{AttributeUpdate, Backoff, QueueAttributes, QueueStats, RedrivePolicy};
pub use error::{ErrorCode, WireError};
pub use receipt::{MessageId, RECEIPT_BYTES, Receipt};

/// Whether `name` is a valid queue name: `[A-Za-z0-9_.-]{1,80}`.
#[must_use]
pub fn is_valid_queue_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= limits::QUEUE_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}
