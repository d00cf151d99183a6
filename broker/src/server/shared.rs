//! What the shard threads, the metrics thread and the [`ServerHandle`]
//! share.
//!
//! # Ground rules
//!
//! - **Counters have one writer.** Each shard owns its [`ShardStats`]: it
//!   alone writes them, with a `Relaxed` load and store (no read-modify-write
//!   on the request path); readers (SERVER_STATS on any shard, the metrics
//!   thread) load them `Relaxed` and sum. Each is an independent monotonic
//!   counter or gauge that publishes no other memory, so there is nothing
//!   for Acquire or Release to order.
//! - **The connection count is shared and exact.** `connections` is the one
//!   atomic every shard writes (`fetch_add` on accept, `fetch_sub` on
//!   close), so the `--max-connections` limit holds across shards: a shard
//!   that sees the old value at or above the limit undoes its increment and
//!   refuses. `before_hello` (connections not yet past HELLO) is kept the
//!   same way against `--max-connections-before-hello`.
//! - **Failed HELLOs** go through one `Mutex<AuthGuard>`, taken only when a
//!   HELLO carries a token to check against a configured one (rare, and
//!   never on the request path).
//! - **Unsent bytes are published, not shared.** Each shard stores its
//!   driver's unsent total once per loop turn; a shard checks the sum (a
//!   little stale for the others) against `--unsent-bytes-total-max`. The
//!   bound is soft by at most one loop turn of replies per shard.
//! - **Queue snapshots go through a `Mutex` off the request path.** A shard
//!   replaces its snapshot when a scrape asks (or every
//!   [`STATS_PUBLISH_INTERVAL`]) with `try_lock`, so it never waits for the metrics thread; the
//!   metrics thread copies the snapshots out under the lock.
//! - **The manual clock's catch-up** is one atomic per shard,
//!   `clock_seen_ns`: the engine time of the shard's last poll, stored
//!   (`Release`) after the poll fired every timer due by then and published
//!   its hints; an `ADVANCE_CLOCK` waiting for the shards loads them
//!   (`Acquire`), so once all are past its time, what the engines did by
//!   then is visible to whoever acts on the reply.
//! - **Shutdown** is a flag (`Release` store, `Acquire` load) plus a wake of
//!   every shard's driver; shards count themselves out of
//!   `shards_running` when they have closed their connections.
//!
//! [`ServerHandle`]: super::ServerHandle

use crate::sync::Ordering::{AcqRel, Acquire, Relaxed, Release};
use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, CachePadded, Mutex, thread};
use std::net::SocketAddr;
use std::time::Duration;

use sluice_protocol::opcode;
use sluice_protocol::{ErrorCode, QueueName, QueueStats, ServerStatsReply};
use sluice_sqs::{Action, Response};

use super::auth_guard::AuthGuard;
use super::clock::{self, Clock, EngineTime, NotManual};
use super::config::Config;
#[cfg(doc)]
use super::limits::STATS_PUBLISH_INTERVAL;
#[cfg(doc)]
use super::metrics::REQUEST_BUCKET_BOUNDS_NANOS;
use super::metrics::{HistogramReader, REQUEST_BUCKETS, request_bucket_of};
use super::transport::REFUSAL_NAMES;
use crate::engine::{LeaseOutcome, Registry};
use crate::io::{Backend, Waker};

/// Request opcodes counted per operation, in the order of
/// [`opcode::REQUESTS`]; one more slot counts unknown opcodes.
pub const OP_SLOTS: usize = opcode::REQUESTS.len() + 1;

/// The slot of a request opcode in the per-operation counters.
pub fn op_slot(op: u8) -> usize {
    opcode::REQUESTS
        .iter()
        .position(|&o| o == op)
        .unwrap_or(OP_SLOTS - 1)
}

/// The name of a per-operation slot, lower case (`send`, `unknown`).
pub fn op_slot_name(slot: usize) -> String {
    opcode::REQUESTS
        .get(slot)
        .and_then(|&op| opcode::name(op))
        .map_or_else(|| "unknown".to_owned(), str::to_ascii_lowercase)
}

/// A counter with one writer (see the ground rules).
#[derive(Debug, Default)]
pub struct OwnedCounter(AtomicU64);

impl OwnedCounter {
    /// Adds `n`: only the owning shard calls this.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Sets the value: only the owning shard calls this.
    #[inline]
    pub fn set(&self, n: u64) {
        self.0.store(n, Relaxed);
    }

