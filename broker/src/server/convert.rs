//! Requests to engine operations and engine results to replies: a mapping
//! of variants, nothing converted or copied. The engine speaks the
//! protocol's vocabulary, and its per-entry errors have the layout of the
//! wire's codes, so a batch's results become the reply's in place.

use sluice_protocol::{ReceivedBatch, ReceivedMessage, Reply, Request};

use crate::engine::{EntryError, Op, OpResult};

/// Where a request goes: to the engine as an operation, or to the session,
/// which answers HELLO, PING and `SERVER_STATS` itself.
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
}

/// Where `request` goes.
pub fn route(request: Request) -> Route {
    Route::Engine(match request {
        Request::CreateQueue(r) => Op::CreateQueue(r),
        Request::SetQueue(r) => Op::SetQueue(r),
        Request::DeleteQueue { queue } => Op::DeleteQueue { queue },
        Request::ListQueues { prefix } => Op::ListQueues { prefix },
        Request::GetQueue { queue } => Op::GetQueue { queue },
        Request::PurgeQueue { queue } => Op::PurgeQueue { queue },
        Request::Send(r) => Op::Send(r),
        Request::Receive(r) => Op::Receive(r),
        Request::Delete(r) => Op::Delete(r),
        Request::ChangeVisibility(r) => Op::ChangeVisibility(r),
        Request::Redrive {
            queue,
            max_messages,
        } => Op::Redrive {
            queue,
            max: max_messages,
        },
        Request::Peek {
            queue,
            max_messages,
        } => Op::Peek {
            queue,
            max: max_messages,
        },
        Request::Hello(_) => return Route::Hello,
        Request::Ping { nonce } => return Route::Ping { nonce },
        Request::ServerStats => return Route::ServerStats,
    })
}

/// The reply to `result`. (A session writes RECEIVE replies straight from
/// the messages with `ReceiveReplyWriter`; the batch built here copies them.)
pub fn to_reply(result: OpResult) -> Reply {
    let code = |r: Result<(), EntryError>| r.map_err(EntryError::code);
    match result {
        OpResult::Error(e) => Reply::Error(e.into()),
        OpResult::QueueCreated { created, .. } => Reply::CreateQueue { created },
        OpResult::QueueUpdated => Reply::SetQueue,
        OpResult::QueueDeleted => Reply::DeleteQueue,
        OpResult::Queues(queues) => Reply::ListQueues { queues },
        OpResult::Queue(info) => Reply::GetQueue(info),
        OpResult::Purged { messages } => Reply::PurgeQueue { purged: messages },
        OpResult::Sent(results) => Reply::Send {
            results: results
                .into_iter()
                .map(|r| r.map_err(EntryError::code))
                .collect(),
        },
        OpResult::Received(messages) => {
            match ReceivedBatch::from_messages(messages.iter().map(ReceivedMessage::as_view)) {
                Ok(messages) => Reply::Receive { messages },
                Err(e) => Reply::error(sluice_protocol::ErrorCode::Internal, e.to_string()),
            }
        }
        OpResult::Deleted(results) => Reply::Delete {
            results: results.into_iter().map(code).collect(),
        },
        OpResult::VisibilityChanged(results) => Reply::ChangeVisibility {
            results: results.into_iter().map(code).collect(),
        },
        OpResult::Redriven { moved, stayed } => Reply::Redrive { moved, stayed },
        OpResult::Peeked(messages) => Reply::Peek { messages },
    }
}

#[cfg(test)]
mod tests {
    use sluice_protocol::{ErrorCode, MessageId, SendOutcome};

    use super::*;

    #[test]
    fn batch_results_become_the_reply_in_place() {
        let sent = vec![
            Ok(SendOutcome {
                id: MessageId(1),
                duplicate: false
            });
            64
        ];
        let at = sent.as_ptr() as usize;
        let Reply::Send { results } = to_reply(OpResult::Sent(sent)) else {
            unreachable!()
        };
        assert_eq!(results.as_ptr() as usize, at, "no new vector");
        let deleted = vec![Ok(()), Err(EntryError::Gone), Err(EntryError::MemoryFull)];
        let at = deleted.as_ptr() as usize;
        let Reply::Delete { results } = to_reply(OpResult::Deleted(deleted)) else {
            unreachable!()
        };
        assert_eq!(results.as_ptr() as usize, at, "no new vector");
        assert_eq!(
            results,
            [Ok(()), Err(ErrorCode::Gone), Err(ErrorCode::Busy)]
        );
    }

    #[test]
    fn the_session_s_own_requests_stay_with_it() {
        assert_eq!(route(Request::Ping { nonce: 3 }), Route::Ping { nonce: 3 });
        assert_eq!(route(Request::ServerStats), Route::ServerStats);
        let get = Request::GetQueue {
            queue: sluice_protocol::QueueName::from_static("q"),
        };
        assert!(matches!(route(get), Route::Engine(Op::GetQueue { .. })));
    }
}
