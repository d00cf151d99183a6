//! A deterministic simulation of the whole engine: N shards wired by their
//! real rings, on a virtual clock, driven by a seeded scheduler.
//!
//! Where the [`Cluster`](crate::engine::Cluster) driver settles every shard
//! after each operation, the simulation interleaves at random: clients
//! submit operations on their shard without waiting, shards are polled one
//! at a time in random order (so ring messages, forwarded deletes, steals
//! and gathered replies sit in the rings while time moves on), the clock
//! jumps by small and large amounts (leases, delays, backoff and retention
//! run out), clients disconnect with requests in flight, long polls time
//! out or are woken from other shards, the memory budget runs out (`Busy`),
//! and queues are purged, deleted and created again with leases out.
//!
//! With [`SimConfig::bound_leases`], clients also bind some of their
//! receives' leases to their connection, and a client that disconnects
//! hands what it bound to its shard as the release a closing connection
//! asks for (`Op::Abandon`), racing every other client's deletes, changes
//! and receives and the owners' expiries. Those choices come from a stream
//! of their own, so with it off a seed runs exactly as it always did (the
//! regression seeds keep replaying their bugs).
//!
//! After every step it checks what a client could see (`oracle.rs`): no
//! message delivered again before its lease ended or after it was deleted,
//! a receipt of an older delivery never accepted, delivery numbers unique
//! and growing, `Busy` only on sends; every shard's invariants (the
//! accounting identity of every queue among them). Every few steps it lets
//! the system settle and checks that nothing vanished: every accepted
//! message is held, or was deleted, dropped by retention, purged, or went
//! with its queue.
//!
//! With [`SimConfig::fifo`], work and its dead-letter queue are FIFO
//! queues: sends carry message groups, and the oracle checks that no
//! message of a group was delivered while an earlier one of it waited.
//!
//! Everything follows from the seed: a failure prints it, and the same seed
//! and step count replay it exactly (`sluice-sim --seed S --steps N`).

mod oracle;
mod queues;
mod world;

use std::fmt;

pub use self::oracle::Counts;
use self::world::World;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed: the whole run follows from it.
    pub seed: u64,
    /// Shards, 1 ..= 8.
    pub shards: u16,
    /// Scheduler steps.
    pub steps: u64,
    /// Clients bind leases to their connections and release them when
    /// they disconnect.
    pub bound_leases: bool,
    /// work and dlq are FIFO queues (work deduplicates by content): every
    /// send to them carries one of a few groups, and the oracle checks each
    /// group's order (`oracle/fifo.rs`). Its choices come from a stream of
    /// their own, like bound leases'.
    pub fifo: bool,
}

/// A run that found nothing wrong.
#[derive(Clone, Debug)]
pub struct SimReport {
    /// The configuration it ran.
    pub config: SimConfig,
    /// What happened, counted.
    pub counts: Counts,
    /// Virtual time at the end, ms since the start.
    pub virtual_ms: u64,
}

/// A check that failed.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The configuration that failed.
    pub config: SimConfig,
    /// The step at which a check failed (0-based).
    pub step: u64,
    /// What was wrong.
    pub message: String,
    /// The last steps before it, oldest first.
    pub recent: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation failed at step {} (seed {}, {} shards): {}",
            self.step, self.config.seed, self.config.shards, self.message
        )?;
        writeln!(f, "last steps:")?;
        for line in &self.recent {
            writeln!(f, "  {line}")?;
        }
        write!(
            f,
            "replay: cargo run --release -p sluice-broker --features test-util --bin sluice-sim -- --seed {} --shards {} --steps {}{}{}",
            self.config.seed,
            self.config.shards,
            self.step + 1,
            if self.config.bound_leases {
                " --bound-leases"
            } else {
                ""
            },
            if self.config.fifo { " --fifo" } else { "" }
        )
    }
}

impl std::error::Error for SimFailure {}

/// Most shards a simulation runs.
pub const SIM_SHARDS_MAX: u16 = 8;

/// Runs one simulation.
///
/// # Errors
/// The first check that failed, with the seed and the steps before it.
///
/// # Panics
/// When `config.shards` is 0 or above [`SIM_SHARDS_MAX`].
pub fn run(config: &SimConfig) -> Result<SimReport, SimFailure> {
    assert!(
        (1..=SIM_SHARDS_MAX).contains(&config.shards),
        "shards must be 1 ..= {SIM_SHARDS_MAX}"
    );
    let mut world = World::new(config.seed, config.shards, config.bound_leases, config.fifo);
    for step in 0..config.steps {
        if let Err(message) = world.step() {
            return Err(SimFailure {
                config: config.clone(),
                step,
                message,
                recent: world.recent(),
            });
        }
    }
    if let Err(message) = world.finish() {
        return Err(SimFailure {
            config: config.clone(),
            step: config.steps,
            message,
            recent: world.recent(),
        });
    }
    Ok(SimReport {
        config: config.clone(),
        counts: world.counts().clone(),
        virtual_ms: world.virtual_ms(),
    })
}
