//! Arbitrary bytes as a commit's records, replayed onto a shard with a
//! standard and a FIFO queue; see `sluice_broker::wal::fuzz_replay`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_broker::wal::fuzz_replay::replay(data));
