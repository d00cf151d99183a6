//! A fixed-bucket latency histogram that its shard records into without
//! locks and that the metrics thread reads while it is being written.
//!
//! # Ground rules
//! - **One writer.** A [`LatencyHistogram`] is owned by one shard and is not
//!   `Clone`; recording takes `&mut self`. So there is exactly one writer at
//!   any time, and a record is a plain `load` + `store` per cell (no
//!   read-modify-write, no `lock` prefix on x86): nothing can be lost because
//!   nobody else stores to these cells. Should the histogram move between
//!   threads, the move itself carries the happens-before edge.
//! - **Readers** ([`HistogramReader`], `Clone`, any thread) only load. Every
//!   access is `Relaxed`: each cell is an independent monotonic counter, no
//!   other memory is published through it, so there is nothing for Acquire
//!   or Release to order.
//! - **Snapshots are not atomic as a whole.** A reader loads the cells one by
//!   one while the shard keeps recording, so a snapshot may hold a record in
//!   one bucket that the sum does not hold yet, or the reverse. The count is
//!   not a cell of its own: it is the sum of the bucket counts, so the
//!   exposition's `+Inf` bucket always equals its `_count`. The sum is off by
//!   at most the records in flight during the scrape.
//! - **No wrap-around.** Bucket counts are `u64` (centuries at a billion
//!   records per second). The sum is an `f64` of seconds, as in Prometheus:
//!   it never wraps, and its rounding error stays far below a microsecond
//!   per record for years of accumulated latency.
//! - **No false sharing.** The cells are cache-padded, so two shards'
//!   histograms never share a cache line.

use crate::sync::Ordering::Relaxed;
use crate::sync::{Arc, AtomicU64, CachePadded};
use std::time::Duration;

/// Upper bounds of the finite buckets in nanoseconds: 1-2-5 steps from
/// 10 µs to 50 s, then 60 s. A value lands in the first bucket whose bound
/// is at least the value (Prometheus `le`); larger values land in the last,
/// unbounded bucket.
pub const LATENCY_BUCKET_BOUNDS_NANOS: [u64; 22] = [
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    20_000_000_000,
    50_000_000_000,
    60_000_000_000,
];

/// Buckets in all: the finite ones and the unbounded one.
pub const LATENCY_BUCKETS: usize = LATENCY_BUCKET_BOUNDS_NANOS.len() + 1;

const _: () = {
    let mut i = 1;
    while i < LATENCY_BUCKET_BOUNDS_NANOS.len() {
        assert!(LATENCY_BUCKET_BOUNDS_NANOS[i - 1] < LATENCY_BUCKET_BOUNDS_NANOS[i]);
        i += 1;
    }
};

/// Finite buckets of the request duration histograms.
pub const REQUEST_BUCKET_BOUNDS: usize = 24;

/// Upper bounds of the request duration buckets in nanoseconds: powers of
/// two from 1 µs to 2^23 µs (about 8.4 s), so that a record finds its
/// bucket with one `leading_zeros`, no search.
pub const REQUEST_BUCKET_BOUNDS_NANOS: [u64; REQUEST_BUCKET_BOUNDS] = {
    let mut b = [0u64; REQUEST_BUCKET_BOUNDS];
    let mut i = 0;
    while i < REQUEST_BUCKET_BOUNDS {
        b[i] = 1_000 << i;
        i += 1;
    }
    b
};

/// Request duration buckets in all: the finite ones and the unbounded one.
pub const REQUEST_BUCKETS: usize = REQUEST_BUCKET_BOUNDS + 1;

/// The request duration bucket of `nanos`: the first bound at or above it
/// (Prometheus `le`), or the unbounded bucket.
#[inline]
pub fn request_bucket_of(nanos: u64) -> usize {
    // nanos <= 1000 * 2^k  <=>  ceil(nanos / 1000) <= 2^k.
    let micros = nanos.div_ceil(1_000);
    if micros <= 1 {
        return 0;
    }
    let k = (u64::BITS - (micros - 1).leading_zeros()) as usize;
    k.min(REQUEST_BUCKET_BOUNDS)
}

