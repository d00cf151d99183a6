//! What the sessions' unit tests share (the binary protocol's, the SQS
//! door's and the metrics endpoint's): the shard's session limits and a
//! scripted engine. Test code only.

use std::collections::VecDeque;

use sluice_protocol::limits::FRAME_BYTES_MAX_DEFAULT;
use sluice_protocol::{HelloReply, ServerLimits};

use super::{EngineAccess, SessionConfig, Submitted};
use crate::engine::{Op, OpResult};

/// Nanoseconds in a millisecond.
pub(crate) const MS: u64 = 1_000_000;
/// The time a test starts at.
pub(crate) const T0: u64 = 1_000 * MS;

/// The session limits the tests run with: small enough to reach (4
/// requests in flight, 64 KiB unsent), the protocol's default frame limit.
pub(crate) fn config() -> SessionConfig {
    SessionConfig {
        frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
        hello_frame_bytes_max: 4096,
        hello_timeout_ns: 10_000 * MS,
        frame_timeout_ns: 30_000 * MS,
        in_flight_max: 4,
        unsent_max: 64 * 1024,
        auth_token: None,
        hello: HelloReply {
            version: 1,
            server_version: "sluice test".into(),
            shard: 1,
            shards: 2,
            limits: ServerLimits {
                frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
                batch_entries_max: 1024,
                requests_in_flight_max: 4,
                receive_wait_ms_max: 20_000,
            },
        },
    }
}

/// An engine that answers what it is told to: each submit takes the next
/// scripted answer (`None`: later, under a new ticket), or answers at once
/// with a fitting empty result when nothing is scripted.
#[derive(Default)]
pub(crate) struct FakeEngine {
    pub script: VecDeque<Option<OpResult>>,
    pub submitted: Vec<Op>,
    pub unanswered: Vec<Op>,
    pub cancelled: Vec<u64>,
    pub recycled: Vec<OpResult>,
    pub next_ticket: u64,
}

impl FakeEngine {
    /// The next submit is answered later.
    pub fn later(&mut self) {
        self.script.push_back(None);
    }
}

impl EngineAccess for FakeEngine {
    fn submit(&mut self, op: Op) -> Submitted {
        let answer = self.script.pop_front().unwrap_or_else(|| {
            Some(match &op {
                Op::Delete(r) => OpResult::Deleted(vec![Ok(()); r.receipts.len()]),
                Op::Receive(_) => OpResult::Received(Vec::new()),
                Op::ListQueues { .. } => OpResult::Queues(Vec::new()),
                _ => OpResult::QueueUpdated,
            })
        });
        self.submitted.push(op);
        match answer {
            Some(result) => Submitted::Done(result),
            None => {
                self.next_ticket += 1;
                Submitted::Later(self.next_ticket)
            }
        }
    }

    fn submit_unanswered(&mut self, op: Op) {
        self.unanswered.push(op);
    }

    fn cancel(&mut self, ticket: u64) {
        self.cancelled.push(ticket);
    }

    fn recycle(&mut self, result: OpResult) {
        self.recycled.push(result);
    }
}
