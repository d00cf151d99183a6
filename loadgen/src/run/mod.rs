//! Running the workloads: one pass against one target at a time, every
//! target in turn within a pass, passes interleaved.
//!
//! A pass sets up a fresh queue, opens one connection per producer and per
//! consumer (before the clock starts), then runs plain std threads:
//! producers send batches (closed loop, or open loop on the fixed schedule
//! of the latency workload), consumers receive, classify each delivery with
//! the [`Tracker`], record latencies into their own [`Recorder`], and delete
//! in batches. Sending ends at `--messages` or `--duration`; consumers stop
//! when every sent message is deleted (plus a short linger for late
//! duplicates) or when the drain timeout runs out.
//!
//! With `--window 1` every operation is a blocking call: one batch in
//! flight per connection. With a window of N, a producer keeps up to N sends
//! unanswered and a consumer up to N receives and deletes, started and
//! finished in order through the adapters' pipelined paths; a receive waits
//! (long-polls) only when nothing else is in flight, and after a receive
//! that found nothing a consumer keeps a single receive in flight until one
//! finds messages again, so an empty queue is not polled in a loop. The open
//! loop sends what is due as soon as it is due while the window has room,
//! one batch of whatever is due at that moment: the same for every target.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use crate::adapter::{
    Adapter, AdapterError, Finished, QueueSpec, Receipt, Role, Setting, Target, TargetUrl,
};
use crate::body::{BodyBuf, Stamp, read_stamp};
use crate::config::{Bound, RunConfig, Workload, limits};
use crate::machine::{self, CpuUse, Steal};
use crate::schedule::{Clock, OpenLoop, Schedule};
use crate::stats::{Percentiles, Recorder, record_ns};
use crate::tracker::{Arrival, Tally, Tracker};

#[cfg(test)]
mod fake;
mod progress;

/// Why a pass did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The target could not be opened or its queue set up.
    #[error("set-up failed: {0}")]
    Setup(#[source] AdapterError),
    /// A connection could not be opened.
    #[error("connecting {role} failed: {source}")]
    Connect {
        /// Which connection.
        role: String,
        /// Why.
        source: AdapterError,
    },
    /// A producer or consumer hit an error and the pass stopped.
    #[error("{role} failed: {source}")]
    Worker {
        /// Which thread.
        role: String,
        /// Why.
        source: AdapterError,
    },
    /// A producer or consumer thread panicked.
    #[error("{0} panicked")]
    Panicked(String),
    /// Writing the configuration or progress failed.
    #[error("writing output failed: {0}")]
    Output(#[from] std::io::Error),
}

/// Everything measured in one pass against one target.
#[derive(Debug, Clone)]
pub struct PassReport {
    /// The target.
    pub target: TargetUrl,
    /// The workload.
    pub workload: Workload,
    /// Pass number, from 1.
    pub pass: u32,
    /// Per-message accounting.
    pub tally: Tally,
    /// Deliveries, redeliveries and duplicates included.
    pub deliveries: u64,
    /// Deliveries that should not have happened.
    pub duplicates: u64,
    /// Bodies that were not this pass's messages.
    pub corrupt: u64,
    /// Deletes the broker refused (the lease had passed to someone else).
    pub delete_rejected: u64,
    /// Redeliveries that came before the lease's end as this process saw it
    /// (recorded as 0 lateness).
    pub early_redeliveries: u64,
    /// Whether consumers stopped at the drain timeout rather than after the
    /// last delete.
    pub drain_timed_out: bool,
    /// From the first send to the last delete.
    pub active: Duration,
    /// Deleted messages per second over `active`.
    pub throughput: f64,
    /// The merged histograms.
    pub recorder: Recorder,
    /// The configuration in force (peer settings included).
    pub settings: Vec<Setting>,
    /// The time the hypervisor took from each CPU while the pass's threads
    /// ran (`None` where the system does not count it).
    pub steal: Option<Steal>,
    /// The load generator's own CPU use while the pass's threads ran.
    pub cpu: Option<CpuUse>,
}

impl PassReport {
    /// The metric SLOs and plots use: redelivery lateness for the
    /// redelivery workload, send to receive otherwise.
    pub fn primary(&self) -> &Histogram<u64> {
        match self.workload {
            Workload::Redelivery => &self.recorder.lateness,
            _ => &self.recorder.send_to_receive,
        }
    }

    /// The name of [`PassReport::primary`].
    pub fn primary_name(&self) -> &'static str {
        match self.workload {
            Workload::Redelivery => "redelivery lateness",
            _ => "send to receive",
        }
    }

    /// Percentiles of the primary metric.
    pub fn primary_percentiles(&self) -> Percentiles {
        Percentiles::of(self.primary())
    }
}

