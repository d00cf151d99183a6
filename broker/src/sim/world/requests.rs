//! The requests the clients make: one at random each step, each kind with
//! its own maker.

use bytes::Bytes;
use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, MessageAttributes, MessageGroupId, Millis,
    QueueAttributesRequest, ReceiveRequest, SendEntry, SendRequest, VisibilityChange,
};

use super::World;
use crate::engine::Op;
use crate::engine::random::Rng;
use crate::sim::oracle::{Held, Kind, Pending, Snap};
use crate::sim::queues::{DLQ, SIDE, WORK, qn};

/// Groups a FIFO queue's sends spread over.
const FIFO_GROUPS: u64 = 4;

/// Makes `entry` one a FIFO queue takes: one of a few groups, no delay of
/// its own, and a dedup key of its own where the queue does not
/// deduplicate by content (dlq; work does, by the body, and bodies of one
/// length are one body there: duplicates within its window).
fn fifo_entry(entry: &mut SendEntry, queue: &str, rng: &mut Rng) {
    let g = rng.below_inclusive(FIFO_GROUPS - 1);
    entry.group = Some(
        MessageGroupId::new(&format!("group-{g}"))
            .unwrap_or_else(|_| unreachable!("a short printable group id is valid")),
    );
    entry.delay = None;
    if queue == DLQ && entry.dedup_key.is_none() {
        entry.dedup_key = Some(Bytes::from(rng.next_u64().to_le_bytes().to_vec()));
    }
}

impl World {
    pub(super) fn submit_random(&mut self) {
        let c = self.pick(self.clients.len());
        let shard = self.clients[c].shard;
        let queue = match self.rng.below_inclusive(9) {
            0..=5 => WORK,
            6..=7 => SIDE,
            _ => DLQ,
        };
        let incarnation = self.incarnation(queue);
        let (op, kind, what) = match self.rng.below_inclusive(999) {
            0..=249 => self.make_send(queue, incarnation),
            250..=499 => self.make_receive(queue),
            500..=749 => self.make_delete(),
            750..=869 => self.make_change_visibility(),
            870..=899 => (
                Op::Redrive {
                    queue: qn(DLQ),
                    max_messages: 1 + self.rng.below_inclusive(5) as u32,
                    to: None,
                },
                Kind::Redrive,
                "redrive".to_owned(),
            ),
            900..=929 => (
                Op::Peek {
                    queue: qn(queue),
                    max_messages: 1 + self.rng.below_inclusive(5) as u16,
                },
                Kind::Peek(queue),
                format!("peek {queue}"),
            ),
            930..=969 => (
                Op::GetQueue { queue: qn(queue) },
                Kind::Stats(queue),
                format!("stats {queue}"),
            ),
            970..=975 => (
                Op::PurgeQueue { queue: qn(queue) },
                Kind::Purge(queue),
                format!("purge {queue}"),
            ),
            976..=981 => {
                let incarnation = self.incarnation(SIDE);
                (
                    Op::DeleteQueue { queue: qn(SIDE) },
                    Kind::DeleteQueue { incarnation },
                    format!("delete queue {SIDE} (incarnation {incarnation})"),
                )
            }
            _ => {
                let attributes = self.attributes(SIDE, None);
                (
                    Op::CreateQueue(QueueAttributesRequest {
                        queue: qn(SIDE),
                        attributes,
                    }),
                    Kind::CreateQueue(SIDE),
                    format!("create queue {SIDE}"),
                )
            }
        };
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.note(format!(
            "client {c} on shard {shard}: {what} [ticket {ticket}]"
        ));
        self.oracle.submitted(&kind, self.now_ns, self.step);
        let pending = Pending {
            client: c,
            submitted_ns: self.now_ns,
            submitted_step: self.step,
            kind,
        };
        match self.shards[shard].submit(ticket, op, self.now_ns, self.wall_ms) {
            Some(result) => self.completions.push((ticket, result)),
            None => self.clients[c].tickets.push(ticket),
        }
        self.pending.insert(ticket, pending);
    }

