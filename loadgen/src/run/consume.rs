//! The consumers: receive (one batch at a time, or up to `--window`
//! receives and deletes in flight), classify each delivery with the
//! tracker (first delivery, redelivery, duplicate, not this pass's),
//! delete, and record the latencies into the consumer's own recorder.

use std::collections::VecDeque;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pass::{Pass, splitmix64};
use crate::adapter::{Adapter, AdapterError, Finished, Receipt};
use crate::body::read_stamp;
use crate::config::{Workload, limits};
use crate::stats::record_ns;
use crate::tracker::Arrival;

/// Whether a message is left undeleted at its first delivery: a fixed
/// pseudo-random choice per sequence number, so any consumer decides alike.
pub(super) fn leaves(seq: u64, run_tag: u32, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let r = splitmix64(seq ^ (u64::from(run_tag) << 32)) >> 11;
    (r as f64 / (1u64 << 53) as f64) < ratio
}

/// The deliveries of one receive, to be deleted: their receipts, and per
/// receipt (sequence number, intended send time, first delivery), sequence
/// number `u64::MAX` for a body that is not this pass's.
#[derive(Default)]
pub(super) struct Deliveries {
    pub(super) receipts: Vec<Receipt>,
    pub(super) meta: Vec<(u64, u64, bool)>,
    pub(super) dups: u64,
    pub(super) corrupt: u64,
    pub(super) early: u64,
    /// When the receive's reply was taken: read once, at its first message.
    pub(super) received_ns: Option<u64>,
}

impl Deliveries {
    pub(super) fn with_capacity(n: usize) -> Self {
        Deliveries {
            receipts: Vec::with_capacity(n),
            meta: Vec::with_capacity(n),
            ..Deliveries::default()
        }
    }

    pub(super) fn clear(&mut self) {
        self.receipts.clear();
        self.meta.clear();
        self.dups = 0;
        self.corrupt = 0;
        self.early = 0;
        self.received_ns = None;
    }
}

/// Latencies measured and not yet recorded, in ns.
#[derive(Default)]
pub(super) struct Samples {
    /// Send to receive, from the intended send time.
    pub(super) s2r: Vec<u64>,
    /// Send to receive, from the actual send (latency workload).
    pub(super) naive: Vec<u64>,
    /// Send to delete acknowledged.
    pub(super) cycle: Vec<u64>,
    /// Redelivery lateness.
    pub(super) late: Vec<u64>,
}

impl Samples {
    fn is_empty(&self) -> bool {
        self.s2r.is_empty()
            && self.naive.is_empty()
            && self.cycle.is_empty()
            && self.late.is_empty()
    }
}

