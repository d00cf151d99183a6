//! Golden vectors: one complete frame per request and reply kind, each
//! stated three ways that must agree: a typed value (encoded by the crate),
//! an annotated field-by-field layout (written here by hand, from the spec),
//! and the `.bin` file in `tests/vectors/`, which PROTOCOL.md shows as an
//! annotated hex dump.
//!
//! Regenerate the files and the dumps in PROTOCOL.md after changing a vector
//! with `SLUICE_BLESS=1 cargo test -p sluice-protocol --test it vectors`;
//! without it the tests only compare.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use sluice_protocol::limits::FRAME_BYTES_MAX_DEFAULT;
use sluice_protocol::{
    AttributeUpdate, Backoff, ChangeVisibilityRequest, Counter, DeleteRequest, ErrorCode,
    FrameDecoder, HelloReply, HelloRequest, MessageAttributes, MessageGroupId, MessageId, Millis,
    PeekedMessage, QueueAttributes, QueueAttributesRequest, QueueInfo, QueueName, QueueStats,
    Receipt, ReceiveRequest, ReceivedBatch, ReceivedMessage, RedrivePolicy, Reply, Request,
    SendEntry, SendOutcome, SendRequest, ServerLimits, ServerStatsReply, Setting, VisibilityChange,
    WireError, opcode,
};

use crate::dump::{Dump, frame, parse_blocks, rewrite_blocks};

/// What a vector holds.
pub enum Message {
    Request(Request),
    Reply(Reply),
}

pub struct Vector {
    pub name: &'static str,
    pub request_id: u32,
    pub message: Message,
    /// The hand-written layout of the whole frame.
    pub dump: Dump,
}

impl Vector {
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = BytesMut::new();
        match &self.message {
            Message::Request(r) => r.encode(self.request_id, &mut buf).unwrap(),
            Message::Reply(r) => r.encode(self.request_id, &mut buf).unwrap(),
        }
        buf.to_vec()
    }
}

fn q(name: &'static str) -> QueueName {
    QueueName::from_static(name)
}

const RECEIPT_A: Receipt = Receipt {
    incarnation: 1,
    shard: 1,
    slot: 42,
    generation: 3,
    delivery: 7,
    check: 0x9abc_def0,
};
const RECEIPT_B: Receipt = Receipt {
    incarnation: 1,
    shard: 0,
    slot: 17,
    generation: 1,
    delivery: 5,
    check: 0x1234_5678,
};
const ID_A: MessageId = MessageId(0x0193_5f3a_6b2c_7d10_8e4f_a1b2_c3d4_e5f6);
const ID_B: MessageId = MessageId(0x0193_5f3a_6b2c_7d10_8e4f_a1b2_c3d4_e5f7);

fn receipt(d: &mut Dump, r: &Receipt, name: &str) {
    d.u32(r.incarnation, &format!("{name}.incarnation"))
        .u16(r.shard, &format!("{name}.shard"))
        .u32(r.slot, &format!("{name}.slot"))
        .u32(r.generation, &format!("{name}.generation"))
        .u64(r.delivery, &format!("{name}.delivery"))
        .raw(
            &r.check.to_le_bytes(),
            format!("{name}.check = 0x{:08x}", r.check),
        );
}

fn id(d: &mut Dump, id: MessageId) {
    d.raw(&id.to_bytes(), format!("id = {id} (u128 LE)"));
}

/// Attribute pairs: `u16 key_len, key, u16 value_len, value` each.
fn attrs(d: &mut Dump, pairs: &[(&str, &str)]) {
    for (k, v) in pairs {
        d.str16(k, "attribute key").str16(v, "attribute value");
    }
}

fn attribute_pairs(pairs: &[(&str, &str)]) -> MessageAttributes {
    MessageAttributes::from_pairs(pairs.iter().copied()).unwrap()
}

