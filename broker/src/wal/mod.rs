//! The write-ahead log beside the in-memory engine (`--durability`): its
//! on-disk form, read and written here; the engine knows no files.
//!
//! Built so far: the frames one group commit appends, and the scan that
//! reads a log back at start-up, cuts a torn end and refuses corruption
//! ([`frame`]); a shard's log file, opened by reading it back and then
//! appended to and synced ([`mod@file`]); the records inside a frame, which
//! the engine writes as it serves and replays as it does its snapshot
//! section (`Shard::set_logging`, `Shard::take_log`, `Shard::replay_log`):
//! messages as they arrive and leave, and the dedup keys their sends
//! record; not yet their leases.
//! The shard loop's commits (and replies held until their sync), the
//! checkpoint and the start-up replay come next; until then no flag turns
//! the log on.

pub mod dir;
pub mod file;
pub mod frame;
pub mod fuzz_harness;
#[cfg(any(test, feature = "test-util"))]
pub mod fuzz_replay;
pub mod registry;
