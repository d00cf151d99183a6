//! The write-ahead log beside the in-memory engine (`--durability`): its
//! on-disk form, read and written here; the engine knows no files.
//!
//! Built so far: the frames one group commit appends, and the scan that
//! reads a log back at start-up, cuts a torn end and refuses corruption
//! ([`frame`]); the records inside a frame, which the engine writes and
//! replays as it does its snapshot section (`Shard::log_put`,
//! `Shard::log_gone`, `Shard::replay_log`). The per-shard writers, the
//! engine's emission points and the start-up replay come next; until then
//! no flag turns the log on.

pub mod frame;
pub mod fuzz_harness;