fn get_queue_attributes() -> QueueAttributes {
    QueueAttributes {
        redrive: Some(RedrivePolicy {
            dead_letter_queue: "orders.dlq".into(),
            max_receives: 5,
        }),
        backoff: Some(Backoff::new(Millis::new(100), Millis::new(60_000))),
        ..QueueAttributes::default()
    }
}

fn get_queue_stats() -> QueueStats {
    QueueStats {
        visible: 3,
        delayed: 1,
        in_flight: 2,
        sent: 20,
        moved_in: 0,
        received: 18,
        deleted: 12,
        redelivered: 2,
        released: 1,
        dead_lettered: 1,
        redriven: 0,
        dropped: 0,
        purged: 1,
        oldest_age_ms: 5_000,
    }
}

#[allow(clippy::too_many_lines)]
pub fn all() -> Vec<Vector> {
    let mut v = Vec::new();
    let mut add = |name, request_id, message: Message, payload: Dump| {
        let (op, flags) = match &message {
            Message::Request(r) => (r.opcode(), r.flags()),
            Message::Reply(r) => (r.opcode(), 0),
        };
        v.push(Vector {
            name,
            request_id,
            message,
            dump: frame(op, flags, request_id, &payload),
        });
    };

    // HELLO
    let mut p = Dump::new();
    p.u16(2, "version")
        .str16("s3cret", "token")
        .u32(10_000, "session_timeout_ms");
    add(
        "hello_request",
        1,
        Message::Request(Request::Hello(HelloRequest {
            version: 2,
            token: Bytes::from_static(b"s3cret"),
            session_timeout_ms: 10_000,
        })),
        p,
    );
    let mut p = Dump::new();
    p.u16(1, "version").str16("s3cret", "token");
    add(
        "hello_v1_request",
        1,
        Message::Request(Request::Hello(HelloRequest {
            version: 1,
            token: Bytes::from_static(b"s3cret"),
            session_timeout_ms: 0,
        })),
        p,
    );
    let mut p = Dump::new();
    p.u16(2, "version")
        .str8("sluice 0.1.0", "server version")
        .u16(1, "shard (this connection's)")
        .u16(2, "shards")
        .u32(1_048_576, "limits.frame_bytes_max")
        .u16(1024, "limits.batch_entries_max")
        .u32(1024, "limits.requests_in_flight_max")
        .u32(20_000, "limits.receive_wait_ms_max");
    add(
        "hello_reply",
        1,
        Message::Reply(Reply::Hello(HelloReply {
            version: 2,
            server_version: "sluice 0.1.0".into(),
            shard: 1,
            shards: 2,
            limits: ServerLimits {
                frame_bytes_max: 1_048_576,
                batch_entries_max: 1024,
                requests_in_flight_max: 1024,
                receive_wait_ms_max: 20_000,
            },
        })),
        p,
    );

    // PING
    let nonce = 0x0123_4567_89ab_cdef;
    let mut p = Dump::new();
    p.raw(&u64::to_le_bytes(nonce), "nonce = 0x0123456789abcdef");
    add(
        "ping_request",
        2,
        Message::Request(Request::Ping { nonce }),
        p.clone(),
    );
    add("pong_reply", 2, Message::Reply(Reply::Pong { nonce }), p);

    // CREATE_QUEUE
    let mut p = Dump::new();
    p.str8("orders", "queue")
        .raw(
            &0x0121u16.to_le_bytes(),
            "present_mask = 0x0121 (bits 0, 5, 8)",
        )
        .raw(&0u16.to_le_bytes(), "clear_mask = 0")
        .u32(60_000, "bit 0: visibility_timeout_ms")
        .str8("orders.dlq", "bit 5: redrive.dead_letter_queue")
        .u16(5, "bit 5: redrive.max_receives")
        .u32(100, "bit 8: backoff.base_ms")
        .u32(60_000, "bit 8: backoff.max_ms");
    add(
        "create_queue_request",
        3,
        Message::Request(Request::CreateQueue(QueueAttributesRequest {
            queue: q("orders"),
            attributes: AttributeUpdate {
                visibility_timeout: Some(Millis::new(60_000)),
                redrive: Setting::Set(RedrivePolicy {
                    dead_letter_queue: "orders.dlq".into(),
                    max_receives: 5,
                }),
                backoff: Setting::Set(Backoff::new(Millis::new(100), Millis::new(60_000))),
                ..AttributeUpdate::default()
            },
        })),
        p,
    );
    let mut p = Dump::new();
    p.u8(1, "created (a new queue)");
    add(
        "create_queue_reply",
        3,
        Message::Reply(Reply::CreateQueue { created: true }),
        p,
    );

    // DELETE_QUEUE
    let mut p = Dump::new();
    p.str8("orders.old", "queue");
    add(
        "delete_queue_request",
        4,
        Message::Request(Request::DeleteQueue {
            queue: q("orders.old"),
        }),
        p,
    );
    add(
        "delete_queue_reply",
        4,
        Message::Reply(Reply::DeleteQueue),
        Dump::new(),
    );

    // LIST_QUEUES
    let mut p = Dump::new();
    p.str8("ord", "prefix");
    add(
        "list_queues_request",
        5,
        Message::Request(Request::ListQueues {
            prefix: "ord".into(),
            after: None,
        }),
        p,
    );
    let mut p = Dump::new();
    p.u32(2, "count")
        .str8("orders", "queue")
        .str8("orders.dlq", "queue");
    add(
        "list_queues_reply",
        5,
        Message::Reply(Reply::ListQueues {
            queues: vec![q("orders"), q("orders.dlq")],
            more: None,
        }),
        p,
    );

    // GET_QUEUE
    let mut p = Dump::new();
    p.str8("orders", "queue");
    add(
        "get_queue_request",
        6,
        Message::Request(Request::GetQueue { queue: q("orders") }),
        p,
    );
    let a = get_queue_attributes();
    let s = get_queue_stats();
    let mut p = Dump::new();
    p.str8("orders", "queue")
        .raw(
            &0x01bfu16.to_le_bytes(),
            "present_mask = 0x01bf (all but bit 6: no max depth)",
        )
        .raw(&0u16.to_le_bytes(), "clear_mask = 0")
        .u32(a.visibility_timeout.get(), "bit 0: visibility_timeout_ms")
        .u32(a.delay.get(), "bit 1: delay_ms")
        .u32(a.retention.get(), "bit 2: retention_ms")
        .u32(a.message_bytes_max, "bit 3: message_bytes_max")
        .u32(a.receive_wait.get(), "bit 4: receive_wait_ms")
        .str8("orders.dlq", "bit 5: redrive.dead_letter_queue")
        .u16(5, "bit 5: redrive.max_receives")
        .u32(a.dedup_window.get(), "bit 7: dedup_window_ms")
        .u32(100, "bit 8: backoff.base_ms")
        .u32(60_000, "bit 8: backoff.max_ms");
    for (value, name) in [
        (s.visible, "visible"),
        (s.delayed, "delayed"),
        (s.in_flight, "in_flight"),
        (s.sent, "sent"),
        (s.moved_in, "moved_in"),
        (s.received, "received"),
        (s.deleted, "deleted"),
        (s.redelivered, "redelivered"),
        (s.released, "released"),
        (s.dead_lettered, "dead_lettered"),
        (s.redriven, "redriven"),
        (s.dropped, "dropped"),
        (s.purged, "purged"),
        (s.oldest_age_ms, "oldest_age_ms"),
    ] {
        p.u64(value, &format!("stats.{name}"));
    }
    add(
        "get_queue_reply",
        6,
        Message::Reply(Reply::GetQueue(Box::new(QueueInfo {
            queue: q("orders"),
            attributes: a,
            stats: s,
            times: None,
        }))),
        p,
    );

    // SET_QUEUE
    let mut p = Dump::new();
    p.str8("orders", "queue")
        .raw(&0x0002u16.to_le_bytes(), "present_mask = 0x0002 (bit 1)")
        .raw(
            &0x0100u16.to_le_bytes(),
            "clear_mask = 0x0100 (bit 8: remove the backoff)",
        )
        .u32(1000, "bit 1: delay_ms");
    add(
        "set_queue_request",
        7,
        Message::Request(Request::SetQueue(QueueAttributesRequest {
            queue: q("orders"),
            attributes: AttributeUpdate {
                delay: Some(Millis::new(1000)),
                backoff: Setting::Clear,
                ..AttributeUpdate::default()
            },
        })),
        p,
    );
    add(
        "set_queue_reply",
        7,
        Message::Reply(Reply::SetQueue),
        Dump::new(),
    );

    // PURGE_QUEUE
    let mut p = Dump::new();
    p.str8("orders", "queue");
    add(
        "purge_queue_request",
        8,
        Message::Request(Request::PurgeQueue { queue: q("orders") }),
        p,
    );
    let mut p = Dump::new();
    p.u64(42, "purged");
    add(
        "purge_queue_reply",
        8,
        Message::Reply(Reply::PurgeQueue { purged: 42 }),
        p,
    );

    // SEND
    let mut p = Dump::new();
    p.str8("orders", "queue").u16(2, "count");
    p.u32(5, "entry 0: body_len")
        .raw(
            &u32::MAX.to_le_bytes(),
            "entry 0: delay_ms = 0xffffffff (queue default)",
        )
        .u8(0, "entry 0: dedup_len (none)")
        .u8(0, "entry 0: attr_count")
        .raw(b"hello", "entry 0: body = \"hello\"");
    p.u32(5, "entry 1: body_len")
        .u32(5000, "entry 1: delay_ms")
        .u8(8, "entry 1: dedup_len")
        .u8(1, "entry 1: attr_count")
        .raw(b"order-17", "entry 1: dedup key = \"order-17\"");
    attrs(&mut p, &[("type", "order")]);
    p.raw(b"world", "entry 1: body = \"world\"");
    add(
        "send_request",
        9,
        Message::Request(Request::Send(
            SendRequest::new(
                q("orders"),
                &[
                    SendEntry::new(Bytes::from_static(b"hello")),
                    SendEntry {
                        body: Bytes::from_static(b"world"),
                        delay: Some(Millis::new(5000)),
                        dedup_key: Some(Bytes::from_static(b"order-17")),
                        attributes: attribute_pairs(&[("type", "order")]),
                        group: None,
                    },
                ],
            )
            .unwrap(),
        )),
        p,
    );
    // SEND to a FIFO queue (version 5): the group id follows the dedup key.
    let mut p = Dump::new();
    p.str8("ledger.fifo", "queue").u16(1, "count");
    p.u32(5, "entry 0: body_len")
        .raw(
            &u32::MAX.to_le_bytes(),
            "entry 0: delay_ms = 0xffffffff (queue default)",
        )
        .u8(6, "entry 0: dedup_len")
        .raw(
            &[0x80],
            "entry 0: attr_count = 0, bit 7: a group id follows",
        )
        .raw(b"txn-41", "entry 0: dedup key = \"txn-41\"")
        .u8(9, "entry 0: group id length")
        .raw(b"account-7", "entry 0: group id = \"account-7\"")
        .raw(b"debit", "entry 0: body = \"debit\"");
    add(
        "send_group_request",
        17,
        Message::Request(Request::Send(
            SendRequest::new(
                q("ledger.fifo"),
                &[SendEntry::new(Bytes::from_static(b"debit"))
                    .dedup_key("txn-41")
                    .group(MessageGroupId::new("account-7").unwrap())],
            )
            .unwrap(),
        )),
        p,
    );
    let mut p = Dump::new();
    p.u16(2, "count").u16(0, "entry 0: status (ok)");
    id(&mut p, ID_A);
    p.u8(0, "entry 0: duplicate").u16(0, "entry 1: status (ok)");
    id(&mut p, ID_B);
    p.u8(1, "entry 1: duplicate (an earlier send had this dedup key)");
    add(
        "send_reply",
        9,
        Message::Reply(Reply::Send {
            results: vec![
                Ok(SendOutcome {
                    id: ID_A,
                    duplicate: false,
                }),
                Ok(SendOutcome {
                    id: ID_B,
                    duplicate: true,
                }),
            ],
        }),
        p,
    );

    // RECEIVE
    let mut p = Dump::new();
    p.str8("orders", "queue")
        .u16(10, "max")
        .raw(
            &u32::MAX.to_le_bytes(),
            "visibility_timeout_ms = 0xffffffff (queue default)",
        )
        .u32(20_000, "wait_ms");
    add(
        "receive_request",
        10,
        Message::Request(Request::Receive(ReceiveRequest {
            queue: q("orders"),
            max_messages: 10,
            visibility_timeout_ms: None,
            wait_ms: Some(20_000),
            bind_leases: false,
            with_source: false,
        })),
        p.clone(),
    );
    add(
        "receive_bound_request",
        16,
        Message::Request(Request::Receive(ReceiveRequest {
            queue: q("orders"),
            max_messages: 10,
            visibility_timeout_ms: None,
            wait_ms: Some(20_000),
            bind_leases: true,
            with_source: false,
        })),
        p,
    );
    let mut p = Dump::new();
    p.u16(1, "count");
    id(&mut p, ID_B);
    receipt(&mut p, &RECEIPT_A, "receipt");
    p.u32(2, "receive_count")
        .u64(1_735_689_600_000, "sent_at_ms (2025-01-01T00:00:00Z)")
        .u32(250, "first_received_delta_ms")
        .u32(5, "body_len")
        .u8(1, "attr_count");
    attrs(&mut p, &[("type", "order")]);
    p.raw(b"world", "body = \"world\"");
    add(
        "receive_reply",
        10,
        Message::Reply(Reply::Receive {
            messages: ReceivedBatch::from_messages([ReceivedMessage {
                id: ID_B,
                receipt: RECEIPT_A,
                receive_count: 2,
                sent_at_ms: 1_735_689_600_000,
                first_received_delta_ms: 250,
                attributes: attribute_pairs(&[("type", "order")]),
                body: Bytes::from_static(b"world"),
                group: None,
            }
            .as_view()])
            .unwrap(),
        }),
        p,
    );

    let mut p = Dump::new();
    p.u16(1, "count");
    id(&mut p, ID_A);
    receipt(&mut p, &RECEIPT_B, "receipt");
    p.u32(1, "receive_count")
        .u64(1_735_689_600_000, "sent_at_ms (2025-01-01T00:00:00Z)")
        .u32(12, "first_received_delta_ms")
        .u32(5, "body_len")
        .raw(&[0x80], "attr_count = 0, bit 7: a group id follows")
        .u8(9, "group id length")
        .raw(b"account-7", "group id = \"account-7\"")
        .raw(b"debit", "body = \"debit\"");
    add(
        "receive_group_reply",
        18,
        Message::Reply(Reply::Receive {
            messages: ReceivedBatch::from_messages([ReceivedMessage {
                id: ID_A,
                receipt: RECEIPT_B,
                receive_count: 1,
                sent_at_ms: 1_735_689_600_000,
                first_received_delta_ms: 12,
                attributes: MessageAttributes::new(),
                body: Bytes::from_static(b"debit"),
                group: Some(MessageGroupId::new("account-7").unwrap()),
            }
            .as_view()])
            .unwrap(),
        }),
        p,
    );

    // DELETE
    let mut p = Dump::new();
    p.str8("orders", "queue").u16(2, "count");
    receipt(&mut p, &RECEIPT_A, "receipt 0");
    receipt(&mut p, &RECEIPT_B, "receipt 1");
    add(
        "delete_request",
        11,
        Message::Request(Request::Delete(DeleteRequest {
            queue: q("orders"),
            receipts: vec![RECEIPT_A, RECEIPT_B],
        })),
        p,
    );
    let mut p = Dump::new();
    p.u16(2, "count")
        .u16(0, "status 0 (ok)")
        .raw(&8u16.to_le_bytes(), "status 1 = 0x0008 StaleReceipt");
    add(
        "delete_reply",
        11,
        Message::Reply(Reply::Delete {
            results: vec![Ok(()), Err(ErrorCode::StaleReceipt)],
        }),
        p,
    );

    // CHANGE_VISIBILITY
    let mut p = Dump::new();
    p.str8("orders", "queue").u16(1, "count");
    receipt(&mut p, &RECEIPT_A, "entry 0: receipt");
    p.u32(0, "entry 0: visibility_timeout_ms (release now)");
    add(
        "change_visibility_request",
        12,
        Message::Request(Request::ChangeVisibility(ChangeVisibilityRequest {
            queue: q("orders"),
            entries: vec![VisibilityChange {
                receipt: RECEIPT_A,
                visibility_timeout_ms: 0,
            }],
        })),
        p,
    );
    let mut p = Dump::new();
    p.u16(1, "count")
        .raw(&9u16.to_le_bytes(), "status 0 = 0x0009 Gone");
    add(
        "change_visibility_reply",
        12,
        Message::Reply(Reply::ChangeVisibility {
            results: vec![Err(ErrorCode::Gone)],
        }),
        p,
    );

    // REDRIVE
    let mut p = Dump::new();
    p.str8("orders.dlq", "queue").u32(100, "max");
    add(
        "redrive_request",
        13,
        Message::Request(Request::Redrive {
            queue: q("orders.dlq"),
            max_messages: 100,
            to: None,
        }),
        p,
    );
    let mut p = Dump::new();
    p.str8("orders.dlq", "queue")
        .u32(100, "max")
        .str8("orders.retry", "to (flag bit 0)");
    add(
        "redrive_to_request",
        14,
        Message::Request(Request::Redrive {
            queue: q("orders.dlq"),
            max_messages: 100,
            to: Some(q("orders.retry")),
        }),
        p,
    );
    let mut p = Dump::new();
    p.u64(7, "moved")
        .u64(1, "stayed (source queue gone or full)");
    add(
        "redrive_reply",
        13,
        Message::Reply(Reply::Redrive {
            moved: 7,
            stayed: 1,
        }),
        p,
    );

    // PEEK
    let mut p = Dump::new();
    p.str8("orders", "queue").u16(5, "max");
    add(
        "peek_request",
        14,
        Message::Request(Request::Peek {
            queue: q("orders"),
            max_messages: 5,
        }),
        p,
    );
    let mut p = Dump::new();
    p.u16(2, "count");
    id(&mut p, ID_A);
    p.u32(1, "receive_count")
        .u64(7, "delivery")
        .u64(1_735_689_600_000, "sent_at_ms")
        .u32(250, "first_received_delta_ms")
        .u32(5, "body_len")
        .u8(0, "attr_count")
        .raw(b"hello", "body = \"hello\"");
    id(&mut p, ID_B);
    p.u32(0, "receive_count")
        .u64(0, "delivery (never delivered)")
        .u64(1_735_689_600_100, "sent_at_ms")
        .raw(
            &u32::MAX.to_le_bytes(),
            "first_received_delta_ms = 0xffffffff (never received)",
        )
        .u32(0, "body_len")
        .u8(0, "attr_count");
    add(
        "peek_reply",
        14,
        Message::Reply(Reply::Peek {
            messages: vec![
                PeekedMessage {
                    id: ID_A,
                    receive_count: 1,
                    delivery: 7,
                    sent_at_ms: 1_735_689_600_000,
                    first_received_delta_ms: Some(250),
                    attributes: MessageAttributes::new(),
                    body: Bytes::from_static(b"hello"),
                },
                PeekedMessage {
                    id: ID_B,
                    receive_count: 0,
                    delivery: 0,
                    sent_at_ms: 1_735_689_600_100,
                    first_received_delta_ms: None,
                    attributes: MessageAttributes::new(),
                    body: Bytes::new(),
                },
            ],
            cut: None,
        }),
        p,
    );

    // SERVER_STATS
    add(
        "server_stats_request",
        15,
        Message::Request(Request::ServerStats),
        Dump::new(),
    );
    let mut p = Dump::new();
    p.str8("sluice 0.1.0", "server version")
        .str8("io_uring", "io backend")
        .u16(2, "shards")
        .u16(3, "count")
        .str8("connections", "counter name")
        .u64(3, "value")
        .str8("queues", "counter name")
        .u64(2, "value")
        .str8("uptime_ms", "counter name")
        .u64(86_400_000, "value");
    add(
        "server_stats_reply",
        15,
        Message::Reply(Reply::ServerStats(ServerStatsReply {
            server_version: "sluice 0.1.0".into(),
            io_backend: "io_uring".into(),
            shards: 2,
            counters: vec![
                Counter {
                    name: "connections".into(),
                    value: 3,
                },
                Counter {
                    name: "queues".into(),
                    value: 2,
                },
                Counter {
                    name: "uptime_ms".into(),
                    value: 86_400_000,
                },
            ],
        })),
        p,
    );

    // ADVANCE_CLOCK
    let mut p = Dump::new();
    p.u64(30_000, "by_ms");
    add(
        "advance_clock_request",
        17,
        Message::Request(Request::AdvanceClock { by_ms: 30_000 }),
        p,
    );
    let mut p = Dump::new();
    p.u64(
        90_000,
        "elapsed_ms (every advance since the server started)",
    )
    .u64(1_735_689_690_000, "wall_ms (2025-01-01T00:01:30Z)");
    add(
        "advance_clock_reply",
        17,
        Message::Reply(Reply::AdvanceClock {
            elapsed_ms: 90_000,
            wall_ms: 1_735_689_690_000,
        }),
        p,
    );
    let mut p = Dump::new();
    p.raw(&0x14u16.to_le_bytes(), "code = 0x0014 Unsupported")
        .str16(
            "ADVANCE_CLOCK needs a server started with --clock manual",
            "message",
        );
    add(
        "error_unsupported_reply",
        17,
        Message::Reply(Reply::Error(WireError::new(
            ErrorCode::Unsupported,
            "ADVANCE_CLOCK needs a server started with --clock manual",
        ))),
        p,
    );

    // ERROR
    let mut p = Dump::new();
    p.raw(&1u16.to_le_bytes(), "code = 0x0001 QueueNotFound")
        .str16("queue orders.old not found", "message");
    add(
        "error_reply",
        4,
        Message::Reply(Reply::Error(WireError::new(
            ErrorCode::QueueNotFound,
            "queue orders.old not found",
        ))),
        p,
    );

    v
}

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn protocol_md() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../PROTOCOL.md")
}

