//! Prometheus metrics: the text exposition writer, a latency histogram that
//! shards record into without locks, and a tiny HTTP server for `/metrics`
//! and `/healthz` on its own thread.
//!
//! The server knows nothing of queues or shards: on each scrape it calls a
//! [`MetricsSource`] supplied by the caller, which gathers what it wants
//! (queue depths by state, oldest age, the per-queue counters: sent, moved
//! in, received, deleted, redelivered, released, dead-lettered, redriven,
//! dropped, purged; connections, requests by operation, per-shard
//! [`LatencyHistogram`]s merged from their [`HistogramReader`]s) and writes
//! it with a [`PromWriter`].
//!
//! The server's own source is here too: `telemetry.rs` holds the shards'
//! lease histograms and writes every family of `/metrics` from the state
//! the threads share (`server/shared.rs`), and `process.rs` reads the
//! `process_*` metrics from `/proc/self`. The writer, the histograms and
//! the HTTP server (`exposition.rs`, `histogram.rs`, `http.rs`) know nothing
//! of them.
//!
//! ```no_run
//! use sluice_broker::server::metrics::{LatencyHistogram, MetricType, MetricsServer, PromWriter};
//! use std::time::Duration;
//!
//! let mut shard_histogram = LatencyHistogram::new(); // owned by the shard
//! let reader = shard_histogram.reader(); // for the metrics thread
//! let server = MetricsServer::start("127.0.0.1:0".parse()?, move |out: &mut String| {
//!     let mut w = PromWriter::new(out);
//!     w.family("sluice_request_duration_seconds", "Request latency.", MetricType::Histogram)
//!         .histogram(&[("op", "send")], &reader.snapshot());
//! })?;
//! shard_histogram.record(Duration::from_micros(42));
//! println!("metrics on http://{}/metrics", server.local_addr());
//! server.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod exposition;
mod histogram;
mod http;
mod process;
pub(super) mod telemetry;

pub use exposition::{Family, MetricType, PromWriter};
pub use histogram::{
    HistogramReader, HistogramSnapshot, LATENCY_BUCKET_BOUNDS_NANOS, LATENCY_BUCKETS,
    LatencyHistogram, REQUEST_BUCKET_BOUNDS, REQUEST_BUCKET_BOUNDS_NANOS, REQUEST_BUCKETS,
    request_bucket_of,
};
pub use http::{MetricsServer, MetricsServerOptions, MetricsSource};

#[cfg(test)]
mod tests;
