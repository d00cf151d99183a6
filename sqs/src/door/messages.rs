//! The message actions: SendMessage(Batch), ReceiveMessage,
//! DeleteMessage(Batch), ChangeMessageVisibility(Batch). How a message's
//! SQS attributes are stored is `message_attributes.rs`'s.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, ErrorCode, MessageAttributes, Receipt, ReceiveRequest,
    ReceivedMessageRef, Reply, Request, SendEntry, SendOutcome, SendRequest, VisibilityChange,
};

use super::body::{Batch, Body, IdEntry, Received, ReceivedEntry, SentEntry, Text};
use super::errors::SqsError;
use super::fifo;
use super::md5::{md5_attributes, md5_hex};
use super::message_attributes::{
    MD5_KEPT_BYTES_MAX, MD5_KEY, TRACE_KEY, allowed_text, attribute, check_attribute_name,
    engine_value, split,
};
use super::names::{self, Namespace};
use super::seconds;
use super::wire::Input;
use super::{Action, Ctx, Limits, Started, uuid_text};
use crate::hex::HexText;

/// SQS's largest message, and a batch's largest total.
const MESSAGE_BYTES_MAX: usize = 1_048_576;

/// SQS's most message attributes on a message.
const ATTRIBUTES_MAX: usize = 10;

/// The system attributes ReceiveMessage can return.
const SYSTEM: &[&str] = &[
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SentTimestamp",
    "SenderId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
];

/// A message action waiting for the engine.
#[derive(Debug)]
pub(crate) enum Pending {
    /// SendMessage or SendMessageBatch.
    Send {
        batch: bool,
        /// To a FIFO queue: the replies carry sequence numbers.
        fifo: bool,
        sent: Vec<Sent>,
        failed: Vec<Value>,
    },
    /// ReceiveMessage.
    Receive {
        ns: Namespace,
        system: Vec<&'static str>,
        names: Vec<String>,
    },
    /// DeleteMessage(Batch) or ChangeMessageVisibility(Batch).
    Receipts {
        batch: bool,
        delete: bool,
        ids: Vec<String>,
        failed: Vec<Value>,
    },
}

/// A sent entry's reply fields.
#[derive(Debug)]
pub(crate) struct Sent {
    id: String,
    md5_body: HexText<32>,
    md5_attributes: Option<String>,
    md5_system: Option<String>,
}

/// A parsed send entry for a queue that is FIFO (`fifo`) or not: the
/// engine's entry, its reply fields (id not set) and its size by SQS's
/// count.
fn send_entry(input: &Input, fifo: bool) -> Result<(SendEntry, Sent, usize), SqsError> {
    let body = input.str("MessageBody")?;
    if body.is_empty() {
        return Err(SqsError::invalid(
            "The request must contain a non-empty message body.",
        ));
    }
    if !allowed_text(body) {
        return Err(SqsError::new(
            "InvalidMessageContents",
            "Invalid binary character in the message body: characters outside the allowed set.",
        ));
    }
    let delay = input.opt_int_in("DelaySeconds", 0, 900)?;
    let (group, dedup) = fifo::send_fields(input, fifo, delay)?;
    let mut attrs = Vec::new();
    for (name, v) in input.obj_map("MessageAttributes")? {
        check_attribute_name(name)?;
        attrs.push(attribute(name, &v)?);
    }
    if attrs.len() > ATTRIBUTES_MAX {
        return Err(SqsError::invalid(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{ATTRIBUTES_MAX}].",
            attrs.len()
        )));
    }
    let mut system = Vec::new();
    for (name, v) in input.obj_map("MessageSystemAttributes")? {
        if name != "AWSTraceHeader" {
            return Err(SqsError::invalid(format!(
                "Message system attribute name '{name}' is invalid."
            )));
        }
        let a = attribute(name, &v)?;
        if a.data_type != "String" {
            return Err(SqsError::invalid(
                "The message system attribute 'AWSTraceHeader' must have DataType String.",
            ));
        }
        system.push(a);
    }
    let size = body.len()
        + attrs
            .iter()
            .map(|a| a.name.len() + a.data_type.len() + a.value.len())
            .sum::<usize>();
    if size > MESSAGE_BYTES_MAX {
        return Err(SqsError::invalid(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {MESSAGE_BYTES_MAX} bytes."
        )));
    }
    let mut pairs: Vec<(String, String)> = attrs
        .iter()
        .map(|a| (a.name.clone(), engine_value(a)))
        .collect();
    for s in &system {
        pairs.push((
            TRACE_KEY.to_owned(),
            String::from_utf8_lossy(&s.value).into_owned(),
        ));
    }
    if let Some(d) = &dedup {
        pairs.push((fifo::DEDUP_KEY.to_owned(), d.clone()));
    }
    let md5_body = md5_hex(body.as_bytes());
    // The body's MD5 kept with a message small enough for every queue.
    let engine_size = pairs.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() + body.len();
    let kept = (engine_size + MD5_KEY.len() + md5_body.as_bytes().len() <= MD5_KEPT_BYTES_MAX)
        .then_some((MD5_KEY, md5_body.as_str()));
    let pairs = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let attributes = MessageAttributes::from_pairs(pairs.chain(kept)).map_err(|e| {
        SqsError::invalid(format!(
            "Message attributes are above what sluice stores ({}).",
            e.message
        ))
    })?;
    let mut entry = SendEntry::new(Bytes::copy_from_slice(body.as_bytes()));
    entry.delay = delay.map(seconds::millis);
    entry.attributes = attributes;
    entry.group = group;
    entry.dedup_key = dedup.map(Bytes::from);
    let sent = Sent {
        id: String::new(),
        md5_body,
        md5_attributes: md5_attributes(&attrs),
        md5_system: md5_attributes(&system),
    };
    Ok((entry, sent, size))
}

