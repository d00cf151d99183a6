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
//! A broker that may lose what it acknowledged shortly before a crash
//! (`--durability batch`, within its sync interval) is held to that window
//! ([`Ledger::allow_loss_before_kills`], [`Ledger::killed`]): a send
//! acknowledged within the window before a kill and gone at the end is
//! counted **lost within the window**, not lost; a delete acknowledged
//! there may be undone (the message back, delivered and deleted again, or
//! held at the end: **undone deletes**); the broker's counters may fall
//! short of the tool's by those. Anything older is held to the rules above.
//!
//! Ground rules: one mutex over a vector indexed by sequence number; every
//! caller updates a whole batch under one lock. Sixteen bytes per message.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

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
    /// When the send and the delete were acknowledged, ms since the
    /// ledger's start.
    acked_ms: u32,
    deleted_ms: u32,
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
    started: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: Vec<Entry>,
    deliveries: u64,
    violations: Vec<String>,
    violation_count: u64,
    /// How long before a kill the broker may lose what it acknowledged.
    loss_window_ms: Option<u32>,
    /// The kills: when each began and when the broker was surely gone, ms.
    kills: Vec<(u32, u32)>,
    /// Second deletes of a message whose first delete a kill undid.
    deletes_again: u64,
}

impl Inner {
    /// Whether what was acknowledged at `at_ms` may have been lost by a
    /// kill: within the loss window before one (or during it).
    fn may_be_lost(&self, at_ms: u32) -> bool {
        self.loss_window_ms.is_some_and(|w| {
            self.kills
                .iter()
                .any(|&(began, gone)| at_ms.saturating_add(w) >= began && at_ms <= gone)
        })
    }

    /// How long before the first kill after it `at_ms` is, ms.
    fn before_kill(&self, at_ms: u32) -> u32 {
        self.kills
            .iter()
            .find(|&&(_, gone)| at_ms <= gone)
            .map_or(0, |&(began, _)| began.saturating_sub(at_ms))
    }

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
    /// Of the rest enqueued and neither deleted nor held: acknowledged
    /// within the loss window before a kill (or never acknowledged), which
    /// the broker's durability lets a kill take.
    pub lost_in_window: u64,
    /// Deletes acknowledged within the loss window before a kill whose
    /// message came back (held at the end, or deleted again).
    pub undone_deletes: u64,
    /// How long before its kill the oldest of those lost within the window
    /// was acknowledged, ms.
    pub oldest_loss_ms: u32,
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
            started: Instant::now(),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn now_ms(&self) -> u32 {
        u32::try_from(self.started.elapsed().as_millis()).unwrap_or(u32::MAX)
    }

    /// The broker may lose what it acknowledged within `window` before a
    /// kill (`--durability batch`: its sync interval, and the scheduling
    /// around it): such losses are counted, not violations.
    pub fn allow_loss_before_kills(&self, window: Duration) {
        let ms = u32::try_from(window.as_millis()).unwrap_or(u32::MAX);
        lock(&self.inner).loss_window_ms = Some(ms);
    }

    /// The broker was killed: the kill began at `began`, and it is gone now.
    pub fn killed(&self, began: Instant) {
        let began_ms = u32::try_from(began.saturating_duration_since(self.started).as_millis())
            .unwrap_or(u32::MAX);
        let gone = self.now_ms();
        lock(&self.inner).kills.push((began_ms, gone));
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
        let now = self.now_ms();
        let mut inner = lock(&self.inner);
        for (i, fate) in fates.iter().enumerate() {
            let Some(e) = usize::try_from(first + i as u64)
                .ok()
                .and_then(|i| inner.entries.get_mut(i))
            else {
                continue;
            };
            if *fate == SendFate::Acked {
                e.acked_ms = now;
            }
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
            if e.deleted_delivery != 0
                && delivery > u64::from(e.deleted_delivery)
                && !inner.may_be_lost(e.deleted_ms)
            {
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
        let now = self.now_ms();
        let mut inner = lock(&self.inner);
        for (seq, delivery) in deletes {
            let i = usize::try_from(seq).unwrap_or(usize::MAX);
            let Some(e) = inner.entries.get(i).copied() else {
                inner.violation(format!("delete acknowledged for message {seq}, never sent"));
                continue;
            };
            if e.state & DELETED != 0 {
                if inner.may_be_lost(e.deleted_ms) {
                    // A kill undid the first: this one counts.
                    inner.deletes_again += 1;
                } else {
                    let first = e.deleted_delivery;
                    inner.violation(format!(
                        "two acknowledged deletes of message {seq} (deliveries {first} and \
                         {delivery})"
                    ));
                    continue;
                }
            }
            if let Some(e) = inner.entries.get_mut(i) {
                e.state |= DELETED;
                e.deleted_delivery = u32::try_from(delivery).unwrap_or(u32::MAX).max(1);
                e.deleted_ms = now;
            }
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
            undone_deletes: inner.deletes_again,
            ..Reconciled::default()
        };
        // What the broker's counters may lack: sends and deletes a kill may
        // have taken.
        let (mut sends_at_risk, mut deletes_at_risk) = (0u64, 0u64);
        let window = inner.loss_window_ms.is_some();
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
            let send_at_risk = window
                && ((e.state & ACKED != 0 && inner.may_be_lost(e.acked_ms))
                    || (e.state & UNKNOWN != 0 && seen));
            sends_at_risk += u64::from(send_at_risk);
            let delete_at_risk = e.state & DELETED != 0 && inner.may_be_lost(e.deleted_ms);
            deletes_at_risk +=
                u64::from(delete_at_risk || (window && e.state & DELETE_UNKNOWN != 0));
            if e.state & DELETED != 0 && e.state & HELD != 0 && delete_at_risk {
                r.held += 1;
                r.undone_deletes += 1;
            } else if e.state & DELETED != 0 {
                r.deleted += 1;
            } else if e.state & HELD != 0 {
                r.held += 1;
            } else if enqueued && drained {
                if e.state & DELETE_UNKNOWN != 0 {
                    r.deleted_unacknowledged += 1;
                } else if send_at_risk {
                    r.lost_in_window += 1;
                    if e.state & ACKED != 0 {
                        r.oldest_loss_ms = r.oldest_loss_ms.max(inner.before_kill(e.acked_ms));
                    }
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
            if b.sent > tool_sent || b.sent + sends_at_risk < tool_sent {
                inner.violation(format!(
                    "the broker counts {} sends, the tool {} acknowledged + {} shown \
                     enqueued by a delivery ({} of them within a kill's loss window)",
                    b.sent, r.sent, r.unknown_enqueued, sends_at_risk
                ));
            }
            if drained {
                let tool_deleted = r.deleted + r.deleted_unacknowledged;
                if b.deleted > tool_deleted || b.deleted + deletes_at_risk < tool_deleted {
                    inner.violation(format!(
                        "the broker counts {} deletes, the tool {} acknowledged + {} \
                         unacknowledged whose message is gone ({} within a kill's loss \
                         window)",
                        b.deleted, r.deleted, r.deleted_unacknowledged, deletes_at_risk
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
#[path = "ledger_tests.rs"]
mod tests;