    fn make_send(&mut self, queue: &'static str, incarnation: u32) -> (Op, Kind, String) {
        let n = 1 + self.rng.below_inclusive(4) as usize;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            // Now and then larger than work's 48-byte limit.
            let len = if self.chance(30) {
                60
            } else {
                self.rng.below_inclusive(40) as usize
            };
            let delay_ms = match self.rng.below_inclusive(9) {
                0 => Some(0),
                1 => Some(1 + self.rng.below_inclusive(200) as u32),
                _ => None,
            };
            let dedup_key = self
                .chance(250)
                .then(|| Bytes::from(vec![b'k', b'a' + self.rng.below_inclusive(5) as u8]));
            let attributes = if self.chance(100) {
                MessageAttributes::from_pairs([("k", "v")])
                    .unwrap_or_else(|_| unreachable!("a fixed small attribute set is valid"))
            } else {
                MessageAttributes::new()
            };
            let mut entry = SendEntry {
                body: Bytes::from(vec![b'm'; len]),
                delay: delay_ms.map(Millis::new),
                attributes,
                dedup_key,
                group: None,
            };
            if queue != SIDE {
                if let Some(rng) = self.fifo_rng.as_mut() {
                    fifo_entry(&mut entry, queue, rng);
                }
            }
            entries.push(entry);
        }
        let what = format!("send {n} to {queue}");
        let request = SendRequest::new(qn(queue), &entries)
            .unwrap_or_else(|_| unreachable!("small batches with short keys encode"));
        (Op::Send(request), Kind::Send { queue, incarnation }, what)
    }

    fn make_receive(&mut self, queue: &'static str) -> (Op, Kind, String) {
        let max: u16 = if self.chance(200) {
            64
        } else {
            1 + self.rng.below_inclusive(3) as u16
        };
        let visibility = match self.rng.below_inclusive(9) {
            0 => Some(0),
            1 => Some(5),
            2 => Some(200),
            _ => None,
        };
        let wait = if self.chance(300) {
            Some(1 + self.rng.below_inclusive(300) as u32)
        } else {
            Some(0)
        };
        let visibility_ms = visibility.map_or(self.visibility_ms[queue], u64::from);
        let bind = self
            .bind_rng
            .as_mut()
            .is_some_and(|r| r.below_inclusive(1) == 0);
        (
            Op::Receive(ReceiveRequest {
                queue: qn(queue),
                max_messages: max,
                visibility_timeout_ms: visibility,
                wait_ms: wait,
                bind_leases: bind,
                with_source: false,
            }),
            Kind::Receive {
                queue,
                visibility_ms,
                bind,
            },
            format!(
                "receive {max} from {queue} (visibility {visibility:?}, wait {wait:?}{})",
                if bind { ", bound" } else { "" }
            ),
        )
    }

    /// Some held receipts of one queue, sometimes stale, sometimes forged.
    fn pick_held(&mut self) -> Option<(&'static str, Vec<Held>)> {
        if self.oracle.held.is_empty() {
            return None;
        }
        // Mostly the newest receipts (their messages are likely still
        // there), sometimes any.
        let len = self.oracle.held.len();
        let first = if self.chance(800) {
            len - 1 - self.pick(len.min(8))
        } else {
            self.pick(len)
        };
        let queue = self.oracle.held[first].queue;
        let n = 1 + self.rng.below_inclusive(2) as usize;
        let mut out = vec![self.oracle.held[first]];
        for _ in 1..n {
            let i = self.pick(self.oracle.held.len());
            if self.oracle.held[i].queue == queue {
                out.push(self.oracle.held[i]);
            }
        }
        if self.chance(30) {
            out[0].receipt.check ^= 1;
            out[0].forged = true;
        }
        Some((queue, out))
    }

    fn make_delete(&mut self) -> (Op, Kind, String) {
        let Some((queue, held)) = self.pick_held() else {
            return self.make_receive(WORK);
        };
        let what = format!("delete {} receipts of {queue}", held.len());
        let receipts = held.iter().map(|h| h.receipt).collect();
        let held = held
            .into_iter()
            .map(|h| (h, self.oracle.snap(&h)))
            .collect();
        (
            Op::Delete(DeleteRequest {
                queue: qn(queue),
                receipts,
            }),
            Kind::Delete(held),
            what,
        )
    }

    fn make_change_visibility(&mut self) -> (Op, Kind, String) {
        let Some((queue, held)) = self.pick_held() else {
            return self.make_receive(WORK);
        };
        let entries: Vec<(Held, u32, Snap)> = held
            .into_iter()
            .map(|h| {
                let t = match self.rng.below_inclusive(3) {
                    0 | 1 => 0,
                    2 => 10,
                    _ => 300,
                };
                (h, t, self.oracle.snap(&h))
            })
            .collect();
        let what = format!(
            "change visibility of {} receipts of {queue} to {:?} ms",
            entries.len(),
            entries.iter().map(|e| e.1).collect::<Vec<_>>()
        );
        (
            Op::ChangeVisibility(ChangeVisibilityRequest {
                queue: qn(queue),
                entries: entries
                    .iter()
                    .map(|(h, t, _)| VisibilityChange {
                        receipt: h.receipt,
                        visibility_timeout_ms: *t,
                    })
                    .collect(),
            }),
            Kind::ChangeVisibility(entries),
            what,
        )
    }
}