/// The result of one pass against one target.
#[derive(Debug)]
pub struct PassOutcome {
    /// The target.
    pub target: TargetUrl,
    /// Pass number, from 1.
    pub pass: u32,
    /// The report, or why there is none.
    pub result: Result<PassReport, RunError>,
}

/// Where a run writes as it goes.
pub struct Output<'a> {
    /// The printed configuration of each pass.
    pub config: &'a mut dyn Write,
    /// The progress line, once a second; `None` for `--quiet`.
    pub progress: Option<&'a mut (dyn Write + Send)>,
}

impl std::fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Runs every pass over every target, interleaved: pass 1 of each target in
/// the order given, then pass 2, and so on.
pub fn run(cfg: &RunConfig, out: &mut Output<'_>) -> Vec<PassOutcome> {
    let mut outcomes = Vec::new();
    for pass in 1..=cfg.passes {
        for url in &cfg.targets {
            let result = url
                .open_sluice(cfg.token.as_deref(), cfg.read_spin, cfg.sluice_tls.clone())
                .map_err(RunError::Setup)
                .and_then(|mut target| run_pass(cfg, url, target.as_mut(), pass, out));
            outcomes.push(PassOutcome {
                target: url.clone(),
                pass,
                result,
            });
        }
    }
    outcomes
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn wall_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether a message is left undeleted at its first delivery: a fixed
/// pseudo-random choice per sequence number, so any consumer decides alike.
fn leaves(seq: u64, run_tag: u32, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let r = splitmix64(seq ^ (u64::from(run_tag) << 32)) >> 11;
    (r as f64 / (1u64 << 53) as f64) < ratio
}

/// State shared by the threads of one pass.
struct Pass<'c> {
    cfg: &'c RunConfig,
    clock: Clock,
    tracker: Tracker,
    run_tag: u32,
    capacity: u64,
    visibility_ns: u64,
    schedule: Option<Schedule>,
    next_seq: AtomicU64,
    sent: AtomicU64,
    settled: AtomicU64,
    deliveries: AtomicU64,
    duplicates: AtomicU64,
    corrupt: AtomicU64,
    delete_rejected: AtomicU64,
    early: AtomicU64,
    producers_running: AtomicUsize,
    producers_done_ns: AtomicU64,
    first_send_ns: AtomicU64,
    last_settle_ns: AtomicU64,
    drain_timed_out: AtomicBool,
    abort: AtomicBool,
    finished: AtomicBool,
    error: Mutex<Option<RunError>>,
    recorders: Vec<Mutex<Recorder>>,
}

