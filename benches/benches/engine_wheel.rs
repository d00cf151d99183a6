//! Timing-wheel micro-benchmarks: insert, cancel and expiry at 10,000,000
//! timers (goal: insert and cancel below 30 ns median, p99 reported).
//!
//! Run: `cargo bench -p sluice-benches --bench engine_wheel`.
//!
//! # What is measured
//!
//! Every timer carries a `u64`. Deadlines are "spread over the levels": a
//! level 0..6 is drawn uniformly, then a tick uniformly within that level's
//! reach (`64^l .. 64^(l+1)` ms ahead, so from 1 ms to ~795 days), plus a
//! random sub-millisecond part. All randomness is drawn before the timed
//! sections.
//!
//! Phase 1 prints a table of per-operation median and p99, measured in
//! chunks: a chunk is a run of consecutive operations (1,000 for insert,
//! cancel and churn; one `advance` for expiry) timed with `Instant` around the
//! whole chunk, and its time divided by its operations gives one per-op
//! sample. The median and p99 are taken across chunks. A single operation of
//! 10-100 ns cannot be timed on its own (reading the clock costs about as
//! much), so the p99 here is the p99 of 1,000-op averages: it shows the slow
//! stretches (cache and TLB misses in bulk, page faults, preemption on a
//! shared machine), not the slowest single operation. The rows:
//!
//! - `insert`: 10,000,000 inserts into an empty wheel (slab preallocated),
//!   deadlines in random order.
//! - `cancel`: then every one of those 10,000,000 cancelled, in a random
//!   permutation of insertion order (each cancel touches a random entry, a
//!   cache miss at this size: this is memory-latency bound).
//! - `churn (cancel+insert)`: at a steady 10,000,000 live timers, a random
//!   live timer is cancelled and a new one inserted, 1,000,000 times each
//!   (each is one op).
//! - `churn (recent)`: at the same population, a lease-like timer (25-35 s)
//!   is inserted and the one inserted 1,024 pairs earlier cancelled, as the
//!   broker does when a message is received and then deleted: the entries
//!   touched are still in cache.
//! - `expiry (spread)`: 10,000,000 spread timers, then `advance` to every
//!   1,000th deadline in sorted order, so each advance fires ~1,000 timers and
//!   cascades what it must; per op = advance time / timers fired.
//! - `expiry (1 ms steps)`: 10,000,000 timers due uniformly within 60 s (the
//!   shape of lease expiry), then `advance` 1 ms at a time for 60 s; one
//!   sample per advance, ~167 timers each.
//!
//! Phase 2 runs criterion (median of its samples) on a wheel held at
//! 10,000,000 live timers: `insert` (timed, then cancelled untimed), `cancel`
//! of distinct random live timers (timed, then replaced untimed) and `expiry`
//! of fresh timers due within 64 ms while the 10,000,000 wait ≥ 1 day out.
//!
//! Under `cargo test --benches` (no `--bench` flag) everything runs once at
//! 100,000 timers, as a smoke test.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sluice_broker::engine::limits::TICK_NS;
use sluice_broker::engine::wheel::{TimerId, TimerWheel};

const TIMERS_FULL: usize = 10_000_000;
const TIMERS_SMOKE: usize = 100_000;
const CHUNK_OPS: usize = 1_000;
const CHURN_OPS_FULL: usize = 2_000_000;
const DAY_NS: u64 = 24 * 3_600 * 1_000_000_000;

/// A deadline `now + d`, with `d` drawn level-uniformly across the wheel.
fn spread_deadline(rng: &mut SmallRng, now: u64) -> u64 {
    let level: u32 = rng.random_range(0..6);
    let ticks = rng.random_range(64u64.pow(level)..64u64.pow(level + 1));
    now + ticks * TICK_NS + rng.random_range(0..TICK_NS)
}

/// Median and p99 of per-op samples, in ns.
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn report(name: &str, samples: &mut [f64]) {
    let count = samples.len();
    let (median, p99) = percentiles(samples);
    println!("| {name:<21} | {median:>10.1} | {p99:>10.1} | {count:>9} |");
}

fn per_op(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_nanos() as f64 / ops as f64
}

/// Phase 1: chunked timing, median and p99 per op.
fn chunked(timers: usize) {
    let mut rng = SmallRng::seed_from_u64(0x5e1ce);
    println!("\nengine_wheel: {timers} timers, per-op ns over chunks (see the file's docs)");
    println!("| operation             | median ns  | p99 ns     | chunks    |");
    println!("|-----------------------|------------|------------|-----------|");
    let deadlines: Vec<u64> = (0..timers).map(|_| spread_deadline(&mut rng, 0)).collect();
    let mut wheel = TimerWheel::with_capacity(0, timers);
    let mut samples = Vec::with_capacity(timers / CHUNK_OPS);
    chunked_insert_cancel(&mut wheel, &deadlines, &mut rng, &mut samples);
    chunked_churn(&mut wheel, &deadlines, &mut rng, &mut samples);
    drop(wheel);
    chunked_expiry_spread(&deadlines, &mut samples);
    chunked_expiry_steps(timers, &mut rng, &mut samples);
}

