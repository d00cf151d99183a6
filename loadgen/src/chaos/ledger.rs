//! What became of every message a scenario sent, from the tool's side, and
//! the reconciliation with the broker's counters.
//!
//! Each message carries its sequence number in its body (the load
//! generator's body header, see [`crate::body`], with this ledger's run
//! tag).
//! The ledger records, per sequence number: whether the send was
//! acknowledged, refused (a definite error: nothing was enqueued) or has an
//! unknown outcome (the connection dropped or the request timed out: it may
//! have been enqueued); each delivery and its delivery number; an
//! acknowledged delete (and of which delivery) or a delete whose outcome is
//! unknown; and whether the final drain found it still held.
//!
//! At the end, [`Ledger::reconcile`] works out, without guessing:
//! - **lost**: enqueued (acknowledged, or proven by a delivery), never
//!   deleted and not held at the end. A message whose delete has an
//!   unknown outcome and is not held was deleted: the broker's `deleted`
//!   counter must then account for exactly those.
//! - **duplicates delivered**: deliveries beyond each message's first
//!   (allowed: delivery is at-least-once).
//! - violations: a delivery of a message never sent (or refused), a
//!   delivery after an acknowledged delete of an earlier delivery, two
//!   acknowledged deletes of one message, a body that is not ours, and any
//!   difference between the broker's counters and the tool's.
//!
//! Ground rules: one mutex over a vector indexed by sequence number; every
//! caller updates a whole batch under one lock. Eight bytes per message.

use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use sluice_client::{Error, QueueStats};

use crate::body::{self, HEADER_BYTES, Stamp};

const ISSUED: u8 = 1;
const ACKED: u8 = 1 << 1;
const UNKNOWN: u8 = 1 << 2;
const REFUSED: u8 = 1 << 3;
const DELETED: u8 = 1 << 4;
const DELETE_UNKNOWN: u8 = 1 << 5;
const HELD: u8 = 1 << 6;

/// Violations kept word for word (the rest are counted).
const VIOLATIONS_KEPT: usize = 20;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    state: u8,
    /// Deliveries seen, saturating.
    deliveries: u16,
    /// Delivery number of the acknowledged delete (0: none).
    deleted_delivery: u32,
}

/// How a send ended, from the tool's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendFate {
    /// The broker acknowledged it.
    Acked,
    /// A definite error: nothing was enqueued.
    Refused,
    /// The connection dropped or the request timed out: it may or may not
    /// have been enqueued.
    Unknown,
}

impl SendFate {
    /// The fate of a request that failed with `err`: a reply from the
    /// server (any error code) or a failure to connect means nothing was
    /// done; a lost connection or a time-out leaves it unknown.
    #[must_use]
    pub fn of_error(err: &Error) -> SendFate {
        if err.code().is_some() || matches!(err, Error::Connect { .. } | Error::Closed) {
            SendFate::Refused
        } else {
            SendFate::Unknown
        }
    }
}

/// A delete whose reply was lost may or may not have happened.
#[must_use]
pub fn delete_outcome_unknown(err: &Error) -> bool {
    SendFate::of_error(err) == SendFate::Unknown
}

/// The per-message record of one scenario.
#[derive(Debug)]
pub struct Ledger {
    run_tag: u32,
    body_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: Vec<Entry>,
    deliveries: u64,
    violations: Vec<String>,
    violation_count: u64,
}

impl Inner {
    fn violation(&mut self, what: String) {
        self.violation_count += 1;
        if self.violations.len() < VIOLATIONS_KEPT {
            self.violations.push(what);
        }
    }
}

/// The outcome of a reconciliation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Reconciled {
    /// Sends the broker acknowledged.
    pub sent: u64,
    /// Sends refused with a definite error (e.g. `Busy`).
    pub refused: u64,
    /// Sends with an unknown outcome.
    pub unknown_sends: u64,
    /// Of those, shown enqueued by a delivery.
    pub unknown_enqueued: u64,
    /// Deliveries seen (the final drain included).
    pub deliveries: u64,
    /// Deliveries beyond each message's first.
    pub duplicates: u64,
    /// Messages with an acknowledged delete.
    pub deleted: u64,
    /// Messages whose delete had an unknown outcome and that are gone: the
    /// delete happened.
    pub deleted_unacknowledged: u64,
    /// Messages held at the end (found by the final drain).
    pub held: u64,
    /// Enqueued, not deleted, not held.
    pub lost: u64,
    /// Every violation, the first few word for word.
    pub violations: Vec<String>,
    /// How many violations there were in all.
    pub violation_count: u64,
}

