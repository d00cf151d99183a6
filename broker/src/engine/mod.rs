//! The engine: queues, leases, slots, rings and the timing wheel. No sockets,
//! no clock reads: time and randomness are parameters.
//!
//! One [`Shard`] per core owns its partition of every queue and the messages
//! it accepted; queue metadata is shared through the [`Registry`]; shards
//! talk through SPSC rings ([`ShardMsg`]). The server calls
//! [`Shard::submit`], [`Shard::poll`] and [`Shard::drain_completions`];
//! `Cluster` (`cluster.rs`, with the `test-util` feature) drives N shards
//! on one thread, deterministically, for tests.
//!
//! The engine knows no files and starts no threads: a shard writes and
//! reads its snapshot section through the traits of [`section`], which the
//! snapshot module (`crate::snapshot`) implements over its file. Nothing
//! here imports the snapshot, the io layer or the server
//! (`.ci/check-layers`).
//!
//! The engine speaks the protocol's vocabulary ([`ops`]): it takes queue
//! names, SEND batches and receipts as the decoder produced them and hands
//! back the protocol's message types, so the server converts nothing.
//!
//! | file | what it holds |
//! |---|---|
//! | `ops.rs` | the command API: [`Op`] in, [`OpResult`] out |
//! | `error.rs` | [`EngineError`] (a whole operation) and [`EntryError`] (one entry of a batch) |
//! | `limits.rs` | the engine's own limits, tied to the protocol's by compile-time checks |
//! | `shard/` | the shard engine: leases, timers, steals, waiters, fan-out (one file per concept) |
//! | `partition.rs` | one queue's partition on one shard |
//! | `stored_message.rs` | a message as a shard stores it: its 40-byte record and its side-table entries |
//! | `bodies.rs` | message data (body and attributes) in shared chunks, their pieces, reuse and compaction |
//! | `huge_pages.rs` | huge-page advice for the timing wheel's entries (its one `unsafe` call) |
//! | `prefetch.rs` | the hint that a batch will read a cache line soon (its one `unsafe` call) |
//! | `block_deque.rs` | the partitions' ready and age lists, deques in fixed blocks that go back to a pool |
//! | `slab.rs` | slots reused with generations |
//! | `wheel.rs` | the hierarchical timing wheel |
//! | `registry.rs` | queue metadata shared across shards |
//! | `dedup.rs` | dedup windows and key ownership |
//! | `group_members.rs` | where each message of a grouped partition stands in its group, by slot |
//! | `groups.rs` | message groups of one queue: send order and the in-flight lock (FIFO queues), turns (fair queues) |
//! | `memory.rs` | the memory budget |
//! | `receipt_mac.rs` | the receipt MAC: signing and checking receipts |
//! | `random.rs` | the shards' PRNG (backoff jitter) and seed mixing |
//! | `mesh/` | the lock-free plumbing between shards: rings, doorbells, cross-shard messages |
//! | `section.rs` | a snapshot section as the shards see it: [`section::Out`] to write into, [`section::SectionRead`] to read from, [`section::SectionError`]; pure bytes |
//! | `races.rs` | loom models of the lease races (tests only) |
//! | `cluster.rs` | deterministic in-process driver (tests; feature `test-util`) |

mod block_deque;
mod bodies;
// The test harness: compiled for the crate's tests and with `test-util`.
#[cfg(any(test, feature = "test-util"))]
pub mod cluster;
pub mod dedup;
pub mod error;
mod group_members;
mod groups;
mod hashing;
// The one `madvise` call; see the module's docs.
#[allow(unsafe_code)]
mod huge_pages;
pub mod limits;
pub mod memory;
pub mod mesh;
pub mod ops;
mod partition;
// The one prefetch instruction; see the module's docs.
#[allow(unsafe_code)]
mod prefetch;
#[cfg(test)]
mod races;
pub mod random;
pub mod receipt_mac;
pub mod registry;
pub mod section;
pub mod shard;
pub mod slab;
pub mod stored_message;
pub mod wheel;

#[cfg(any(test, feature = "test-util"))]
pub use cluster::Cluster;
pub use error::{EngineError, EntryError};
pub use mesh::ShardMsg;
pub use ops::{LeaseObserver, LeaseOutcome, Op, OpResult};
pub use receipt_mac::ReceiptKey;
pub use registry::{Registry, RegistryChanges, RegistryConfig};
pub use shard::{MessageView, Shard, ShardConfig};
pub use stored_message::MessageState;