fn blessing() -> bool {
    std::env::var_os("SLUICE_BLESS").is_some_and(|v| v == "1")
}

/// Under `SLUICE_BLESS=1`, writes the `.bin` files and the dumps in
/// PROTOCOL.md from the vectors above. Runs before the checks of each test
/// that reads them, so a blessing run also checks what it wrote.
fn bless_if_asked() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if !blessing() {
        return;
    }
    ONCE.call_once(|| {
        let vectors = all();
        std::fs::create_dir_all(vectors_dir()).unwrap();
        for v in &vectors {
            std::fs::write(
                vectors_dir().join(format!("{}.bin", v.name)),
                v.dump.bytes(),
            )
            .unwrap();
        }
        let md = std::fs::read_to_string(protocol_md()).unwrap();
        let rewritten = rewrite_blocks(&md, |name| {
            vectors
                .iter()
                .find(|v| v.name == name)
                .map(|v| v.dump.render())
        });
        std::fs::write(protocol_md(), rewritten).unwrap();
    });
}

fn read_vector(name: &str) -> Vec<u8> {
    let path = vectors_dir().join(format!("{name}.bin"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with SLUICE_BLESS=1)", path.display()))
}

#[test]
fn there_is_a_vector_for_every_request_and_reply_kind() {
    let mut requests = BTreeSet::new();
    let mut replies = BTreeSet::new();
    for v in all() {
        match v.message {
            Message::Request(r) => requests.insert(r.opcode()),
            Message::Reply(r) => replies.insert(r.opcode()),
        };
    }
    assert_eq!(requests, opcode::REQUESTS.into_iter().collect());
    assert_eq!(replies, opcode::REPLIES.into_iter().collect());
}

#[test]
fn hand_written_layouts_match_the_encoder() {
    for v in all() {
        assert_eq!(
            v.encode(),
            v.dump.bytes(),
            "vector {}: encoder and layout differ",
            v.name
        );
    }
}

#[test]
fn files_hold_the_vectors() {
    bless_if_asked();
    for v in all() {
        assert_eq!(
            read_vector(v.name),
            v.dump.bytes(),
            "tests/vectors/{}.bin is stale",
            v.name
        );
    }
}

#[test]
fn files_decode_to_their_values_and_re_encode_byte_identically() {
    bless_if_asked();
    for v in all() {
        let bytes = read_vector(v.name);
        let mut buf = BytesMut::from(&bytes[..]);
        let frame = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT)
            .decode(&mut buf)
            .unwrap()
            .unwrap_or_else(|| panic!("{}: not a whole frame", v.name));
        assert!(buf.is_empty(), "{}: bytes after the frame", v.name);
        assert_eq!(frame.request_id, v.request_id, "{}", v.name);
        let mut out = BytesMut::new();
        match &v.message {
            Message::Request(expected) => {
                let got = Request::decode(frame.opcode, frame.flags, frame.payload).unwrap();
                assert_eq!(&got, expected, "{}", v.name);
                got.encode(frame.request_id, &mut out).unwrap();
            }
            Message::Reply(expected) => {
                let got = Reply::decode(frame.opcode, frame.payload).unwrap();
                assert_eq!(&got, expected, "{}", v.name);
                got.encode(frame.request_id, &mut out).unwrap();
            }
        }
        assert_eq!(&out[..], &bytes[..], "{}: re-encoding differs", v.name);
    }
}