#[derive(Debug)]
struct Cells {
    counts: [AtomicU64; LATENCY_BUCKETS],
    /// `f64` seconds, as bits.
    sum_seconds_bits: AtomicU64,
}

/// A shard's latency histogram: the one writer of its cells. See the module
/// docs for the ground rules.
#[derive(Debug)]
pub struct LatencyHistogram {
    cells: Arc<CachePadded<Cells>>,
}

/// A read handle on a [`LatencyHistogram`], for the metrics thread.
#[derive(Debug, Clone)]
pub struct HistogramReader {
    cells: Arc<CachePadded<Cells>>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

/// For each bit length of a latency in nanoseconds (0 to 64), the first
/// bucket a latency of that length can fall in: the bounds below the
/// length's least value. The bounds grow by 2 to 2.5 times (but the last,
/// 60 s after 50 s), so few lie among the values of one length, and a
/// record compares one or two bounds where a binary search over all 22
/// compared five.
const FIRST_BUCKET_BY_BITS: [u8; 65] = {
    let mut t = [0u8; 65];
    let mut bits = 1;
    while bits <= 64 {
        let least = 1u64 << (bits - 1);
        let mut i = 0;
        while i < LATENCY_BUCKET_BOUNDS_NANOS.len() && LATENCY_BUCKET_BOUNDS_NANOS[i] < least {
            i += 1;
        }
        // At most 22.
        t[bits] = i as u8;
        bits += 1;
    }
    t
};

/// The bounds, then two that no latency passes: the two steps of
/// [`bucket_of`] read past the last bound without a check.
const BOUNDS_THEN_MAX: [u64; LATENCY_BUCKETS + 1] = {
    let mut b = [u64::MAX; LATENCY_BUCKETS + 1];
    let mut i = 0;
    while i < LATENCY_BUCKET_BOUNDS_NANOS.len() {
        b[i] = LATENCY_BUCKET_BOUNDS_NANOS[i];
        i += 1;
    }
    b
};

/// At most two bounds lie among the values of one bit length (the bounds
/// at least double from one to the next, but for 50 s and 60 s): the
/// bucket is its length's first, or one or two past it.
const _: () = {
    let mut bits = 1;
    while bits <= 64 {
        let first = FIRST_BUCKET_BY_BITS[bits] as usize;
        let top = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        assert!(
            first + 2 >= LATENCY_BUCKET_BOUNDS_NANOS.len()
                || LATENCY_BUCKET_BOUNDS_NANOS[first + 2] >= top
        );
        bits += 1;
    }
};

/// The bucket a latency of `nanos` falls in: the first whose bound is not
/// below it. Two compares, and no branch.
#[inline]
fn bucket_of(nanos: u64) -> usize {
    let bits = (u64::BITS - nanos.leading_zeros()) as usize;
    let mut i = usize::from(FIRST_BUCKET_BY_BITS[bits]);
    i += usize::from(BOUNDS_THEN_MAX[i] < nanos);
    i += usize::from(BOUNDS_THEN_MAX[i] < nanos);
    i
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            cells: Arc::new(CachePadded::new(Cells {
                counts: std::array::from_fn(|_| AtomicU64::new(0)),
                sum_seconds_bits: AtomicU64::new(0.0f64.to_bits()),
            })),
        }
    }

    /// Records one latency of `nanos` nanoseconds: [`record`](Self::record)
    /// without the `Duration` (the engine gives its latencies as
    /// nanoseconds, one a message).
    #[inline]
    pub fn record_nanos(&mut self, nanos: u64) {
        let cell = &self.cells.counts[bucket_of(nanos)];
        // The one writer (see the ground rules): load + store loses nothing.
        cell.store(cell.load(Relaxed) + 1, Relaxed);
        let sum = &self.cells.sum_seconds_bits;
        // Exact below 2^53 ns (104 days); the sum is a float anyway.
        #[allow(clippy::cast_precision_loss)]
        let seconds = nanos as f64 / 1e9;
        sum.store(
            (f64::from_bits(sum.load(Relaxed)) + seconds).to_bits(),
            Relaxed,
        );
    }

    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let cell = &self.cells.counts[bucket_of(nanos)];
        // The one writer (see the ground rules): load + store loses nothing.
        cell.store(cell.load(Relaxed) + 1, Relaxed);
        let sum = &self.cells.sum_seconds_bits;
        let seconds = f64::from_bits(sum.load(Relaxed)) + latency.as_secs_f64();
        sum.store(seconds.to_bits(), Relaxed);
    }

    /// A handle the metrics thread can read through.
    pub fn reader(&self) -> HistogramReader {
        HistogramReader {
            cells: Arc::clone(&self.cells),
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        self.reader().snapshot()
    }
}

