//! Serving a request once HELLO succeeded: routing it to the engine or
//! answering it here, answering what the engine returns (a RECEIVE's reply
//! built to fit one frame), and keeping the bound leases in step.

use sluice_protocol::reply::RECEIVE_REPLY_FIXED_BYTES;
use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, ErrorCode, QueueName, ReceiveReplyWriter,
    ReceivedMessage, Reply, Request, VisibilityChange,
};

use super::{Asked, Deferred, EngineAccess, Phase, Session, SessionContext, Submitted};
use crate::engine::{Op, OpResult};
use crate::server::clock::{EngineTime, NotManual};
use crate::server::convert::{self, Route};
use crate::server::shared::ShardStats;
use sluice_protocol::{Labels, QueueKind};

impl Session {
    pub(super) fn dispatch(
        &mut self,
        request_id: u32,
        request: Request,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        let (receive_queue, bind) = match &request {
            Request::Receive(r) => (Some(r.queue.clone()), r.bind_leases),
            _ => (None, false),
        };
        if !self.bound.is_empty() {
            self.forget_ended_leases(&request);
        }
        match convert::route(request) {
            Route::Engine(op) => match engine.submit(op) {
                Submitted::Done(result) => {
                    self.answer(request_id, receive_queue, bind, result, cx.stats, engine);
                }
                Submitted::Later(ticket) => {
                    if receive_queue.is_none() {
                        self.barrier = Some(ticket);
                    }
                    self.deferred.push(Deferred {
                        ticket,
                        request_id,
                        receive_queue,
                        bind,
                        started: self.serving.take(),
                    });
                }
            },
            Route::Ping { nonce } => self.reply(request_id, &Reply::Pong { nonce }, cx.stats),
            Route::ServerStats => {
                self.ask(Asked::ServerStats { request_id });
            }
            Route::AdvanceClock { by_ms } => {
                self.ask(Asked::AdvanceClock { request_id, by_ms });
            }
            Route::Hello => self.reply(
                request_id,
                &Reply::error(
                    ErrorCode::InvalidArgument,
                    "HELLO was already answered on this connection",
                ),
                cx.stats,
            ),
        }
    }

    /// The server moved its manual clock for an `ADVANCE_CLOCK` (or could
    /// not): the reply waits until every shard reached the new time.
    pub(super) fn on_clock_advanced(
        &mut self,
        request_id: u32,
        moved: Result<(u64, EngineTime), NotManual>,
        cx: &SessionContext<'_>,
    ) {
        match moved {
            Ok((elapsed_ms, now)) => {
                let reply = Reply::AdvanceClock {
                    elapsed_ms,
                    wall_ms: now.wall_ms,
                };
                self.clock_wait = Some((request_id, now.now_ns, reply));
            }
            Err(e) => self.reply(
                request_id,
                &Reply::error(ErrorCode::Unsupported, e.to_string()),
                cx.stats,
            ),
        }
    }

    /// A DELETE or a release (visibility 0) ends the leases it names: they
    /// are bound no more (see `bound_leases.rs` for why on the request).
    pub(super) fn forget_ended_leases(&mut self, request: &Request) {
        match request {
            Request::Delete(r) => {
                for receipt in &r.receipts {
                    self.bound.forget(&r.queue, receipt);
                }
            }
            Request::ChangeVisibility(r) => {
                for e in r.entries.iter().filter(|e| e.visibility_timeout_ms == 0) {
                    self.bound.forget(&r.queue, &e.receipt);
                }
            }
            _ => {}
        }
    }

    /// Hands the bound leases to the engine to release (those still
    /// current): the connection is closing.
    pub(super) fn release_bound(&mut self, engine: &mut dyn EngineAccess) {
        if self.bound.is_empty() {
            return;
        }
        tracing::debug!(
            peer = %self.peer,
            leases = self.bound.len(),
            "connection closed: releasing its bound leases"
        );
        for (queue, receipts) in self.bound.take() {
            engine.submit_unanswered(Op::Abandon(DeleteRequest { queue, receipts }));
        }
    }

