//! The state one pass's threads share: the configuration, the clock, the
//! tracker, the counters and each consumer's recorder; and what producers
//! and consumers both ask of it (whether sending is over, whether every
//! message is settled, the drain deadline).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use super::RunError;
use crate::config::{Bound, RunConfig};
use crate::schedule::{Clock, Schedule};
use crate::stats::Recorder;
use crate::tracker::Tracker;

pub(super) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub(super) fn wall_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The run tag of a noisy tenant's backlog (`--backlog`), which no pass
/// has: its messages are not of the pass.
pub(super) const BACKLOG_RUN_TAG: u32 = 0;

/// State shared by the threads of one pass.
pub(super) struct Pass<'c> {
    pub(super) cfg: &'c RunConfig,
    pub(super) clock: Clock,
    pub(super) tracker: Tracker,
    pub(super) run_tag: u32,
    pub(super) capacity: u64,
    pub(super) visibility_ns: u64,
    pub(super) schedule: Option<Schedule>,
    pub(super) next_seq: AtomicU64,
    pub(super) sent: AtomicU64,
    pub(super) settled: AtomicU64,
    pub(super) deliveries: AtomicU64,
    pub(super) duplicates: AtomicU64,
    pub(super) corrupt: AtomicU64,
    pub(super) delete_rejected: AtomicU64,
    pub(super) early: AtomicU64,
    pub(super) producers_running: AtomicUsize,
    pub(super) producers_done_ns: AtomicU64,
    pub(super) first_send_ns: AtomicU64,
    pub(super) last_settle_ns: AtomicU64,
    pub(super) drain_timed_out: AtomicBool,
    pub(super) abort: AtomicBool,
    pub(super) finished: AtomicBool,
    pub(super) error: Mutex<Option<RunError>>,
    pub(super) recorders: Vec<Mutex<Recorder>>,
}

impl<'c> Pass<'c> {
    /// The state of pass number `pass` of `cfg`, its clock starting now.
    pub(super) fn new(cfg: &'c RunConfig, pass: u32) -> Pass<'c> {
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
            // Never the backlog's.
            run_tag: (splitmix64(wall_nanos() ^ u64::from(pass)) as u32).max(BACKLOG_RUN_TAG + 1),
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
    pub(super) fn fail(&self, err: RunError) {
        self.abort.store(true, Ordering::SeqCst);
        let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(err);
        }
    }

    pub(super) fn producers_done(&self) -> bool {
        self.producers_running.load(Ordering::Acquire) == 0
    }

    /// Every message sent has been deleted and no more will be sent.
    pub(super) fn all_settled(&self) -> bool {
        self.producers_done()
            && self.settled.load(Ordering::Acquire) >= self.sent.load(Ordering::Acquire)
    }

    pub(super) fn drain_deadline_ns(&self) -> Option<u64> {
        let done = self.producers_done_ns.load(Ordering::Acquire);
        (done != u64::MAX).then(|| done.saturating_add(self.cfg.drain_timeout.as_nanos() as u64))
    }

    pub(super) fn send_end_ns(&self) -> Option<u64> {
        match self.cfg.bound {
            Bound::Duration(d) => Some(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            Bound::Messages(_) => None,
        }
    }

    pub(super) fn producer_finished(&self) {
        if self.producers_running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.producers_done_ns
                .store(self.clock.now_ns(), Ordering::Release);
        }
    }

    /// Every consumer's recorder, merged.
    pub(super) fn merged(&self) -> Recorder {
        let mut all = Recorder::new();
        for r in &self.recorders {
            all.merge(&r.lock().unwrap_or_else(PoisonError::into_inner));
        }
        all
    }
}
