//! Wire requests to engine operations and engine results to wire replies.
//!
//! The engine has its own operation types ([`Op`], [`OpResult`]) and never
//! sees the protocol's; this is the one place the two meet. Bodies and dedup
//! keys pass through as the [`Bytes`] slices the decoder cut out of the
//! receive buffer (the engine copies a body once, when it accepts it).
//! Attributes are re-encoded: the protocol keeps them in their wire form
//! (`u16` key lengths), the engine in its compact stored form (`u8` key
//! lengths), and each checks its own limits.

use bytes::Bytes;
use sluice_protocol::message::first_received_delta_ms;
use sluice_protocol::{
    AttributesRef, ErrorCode, MessageAttributes as WireAttributes, PeekedMessage, QueueInfo,
    QueueName, ReceivedMessageRef, Reply, Request, SendOutcome, WireError,
};

use crate::engine::{self, MessageAttributes, Op, OpResult};

/// The engine operation for a request the engine serves; `Err` with the
/// error reply for a request it cannot take (an attribute the engine's
/// stored form refuses). HELLO, PING and SERVER_STATS are the server's own
/// and come back as `Err(Internal)`: the caller answers them before this.
pub fn to_op(request: Request) -> Result<Op, WireError> {
    Ok(match request {
        Request::CreateQueue(r) => Op::CreateQueue {
            name: r.queue.as_str().to_owned(),
            attributes: r.attributes,
        },
        Request::SetQueue(r) => Op::SetQueueAttributes {
            name: r.queue.as_str().to_owned(),
            update: r.attributes,
        },
        Request::DeleteQueue { queue } => Op::DeleteQueue {
            name: queue.as_str().to_owned(),
        },
        Request::ListQueues { prefix } => Op::ListQueues { prefix },
        Request::GetQueue { queue } => Op::GetQueue {
            name: queue.as_str().to_owned(),
        },
        Request::PurgeQueue { queue } => Op::PurgeQueue {
            name: queue.as_str().to_owned(),
        },
        Request::Send(r) => {
            let raw = r.entries.wire_bytes();
            let mut entries = Vec::with_capacity(r.entries.len());
            for (i, e) in r.entries.iter().enumerate() {
                let attributes = to_engine_attributes(e.attributes).map_err(|err| {
                    WireError::new(err.code, format!("entry {i}: {}", err.message))
                })?;
                entries.push(engine::SendEntry {
                    body: share(raw, e.body),
                    delay_ms: e.delay_ms,
                    attributes,
                    dedup_key: e.dedup_key.map(|k| share(raw, k)),
                });
            }
            Op::Send {
                queue: r.queue.as_str().to_owned(),
                entries,
            }
        }
        Request::Receive(r) => Op::Receive {
            queue: r.queue.as_str().to_owned(),
            max: u32::from(r.max_messages),
            visibility_timeout_ms: r.visibility_timeout_ms,
            wait_ms: r.wait_ms,
        },
        Request::Delete(r) => Op::Delete {
            queue: r.queue.as_str().to_owned(),
            receipts: r.receipts,
        },
        Request::ChangeVisibility(r) => Op::ChangeVisibility {
            queue: r.queue.as_str().to_owned(),
            entries: r
                .entries
                .into_iter()
                .map(|e| engine::VisibilityChange {
                    receipt: e.receipt,
                    timeout_ms: e.visibility_timeout_ms,
                })
                .collect(),
        },
        Request::Redrive {
            queue,
            max_messages,
        } => Op::Redrive {
            queue: queue.as_str().to_owned(),
            max: max_messages,
        },
        Request::Peek {
            queue,
            max_messages,
        } => Op::Peek {
            queue: queue.as_str().to_owned(),
            max: u32::from(max_messages),
        },
        Request::Hello(_) | Request::Ping { .. } | Request::ServerStats => {
            return Err(WireError::new(
                ErrorCode::Internal,
                "the server answers this request itself",
            ));
        }
    })
}

/// The engine's stored form of wire attributes. The engine refuses empty
/// keys and keys above 255 bytes, which the wire allows.
fn to_engine_attributes(attrs: AttributesRef<'_>) -> Result<MessageAttributes, WireError> {
    if attrs.is_empty() {
        return Ok(MessageAttributes::empty());
    }
    MessageAttributes::from_pairs(attrs.iter())
}

/// `part` of `raw` as a `Bytes` sharing `raw`'s buffer: a body or dedup
/// key of a decoded SEND is a slice of the frame, so this never copies; were
/// it not a slice of `raw`, it would be copied rather than panic.
fn share(raw: &Bytes, part: &[u8]) -> Bytes {
    let base = raw.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    match at.checked_sub(base) {
        Some(offset)
            if offset
                .checked_add(part.len())
                .is_some_and(|end| end <= raw.len()) =>
        {
            raw.slice(offset..offset + part.len())
        }
        _ => Bytes::copy_from_slice(part),
    }
}

