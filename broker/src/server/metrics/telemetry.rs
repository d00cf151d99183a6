//! What the server measures and how `/metrics` shows it.
//!
//! - [`LeaseMetrics`] is each shard's [`LeaseObserver`]: the engine tells it
//!   how leases end and it records into the shard's own histograms (one
//!   writer, lock-free; the metrics thread reads them through
//!   [`LeaseReaders`]).
//! - [`render`] writes the Prometheus text on each scrape from the shared
//!   state: it first asks the shards for fresh per-queue snapshots (waiting
//!   briefly), then sums shards.
//!
//! | family | labels | what |
//! |---|---|---|
//! | `sluice_info` | `version`, `io_backend`, `shards` | always 1 |
//! | `sluice_uptime_seconds` | | |
//! | `sluice_connections` | | open client connections |
//! | `sluice_connections_max` | | `--max-connections` |
//! | `sluice_connections_before_hello`, `sluice_connections_before_hello_max` | | connections not yet past HELLO (TLS handshakes included), and `--max-connections-before-hello` |
//! | `sluice_connections_before_hello_evicted_total` | | connections without HELLO closed to make room for a new one |
//! | `sluice_connections_accepted_total`, `_refused_total`, `_closed_bad_input_total`, `_timed_out_total` (silent past their session timeout), `sluice_accept_failures_total` | | |
//! | `sluice_requests_total` | `op` | requests decoded, by operation (the binary protocol) |
//! | `sluice_sqs_requests_total`, `sluice_sqs_errors_total` | `action` | SQS calls answered, and those answered with an SQS error, by action (`unknown`: any other name) |
//! | `sluice_sqs_stale_deletes_total` | | SQS deletes with the handle of an older delivery, which succeed without deleting |
//! | `sluice_unsent_bytes` | | replies queued and not yet written |
//! | `sluice_memory_used_bytes`, `sluice_memory_max_bytes` | | the message memory budget |
//! | `sluice_queues` | | |
//! | `sluice_queue_messages` | `queue`, `state` | visible, delayed, in_flight |
//! | `sluice_queue_oldest_message_age_seconds` | `queue` | |
//! | `sluice_queue_groups_in_flight` | `queue` | message groups with a message in flight: a FIFO queue's locked groups |
//! | `sluice_queue_<counter>_total` | `queue` | the per-queue counters: sent, moved in, received, deleted, redelivered, released, dead-lettered, redriven, dropped, purged |
//! | `sluice_lease_hold_seconds` | `outcome` | histogram: deleted, released, expired, abandoned (released because the connection it was bound to closed; the queue's `released` counter counts these too) |
//! | `sluice_redelivery_lateness_seconds` | | histogram: lease end to receivable again |
//! | `sluice_build_info` | `version` | always 1 |
//! | `sluice_io_backend` | `backend` | 1 for the backend in use |
//! | `sluice_io_backend_fallback` | | 1 when io_uring was unavailable and the server fell back to epoll |
//! | `sluice_draining` | | 1 once a graceful shutdown began (`/healthz` answers 503) |
//! | `sluice_request_duration_seconds` | `op` | histogram: frame decoded to reply queued |
//! | `sluice_errors_total` | `code` | error codes returned: whole requests and each refused batch entry |
//! | `sluice_shard_loop_turns_total`, `sluice_shard_loop_turns_with_events_total`, `sluice_shard_busy_seconds_total` | `shard` | each shard's event loop |
//! | `sluice_shard_ring_received_total`, `sluice_shard_ring_sent_total` | `shard` | messages between shards |
//! | `sluice_shard_connections` | `shard` | open connections per shard |
//! | `sluice_log_bytes_total`, `sluice_log_commits_total`, `sluice_log_syncs_total`, `sluice_log_failures_total`, `sluice_log_failing`, `sluice_log_replay_seconds`; `sluice_log_sync_seconds` (histogram) | `shard` | the write-ahead log, with `--durability batch\|always` only (`log_metrics.rs`) |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | | from `/proc/self` |

use crate::sync::Ordering::Relaxed;
use std::collections::BTreeMap;

use sluice_protocol::{QueueName, QueueStats};

use super::process;
use super::{
    HistogramSnapshot, LatencyHistogram, MetricType, PromWriter, REQUEST_BUCKET_BOUNDS_NANOS,
    REQUEST_BUCKETS,
};
use crate::engine::{LeaseObserver, LeaseOutcome};
use crate::server::metrics_session::Exposition;
use crate::server::shared::{
    ERROR_SLOTS, LeaseReaders, OP_SLOTS, OUTCOME_NAMES, OUTCOMES, ServerState, ShardStats,
    error_slot_name, op_slot_name, outcome_slot, server_version, snake_case,
};

