//! A per-shard counter or gauge family, as `telemetry.rs` and
//! `log_metrics.rs` both write them.

use super::exposition::{MetricType, PromWriter};
use crate::server::shared::{ServerState, ShardStats};

/// One per-shard family: name, help, kind, and the value of a shard.
pub(super) type PerShard<'a> = (&'a str, &'a str, MetricType, fn(&ShardStats) -> u64);

/// A counter or gauge of each shard, one family per [`PerShard`], labelled
/// `shard`; returns the labels, for further families.
pub(super) fn render_per_shard(
    shared: &ServerState,
    w: &mut PromWriter<'_>,
    families: &[PerShard<'_>],
) -> Vec<String> {
    let names: Vec<String> = (0..shared.shards.len()).map(|i| i.to_string()).collect();
    for &(name, help, kind, get) in families {
        let mut f = w.family(name, help, kind);
        for (s, shard) in shared.shards.iter().zip(&names) {
            f.sample_u64(&[("shard", shard)], get(&s.stats));
        }
    }
    names
}
