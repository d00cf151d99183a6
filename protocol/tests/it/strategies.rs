//! proptest strategies for every request and reply, covering each field's
//! whole wire range (within the structural limits a decoder enforces, so
//! every generated value round-trips).

use bytes::Bytes;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use sluice_protocol::{
    AttributeUpdate, Backoff, ChangeVisibilityRequest, Counter, DeleteRequest, ErrorCode,
    HelloReply, HelloRequest, LabelChanges, Labels, LabelsUpdate, MessageAttributes, MessageId,
    PeekedMessage, QueueAttributes, QueueAttributesRequest, QueueInfo, QueueName, QueueStats,
    QueueTimes, Receipt, ReceiveRequest, ReceivedBatch, ReceivedMessage, RedrivePolicy, Reply,
    Request, SendEntry, SendOutcome, SendRequest, ServerLimits, ServerStatsReply, VisibilityChange,
    WireError,
};
use sluice_protocol::{MessageGroupId, Millis, QueueKind, Setting};

/// Largest batch generated: enough to cover multi-entry layouts while
/// keeping cases fast. (Full-size batches are covered by the limit tests.)
const BATCH: usize = 6;

pub fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max).prop_map(Bytes::from)
}

pub fn queue_name() -> impl Strategy<Value = QueueName> {
    prop_oneof![
        "[A-Za-z0-9_.-]{1,80}",
        // One {tag}, with text around it or not.
        "[A-Za-z0-9_.-]{0,20}\\{[A-Za-z0-9_.-]{1,20}\\}[A-Za-z0-9_.-]{0,20}",
    ]
    .prop_map(|s| QueueName::new(&s).unwrap())
}

fn short_string(max_chars: usize) -> impl Strategy<Value = String> {
    // Up to 4 bytes per char: stays within a u8 length for max_chars <= 63.
    proptest::string::string_regex(&format!(".{{0,{max_chars}}}")).unwrap()
}

pub fn attributes() -> impl Strategy<Value = MessageAttributes> {
    vec((short_string(12), short_string(40)), 0..=16)
        .prop_map(|pairs| MessageAttributes::from_pairs(pairs).unwrap())
}

pub fn receipt() -> impl Strategy<Value = Receipt> {
    (
        any::<u32>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(
            |(incarnation, shard, slot, generation, delivery, check)| Receipt {
                incarnation,
                shard,
                slot,
                generation,
                delivery,
                check,
            },
        )
}

fn message_id() -> impl Strategy<Value = MessageId> {
    any::<u128>().prop_map(MessageId)
}

/// A `u32` option whose `Some` never collides with the "default" marker.
fn opt_u32_not_max() -> impl Strategy<Value = Option<u32>> {
    option::of(0..u32::MAX)
}

pub fn send_entry() -> impl Strategy<Value = SendEntry> {
    (
        bytes(64),
        opt_u32_not_max(),
        option::of(vec(any::<u8>(), 1..=128).prop_map(Bytes::from)),
        attributes(),
        option::of("[!-~]{1,128}"),
    )
        .prop_map(|(body, delay_ms, dedup_key, attributes, group)| SendEntry {
            body,
            delay: delay_ms.map(Millis::new),
            dedup_key,
            attributes,
            group: group.map(|g| MessageGroupId::new(&g).expect("the pattern is a valid id")),
        })
}

fn redrive() -> impl Strategy<Value = RedrivePolicy> {
    (queue_name(), any::<u16>()).prop_map(|(name, max_receives)| RedrivePolicy {
        dead_letter_queue: name.to_string(),
        max_receives,
    })
}

fn backoff() -> impl Strategy<Value = Backoff> {
    (any::<u32>(), any::<u32>()).prop_map(|(base, max)| Backoff::new(base.into(), max.into()))
}

/// Set when `value` is given, else clear or keep.
fn setting<T>(value: Option<T>, clear: bool) -> Setting<T> {
    match value {
        Some(v) => Setting::Set(v),
        None if clear => Setting::Clear,
        None => Setting::Keep,
    }
}

pub fn attribute_update() -> impl Strategy<Value = AttributeUpdate> {
    (
        (
            option::of(any::<u32>()),
            option::of(any::<u32>()),
            option::of(any::<u32>()),
            option::of(any::<u32>()),
            option::of(any::<u32>()),
        ),
        (
            option::of(redrive()),
            option::of(any::<u64>()),
            option::of(any::<u32>()),
            option::of(backoff()),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            labels_update(),
            labels_update(),
            option::of(kind()),
            option::of(any::<bool>()),
        ),
    )
        .prop_map(
            |(
                (vt, d, ret, mbm, rw),
                (redrive, max_depth, dw, backoff, cr, cb),
                (tags, annotations, kind, content_based_dedup),
            )| AttributeUpdate {
                visibility_timeout: vt.map(Millis::new),
                delay: d.map(Millis::new),
                retention: ret.map(Millis::new),
                message_bytes_max: mbm,
                receive_wait: rw.map(Millis::new),
                redrive: setting(redrive, cr),
                max_depth,
                dedup_window: dw.map(Millis::new),
                backoff: setting(backoff, cb),
                labels: if tags.is_empty() && annotations.is_empty() {
                    None
                } else {
                    Some(Box::new(LabelChanges { tags, annotations }))
                },
                kind,
                content_based_dedup,
            },
        )
}

fn kind() -> impl Strategy<Value = QueueKind> {
    prop_oneof![Just(QueueKind::Standard), Just(QueueKind::Fifo)]
}

fn labels_update() -> impl Strategy<Value = LabelsUpdate> {
    (
        vec(("[a-zé]{0,5}", "[a-zé ]{0,8}"), 0..3),
        vec("[a-z]{0,5}", 0..2),
    )
        .prop_map(|(set, remove)| LabelsUpdate { set, remove })
}

fn labels() -> impl Strategy<Value = Labels> {
    vec(("[a-zé]{0,5}", "[a-zé ]{0,8}"), 0..3).prop_map(|pairs| pairs.into_iter().collect())
}

pub fn queue_attributes() -> impl Strategy<Value = QueueAttributes> {
    (
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            option::of(redrive()),
            option::of(any::<u64>()),
            any::<u32>(),
            option::of(backoff()),
        ),
        (labels(), labels(), kind(), any::<bool>()),
    )
        .prop_map(
            |(
                (vt, d, ret, mbm, rw),
                (redrive, max_depth, dw, backoff),
                (tags, annotations, kind, content_based_dedup),
            )| {
                QueueAttributes {
                    visibility_timeout: vt.into(),
                    delay: d.into(),
                    retention: ret.into(),
                    message_bytes_max: mbm,
                    receive_wait: rw.into(),
                    redrive,
                    max_depth,
                    dedup_window: dw.into(),
                    backoff,
                    tags,
                    annotations,
                    kind,
                    content_based_dedup,
                }
            },
        )
}

