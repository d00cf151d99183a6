//! Arbitrary bytes through the frame decoder and every request and reply
//! decoder, re-encoding what decodes; see `sluice_protocol::fuzz_harness`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_protocol::fuzz_harness::decode_all(data));
