//! The write-ahead log beside the in-memory engine (`--durability`): its
//! on-disk form, read and written here; the engine knows no files.
//!
//! - [`frame`]: the frames one group commit appends, and the scan that
//!   reads a log back at start-up, cuts a torn end and refuses corruption;
//! - [`mod@file`]: a log file, opened by reading it back and then appended
//!   to and synced;
//! - [`dir`]: the log folder by generation (checkpoint, registry log,
//!   shard logs), and which files a start keeps;
//! - [`registry`]: queue changes, recorded before the registry makes them
//!   and replayed at start;
//! - [`syncer`]: a shard's thread for its log's syncs under `always`.
//!
//! The records inside a shard's commits are the engine's
//! (`Shard::set_logging`, `Shard::take_log`, `Shard::replay_commits`); the
//! shard loop commits them (`server/shard_loop/log.rs`), the server's
//! start replays them (`server/durable.rs`).

pub mod dir;
pub mod file;
pub mod frame;
pub mod fuzz_harness;
#[cfg(any(test, feature = "test-util"))]
pub mod fuzz_replay;
pub mod registry;
pub mod syncer;