impl HistogramReader {
    /// The counts now. Not atomic as a whole: see the ground rules.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: std::array::from_fn(|i| self.cells.counts[i].load(Relaxed)),
            sum_seconds: f64::from_bits(self.cells.sum_seconds_bits.load(Relaxed)),
        }
    }
}

/// Counts of a histogram at one time, or of several histograms merged (one
/// per shard).
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    counts: [u64; LATENCY_BUCKETS],
    sum_seconds: f64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        HistogramSnapshot {
            counts: [0; LATENCY_BUCKETS],
            sum_seconds: 0.0,
        }
    }
}

impl HistogramSnapshot {
    /// Adds `other`'s counts and sum to these.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine = mine.saturating_add(*theirs);
        }
        self.sum_seconds += other.sum_seconds;
    }

    /// Records counted, the sum of all buckets.
    pub fn count(&self) -> u64 {
        self.counts
            .iter()
            .fold(0u64, |total, &n| total.saturating_add(n))
    }

    /// Sum of the recorded latencies in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_seconds
    }

    /// Records in each bucket (not cumulative), bounds as in
    /// [`LATENCY_BUCKET_BOUNDS_NANOS`], the unbounded bucket last.
    pub fn bucket_counts(&self) -> &[u64; LATENCY_BUCKETS] {
        &self.counts
    }

    /// `(upper bound in nanoseconds, records at or below it)` for each
    /// bucket, cumulative as Prometheus wants them; the unbounded bucket has
    /// bound `None` and count [`count`](Self::count).
    pub fn cumulative(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        let bounds = LATENCY_BUCKET_BOUNDS_NANOS
            .iter()
            .map(|&b| Some(b))
            .chain([None]);
        bounds.zip(&self.counts).scan(0u64, |running, (bound, &n)| {
            *running = running.saturating_add(n);
            Some((bound, *running))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_at_or_above_them() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(10_000), 0, "le is inclusive");
        assert_eq!(bucket_of(10_001), 1);
        assert_eq!(bucket_of(60_000_000_000), LATENCY_BUCKETS - 2);
        assert_eq!(bucket_of(60_000_000_001), LATENCY_BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
        // As a search over every bound would place them: each bound, its
        // neighbours, every power of two and its neighbours.
        let search = |n: u64| LATENCY_BUCKET_BOUNDS_NANOS.partition_point(|&b| b < n);
        let mut values: Vec<u64> = LATENCY_BUCKET_BOUNDS_NANOS
            .iter()
            .flat_map(|&b| [b - 1, b, b + 1])
            .collect();
        values.extend((0..64).flat_map(|k| {
            let p = 1u64 << k;
            [p - 1, p, p + 1]
        }));
        values.extend((0..10_000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 64)));
        for n in values {
            assert_eq!(bucket_of(n), search(n), "{n} ns");
        }
    }

    #[test]
    fn request_buckets_are_powers_of_two_microseconds() {
        assert_eq!(REQUEST_BUCKET_BOUNDS_NANOS[0], 1_000);
        assert_eq!(REQUEST_BUCKET_BOUNDS_NANOS[23], 1_000 << 23);
        for nanos in [
            0,
            1,
            999,
            1_000,
            1_001,
            1_999,
            2_000,
            2_001,
            4_000,
            4_001,
            123_456,
            1_000 << 23,
            (1_000 << 23) + 1,
            u64::MAX,
        ] {
            let want = REQUEST_BUCKET_BOUNDS_NANOS.partition_point(|&b| b < nanos);
            assert_eq!(request_bucket_of(nanos), want, "{nanos} ns");
        }
        assert_eq!(request_bucket_of(u64::MAX), REQUEST_BUCKETS - 1);
    }

    #[test]
    fn records_counts_and_sum() {
        let mut h = LatencyHistogram::new();
        h.record(Duration::from_micros(5));
        h.record(Duration::from_micros(10));
        h.record(Duration::from_micros(15));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(3600));
        h.record(Duration::MAX);
        let s = h.snapshot();
        assert_eq!(s.count(), 6);
        let counts = s.bucket_counts();
        assert_eq!(counts[0], 2);
        assert_eq!(counts[1], 1);
        assert_eq!(counts[8], 1, "3 ms is in the 5 ms bucket");
        assert_eq!(counts[LATENCY_BUCKETS - 1], 2);
        let want = 30e-6 + 3e-3 + 3600.0 + Duration::MAX.as_secs_f64();
        assert!(
            (s.sum_seconds() - want).abs() <= want * 1e-12,
            "{}",
            s.sum_seconds()
        );
    }

    #[test]
    fn nanoseconds_record_as_their_duration_does() {
        let mut by_nanos = LatencyHistogram::new();
        let mut by_duration = LatencyHistogram::new();
        let values = LATENCY_BUCKET_BOUNDS_NANOS
            .iter()
            .flat_map(|&b| [b - 1, b, b + 1])
            .chain([0, 1, 999_999_999, 3_600_000_000_000, u64::MAX]);
        for n in values {
            by_nanos.record_nanos(n);
            by_duration.record(Duration::from_nanos(n));
        }
        let (a, b) = (by_nanos.snapshot(), by_duration.snapshot());
        assert_eq!(a.bucket_counts(), b.bucket_counts());
        let rel = (a.sum_seconds() - b.sum_seconds()).abs() / b.sum_seconds();
        assert!(rel <= 1e-12, "{} {}", a.sum_seconds(), b.sum_seconds());
    }

    #[test]
    fn cumulative_buckets_end_at_the_count() {
        let mut h = LatencyHistogram::new();
        for micros in [1, 30, 30, 700, 70_000_000] {
            h.record(Duration::from_micros(micros));
        }
        let cumulative: Vec<_> = h.snapshot().cumulative().collect();
        assert_eq!(cumulative.len(), LATENCY_BUCKETS);
        assert!(
            cumulative.windows(2).all(|w| w[0].1 <= w[1].1),
            "{cumulative:?}"
        );
        assert_eq!(cumulative[0], (Some(10_000), 1));
        assert_eq!(cumulative[2], (Some(50_000), 3));
        assert_eq!(cumulative[6], (Some(1_000_000), 4));
        assert_eq!(cumulative[LATENCY_BUCKETS - 2], (Some(60_000_000_000), 4));
        assert_eq!(cumulative[LATENCY_BUCKETS - 1], (None, 5));
    }

    #[test]
    fn shards_merge_on_scrape_while_recording() {
        let mut shards: Vec<LatencyHistogram> = (0..3).map(|_| LatencyHistogram::new()).collect();
        let readers: Vec<HistogramReader> = shards.iter().map(LatencyHistogram::reader).collect();
        let recorded = 10_000u64;
        crate::sync::thread::scope(|scope| {
            for (i, shard) in shards.iter_mut().enumerate() {
                scope.spawn(move || {
                    for n in 0..recorded {
                        shard.record(Duration::from_micros(n % 100 + i as u64));
                    }
                });
            }
            // Scrape while the shards record: counts never go down.
            let mut last = 0;
            for _ in 0..100 {
                let mut merged = HistogramSnapshot::default();
                for reader in &readers {
                    merged.merge(&reader.snapshot());
                }
                assert!(merged.count() >= last);
                last = merged.count();
            }
        });
        let mut merged = HistogramSnapshot::default();
        for reader in &readers {
            merged.merge(&reader.snapshot());
        }
        assert_eq!(
            merged.count(),
            3 * recorded,
            "one writer per shard loses nothing"
        );
        let separately: u64 = readers
            .iter()
            .map(|r| r.snapshot().bucket_counts()[0])
            .sum();
        assert_eq!(merged.bucket_counts()[0], separately);
    }
}
