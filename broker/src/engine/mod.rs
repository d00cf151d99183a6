//! The engine: queues, leases, slots, rings and the timing wheel. No sockets,
//! no clock reads: time and randomness are parameters.
//!
//! One [`Shard`] per core owns its partition of every queue and the messages
//! it accepted; queue metadata is shared through the [`Registry`]; shards
//! talk through SPSC rings ([`ShardMsg`]). The server calls
//! [`Shard::submit`], [`Shard::poll`] and [`Shard::drain_completions`];
//! [`Cluster`] drives N shards on one thread, deterministically, for tests.
//!
//! | file | concept |
//! |---|---|
//! | `ops.rs` | operations and results (what the server maps to and from the wire) |
//! | `shard/` | the shard engine: leases, timers, steals, waiters, fan-out (one file per concept) |
//! | `partition.rs` | one queue's partition on one shard |
//! | `message.rs` | a stored message and its attributes |
//! | `bodies.rs` | message data in shared chunks, and their compaction |
//! | `slab.rs` | slots reused with generations |
//! | `races.rs` | loom models of the lease races (tests only) |
//! | `registry.rs` | queue metadata shared across shards |
//! | `dedup.rs` | dedup windows and key ownership |
//! | `memory.rs` | the memory budget |
//! | `check.rs` | the receipt MAC |
//! | `msg.rs` | cross-shard messages |
//! | `cluster.rs` | deterministic in-process driver |

mod bodies;
pub mod check;
pub mod cluster;
pub mod dedup;
pub mod memory;
pub mod message;
pub mod msg;
pub mod ops;
mod partition;
#[cfg(test)]
mod races;
pub mod random;
pub mod registry;
pub mod shard;
pub mod slab;

pub mod doorbell;
#[allow(unsafe_code)]
pub mod ring;
pub mod wheel;

pub use check::ReceiptKey;
pub use cluster::Cluster;
pub use message::{MessageAttributes, MessageState};
pub use msg::ShardMsg;
pub use ops::{
    LeaseObserver, LeaseOutcome, Op, OpResult, PeekedMessage, QueueInfo, ReceivedMessage,
    SendEntry, SendOk, VisibilityChange,
};
pub use registry::{Registry, RegistryConfig};
pub use shard::{MessageView, Shard, ShardConfig};
