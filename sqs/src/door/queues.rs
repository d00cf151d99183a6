//! The queue actions: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue,
//! PurgeQueue, GetQueueAttributes, SetQueueAttributes (tags are in
//! `tags.rs`).

use serde_json::{Map, Value, json};
use sluice_protocol::{
    AttributeUpdate, QueueAttributesRequest, QueueInfo, RedrivePolicy, Reply, Request, Setting,
};

use super::errors::SqsError;
use super::fifo;
use super::names::{self, Namespace};
use super::seconds;
use super::wire::Input;
use super::{Action, Ctx, Started};

/// The attributes GetQueueAttributes answers, in `All`'s order.
const SERVED: &[&str] = &[
    "VisibilityTimeout",
    "DelaySeconds",
    "MessageRetentionPeriod",
    "MaximumMessageSize",
    "ReceiveMessageWaitTimeSeconds",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "QueueArn",
    "RedrivePolicy",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
];

/// SQS attributes the engine keeps as the queue's annotations, as given,
/// and does not act on (sluice has no IAM, and keeps nothing on disk to
/// encrypt).
const KEPT: &[&str] = &[
    "Policy",
    "RedriveAllowPolicy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
];

/// SQS's read-only attributes, which CreateQueue and SetQueueAttributes
/// refuse.
const READ_ONLY: &[&str] = &["CreatedTimestamp", "LastModifiedTimestamp"];

/// A queue action waiting for the engine.
#[derive(Debug)]
pub(crate) enum Pending {
    /// CreateQueue or GetQueueUrl: answers the URL.
    Url(String),
    /// DeleteQueue, PurgeQueue, SetQueueAttributes (the action): answers
    /// `{}`.
    Empty(Action),
    /// ListQueues.
    List {
        ns: Namespace,
        host: String,
        max: Option<usize>,
        after: Option<String>,
    },
    /// GetQueueAttributes.
    Attributes {
        ns: Namespace,
        name: String,
        wanted: Vec<&'static str>,
    },
}

fn bad_value(name: &str) -> SqsError {
    SqsError::new(
        "InvalidAttributeValue",
        format!("Invalid value for the parameter {name}."),
    )
}

/// A whole number attribute value in `min ..= max`.
fn whole(name: &str, value: &str, min: u32, max: u32) -> Result<u32, SqsError> {
    match value.trim().parse::<u32>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(bad_value(name)),
    }
}

/// The engine queue of a redrive policy's `deadLetterTargetArn`.
fn redrive(ctx: &Ctx<'_>, value: &str) -> Result<RedrivePolicy, SqsError> {
    let bad = || bad_value("RedrivePolicy");
    let v: Value = serde_json::from_str(value).map_err(|_| bad())?;
    let arn = v
        .get("deadLetterTargetArn")
        .and_then(Value::as_str)
        .ok_or_else(bad)?;
    let max = match v.get("maxReceiveCount") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|n| (1..=1000).contains(n))
    .ok_or_else(bad)?;
    let engine = ctx.queue_of_arn(arn).ok_or_else(bad)?;
    Ok(RedrivePolicy {
        dead_letter_queue: engine.as_str().to_owned(),
        max_receives: u16::try_from(max).map_err(|_| bad())?,
    })
}

/// Checks a kept attribute's value and puts it in the update's
/// annotations; an empty value removes it (SetQueueAttributes) or is left
/// out (CreateQueue).
fn keep(u: &mut AttributeUpdate, name: &str, value: &str, create: bool) -> Result<(), SqsError> {
    if value.is_empty() {
        if !create {
            u.annotations_mut().remove.push(name.to_owned());
        }
        return Ok(());
    }
    let valid = match name {
        "Policy" => serde_json::from_str::<Value>(value).is_ok_and(|v| v.is_object()),
        "RedriveAllowPolicy" => serde_json::from_str::<Value>(value).is_ok_and(|v| {
            matches!(
                v.get("redrivePermission").and_then(Value::as_str),
                Some("allowAll" | "denyAll" | "byQueue")
            )
        }),
        "KmsDataKeyReusePeriodSeconds" => whole(name, value, 60, 86_400).is_ok(),
        "SqsManagedSseEnabled" => value == "true" || value == "false",
        _ => true,
    };
    if !valid {
        return Err(bad_value(name));
    }
    u.annotations_mut()
        .set
        .push((name.to_owned(), value.to_owned()));
    Ok(())
}

