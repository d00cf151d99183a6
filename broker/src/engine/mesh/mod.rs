//! The lock-free plumbing between shards: the only place where shards share
//! memory on the request path.
//!
//! | file | what it holds |
//! |---|---|
//! | `ring.rs` | the bounded single-producer single-consumer ring (one per ordered pair of shards), its `unsafe` slot access and its loom models |
//! | `doorbell.rs` | a shard's wake-up flag and the mesh of rings (`ShardLinks`) that rings it, with its loom models |
//! | `shard_msg.rs` | what travels on the rings: [`ShardMsg`] and its parts |
//!
//! Each file opens with its ground rules: who owns what, and which Acquire
//! pairs with which Release.

pub mod doorbell;
#[allow(unsafe_code)]
pub mod ring;
pub mod shard_msg;

pub use shard_msg::ShardMsg;