/// A shard's lease histograms; the engine reports into them.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    hold: [LatencyHistogram; OUTCOMES],
    lateness: LatencyHistogram,
}

impl LeaseMetrics {
    /// Empty histograms.
    pub fn new() -> LeaseMetrics {
        LeaseMetrics::default()
    }

    /// Read handles for the metrics thread.
    pub fn readers(&self) -> LeaseReaders {
        LeaseReaders {
            hold: std::array::from_fn(|i| self.hold[i].reader()),
            lateness: self.lateness.reader(),
        }
    }
}

impl LeaseObserver for LeaseMetrics {
    fn lease_ended(&mut self, outcome: LeaseOutcome, held_ns: u64) {
        self.hold[outcome_slot(outcome)].record_nanos(held_ns);
    }

    fn redelivery_lateness(&mut self, lateness_ns: u64) {
        self.lateness.record_nanos(lateness_ns);
    }
}

/// A queue counter family: name, help, and the counter.
type QueueCounter = (&'static str, &'static str, fn(&QueueStats) -> u64);

/// The queue counters that are written as `sluice_queue_<name>_total`.
const QUEUE_COUNTERS: [QueueCounter; 10] = [
    (
        "sluice_queue_sent_total",
        "Messages accepted by send (duplicates excluded).",
        |s| s.sent,
    ),
    (
        "sluice_queue_moved_in_total",
        "Messages that arrived from another queue (dead-lettered into it or redriven back).",
        |s| s.moved_in,
    ),
    ("sluice_queue_received_total", "Deliveries.", |s| s.received),
    ("sluice_queue_deleted_total", "Messages deleted.", |s| {
        s.deleted
    }),
    (
        "sluice_queue_redelivered_total",
        "Leases that expired (the message is delivered again).",
        |s| s.redelivered,
    ),
    (
        "sluice_queue_released_total",
        "Leases released (visibility set to 0).",
        |s| s.released,
    ),
    (
        "sluice_queue_dead_lettered_total",
        "Messages moved out to the dead-letter queue.",
        |s| s.dead_lettered,
    ),
    (
        "sluice_queue_redriven_total",
        "Messages moved out by a redrive.",
        |s| s.redriven,
    ),
    (
        "sluice_queue_dropped_total",
        "Messages dropped by retention.",
        |s| s.dropped,
    ),
    (
        "sluice_queue_purged_total",
        "Messages removed by a purge.",
        |s| s.purged,
    ),
];

fn merged(readers: impl Iterator<Item = HistogramSnapshot>) -> HistogramSnapshot {
    let mut all = HistogramSnapshot::default();
    for s in readers {
        all.merge(&s);
    }
    all
}

/// The server as the metrics endpoint sees it: a scrape asks every shard
/// for its queue counters, `/metrics` is [`render`], `/healthz` answers 503
/// once the shutdown began.
#[derive(Debug)]
pub struct ServerMetrics(pub crate::sync::Arc<ServerState>);

impl Exposition for ServerMetrics {
    fn begin_scrape(&self) -> u64 {
        self.0.begin_scrape()
    }

    fn scraped(&self, generation: u64) -> bool {
        self.0.scraped(generation)
    }

    fn render(&self, out: &mut String) {
        render(&self.0, out);
    }

    fn draining(&self) -> bool {
        self.0.shutting_down()
    }
}

/// Writes every metric of the server into `out`, with the queue counters
/// the shards last published.
pub fn render(shared: &ServerState, out: &mut String) {
    let queues = shared.queue_stats();
    let mut w = PromWriter::new(out);
    render_server(shared, &mut w);
    render_connections(shared, &mut w);
    render_load(shared, &mut w);
    render_sqs(shared, &mut w);
    render_queues(&queues, &mut w);
    render_leases(shared, &mut w);
    render_operations(shared, &mut w);
    render_shards(shared, &mut w);
    super::log_metrics::render_log(shared, &mut w);
    render_process(&mut w);
}