/// The engine's update for SQS `attributes` of a queue that is FIFO
/// (`fifo`) or not (`create`: of CreateQueue).
fn update(
    ctx: &Ctx<'_>,
    attrs: &[(&str, &str)],
    fifo: bool,
    create: bool,
) -> Result<AttributeUpdate, SqsError> {
    let mut u = AttributeUpdate::default();
    for &(name, value) in attrs {
        match name {
            "VisibilityTimeout" => {
                u.visibility_timeout = Some(seconds::millis(whole(name, value, 0, 43_200)?));
            }
            "DelaySeconds" => u.delay = Some(seconds::millis(whole(name, value, 0, 900)?)),
            "MessageRetentionPeriod" => {
                u.retention = Some(seconds::millis(whole(name, value, 60, 1_209_600)?));
            }
            "MaximumMessageSize" => {
                u.message_bytes_max = Some(whole(name, value, 1024, 1_048_576)?);
            }
            "ReceiveMessageWaitTimeSeconds" => {
                u.receive_wait = Some(seconds::millis(whole(name, value, 0, 20)?));
            }
            "RedrivePolicy" if value.is_empty() && !create => u.redrive = Setting::Clear,
            "RedrivePolicy" => u.redrive = Setting::Set(redrive(ctx, value)?),
            n if fifo::ATTRIBUTES.contains(&n) => fifo::attribute(&mut u, n, value, fifo, create)?,
            n if KEPT.contains(&n) => keep(&mut u, n, value, create)?,
            n if READ_ONLY.contains(&n) => {
                return Err(SqsError::new(
                    "InvalidAttributeName",
                    format!("Attribute {n} is read only."),
                ));
            }
            n => {
                return Err(SqsError::new(
                    "InvalidAttributeName",
                    format!("Unknown Attribute {n}."),
                ));
            }
        }
    }
    Ok(u)
}

/// Starts the queue action `action`.
pub(crate) fn start(ctx: &Ctx<'_>, action: Action, input: &Input) -> Result<Started, SqsError> {
    let engine = |p: Pending, r: Request| Ok(Started::Engine(super::Pending::Queue(p), r));
    match action {
        Action::CreateQueue => {
            let name = input.str("QueueName")?;
            let attrs = input.str_map("Attributes")?;
            let queue = ctx.ns.engine_name(name)?;
            fifo::check_create(name, &attrs)?;
            let mut attributes = update(ctx, &attrs, names::is_fifo_name(name), true)?;
            super::tags::of_create(input, &mut attributes)?;
            let url = ctx.ns.url(&ctx.host(), name);
            engine(
                Pending::Url(url),
                Request::CreateQueue(QueueAttributesRequest { queue, attributes }),
            )
        }
        Action::GetQueueUrl => {
            let name = input.str("QueueName")?;
            let ns = match input.opt_str("QueueOwnerAWSAccountId")? {
                Some(account) => Namespace::new(
                    account,
                    &ctx.ns.region,
                    &ctx.config.account,
                    &ctx.config.region,
                ),
                None => ctx.ns.clone(),
            };
            if names::check_sqs_name(name).is_err() {
                return Err(SqsError::no_queue());
            }
            let queue = ns.engine_name(name)?;
            engine(
                Pending::Url(ns.url(&ctx.host(), name)),
                Request::GetQueue { queue },
            )
        }
        Action::ListQueues => {
            let prefix = input.opt_str("QueueNamePrefix")?.unwrap_or("");
            let max = input.opt_int_in("MaxResults", 1, 1000)?;
            let after = input.opt_str("NextToken")?.map(str::to_owned);
            let full = format!("{}{prefix}", ctx.ns.engine_prefix());
            if full.len() > sluice_protocol::limits::QUEUE_NAME_BYTES_MAX
                || !prefix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Ok(Started::Reply(json!({ "QueueUrls": [] }), 0));
            }
            engine(
                Pending::List {
                    ns: ctx.ns.clone(),
                    host: ctx.host(),
                    max: max.map(|m| m as usize),
                    after,
                },
                Request::ListQueues {
                    prefix: full,
                    after: None,
                },
            )
        }
        Action::DeleteQueue => {
            let (_, _, queue) = ctx.queue(input)?;
            engine(Pending::Empty(action), Request::DeleteQueue { queue })
        }
        Action::PurgeQueue => {
            let (_, _, queue) = ctx.queue(input)?;
            engine(Pending::Empty(action), Request::PurgeQueue { queue })
        }
        Action::SetQueueAttributes => {
            let (_, name, queue) = ctx.queue(input)?;
            let attrs = input.str_map("Attributes")?;
            if attrs.is_empty() {
                return Err(SqsError::missing("Attributes"));
            }
            let attributes = update(ctx, &attrs, names::is_fifo_name(&name), false)?;
            engine(
                Pending::Empty(action),
                Request::SetQueue(QueueAttributesRequest { queue, attributes }),
            )
        }
        Action::GetQueueAttributes => {
            let (ns, name, queue) = ctx.queue(input)?;
            let mut wanted = Vec::new();
            for n in input.str_list("AttributeNames")? {
                if n == "All" {
                    wanted.extend_from_slice(SERVED);
                    wanted.extend_from_slice(KEPT);
                    wanted.extend_from_slice(fifo::ATTRIBUTES);
                } else if let Some(s) = SERVED
                    .iter()
                    .chain(KEPT)
                    .chain(fifo::ATTRIBUTES)
                    .find(|s| **s == n)
                {
                    wanted.push(*s);
                } else {
                    return Err(SqsError::new(
                        "InvalidAttributeName",
                        format!("Unknown Attribute {n}."),
                    ));
                }
            }
            engine(
                Pending::Attributes { ns, name, wanted },
                Request::GetQueue { queue },
            )
        }
        _ => Err(SqsError::new("InternalError", "not a queue action")),
    }
}

