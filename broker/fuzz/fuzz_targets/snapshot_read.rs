//! Arbitrary bytes as a snapshot file, as they are and with their checksums
//! fixed; see `sluice_broker::snapshot::fuzz_harness`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_broker::snapshot::fuzz_harness::load(data));