/// The broker's counters summed over the queues a ledger's messages live in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BrokerTotals {
    /// Sends accepted.
    pub sent: u64,
    /// Deletes.
    pub deleted: u64,
    /// Visible + delayed + in flight.
    pub held: u64,
    /// Dropped by retention or purged.
    pub dropped_or_purged: u64,
}

impl BrokerTotals {
    /// Sums the stats of a message's possible homes (a queue and its
    /// dead-letter queue): moves between them cancel out.
    #[must_use]
    pub fn of(stats: &[QueueStats]) -> BrokerTotals {
        let mut t = BrokerTotals::default();
        for s in stats {
            t.sent += s.sent;
            t.deleted += s.deleted;
            t.held += s.depth();
            t.dropped_or_purged += s.dropped + s.purged;
        }
        t
    }
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // Every critical section leaves the entries consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    /// An empty ledger whose bodies are `body_bytes` long (at least the
    /// header's 32).
    #[must_use]
    pub fn new(body_bytes: usize) -> Ledger {
        Ledger {
            run_tag: rand::random(),
            body_bytes: body_bytes.max(HEADER_BYTES),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Reserves `n` sequence numbers for sends about to be made; returns
    /// their bodies, in order, with the first sequence number.
    pub fn issue(&self, n: usize) -> (u64, Vec<Vec<u8>>) {
        let first = {
            let mut inner = lock(&self.inner);
            let first = inner.entries.len() as u64;
            let len = inner.entries.len() + n;
            inner.entries.resize(
                len,
                Entry {
                    state: ISSUED,
                    ..Entry::default()
                },
            );
            first
        };
        let bodies = (0..n as u64)
            .map(|i| self.body_of(first + i))
            .collect::<Vec<_>>();
        (first, bodies)
    }

    fn body_of(&self, seq: u64) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.body_bytes);
        body::write_body(
            &mut buf,
            self.body_bytes,
            Stamp {
                run_tag: self.run_tag,
                seq,
                intended_ns: 0,
                sent_ns: 0,
            },
        );
        buf
    }

    /// How the sends of `first..first + fates.len()` ended.
    pub fn sent(&self, first: u64, fates: &[SendFate]) {
        let mut inner = lock(&self.inner);
        for (i, fate) in fates.iter().enumerate() {
            let Some(e) = usize::try_from(first + i as u64)
                .ok()
                .and_then(|i| inner.entries.get_mut(i))
            else {
                continue;
            };
            e.state |= match fate {
                SendFate::Acked => ACKED,
                SendFate::Refused => REFUSED,
                SendFate::Unknown => UNKNOWN,
            };
        }
    }

    /// The sequence number a body carries, if it is one of this ledger's.
    #[must_use]
    pub fn seq_of(&self, body: &[u8]) -> Option<u64> {
        body::read_stamp(body)
            .ok()
            .filter(|s| s.run_tag == self.run_tag)
            .map(|s| s.seq)
    }

