//! Every limit of the engine in one place, with compile-time checks that tie
//! them to the protocol's: the shards a registry takes, the capacities of
//! the rings between them, the timing wheel's resolution and reach, and the
//! sizes the memory budget and the message store work in. Units last in
//! names. The limits users see (queue attributes, batch sizes, name and key
//! lengths) are the protocol's, in `sluice_protocol::limits`; the engine
//! enforces them and restates none.

use sluice_protocol::limits::{FRAME_BYTES_MAX_LIMIT, MESSAGE_ATTRIBUTES_BYTES_MAX};

/// Most shards a registry (and so a mesh) takes. Shard indices travel as
/// `u16` in receipts and ring messages, and per-shard arrays are sized by
/// it.
pub const SHARDS_MAX: usize = 1024;
/// Default maximum number of queues.
pub const QUEUES_MAX_DEFAULT: usize = 10_000;

/// Default capacity of a shard-to-shard link, in messages. Under loom it
/// shrinks to 2 so that a model wraps around after two pushes.
pub const LINK_CAPACITY_DEFAULT: usize = if cfg!(sluice_loom) { 2 } else { 1024 };
/// The largest capacity a link takes: beyond this, a link is a memory sink,
/// not a back-pressure bound.
pub const LINK_CAPACITY_MAX: usize = 1 << 24;
/// Capacity of each ring in the test harness `Cluster` (`cluster.rs`,
/// feature `test-util`): small, so overflow
/// queues are exercised too.
pub const CLUSTER_RING_CAPACITY: usize = 8;

/// One tick of the timing wheel, in nanoseconds: deadlines round up to it.
pub const TICK_NS: u64 = 1_000_000;
/// A wheel list whose capacity exceeds this many timers is freed, not kept
/// for reuse, when its slot expires.
pub const LIST_RETAIN_MAX: usize = 1 << 16;
/// Stale indices (of cancelled timers) a wheel list may hold beyond as many
/// as its live timers: the next insert on a list holding more compacts it.
pub const LIST_STALE_SLACK: usize = 64;

/// Bytes a shard takes from the shared memory budget at a time.
pub const MEMORY_CHUNK_BYTES: u64 = 256 * 1024;
/// Bytes charged per dedup entry beyond its key.
pub const DEDUP_ENTRY_BYTES: u64 = 96;

/// Bytes of one chunk of message data.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// The largest message data (body and attributes) stored in a chunk; a
/// larger one has a chunk of its own.
pub const CHUNKED_BYTES_MAX: usize = CHUNK_BYTES / 8;
/// Reclaimed chunk buffers a shard keeps for its next chunks.
pub const CHUNK_SPARE_MAX: usize = 4;
/// Bytes of one block of a partition's ready or age FIFO.
pub const FIFO_BLOCK_BYTES: usize = 1024;
/// Empty FIFO blocks a shard keeps for its FIFOs to grow into (per kind of
/// FIFO).
pub const FIFO_SPARE_BLOCKS_MAX: usize = 256;
/// Batch-result vectors a shard keeps for reuse, per kind of result.
pub const RESULT_POOL_MAX: usize = 64;
/// Most partitions (queues) a shard holds at once: a message records its
/// partition in 24 bits.
pub const PARTITIONS_MAX: usize = 1 << 24;
/// Queue changes the registry remembers, so that a shard catches up on the
/// last ones alone: one behind by more copies every queue.
pub const REGISTRY_CHANGES_KEPT: usize = 4096;
/// Dead bytes in retired chunks tolerated beyond their live bytes before a
/// compaction pass.
pub const COMPACT_SLACK_BYTES: u64 = 4 * 1024 * 1024;
/// Stale entries tolerated in a partition's FIFO before it is compacted.
pub const FIFO_SLACK: usize = 64;

const NS_PER_MS: u64 = 1_000_000;

const _: () = assert!(SHARDS_MAX <= u16::MAX as usize);
const _: () = assert!(LINK_CAPACITY_DEFAULT.is_power_of_two());
const _: () = assert!(LINK_CAPACITY_MAX.is_power_of_two());
const _: () = assert!(LINK_CAPACITY_DEFAULT <= LINK_CAPACITY_MAX);
const _: () = assert!(CLUSTER_RING_CAPACITY.is_power_of_two());
const _: () = assert!(TICK_NS == NS_PER_MS, "deadlines in ms land on whole ticks");
const _: () = assert!(CHUNKED_BYTES_MAX <= CHUNK_BYTES);
const _: () = assert!(CHUNK_BYTES <= u32::MAX as usize);
// A message records its offset in its chunk in 16 bits, and its data's
// length in 16 bits unless it has a chunk of its own.
const _: () = assert!(CHUNK_BYTES <= 1 << 16);
const _: () = assert!(CHUNKED_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(QUEUES_MAX_DEFAULT <= PARTITIONS_MAX);
// A message's data (up to a frame) has its length stored as a u32.
const _: () = assert!(FRAME_BYTES_MAX_LIMIT as u64 <= u32::MAX as u64);
// A chunk holds at least one message's attributes next to a small body.
const _: () = assert!(MESSAGE_ATTRIBUTES_BYTES_MAX < CHUNKED_BYTES_MAX);