    /// The value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Error code slots: one per [`ErrorCode::ALL`].
pub const ERROR_SLOTS: usize = ErrorCode::ALL.len();

/// The slot of an error code in [`ShardStats::errors`].
pub fn error_slot(code: ErrorCode) -> usize {
    ErrorCode::ALL
        .iter()
        .position(|&c| c == code)
        .unwrap_or(ERROR_SLOTS - 1)
}

/// The label value of an error slot: the code's name in snake case
/// (`busy`, `queue_not_found`).
pub fn error_slot_name(slot: usize) -> String {
    match ErrorCode::ALL.get(slot) {
        Some(code) => snake_case(&code.to_string()),
        None => "unknown".to_owned(),
    }
}

/// `CamelCase` as `camel_case`, for label values.
pub fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A shard's request duration histograms, one per operation slot: from the
/// frame decoded to its reply queued. One writer (the shard), plain
/// counters in fixed buckets ([`REQUEST_BUCKET_BOUNDS_NANOS`]), no locks.
#[derive(Debug)]
pub struct RequestDurations {
    /// Records per bucket, by operation slot.
    pub buckets: [[OwnedCounter; REQUEST_BUCKETS]; OP_SLOTS],
    /// Sum of the durations in nanoseconds, by operation slot.
    pub sum_ns: [OwnedCounter; OP_SLOTS],
}

impl Default for RequestDurations {
    fn default() -> Self {
        RequestDurations {
            buckets: std::array::from_fn(|_| std::array::from_fn(|_| OwnedCounter::default())),
            sum_ns: std::array::from_fn(|_| OwnedCounter::default()),
        }
    }
}

impl RequestDurations {
    /// Records one request of operation `slot` that took `nanos`: only the
    /// owning shard calls this.
    #[inline]
    pub fn record(&self, slot: usize, nanos: u64) {
        let slot = slot.min(OP_SLOTS - 1);
        self.buckets[slot][request_bucket_of(nanos)].add(1);
        self.sum_ns[slot].add(nanos);
    }