/// The server: version, io backend, shards, uptime.
fn render_server(shared: &ServerState, w: &mut PromWriter<'_>) {
    let shards = shared.shards.len().to_string();
    let backend = shared.backend.to_string();
    w.family(
        "sluice_info",
        "The server: version, io backend in use, shards.",
        MetricType::Gauge,
    )
    .sample_u64(
        &[
            ("version", &server_version()),
            ("io_backend", &backend),
            ("shards", &shards),
        ],
        1,
    );
    w.gauge(
        "sluice_uptime_seconds",
        "Seconds since the server started.",
        #[allow(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
        {
            crate::server::clock::now_ns().saturating_sub(shared.started_ns) as f64 / 1e9
        },
    );
}

/// Connections: open, the limits, accepted, refused, closed.
fn render_connections(shared: &ServerState, w: &mut PromWriter<'_>) {
    w.family(
        "sluice_connections",
        "Open client connections.",
        MetricType::Gauge,
    )
    .sample_u64(&[], shared.connections.load(Relaxed).into());
    w.family(
        "sluice_connections_max",
        "The connection limit (--max-connections).",
        MetricType::Gauge,
    )
    .sample_u64(&[], shared.config.connections_max.into());
    w.family(
        "sluice_connections_before_hello",
        "Open client connections not yet past a successful HELLO (TLS handshakes included).",
        MetricType::Gauge,
    )
    .sample_u64(&[], shared.before_hello.load(Relaxed).into());
    w.family(
        "sluice_connections_before_hello_max",
        "The limit on connections before HELLO (--max-connections-before-hello).",
        MetricType::Gauge,
    )
    .sample_u64(&[], shared.config.connections_before_hello_max.into());
    w.counter(
        "sluice_connections_before_hello_evicted_total",
        "Connections without a HELLO closed to make room for a new one, the longest waiting first.",
        shared.sum(|s| s.before_hello_evicted.get()),
    );
    w.counter(
        "sluice_connections_accepted_total",
        "Client connections accepted.",
        shared.sum(|s| s.accepted.get()),
    );
    w.counter(
        "sluice_connections_refused_total",
        "Client connections refused: at the connection limit, or out of file descriptors.",
        shared.sum(|s| s.refused.get()),
    );
    w.counter(
        "sluice_accept_failures_total",
        "Times accepting failed for lack of file descriptors or kernel memory.",
        shared.sum(|s| s.accept_failures.get()),
    );
    w.counter(
        "sluice_connections_closed_bad_input_total",
        "Connections closed for bad input: framing, HELLO, auth, timeouts.",
        shared.sum(|s| s.closed_bad_input.get()),
    );
    w.counter(
        "sluice_connections_timed_out_total",
        "Connections closed because they were silent for longer than their session timeout.",
        shared.sum(|s| s.timed_out.get()),
    );
}

/// Requests by operation, unsent reply bytes, the message memory budget.
fn render_load(shared: &ServerState, w: &mut PromWriter<'_>) {
    {
        let mut f = w.family(
            "sluice_requests_total",
            "Requests decoded, by operation.",
            MetricType::Counter,
        );
        for slot in 0..OP_SLOTS {
            let name = op_slot_name(slot);
            f.sample_u64(&[("op", &name)], shared.sum(|s| s.requests[slot].get()));
        }
    }
    w.family(
        "sluice_unsent_bytes",
        "Reply bytes queued and not yet written, all connections.",
        MetricType::Gauge,
    )
    .sample_u64(&[], shared.unsent_bytes());
    w.family(
        "sluice_memory_used_bytes",
        "Bytes of the message memory budget in use.",
        MetricType::Gauge,
    )
    .sample_u64(&[], shared.registry.memory().used());
    w.family(
        "sluice_memory_max_bytes",
        "The message memory budget (--memory-max).",
        MetricType::Gauge,
    )
    .sample_u64(&[], shared.registry.memory().limit());
}

/// The SQS door's calls by action.
fn render_sqs(shared: &ServerState, w: &mut PromWriter<'_>) {
    for (name, help, errors) in [
        (
            "sluice_sqs_requests_total",
            "SQS calls answered, by action.",
            false,
        ),
        (
            "sluice_sqs_errors_total",
            "SQS calls answered with an SQS error, by action.",
            true,
        ),
    ] {
        let mut f = w.family(name, help, MetricType::Counter);
        for (slot, action) in sluice_sqs::Action::ALL.iter().enumerate() {
            let label = snake_case(action.name());
            let value = shared.sum(|s| {
                if errors {
                    s.sqs.errors[slot].get()
                } else {
                    s.sqs.requests[slot].get()
                }
            });
            f.sample_u64(&[("action", &label)], value);
        }
    }
    w.counter(
        "sluice_sqs_stale_deletes_total",
        "SQS deletes with the receipt handle of an older delivery, which succeed without deleting.",
        shared.sum(|s| s.sqs.stale_deletes.get()),
    );
}

