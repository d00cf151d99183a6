//! The open-loop schedule of the latency workload, and the clock.
//!
//! The schedule is fixed before the first send: message `i` is meant to go
//! out at `start + i / rate`. Producer `p` of `P` owns messages `p, p + P,
//! p + 2P, ...`. A producer that falls behind (a slow reply, a stall, a
//! descheduled thread) sends what is overdue as soon as it can, in batches,
//! and every message's latency is measured from its *intended* time. This is
//! the coordinated-omission correction wrk2 makes: a stall shows in the
//! latency of every message scheduled during it, not only the one that hit it.

use std::time::{Duration, Instant};

/// Monotonic nanoseconds since a pass's epoch. Every thread of a pass reads
/// the same clock, so times taken on different threads compare.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the epoch.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The fixed schedule: when each message is meant to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Intended time of message 0, ns since the epoch.
    pub start_ns: u64,
    /// Messages per second, over all producers.
    pub rate: u64,
    /// One past the last message index.
    pub count: u64,
}

impl Schedule {
    /// A schedule of `count` messages at `rate` per second from `start_ns`.
    pub fn new(start_ns: u64, rate: u64, count: u64) -> Self {
        assert!(rate > 0, "rate is validated to be positive");
        Self {
            start_ns,
            rate,
            count,
        }
    }

    /// A schedule that runs for `duration` at `rate`.
    pub fn for_duration(start_ns: u64, rate: u64, duration: Duration) -> Self {
        let count = duration.as_nanos() * u128::from(rate) / 1_000_000_000;
        Self::new(start_ns, rate, u64::try_from(count).unwrap_or(u64::MAX))
    }

    /// Intended send time of message `index`.
    pub fn intended_ns(&self, index: u64) -> u64 {
        let offset = u128::from(index) * 1_000_000_000 / u128::from(self.rate);
        self.start_ns
            .saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
    }
}

/// One producer's walk through the schedule.
#[derive(Debug, Clone)]
pub struct OpenLoop {
    schedule: Schedule,
    next: u64,
    stride: u64,
}

impl OpenLoop {
    /// Producer `producer` of `producers`.
    pub fn new(schedule: Schedule, producer: u64, producers: u64) -> Self {
        assert!(producer < producers, "producer index within range");
        Self {
            schedule,
            next: producer,
            stride: producers,
        }
    }

    /// The intended time of this producer's next message, or `None` when it
    /// has sent its share.
    pub fn next_intended_ns(&self) -> Option<u64> {
        (self.next < self.schedule.count).then(|| self.schedule.intended_ns(self.next))
    }

    /// Takes up to `max` messages due at `now_ns` (intended time not after
    /// it) into `out` as `(index, intended_ns)`; returns how many.
    pub fn take_due(&mut self, now_ns: u64, max: usize, out: &mut Vec<(u64, u64)>) -> usize {
        out.clear();
        while out.len() < max && self.next < self.schedule.count {
            let intended = self.schedule.intended_ns(self.next);
            if intended > now_ns {
                break;
            }
            out.push((self.next, intended));
            self.next += self.stride;
        }
        out.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Percentiles, new_histogram, ns_to_us};

    #[test]
    fn schedule_spacing_and_ownership() {
        let s = Schedule::new(1_000, 1_000, 10);
        assert_eq!(s.intended_ns(0), 1_000);
        assert_eq!(s.intended_ns(3), 3_001_000);
        let s = Schedule::for_duration(0, 500_000, Duration::from_millis(10));
        assert_eq!(s.count, 5_000);
        let mut a = OpenLoop::new(Schedule::new(0, 1_000, 5), 0, 2);
        let mut b = OpenLoop::new(Schedule::new(0, 1_000, 5), 1, 2);
        let mut out = Vec::new();
        assert_eq!(a.take_due(10_000_000, 64, &mut out), 3);
        assert_eq!(out, vec![(0, 0), (2, 2_000_000), (4, 4_000_000)]);
        assert_eq!(b.take_due(1_500_000, 64, &mut out), 1);
        assert_eq!(out, vec![(1, 1_000_000)]);
        assert_eq!(b.next_intended_ns(), Some(3_000_000));
        assert_eq!(b.take_due(u64::MAX, 1, &mut out), 1);
        assert_eq!(b.next_intended_ns(), None);
        assert_eq!(a.next_intended_ns(), None);
    }

    /// A producer on a virtual clock: each send takes 10 µs, except that the
    /// broker stalls for 100 ms at t = 500 ms. The receive happens when the
    /// send completes. Corrected latency (from the intended time) must show
    /// the stall for every message scheduled during it; naive latency (from
    /// the actual send) shows it only for the one message that hit it.
    #[test]
    fn coordinated_omission_is_corrected() {
        const MS: u64 = 1_000_000;
        let send_cost = 10_000;
        let (stall_start, stall_end) = (500 * MS, 600 * MS);
        let schedule = Schedule::new(0, 1_000, 1_000); // one message per ms for 1 s
        let mut producer = OpenLoop::new(schedule, 0, 1);
        let mut corrected = new_histogram();
        let mut naive = new_histogram();
        let mut latency_by_intended = Vec::new();
        let mut now = 0u64;
        let mut due = Vec::new();
        while let Some(next) = producer.next_intended_ns() {
            now = now.max(next);
            producer.take_due(now, 16, &mut due);
            // One batch per send, as the producer thread does.
            let send_start = now;
            let mut done = send_start + send_cost;
            if (stall_start..stall_end).contains(&send_start) {
                done = stall_end + send_cost;
            }
            for &(_, intended) in &due {
                corrected.record(ns_to_us(done - intended)).unwrap();
                naive.record(ns_to_us(done - send_start)).unwrap();
                latency_by_intended.push((intended, done - intended));
            }
            now = done;
        }
        assert_eq!(corrected.len(), 1_000);
        // Every message meant to go out during the stall waited for its end.
        let during: Vec<_> = latency_by_intended
            .iter()
            .filter(|(i, _)| (stall_start..stall_end).contains(i))
            .collect();
        assert_eq!(during.len(), 100);
        for &&(intended, latency) in &during {
            assert!(latency >= stall_end - intended, "message at {intended} ns");
        }
        let c = Percentiles::of(&corrected);
        let n = Percentiles::of(&naive);
        // ~50 of 1000 messages waited more than 50 ms: p99 sits deep in the stall.
        assert!(c.p99 >= 50_000, "corrected p99 {} us", c.p99);
        assert!(c.max >= 99_000, "corrected max {} us", c.max);
        // The naive figure hides it: at most a handful of sends saw the stall.
        assert!(n.p99 < 1_000, "naive p99 {} us", n.p99);
        assert!(n.max >= 99_000, "the one send that hit the stall");
        assert!(c.p90 > n.p90);
    }
}
