//! sluice-broker's integration tests, by area. Engine tests run on the
//! deterministic [`Cluster`](sluice_broker::engine::Cluster) with a virtual
//! clock, on 1 and 2 shards, and check the invariants after every step.

mod engine_util;

mod engine_dead_letter;
mod engine_leases;
mod engine_long_poll;
mod engine_model;
mod engine_queues;
mod engine_receipts;
mod engine_send;
mod engine_shards;
mod engine_stress;

mod server_util;

mod server_leases;
