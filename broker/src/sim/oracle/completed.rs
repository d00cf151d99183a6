//! Checking each request's result against what the oracle knows: one
//! check per operation.

use std::collections::HashSet;

use sluice_protocol::{ErrorCode, QueueInfo, ReceivedMessage, SendOutcome};

use super::{HELD_MAX, Held, Kind, NS_PER_MS, Oracle, Pending, Snap, Track, family, watched};
use crate::engine::OpResult;
use crate::engine::error::{EngineError, EntryError};
use crate::sim::queues::{MAX_RECEIVES, SIDE, WORK, send_error_expected};

impl Oracle {
    /// Checks a result; returns a one-line summary.
    pub(in crate::sim) fn completed(
        &mut self,
        p: &Pending,
        result: OpResult,
        now_ns: u64,
        step: u64,
    ) -> Result<String, String> {
        if let Some(w) = watched() {
            let text = format!("{:?} {result:?}", p.kind);
            if text.contains(&format!("{}", w.0)) || text.contains(&format!("{w:?}")) {
                eprintln!("watch #{step} t={}ms: {text}", now_ns / NS_PER_MS);
            }
        }
        if let OpResult::Error(e) = &result {
            return self.failed(p, e, step);
        }
        match (&p.kind, result) {
            (Kind::Send { queue, incarnation }, OpResult::Sent(entries)) => {
                self.sent(p, queue, *incarnation, entries)
            }
            (
                Kind::Receive {
                    queue,
                    visibility_ms,
                    ..
                },
                OpResult::Received(msgs),
            ) => self.received(p, queue, *visibility_ms, &msgs, now_ns),
            (Kind::Delete(held), OpResult::Deleted(results)) => self.deleted(held, results),
            (Kind::ChangeVisibility(entries), OpResult::VisibilityChanged(results)) => {
                self.visibility_changed(p, entries, results)
            }
            (Kind::Abandon(entries), OpResult::VisibilityChanged(results)) => {
                self.abandoned(entries, results)
            }
            (Kind::Purge(_), OpResult::Purged { messages }) => {
                self.wipe_done(p.submitted_step, step);
                self.counts.purges += 1;
                Ok(format!("{messages} purged"))
            }
            (Kind::DeleteQueue { incarnation }, OpResult::QueueDeleted) => {
                self.wipe_done(p.submitted_step, step);
                self.counts.queue_deletes += 1;
                // Every message of that incarnation of side is gone.
                self.side_deleted.insert(*incarnation);
                Ok("queue deleted".to_owned())
            }
            (Kind::CreateQueue(_), OpResult::QueueCreated { created, .. }) => {
                if created {
                    self.counts.queue_creates += 1;
                }
                Ok(format!("created: {created}"))
            }
            (Kind::Redrive, OpResult::Redriven { moved, stayed }) => {
                self.counts.redriven += moved;
                Ok(format!("{moved} moved, {stayed} stayed"))
            }
            (Kind::Peek(_), OpResult::Peeked(p)) => Ok(format!("{} peeked", p.len())),
            (Kind::Stats(_), OpResult::Queue(q)) => Ok(Self::stats_summary(&q)),
            (kind, other) => Err(format!("{kind:?} answered {other:?}")),
        }
    }

    /// A request that failed as a whole: only side may vanish under it.
    fn failed(&mut self, p: &Pending, e: &EngineError, step: u64) -> Result<String, String> {
        // Side comes and goes; a create of side while it exists (with
        // the same attributes) succeeds, one racing its deletion may
        // find the name still taken.
        let fine = match &p.kind {
            Kind::CreateQueue(_) => e.code() == ErrorCode::QueueExists,
            Kind::Redrive => false,
            k => e.code() == ErrorCode::QueueNotFound && k.queue() == Some(SIDE),
        };
        if !fine {
            return Err(format!("{:?} failed: {e}", p.kind));
        }
        self.wipe_done(p.submitted_step, step);
        if let Kind::ChangeVisibility(entries) = &p.kind {
            self.cv_done(entries);
        }
        if let Kind::Abandon(entries) = &p.kind {
            for (h, _) in entries {
                self.lease_settled(h.id);
            }
        }
        Ok(format!("error {:?}", e.code()))
    }

