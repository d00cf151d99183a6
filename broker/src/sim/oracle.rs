//! What clients saw, and the checks on it.
//!
//! The oracle knows only what a client could know: the results of requests
//! and when they were submitted and observed (plus, at settled checkpoints,
//! every message's state). Its checks are conservative where the order of
//! events is not observable: a delivery observed at `t` happened no later
//! than `t`; a lease given at a receive submitted at `s` for `v` ms ends no
//! earlier than `s + v`. So a failure is a real violation, never a guess.

use std::collections::{HashMap, HashSet};

use sluice_protocol::{ErrorCode, MessageId, Receipt};

use super::queues::{DLQ, RETENTION_MS_MIN, SIDE};
use crate::engine::{MessageState, MessageView};

mod completed;
mod fifo;

const NS_PER_MS: u64 = 1_000_000;
/// Receipts kept for later deletes and visibility changes.
const HELD_MAX: usize = 96;

/// A request in flight.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) client: usize,
    pub(super) submitted_ns: u64,
    pub(super) submitted_step: u64,
    pub(super) kind: Kind,
}

/// What a request was, for checking its result.
#[derive(Debug)]
pub(super) enum Kind {
    Send {
        queue: &'static str,
        incarnation: u32,
    },
    Receive {
        queue: &'static str,
        visibility_ms: u64,
        /// Its leases bind to the client's connection.
        bind: bool,
    },
    Delete(Vec<(Held, Snap)>),
    /// A disconnected client's bound leases, released if still current.
    Abandon(Vec<(Held, Snap)>),
    ChangeVisibility(Vec<(Held, u32, Snap)>),
    Purge(&'static str),
    /// Side, at this incarnation when submitted.
    DeleteQueue {
        incarnation: u32,
    },
    CreateQueue(&'static str),
    Redrive,
    Peek(&'static str),
    Stats(&'static str),
}

impl Kind {
    /// The queue the request names, where it names one.
    pub(super) fn queue(&self) -> Option<&'static str> {
        match self {
            Kind::Send { queue, .. } | Kind::Receive { queue, .. } => Some(queue),
            Kind::Delete(h) | Kind::Abandon(h) => h.first().map(|(h, _)| h.queue),
            Kind::ChangeVisibility(h) => h.first().map(|(h, _, _)| h.queue),
            Kind::Purge(q) | Kind::CreateQueue(q) | Kind::Peek(q) | Kind::Stats(q) => Some(q),
            Kind::DeleteQueue { .. } => Some(SIDE),
            Kind::Redrive => Some(DLQ),
        }
    }
}

/// What the oracle knew of a message when a request naming it was
/// submitted: only what was known then can prove a later result wrong.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Snap {
    max_delivery: u64,
    deleted: bool,
    queue_deleted: bool,
}

/// A receipt a client holds.
#[derive(Clone, Copy, Debug)]
pub(super) struct Held {
    pub(super) queue: &'static str,
    pub(super) receipt: Receipt,
    pub(super) id: MessageId,
    pub(super) delivery: u64,
    /// Its check was flipped: it must be refused.
    pub(super) forged: bool,
}

/// What happened in a run, counted.
#[derive(Clone, Debug, Default)]
#[allow(missing_docs, reason = "each name says what it counts")]
pub struct Counts {
    pub requests: u64,
    pub sent: u64,
    pub duplicates: u64,
    pub busy: u64,
    pub queue_full: u64,
    pub too_large: u64,
    pub deliveries: u64,
    pub redeliveries: u64,
    pub deleted: u64,
    pub released: u64,
    pub abandoned: u64,
    pub extended: u64,
    pub stale: u64,
    pub gone: u64,
    pub invalid: u64,
    pub redriven: u64,
    pub purges: u64,
    pub queue_deletes: u64,
    pub queue_creates: u64,
    pub disconnects: u64,
    pub cancelled: u64,
    pub long_polls_empty: u64,
    pub dropped_by_retention: u64,
    pub vanished_with_queue: u64,
    pub checkpoints: u64,
    pub virtual_ms: u64,
}

/// What the oracle knows of one accepted message.
#[derive(Debug)]
struct Track {
    /// Family of queues it can be in (work and dlq move messages between
    /// them; side is on its own).
    family: Family,
    /// Submit time of the send that accepted it (or an earlier bound).
    accepted_ns: u64,
    /// Step of the last checkpoint that saw it (or of its acceptance).
    seen_step: u64,
    /// The highest delivery number observed.
    max_delivery: u64,
    /// The newest observed lease: its delivery and the earliest time it can
    /// end. `None` when released, deleted, or unknown.
    lease: Option<(u64, u64)>,
    /// A delete of this delivery succeeded.
    deleted: Option<u64>,
    /// A delete or visibility change naming it was cancelled: its effect
    /// is unknown.
    unsure: bool,
    /// Its queue's incarnation at acceptance (side only: deleting side
    /// drops its messages).
    incarnation: u32,
    /// The state at the last checkpoint: in the dlq, receive count,
    /// delivery.
    last_view: Option<(bool, u32, u64)>,
    /// Delivery numbers observed.
    deliveries: Vec<u64>,
    /// Tracked before its send's result was seen (that result fills in
    /// `accepted_ns`).
    early: bool,
    /// Visibility changes naming it in flight. Overlapping changes land in
    /// an order the oracle cannot see (a forwarded one may land after a
    /// later local one), so only a change that was alone in flight for its
    /// whole life (`cv_alone`) tells the lease.
    cv_in_flight: u32,
    cv_alone: bool,
    /// A change naming it was cancelled: the engine still applies it, at a
    /// moment no result tells, until the next settled checkpoint.
    cv_cancelled: bool,
    /// Its group, once it was seen delivered from work with one (a FIFO
    /// work queue: `fifo.rs`).
    work_group: Option<Box<str>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Work,
    Side,
}

fn family(queue: &str) -> Family {
    if queue == SIDE {
        Family::Side
    } else {
        Family::Work
    }
}

#[derive(Debug, Default)]
pub(super) struct Oracle {
    pub(super) counts: Counts,
    pub(super) held: Vec<Held>,
    tracks: HashMap<MessageId, Track>,
    /// Purges and queue deletions: the family, the step of the submit, and
    /// the step by which it was done (`None` while in progress). It may
    /// take any message of its family accepted before it was done.
    wipes: Vec<(Family, u64, Option<u64>)>,
    /// The earliest submit time of a send whose result was never seen
    /// (its accepted messages are unknown until they show up).
    unseen_send_ns: Option<u64>,
    /// Submit times of the sends in flight: a message one of them accepted
    /// can be received before the send's own result comes back.
    sends_in_flight: std::collections::BTreeMap<u64, u32>,
    /// Side's incarnations deleted so far.
    side_deleted: HashSet<u32>,
    /// Messages no longer tracked, why, and at which step (the latest few,
    /// for failure reports).
    forgotten: std::collections::VecDeque<(MessageId, &'static str, u64)>,
}

/// Forgotten messages remembered for failure reports.
const FORGOTTEN_MAX: usize = 4096;

impl Oracle {
    /// What is known of `h`'s message now.
    pub(super) fn snap(&self, h: &Held) -> Snap {
        self.tracks.get(&h.id).map_or(Snap::default(), |t| Snap {
            max_delivery: t.max_delivery,
            deleted: t.deleted.is_some(),
            queue_deleted: t.family == Family::Side && self.side_deleted.contains(&t.incarnation),
        })
    }

    pub(super) fn submitted(&mut self, kind: &Kind, submitted_ns: u64, step: u64) {
        self.counts.requests += 1;
        if let Kind::Send { .. } = kind {
            *self.sends_in_flight.entry(submitted_ns).or_default() += 1;
        }
        match kind {
            Kind::Purge(q) => self.wipes.push((family(q), step, None)),
            Kind::DeleteQueue { .. } => self.wipes.push((Family::Side, step, None)),
            Kind::Send { .. } => {}
            // A visibility change in flight may release or shorten the
            // lease before its result is seen: the lease is unknown until
            // then. So may a closed connection's release of its bound
            // leases.
            Kind::ChangeVisibility(entries) => {
                for (h, _, _) in entries {
                    self.lease_in_doubt(h.id);
                }
            }
            Kind::Abandon(entries) => {
                for (h, _) in entries {
                    self.lease_in_doubt(h.id);
                }
            }
            _ => {}
        }
    }

    /// A request that may end `id`'s lease (a visibility change, a
    /// release) is in flight: the lease is unknown until it is done.
    fn lease_in_doubt(&mut self, id: MessageId) {
        if let Some(t) = self.tracks.get_mut(&id) {
            t.lease = None;
            t.cv_alone = t.cv_in_flight == 0;
            t.cv_in_flight += 1;
        }
    }

    /// A visibility change naming these messages is no longer in flight.
    fn cv_done(&mut self, entries: &[(Held, u32, Snap)]) {
        for (h, _, _) in entries {
            self.lease_settled(h.id);
        }
    }

    fn lease_settled(&mut self, id: MessageId) {
        if let Some(t) = self.tracks.get_mut(&id) {
            t.cv_in_flight = t.cv_in_flight.saturating_sub(1);
        }
    }

    /// The request's client went away: its result will never be seen.
    /// A purge or queue deletion completed (or, cancelled, settled).
    fn wipe_done(&mut self, submitted_step: u64, step: u64) {
        for w in &mut self.wipes {
            if w.1 == submitted_step && w.2.is_none() {
                w.2 = Some(step);
            }
        }
    }

    pub(super) fn cancelled(&mut self, p: &Pending, step: u64) {
        self.counts.cancelled += 1;
        if let Some(w) = watched() {
            let text = format!("{:?}", p.kind);
            if text.contains(&format!("{w:?}")) {
                eprintln!("watch #{step}: cancelled {text}");
            }
        }
        match &p.kind {
            Kind::Delete(held) => {
                for (h, _) in held {
                    self.unsure(h.id);
                }
            }
            Kind::ChangeVisibility(entries) => {
                self.cv_done(entries);
                for (h, _, _) in entries {
                    self.unsure(h.id);
                    if let Some(t) = self.tracks.get_mut(&h.id) {
                        t.cv_cancelled = true;
                    }
                }
            }
            Kind::Send { .. } => {
                self.send_done(p.submitted_ns);
                let at = self.unseen_send_ns.get_or_insert(p.submitted_ns);
                *at = (*at).min(p.submitted_ns);
            }
            _ => {}
        }
    }

    fn send_done(&mut self, submitted_ns: u64) {
        if let Some(n) = self.sends_in_flight.get_mut(&submitted_ns) {
            *n -= 1;
            if *n == 0 {
                self.sends_in_flight.remove(&submitted_ns);
            }
        }
    }

    fn unsure(&mut self, id: MessageId) {
        if let Some(t) = self.tracks.get_mut(&id) {
            t.unsure = true;
            t.lease = None;
        }
    }

    /// A message the oracle did not see accepted (its send was cancelled,
    /// or its result is still on its way), known to exist at `step`.
    fn track_unseen(&mut self, id: MessageId, queue: &str, step: u64) -> Result<(), String> {
        if self.tracks.contains_key(&id) {
            return Ok(());
        }
        let in_flight = self.sends_in_flight.keys().next().copied();
        let earliest = match (self.unseen_send_ns, in_flight) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(accepted_ns) = earliest else {
            if let Some((_, why, at)) = self.forgotten.iter().find(|f| f.0 == id) {
                return Err(format!(
                    "{id:?} in {queue} was taken for gone ({why}) at step {at}, yet it is back"
                ));
            }
            return Err(format!("{id:?} in {queue} was never accepted"));
        };
        self.tracks.insert(
            id,
            Track {
                family: family(queue),
                accepted_ns,
                seen_step: step,
                max_delivery: 0,
                lease: None,
                deleted: None,
                // Its absence later is explained like any message's: its
                // queue's purge or deletion, retention, or a delete.
                unsure: false,
                incarnation: 0,
                last_view: None,
                deliveries: Vec::new(),
                early: true,
                cv_in_flight: 0,
                cv_alone: false,
                cv_cancelled: false,
                work_group: None,
            },
        );
        Ok(())
    }

    /// A delete or visibility change with `h` succeeded: it must have
    /// named the newest delivery of a message that was still there when the
    /// request was submitted (`snap`).
    fn receipt_accepted(&mut self, h: &Held, snap: &Snap, what: &str) -> Result<(), String> {
        if h.forged {
            return Err(format!("{what} accepted a forged receipt of {:?}", h.id));
        }
        if !self.tracks.contains_key(&h.id) {
            return Err(format!("{what} succeeded for unknown {:?}", h.id));
        }
        if snap.max_delivery > h.delivery {
            return Err(format!(
                "{what} accepted the receipt of delivery {} of {:?}, but delivery {} was made \
                 before it was sent",
                h.delivery, h.id, snap.max_delivery
            ));
        }
        if snap.deleted {
            return Err(format!("{what} succeeded on {:?}, deleted before", h.id));
        }
        if snap.queue_deleted {
            return Err(format!("{what} succeeded on {:?} of a deleted queue", h.id));
        }
        Ok(())
    }

    fn receipt_refused(&mut self, h: &Held, code: ErrorCode) -> Result<(), String> {
        match code {
            ErrorCode::StaleReceipt => self.counts.stale += 1,
            ErrorCode::Gone => self.counts.gone += 1,
            ErrorCode::InvalidReceipt => self.counts.invalid += 1,
            other => {
                return Err(format!(
                    "receipt of {:?} (delivery {}) refused with {other:?}",
                    h.id, h.delivery
                ));
            }
        }
        if h.forged && code != ErrorCode::InvalidReceipt {
            return Err(format!(
                "a forged receipt answered {code:?}, not InvalidReceipt"
            ));
        }
        if code == ErrorCode::StaleReceipt {
            // Stale: a newer delivery exists. The oracle may not have seen
            // it yet (its receive still on its way), so nothing to compare.
        }
        Ok(())
    }

    /// Debugging: prints the watched message's state after a step.
    pub(super) fn watch_views(&self, views: &[MessageView], step: u64) {
        if let Some(w) = watched() {
            let v = views.iter().find(|v| v.id == w);
            eprintln!("watch #{step} state: {v:?}");
        }
    }

    /// The whole state, settled: nothing vanished, counters only grew,
    /// timers fired on time.
    pub(super) fn checkpoint(
        &mut self,
        views: &[MessageView],
        now_ns: u64,
        step: u64,
    ) -> Result<(), String> {
        // Before the messages gone since are forgotten: their deliveries
        // count too.
        self.check_fifo_order(views)?;
        let mut present = HashSet::with_capacity(views.len());
        if let Some(w) = watched() {
            let v = views.iter().find(|v| v.id == w);
            eprintln!("watch #{step} t={}ms checkpoint: {v:?}", now_ns / NS_PER_MS);
        }
        for v in views {
            present.insert(v.id);
            self.track_unseen(v.id, &v.queue, step)?;
            let t = self
                .tracks
                .get_mut(&v.id)
                .unwrap_or_else(|| unreachable!("tracked above"));
            if t.deleted.is_some() {
                return Err(format!("{:?} deleted, yet still held: {v:?}", v.id));
            }
            if v.delivery < t.max_delivery {
                return Err(format!(
                    "{:?}: delivery number went down to {} (delivery {} was seen)",
                    v.id, v.delivery, t.max_delivery
                ));
            }
            let in_dlq = &*v.queue == DLQ;
            if let Some((was_dlq, rc, delivery)) = t.last_view {
                if delivery > v.delivery {
                    return Err(format!("{:?}: delivery number went down", v.id));
                }
                // Without a delivery since, the receive count stays, but
                // for a redrive back to work, which resets it (perhaps
                // after a dead-lettering in between: work, dlq, work).
                let redriven = !in_dlq && v.receive_count == 0 && (was_dlq || rc > 0);
                if delivery == v.delivery && rc != v.receive_count && !redriven {
                    return Err(format!(
                        "{:?}: receive count {rc} -> {} without a delivery",
                        v.id, v.receive_count
                    ));
                }
            }
            t.last_view = Some((in_dlq, v.receive_count, v.delivery));
            t.seen_step = step;
            // Settled: every cancelled change has landed.
            t.cv_cancelled = false;
            // Timers fire on time: settled at `now`, nothing is overdue by
            // a tick or more.
            if let Some(due) = v.due_ns {
                if v.state != MessageState::Visible && due + NS_PER_MS <= now_ns {
                    return Err(format!(
                        "{:?} still {:?} {} ms after its due time",
                        v.id,
                        v.state,
                        (now_ns - due) / NS_PER_MS
                    ));
                }
            }
            if v.retain_until_ns + NS_PER_MS <= now_ns {
                return Err(format!("{:?} held past its retention", v.id));
            }
        }
        let mut gone = Vec::new();
        for (id, t) in &self.tracks {
            if present.contains(id) {
                continue;
            }
            let why = if t.deleted.is_some() || t.unsure {
                "deleted"
            } else if now_ns >= t.accepted_ns + RETENTION_MS_MIN * NS_PER_MS {
                "retention"
            } else if self
                .wipes
                .iter()
                .any(|&(f, _, done)| f == t.family && done.is_none_or(|d| d >= t.seen_step))
                || (t.family == Family::Side && self.side_deleted.contains(&t.incarnation))
            {
                "wiped"
            } else {
                return Err(format!(
                    "{id:?} vanished: accepted at {} ms, last seen at step {}, not deleted, \
                     not past retention, its queue neither purged nor deleted since",
                    t.accepted_ns / NS_PER_MS,
                    t.seen_step
                ));
            };
            gone.push((*id, why));
        }
        for (id, why) in gone {
            if self.forgotten.len() == FORGOTTEN_MAX {
                self.forgotten.pop_front();
            }
            self.forgotten.push_back((id, why, step));
            match why {
                "retention" => self.counts.dropped_by_retention += 1,
                "wiped" => self.counts.vanished_with_queue += 1,
                _ => {}
            }
            self.tracks.remove(&id);
        }
        // Settled: every wipe in progress (cancelled ones too) is done.
        // Old wipes matter only to messages seen before they were done.
        for w in &mut self.wipes {
            w.2.get_or_insert(step);
        }
        let oldest = self.tracks.values().map(|t| t.seen_step).min();
        self.wipes
            .retain(|&(_, _, done)| oldest.is_some_and(|o| done.is_some_and(|d| d >= o)));
        Ok(())
    }
}

/// `SLUICE_SIM_WATCH=<message id as a decimal u128>` prints every request
/// and result that names that message (for debugging a failure).
fn watched() -> Option<MessageId> {
    static WATCH: std::sync::OnceLock<Option<MessageId>> = std::sync::OnceLock::new();
    *WATCH.get_or_init(|| {
        std::env::var("SLUICE_SIM_WATCH")
            .ok()
            .and_then(|v| v.parse::<u128>().ok())
            .map(MessageId)
    })
}
