//! Every limit of the server in one place: the bounds and defaults of its
//! flags, the back-pressure and shutdown timings of a connection, and the
//! sizes of what it allocates per shard, with compile-time checks that tie
//! them to the protocol's limits and the engine's. Units last in names.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use sluice_protocol::limits;

pub(crate) const KIB: u64 = 1 << 10;
pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const GIB: u64 = 1 << 30;
pub(crate) const TIB: u64 = 1 << 40;

/// Default client listen address.
pub const LISTEN_DEFAULT: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7171));
/// Default metrics listen address.
pub const METRICS_ADDR_DEFAULT: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7172));
/// Default address of the SQS door (the port SQS emulators use).
pub const SQS_LISTEN_DEFAULT: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9324));
/// Time for an SQS request to arrive whole once its first byte did, at
/// most (`--frame-timeout` when shorter).
pub const SQS_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a keep-alive SQS connection may wait for its next request.
pub const SQS_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest SQS request body: a batch of SQS's 1 MiB of messages, JSON
/// escapes and attributes included.
pub const SQS_BODY_BYTES_MAX: usize = 4 * MIB as usize;
/// Most shards (threads) a server runs: the bound of `--shards`. The
/// engine's own bound, [`crate::engine::limits::SHARDS_MAX`], is what a
/// registry and its mesh take, and is larger.
pub const SERVER_SHARDS_MAX: u16 = 64;
/// Default for `--max-connections`: the io layer's default, declared there
/// (a driver configured with no limit of its own admits as many).
pub use crate::io::limits::CONNECTIONS_MAX_DEFAULT;
/// Upper bound for `--max-connections`.
pub const CONNECTIONS_MAX_LIMIT: u32 = 1_000_000;
/// Default for `--max-connections-before-hello` (capped at
/// `--max-connections`): a client says HELLO within a round trip of its
/// connect, so this many at once is a burst of reconnects, not a steady
/// state, and the other 9,000 of the default 10,000 stay for clients that
/// did.
pub const CONNECTIONS_BEFORE_HELLO_MAX_DEFAULT: u32 = 1_000;
/// Failed HELLOs from one address answered at once; the ones after wait
/// (`auth_guard.rs`).
pub const AUTH_FREE_FAILURES: u32 = 5;
/// An address's failures are forgotten this long after its last one.
pub const AUTH_FAILURE_WINDOW_NS: u64 = 60_000_000_000;
/// The wait before the first delayed `Unauthorized`; it doubles with each
/// failure after.
pub const AUTH_DELAY_BASE_NS: u64 = 100_000_000;
/// The longest wait before an `Unauthorized`.
pub const AUTH_DELAY_MAX_NS: u64 = 2_000_000_000;
/// At most one log line about failed HELLOs per this interval, for the
/// whole server; the line counts those left out.
pub const AUTH_FAILURE_LOG_INTERVAL_NS: u64 = 1_000_000_000;
/// Addresses whose failures are tracked at once.
pub const AUTH_TRACKED_ADDRESSES_MAX: usize = 4096;
/// An auth token shorter than this is warned about at start.
pub const AUTH_TOKEN_BYTES_WARN_BELOW: usize = 16;
/// Default for `--snapshot-keep`: `PATH.loaded-MS` files kept.
pub const SNAPSHOT_KEEP_DEFAULT: u32 = 3;
/// Upper bound for `--snapshot-keep`.
pub const SNAPSHOT_KEEP_MAX: u32 = 1_000;
/// Default for `--log-sync-interval` (Redis's `appendfsync everysec` is
/// ten times longer).
pub const LOG_SYNC_INTERVAL_DEFAULT: Duration = Duration::from_millis(100);
/// Lower bound for `--log-sync-interval`.
pub const LOG_SYNC_INTERVAL_MIN: Duration = Duration::from_millis(1);
/// Upper bound for `--log-sync-interval`.
pub const LOG_SYNC_INTERVAL_MAX: Duration = Duration::from_secs(10);
/// Lower bound for `--frame-bytes-max`.
pub const FRAME_BYTES_MAX_MIN: u32 = 4 * KIB as u32;
/// Lower bound for `--hello-frame-bytes-max`: room for the largest auth
/// token and the rest of a HELLO.
pub const HELLO_FRAME_BYTES_MAX_MIN: u32 = 2 * KIB as u32;
/// Default for `--hello-timeout`: time from accept to a successful HELLO.
pub const HELLO_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Default for `--frame-timeout`: time to finish a frame once begun.
pub const FRAME_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Bounds of `--hello-timeout` and `--frame-timeout`.
pub const TIMEOUT_MIN: Duration = Duration::from_millis(10);
/// Upper bound of `--hello-timeout` and `--frame-timeout`.
pub const TIMEOUT_MAX: Duration = Duration::from_secs(3600);
/// Default for `--requests-in-flight-max` (per connection).
pub const REQUESTS_IN_FLIGHT_MAX_DEFAULT: u32 = 1024;
/// Upper bound for `--requests-in-flight-max`.
pub const REQUESTS_IN_FLIGHT_MAX_LIMIT: u32 = 65_536;
/// Default for `--unsent-bytes-max` (per connection).
pub const UNSENT_BYTES_MAX_DEFAULT: u64 = 4 * MIB;
/// Upper bound for `--unsent-bytes-max`.
pub const UNSENT_BYTES_MAX_LIMIT: u64 = GIB;
/// Default for `--unsent-bytes-total-max` (all connections together).
pub const UNSENT_BYTES_TOTAL_MAX_DEFAULT: u64 = 256 * MIB;
/// Upper bound for `--unsent-bytes-total-max`.
pub const UNSENT_BYTES_TOTAL_MAX_LIMIT: u64 = TIB;
/// Lower bound for `--memory-max`.
pub const MEMORY_MAX_MIN: u64 = MIB;
/// Upper bound for `--memory-max` (1 PiB).
pub const MEMORY_MAX_LIMIT: u64 = 1024 * TIB;
/// `--memory-max` when neither a cgroup limit nor physical memory could be
/// read (not Linux).
pub const MEMORY_MAX_FALLBACK: u64 = GIB;
/// Default for `--queues-max`.
pub const QUEUES_MAX_DEFAULT: u32 = crate::engine::limits::QUEUES_MAX_DEFAULT as u32;
/// Upper bound for `--queues-max`.
pub const QUEUES_MAX_LIMIT: u32 = 1_000_000;
/// Default for `--log`.
pub const LOG_DEFAULT: &str = "info";
/// Default for `--shutdown-timeout`.
pub const SHUTDOWN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Upper bound for `--shutdown-timeout`.
pub const SHUTDOWN_TIMEOUT_MAX: Duration = Duration::from_secs(3600);
/// Default for `--idle-spin`: how long a shard polls without sleeping
/// after its last work.
pub const IDLE_SPIN_DEFAULT: Duration = Duration::ZERO;
/// Upper bound for `--idle-spin`.
pub const IDLE_SPIN_MAX: Duration = Duration::from_millis(10);
/// Largest config file read.
pub const CONFIG_FILE_BYTES_MAX: u64 = MIB;

