//! `sluice-sim`: the engine's deterministic simulation from the command
//! line. Runs seeds one after another (each on 2 and 3 shards, or the
//! `--shards` given) for a number of steps or a time; prints a line per
//! seed; on a failure prints the seed, the steps before it and the command
//! that replays it, and exits 1.
//!
//! The simulation is a test harness, compiled only with the `test-util`
//! feature: `cargo run --release -p sluice-broker --features test-util --bin
//! sluice-sim -- --help`.

#![cfg_attr(sluice_loom, allow(unused))]

#[cfg(sluice_loom)]
fn main() {
    eprintln!("sluice-sim: this build has --cfg sluice_loom (for loom models only)");
    std::process::exit(2);
}

#[cfg(not(sluice_loom))]
use std::process::ExitCode;
#[cfg(not(sluice_loom))]
use std::time::{Duration, Instant};

#[cfg(not(sluice_loom))]
use clap::Parser;
#[cfg(not(sluice_loom))]
use sluice_broker::sim::{self, SIM_SHARDS_MAX, SimConfig};

#[global_allocator]
static GLOBAL: sluice_broker::allocator::Allocator = sluice_broker::allocator::Allocator;

/// Deterministic simulation of the sluice engine: shards on a virtual clock,
/// interleaved by a seeded scheduler, checked after every step.
#[cfg(not(sluice_loom))]
#[derive(Parser, Debug)]
#[command(
    name = "sluice-sim",
    version,
    max_term_width = 100,
    after_help = "A failure prints the seed, the steps before it and the command that replays \
        it. To follow one message through a replay: SLUICE_SIM_WATCH=<its id as a decimal \
        number> prints every request, result and checkpoint that names it; \
        SLUICE_SIM_WATCH_STEPS=1 adds its state after every step."
)]
struct Args {
    /// First seed [default: random, printed].
    #[arg(long)]
    seed: Option<u64>,
    /// Steps per seed and shard count.
    #[arg(long, default_value_t = 1_000_000)]
    steps: u64,
    /// Shards; by default each seed runs on 2 and then 3 shards.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=i64::from(SIM_SHARDS_MAX)))]
    shards: Option<u16>,
    /// Seeds to run (seed, seed + 1, ...); with --duration, as many as fit.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Keep running further seeds until this many seconds have passed.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<u64>,
    /// Clients bind some receives' leases to their connection and release
    /// them when they disconnect.
    #[arg(long)]
    bound_leases: bool,
    /// work and its dead-letter queue are FIFO queues, and sends to them
    /// carry message groups; the oracle checks each group's order.
    #[arg(long)]
    fifo: bool,
}

#[cfg(not(sluice_loom))]
fn main() -> ExitCode {
    let args = Args::parse();
    let first = args.seed.unwrap_or_else(random_seed);
    let shard_counts: Vec<u16> = args.shards.map_or(vec![2, 3], |s| vec![s]);
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs(s));
    let started = Instant::now();
    let mut total_steps = 0u64;
    let mut seed = first;
    let mut runs = 0u64;
    loop {
        for &shards in &shard_counts {
            let config = SimConfig {
                seed,
                shards,
                steps: args.steps,
                bound_leases: args.bound_leases,
                fifo: args.fifo,
            };
            let t = Instant::now();
            match sim::run(&config) {
                Ok(report) => {
                    let c = &report.counts;
                    println!(
                        "seed {seed} shards {shards}: {} steps ok in {:.1}s ({} ms virtual): \
                         {} sent, {} delivered ({} again), {} deleted, {} released, \
                         {} bound leases current at a disconnect, {} busy, {} stale, {} gone, \
                         {} disconnects, {} dropped by retention, {} wiped",
                        config.steps,
                        t.elapsed().as_secs_f64(),
                        report.virtual_ms,
                        c.sent,
                        c.deliveries,
                        c.redeliveries,
                        c.deleted,
                        c.released,
                        c.abandoned,
                        c.busy,
                        c.stale,
                        c.gone,
                        c.disconnects,
                        c.dropped_by_retention,
                        c.vanished_with_queue,
                    );
                    total_steps += config.steps;
                }
                Err(failure) => {
                    eprintln!("{failure}");
                    return ExitCode::FAILURE;
                }
            }
        }
        runs += 1;
        seed = seed.wrapping_add(1);
        let more = match deadline {
            Some(d) => Instant::now() < d,
            None => runs < args.seeds,
        };
        if !more {
            break;
        }
    }
    println!(
        "{total_steps} steps over {runs} seeds from {first} in {:.1}s, no failure",
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

#[cfg(not(sluice_loom))]
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}