fn attributes(info: &QueueInfo, ns: &Namespace, name: &str, wanted: &[&str]) -> Value {
    let a = &info.attributes;
    let s = &info.stats;
    let mut out = Map::new();
    for &w in wanted {
        let v = match w {
            "VisibilityTimeout" => seconds::of(a.visibility_timeout).to_string(),
            "DelaySeconds" => seconds::of(a.delay).to_string(),
            "MessageRetentionPeriod" => seconds::of(a.retention).to_string(),
            "MaximumMessageSize" => a.message_bytes_max.to_string(),
            "ReceiveMessageWaitTimeSeconds" => seconds::of(a.receive_wait).to_string(),
            "ApproximateNumberOfMessages" => s.visible.to_string(),
            "ApproximateNumberOfMessagesNotVisible" => s.in_flight.to_string(),
            "ApproximateNumberOfMessagesDelayed" => s.delayed.to_string(),
            "QueueArn" => ns.arn(name),
            "CreatedTimestamp" => match info.times.filter(|t| t.created_ms > 0) {
                Some(t) => seconds::of_unix_ms(t.created_ms).to_string(),
                None => continue,
            },
            "LastModifiedTimestamp" => match info.times.filter(|t| t.modified_ms > 0) {
                Some(t) => seconds::of_unix_ms(t.modified_ms).to_string(),
                None => continue,
            },
            "RedrivePolicy" => match &a.redrive {
                Some(r) => json!({
                    "deadLetterTargetArn": names::arn_of_engine(&r.dead_letter_queue, ns),
                    "maxReceiveCount": r.max_receives,
                })
                .to_string(),
                None => continue,
            },
            f if fifo::ATTRIBUTES.contains(&f) => match fifo::attribute_value(a, f) {
                Some(v) => v,
                None => continue,
            },
            kept => match a.annotations.get(kept) {
                Some(v) => v.to_owned(),
                None => continue,
            },
        };
        out.insert(w.to_owned(), Value::String(v));
    }
    json!({ "Attributes": out })
}

impl Pending {
    /// SQS's reply to the engine's `reply`.
    pub(crate) fn finish(self, reply: Reply) -> Result<(Value, u32), SqsError> {
        let attributes_call = matches!(self, Pending::Url(_) | Pending::Empty(_));
        match (self, reply) {
            (_, Reply::Error(e)) => Err(SqsError::from_engine(&e, attributes_call)),
            (Pending::Url(url), Reply::CreateQueue { .. } | Reply::GetQueue(_)) => {
                Ok((json!({ "QueueUrl": url }), 0))
            }
            (Pending::Empty(Action::DeleteQueue), Reply::DeleteQueue)
            | (Pending::Empty(Action::PurgeQueue), Reply::PurgeQueue { .. })
            | (Pending::Empty(Action::SetQueueAttributes), Reply::SetQueue) => Ok((json!({}), 0)),
            (
                Pending::List {
                    ns,
                    host,
                    max,
                    after,
                },
                Reply::ListQueues { queues, .. },
            ) => {
                let mut names: Vec<&str> = queues
                    .iter()
                    .filter_map(|q| ns.sqs_name(q.as_str()))
                    .collect();
                names.sort_unstable();
                if let Some(after) = &after {
                    names.retain(|n| *n > after.as_str());
                }
                let limit = max.unwrap_or(1000);
                let more = max.is_some() && names.len() > limit;
                names.truncate(limit);
                let urls: Vec<String> = names.iter().map(|n| ns.url(&host, n)).collect();
                let mut out = json!({ "QueueUrls": urls });
                if more {
                    if let Some(last) = names.last() {
                        out["NextToken"] = Value::String((*last).to_owned());
                    }
                }
                Ok((out, 0))
            }
            (Pending::Attributes { ns, name, wanted }, Reply::GetQueue(info)) => {
                Ok((attributes(&info, &ns, &name, &wanted), 0))
            }
            (_, other) => Err(SqsError::new(
                "InternalError",
                format!("unexpected engine reply {:?}", other.opcode()),
            )),
        }
    }
}