    pub(super) fn answer(
        &mut self,
        request_id: u32,
        receive_queue: Option<QueueName>,
        bind: bool,
        result: OpResult,
        stats: &ShardStats,
        engine: &mut dyn EngineAccess,
    ) {
        if let OpResult::Received(messages) = result {
            self.answer_receive(request_id, receive_queue, bind, &messages, stats, engine);
            engine.recycle(OpResult::Received(messages));
            return;
        }
        let mut reply = convert::to_reply(result);
        match &mut reply {
            // Version 3 says whether messages were left out.
            Reply::Peek { cut, .. } if self.version >= 3 => *cut = Some(false),
            // Labels and times are version 4's: an older client's decoder
            // refuses the labels' bits and the times' trailing bytes.
            Reply::GetQueue(info) if self.version < 4 => {
                info.attributes.tags = Labels::new();
                info.attributes.annotations = Labels::new();
                info.times = None;
                info.attributes.kind = QueueKind::Standard;
                info.attributes.content_based_dedup = false;
            }
            // A queue's kind is version 5's (attribute bits 11 and 12).
            Reply::GetQueue(info) if self.version < 5 => {
                info.attributes.kind = QueueKind::Standard;
                info.attributes.content_based_dedup = false;
            }
            _ => {}
        }
        let dropped = reply.fit_frame(self.decoder.frame_bytes_max() as usize);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "a reply was above the frame limit and lost its last entries"
            );
        }
        self.reply(request_id, &reply, stats);
        if let Some(storage) = convert::into_storage(reply) {
            engine.recycle(storage);
        }
    }

    /// Writes a RECEIVE reply straight into the output. The engine budgets
    /// a receive to fit one frame; should a message not fit anyway (or the
    /// connection be closing), it is released at once rather than left to
    /// wait out a lease nobody holds.
    pub(super) fn answer_receive(
        &mut self,
        request_id: u32,
        queue: Option<QueueName>,
        bind: bool,
        messages: &[ReceivedMessage],
        stats: &ShardStats,
        engine: &mut dyn EngineAccess,
    ) {
        let mut undelivered = Vec::new();
        if self.phase == Phase::Closing {
            undelivered.extend(messages.iter().map(|m| m.receipt));
        } else {
            let frame_bytes_max = self.decoder.frame_bytes_max();
            // Room for the whole reply before writing it. Were the buffer
            // grown message by message, or with the replies of this turn
            // still in it, each growth would copy all it holds into a new
            // allocation. Rather, what is there goes to the io layer now, as
            // its own buffer of the same gathered send.
            let reply_bytes = messages
                .iter()
                .fold(RECEIVE_REPLY_FIXED_BYTES, |n, m| {
                    n.saturating_add(m.encoded_len())
                })
                .min(frame_bytes_max as usize);
            if !self.out.is_empty() && self.out.capacity() - self.out.len() < reply_bytes {
                self.flush();
            }
            self.out.reserve(reply_bytes);
            let mut w = ReceiveReplyWriter::begin(&mut self.out, request_id, frame_bytes_max);
            let mut delivered = 0;
            // Groups are version 5's: an older client's decoder refuses
            // the flag that announces one.
            let with_groups = self.version >= 5;
            for m in messages {
                if undelivered.is_empty() && w.push_message(&mut self.out, m, with_groups) {
                    delivered += 1;
                } else {
                    undelivered.push(m.receipt);
                }
            }
            w.finish(&mut self.out);
            self.served(stats);
            if let Some(queue) = queue.as_ref().filter(|_| bind && delivered > 0) {
                self.bound
                    .bind(queue, messages[..delivered].iter().map(|m| m.receipt));
            }
        }
        let Some(queue) = queue.filter(|_| !undelivered.is_empty()) else {
            return;
        };
        tracing::warn!(
            messages = undelivered.len(),
            "received messages could not be delivered; released"
        );
        let entries = undelivered
            .into_iter()
            .map(|receipt| VisibilityChange {
                receipt,
                visibility_timeout_ms: 0,
            })
            .collect();
        engine.submit_unanswered(Op::ChangeVisibility(ChangeVisibilityRequest {
            queue,
            entries,
        }));
    }
}