/// The queues: how many, their messages by state, the oldest age, the
/// per-queue counters.
fn render_queues(queues: &BTreeMap<QueueName, (QueueStats, u64)>, w: &mut PromWriter<'_>) {
    w.family("sluice_queues", "Queues.", MetricType::Gauge)
        .sample_u64(&[], queues.len() as u64);
    {
        let mut f = w.family(
            "sluice_queue_messages",
            "Messages held, by queue and state.",
            MetricType::Gauge,
        );
        for (q, (s, _)) in queues {
            f.sample_u64(&[("queue", q), ("state", "visible")], s.visible);
            f.sample_u64(&[("queue", q), ("state", "delayed")], s.delayed);
            f.sample_u64(&[("queue", q), ("state", "in_flight")], s.in_flight);
        }
    }
    {
        let mut f = w.family(
            "sluice_queue_oldest_message_age_seconds",
            "Age of the oldest message held, since its original send.",
            MetricType::Gauge,
        );
        for (q, (s, _)) in queues {
            #[allow(clippy::cast_precision_loss, reason = "milliseconds to seconds")]
            f.sample(&[("queue", q)], s.oldest_age_ms as f64 / 1000.0);
        }
    }
    {
        let mut f = w.family(
            "sluice_queue_groups_in_flight",
            "Message groups with a message in flight (a FIFO queue's locked groups); 0 for a queue without groups.",
            MetricType::Gauge,
        );
        for (q, (_, groups)) in queues {
            f.sample_u64(&[("queue", q)], *groups);
        }
    }
    for (name, help, get) in QUEUE_COUNTERS {
        let mut f = w.family(name, help, MetricType::Counter);
        for (q, (s, _)) in queues {
            f.sample_u64(&[("queue", q)], get(s));
        }
    }
}

/// How leases ended and how late redeliveries were, merged over the shards.
fn render_leases(shared: &ServerState, w: &mut PromWriter<'_>) {
    {
        let mut f = w.family(
            "sluice_lease_hold_seconds",
            "How long leases were held, by how they ended.",
            MetricType::Histogram,
        );
        for (i, outcome) in OUTCOME_NAMES.iter().enumerate() {
            let h = merged(shared.shards.iter().map(|s| s.lease.hold[i].snapshot()));
            f.histogram(&[("outcome", outcome)], &h);
        }
    }
    let lateness = merged(shared.shards.iter().map(|s| s.lease.lateness.snapshot()));
    w.family(
        "sluice_redelivery_lateness_seconds",
        "From a lease's end to its message being receivable again.",
        MetricType::Histogram,
    )
    .histogram(&[], &lateness);
}

/// Build, io backend, drain state, request durations and errors.
fn render_operations(shared: &ServerState, w: &mut PromWriter<'_>) {
    w.family(
        "sluice_build_info",
        "The build: version (always 1).",
        MetricType::Gauge,
    )
    .sample_u64(&[("version", env!("CARGO_PKG_VERSION"))], 1);
    render_io(
        w,
        &shared.backend.to_string(),
        shared.io_fallback.as_deref(),
    );
    w.family(
        "sluice_draining",
        "1 once a graceful shutdown has begun (/healthz answers 503), else 0.",
        MetricType::Gauge,
    )
    .sample_u64(&[], u64::from(shared.shutting_down()));
    {
        let mut f = w.family(
            "sluice_request_duration_seconds",
            "Server-side request duration, from the frame decoded to its reply queued, by \
             operation.",
            MetricType::Histogram,
        );
        for slot in 0..OP_SLOTS {
            let mut counts = [0u64; REQUEST_BUCKETS];
            let mut sum_ns = 0u64;
            for s in &*shared.shards {
                let (c, sum) = s.stats.durations.read(slot);
                for (all, n) in counts.iter_mut().zip(c) {
                    *all = all.saturating_add(n);
                }
                sum_ns = sum_ns.saturating_add(sum);
            }
            #[allow(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
            let sum = sum_ns as f64 / 1e9;
            f.histogram_buckets(
                &[("op", &op_slot_name(slot))],
                &REQUEST_BUCKET_BOUNDS_NANOS,
                &counts,
                sum,
            );
        }
    }
    {
        let mut f = w.family(
            "sluice_errors_total",
            "Error codes returned to clients: whole-request errors and each refused entry of a \
             batch, by code.",
            MetricType::Counter,
        );
        for slot in 0..ERROR_SLOTS {
            f.sample_u64(
                &[("code", &error_slot_name(slot))],
                shared.sum(|s| s.errors[slot].get()),
            );
        }
    }
}

