//! Snapshots of the test harness [`Cluster`]: writing one to bytes or to a
//! file, and a cluster loaded back from one. Here rather than in the engine,
//! which knows no files: the harness lends its registry and shards, the
//! snapshot does the rest as a broker's shutdown and start would.

use std::path::Path;

use super::format::SnapshotError;
use super::{SaveReport, Source};
use crate::engine::shard::{LoadClock, ShardLoad};
use crate::engine::{Cluster, RegistryConfig};
use crate::sync::Arc;

impl Cluster {
    /// A snapshot of every shard, as a shutdown would write it (call
    /// [`Cluster::shutdown`] first to answer waiting receives).
    #[must_use]
    pub fn snapshot(&mut self) -> Vec<u8> {
        let (registry, shards, now_ns, wall_ms) = self.settled_parts();
        super::to_bytes(registry, shards, now_ns, wall_ms)
    }

    /// Saves a snapshot to `path` the way a shutdown does (one thread per
    /// shard, direct writes where the file system takes them).
    ///
    /// # Errors
    /// The save's i/o error.
    pub fn save_snapshot(&mut self, path: &Path) -> std::io::Result<SaveReport> {
        let (registry, shards, now_ns, wall_ms) = self.settled_parts();
        super::save(path, registry, shards, now_ns, wall_ms)
    }

    /// A cluster loaded from `snapshot` under `config` (whose shard count
    /// must be the file's; its seed feeds the shards' PRNGs only, the keys
    /// come from the file), with its clocks at `now_ns` and `wall_ms` (the
    /// wall-clock time since the save counts as time passed).
    ///
    /// # Errors
    /// What is wrong with the snapshot, with its byte offset.
    pub fn from_snapshot(
        snapshot: &[u8],
        config: RegistryConfig,
        now_ns: u64,
        wall_ms: u64,
    ) -> Result<(Cluster, ShardLoad), SnapshotError> {
        let source = Source::Bytes(snapshot);
        let opened = super::open(source)?;
        opened.check_fit(config.shards, config.memory_bytes_max, config.queues_max)?;
        let seed = config.seed ^ 0x5eed;
        let registry = Arc::new(opened.registry(config)?);
        let mut c = Cluster::on_registry(registry, seed, now_ns, wall_ms);
        let clock = LoadClock {
            now_ns,
            wall_ms,
            saved_wall_ms: opened.header.saved_wall_ms,
        };
        let load = super::load_shards(source, &opened, c.shards_mut(), clock)?;
        c.settle();
        Ok((c, load))
    }
}
