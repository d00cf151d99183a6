//! The simulated world's queues: their names and fixed attributes, the
//! codes a send to them may fail with. A leaf, read by the world and by the
//! oracle alike.

use sluice_protocol::{ErrorCode, QueueName};

/// The queues. `work` dead-letters into `dlq`; `side` has no redrive
/// policy, so it can be deleted and created again with leases out.
pub(super) const WORK: &str = "work";
pub(super) const DLQ: &str = "dlq";
pub(super) const SIDE: &str = "side";
pub(super) const QUEUES: [&str; 3] = [WORK, DLQ, SIDE];
pub(super) const MAX_RECEIVES: u32 = 2;
pub(super) const RETENTION_MS_MIN: u64 = 60_000;

/// Codes a send entry may fail with in this world.
pub(super) fn send_error_expected(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::Busy | ErrorCode::QueueFull | ErrorCode::MessageTooLarge
    )
}

/// A queue name of this world (all valid).
pub(super) fn qn(name: &str) -> QueueName {
    QueueName::new(name).unwrap_or_else(|_| unreachable!("the simulation's names are valid"))
}