    /// A send's results: each accepted id is new (or was received before
    /// this result came back), each refusal one the simulation allows.
    fn sent(
        &mut self,
        p: &Pending,
        queue: &'static str,
        incarnation: u32,
        entries: Vec<Result<SendOutcome, EntryError>>,
    ) -> Result<String, String> {
        self.send_done(p.submitted_ns);
        let mut ok = 0;
        for e in entries {
            match e {
                Ok(s) if s.duplicate => self.counts.duplicates += 1,
                Ok(s) => {
                    if let Some(t) = self.tracks.get_mut(&s.id) {
                        if !t.early {
                            return Err(format!("message id {:?} given twice", s.id));
                        }
                        // Received before this result came back.
                        t.early = false;
                        t.accepted_ns = p.submitted_ns;
                        t.seen_step = t.seen_step.min(p.submitted_step);
                        t.incarnation = incarnation;
                        ok += 1;
                        self.counts.sent += 1;
                        continue;
                    }
                    ok += 1;
                    self.counts.sent += 1;
                    self.tracks.insert(
                        s.id,
                        Track {
                            family: family(queue),
                            accepted_ns: p.submitted_ns,
                            // Accepted no earlier than its submit:
                            // a wipe since then may have taken it.
                            seen_step: p.submitted_step,
                            max_delivery: 0,
                            lease: None,
                            deleted: None,
                            unsure: false,
                            incarnation,
                            last_view: None,
                            deliveries: Vec::new(),
                            early: false,
                            cv_in_flight: 0,
                            cv_alone: false,
                            cv_cancelled: false,
                            work_group: None,
                        },
                    );
                }
                Err(e) if send_error_expected(e.code()) => match e.code() {
                    ErrorCode::Busy => self.counts.busy += 1,
                    ErrorCode::QueueFull => self.counts.queue_full += 1,
                    _ => self.counts.too_large += 1,
                },
                // An entry forwarded to its dedup key's owner
                // may find side deleted meanwhile.
                Err(e) if e.code() == ErrorCode::QueueNotFound && queue == SIDE => {}
                Err(e) => return Err(format!("send entry failed: {e}")),
            }
        }
        Ok(format!("{ok} accepted"))
    }

    /// A receive's messages: each once, within the redrive policy, never
    /// before an earlier lease of it ended nor after its deletion; their
    /// receipts are kept for later deletes and changes.
    fn received(
        &mut self,
        p: &Pending,
        queue: &'static str,
        visibility_ms: u64,
        msgs: &[ReceivedMessage],
        now_ns: u64,
    ) -> Result<String, String> {
        if msgs.is_empty() {
            self.counts.long_polls_empty += 1;
        }
        let mut ids = HashSet::new();
        for m in msgs {
            if !ids.insert(m.id) {
                return Err(format!("{:?} twice in one receive", m.id));
            }
            if queue == WORK && m.receive_count > MAX_RECEIVES {
                return Err(format!(
                    "{:?} delivered from {WORK} with receive count {} (dead-letter at {})",
                    m.id,
                    m.receive_count,
                    MAX_RECEIVES + 1
                ));
            }
            if m.receipt.delivery != m.delivery() {
                return Err(format!("{:?}: receipt names another delivery", m.id));
            }
            // It existed at some step since the receive was
            // submitted: a wipe done since may have taken it.
            self.track_unseen(m.id, queue, p.submitted_step)?;
            let t = self
                .tracks
                .get_mut(&m.id)
                .unwrap_or_else(|| unreachable!("track_unseen inserted it or it was there"));
            t.seen_step = t.seen_step.max(p.submitted_step);
            if t.deliveries.contains(&m.delivery()) {
                return Err(format!(
                    "{:?}: delivery number {} given twice",
                    m.id,
                    m.delivery()
                ));
            }
            t.deliveries.push(m.delivery());
            if let (WORK, Some(g)) = (queue, &m.group) {
                t.work_group = Some(g.as_str().into());
            }
            if let Some(d) = t.deleted {
                if m.delivery() > d {
                    return Err(format!(
                        "{:?}: delivery {} after delivery {d} was deleted",
                        m.id,
                        m.delivery()
                    ));
                }
            }
            if let Some((d, end)) = t.lease {
                if d < m.delivery() && now_ns < end {
                    return Err(format!(
                        "{:?}: delivered again (delivery {}) at {} ms, before the lease \
                         of delivery {d} ended (not before {} ms)",
                        m.id,
                        m.delivery(),
                        now_ns / NS_PER_MS,
                        end / NS_PER_MS
                    ));
                }
            }
            if t.max_delivery > 0 {
                self.counts.redeliveries += 1;
            }
            self.counts.deliveries += 1;
            if m.delivery() > t.max_delivery {
                t.max_delivery = m.delivery();
                t.lease = Some((m.delivery(), p.submitted_ns + visibility_ms * NS_PER_MS));
            }
            if self.held.len() == HELD_MAX {
                self.held.swap_remove(0);
            }
            self.held.push(Held {
                queue,
                receipt: m.receipt,
                id: m.id,
                delivery: m.delivery(),
                forged: false,
            });
        }
        Ok(format!("{} received", msgs.len()))
    }

