//! The protocol's integration tests: golden vectors checked against the
//! encoder, the decoder and PROTOCOL.md; property tests; robustness against
//! arbitrary, truncated, mutated and oversized input.

mod alloc;
mod dump;
mod robustness;
mod roundtrip;
mod strategies;
mod vectors;
