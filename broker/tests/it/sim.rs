//! The engine's deterministic simulation (`sluice_broker::sim`) in
//! `cargo test`: fixed seeds on 2 and 3 shards, each once as it always ran
//! and once with clients that bind leases to their connections and
//! disconnect holding them, then every seed that once found a bug
//! (`broker/tests/sim-regressions/seeds.txt`, without bound leases: the
//! runs they were found in), and the fixed seeds once more with FIFO
//! queues (work and its dead-letter queue). Longer runs and new seeds: `sluice-sim`
//! (RELIABILITY.md).

use sluice_broker::sim::{SimConfig, run};

/// Steps per fixed seed and shard count: 2 seeds x 50,000 steps on each of
/// 2 and 3 shards is 200,000 steps.
const STEPS: u64 = 50_000;
const SEEDS: [u64; 2] = [20_261_201, 7];

fn check(config: SimConfig) {
    eprintln!(
        "sim: seed {} shards {} steps {} bound leases {} fifo {}",
        config.seed, config.shards, config.steps, config.bound_leases, config.fifo
    );
    let bound = config.bound_leases;
    match run(&config) {
        Ok(report) => {
            // The run did what it is for: deliveries, redeliveries, deletes,
            // and with bound leases, releases by disconnecting clients.
            let c = report.counts;
            assert!(
                c.deliveries > 0 && c.redeliveries > 0 && c.deleted > 0,
                "{c:?}"
            );
            assert_eq!(c.abandoned > 0, bound, "{c:?}");
        }
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn fixed_seeds_on_two_shards() {
    for seed in SEEDS {
        for bound_leases in [false, true] {
            check(SimConfig {
                seed,
                shards: 2,
                steps: STEPS,
                bound_leases,
                fifo: false,
            });
        }
    }
}

#[test]
fn fixed_seeds_on_three_shards() {
    for seed in SEEDS {
        for bound_leases in [false, true] {
            check(SimConfig {
                seed,
                shards: 3,
                steps: STEPS,
                bound_leases,
                fifo: false,
            });
        }
    }
}

#[test]
fn fixed_seeds_with_fifo_queues() {
    for (seed, shards) in [(SEEDS[0], 2), (SEEDS[1], 3)] {
        for bound_leases in [false, true] {
            check(SimConfig {
                seed,
                shards,
                steps: STEPS,
                bound_leases,
                fifo: true,
            });
        }
    }
}

#[test]
fn seeds_that_found_bugs() {
    let text = include_str!("../sim-regressions/seeds.txt");
    let mut n = 0;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().expect("seed shards steps"))
            .collect();
        assert_eq!(v.len(), 3, "`{line}`: seed shards steps");
        check(SimConfig {
            seed: v[0],
            shards: u16::try_from(v[1]).expect("shards"),
            steps: v[2],
            bound_leases: false,
            fifo: false,
        });
        n += 1;
    }
    assert!(n >= 3, "the regression seeds are read");
}