    /// Operation `slot`'s bucket counts (not cumulative) and sum in
    /// nanoseconds.
    pub fn read(&self, slot: usize) -> ([u64; REQUEST_BUCKETS], u64) {
        let slot = slot.min(OP_SLOTS - 1);
        (
            std::array::from_fn(|i| self.buckets[slot][i].get()),
            self.sum_ns[slot].get(),
        )
    }
}

/// A shard's event loop, as the metrics see it (one writer, the shard).
#[derive(Debug, Default)]
pub struct LoopStats {
    /// Turns of the loop.
    pub turns: OwnedCounter,
    /// Turns whose wait returned io events.
    pub turns_with_events: OwnedCounter,
    /// Nanoseconds spent outside the wait: serving.
    pub busy_ns: OwnedCounter,
    /// Messages taken from other shards' rings.
    pub ring_received: OwnedCounter,
    /// Messages put on rings to other shards.
    pub ring_sent: OwnedCounter,
}

/// A shard's write-ahead log, as the metrics see it (one writer, the
/// shard; `metrics/log_metrics.rs` renders it).
#[derive(Debug, Default)]
pub struct LogStats {
    /// Bytes appended.
    pub bytes: OwnedCounter,
    /// Commits appended.
    pub commits: OwnedCounter,
    /// Syncs done.
    pub syncs: OwnedCounter,
    /// Syncs by duration bucket ([`request_bucket_of`]).
    pub sync_buckets: [OwnedCounter; REQUEST_BUCKETS],
    /// Nanoseconds all syncs took.
    pub sync_ns: OwnedCounter,
    /// Writes or syncs that failed.
    pub failures: OwnedCounter,
    /// 1 while a write failed and no retry has written its records yet.
    pub failing: OwnedCounter,
    /// Nanoseconds the start's replay of this shard's log took.
    pub replay_ns: OwnedCounter,
}

impl LogStats {
    /// Records one sync that took `nanos`.
    pub fn synced(&self, nanos: u64) {
        self.syncs.add(1);
        self.sync_buckets[request_bucket_of(nanos)].add(1);
        self.sync_ns.add(nanos);
    }
}

/// One shard's counters and published state.
#[derive(Debug)]
pub struct ShardStats {
    /// Requests decoded, by operation slot ([`op_slot`]).
    pub requests: [OwnedCounter; OP_SLOTS],
    /// Connections this shard has open now.
    pub connections: OwnedCounter,
    /// Connections accepted since start.
    pub accepted: OwnedCounter,
    /// Connections refused (over the limit, or out of descriptors) since
    /// start.
    pub refused: OwnedCounter,
    /// Times accepting failed for lack of descriptors or memory.
    pub accept_failures: OwnedCounter,
    /// Connections closed for bad input (framing, HELLO, timeouts).
    pub closed_bad_input: OwnedCounter,
    /// Connections closed before HELLO to make room for a new one
    /// (`--max-connections-before-hello`).
    pub before_hello_evicted: OwnedCounter,
    /// Connections their transport refused, by
    /// [`Refusal`](super::transport::Refusal).
    pub transport_refused: [OwnedCounter; 3],
    /// Connections closed because their session timeout ran out (silent).
    pub timed_out: OwnedCounter,
    /// Reply bytes queued and not yet written, published each loop turn.
    pub unsent_bytes: CachePadded<OwnedCounter>,
    /// The SQS door's calls.
    pub sqs: SqsStats,
    /// Error codes returned, by [`error_slot`]: whole-request errors and
    /// each refused entry of a batch.
    pub errors: [OwnedCounter; ERROR_SLOTS],
    /// How long requests took, by operation slot.
    pub durations: RequestDurations,
    /// The shard's event loop.
    pub event_loop: LoopStats,
    /// The shard's write-ahead log.
    pub log: LogStats,
    /// The scrape generation last published (see [`ServerState::begin_scrape`]).
    pub published_generation: AtomicU64,
    /// This shard's per-queue counters, replaced wholesale.
    pub(crate) queues: Mutex<Vec<QueueSnapshot>>,
}

/// One queue as a shard publishes it for the metrics: its counters and its
/// groups with a message in flight.
pub type QueueSnapshot = (QueueName, QueueStats, u64);

impl ShardStats {
    pub(crate) fn new() -> ShardStats {
        ShardStats {
            requests: std::array::from_fn(|_| OwnedCounter::default()),
            connections: OwnedCounter::default(),
            accepted: OwnedCounter::default(),
            refused: OwnedCounter::default(),
            accept_failures: OwnedCounter::default(),
            closed_bad_input: OwnedCounter::default(),
            before_hello_evicted: OwnedCounter::default(),
            transport_refused: std::array::from_fn(|_| OwnedCounter::default()),
            timed_out: OwnedCounter::default(),
            unsent_bytes: CachePadded::new(OwnedCounter::default()),
            sqs: SqsStats::default(),
            errors: std::array::from_fn(|_| OwnedCounter::default()),
            durations: RequestDurations::default(),
            event_loop: LoopStats::default(),
            log: LogStats::default(),
            published_generation: AtomicU64::new(0),
            queues: Mutex::new(Vec::new()),
        }
    }

