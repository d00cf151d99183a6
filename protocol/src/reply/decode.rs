//! [`Reply::decode`]: one small function per reply layout, chosen by opcode.

use bytes::Bytes;

use super::{Counter, HelloReply, QueueInfo, QueueTimes, Reply, ServerLimits, ServerStatsReply};
use crate::codec::{DecodeError, Reader, capacity_for, read_status};
use crate::error::{ErrorCode, WireError};
use crate::frame::opcode;
use crate::limits::{BATCH_ENTRIES_MAX, ERROR_MESSAGE_BYTES_MAX};
use crate::message::{PEEK_ENTRY_OVERHEAD_BYTES, PeekedMessage, ReceivedBatch, SendOutcome};
use crate::name::QueueName;
use crate::queue_attributes::{QueueAttributes, QueueStats};
use crate::receipt::MessageId;

impl Reply {
    /// Decodes a reply's payload. Bodies share `payload`'s buffer.
    ///
    /// # Errors
    /// [`DecodeError`]: `UnknownOpcode` for an opcode that is not a reply;
    /// counts above 1,024 (`BatchTooLarge`), unknown error codes, bad names,
    /// malformed or trailing bytes.
    pub fn decode(opcode: u8, payload: Bytes) -> Result<Reply, DecodeError> {
        let mut r = Reader::new(payload);
        let reply = match opcode {
            opcode::HELLO_REPLY => decode_hello(&mut r)?,
            opcode::PONG => Reply::Pong {
                nonce: r.u64("nonce")?,
            },
            opcode::CREATE_QUEUE_REPLY => Reply::CreateQueue {
                created: r.bool("created")?,
            },
            opcode::DELETE_QUEUE_REPLY => Reply::DeleteQueue,
            opcode::LIST_QUEUES_REPLY => decode_list_queues(&mut r)?,
            opcode::GET_QUEUE_REPLY => Reply::GetQueue(Box::new(QueueInfo {
                queue: QueueName::decode(&mut r, "queue")?,
                attributes: QueueAttributes::decode(&mut r)?,
                stats: read_stats(&mut r)?,
                // Version 4 ends with the queue's times.
                times: if r.is_empty() {
                    None
                } else {
                    Some(QueueTimes {
                        created_ms: r.u64("created_ms")?,
                        modified_ms: r.u64("modified_ms")?,
                    })
                },
            })),
            opcode::SET_QUEUE_REPLY => Reply::SetQueue,
            opcode::PURGE_QUEUE_REPLY => Reply::PurgeQueue {
                purged: r.u64("purged")?,
            },
            opcode::SEND_REPLY => decode_send(&mut r)?,
            opcode::RECEIVE_REPLY => {
                let count = r.reply_count("message count", BATCH_ENTRIES_MAX)?;
                Reply::Receive {
                    messages: ReceivedBatch::decode(&mut r, count)?,
                }
            }
            opcode::DELETE_REPLY => Reply::Delete {
                results: read_statuses(&mut r)?,
            },
            opcode::CHANGE_VISIBILITY_REPLY => Reply::ChangeVisibility {
                results: read_statuses(&mut r)?,
            },
            opcode::REDRIVE_REPLY => Reply::Redrive {
                moved: r.u64("moved")?,
                stayed: r.u64("stayed")?,
            },
            opcode::PEEK_REPLY => decode_peek(&mut r)?,
            opcode::SERVER_STATS_REPLY => decode_server_stats(&mut r)?,
            opcode::ADVANCE_CLOCK_REPLY => Reply::AdvanceClock {
                elapsed_ms: r.u64("elapsed_ms")?,
                wall_ms: r.u64("wall_ms")?,
            },
            opcode::ERROR => decode_error(&mut r)?,
            other => return Err(DecodeError::UnknownOpcode(other)),
        };
        r.finish()?;
        Ok(reply)
    }
}

fn decode_hello(r: &mut Reader) -> Result<Reply, DecodeError> {
    Ok(Reply::Hello(HelloReply {
        version: r.u16("version")?,
        server_version: r.string_u8("server_version")?,
        shard: r.u16("shard")?,
        shards: r.u16("shards")?,
        limits: ServerLimits {
            frame_bytes_max: r.u32("frame_bytes_max")?,
            batch_entries_max: r.u16("batch_entries_max")?,
            requests_in_flight_max: r.u32("requests_in_flight_max")?,
            receive_wait_ms_max: r.u32("receive_wait_ms_max")?,
        },
    }))
}