impl Pass<'_> {
    /// Classifies one delivery: the receipt to delete (and what to record
    /// when it is deleted) goes to `batch`, its latencies to `samples`.
    ///
    /// Every message of one receive arrived with its reply, so all of them
    /// are received at the moment the first is classified: one clock read
    /// per receive, and the later messages of a batch are not charged the
    /// time the load generator spends on the earlier ones.
    pub(super) fn classify(
        &self,
        body: &[u8],
        receipt: Receipt,
        batch: &mut Deliveries,
        samples: &mut Samples,
    ) {
        let t = *batch.received_ns.get_or_insert_with(|| self.clock.now_ns());
        let stamp = match read_stamp(body) {
            Ok(s) if s.run_tag == self.run_tag && self.tracker.contains(s.seq) => s,
            _ => {
                batch.corrupt += 1;
                batch.receipts.push(receipt);
                batch.meta.push((u64::MAX, 0, false));
                return;
            }
        };
        match self.tracker.on_receive(stamp.seq) {
            Arrival::First => {
                samples.s2r.push(t.saturating_sub(stamp.intended_ns));
                if self.cfg.workload == Workload::Latency {
                    samples.naive.push(t.saturating_sub(stamp.sent_ns));
                }
                if leaves(stamp.seq, self.run_tag, self.cfg.fail_ratio) {
                    self.tracker.mark_left(stamp.seq, t);
                } else {
                    batch.receipts.push(receipt);
                    batch.meta.push((stamp.seq, stamp.intended_ns, true));
                }
            }
            Arrival::Redelivery { first_receive_ns } => {
                let lease_end = first_receive_ns.saturating_add(self.visibility_ns);
                if t < lease_end {
                    batch.early += 1;
                }
                samples.late.push(t.saturating_sub(lease_end));
                batch.receipts.push(receipt);
                batch.meta.push((stamp.seq, 0, false));
            }
            Arrival::Duplicate => {
                batch.dups += 1;
                batch.receipts.push(receipt);
                batch.meta.push((stamp.seq, 0, false));
            }
        }
    }

    /// Counts what one receive brought.
    fn received(&self, got: usize, batch: &Deliveries) {
        self.deliveries.fetch_add(got as u64, Ordering::Relaxed);
        self.duplicates.fetch_add(batch.dups, Ordering::Relaxed);
        self.corrupt.fetch_add(batch.corrupt, Ordering::Relaxed);
        self.early.fetch_add(batch.early, Ordering::Relaxed);
    }

    /// Settles the deliveries of `batch` once their delete was answered;
    /// `rejected` holds the indices the broker refused.
    fn deleted(&self, batch: &Deliveries, rejected: &mut [usize], samples: &mut Samples) {
        let t = self.clock.now_ns();
        rejected.sort_unstable();
        let mut settled = 0;
        for (i, &(seq, intended, first)) in batch.meta.iter().enumerate() {
            if rejected.binary_search(&i).is_ok() || seq == u64::MAX {
                continue;
            }
            if self.tracker.mark_deleted(seq) {
                settled += 1;
                if first {
                    samples.cycle.push(t.saturating_sub(intended));
                }
            }
        }
        self.delete_rejected
            .fetch_add(rejected.len() as u64, Ordering::Relaxed);
        if settled > 0 {
            self.last_settle_ns.fetch_max(t, Ordering::Relaxed);
            self.settled.fetch_add(settled, Ordering::AcqRel);
        }
    }

    /// Moves `samples` into consumer `index`'s recorder.
    fn record(&self, index: usize, samples: &mut Samples) {
        if samples.is_empty() {
            return;
        }
        let mut r = self.recorders[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        record_ns(&mut r.send_to_receive, &mut samples.s2r);
        record_ns(&mut r.send_to_receive_uncorrected, &mut samples.naive);
        record_ns(&mut r.cycle, &mut samples.cycle);
        record_ns(&mut r.lateness, &mut samples.late);
    }

    /// Whether a consumer should stop starting receives: everything is
    /// settled and the linger is over, or the drain timeout ran out.
    fn consumer_done(&self, linger_until: &mut Option<u64>) -> bool {
        let now = self.clock.now_ns();
        if self.all_settled() {
            let until = *linger_until.get_or_insert(now + limits::LINGER.as_nanos() as u64);
            if now >= until {
                return true;
            }
        }
        if self.drain_deadline_ns().is_some_and(|d| now >= d) {
            if !self.all_settled() {
                self.drain_timed_out.store(true, Ordering::Relaxed);
            }
            return true;
        }
        false
    }

    /// A consumer: receive, classify, record, delete, until done.
    pub(super) fn consume(
        &self,
        index: usize,
        adapter: &mut dyn Adapter,
    ) -> Result<(), AdapterError> {
        if self.cfg.window > 1 {
            return self.consume_pipelined(index, adapter);
        }
        let mut batch = Deliveries::with_capacity(self.cfg.batch);
        let mut rejected = Vec::new();
        let mut samples = Samples::default();
        let mut linger_until: Option<u64> = None;
        loop {
            if self.abort.load(Ordering::Relaxed) || self.consumer_done(&mut linger_until) {
                return Ok(());
            }
            batch.clear();
            let got = adapter.receive_batch(
                self.cfg.batch,
                limits::RECEIVE_WAIT,
                &mut |body, receipt| self.classify(body, receipt, &mut batch, &mut samples),
            )?;
            self.received(got, &batch);
            if !batch.receipts.is_empty() {
                rejected.clear();
                adapter.delete_batch(&batch.receipts, &mut rejected)?;
                self.deleted(&batch, &mut rejected, &mut samples);
            }
            self.record(index, &mut samples);
        }
    }

    /// The consumer with up to `--window` receives and deletes in flight.
    fn consume_pipelined(
        &self,
        index: usize,
        adapter: &mut dyn Adapter,
    ) -> Result<(), AdapterError> {
        enum Op {
            Receive,
            Delete(Deliveries),
        }
        let window = self.cfg.window;
        let mut in_flight: VecDeque<Op> = VecDeque::new();
        let mut spare: Vec<Deliveries> = Vec::new();
        let mut receiving = 0usize;
        let mut dry = false;
        let mut rejected = Vec::new();
        let mut samples = Samples::default();
        let mut linger_until: Option<u64> = None;
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            // Once done, start nothing more and finish what is in flight.
            let done = self.consumer_done(&mut linger_until);
            while !done && in_flight.len() < window && !(dry && receiving > 0) {
                let wait = if in_flight.is_empty() {
                    limits::RECEIVE_WAIT
                } else {
                    Duration::ZERO
                };
                adapter.start_receive(self.cfg.batch, wait)?;
                in_flight.push_back(Op::Receive);
                receiving += 1;
            }
            match in_flight.pop_front() {
                None => return Ok(()),
                Some(Op::Receive) => {
                    receiving -= 1;
                    let mut batch = spare
                        .pop()
                        .unwrap_or_else(|| Deliveries::with_capacity(self.cfg.batch));
                    batch.clear();
                    let finished = adapter.finish(
                        &mut |body, receipt| self.classify(body, receipt, &mut batch, &mut samples),
                        &mut rejected,
                    )?;
                    let Finished::Received(got) = finished else {
                        return Err(AdapterError::Unsupported(format!(
                            "a receive finished as {finished:?}"
                        )));
                    };
                    dry = got == 0;
                    self.received(got, &batch);
                    if batch.receipts.is_empty() {
                        spare.push(batch);
                    } else {
                        adapter.start_delete(&batch.receipts)?;
                        in_flight.push_back(Op::Delete(batch));
                    }
                }
                Some(Op::Delete(batch)) => {
                    rejected.clear();
                    let finished = adapter.finish(&mut |_, _| {}, &mut rejected)?;
                    if finished != Finished::Deleted {
                        return Err(AdapterError::Unsupported(format!(
                            "a delete finished as {finished:?}"
                        )));
                    }
                    self.deleted(&batch, &mut rejected, &mut samples);
                    spare.push(batch);
                }
            }
            self.record(index, &mut samples);
        }
    }
}