    /// Replaces the queue snapshot unless the metrics thread holds it now
    /// (then the next turn does).
    pub fn publish_queues(&self, snapshot: Vec<QueueSnapshot>, generation: u64) -> bool {
        match self.queues.try_lock() {
            Some(mut q) => {
                *q = snapshot;
                drop(q);
                self.published_generation.fetch_max(generation, Release);
                true
            }
            None => false,
        }
    }
}

/// Readers of one shard's lease histograms.
#[derive(Debug, Clone)]
pub struct LeaseReaders {
    /// Lease hold time, by outcome: deleted, released, expired, abandoned.
    pub hold: [HistogramReader; OUTCOMES],
    /// Lease end to receivable again.
    pub lateness: HistogramReader,
}

/// The index of an outcome in [`LeaseReaders::hold`].
pub fn outcome_slot(outcome: LeaseOutcome) -> usize {
    match outcome {
        LeaseOutcome::Deleted => 0,
        LeaseOutcome::Released => 1,
        LeaseOutcome::Expired => 2,
        LeaseOutcome::Abandoned => 3,
    }
}

/// How many ways a lease can end ([`LeaseOutcome`]).
pub const OUTCOMES: usize = 4;

/// Label values of [`LeaseReaders::hold`], in order.
pub const OUTCOME_NAMES: [&str; OUTCOMES] = ["deleted", "released", "expired", "abandoned"];

/// One shard as the others see it.
#[derive(Debug)]
pub struct ShardView {
    /// Wakes the shard's driver.
    pub waker: Arc<Waker>,
    /// Its counters.
    pub stats: ShardStats,
    /// Its lease histograms.
    pub lease: LeaseReaders,
    /// The engine time of its last poll (see the ground rules).
    pub clock_seen_ns: AtomicU64,
}

/// Everything shared, behind one `Arc`.
#[derive(Debug)]
pub struct ServerState {
    /// The configuration.
    pub config: Config,
    /// The engine's queue registry.
    pub registry: Arc<Registry>,
    /// The io backend every shard runs on.
    pub backend: Backend,
    /// Why io_uring was not used when it was asked for (`--io auto`) and the
    /// server fell back to epoll; `None` when it did not fall back.
    pub io_fallback: Option<String>,
    /// The client listener's address.
    pub local_addr: SocketAddr,
    /// When the server started (`clock::now_ns`).
    pub started_ns: u64,
    /// Connections admitted, all shards (see the ground rules).
    pub connections: CachePadded<AtomicU32>,
    /// Of those, connections not yet past a successful HELLO.
    pub before_hello: CachePadded<AtomicU32>,
    /// Failed HELLOs by address.
    pub auth: Mutex<AuthGuard>,
    /// Set when shutdown begins.
    pub shutdown: AtomicBool,
    /// Shards that have not closed all their connections yet.
    pub shards_running: AtomicUsize,
    /// Bumped by a scrape that wants fresh queue snapshots.
    pub scrape_generation: AtomicU64,
    /// The shards, by index.
    pub shards: Box<[ShardView]>,
    /// The engine's clock (`--clock`).
    pub clock: Clock,
    /// The SQS door, when it is open (one for every shard: its request ids
    /// never repeat).
    pub sqs_door: Option<sluice_sqs::Door>,
}

impl ServerState {
    /// Builds the shared state for shards woken through `wakers`.
    pub fn new(
        config: Config,
        registry: Arc<Registry>,
        backend: Backend,
        io_fallback: Option<String>,
        local_addr: SocketAddr,
        shards: Vec<(Arc<Waker>, LeaseReaders)>,
        clock: Clock,
    ) -> ServerState {
        let n = shards.len();
        let sqs_door = config.sqs.as_ref().map(|sqs| {
            sluice_sqs::Door::new(sluice_sqs::DoorConfig {
                account: sqs.account.clone(),
                limits: sqs.limits,
                credentials: sqs.credentials.as_ref().map(|(_, c)| c.clone()),
                tls: config.tls.is_some(),
                ..sluice_sqs::DoorConfig::default()
            })
        });
        ServerState {
            sqs_door,
            clock,
            config,
            registry,
            backend,
            io_fallback,
            local_addr,
            started_ns: clock::now_ns(),
            connections: CachePadded::new(AtomicU32::new(0)),
            before_hello: CachePadded::new(AtomicU32::new(0)),
            auth: Mutex::new(AuthGuard::default()),
            shutdown: AtomicBool::new(false),
            shards_running: AtomicUsize::new(n),
            scrape_generation: AtomicU64::new(0),
            shards: shards
                .into_iter()
                .map(|(waker, lease)| ShardView {
                    waker,
                    stats: ShardStats::new(),
                    lease,
                    clock_seen_ns: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// Starts the graceful shutdown (idempotent).
    pub fn begin_shutdown(&self) {
        if !self.shutdown.swap(true, AcqRel) {
            self.wake_all();
        }
    }

    /// Whether shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Acquire)
    }

    /// Wakes every shard.
    pub fn wake_all(&self) {
        for s in &*self.shards {
            s.waker.wake();
        }
    }

    /// Moves a manual clock forward by `by_ms` and wakes every shard, so each
    /// fires what came due (a waiting receive whose wait is over is
    /// answered); returns the manual time since the start (ms) and the time
    /// now.
    ///
    /// # Errors
    /// [`NotManual`] when the server runs on the real clock: nothing
    /// changes.
    pub fn advance_clock(&self, by_ms: u64) -> Result<(u64, EngineTime), NotManual> {
        let moved = self.clock.advance(by_ms)?;
        self.wake_all();
        Ok(moved)
    }

    /// Whether every shard has polled its engine at `engine_ns` or later (or
    /// the server is shutting down, when shards stop polling).
    pub fn clock_caught_up(&self, engine_ns: u64) -> bool {
        self.shutting_down()
            || self
                .shards
                .iter()
                .all(|s| s.clock_seen_ns.load(Acquire) >= engine_ns)
    }

    /// Waits (at most `patience`) until [`Self::clock_caught_up`] with
    /// `engine_ns`; whether it did.
    pub fn wait_clock(&self, engine_ns: u64, patience: Duration) -> bool {
        let deadline = clock::now_ns().saturating_add(clock::nanos(patience));
        loop {
            if self.clock_caught_up(engine_ns) {
                return true;
            }
            if clock::now_ns() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_micros(100));
        }
    }

    /// Tries to admit one more connection against `--max-connections`.
    pub fn admit_connection(&self) -> bool {
        let before = self.connections.fetch_add(1, AcqRel);
        if before >= self.config.connections_max {
            self.connections.fetch_sub(1, AcqRel);
            return false;
        }
        true
    }

    /// A connection admitted by [`admit_connection`](Self::admit_connection)
    /// closed.
    pub fn release_connection(&self) {
        self.connections.fetch_sub(1, AcqRel);
    }

    /// Tries to count one more connection before HELLO against
    /// `--max-connections-before-hello`.
    pub fn admit_before_hello(&self) -> bool {
        let before = self.before_hello.fetch_add(1, AcqRel);
        if before >= self.config.connections_before_hello_max {
            self.before_hello.fetch_sub(1, AcqRel);
            return false;
        }
        true
    }

    /// A connection counted by
    /// [`admit_before_hello`](Self::admit_before_hello) said HELLO or
    /// closed.
    pub fn past_hello(&self) {
        self.before_hello.fetch_sub(1, AcqRel);
    }

    /// Unsent reply bytes of every shard, as last published.
    pub fn unsent_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.stats.unsent_bytes.get()).sum()
    }