/// A batch's entries, checked as SQS does: 1 to the batch limit, each
/// with a distinct `Id` of 1 to 80 `[A-Za-z0-9_-]`.
fn batch<'a>(ctx: &Ctx<'_>, input: &'a Input<'_>) -> Result<Vec<(String, Input<'a>)>, SqsError> {
    let entries = input.list("Entries")?;
    if entries.is_empty() {
        return Err(SqsError::new(
            "EmptyBatchRequest",
            "There should be at least one entry in the request.",
        ));
    }
    let max = ctx.batch_max();
    if entries.len() > max {
        return Err(SqsError::new(
            "TooManyEntriesInBatchRequest",
            format!(
                "Maximum number of entries per request are {max}. You have sent {}.",
                entries.len()
            ),
        ));
    }
    let mut out: Vec<(String, Input<'a>)> = Vec::with_capacity(entries.len());
    for v in entries {
        let e = Input::from_value("Entries", v)?;
        let id = e.str("Id")?.to_owned();
        if !super::names::is_sqs_name(&id) {
            return Err(SqsError::new(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.",
            ));
        }
        if out.iter().any(|(i, _)| *i == id) {
            return Err(SqsError::new(
                "BatchEntryIdsNotDistinct",
                format!("Id {id} repeated."),
            ));
        }
        out.push((id, e));
    }
    Ok(out)
}

fn failed(id: &str, e: &SqsError) -> Value {
    json!({ "Id": id, "SenderFault": e.sender_fault(), "Code": e.name, "Message": e.message })
}

fn bad_receipt(handle: &str) -> SqsError {
    SqsError::new(
        "ReceiptHandleIsInvalid",
        format!("The input receipt handle \"{handle}\" is not a valid receipt handle."),
    )
}

fn start_send(ctx: &Ctx<'_>, action: Action, input: &Input) -> Result<Started, SqsError> {
    let (fifo, queue) = ctx.queue_named(input)?;
    let batch_call = action == Action::SendMessageBatch;
    let mut entries = Vec::new();
    let mut sent = Vec::new();
    let mut failures = Vec::new();
    if batch_call {
        let mut total = 0;
        let batch = batch(ctx, input)?;
        entries.reserve_exact(batch.len());
        sent.reserve_exact(batch.len());
        for (id, e) in batch {
            match send_entry(&e, fifo) {
                Ok((entry, s, size)) => {
                    total += size;
                    entries.push(entry);
                    sent.push(Sent { id, ..s });
                }
                Err(err) => failures.push(failed(&id, &err)),
            }
        }
        if ctx.config.limits == Limits::Strict && total > MESSAGE_BYTES_MAX {
            return Err(SqsError::new(
                "BatchRequestTooLong",
                format!(
                    "Batch requests cannot be longer than {MESSAGE_BYTES_MAX} bytes. You have sent {total} bytes."
                ),
            ));
        }
        if entries.is_empty() {
            return Ok(Started::Reply(
                json!({ "Successful": [], "Failed": failures }),
                0,
            ));
        }
    } else {
        let (entry, s, _) = send_entry(input, fifo)?;
        entries.push(entry);
        sent.push(s);
    }
    let request = SendRequest::new(queue, &entries)
        .map_err(|e| SqsError::invalid(format!("The messages cannot be sent: {e}")))?;
    Ok(Started::Engine(
        super::Pending::Message(Pending::Send {
            batch: batch_call,
            fifo,
            sent,
            failed: failures,
        }),
        Request::Send(request),
    ))
}

/// A ReceiveMessage's parts: the SQS name of its queue, the engine's
/// request, and what turns the engine's reply into SQS's.
pub(crate) fn receive(
    ctx: &Ctx<'_>,
    input: &Input,
) -> Result<(String, ReceiveRequest, Pending), SqsError> {
    let (ns, name, queue) = ctx.queue(input)?;
    let most = i64::try_from(ctx.batch_max()).unwrap_or(10);
    let max = input
        .opt_int_in("MaxNumberOfMessages", 1, most)?
        .unwrap_or(1);
    let wait = input.opt_int_in("WaitTimeSeconds", 0, 20)?;
    let visibility = input.opt_int_in("VisibilityTimeout", 0, 43_200)?;
    let mut system = Vec::new();
    let mut asked = input.str_list("AttributeNames")?;
    asked.extend(input.str_list("MessageSystemAttributeNames")?);
    for n in asked {
        if n == "All" {
            system.extend_from_slice(SYSTEM);
            system.extend_from_slice(fifo::SYSTEM);
        } else if let Some(s) = SYSTEM.iter().chain(fifo::SYSTEM).find(|s| **s == n) {
            system.push(*s);
        } else {
            return Err(SqsError::new(
                "InvalidAttributeName",
                format!("Unknown Attribute {n}."),
            ));
        }
    }
    system.sort_unstable();
    system.dedup();
    let with_source = system.contains(&"DeadLetterQueueSourceArn");
    let names = input
        .str_list("MessageAttributeNames")?
        .into_iter()
        .map(str::to_owned)
        .collect();
    let reply = Pending::Receive { ns, system, names };
    let request = ReceiveRequest {
        queue,
        max_messages: u16::try_from(max).unwrap_or(1),
        visibility_timeout_ms: visibility.map(seconds::ms),
        wait_ms: wait.map(seconds::ms),
        bind_leases: false,
        with_source,
    };
    Ok((name, request, reply))
}

fn start_receipts(ctx: &Ctx<'_>, action: Action, input: &Input) -> Result<Started, SqsError> {
    let (_, queue) = ctx.queue_named(input)?;
    let delete = matches!(action, Action::DeleteMessage | Action::DeleteMessageBatch);
    let batch_call = matches!(
        action,
        Action::DeleteMessageBatch | Action::ChangeMessageVisibilityBatch
    );
    let one = |e: &Input| -> Result<(Receipt, u32), SqsError> {
        let handle = e.str("ReceiptHandle")?;
        let receipt = Receipt::from_hex(handle).ok_or_else(|| bad_receipt(handle))?;
        let timeout = if delete {
            0
        } else {
            seconds::ms(
                e.opt_int_in("VisibilityTimeout", 0, 43_200)?
                    .ok_or_else(|| SqsError::missing("VisibilityTimeout"))?,
            )
        };
        Ok((receipt, timeout))
    };
    let mut ids = Vec::new();
    let mut items = Vec::new();
    let mut failures = Vec::new();
    if batch_call {
        let batch = batch(ctx, input)?;
        ids.reserve_exact(batch.len());
        items.reserve_exact(batch.len());
        for (id, e) in batch {
            match one(&e) {
                Ok(item) => {
                    ids.push(id);
                    items.push(item);
                }
                Err(err) => failures.push(failed(&id, &err)),
            }
        }
        if items.is_empty() {
            return Ok(Started::Reply(
                json!({ "Successful": [], "Failed": failures }),
                0,
            ));
        }
    } else {
        items.push(one(input)?);
        ids.push(String::new());
    }
    // A retry of a receive whose message changed is a new receive.
    ctx.attempts.changed(items.iter().map(|&(r, _)| r));
    let request = if delete {
        Request::Delete(DeleteRequest {
            queue,
            receipts: items.into_iter().map(|(r, _)| r).collect(),
        })
    } else {
        Request::ChangeVisibility(ChangeVisibilityRequest {
            queue,
            entries: items
                .into_iter()
                .map(|(receipt, visibility_timeout_ms)| VisibilityChange {
                    receipt,
                    visibility_timeout_ms,
                })
                .collect(),
        })
    };
    Ok(Started::Engine(
        super::Pending::Message(Pending::Receipts {
            batch: batch_call,
            delete,
            ids,
            failed: failures,
        }),
        request,
    ))
}

/// Starts the message action `action` (ReceiveMessage is
/// `attempts::start_receive`'s).
pub(crate) fn start(ctx: &Ctx<'_>, action: Action, input: &Input) -> Result<Started, SqsError> {
    match action {
        Action::SendMessage | Action::SendMessageBatch => start_send(ctx, action, input),
        _ => start_receipts(ctx, action, input),
    }
}

/// Whether the message attribute `name` is one `wanted` asks for.
fn wanted(names: &[String], name: &str) -> bool {
    names.iter().any(|w| {
        w == "All"
            || w == ".*"
            || w == name
            || w.strip_suffix(".*").is_some_and(|p| {
                name.len() > p.len() + 1 && name.starts_with(p) && name.as_bytes()[p.len()] == b'.'
            })
    })
}

fn received(
    m: &ReceivedMessageRef<'_>,
    reply: &Bytes,
    ns: &Namespace,
    system: &[&str],
    names: &[String],
) -> ReceivedEntry {
    // A body sent over SQS is UTF-8; one sent natively may not be. It is
    // shared with the engine's reply, not copied.
    let body = Text::shared(reply, m.body);
    let kept = split(m.attributes);
    let mut out = ReceivedEntry {
        message_id: uuid_text(m.id.0),
        receipt_handle: HexText::of(&m.receipt.to_bytes()),
        // As its send computed it, when the message kept it.
        md5_body: kept
            .md5
            .and_then(HexText::parse)
            .unwrap_or_else(|| md5_hex(body.as_bytes())),
        body,
        attributes: None,
        md5_attributes: None,
        message_attributes: None,
    };
    let trace = as_text(kept.trace);
    let mut sys = Map::new();
    for &s in system {
        let v = match s {
            "ApproximateReceiveCount" => m.receive_count.to_string(),
            "ApproximateFirstReceiveTimestamp" => m.first_received_at_ms().to_string(),
            "SentTimestamp" => m.sent_at_ms.to_string(),
            "SenderId" => ns.account.clone(),
            "AWSTraceHeader" => match trace {
                Some(t) => t.to_owned(),
                None => continue,
            },
            "DeadLetterQueueSourceArn" => match as_text(kept.source) {
                Some(source) => names::arn_of_engine(source, ns),
                None => continue,
            },
            _ => continue,
        };
        sys.insert(s.to_owned(), Value::String(v));
    }
    fifo::system_attributes(m, as_text(kept.dedup), system, &mut sys);
    if !sys.is_empty() {
        out.attributes = Some(sys);
    }
    let mut attrs = kept.attributes;
    attrs.retain(|a| wanted(names, &a.name));
    if let Some(md5) = md5_attributes(&attrs) {
        let mut map = Map::new();
        for a in &attrs {
            let v = if a.is_binary() {
                json!({ "DataType": a.data_type, "BinaryValue": BASE64.encode(&a.value) })
            } else {
                json!({ "DataType": a.data_type, "StringValue": String::from_utf8_lossy(&a.value) })
            };
            map.insert(a.name.clone(), v);
        }
        out.md5_attributes = Some(md5);
        out.message_attributes = Some(map);
    }
    out
}

/// A kept value as text (it was checked to be when stored).
fn as_text(v: Option<&[u8]>) -> Option<&str> {
    v.and_then(|v| core::str::from_utf8(v).ok())
}

fn sent_entry(s: Sent, outcome: &SendOutcome, batch: bool, fifo: bool) -> SentEntry {
    SentEntry {
        id: batch.then_some(s.id),
        message_id: uuid_text(outcome.id.0),
        md5_body: s.md5_body,
        md5_attributes: s.md5_attributes,
        md5_system: s.md5_system,
        sequence_number: fifo.then(|| fifo::sequence_number(outcome.id)),
    }
}

/// The error for an engine reply of another kind than the request's.
pub(crate) fn mismatch() -> SqsError {
    SqsError::new(
        "InternalError",
        "the engine's reply does not match the request",
    )
}

impl Pending {
    /// SQS's reply to the engine's `reply`, and the stale deletes.
    pub(crate) fn finish(self, reply: Reply) -> Result<(Body, u32), SqsError> {
        match (self, reply) {
            (_, Reply::Error(e)) => Err(SqsError::from_engine(&e, false)),
            (
                Pending::Send {
                    batch,
                    fifo,
                    sent,
                    mut failed,
                },
                Reply::Send { results },
            ) => {
                if results.len() != sent.len() {
                    return Err(mismatch());
                }
                let error = |code: ErrorCode| match code {
                    ErrorCode::InvalidArgument if fifo => fifo::dedup_required(),
                    code => SqsError::from_code(code, "", false),
                };
                if !batch {
                    let one = sent.into_iter().next().ok_or_else(mismatch)?;
                    return match &results[0] {
                        Ok(o) => Ok((Body::Sent(sent_entry(one, o, false, fifo)), 0)),
                        Err(code) => Err(error(*code)),
                    };
                }
                let mut ok = Vec::with_capacity(results.len());
                for (s, r) in sent.into_iter().zip(&results) {
                    match r {
                        Ok(o) => ok.push(sent_entry(s, o, true, fifo)),
                        Err(code) => failed.push(self::failed(&s.id, &error(*code))),
                    }
                }
                Ok((
                    Body::SentBatch(Batch {
                        successful: ok,
                        failed,
                    }),
                    0,
                ))
            }
            (Pending::Receive { ns, system, names }, Reply::Receive { messages }) => {
                let messages = messages
                    .iter()
                    .map(|m| received(&m, messages.wire_bytes(), &ns, &system, &names))
                    .collect();
                Ok((Body::Received(Received { messages }), 0))
            }
            (
                Pending::Receipts {
                    batch,
                    delete,
                    ids,
                    mut failed,
                },
                Reply::Delete { results } | Reply::ChangeVisibility { results },
            ) => {
                if results.len() != ids.len() {
                    return Err(mismatch());
                }
                let mut stale = 0;
                let mut ok = Vec::with_capacity(results.len());
                for (id, r) in ids.into_iter().zip(&results) {
                    let r = match r {
                        Ok(()) => Ok(()),
                        Err(ErrorCode::StaleReceipt) if delete => {
                            stale += 1;
                            Ok(())
                        }
                        Err(ErrorCode::Gone) if delete => Ok(()),
                        Err(code) => Err(SqsError::from_code(*code, "", false)),
                    };
                    match r {
                        Ok(()) => ok.push(IdEntry { id }),
                        Err(e) if !batch => return Err(e),
                        Err(e) => failed.push(self::failed(&id, &e)),
                    }
                }
                if batch {
                    Ok((
                        Body::IdBatch(Batch {
                            successful: ok,
                            failed,
                        }),
                        stale,
                    ))
                } else {
                    Ok((Body::Value(json!({})), stale))
                }
            }
            _ => Err(mismatch()),
        }
    }
}
