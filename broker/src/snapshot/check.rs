//! The check (`--check-snapshot`, the fuzz target): a whole snapshot read
//! the way a start would, into scratch shards, and a report of what it
//! holds.

use std::time::Instant;

use super::format::{Header, SnapshotError};
use super::{Source, fresh_shards, load_shards, open};
use crate::engine::RegistryConfig;
use crate::engine::mesh::doorbell::{NoWake, Wake};
use crate::engine::shard::{LoadClock, ShardLoad};
use crate::sync::Arc;

/// What a snapshot holds, as `--check-snapshot` reports it.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// The header.
    pub header: Header,
    /// What loading it gave.
    pub load: ShardLoad,
    /// Bytes of the file.
    pub bytes: u64,
    /// How long the check took.
    pub took: std::time::Duration,
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.load;
        writeln!(
            f,
            "format version {}, written by a broker with {} shard(s) at Unix ms {}",
            self.header.version, self.header.shards, self.header.saved_wall_ms
        )?;
        writeln!(
            f,
            "{} bytes; queues: {}; messages: {}",
            self.bytes, self.header.queues, self.header.messages
        )?;
        writeln!(
            f,
            "as of now: visible {}, delayed {}, in flight {}, leases ended since (visible again at start) {}, delays ended since {}",
            l.visible, l.delayed, l.in_flight, l.leases_ended, l.delays_ended
        )?;
        writeln!(
            f,
            "message data: {} bytes; memory needed: {} bytes; dedup entries still open: {}",
            l.data_bytes, self.header.memory_bytes, l.dedup
        )?;
        write!(f, "checked in {:.3} s: it loads", self.took.as_secs_f64())
    }
}

/// Reads a whole snapshot the way a start would (header, registry, every
/// shard's section, checksums) into scratch shards, and reports what it
/// holds. `--check-snapshot` and the fuzz target; nothing is written.
///
/// # Errors
/// The first problem, with its byte offset.
pub fn check(source: Source<'_>, wall_ms: u64) -> Result<CheckReport, SnapshotError> {
    check_within(source, wall_ms, u64::MAX, usize::MAX)
}

/// [`check`] under a memory budget and a shard count limit (the fuzz
/// target keeps both small).
///
/// # Errors
/// As [`check`]; `Shards` when the file has more than `shards_max` shards.
pub fn check_within(
    source: Source<'_>,
    wall_ms: u64,
    memory_max: u64,
    shards_max: usize,
) -> Result<CheckReport, SnapshotError> {
    let started = Instant::now();
    let opened = open(source)?;
    let shards = opened.header.shards;
    if usize::from(shards) > shards_max {
        return Err(SnapshotError::Shards {
            file: shards,
            here: u16::try_from(shards_max).unwrap_or(u16::MAX),
        });
    }
    let registry = Arc::new(opened.registry(RegistryConfig {
        shards,
        seed: 0,
        memory_bytes_max: memory_max,
        queues_max: crate::engine::limits::PARTITIONS_MAX,
        frame_bytes_max: sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT,
    })?);
    opened.check_fit(shards, memory_max, crate::engine::limits::PARTITIONS_MAX)?;
    // Well past any retention: a message's age is never clamped.
    let now_ns = 1 << 60;
    let wakers = (0..shards)
        .map(|_| Box::new(NoWake) as Box<dyn Wake>)
        .collect();
    let mut engines = fresh_shards(&registry, 64, wakers, 0, now_ns, wall_ms);
    let clock = LoadClock {
        now_ns,
        wall_ms,
        saved_wall_ms: opened.header.saved_wall_ms,
    };
    let load = load_shards(source, &opened, &mut engines, clock)?;
    Ok(CheckReport {
        bytes: source.len()?,
        header: opened.header,
        load,
        took: started.elapsed(),
    })
}