const _: () = assert!(FRAME_BYTES_MAX_MIN <= limits::FRAME_BYTES_MAX_DEFAULT);
const _: () = assert!(limits::FRAME_BYTES_MAX_DEFAULT <= limits::FRAME_BYTES_MAX_LIMIT);
const _: () = assert!(HELLO_FRAME_BYTES_MAX_MIN <= limits::FRAME_BYTES_MAX_BEFORE_HELLO);
const _: () = assert!(HELLO_FRAME_BYTES_MAX_MIN <= FRAME_BYTES_MAX_MIN);
const _: () = assert!(
    HELLO_FRAME_BYTES_MAX_MIN as usize
        >= limits::AUTH_TOKEN_BYTES_MAX + limits::FRAME_RESERVED_BYTES as usize
);
const _: () = assert!(UNSENT_BYTES_MAX_DEFAULT >= limits::FRAME_BYTES_MAX_DEFAULT as u64);
const _: () = assert!(UNSENT_BYTES_MAX_LIMIT >= limits::FRAME_BYTES_MAX_LIMIT as u64);
const _: () = assert!(UNSENT_BYTES_TOTAL_MAX_DEFAULT >= UNSENT_BYTES_MAX_DEFAULT);
const _: () = assert!(UNSENT_BYTES_TOTAL_MAX_LIMIT >= UNSENT_BYTES_MAX_LIMIT);
const _: () = assert!(MEMORY_MAX_MIN <= MEMORY_MAX_FALLBACK);
/// Most CPUs a `--cpus` list may name (the kernel's `cpu_set_t` size).
pub const CPU_INDEX_LIMIT: usize = 1024;

// ----- a connection: deadlines the session keeps --------------------------------

/// While shutting down, a connection with nothing in flight is closed once
/// no bytes have arrived for this long: requests the client had already
/// sent are read and answered (`ShuttingDown`) rather than left unread in
/// the socket, and its last replies are not cut off by a reset.
pub const DRAIN_QUIET_NS: u64 = 100_000_000;
/// Time a closing connection has to take its last replies (on a TLS port,
/// to finish the handshake a refusal waits for) before it is
/// closed at once (a peer that never reads would hold it forever).
pub const CLOSE_FLUSH_TIMEOUT_NS: u64 = 5_000_000_000;
/// Leases a connection keeps bound (RECEIVE with the bind flag) at most;
/// past it the older half loses its binding. About 56 bytes each, so at
/// most about 1 MiB per connection, below its unsent-reply allowance.
pub const BOUND_LEASES_MAX: usize = 16_384;

// ----- a shard's loop -------------------------------------------------------------