    /// Asks every shard for a fresh queue snapshot; the generation that
    /// [`scraped`](Self::scraped) then waits for.
    pub fn begin_scrape(&self) -> u64 {
        let generation = self.scrape_generation.fetch_add(1, AcqRel) + 1;
        self.wake_all();
        generation
    }

    /// Whether every shard has published its queue snapshot of
    /// `generation` (or a later one).
    pub fn scraped(&self, generation: u64) -> bool {
        self.shards
            .iter()
            .all(|s| s.stats.published_generation.load(Acquire) >= generation)
    }

    /// The per-queue counters and groups in flight, summed over shards, by
    /// name.
    pub fn queue_stats(&self) -> std::collections::BTreeMap<QueueName, (QueueStats, u64)> {
        let mut all = std::collections::BTreeMap::new();
        for s in &*self.shards {
            let q = s.stats.queues.lock();
            for (name, stats, groups) in q.iter() {
                let (sum, groups_sum) = all
                    .entry(name.clone())
                    .or_insert_with(|| (QueueStats::default(), 0));
                sum.merge(stats);
                *groups_sum += groups;
            }
        }
        all
    }

    /// A sum over shards.
    pub fn sum(&self, f: impl Fn(&ShardStats) -> u64) -> u64 {
        self.shards.iter().map(|s| f(&s.stats)).sum()
    }

