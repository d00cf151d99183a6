//! The write-ahead log's metrics (`--durability batch|always`): what each
//! shard appended and synced, how long its syncs took, and how long the
//! start's replay took. Each shard writes its own `LogStats`
//! (`server/shared.rs`); the metrics endpoint reads them all.
//!
//! | family | labels | what |
//! |---|---|---|
//! | `sluice_log_bytes_total` | `shard` | bytes appended to the shard's log (frames) |
//! | `sluice_log_commits_total` | `shard` | commits appended (one per turn that wrote records) |
//! | `sluice_log_syncs_total` | `shard` | `fdatasync`s of the shard's log |
//! | `sluice_log_sync_seconds` | | histogram: one sync's duration, every shard's |
//! | `sluice_log_failures_total` | `shard` | writes or syncs that failed (a write is retried, a failed sync stops the broker) |
//! | `sluice_log_failing` | `shard` | 1 while a write failed and no retry has written it: changes are refused with `Busy` |
//! | `sluice_log_replay_seconds` | `shard` | how long the start took to replay the shard's log |

use super::exposition::{MetricType, PromWriter};
use super::histogram::{REQUEST_BUCKET_BOUNDS_NANOS, REQUEST_BUCKETS};
use crate::server::shared::{ServerState, ShardStats};

/// Writes the log's families: nothing without a log.
pub(super) fn render_log(shared: &ServerState, w: &mut PromWriter<'_>) {
    if shared.config.log_dir.is_none() {
        return;
    }
    type Get = fn(&ShardStats) -> u64;
    let per_shard: [(&str, &str, MetricType, Get); 5] = [
        (
            "sluice_log_bytes_total",
            "Bytes appended to each shard's write-ahead log.",
            MetricType::Counter,
            |s| s.log.bytes.get(),
        ),
        (
            "sluice_log_commits_total",
            "Commits appended to each shard's write-ahead log (one per loop turn that wrote \
             records).",
            MetricType::Counter,
            |s| s.log.commits.get(),
        ),
        (
            "sluice_log_syncs_total",
            "fdatasyncs of each shard's write-ahead log.",
            MetricType::Counter,
            |s| s.log.syncs.get(),
        ),
        (
            "sluice_log_failures_total",
            "Writes or syncs of each shard's write-ahead log that failed (a failed write is \
             retried, a failed sync stops the broker).",
            MetricType::Counter,
            |s| s.log.failures.get(),
        ),
        (
            "sluice_log_failing",
            "1 while a write of the shard's write-ahead log failed and no retry has written \
             it yet: sends, deletes, purges and redrives are refused with Busy meanwhile.",
            MetricType::Gauge,
            |s| s.log.failing.get(),
        ),
    ];
    let names = super::per_shard::render_per_shard(shared, w, &per_shard);
    {
        let mut f = w.family(
            "sluice_log_replay_seconds",
            "How long the start took to replay each shard's write-ahead log.",
            MetricType::Gauge,
        );
        for (s, shard) in shared.shards.iter().zip(&names) {
            #[allow(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
            let secs = s.stats.log.replay_ns.get() as f64 / 1e9;
            f.sample(&[("shard", shard)], secs);
        }
    }
    let mut counts = [0u64; REQUEST_BUCKETS];
    let mut sum_ns = 0u64;
    for s in &*shared.shards {
        for (all, c) in counts.iter_mut().zip(&s.stats.log.sync_buckets) {
            *all = all.saturating_add(c.get());
        }
        sum_ns = sum_ns.saturating_add(s.stats.log.sync_ns.get());
    }
    #[allow(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
    let sum = sum_ns as f64 / 1e9;
    w.family(
        "sluice_log_sync_seconds",
        "How long one fdatasync of a shard's write-ahead log took.",
        MetricType::Histogram,
    )
    .histogram_buckets(&[], &REQUEST_BUCKET_BOUNDS_NANOS, &counts, sum);
}