fn queue_stats() -> impl Strategy<Value = QueueStats> {
    proptest::array::uniform14(any::<u64>()).prop_map(|v| QueueStats {
        visible: v[0],
        delayed: v[1],
        in_flight: v[2],
        sent: v[3],
        moved_in: v[4],
        received: v[5],
        deleted: v[6],
        redelivered: v[7],
        released: v[8],
        dead_lettered: v[9],
        redriven: v[10],
        dropped: v[11],
        purged: v[12],
        oldest_age_ms: v[13],
    })
}

pub fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL.to_vec())
}

fn batch_max() -> impl Strategy<Value = u16> {
    prop_oneof![1..=16u16, 1..=1024u16]
}

pub fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u16>(), bytes(1024), any::<u32>()).prop_map(|(version, token, timeout)| {
            // Version 1 has no session timeout field: it decodes as 0.
            let session_timeout_ms = if version >= 2 { timeout } else { 0 };
            Request::Hello(HelloRequest {
                version,
                token,
                session_timeout_ms,
            })
        }),
        any::<u64>().prop_map(|nonce| Request::Ping { nonce }),
        (queue_name(), attribute_update()).prop_map(|(queue, attributes)| Request::CreateQueue(
            QueueAttributesRequest { queue, attributes }
        )),
        queue_name().prop_map(|queue| Request::DeleteQueue { queue }),
        (
            "[A-Za-z0-9_.-]{0,80}",
            proptest::option::of("[A-Za-z0-9_.-]{0,80}")
        )
            .prop_map(|(prefix, after)| Request::ListQueues { prefix, after }),
        queue_name().prop_map(|queue| Request::GetQueue { queue }),
        (queue_name(), attribute_update()).prop_map(|(queue, attributes)| Request::SetQueue(
            QueueAttributesRequest { queue, attributes }
        )),
        queue_name().prop_map(|queue| Request::PurgeQueue { queue }),
        (queue_name(), vec(send_entry(), 1..=BATCH))
            .prop_map(|(queue, entries)| Request::Send(SendRequest::new(queue, &entries).unwrap())),
        (
            queue_name(),
            batch_max(),
            opt_u32_not_max(),
            opt_u32_not_max(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(
                    queue,
                    max_messages,
                    visibility_timeout_ms,
                    wait_ms,
                    bind_leases,
                    with_source,
                )| {
                    Request::Receive(ReceiveRequest {
                        queue,
                        max_messages,
                        visibility_timeout_ms,
                        wait_ms,
                        bind_leases,
                        with_source,
                    })
                }
            ),
        (queue_name(), vec(receipt(), 1..=64))
            .prop_map(|(queue, receipts)| Request::Delete(DeleteRequest { queue, receipts })),
        (queue_name(), vec((receipt(), any::<u32>()), 1..=64)).prop_map(|(queue, entries)| {
            Request::ChangeVisibility(ChangeVisibilityRequest {
                queue,
                entries: entries
                    .into_iter()
                    .map(|(receipt, visibility_timeout_ms)| VisibilityChange {
                        receipt,
                        visibility_timeout_ms,
                    })
                    .collect(),
            })
        }),
        (
            queue_name(),
            any::<u32>(),
            proptest::option::of(queue_name())
        )
            .prop_map(|(queue, max_messages, to)| Request::Redrive {
                queue,
                max_messages,
                to
            }),
        (queue_name(), batch_max()).prop_map(|(queue, max_messages)| Request::Peek {
            queue,
            max_messages
        }),
        Just(Request::ServerStats),
        (0..=sluice_protocol::limits::ADVANCE_CLOCK_MS_MAX)
            .prop_map(|by_ms| Request::AdvanceClock { by_ms }),
    ]
}