/// Inserts every deadline into the empty `wheel`, then cancels them all
/// in random order.
fn chunked_insert_cancel(
    wheel: &mut TimerWheel<u64>,
    deadlines: &[u64],
    rng: &mut SmallRng,
    samples: &mut Vec<f64>,
) {
    let timers = deadlines.len();
    // insert
    let mut ids = Vec::with_capacity(timers);
    for (chunk_no, chunk) in deadlines.chunks(CHUNK_OPS).enumerate() {
        let start = Instant::now();
        for (i, &deadline) in chunk.iter().enumerate() {
            ids.push(wheel.insert(deadline, (chunk_no * CHUNK_OPS + i) as u64));
        }
        samples.push(per_op(start.elapsed(), chunk.len()));
    }
    report("insert", samples);

    // cancel, in random order
    ids.shuffle(rng);
    samples.clear();
    let mut check = 0u64;
    for chunk in ids.chunks(CHUNK_OPS) {
        let start = Instant::now();
        for &id in chunk {
            check = check.wrapping_add(wheel.cancel(id).unwrap_or(u64::MAX));
        }
        samples.push(per_op(start.elapsed(), chunk.len()));
    }
    assert!(wheel.is_empty());
    assert_eq!(
        check,
        (0..timers as u64).sum::<u64>(),
        "every cancel found its timer"
    );
    report("cancel (random)", samples);
}

/// Churn at a steady population of every deadline in the emptied
/// `wheel`: random timers, then recent ones.
fn chunked_churn(
    wheel: &mut TimerWheel<u64>,
    deadlines: &[u64],
    rng: &mut SmallRng,
    samples: &mut Vec<f64>,
) {
    let timers = deadlines.len();
    // churn at a steady population
    let mut ids = Vec::with_capacity(timers);
    for (i, &deadline) in deadlines.iter().enumerate() {
        ids.push(wheel.insert(deadline, i as u64));
    }
    let churn_ops = if timers == TIMERS_FULL {
        CHURN_OPS_FULL
    } else {
        timers
    };
    let victims: Vec<usize> = (0..churn_ops / 2)
        .map(|_| rng.random_range(0..ids.len()))
        .collect();
    let fresh: Vec<u64> = (0..churn_ops / 2)
        .map(|_| spread_deadline(rng, 0))
        .collect();
    samples.clear();
    for (victims, fresh) in victims
        .chunks(CHUNK_OPS / 2)
        .zip(fresh.chunks(CHUNK_OPS / 2))
    {
        let start = Instant::now();
        for (&victim, &deadline) in victims.iter().zip(fresh) {
            black_box(wheel.cancel(ids[victim]));
            ids[victim] = wheel.insert(deadline, victim as u64);
        }
        samples.push(per_op(start.elapsed(), 2 * victims.len()));
    }
    report("churn (cancel+insert)", samples);

    // churn of recent timers at the same population: the broker's hot path
    // (a lease is set on receive and cancelled by the delete soon after)
    const RECENT: usize = 1_024;
    let lease_deadlines: Vec<u64> = (0..churn_ops / 2)
        .map(|_| rng.random_range(25_000..35_000) * TICK_NS)
        .collect();
    let mut recent: Vec<TimerId> = lease_deadlines[..RECENT]
        .iter()
        .map(|&deadline| wheel.insert(deadline, 0))
        .collect();
    samples.clear();
    for (chunk_no, chunk) in lease_deadlines.chunks(CHUNK_OPS / 2).enumerate() {
        let start = Instant::now();
        for (i, &deadline) in chunk.iter().enumerate() {
            let slot = (chunk_no * CHUNK_OPS / 2 + i) % RECENT;
            black_box(wheel.cancel(recent[slot]));
            recent[slot] = wheel.insert(deadline, slot as u64);
        }
        samples.push(per_op(start.elapsed(), 2 * chunk.len()));
    }
    report("churn (recent)", samples);
}

