//! Queue tags: TagQueue, UntagQueue, ListQueueTags, and CreateQueue's
//! `tags`. They are the engine queue's tags (protocol version 4), so the
//! native door and the CLI see the same ones and a snapshot keeps them.

use serde_json::{Map, Value, json};
use sluice_protocol::labels::TAG_LIMITS;
use sluice_protocol::{AttributeUpdate, LabelsUpdate, QueueAttributesRequest, Reply, Request};

use super::errors::SqsError;
use super::wire::Input;
use super::{Action, Ctx, Started};

/// Tags as SQS bounds them: at most 50 in a request, keys of 1 to 128
/// characters not starting `aws:`, values of at most 256.
fn checked(pairs: &[(&str, &str)]) -> Result<Vec<(String, String)>, SqsError> {
    if pairs.len() > TAG_LIMITS.count_max {
        return Err(SqsError::invalid(format!(
            "Too many tags: {} given, a queue holds at most {}.",
            pairs.len(),
            TAG_LIMITS.count_max
        )));
    }
    pairs
        .iter()
        .map(|&(k, v)| {
            let key_chars = k.chars().count();
            if key_chars == 0 || key_chars > TAG_LIMITS.key_chars_max {
                return Err(SqsError::invalid(format!(
                    "Tag keys have 1 to {} characters; {k:?} has {key_chars}.",
                    TAG_LIMITS.key_chars_max
                )));
            }
            if k.starts_with("aws:") {
                return Err(SqsError::invalid(format!(
                    "Tag keys starting with aws: are reserved: {k:?}."
                )));
            }
            if v.chars().count() > TAG_LIMITS.value_chars_max {
                return Err(SqsError::invalid(format!(
                    "The value of tag {k:?} is longer than {} characters.",
                    TAG_LIMITS.value_chars_max
                )));
            }
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// CreateQueue's `tags`, as the tags of the engine's update.
pub(crate) fn of_create(input: &Input, update: &mut AttributeUpdate) -> Result<(), SqsError> {
    let tags = checked(&input.str_map("tags")?)?;
    if !tags.is_empty() {
        update.tags_mut().set = tags;
    }
    Ok(())
}

/// A tag action waiting for the engine.
#[derive(Debug)]
pub(crate) enum Pending {
    /// TagQueue or UntagQueue: answers `{}`.
    Changed,
    /// ListQueueTags: answers the queue's tags.
    List,
}

/// Starts TagQueue, UntagQueue or ListQueueTags.
pub(crate) fn start(ctx: &Ctx<'_>, action: Action, input: &Input) -> Result<Started, SqsError> {
    let (_, _, queue) = ctx.queue(input)?;
    let change = |tags: LabelsUpdate| {
        let mut attributes = AttributeUpdate::default();
        *attributes.tags_mut() = tags;
        Ok(Started::Engine(
            super::Pending::Tags(Pending::Changed),
            Request::SetQueue(QueueAttributesRequest {
                queue: queue.clone(),
                attributes,
            }),
        ))
    };
    match action {
        Action::TagQueue => {
            let set = checked(&input.str_map("Tags")?)?;
            if set.is_empty() {
                return Err(SqsError::missing("Tags"));
            }
            change(LabelsUpdate {
                set,
                remove: Vec::new(),
            })
        }
        Action::UntagQueue => {
            let remove: Vec<String> = input
                .str_list("TagKeys")?
                .into_iter()
                .map(str::to_owned)
                .collect();
            if remove.is_empty() {
                return Err(SqsError::missing("TagKeys"));
            }
            change(LabelsUpdate {
                set: Vec::new(),
                remove,
            })
        }
        Action::ListQueueTags => Ok(Started::Engine(
            super::Pending::Tags(Pending::List),
            Request::GetQueue { queue },
        )),
        _ => Err(SqsError::new("InternalError", "not a tag action")),
    }
}

impl Pending {
    /// SQS's reply to the engine's `reply`.
    pub(crate) fn finish(self, reply: Reply) -> Result<(Value, u32), SqsError> {
        match (self, reply) {
            (_, Reply::Error(e)) => Err(SqsError::from_engine(&e, false)),
            (Pending::Changed, Reply::SetQueue) => Ok((json!({}), 0)),
            (Pending::List, Reply::GetQueue(info)) => {
                let tags = &info.attributes.tags;
                if tags.is_empty() {
                    return Ok((json!({}), 0));
                }
                let map: Map<String, Value> = tags
                    .iter()
                    .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                    .collect();
                Ok((json!({ "Tags": map }), 0))
            }
            (_, other) => Err(SqsError::new(
                "InternalError",
                format!("unexpected engine reply {:?}", other.opcode()),
            )),
        }
    }
}