/// The wire form of stored attributes. They were checked against the same
/// limits when stored, so this cannot fail; if it did, the message goes out
/// without attributes rather than not at all.
pub fn to_wire_attributes(attrs: &MessageAttributes) -> WireAttributes {
    if attrs.is_empty() {
        return WireAttributes::new();
    }
    WireAttributes::from_pairs(attrs.iter()).unwrap_or_default()
}

fn code_only(r: Result<(), WireError>) -> Result<(), ErrorCode> {
    r.map_err(|e| e.code)
}

fn internal(what: &str) -> Reply {
    Reply::error(
        ErrorCode::Internal,
        format!("the engine answered {what} to a request that does not expect it"),
    )
}

/// The reply to `result`, the engine's answer to a request of opcode
/// `request` (a result of the wrong kind is a bug, answered `Internal`).
pub fn to_reply(request: u8, result: OpResult) -> Reply {
    use sluice_protocol::opcode as op;
    match (request, result) {
        (_, OpResult::Error(e)) => Reply::Error(e),
        (op::CREATE_QUEUE, OpResult::QueueCreated { created, .. }) => {
            Reply::CreateQueue { created }
        }
        (op::SET_QUEUE, OpResult::QueueUpdated) => Reply::SetQueue,
        (op::DELETE_QUEUE, OpResult::QueueDeleted) => Reply::DeleteQueue,
        (op::LIST_QUEUES, OpResult::Queues(names)) => Reply::ListQueues {
            // The registry only holds valid names.
            queues: names
                .iter()
                .filter_map(|n| QueueName::new(n).ok())
                .collect(),
        },
        (op::GET_QUEUE, OpResult::Queue(info)) => match QueueName::new(&info.name) {
            Ok(queue) => Reply::GetQueue(QueueInfo {
                queue,
                attributes: info.attributes,
                stats: info.stats,
            }),
            Err(_) => internal("an invalid queue name"),
        },
        (op::PURGE_QUEUE, OpResult::Purged { messages }) => Reply::PurgeQueue { purged: messages },
        (op::SEND, OpResult::Sent(results)) => Reply::Send {
            results: results
                .into_iter()
                .map(|r| {
                    r.map(|ok| SendOutcome {
                        id: ok.id,
                        duplicate: ok.duplicate,
                    })
                    .map_err(|e| e.code)
                })
                .collect(),
        },
        (op::DELETE, OpResult::Deleted(results)) => Reply::Delete {
            results: results.into_iter().map(code_only).collect(),
        },
        (op::CHANGE_VISIBILITY, OpResult::VisibilityChanged(results)) => Reply::ChangeVisibility {
            results: results.into_iter().map(code_only).collect(),
        },
        (op::REDRIVE, OpResult::Redriven { moved, stayed }) => Reply::Redrive { moved, stayed },
        (op::PEEK, OpResult::Peeked(messages)) => Reply::Peek {
            messages: messages.into_iter().map(peeked).collect(),
        },
        (_, other) => internal(result_name(&other)),
    }
}

fn result_name(r: &OpResult) -> &'static str {
    match r {
        OpResult::Error(_) => "an error",
        OpResult::QueueCreated { .. } => "QueueCreated",
        OpResult::QueueUpdated => "QueueUpdated",
        OpResult::QueueDeleted => "QueueDeleted",
        OpResult::Queues(_) => "Queues",
        OpResult::Queue(_) => "Queue",
        OpResult::Purged { .. } => "Purged",
        OpResult::Sent(_) => "Sent",
        OpResult::Received(_) => "Received",
        OpResult::Deleted(_) => "Deleted",
        OpResult::VisibilityChanged(_) => "VisibilityChanged",
        OpResult::Redriven { .. } => "Redriven",
        OpResult::Peeked(_) => "Peeked",
    }
}

/// A received message as the RECEIVE reply writer takes it; `attributes`
/// holds its attributes' wire form (see [`to_wire_attributes`]).
pub fn received_view<'a>(
    m: &'a engine::ReceivedMessage,
    attributes: &'a WireAttributes,
) -> ReceivedMessageRef<'a> {
    ReceivedMessageRef {
        id: m.id,
        receipt: m.receipt,
        receive_count: m.receive_count,
        sent_at_ms: m.sent_at_ms,
        first_received_delta_ms: first_received_delta_ms(m.sent_at_ms, m.first_received_at_ms),
        attributes: attributes.as_view(),
        body: &m.body,
    }
}

