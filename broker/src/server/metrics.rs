//! Prometheus metrics: the text exposition writer and a latency histogram
//! that shards record into without locks.
//!
//! `telemetry.rs` writes every family of `/metrics` from the state the
//! threads share (`server/shared.rs`): queue depths by state, oldest age,
//! the per-queue counters (sent, moved in, received, deleted, redelivered,
//! released, dead-lettered, redriven, dropped, purged), connections,
//! requests by operation, the shards' [`LatencyHistogram`]s merged from
//! their [`HistogramReader`]s; `process.rs` reads the `process_*` metrics
//! from `/proc/self`. The endpoint that serves them is an HTTP connection
//! of the shard loops like the SQS door's (`server/metrics_session.rs`).
//! The writer and the histograms (`exposition.rs`, `histogram.rs`) know
//! nothing of the server.
//!
//! ```
//! use sluice_broker::server::metrics::{LatencyHistogram, MetricType, PromWriter};
//! use std::time::Duration;
//!
//! let mut shard_histogram = LatencyHistogram::new(); // owned by the shard
//! let reader = shard_histogram.reader(); // for the thread that renders
//! shard_histogram.record(Duration::from_micros(42));
//! let mut out = String::new();
//! PromWriter::new(&mut out)
//!     .family("sluice_request_duration_seconds", "Request latency.", MetricType::Histogram)
//!     .histogram(&[("op", "send")], &reader.snapshot());
//! assert!(out.contains("sluice_request_duration_seconds_count{op=\"send\"} 1\n"));
//! ```

mod exposition;
mod histogram;
pub mod log_metrics;
mod per_shard;
mod process;
pub(super) mod telemetry;

pub use exposition::{Family, MetricType, PromWriter};
pub use histogram::{
    HistogramReader, HistogramSnapshot, LATENCY_BUCKET_BOUNDS_NANOS, LATENCY_BUCKETS,
    LatencyHistogram, REQUEST_BUCKET_BOUNDS, REQUEST_BUCKET_BOUNDS_NANOS, REQUEST_BUCKETS,
    request_bucket_of,
};

#[cfg(test)]
mod tests;