impl<'c> Pass<'c> {
    /// The state of pass number `pass` of `cfg`, its clock starting now.
    fn new(cfg: &'c RunConfig, pass: u32) -> Pass<'c> {
        let clock = Clock::start();
        let capacity = cfg.capacity();
        let schedule = cfg.rate.map(|rate| {
            // Start 10 ms out so every producer thread is up for message 0.
            let start = 10_000_000;
            match cfg.bound {
                Bound::Messages(n) => Schedule::new(start, rate, n),
                Bound::Duration(d) => Schedule::for_duration(start, rate, d),
            }
        });
        Pass {
            cfg,
            clock,
            tracker: Tracker::new(capacity, cfg.fail_ratio > 0.0),
            run_tag: splitmix64(wall_nanos() ^ u64::from(pass)) as u32,
            capacity,
            visibility_ns: u64::try_from(cfg.visibility_timeout.as_nanos()).unwrap_or(u64::MAX),
            schedule,
            next_seq: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            deliveries: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            corrupt: AtomicU64::new(0),
            delete_rejected: AtomicU64::new(0),
            early: AtomicU64::new(0),
            producers_running: AtomicUsize::new(cfg.producers),
            producers_done_ns: AtomicU64::new(u64::MAX),
            first_send_ns: AtomicU64::new(u64::MAX),
            last_settle_ns: AtomicU64::new(0),
            drain_timed_out: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            error: Mutex::new(None),
            recorders: (0..cfg.consumers)
                .map(|_| Mutex::new(Recorder::new()))
                .collect(),
        }
    }
}

impl Pass<'_> {
    fn fail(&self, err: RunError) {
        self.abort.store(true, Ordering::SeqCst);
        let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(err);
        }
    }

    fn producers_done(&self) -> bool {
        self.producers_running.load(Ordering::Acquire) == 0
    }

    /// Every message sent has been deleted and no more will be sent.
    fn all_settled(&self) -> bool {
        self.producers_done()
            && self.settled.load(Ordering::Acquire) >= self.sent.load(Ordering::Acquire)
    }

    fn drain_deadline_ns(&self) -> Option<u64> {
        let done = self.producers_done_ns.load(Ordering::Acquire);
        (done != u64::MAX).then(|| done.saturating_add(self.cfg.drain_timeout.as_nanos() as u64))
    }

    fn send_end_ns(&self) -> Option<u64> {
        match self.cfg.bound {
            Bound::Duration(d) => Some(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            Bound::Messages(_) => None,
        }
    }

    fn producer_finished(&self) {
        if self.producers_running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.producers_done_ns
                .store(self.clock.now_ns(), Ordering::Release);
        }
    }

    /// Writes the stamps of `seqs` (with their intended times) into
    /// `bodies`; returns the bodies to send.
    fn stamp<'b>(&self, bodies: &'b mut [BodyBuf], seqs: &[(u64, u64)]) -> Vec<&'b [u8]> {
        let sent_ns = self.clock.now_ns();
        for (body, &(seq, intended_ns)) in bodies.iter_mut().zip(seqs) {
            body.stamp(
                self.cfg.size,
                Stamp {
                    run_tag: self.run_tag,
                    seq,
                    intended_ns,
                    sent_ns,
                },
            );
        }
        self.first_send_ns.fetch_min(sent_ns, Ordering::Relaxed);
        bodies[..seqs.len()].iter().map(BodyBuf::as_slice).collect()
    }

    /// Counts `seqs` as sent once the broker acknowledged them.
    fn acknowledged(&self, seqs: &[(u64, u64)]) {
        for &(seq, _) in seqs {
            self.tracker.mark_sent(seq);
        }
        self.sent.fetch_add(seqs.len() as u64, Ordering::AcqRel);
    }

    /// Sends `seqs` (with their intended times) as one batch.
    fn send(
        &self,
        adapter: &mut dyn Adapter,
        bodies: &mut [BodyBuf],
        seqs: &[(u64, u64)],
    ) -> Result<(), AdapterError> {
        let refs = self.stamp(bodies, seqs);
        adapter.send_batch(&refs)?;
        self.acknowledged(seqs);
        Ok(())
    }

    /// Starts sending `seqs` as one batch: the pipelined [`Pass::send`].
    fn start_send(
        &self,
        adapter: &mut dyn Adapter,
        bodies: &mut [BodyBuf],
        seqs: &[(u64, u64)],
    ) -> Result<(), AdapterError> {
        let refs = self.stamp(bodies, seqs);
        adapter.start_send(&refs)
    }

    /// Finishes the oldest send in flight, a batch of `seqs`.
    fn finish_send(
        &self,
        adapter: &mut dyn Adapter,
        seqs: &[(u64, u64)],
    ) -> Result<(), AdapterError> {
        match adapter.finish(&mut |_, _| {}, &mut Vec::new())? {
            Finished::Sent => {
                self.acknowledged(seqs);
                Ok(())
            }
            other => Err(AdapterError::Unsupported(format!(
                "a send finished as {other:?}"
            ))),
        }
    }

    /// Whether closed-loop producers must wait for consumers to catch up.
    fn backlog_full(&self) -> bool {
        let in_flight = self
            .sent
            .load(Ordering::Relaxed)
            .saturating_sub(self.settled.load(Ordering::Relaxed));
        in_flight >= self.cfg.in_flight_max.unwrap_or(limits::IN_FLIGHT_MAX)
    }

    /// A closed-loop producer: claim a batch of sequence numbers, send it,
    /// repeat; wait while too many messages are in flight.
    fn produce_closed(&self, adapter: &mut dyn Adapter) -> Result<(), AdapterError> {
        if self.cfg.window > 1 {
            return self.produce_closed_pipelined(adapter);
        }
        let batch = self.cfg.batch as u64;
        let mut bodies = vec![BodyBuf::default(); self.cfg.batch];
        let mut seqs = Vec::with_capacity(self.cfg.batch);
        let end = self.send_end_ns();
        loop {
            if self.abort.load(Ordering::Relaxed) || end.is_some_and(|e| self.clock.now_ns() >= e) {
                return Ok(());
            }
            if self.backlog_full() {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            let first = self.next_seq.fetch_add(batch, Ordering::Relaxed);
            if first >= self.capacity {
                return Ok(());
            }
            let n = batch.min(self.capacity - first);
            let now = self.clock.now_ns();
            seqs.clear();
            seqs.extend((first..first + n).map(|seq| (seq, now)));
            self.send(adapter, &mut bodies, &seqs)?;
        }
    }

    /// The closed loop with up to `--window` sends in flight.
    fn produce_closed_pipelined(&self, adapter: &mut dyn Adapter) -> Result<(), AdapterError> {
        let batch = self.cfg.batch as u64;
        let mut bodies = vec![BodyBuf::default(); self.cfg.batch];
        let mut in_flight: VecDeque<Vec<(u64, u64)>> = VecDeque::new();
        let mut spare: Vec<Vec<(u64, u64)>> = Vec::new();
        let end = self.send_end_ns();
        let mut exhausted = false;
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            exhausted |= end.is_some_and(|e| self.clock.now_ns() >= e);
            if !exhausted && in_flight.len() < self.cfg.window && !self.backlog_full() {
                let first = self.next_seq.fetch_add(batch, Ordering::Relaxed);
                if first >= self.capacity {
                    exhausted = true;
                    continue;
                }
                let n = batch.min(self.capacity - first);
                let now = self.clock.now_ns();
                let mut seqs = spare.pop().unwrap_or_default();
                seqs.clear();
                seqs.extend((first..first + n).map(|seq| (seq, now)));
                self.start_send(adapter, &mut bodies, &seqs)?;
                in_flight.push_back(seqs);
            } else if let Some(seqs) = in_flight.pop_front() {
                self.finish_send(adapter, &seqs)?;
                spare.push(seqs);
            } else if exhausted {
                return Ok(());
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// An open-loop producer on the fixed schedule: sends what is due, in
    /// batches of up to `--batch`, never waiting for the broker to catch up.
    fn produce_open(&self, producer: usize, adapter: &mut dyn Adapter) -> Result<(), AdapterError> {
        let schedule = self.schedule.expect("the latency workload has a schedule");
        let mut walk = OpenLoop::new(schedule, producer as u64, self.cfg.producers as u64);
        let mut bodies = vec![BodyBuf::default(); self.cfg.batch];
        let mut due = Vec::with_capacity(self.cfg.batch);
        let window = self.cfg.window;
        let mut in_flight: VecDeque<Vec<(u64, u64)>> = VecDeque::new();
        let mut spare: Vec<Vec<(u64, u64)>> = Vec::new();
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let Some(next) = walk.next_intended_ns() else {
                // Everything is sent: collect the acknowledgements.
                while let Some(seqs) = in_flight.pop_front() {
                    self.finish_send(adapter, &seqs)?;
                }
                return Ok(());
            };
            let now = self.clock.now_ns();
            if next <= now {
                if window == 1 {
                    walk.take_due(now, self.cfg.batch, &mut due);
                    self.note_issued(&due);
                    self.send(adapter, &mut bodies, &due)?;
                } else if in_flight.len() >= window {
                    // The window is full: wait for the oldest send.
                    let seqs = in_flight.pop_front().expect("a full window");
                    self.finish_send(adapter, &seqs)?;
                    spare.push(seqs);
                } else {
                    let mut seqs = spare.pop().unwrap_or_default();
                    walk.take_due(now, self.cfg.batch, &mut seqs);
                    self.note_issued(&seqs);
                    self.start_send(adapter, &mut bodies, &seqs)?;
                    in_flight.push_back(seqs);
                }
                continue;
            }
            let ahead = next - now;
            if ahead > OPEN_LOOP_SPIN_NS {
                if let Some(seqs) = in_flight.pop_front() {
                    // Nothing is due soon: collect an acknowledgement.
                    self.finish_send(adapter, &seqs)?;
                    spare.push(seqs);
                } else {
                    // The kernel wakes sleepers tens of microseconds late,
                    // so the last stretch yields instead.
                    std::thread::sleep(Duration::from_nanos(ahead - OPEN_LOOP_SPIN_NS + 30_000));
                }
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Notes the sequence numbers an open-loop send hands out.
    fn note_issued(&self, due: &[(u64, u64)]) {
        let top = due.iter().map(|&(seq, _)| seq).max().unwrap_or(0);
        self.next_seq.fetch_max(top + 1, Ordering::Relaxed);
    }

    /// Classifies one delivery: the receipt to delete (and what to record
    /// when it is deleted) goes to `batch`, its latencies to `samples`.
    ///
    /// Every message of one receive arrived with its reply, so all of them
    /// are received at the moment the first is classified: one clock read
    /// per receive, and the later messages of a batch are not charged the
    /// time the load generator spends on the earlier ones.
    fn classify(
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
    fn consume(&self, index: usize, adapter: &mut dyn Adapter) -> Result<(), AdapterError> {
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

    fn merged(&self) -> Recorder {
        let mut all = Recorder::new();
        for r in &self.recorders {
            all.merge(&r.lock().unwrap_or_else(PoisonError::into_inner));
        }
        all
    }
}

/// How close to its next message's time an open-loop producer stops
/// sleeping and waiting for acknowledgements, and yields instead.
const OPEN_LOOP_SPIN_NS: u64 = 150_000;

/// The deliveries of one receive, to be deleted: their receipts, and per
/// receipt (sequence number, intended send time, first delivery), sequence
/// number `u64::MAX` for a body that is not this pass's.
#[derive(Default)]
struct Deliveries {
    receipts: Vec<Receipt>,
    meta: Vec<(u64, u64, bool)>,
    dups: u64,
    corrupt: u64,
    early: u64,
    /// When the receive's reply was taken: read once, at its first message.
    received_ns: Option<u64>,
}

impl Deliveries {
    fn with_capacity(n: usize) -> Self {
        Deliveries {
            receipts: Vec::with_capacity(n),
            meta: Vec::with_capacity(n),
            ..Deliveries::default()
        }
    }

    fn clear(&mut self) {
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
struct Samples {
    /// Send to receive, from the intended send time.
    s2r: Vec<u64>,
    /// Send to receive, from the actual send (latency workload).
    naive: Vec<u64>,
    /// Send to delete acknowledged.
    cycle: Vec<u64>,
    /// Redelivery lateness.
    late: Vec<u64>,
}

impl Samples {
    fn is_empty(&self) -> bool {
        self.s2r.is_empty()
            && self.naive.is_empty()
            && self.cycle.is_empty()
            && self.late.is_empty()
    }
}

/// A queue name valid for every peer, fresh for each pass.
fn queue_name(pass: u32) -> String {
    format!(
        "sluice_loadgen_{}_{:x}_p{pass}",
        std::process::id(),
        wall_nanos() & 0xffff_ffff_ffff
    )
}

/// Writes the configuration block of a pass.
fn print_config(
    out: &mut dyn Write,
    cfg: &RunConfig,
    url: &TargetUrl,
    pass: u32,
    settings: &[Setting],
) -> std::io::Result<()> {
    writeln!(out, "== {url}  pass {pass} of {} ==", cfg.passes)?;
    let width = settings.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for s in settings {
        writeln!(out, "  {:width$}  {}", s.name, s.value)?;
    }
    out.flush()
}

/// Runs one pass of the configured workload against `target`.
pub fn run_pass(
    cfg: &RunConfig,
    url: &TargetUrl,
    target: &mut dyn Target,
    pass: u32,
    out: &mut Output<'_>,
) -> Result<PassReport, RunError> {
    let spec = QueueSpec {
        name: queue_name(pass),
        visibility_timeout: cfg.visibility_timeout,
        batch_max: cfg.batch,
        body_bytes: cfg.size,
        producers: cfg.producers,
        consumers: cfg.consumers,
    };
    target.setup(&spec).map_err(RunError::Setup)?;
    let result = run_set_up(cfg, url, target, pass, out);
    let teardown = target.teardown();
    let report = result?;
    teardown.map_err(RunError::Setup)?;
    Ok(report)
}

fn run_set_up(
    cfg: &RunConfig,
    url: &TargetUrl,
    target: &mut dyn Target,
    pass: u32,
    out: &mut Output<'_>,
) -> Result<PassReport, RunError> {
    let mut settings = vec![
        Setting::new("workload", cfg.describe()),
        Setting::new(
            "connections",
            format!(
                "{} producer + {} consumer, one each, plus one for set-up and tear-down",
                cfg.producers, cfg.consumers
            ),
        ),
        Setting::new(
            "pipeline",
            if cfg.window == 1 {
                format!("one batch of up to {} in flight per connection", cfg.batch)
            } else {
                format!(
                    "up to {} batches of up to {} in flight per connection (--window)",
                    cfg.window, cfg.batch
                )
            },
        ),
    ];
    settings.extend(target.settings());
    print_config(out.config, cfg, url, pass, &settings)?;

    let mut producers = Vec::with_capacity(cfg.producers);
    for i in 0..cfg.producers {
        let a = target
            .connect(Role::Producer(i))
            .map_err(|source| RunError::Connect {
                role: format!("producer {i}"),
                source,
            })?;
        producers.push(a);
    }
    let mut consumers = Vec::with_capacity(cfg.consumers);
    for i in 0..cfg.consumers {
        let a = target
            .connect(Role::Consumer(i))
            .map_err(|source| RunError::Connect {
                role: format!("consumer {i}"),
                source,
            })?;
        consumers.push(a);
    }

    let state = Pass::new(cfg, pass);

    let label = format!("{url} pass {pass}/{}", cfg.passes);
    let steal_before = machine::Sample::now();
    let cpu_before = machine::CpuClock::now();
    std::thread::scope(|s| {
        let state = &state;
        let mut workers = Vec::new();
        for (i, mut a) in consumers.into_iter().enumerate() {
            let role = format!("consumer {i}");
            let h = std::thread::Builder::new()
                .name(format!("consumer-{i}"))
                .spawn_scoped(s, move || {
                    if let Err(source) = state.consume(i, a.as_mut()) {
                        state.fail(RunError::Worker { role, source });
                    }
                });
            workers.push((format!("consumer {i}"), h));
        }
        for (i, mut a) in producers.into_iter().enumerate() {
            let role = format!("producer {i}");
            let h = std::thread::Builder::new()
                .name(format!("producer-{i}"))
                .spawn_scoped(s, move || {
                    let r = match state.schedule {
                        Some(_) => state.produce_open(i, a.as_mut()),
                        None => state.produce_closed(a.as_mut()),
                    };
                    state.producer_finished();
                    if let Err(source) = r {
                        state.fail(RunError::Worker { role, source });
                    }
                });
            workers.push((format!("producer {i}"), h));
        }
        let progress = out.progress.as_deref_mut().map(|w| {
            let label = label.clone();
            s.spawn(move || progress::report(state, &label, w))
        });
        for (role, h) in workers {
            match h {
                Ok(h) => {
                    if h.join().is_err() {
                        state.fail(RunError::Panicked(role));
                    }
                }
                Err(e) => state.fail(RunError::Worker {
                    role,
                    source: AdapterError::Io {
                        peer: "loadgen",
                        source: e,
                    },
                }),
            }
        }
        state.finished.store(true, Ordering::Release);
        if let Some(p) = progress {
            let _ = p.join();
        }
    });

    let steal = steal_before.and_then(|before| Some(machine::Sample::now()?.since(&before)));
    let cpu = cpu_before
        .and_then(|before| Some(machine::CpuClock::now()?.since(&before, machine::allowed_cpus())));
    if let Some(err) = state
        .error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        return Err(err);
    }
    let issued = state.next_seq.load(Ordering::Acquire).min(state.capacity);
    let tally = state.tracker.tally(issued);
    let first = state.first_send_ns.load(Ordering::Relaxed);
    let last = state.last_settle_ns.load(Ordering::Relaxed);
    let active = Duration::from_nanos(last.saturating_sub(first.min(last)));
    let throughput = if active.is_zero() {
        0.0
    } else {
        tally.deleted as f64 / active.as_secs_f64()
    };
    Ok(PassReport {
        target: url.clone(),
        workload: cfg.workload,
        pass,
        tally,
        deliveries: state.deliveries.load(Ordering::Relaxed),
        duplicates: state.duplicates.load(Ordering::Relaxed),
        corrupt: state.corrupt.load(Ordering::Relaxed),
        delete_rejected: state.delete_rejected.load(Ordering::Relaxed),
        early_redeliveries: state.early.load(Ordering::Relaxed),
        drain_timed_out: state.drain_timed_out.load(Ordering::Relaxed),
        active,
        throughput,
        recorder: state.merged(),
        settings,
        steal,
        cpu,
    })
}

#[cfg(test)]
mod tests;