    /// Deliveries arrived: `(body, delivery number)` each. Returns how many
    /// were deliveries beyond a message's first.
    pub fn delivered<'a>(&self, deliveries: impl IntoIterator<Item = (&'a [u8], u64)>) -> u64 {
        let parsed: Vec<(Option<u64>, u64)> = deliveries
            .into_iter()
            .map(|(b, d)| (self.seq_of(b), d))
            .collect();
        self.delivered_seqs(parsed)
    }

    /// Deliveries arrived, by sequence number (`None`: a body that is not
    /// one of this run's) and delivery number. Returns how many were
    /// deliveries beyond a message's first.
    pub fn delivered_seqs(&self, deliveries: impl IntoIterator<Item = (Option<u64>, u64)>) -> u64 {
        let mut inner = lock(&self.inner);
        let mut again = 0;
        for (seq, delivery) in deliveries {
            inner.deliveries += 1;
            let Some(seq) = seq else {
                inner.violation("a delivery whose body is not one of this run's".to_owned());
                continue;
            };
            let Some(e) = usize::try_from(seq)
                .ok()
                .and_then(|i| inner.entries.get(i))
                .copied()
            else {
                inner.violation(format!("delivery of message {seq}, never sent"));
                continue;
            };
            if e.state & REFUSED != 0 {
                inner.violation(format!("delivery of message {seq}, whose send was refused"));
            }
            if e.deleted_delivery != 0 && delivery > u64::from(e.deleted_delivery) {
                inner.violation(format!(
                    "message {seq} delivered (delivery {delivery}) after an acknowledged \
                     delete of delivery {}",
                    e.deleted_delivery
                ));
            }
            if e.deliveries > 0 {
                again += 1;
            }
            let i = usize::try_from(seq).unwrap_or(usize::MAX);
            if let Some(e) = inner.entries.get_mut(i) {
                e.deliveries = e.deliveries.saturating_add(1);
            }
        }
        again
    }

    /// This ledger's run tag (consumer processes check bodies against it).
    #[must_use]
    pub fn run_tag(&self) -> u32 {
        self.run_tag
    }

    /// Deletes acknowledged: `(seq, delivery number of the receipt)`.
    pub fn deleted(&self, deletes: impl IntoIterator<Item = (u64, u64)>) {
        let mut inner = lock(&self.inner);
        for (seq, delivery) in deletes {
            let i = usize::try_from(seq).unwrap_or(usize::MAX);
            let Some(e) = inner.entries.get_mut(i) else {
                inner.violation(format!("delete acknowledged for message {seq}, never sent"));
                continue;
            };
            if e.state & DELETED != 0 {
                let first = e.deleted_delivery;
                inner.violation(format!(
                    "two acknowledged deletes of message {seq} (deliveries {first} and \
                     {delivery})"
                ));
                continue;
            }
            e.state |= DELETED;
            e.deleted_delivery = u32::try_from(delivery).unwrap_or(u32::MAX).max(1);
        }
    }

    /// Deletes whose outcome is unknown (the reply was lost).
    pub fn delete_unknown(&self, seqs: impl IntoIterator<Item = u64>) {
        let mut inner = lock(&self.inner);
        for seq in seqs {
            let i = usize::try_from(seq).unwrap_or(usize::MAX);
            if let Some(e) = inner.entries.get_mut(i) {
                e.state |= DELETE_UNKNOWN;
            }
        }
    }

    /// The final drain found these messages still held.
    pub fn held(&self, seqs: impl IntoIterator<Item = u64>) {
        let mut inner = lock(&self.inner);
        for seq in seqs {
            let i = usize::try_from(seq).unwrap_or(usize::MAX);
            if let Some(e) = inner.entries.get_mut(i) {
                e.state |= HELD;
            }
        }
    }

    /// Records a violation found by a scenario.
    pub fn violation(&self, what: impl Into<String>) {
        lock(&self.inner).violation(what.into());
    }

    /// Sends acknowledged so far.
    #[must_use]
    pub fn acked(&self) -> u64 {
        lock(&self.inner)
            .entries
            .iter()
            .filter(|e| e.state & ACKED != 0)
            .count() as u64
    }

    /// Messages with an acknowledged delete so far.
    #[must_use]
    pub fn deleted_count(&self) -> u64 {
        lock(&self.inner)
            .entries
            .iter()
            .filter(|e| e.state & DELETED != 0)
            .count() as u64
    }

    /// Sequence numbers issued so far.
    #[must_use]
    pub fn issued(&self) -> u64 {
        lock(&self.inner).entries.len() as u64
    }

    /// The tally; with `broker` (the counters of every queue the messages
    /// may be in, after the final drain), the comparison with the broker
    /// too. `drained` says whether a final drain ran: without one (the
    /// broker was stopped), nothing is held and nothing can be called lost.
    #[must_use]
    pub fn reconcile(&self, broker: Option<BrokerTotals>, drained: bool) -> Reconciled {
        let mut inner = lock(&self.inner);
        let mut r = Reconciled {
            deliveries: inner.deliveries,
            ..Reconciled::default()
        };
        for e in &inner.entries {
            let seen = e.deliveries > 0;
            r.duplicates += u64::from(e.deliveries.saturating_sub(1));
            if e.state & ACKED != 0 {
                r.sent += 1;
            } else if e.state & REFUSED != 0 {
                r.refused += 1;
            } else if e.state & UNKNOWN != 0 {
                r.unknown_sends += 1;
                if seen {
                    r.unknown_enqueued += 1;
                }
            }
            let enqueued = e.state & ACKED != 0 || (e.state & UNKNOWN != 0 && seen);
            if e.state & DELETED != 0 {
                r.deleted += 1;
            } else if e.state & HELD != 0 {
                r.held += 1;
            } else if enqueued && drained {
                if e.state & DELETE_UNKNOWN != 0 {
                    r.deleted_unacknowledged += 1;
                } else {
                    r.lost += 1;
                }
            }
        }
        if r.lost > 0 {
            inner.violation(format!(
                "{} acknowledged messages lost: neither deleted nor held",
                r.lost
            ));
        }
        if let Some(b) = broker {
            let tool_sent = r.sent + r.unknown_enqueued;
            if b.sent != tool_sent {
                inner.violation(format!(
                    "the broker counts {} sends, the tool {} acknowledged + {} shown \
                     enqueued by a delivery",
                    b.sent, r.sent, r.unknown_enqueued
                ));
            }
            if drained {
                let tool_deleted = r.deleted + r.deleted_unacknowledged;
                if b.deleted != tool_deleted {
                    inner.violation(format!(
                        "the broker counts {} deletes, the tool {} acknowledged + {} \
                         unacknowledged whose message is gone",
                        b.deleted, r.deleted, r.deleted_unacknowledged
                    ));
                }
                if b.held != r.held {
                    inner.violation(format!(
                        "the broker holds {} messages, the final drain found {}",
                        b.held, r.held
                    ));
                }
            }
            if b.dropped_or_purged != 0 {
                inner.violation(format!(
                    "the broker dropped or purged {} messages; no scenario asks for it",
                    b.dropped_or_purged
                ));
            }
        }
        r.violations.clone_from(&inner.violations);
        r.violation_count = inner.violation_count;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seqs(l: &Ledger, n: usize) -> (u64, Vec<Vec<u8>>) {
        let (first, bodies) = l.issue(n);
        assert_eq!(bodies.len(), n);
        for (i, b) in bodies.iter().enumerate() {
            assert_eq!(l.seq_of(b), Some(first + i as u64));
        }
        (first, bodies)
    }

    #[test]
    fn a_clean_run_reconciles() {
        let l = Ledger::new(64);
        let (first, bodies) = seqs(&l, 4);
        l.sent(first, &[SendFate::Acked; 4]);
        // 0 and 1 delivered and deleted; 1 delivered twice first; 2 held; 3
        // held after a delete with a lost reply (so the delete did not
        // happen).
        assert_eq!(l.delivered([(&bodies[0][..], 1), (&bodies[1][..], 1)]), 0);
        assert_eq!(l.delivered([(&bodies[1][..], 2)]), 1);
        l.deleted([(0, 1), (1, 2)]);
        l.delivered([(&bodies[3][..], 1)]);
        l.delete_unknown([3]);
        l.delivered([(&bodies[2][..], 1), (&bodies[3][..], 2)]);
        l.held([2, 3]);
        let broker = BrokerTotals {
            sent: 4,
            deleted: 2,
            held: 2,
            dropped_or_purged: 0,
        };
        let r = l.reconcile(Some(broker), true);
        assert_eq!(r.violations, Vec::<String>::new());
        assert_eq!((r.sent, r.deleted, r.held, r.lost), (4, 2, 2, 0));
        assert_eq!((r.deliveries, r.duplicates), (6, 2));
    }

    #[test]
    fn a_lost_message_is_caught() {
        let l = Ledger::new(32);
        let (first, bodies) = seqs(&l, 2);
        l.sent(first, &[SendFate::Acked, SendFate::Acked]);
        l.delivered([(&bodies[0][..], 1)]);
        l.deleted([(0, 1)]);
        let r = l.reconcile(
            Some(BrokerTotals {
                sent: 2,
                deleted: 1,
                held: 0,
                dropped_or_purged: 0,
            }),
            true,
        );
        assert_eq!(r.lost, 1);
        assert_eq!(r.violation_count, 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("lost"));
    }

    #[test]
    fn an_unacknowledged_delete_must_match_the_broker() {
        let l = Ledger::new(32);
        let (first, bodies) = seqs(&l, 1);
        l.sent(first, &[SendFate::Acked]);
        l.delivered([(&bodies[0][..], 1)]);
        l.delete_unknown([0]);
        // Gone at the end: the delete happened, and the broker must say so.
        let ok = BrokerTotals {
            sent: 1,
            deleted: 1,
            ..BrokerTotals::default()
        };
        assert_eq!(l.reconcile(Some(ok), true).violation_count, 0);
        let l2 = Ledger::new(32);
        let (first, bodies) = seqs(&l2, 1);
        l2.sent(first, &[SendFate::Acked]);
        l2.delivered([(&bodies[0][..], 1)]);
        l2.delete_unknown([0]);
        let r = l2.reconcile(
            Some(BrokerTotals {
                sent: 1,
                ..BrokerTotals::default()
            }),
            true,
        );
        assert_eq!(r.violation_count, 1);
        assert!(r.violations[0].contains("deletes"), "{:?}", r.violations);
    }

    #[test]
    fn unknown_sends_count_when_a_delivery_shows_them() {
        let l = Ledger::new(32);
        let (first, bodies) = seqs(&l, 3);
        l.sent(
            first,
            &[SendFate::Unknown, SendFate::Unknown, SendFate::Refused],
        );
        l.delivered([(&bodies[0][..], 1)]);
        l.held([0]);
        let r = l.reconcile(
            Some(BrokerTotals {
                sent: 1,
                held: 1,
                ..BrokerTotals::default()
            }),
            true,
        );
        assert_eq!(r.violations, Vec::<String>::new());
        assert_eq!((r.unknown_sends, r.unknown_enqueued, r.refused), (2, 1, 1));
        // The broker counting the second one too means it was enqueued and
        // then vanished.
        let r = l.reconcile(
            Some(BrokerTotals {
                sent: 2,
                held: 1,
                ..BrokerTotals::default()
            }),
            true,
        );
        assert_eq!(r.violation_count, 1);
    }

    #[test]
    fn impossible_deliveries_are_violations() {
        let l = Ledger::new(32);
        let (first, bodies) = seqs(&l, 2);
        l.sent(first, &[SendFate::Acked, SendFate::Refused]);
        l.delivered([(&bodies[0][..], 1)]);
        l.deleted([(0, 1)]);
        l.delivered([(&bodies[0][..], 2)]); // after the delete
        l.delivered([(&bodies[1][..], 1)]); // refused, yet delivered
        l.delivered([(&b"not ours at all, but long enough to parse"[..], 1)]);
        let other = Ledger::new(32);
        let (_, foreign) = other.issue(1);
        l.delivered([(&foreign[0][..], 1)]);
        l.deleted([(0, 2)]); // a second acknowledged delete
        let r = l.reconcile(None, false);
        assert_eq!(r.violation_count, 5, "{:?}", r.violations);
    }

    #[test]
    fn without_a_drain_nothing_is_called_lost() {
        let l = Ledger::new(32);
        let (first, _) = seqs(&l, 3);
        l.sent(first, &[SendFate::Acked; 3]);
        let r = l.reconcile(None, false);
        assert_eq!((r.sent, r.lost, r.violation_count), (3, 0, 0));
    }
}
