//! FIFO queues at the door: which queues are FIFO (SQS's rule: the name ends
//! in `.fifo`, and CreateQueue says `FifoQueue=true`), their attributes, and
//! the fields their messages carry (`MessageGroupId`,
//! `MessageDeduplicationId`, `SequenceNumber`). The engine keeps the order,
//! the locks and the dedup window (PROTOCOL.md §8.16).
//!
//! A message's deduplication id is its engine dedup key, and is kept beside
//! its attributes under the reserved key `AWS.DeduplicationId` (SQS names
//! cannot begin with `AWS.`), so a receive can report it. A message
//! deduplicated by content has none kept: its id is the SHA-256 of its body,
//! in hex, as SQS reports it. Its sequence number is the low 64 bits of its
//! message id (the queue's home shard and that shard's sequence number),
//! which rise with every message the queue accepts.

use serde_json::{Map, Value};
use sha2::Digest;
use sluice_protocol::group_id::is_valid_group_id;
use sluice_protocol::{
    AttributeUpdate, MessageGroupId, MessageId, QueueAttributes, QueueKind, ReceivedMessageRef,
};

use super::errors::SqsError;
use super::wire::Input;
use crate::hex::hex;

/// The engine key of a message's deduplication id.
pub(crate) const DEDUP_KEY: &str = "AWS.DeduplicationId";

/// FIFO queues' attributes.
pub(crate) const ATTRIBUTES: &[&str] = &[
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

/// FIFO messages' system attributes.
pub(crate) const SYSTEM: &[&str] = &["MessageDeduplicationId", "MessageGroupId", "SequenceNumber"];

fn bad_value(name: &str) -> SqsError {
    SqsError::new(
        "InvalidAttributeValue",
        format!("Invalid value for the parameter {name}."),
    )
}

fn unknown(name: &str) -> SqsError {
    SqsError::new("InvalidAttributeName", format!("Unknown Attribute {name}."))
}

/// Checks that a CreateQueue's name and its `FifoQueue` attribute agree.
pub(crate) fn check_create(name: &str, attrs: &[(&str, &str)]) -> Result<(), SqsError> {
    let asked = attrs
        .iter()
        .any(|(n, v)| *n == "FifoQueue" && v.eq_ignore_ascii_case("true"));
    let named = super::names::is_fifo_name(name);
    if named && !asked {
        return Err(SqsError::invalid(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ));
    }
    if asked && !named {
        return Err(SqsError::invalid(
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or \
             underscores, must end with .fifo suffix and be 1 to 80 in length.",
        ));
    }
    Ok(())
}

/// Applies the FIFO attribute `name` = `value` to `u`, for a queue that is
/// FIFO (`fifo`) or not, on CreateQueue (`create`) or SetQueueAttributes.
/// sluice deduplicates per queue, and serves one throughput limit: the
/// other values SQS knows are refused, saying so.
pub(crate) fn attribute(
    u: &mut AttributeUpdate,
    name: &str,
    value: &str,
    fifo: bool,
    create: bool,
) -> Result<(), SqsError> {
    match name {
        "FifoQueue" if !create => Err(SqsError::new(
            "InvalidAttributeName",
            "Attribute FifoQueue can only be set when a queue is created.",
        )),
        "FifoQueue" if value.eq_ignore_ascii_case("true") => {
            u.kind = Some(QueueKind::Fifo);
            Ok(())
        }
        "FifoQueue" if value.eq_ignore_ascii_case("false") && !fifo => Ok(()),
        "FifoQueue" => Err(bad_value(name)),
        _ if !fifo => Err(unknown(name)),
        "ContentBasedDeduplication" => {
            u.content_based_dedup = Some(match value.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(bad_value(name)),
            });
            Ok(())
        }
        "DeduplicationScope" | "FifoThroughputLimit" => {
            let served = if name == "DeduplicationScope" {
                "queue"
            } else {
                "perQueue"
            };
            match value {
                v if v == served => Ok(()),
                "messageGroup" | "perMessageGroupId" => Err(SqsError::new(
                    "InvalidAttributeValue",
                    format!(
                        "Invalid value for the parameter {name}: sluice's FIFO queues \
                         deduplicate and count throughput per queue ({name} {served})."
                    ),
                )),
                _ => Err(bad_value(name)),
            }
        }
        _ => Err(unknown(name)),
    }
}