fn peeked(m: engine::PeekedMessage) -> PeekedMessage {
    PeekedMessage {
        id: m.id,
        receive_count: m.receive_count,
        delivery: m.delivery,
        sent_at_ms: m.sent_at_ms,
        first_received_delta_ms: m
            .first_received_at_ms
            .map(|at| first_received_delta_ms(m.sent_at_ms, at)),
        attributes: to_wire_attributes(&m.attributes),
        body: m.body,
    }
}

/// Makes `reply` fit a frame of `frame_bytes_max` bytes and returns how
/// many entries it lost. A PEEK or LIST_QUEUES reply loses its last entries
/// until it fits (nothing is leased by them); any other reply that does not
/// fit becomes an `Internal` error. (RECEIVE replies are written with
/// [`sluice_protocol::ReceiveReplyWriter`], which stops at the limit.)
pub fn fit_frame(reply: &mut Reply, frame_bytes_max: usize) -> usize {
    let mut dropped = 0;
    let mut len = reply.encoded_len();
    if len <= frame_bytes_max {
        return 0;
    }
    match reply {
        Reply::Peek { messages } => {
            while len > frame_bytes_max {
                let Some(m) = messages.pop() else { break };
                len -= m.encoded_len();
                dropped += 1;
            }
        }
        Reply::ListQueues { queues } => {
            while len > frame_bytes_max {
                let Some(q) = queues.pop() else { break };
                len -= q.encoded_len();
                dropped += 1;
            }
        }
        _ => {
            *reply = Reply::error(
                ErrorCode::Internal,
                format!("the reply of {len} bytes is above the frame limit of {frame_bytes_max}"),
            );
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use sluice_protocol::{MessageId, SendEntry, SendRequest};

    use super::*;

    fn body(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn send_attributes_cross_into_the_engine_form_and_back() {
        let attrs = WireAttributes::from_pairs([("trace", "abc"), ("k", "")]).unwrap();
        let mut entry = SendEntry::new(body("hi"));
        entry.attributes = attrs.clone();
        let op = to_op(Request::Send(
            SendRequest::new(QueueName::new("q").unwrap(), [&entry]).unwrap(),
        ))
        .unwrap();
        let Op::Send { entries, .. } = op else {
            panic!("{op:?}")
        };
        assert_eq!(
            entries[0].attributes.iter().collect::<Vec<_>>(),
            vec![("trace", "abc"), ("k", "")]
        );
        assert_eq!(to_wire_attributes(&entries[0].attributes), attrs);
    }

    #[test]
    fn an_attribute_the_engine_refuses_names_its_entry() {
        let mut entry = SendEntry::new(body("hi"));
        entry.attributes = WireAttributes::from_pairs([("", "v")]).unwrap();
        let ok = SendEntry::new(body("ok"));
        let err = to_op(Request::Send(
            SendRequest::new(QueueName::new("q").unwrap(), [&ok, &entry]).unwrap(),
        ))
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
        assert!(err.message.starts_with("entry 1:"), "{}", err.message);
    }

    #[test]
    fn a_result_of_the_wrong_kind_is_internal() {
        let reply = to_reply(sluice_protocol::opcode::SEND, OpResult::QueueUpdated);
        assert!(matches!(reply, Reply::Error(e) if e.code == ErrorCode::Internal));
    }

    #[test]
    fn oversized_peek_replies_shed_their_last_messages() {
        let m = |i: u8| PeekedMessage {
            id: MessageId(u128::from(i)),
            receive_count: 0,
            delivery: 0,
            sent_at_ms: 0,
            first_received_delta_ms: None,
            attributes: WireAttributes::new(),
            body: Bytes::from(vec![0; 100]),
        };
        let mut reply = Reply::Peek {
            messages: (0..10).map(m).collect(),
        };
        let limit = reply.encoded_len() - 1;
        assert_eq!(fit_frame(&mut reply, limit), 1);
        assert!(reply.encoded_len() <= limit);
        let mut pong = Reply::Pong { nonce: 1 };
        assert_eq!(fit_frame(&mut pong, 100), 0);
        fit_frame(&mut pong, 10);
        assert!(matches!(pong, Reply::Error(e) if e.code == ErrorCode::Internal));
    }

    #[test]
    fn shared_slices_never_copy_and_foreign_ones_do() {
        let raw = Bytes::from_static(b"hello world");
        let part = &raw[6..];
        let shared = share(&raw, part);
        assert_eq!(shared.as_ptr(), part.as_ptr());
        let foreign = share(&raw, b"other");
        assert_eq!(&foreign[..], b"other");
        assert!(share(&raw, &[]).is_empty());
    }
}
