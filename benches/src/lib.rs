//! Shared fixtures for sluice's benchmarks and measuring binaries: the
//! engine shards they drive, set up the same way in each.

use std::sync::Arc;

use sluice_broker::engine::limits::LINK_CAPACITY_DEFAULT;
use sluice_broker::engine::mesh::doorbell::{self, Wake};
use sluice_broker::engine::{Registry, RegistryConfig, Shard, ShardConfig};
use sluice_protocol::{AttributeUpdate, QueueName};

/// The wall-clock time (ms since the epoch) the benchmarks' shards run at.
pub const WALL_MS: u64 = 1_700_000_000_000;

// The shards of these benchmarks are polled, never asleep: they wake
// nobody (`NoWake`).
use sluice_broker::engine::mesh::doorbell::NoWake;

/// `n` shards sharing one registry that holds `queue` (default
/// attributes), shard `k` seeded with `k + 1`.
///
/// # Panics
/// When the queue cannot be created in a fresh registry.
#[must_use]
pub fn shards(n: u16, queue: &QueueName) -> Vec<Shard> {
    let registry = Arc::new(Registry::new(RegistryConfig {
        shards: n,
        seed: 1,
        ..RegistryConfig::default()
    }));
    registry
        .create(queue, &AttributeUpdate::default(), 0)
        .expect("create the bench queue");
    let wakers = (0..n).map(|_| Box::new(NoWake) as Box<dyn Wake>).collect();
    doorbell::mesh(usize::from(n), LINK_CAPACITY_DEFAULT, wakers)
        .into_iter()
        .zip(0..n)
        .map(|(links, shard)| {
            let config = ShardConfig {
                shard,
                seed: u64::from(shard) + 1,
            };
            Shard::new(config, links, registry.clone(), 0, WALL_MS)
        })
        .collect()
}