/// GetQueueAttributes' value of the FIFO attribute `name` for a queue with
/// `attrs`; `None` for a standard queue, which has none.
pub(crate) fn attribute_value(attrs: &QueueAttributes, name: &str) -> Option<String> {
    if attrs.kind != QueueKind::Fifo {
        return None;
    }
    Some(match name {
        "FifoQueue" => "true".to_owned(),
        "ContentBasedDeduplication" => attrs.content_based_dedup.to_string(),
        "DeduplicationScope" => "queue".to_owned(),
        _ => "perQueue".to_owned(),
    })
}

/// A group or deduplication id: 1 to 128 of SQS's alphanumeric and
/// punctuation characters (`!` to `~`).
fn id_field(input: &Input, param: &str) -> Result<Option<String>, SqsError> {
    let Some(v) = input.opt_str(param)? else {
        return Ok(None);
    };
    if !is_valid_group_id(v.as_bytes()) {
        return Err(SqsError::invalid(format!(
            "Value {v} for parameter {param} is invalid. Reason: {param} can only include \
             alphanumeric and punctuation characters. 1 to 128 in length."
        )));
    }
    Ok(Some(v.to_owned()))
}

/// A send entry's FIFO fields, for a queue that is FIFO (`fifo`) or not:
/// its group and its deduplication id. A FIFO queue's entry needs a group
/// and takes no delay of its own; a standard queue's takes no
/// deduplication id (its group, SQS's fair queues' key, is carried).
pub(crate) fn send_fields(
    input: &Input,
    fifo: bool,
    delay: Option<u32>,
) -> Result<(Option<MessageGroupId>, Option<String>), SqsError> {
    let group = id_field(input, "MessageGroupId")?;
    let dedup = id_field(input, "MessageDeduplicationId")?;
    if !fifo {
        if dedup.is_some() {
            return Err(SqsError::invalid(
                "The request includes parameter MessageDeduplicationId, which is not valid for \
                 this queue type (standard).",
            ));
        }
    } else {
        if group.is_none() {
            return Err(SqsError::missing("MessageGroupId"));
        }
        if let Some(d) = delay {
            return Err(SqsError::invalid(format!(
                "Value {d} for parameter DelaySeconds is invalid. Reason: The request include \
                 parameter that is not valid for this queue type."
            )));
        }
    }
    // Checked above: `!` to `~`, 1 to 128.
    let group = group.and_then(|g| MessageGroupId::new(&g).ok());
    Ok((group, dedup))
}

/// What a FIFO queue's send entry that failed with `InvalidArgument` in the
/// engine lacked (its group and delay were checked here).
pub(crate) fn dedup_required() -> SqsError {
    SqsError::invalid(
        "The queue should either have ContentBasedDeduplication enabled or \
         MessageDeduplicationId provided explicitly",
    )
}

/// A message's sequence number (see the module's documentation).
pub(crate) fn sequence_number(id: MessageId) -> String {
    // The low 64 bits, by design.
    (id.0 as u64).to_string()
}

/// Adds the FIFO system attributes among `system` to `out`, for a message
/// of a FIFO queue (one with a group).
pub(crate) fn system_attributes(
    m: &ReceivedMessageRef<'_>,
    dedup: Option<&str>,
    system: &[&str],
    out: &mut Map<String, Value>,
) {
    let Some(group) = m.group else {
        return;
    };
    for &s in system {
        let v = match s {
            "MessageGroupId" => group.to_owned(),
            "SequenceNumber" => sequence_number(m.id),
            "MessageDeduplicationId" => match dedup {
                Some(d) => d.to_owned(),
                None => hex(&sha2::Sha256::digest(m.body)),
            },
            _ => continue,
        };
        out.insert(s.to_owned(), Value::String(v));
    }
}