/// The io backend in use, and whether it is epoll because io_uring was
/// unavailable (`fallback`: why).
fn render_io(w: &mut PromWriter<'_>, backend: &str, fallback: Option<&str>) {
    w.family(
        "sluice_io_backend",
        "The io backend every shard runs on (always 1).",
        MetricType::Gauge,
    )
    .sample_u64(&[("backend", backend)], 1);
    w.family(
        "sluice_io_backend_fallback",
        "1 when io_uring was unavailable (e.g. blocked by a container's seccomp profile) and \
         the server fell back to epoll; 0 otherwise.",
        MetricType::Gauge,
    )
    .sample_u64(&[], u64::from(fallback.is_some()));
}

/// Each shard's event loop, rings and connections.
fn render_shards(shared: &ServerState, w: &mut PromWriter<'_>) {
    type Get = fn(&ShardStats) -> u64;
    let per_shard: [(&str, &str, MetricType, Get); 5] = [
        (
            "sluice_shard_loop_turns_total",
            "Turns of each shard's event loop.",
            MetricType::Counter,
            |s| s.event_loop.turns.get(),
        ),
        (
            "sluice_shard_loop_turns_with_events_total",
            "Turns of each shard's event loop whose wait returned io events.",
            MetricType::Counter,
            |s| s.event_loop.turns_with_events.get(),
        ),
        (
            "sluice_shard_ring_received_total",
            "Messages each shard took from other shards' rings.",
            MetricType::Counter,
            |s| s.event_loop.ring_received.get(),
        ),
        (
            "sluice_shard_ring_sent_total",
            "Messages each shard sent to other shards' rings.",
            MetricType::Counter,
            |s| s.event_loop.ring_sent.get(),
        ),
        (
            "sluice_shard_connections",
            "Open client connections, by shard.",
            MetricType::Gauge,
            |s| s.connections.get(),
        ),
    ];
    let names = super::per_shard::render_per_shard(shared, w, &per_shard);
    let mut f = w.family(
        "sluice_shard_busy_seconds_total",
        "Time each shard's loop spent outside its wait (serving), seconds; its rate is the \
         shard's busy fraction.",
        MetricType::Counter,
    );
    for (s, shard) in shared.shards.iter().zip(&names) {
        #[allow(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
        f.sample(
            &[("shard", shard)],
            s.stats.event_loop.busy_ns.get() as f64 / 1e9,
        );
    }
}

/// The standard `process_*` metrics; what cannot be read is left out.
fn render_process(w: &mut PromWriter<'_>) {
    let p = process::read();
    if let Some(v) = p.cpu_seconds {
        w.family(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            MetricType::Counter,
        )
        .sample(&[], v);
    }
    let gauges = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            p.resident_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            p.virtual_bytes,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            p.open_fds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            p.max_fds,
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(v) = value {
            w.family(name, help, MetricType::Gauge).sample_u64(&[], v);
        }
    }
    if let Some(v) = p.start_time_seconds {
        w.gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            v,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_io_fallback_shows() {
        let mut out = String::new();
        render_io(
            &mut PromWriter::new(&mut out),
            "epoll",
            Some("io_uring_setup failed: Operation not permitted"),
        );
        assert!(
            out.contains("sluice_io_backend{backend=\"epoll\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("sluice_io_backend_fallback 1\n"), "{out}");
        let mut out = String::new();
        render_io(&mut PromWriter::new(&mut out), "io_uring", None);
        assert!(
            out.contains("sluice_io_backend{backend=\"io_uring\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("sluice_io_backend_fallback 0\n"), "{out}");
    }

    #[test]
    fn lease_metrics_record_by_outcome() {
        let mut m = LeaseMetrics::new();
        let r = m.readers();
        m.lease_ended(LeaseOutcome::Released, 5_000);
        m.lease_ended(LeaseOutcome::Expired, 5_000);
        m.lease_ended(LeaseOutcome::Expired, 7_000);
        m.redelivery_lateness(1_000);
        assert_eq!(r.hold[0].snapshot().count(), 0);
        assert_eq!(r.hold[1].snapshot().count(), 1);
        assert_eq!(r.hold[2].snapshot().count(), 2);
        assert_eq!(r.lateness.snapshot().count(), 1);
    }
}
