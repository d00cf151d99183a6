//! Arbitrary bytes as a write-ahead log, as they are and with their frames'
//! checksums fixed; see `sluice_broker::wal::fuzz_harness`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_broker::wal::fuzz_harness::scan(data));