    /// A delete's results, one per receipt.
    fn deleted(
        &mut self,
        held: &[(Held, Snap)],
        results: Vec<Result<(), EntryError>>,
    ) -> Result<String, String> {
        if results.len() != held.len() {
            return Err("delete: a result per receipt".to_owned());
        }
        let mut ok = 0;
        for ((h, snap), r) in held.iter().zip(results) {
            match r {
                Ok(()) => {
                    self.receipt_accepted(h, snap, "delete")?;
                    ok += 1;
                    self.counts.deleted += 1;
                    let t = self
                        .tracks
                        .get_mut(&h.id)
                        .unwrap_or_else(|| unreachable!("receipt_accepted found the track"));
                    if t.deleted.is_some() {
                        return Err(format!("{:?} deleted twice", h.id));
                    }
                    t.deleted = Some(h.delivery);
                    t.lease = None;
                }
                Err(e) => self.receipt_refused(h, e.code())?,
            }
        }
        Ok(format!("{ok} deleted"))
    }

    /// A visibility change's results, one per entry.
    fn visibility_changed(
        &mut self,
        p: &Pending,
        entries: &[(Held, u32, Snap)],
        results: Vec<Result<(), EntryError>>,
    ) -> Result<String, String> {
        if results.len() != entries.len() {
            return Err("change visibility: a result per entry".to_owned());
        }
        self.cv_done(entries);
        let mut ok = 0;
        for ((h, timeout, snap), r) in entries.iter().zip(results) {
            match r {
                Ok(()) => {
                    self.receipt_accepted(h, snap, "change visibility")?;
                    ok += 1;
                    let t = self
                        .tracks
                        .get_mut(&h.id)
                        .unwrap_or_else(|| unreachable!("receipt_accepted found the track"));
                    if *timeout == 0 {
                        self.counts.released += 1;
                        t.lease = None;
                    } else {
                        self.counts.extended += 1;
                        // The lease was set no earlier than the
                        // submit, for the delivery still newest,
                        // by this change alone.
                        if h.delivery == t.max_delivery
                            && t.cv_in_flight == 0
                            && t.cv_alone
                            && !t.cv_cancelled
                        {
                            t.lease = Some((
                                h.delivery,
                                p.submitted_ns + u64::from(*timeout) * NS_PER_MS,
                            ));
                        }
                    }
                }
                Err(e) => self.receipt_refused(h, e.code())?,
            }
        }
        Ok(format!("{ok} changed"))
    }

    /// The results of releasing a disconnected client's bound leases.
    fn abandoned(
        &mut self,
        entries: &[(Held, Snap)],
        results: Vec<Result<(), EntryError>>,
    ) -> Result<String, String> {
        if results.len() != entries.len() {
            return Err("release of bound leases: a result per receipt".to_owned());
        }
        for (h, _) in entries {
            self.lease_settled(h.id);
        }
        let mut ok = 0;
        for ((h, snap), r) in entries.iter().zip(results) {
            match r {
                Ok(()) => {
                    self.receipt_accepted(h, snap, "release of a bound lease")?;
                    ok += 1;
                    self.counts.abandoned += 1;
                    let t = self
                        .tracks
                        .get_mut(&h.id)
                        .unwrap_or_else(|| unreachable!("receipt_accepted found the track"));
                    t.lease = None;
                }
                Err(e) => self.receipt_refused(h, e.code())?,
            }
        }
        Ok(format!("{ok} bound leases current"))
    }

    /// A queue's stats, summed up for the log line.
    fn stats_summary(q: &QueueInfo) -> String {
        let s = q.stats;
        let left = s.sent + s.moved_in;
        let right = s.visible
            + s.delayed
            + s.in_flight
            + s.deleted
            + s.dead_lettered
            + s.redriven
            + s.dropped
            + s.purged;
        // Summed over shards at different instants: a message
        // moving between queues may be counted on one side only,
        // but never within one queue's own sums on a settled
        // system; checked strictly at checkpoints by the engine.
        format!("stats of {}: {left} in, {right} accounted", q.queue)
    }
}