/// Longest wait while the engine holds messages for a full ring.
pub const OUTBOUND_RETRY: Duration = Duration::from_micros(200);
/// Longest wait while a connection is paused on unsent bytes (the driver
/// reports no event when a send completes).
pub const PAUSED_RECHECK: Duration = Duration::from_millis(1);
/// Longest wait while shutting down (to notice the other shards finish).
pub const DRAIN_RECHECK: Duration = Duration::from_millis(10);
/// Lower bound of the housekeeping tick (a quarter of the shortest
/// connection timeout, within these bounds).
pub const HOUSEKEEPING_MIN_NS: u64 = 5_000_000;
/// Upper bound of the housekeeping tick.
pub const HOUSEKEEPING_MAX_NS: u64 = 250_000_000;
/// At most one "out of file descriptors" warning per shard per this long;
/// the next one says how many failures it stood for.
pub const ACCEPT_FAILURE_LOG_NS: u64 = 10_000_000_000;
/// A shard publishes its per-queue counters for the metrics when a scrape
/// asks, and at least this often (for a scrape that gave up waiting).
/// Publishing copies every queue's counters: about 0.4 us a queue, 40 ms of
/// the shard's time at 100,000 queues, so it is not done on a short timer.
pub const STATS_PUBLISH_INTERVAL: Duration = Duration::from_secs(60);
/// How long a scrape waits for the shards' fresh queue snapshots before it
/// shows the last ones.
pub const SCRAPE_WAIT: Duration = Duration::from_millis(250);

// ----- the metrics endpoint --------------------------------------------------------

/// Largest HTTP request head the metrics endpoint reads.
pub const METRICS_REQUEST_BYTES_MAX: usize = 8 * 1024;
/// Largest request body the metrics endpoint reads (a GET has none).
pub const METRICS_BODY_BYTES_MAX: usize = 64 * 1024;
/// Time for a request head to arrive, from the accept (a scraper sends it
/// at once).
pub const METRICS_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Time for a whole metrics exchange, accept to the reply's last byte: a
/// scrape of 10,000 queues (about 17 MB) on loopback takes a fraction of a
/// second, and Prometheus's own scrape timeout is 10 s by default.
pub const METRICS_EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// Metrics connections held at once, over all shards (each shard holds its
/// share). Past it the oldest connection still reading its request is
/// closed to make room; a connection arriving while every place is being
/// served is answered 503. Each costs its buffered request head, at most
/// 8 KiB, and no thread.
pub const METRICS_CONNECTIONS_MAX: usize = 1_024;

// ----- what a server sets up ----------------------------------------------------

/// Slots of each ring between two shards.
pub const SHARD_RING_CAPACITY: usize = 1024;
/// Connections a driver accepts beyond `--max-connections` only to refuse
/// them with an error frame.
pub const REFUSED_CONNECTIONS_MAX: u32 = 64;
/// Descriptors a shard holds besides its connections: its listener, its
/// io_uring or epoll instance, its wake-up eventfd and its reserve.
pub const DESCRIPTORS_PER_SHARD: u64 = 4;
/// Descriptors the process holds besides the shards': standard streams, the
/// metrics listener and its connection, the signal thread's, and slack.
pub const DESCRIPTORS_BASE: u64 = 24;

// The engine's registry takes up to this many shards, and the mesh that
// many rings per shard.
const _: () = assert!(SERVER_SHARDS_MAX as usize <= crate::engine::limits::SHARDS_MAX);
const _: () = assert!(SHARD_RING_CAPACITY.is_power_of_two());
const _: () = assert!(SHARD_RING_CAPACITY <= crate::engine::limits::LINK_CAPACITY_MAX);
// The engine declares the default; it fits the server's u32 setting.
const _: () = assert!(crate::engine::limits::QUEUES_MAX_DEFAULT <= u32::MAX as usize);
const _: () = assert!(QUEUES_MAX_LIMIT as usize <= crate::engine::limits::PARTITIONS_MAX);
const _: () = assert!(CLOSE_FLUSH_TIMEOUT_NS > DRAIN_QUIET_NS);
const _: () = assert!(HOUSEKEEPING_MIN_NS <= HOUSEKEEPING_MAX_NS);
const _: () = assert!(AUTH_DELAY_BASE_NS <= AUTH_DELAY_MAX_NS);
const _: () = assert!(METRICS_READ_TIMEOUT.as_nanos() < METRICS_EXCHANGE_TIMEOUT.as_nanos());
const _: () = assert!(CONNECTIONS_BEFORE_HELLO_MAX_DEFAULT <= CONNECTIONS_MAX_DEFAULT);
// The housekeeping tick is a quarter of the shortest connection timeout, so
// even the shortest is checked within a few ticks.
const _: () = assert!(TIMEOUT_MIN.as_nanos() >= 2 * HOUSEKEEPING_MIN_NS as u128);
// Every connection the flags allow, and those refused beyond them, fit the
// io layer's connection table.
const _: () = assert!(
    2 * CONNECTIONS_MAX_LIMIT + REFUSED_CONNECTIONS_MAX <= crate::io::CONNECTION_SLOTS_LIMIT
);
const _: () =
    assert!(REFUSED_CONNECTIONS_MAX == crate::io::limits::REFUSED_CONNECTIONS_MAX_DEFAULT);