#[test]
fn protocol_md_shows_every_vector_and_only_those() {
    bless_if_asked();
    let md = std::fs::read_to_string(protocol_md()).unwrap();
    let blocks = parse_blocks(&md);
    let in_md: Vec<&str> = blocks.iter().map(|b| b.name.as_str()).collect();
    let unique: BTreeSet<&str> = in_md.iter().copied().collect();
    assert_eq!(
        unique.len(),
        in_md.len(),
        "a vector is shown twice in PROTOCOL.md"
    );
    let files: BTreeSet<String> = std::fs::read_dir(vectors_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .map(|n| {
            n.strip_suffix(".bin")
                .unwrap_or_else(|| panic!("tests/vectors/{n} is not a .bin file"))
                .to_owned()
        })
        .collect();
    let files: BTreeSet<&str> = files.iter().map(String::as_str).collect();
    let defined: BTreeSet<&str> = all().iter().map(|v| v.name).collect();
    assert_eq!(unique, files, "PROTOCOL.md blocks vs tests/vectors/*.bin");
    assert_eq!(defined, files, "defined vectors vs tests/vectors/*.bin");
}

#[test]
fn protocol_md_dumps_match_the_files() {
    bless_if_asked();
    let md = std::fs::read_to_string(protocol_md()).unwrap();
    for block in parse_blocks(&md) {
        assert_eq!(
            block.bytes,
            read_vector(&block.name),
            "PROTOCOL.md's dump of {} differs from tests/vectors/{}.bin",
            block.name,
            block.name
        );
    }
}
