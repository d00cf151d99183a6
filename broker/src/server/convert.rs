//! Requests to engine operations and engine results to replies: a mapping
//! of variants, nothing converted or copied. The engine speaks the
//! protocol's vocabulary, and its per-entry errors have the layout of the
//! wire's codes, so a batch's results become the reply's in place.

use sluice_protocol::{ErrorCode, ReceivedBatch, Reply, Request};

use crate::engine::{EntryError, Op, OpResult};

/// Where a request goes: to the engine as an operation, or to the session,
/// which answers HELLO, PING, `SERVER_STATS` and `ADVANCE_CLOCK` itself.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// An engine operation.
    Engine(Op),
    /// HELLO (answered once, when the connection opens).
    Hello,
    /// PING: a PONG with this nonce.
    Ping {
        /// Echoed by the PONG.
        nonce: u64,
    },
    /// `SERVER_STATS`.
    ServerStats,
    /// `ADVANCE_CLOCK`: move the server's manual clock.
    AdvanceClock {
        /// How far, in ms.
        by_ms: u64,
    },
}

/// Where `request` goes.
pub fn route(request: Request) -> Route {
    Route::Engine(match request {
        Request::CreateQueue(r) => Op::CreateQueue(r),
        Request::SetQueue(r) => Op::SetQueue(r),
        Request::DeleteQueue { queue } => Op::DeleteQueue { queue },
        Request::ListQueues { prefix, after } => Op::ListQueues { prefix, after },
        Request::GetQueue { queue } => Op::GetQueue { queue },
        Request::PurgeQueue { queue } => Op::PurgeQueue { queue },
        Request::Send(r) => Op::Send(r),
        Request::Receive(r) => Op::Receive(r),
        Request::Delete(r) => Op::Delete(r),
        Request::ChangeVisibility(r) => Op::ChangeVisibility(r),
        Request::Redrive {
            queue,
            max_messages,
            to,
        } => Op::Redrive {
            queue,
            max_messages,
            to,
        },
        Request::Peek {
            queue,
            max_messages,
        } => Op::Peek {
            queue,
            max_messages,
        },
        Request::Hello(_) => return Route::Hello,
        Request::Ping { nonce } => return Route::Ping { nonce },
        Request::ServerStats => return Route::ServerStats,
        Request::AdvanceClock { by_ms } => return Route::AdvanceClock { by_ms },
    })
}

/// The reply to `result`. (A session writes RECEIVE replies straight from
/// the messages with `ReceiveReplyWriter`; the batch built here copies them.)
pub fn to_reply(result: OpResult) -> Reply {
    match result {
        OpResult::Error(e) => Reply::Error(e.into()),
        OpResult::QueueCreated { created, .. } => Reply::CreateQueue { created },
        OpResult::QueueUpdated => Reply::SetQueue,
        OpResult::QueueDeleted => Reply::DeleteQueue,
        OpResult::Queues(queues) => Reply::ListQueues { queues, more: None },
        OpResult::QueuesPage { names, more } => Reply::ListQueues {
            queues: names,
            more: Some(more),
        },
        OpResult::Queue(info) => Reply::GetQueue(info),
        OpResult::Purged { messages } => Reply::PurgeQueue { purged: messages },
        OpResult::Sent(r) => Reply::Send { results: codes(r) },
        OpResult::Received(m) => {
            match ReceivedBatch::from_messages(m.iter().map(|m| m.as_view())) {
                Ok(messages) => Reply::Receive { messages },
                Err(e) => Reply::error(ErrorCode::Internal, e.to_string()),
            }
        }
        OpResult::Deleted(r) => Reply::Delete { results: codes(r) },
        OpResult::VisibilityChanged(r) => Reply::ChangeVisibility { results: codes(r) },
        OpResult::Redriven { moved, stayed } => Reply::Redrive { moved, stayed },
        OpResult::Peeked(messages) => Reply::Peek {
            messages,
            cut: None,
        },
    }
}

/// Per-entry results with their wire codes, in the same vector.
fn codes<T>(results: Vec<Result<T, EntryError>>) -> Vec<Result<T, ErrorCode>> {
    results
        .into_iter()
        .map(|r| r.map_err(EntryError::code))
        .collect()
}

/// A reply's vector of per-entry results, once the reply is written, as an
/// empty result the engine can fill again ([`crate::engine::Shard::recycle`]):
/// the same allocation, its entries dropped. `None` for other replies.
pub fn into_storage(reply: Reply) -> Option<OpResult> {
    match reply {
        Reply::Send { results } => Some(OpResult::Sent(emptied(results))),
        Reply::Delete { results } => Some(OpResult::Deleted(emptied(results))),
        Reply::ChangeVisibility { results } => Some(OpResult::VisibilityChanged(emptied(results))),
        _ => None,
    }
}

/// `results` emptied, as a vector of engine results: the wire codes and the
/// engine's errors have one layout, so this keeps the allocation.
fn emptied<T>(mut results: Vec<Result<T, ErrorCode>>) -> Vec<Result<T, EntryError>> {
    results.clear();
    results
        .into_iter()
        .map(|r| r.map_err(|_| EntryError::Gone))
        .collect()
}

#[cfg(test)]
mod tests {
    use sluice_protocol::{MessageId, SendOutcome};

    use super::*;

    #[test]
    fn nothing_is_converted_and_batch_results_stay_in_place() {
        let outcome = SendOutcome {
            id: MessageId(1),
            duplicate: false,
        };
        let sent = vec![Ok(outcome); 64];
        let at = sent.as_ptr() as usize;
        let reply = to_reply(OpResult::Sent(sent));
        assert!(matches!(reply, Reply::Send { results } if results.as_ptr() as usize == at));
        let deleted = vec![Ok(()), Err(EntryError::Gone), Err(EntryError::MemoryFull)];
        let at = deleted.as_ptr() as usize;
        let codes = [Ok(()), Err(ErrorCode::Gone), Err(ErrorCode::Busy)];
        let reply = to_reply(OpResult::Deleted(deleted));
        assert!(
            matches!(&reply, Reply::Delete { results } if results.as_ptr() as usize == at && *results == codes)
        );
        // Once written, the same vector goes back to the engine, empty.
        let Some(OpResult::Deleted(again)) = into_storage(reply) else {
            panic!("a DELETE reply's results are storage");
        };
        assert!(again.is_empty() && again.capacity() >= 3);
        assert_eq!(again.as_ptr() as usize, at);
        // The session's own requests stay with it.
        assert_eq!(route(Request::Ping { nonce: 3 }), Route::Ping { nonce: 3 });
        assert_eq!(route(Request::ServerStats), Route::ServerStats);
        let get = Request::GetQueue {
            queue: sluice_protocol::QueueName::from_static("q"),
        };
        assert!(matches!(route(get), Route::Engine(Op::GetQueue { .. })));
    }
}