fn decode_list_queues(r: &mut Reader) -> Result<Reply, DecodeError> {
    let count = r.u32("queue count")?;
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let mut queues = Vec::with_capacity(capacity_for(count, r.remaining(), 2));
    for _ in 0..count {
        queues.push(QueueName::decode(r, "queue")?);
    }
    // A page (protocol version 3) ends with whether more follow.
    let more = if r.remaining() > 0 {
        Some(r.bool("more")?)
    } else {
        None
    };
    Ok(Reply::ListQueues { queues, more })
}

fn decode_send(r: &mut Reader) -> Result<Reply, DecodeError> {
    let count = r.reply_count("result count", BATCH_ENTRIES_MAX)?;
    let mut results = Vec::with_capacity(capacity_for(count.into(), r.remaining(), 2));
    for _ in 0..count {
        results.push(match read_status(r, "status")? {
            Ok(()) => Ok(SendOutcome {
                id: MessageId(r.u128("id")?),
                duplicate: r.bool("duplicate")?,
            }),
            Err(code) => Err(code),
        });
    }
    Ok(Reply::Send { results })
}

fn decode_peek(r: &mut Reader) -> Result<Reply, DecodeError> {
    let count = r.reply_count("message count", BATCH_ENTRIES_MAX)?;
    let mut messages = Vec::with_capacity(capacity_for(
        count.into(),
        r.remaining(),
        PEEK_ENTRY_OVERHEAD_BYTES,
    ));
    for _ in 0..count {
        messages.push(PeekedMessage::decode(r)?);
    }
    // Version 3 ends with whether messages were left out.
    let cut = if r.remaining() > 0 {
        Some(r.bool("cut")?)
    } else {
        None
    };
    Ok(Reply::Peek { messages, cut })
}

fn decode_server_stats(r: &mut Reader) -> Result<Reply, DecodeError> {
    let server_version = r.string_u8("server_version")?;
    let io_backend = r.string_u8("io_backend")?;
    let shards = r.u16("shards")?;
    let count = usize::from(r.u16("counter count")?);
    let mut counters = Vec::with_capacity(capacity_for(count, r.remaining(), 1 + 8));
    for _ in 0..count {
        counters.push(Counter {
            name: r.string_u8("counter name")?,
            value: r.u64("counter value")?,
        });
    }
    Ok(Reply::ServerStats(ServerStatsReply {
        server_version,
        io_backend,
        shards,
        counters,
    }))
}

fn decode_error(r: &mut Reader) -> Result<Reply, DecodeError> {
    let code_offset = r.offset();
    let Err(code) = read_status(r, "code")? else {
        return Err(DecodeError::InvalidValue {
            offset: code_offset,
            field: "code",
            reason: "0 (success) in an error reply",
        });
    };
    let len_offset = r.offset();
    let len = usize::from(r.u16("msg_len")?);
    if len > ERROR_MESSAGE_BYTES_MAX {
        return Err(DecodeError::TooLong {
            offset: len_offset,
            field: "error message",
            len,
            max: ERROR_MESSAGE_BYTES_MAX,
        });
    }
    Ok(Reply::Error(WireError {
        code,
        message: r.string(len, "error message")?,
    }))
}

fn read_statuses(r: &mut Reader) -> Result<Vec<Result<(), ErrorCode>>, DecodeError> {
    let count = r.reply_count("result count", BATCH_ENTRIES_MAX)?;
    let mut results = Vec::with_capacity(capacity_for(count.into(), r.remaining(), 2));
    for _ in 0..count {
        results.push(read_status(r, "status")?);
    }
    Ok(results)
}

fn read_stats(r: &mut Reader) -> Result<QueueStats, DecodeError> {
    Ok(QueueStats {
        visible: r.u64("stats.visible")?,
        delayed: r.u64("stats.delayed")?,
        in_flight: r.u64("stats.in_flight")?,
        sent: r.u64("stats.sent")?,
        moved_in: r.u64("stats.moved_in")?,
        received: r.u64("stats.received")?,
        deleted: r.u64("stats.deleted")?,
        redelivered: r.u64("stats.redelivered")?,
        released: r.u64("stats.released")?,
        dead_lettered: r.u64("stats.dead_lettered")?,
        redriven: r.u64("stats.redriven")?,
        dropped: r.u64("stats.dropped")?,
        purged: r.u64("stats.purged")?,
        oldest_age_ms: r.u64("stats.oldest_age_ms")?,
    })
}
