//! The error of a create that finds its queue with other attributes.

use sluice_protocol::units::{format_bytes, format_duration};
use sluice_protocol::{ErrorCode, QueueAttributes, QueueName, WireError};

use crate::engine::error::EngineError;

/// `QueueExists` naming each attribute in which the existing queue differs
/// from what the create asked for, as the units grammar writes it:
/// `queue q exists with other attributes: visibility_timeout 30s (this
/// create: 5s), delay 0 (this create: 1m)`.
pub(super) fn queue_exists(
    name: &QueueName,
    existing: &QueueAttributes,
    asked: &QueueAttributes,
) -> EngineError {
    let ms = |v: u32| format_duration(std::time::Duration::from_millis(v.into()));
    let show = |a: &QueueAttributes| -> [(&'static str, String); 9] {
        [
            ("visibility_timeout", ms(a.visibility_timeout.get())),
            ("delay", ms(a.delay.get())),
            ("retention", ms(a.retention.get())),
            ("max_message_size", format_bytes(a.message_bytes_max.into())),
            ("receive_wait", ms(a.receive_wait.get())),
            (
                "dead_letter",
                a.redrive.as_ref().map_or_else(
                    || "none".to_owned(),
                    |r| format!("{} after {} receives", r.dead_letter_queue, r.max_receives),
                ),
            ),
            (
                "max_depth",
                a.max_depth
                    .map_or_else(|| "unbounded".to_owned(), |d| d.to_string()),
            ),
            ("dedup_window", ms(a.dedup_window.get())),
            (
                "backoff",
                a.backoff.map_or_else(
                    || "off".to_owned(),
                    |b| format!("{}:{}", ms(b.base.get()), ms(b.max.get())),
                ),
            ),
        ]
    };
    let differ: Vec<String> = show(existing)
        .into_iter()
        .zip(show(asked))
        .filter(|((_, here), (_, there))| here != there)
        .map(|((what, here), (_, there))| format!("{what} {here} (this create: {there})"))
        .collect();
    // The code is QueueExists; the message carries what differs.
    EngineError::Attributes(WireError::new(
        ErrorCode::QueueExists,
        format!(
            "queue {name} exists with other attributes: {}",
            differ.join(", ")
        ),
    ))
}