pub fn received_message() -> impl Strategy<Value = ReceivedMessage> {
    (
        message_id(),
        receipt(),
        any::<u32>(),
        any::<u64>(),
        0..u32::MAX,
        attributes(),
        bytes(64),
        option::of("[!-~]{1,128}"),
    )
        .prop_map(
            |(
                id,
                receipt,
                receive_count,
                sent_at_ms,
                first_received_delta_ms,
                attributes,
                body,
                group,
            )| ReceivedMessage {
                id,
                receipt,
                receive_count,
                sent_at_ms,
                first_received_delta_ms,
                attributes,
                body,
                group: group.map(|g| MessageGroupId::new(&g).expect("the pattern is a valid id")),
            },
        )
}

fn peeked_message() -> impl Strategy<Value = PeekedMessage> {
    (
        message_id(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        opt_u32_not_max(),
        attributes(),
        bytes(64),
    )
        .prop_map(
            |(
                id,
                receive_count,
                delivery,
                sent_at_ms,
                first_received_delta_ms,
                attributes,
                body,
            )| PeekedMessage {
                id,
                receive_count,
                delivery,
                sent_at_ms,
                first_received_delta_ms,
                attributes,
                body,
            },
        )
}

fn statuses() -> impl Strategy<Value = Vec<Result<(), ErrorCode>>> {
    vec(
        prop_oneof![Just(Ok(())), error_code().prop_map(Err)],
        0..=64,
    )
}

pub fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (
            any::<u16>(),
            short_string(60),
            any::<u16>(),
            any::<u16>(),
            (any::<u32>(), any::<u16>(), any::<u32>(), any::<u32>())
        )
            .prop_map(|(version, server_version, shard, shards, l)| Reply::Hello(
                HelloReply {
                    version,
                    server_version,
                    shard,
                    shards,
                    limits: ServerLimits {
                        frame_bytes_max: l.0,
                        batch_entries_max: l.1,
                        requests_in_flight_max: l.2,
                        receive_wait_ms_max: l.3,
                    },
                }
            )),
        any::<u64>().prop_map(|nonce| Reply::Pong { nonce }),
        any::<bool>().prop_map(|created| Reply::CreateQueue { created }),
        Just(Reply::DeleteQueue),
        (
            vec(queue_name(), 0..=BATCH),
            proptest::option::of(any::<bool>())
        )
            .prop_map(|(queues, more)| Reply::ListQueues { queues, more }),
        (
            queue_name(),
            queue_attributes(),
            queue_stats(),
            proptest::option::of((any::<u64>(), any::<u64>()).prop_map(
                |(created_ms, modified_ms)| QueueTimes {
                    created_ms,
                    modified_ms
                }
            ))
        )
            .prop_map(|(queue, attributes, stats, times)| {
                Reply::GetQueue(Box::new(QueueInfo {
                    queue,
                    attributes,
                    stats,
                    times,
                }))
            }),
        Just(Reply::SetQueue),
        any::<u64>().prop_map(|purged| Reply::PurgeQueue { purged }),
        vec(
            prop_oneof![
                (message_id(), any::<bool>())
                    .prop_map(|(id, duplicate)| Ok(SendOutcome { id, duplicate })),
                error_code().prop_map(Err),
            ],
            0..=64
        )
        .prop_map(|results| Reply::Send { results }),
        vec(received_message(), 0..=BATCH).prop_map(|messages| Reply::Receive {
            messages: ReceivedBatch::from_messages(messages.iter().map(ReceivedMessage::as_view))
                .unwrap()
        }),
        statuses().prop_map(|results| Reply::Delete { results }),
        statuses().prop_map(|results| Reply::ChangeVisibility { results }),
        (any::<u64>(), any::<u64>()).prop_map(|(moved, stayed)| Reply::Redrive { moved, stayed }),
        (any::<u64>(), any::<u64>()).prop_map(|(elapsed_ms, wall_ms)| Reply::AdvanceClock {
            elapsed_ms,
            wall_ms
        }),
        (
            vec(peeked_message(), 0..=BATCH),
            proptest::option::of(any::<bool>())
        )
            .prop_map(|(messages, cut)| Reply::Peek { messages, cut }),
        (
            short_string(60),
            short_string(60),
            any::<u16>(),
            vec((short_string(60), any::<u64>()), 0..=BATCH)
        )
            .prop_map(|(server_version, io_backend, shards, counters)| {
                Reply::ServerStats(ServerStatsReply {
                    server_version,
                    io_backend,
                    shards,
                    counters: counters
                        .into_iter()
                        .map(|(name, value)| Counter { name, value })
                        .collect(),
                })
            }),
        (error_code(), short_string(200))
            .prop_map(|(code, message)| Reply::Error(WireError::new(code, message))),
    ]
}