/// Expiry of spread deadlines: advances to every `CHUNK_OPS`-th deadline.
fn chunked_expiry_spread(deadlines: &[u64], samples: &mut Vec<f64>) {
    let timers = deadlines.len();
    // expiry, spread deadlines: advance to every CHUNK_OPS-th deadline
    let mut wheel = TimerWheel::with_capacity(0, timers);
    for (i, &deadline) in deadlines.iter().enumerate() {
        wheel.insert(deadline, i as u64);
    }
    let mut sorted = deadlines.to_vec();
    sorted.sort_unstable();
    let targets: Vec<u64> = sorted
        .iter()
        .skip(CHUNK_OPS - 1)
        .step_by(CHUNK_OPS)
        .map(|&deadline| deadline.div_ceil(TICK_NS) * TICK_NS)
        .chain(std::iter::once(u64::MAX))
        .collect();
    samples.clear();
    for &target in &targets {
        let mut fired = 0usize;
        let start = Instant::now();
        wheel.advance(target, |_, value| {
            black_box(value);
            fired += 1;
        });
        let elapsed = start.elapsed();
        if fired > 0 {
            samples.push(per_op(elapsed, fired));
        }
    }
    assert!(wheel.is_empty());
    report("expiry (spread)", samples);
}

/// Expiry in 1 ms steps over 60 s of lease deadlines.
fn chunked_expiry_steps(timers: usize, rng: &mut SmallRng, samples: &mut Vec<f64>) {
    // expiry, 1 ms steps over 60 s of lease deadlines
    let window_ns = 60_000 * TICK_NS;
    let mut wheel = TimerWheel::with_capacity(0, timers);
    for i in 0..timers {
        wheel.insert(rng.random_range(1..=window_ns), i as u64);
    }
    samples.clear();
    let mut now = 0;
    while now < window_ns {
        now += TICK_NS;
        let mut fired = 0usize;
        let start = Instant::now();
        wheel.advance(now, |_, value| {
            black_box(value);
            fired += 1;
        });
        let elapsed = start.elapsed();
        if fired > 0 {
            samples.push(per_op(elapsed, fired));
        }
    }
    assert!(wheel.is_empty());
    report("expiry (1 ms steps)", samples);
}

/// A wheel held at `timers` live timers, all at least a day out, for the
/// criterion benches.
struct Steady {
    wheel: TimerWheel<u64>,
    live: Vec<TimerId>,
    rng: SmallRng,
    now: u64,
}

impl Steady {
    fn new(timers: usize) -> Self {
        let mut rng = SmallRng::seed_from_u64(0xc0ffee);
        let mut wheel = TimerWheel::with_capacity(0, timers + 1_000_000);
        let live = (0..timers)
            .map(|i| wheel.insert(DAY_NS + spread_deadline(&mut rng, 0), i as u64))
            .collect();
        Self {
            wheel,
            live,
            rng,
            now: 0,
        }
    }

    fn far_deadline(&mut self) -> u64 {
        self.now + DAY_NS + spread_deadline(&mut self.rng, 0)
    }
}

/// Phase 2: criterion at a steady population.
fn criterion_benches(criterion: &mut Criterion, timers: usize) {
    let mut steady = Steady::new(timers);
    let mut group = criterion.benchmark_group(format!("engine_wheel/{timers}"));
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(5));

    group.bench_function("insert", |b| {
        b.iter_custom(|iters| {
            let deadlines: Vec<u64> = (0..iters).map(|_| steady.far_deadline()).collect();
            let mut ids = Vec::with_capacity(deadlines.len());
            let start = Instant::now();
            for (i, &deadline) in deadlines.iter().enumerate() {
                ids.push(steady.wheel.insert(deadline, i as u64));
            }
            let elapsed = start.elapsed();
            for id in ids {
                steady.wheel.cancel(id);
            }
            elapsed
        });
    });

    group.bench_function("cancel", |b| {
        b.iter_custom(|iters| {
            let amount = (iters as usize).min(steady.live.len());
            let victims = rand::seq::index::sample(&mut steady.rng, steady.live.len(), amount);
            let ids: Vec<TimerId> = victims.iter().map(|i| steady.live[i]).collect();
            let start = Instant::now();
            for &id in &ids {
                black_box(steady.wheel.cancel(id));
            }
            let elapsed = start.elapsed();
            for i in victims {
                let deadline = steady.far_deadline();
                steady.live[i] = steady.wheel.insert(deadline, i as u64);
            }
            elapsed
        });
    });

    group.bench_function("expiry", |b| {
        b.iter_custom(|iters| {
            let base = steady.now;
            for i in 0..iters {
                let deadline = base + steady.rng.random_range(1..=64 * TICK_NS);
                steady.wheel.insert(deadline, i);
            }
            let start = Instant::now();
            for _ in 0..64 {
                steady.now += TICK_NS;
                steady.wheel.advance(steady.now, |_, value| {
                    black_box(value);
                });
            }
            start.elapsed()
        });
    });
    group.finish();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benchmarking = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let timers = if benchmarking {
        TIMERS_FULL
    } else {
        TIMERS_SMOKE
    };
    chunked(timers);
    let mut criterion = Criterion::default().configure_from_args();
    criterion_benches(&mut criterion, timers);
    criterion.final_summary();
}
