//! Operation dispatch: what each [`Op`] a shard is handed starts.

use sluice_protocol::limits::BATCH_ENTRIES_MAX;
use sluice_protocol::{QueueInfo, QueueName, QueueStats};

use super::Shard;
use super::gather::GatherAcc;
use crate::engine::error::EngineError;
use crate::engine::mesh::shard_msg::{GatherRequest, ReceiptAction};
use crate::engine::ops::{Op, OpResult};

impl Shard {
    /// REDRIVE: up to `max` messages of `queue`, to `to` or back to their
    /// sources, one shard after another.
    fn op_redrive(&mut self, ticket: u64, queue: &QueueName, max: u32, to: Option<&QueueName>) {
        let to = to.map(|t| self.partition_of(t)).transpose();
        match (self.partition_of(queue), to) {
            (Err(e), _) | (_, Err(e)) => self.finish_ticket(ticket, e.into()),
            (Ok(_), _) if max == 0 => {
                self.finish_ticket(ticket, EngineError::RedriveMaxZero.into());
            }
            (Ok(p), Ok(Some(t))) if t == p => {
                self.finish_ticket(ticket, EngineError::RedriveToItself.into());
            }
            (Ok(p), Ok(Some(t))) if self.part(p).attrs.kind != self.part(t).attrs.kind => {
                self.finish_ticket(ticket, EngineError::RedriveKind.into());
            }
            (Ok(p), Ok(t)) => {
                let inc = self.part(p).incarnation;
                let to = t.map_or(0, |t| self.part(t).incarnation);
                let acc = GatherAcc::Redrive {
                    moved: 0,
                    stayed: 0,
                    max,
                    to,
                };
                self.start_gather(ticket, inc, acc, GatherRequest::Redrive { max, to });
            }
        }
    }
    pub(super) fn handle(&mut self, ticket: u64, op: Op) {
        if matches!(
            op,
            Op::Send(_) | Op::Delete(_) | Op::PurgeQueue { .. } | Op::Redrive { .. }
        ) && let Some(e) = self.log_refusal()
        {
            self.finish_ticket(ticket, e.into());
            return;
        }
        match op {
            Op::CreateQueue(r) => {
                let result = match self.registry.create(&r.queue, &r.attributes, self.wall_ms) {
                    Ok((incarnation, created)) => OpResult::QueueCreated {
                        incarnation,
                        created,
                    },
                    Err(e) => OpResult::Error(e),
                };
                self.refresh();
                self.finish_ticket(ticket, result);
            }
            Op::SetQueue(r) => {
                let result = match self.registry.set(&r.queue, &r.attributes, self.wall_ms) {
                    Ok(()) => OpResult::QueueUpdated,
                    Err(e) => OpResult::Error(e),
                };
                self.refresh();
                self.finish_ticket(ticket, result);
            }
            Op::DeleteQueue { queue } => match self.registry.delete(&queue) {
                Err(e) => self.finish_ticket(ticket, OpResult::Error(e)),
                Ok(_) => {
                    self.refresh();
                    self.start_gather(ticket, 0, GatherAcc::Refresh, GatherRequest::Refresh);
                }
            },
            Op::ListQueues { prefix, after } => {
                let result = self.list_queues(&prefix, after.as_deref());
                self.finish_ticket(ticket, result);
            }
            Op::GetQueue { queue } => match self.partition_of(&queue) {
                Err(e) => self.finish_ticket(ticket, e.into()),
                Ok(p) => {
                    let part = self.part(p);
                    let info = QueueInfo {
                        queue: part.name.clone(),
                        attributes: part.attrs.clone(),
                        stats: QueueStats::default(),
                        times: self.registry.times(&queue),
                    };
                    let inc = part.incarnation;
                    self.start_gather(
                        ticket,
                        inc,
                        GatherAcc::Stats(Box::new(info)),
                        GatherRequest::Stats,
                    );
                }
            },
            Op::PurgeQueue { queue } => match self.partition_of(&queue) {
                Err(e) => self.finish_ticket(ticket, e.into()),
                Ok(p) => {
                    let inc = self.part(p).incarnation;
                    self.start_gather(ticket, inc, GatherAcc::Purged(0), GatherRequest::Purge);
                }
            },
            Op::Peek {
                queue,
                max_messages: max,
            } => match self.partition_of(&queue) {
                Err(e) => self.finish_ticket(ticket, e.into()),
                Ok(_) if max == 0 || usize::from(max) > BATCH_ENTRIES_MAX => {
                    self.finish_ticket(ticket, EngineError::MaxOutOfRange(u32::from(max)).into())
                }
                Ok(p) => {
                    let inc = self.part(p).incarnation;
                    let max = u32::from(max);
                    let acc = GatherAcc::Peek {
                        messages: Vec::new(),
                        max,
                    };
                    self.start_gather(ticket, inc, acc, GatherRequest::Peek { max });
                }
            },
            Op::Redrive {
                queue,
                max_messages,
                to,
            } => self.op_redrive(ticket, &queue, max_messages, to.as_ref()),
            Op::Send(r) => self.op_send(ticket, &r.queue, &r.entries),
            Op::Receive(r) => self.op_receive(
                ticket,
                &r.queue,
                u32::from(r.max_messages),
                r.visibility_timeout_ms,
                r.wait_ms,
                r.with_source,
            ),
            Op::Delete(r) => {
                let entries = r.receipts.iter().map(|&r| (r, 0));
                self.op_receipts(ticket, &r.queue, ReceiptAction::Delete, entries);
            }
            Op::Abandon(r) => {
                let entries = r.receipts.iter().map(|&r| (r, 0));
                self.op_receipts(ticket, &r.queue, ReceiptAction::Abandon, entries);
            }
            Op::ChangeVisibility(r) => {
                let entries = r
                    .entries
                    .iter()
                    .map(|e| (e.receipt, e.visibility_timeout_ms));
                self.op_receipts(ticket, &r.queue, ReceiptAction::ChangeVisibility, entries);
            }
        }
    }

    pub(super) fn batch_error(len: usize) -> Option<EngineError> {
        if len == 0 {
            Some(EngineError::EmptyBatch)
        } else if len > BATCH_ENTRIES_MAX {
            Some(EngineError::BatchTooLarge(len))
        } else {
            None
        }
    }
}

impl Shard {
    /// LIST: every name with `prefix`, or one page after `after`.
    fn list_queues(&self, prefix: &str, after: Option<&str>) -> OpResult {
        match after {
            None => OpResult::Queues(self.registry.list(prefix)),
            Some(after) => {
                let (names, more) = self.registry.list_page(prefix, after);
                OpResult::QueuesPage { names, more }
            }
        }
    }
}