    /// The SERVER_STATS reply.
    pub fn server_stats(&self) -> ServerStatsReply {
        let mut counters = Vec::with_capacity(16 + OP_SLOTS);
        let mut push = |name: String, value: u64| {
            counters.push(sluice_protocol::Counter { name, value });
        };
        push("connections".into(), self.connections.load(Relaxed).into());
        push("connections_max".into(), self.config.connections_max.into());
        push(
            "connections_before_hello".into(),
            self.before_hello.load(Relaxed).into(),
        );
        push(
            "connections_before_hello_evicted".into(),
            self.sum(|s| s.before_hello_evicted.get()),
        );
        push(
            "connections_accepted".into(),
            self.sum(|s| s.accepted.get()),
        );
        push("connections_refused".into(), self.sum(|s| s.refused.get()));
        push(
            "accept_failures".into(),
            self.sum(|s| s.accept_failures.get()),
        );
        push(
            "connections_closed_bad_input".into(),
            self.sum(|s| s.closed_bad_input.get()),
        );
        for (i, why) in REFUSAL_NAMES.iter().enumerate() {
            push(
                format!("connections_refused_{why}"),
                self.sum(|s| s.transport_refused[i].get()),
            );
        }
        push(
            "connections_timed_out".into(),
            self.sum(|s| s.timed_out.get()),
        );
        push(
            "leases_abandoned".into(),
            self.shards
                .iter()
                .map(|s| {
                    s.lease.hold[outcome_slot(LeaseOutcome::Abandoned)]
                        .snapshot()
                        .count()
                })
                .sum(),
        );
        push("queues".into(), self.registry.list("").len() as u64);
        push("memory_used_bytes".into(), self.registry.memory().used());
        push("memory_max_bytes".into(), self.registry.memory().limit());
        push("unsent_bytes".into(), self.unsent_bytes());
        push(
            "uptime_ms".into(),
            clock::now_ns().saturating_sub(self.started_ns) / 1_000_000,
        );
        let mut total = 0;
        for slot in 0..OP_SLOTS {
            let n = self.sum(|s| s.requests[slot].get());
            total += n;
            push(format!("requests_{}", op_slot_name(slot)), n);
        }
        push("requests".into(), total);
        ServerStatsReply {
            server_version: server_version(),
            io_backend: self.backend.to_string(),
            shards: u16::try_from(self.shards.len()).unwrap_or(u16::MAX),
            counters,
        }
    }
}

/// The server's version string, as HELLO and SERVER_STATS give it.
pub fn server_version() -> String {
    format!("sluice {}", env!("CARGO_PKG_VERSION"))
}

// ----- the SQS door's counters ---------------------------------------------------

/// Slots of [`SqsStats`]: one per SQS action, `Unknown` last.
pub const SQS_ACTION_SLOTS: usize = Action::ALL.len();

/// A shard's counters of the SQS door (one writer: the shard).
#[derive(Debug)]
pub struct SqsStats {
    /// Calls answered, by action ([`Action::ALL`] order).
    pub requests: [OwnedCounter; SQS_ACTION_SLOTS],
    /// Calls answered with an SQS error, by action.
    pub errors: [OwnedCounter; SQS_ACTION_SLOTS],
    /// Deletes with the receipt handle of an older delivery, which succeed
    /// without deleting (SQS's rule).
    pub stale_deletes: OwnedCounter,
}

impl Default for SqsStats {
    fn default() -> Self {
        SqsStats {
            requests: std::array::from_fn(|_| OwnedCounter::default()),
            errors: std::array::from_fn(|_| OwnedCounter::default()),
            stale_deletes: OwnedCounter::default(),
        }
    }
}

impl SqsStats {
    /// Counts the call of `action` answered with `response`.
    pub fn count(&self, action: Action, response: &Response) {
        let slot = Action::ALL
            .iter()
            .position(|&a| a == action)
            .unwrap_or(SQS_ACTION_SLOTS - 1);
        self.requests[slot].add(1);
        if response.error.is_some() {
            self.errors[slot].add(1);
        }
        self.stale_deletes.add(u64::from(response.stale_deletes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_slots_name_every_request() {
        assert_eq!(op_slot_name(op_slot(opcode::SEND)), "send");
        assert_eq!(op_slot_name(op_slot(opcode::SERVER_STATS)), "server_stats");
        assert_eq!(op_slot(0x7e), OP_SLOTS - 1);
        assert_eq!(op_slot_name(OP_SLOTS - 1), "unknown");
    }

    #[test]
    fn error_slots_name_every_code() {
        assert_eq!(error_slot_name(error_slot(ErrorCode::Busy)), "busy");
        assert_eq!(
            error_slot_name(error_slot(ErrorCode::QueueNotFound)),
            "queue_not_found"
        );
        let names: std::collections::HashSet<String> =
            (0..ERROR_SLOTS).map(error_slot_name).collect();
        assert_eq!(names.len(), ERROR_SLOTS, "{names:?}");
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
    }

    #[test]
    fn request_durations_land_in_their_operation_and_bucket() {
        let d = RequestDurations::default();
        let send = op_slot(opcode::SEND);
        d.record(send, 1_500);
        d.record(send, 500);
        d.record(OP_SLOTS + 5, u64::MAX / 2);
        let (buckets, sum) = d.read(send);
        assert_eq!((buckets[0], buckets[1], sum), (1, 1, 2_000));
        let (unknown, _) = d.read(OP_SLOTS - 1);
        assert_eq!(
            unknown[REQUEST_BUCKETS - 1],
            1,
            "out of range: the last slot"
        );
    }

    #[test]
    fn owned_counters_add_and_set() {
        let c = OwnedCounter::default();
        c.add(2);
        c.add(3);
        assert_eq!(c.get(), 5);
        c.set(1);
        assert_eq!(c.get(), 1);
    }
}
