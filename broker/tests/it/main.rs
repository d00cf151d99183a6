//! sluice-broker's integration tests, by area: `engine_*` (the engine), `io_*`
//! (the io layer against real sockets), `server_*` (the server end to end over
//! loopback, on both io backends). Engine tests run on the
//! deterministic [`Cluster`](sluice_broker::engine::Cluster) with a virtual
//! clock, on 1 and 2 shards, and check the invariants after every step.

mod engine_util;
mod engine_wal;

mod engine_dead_letter;
mod engine_fair;
mod engine_fifo;
mod engine_fifo_consumers;
mod engine_footprint;
mod engine_leases;
mod engine_long_poll;
mod engine_model;
mod engine_queues;
mod engine_receipts;
mod engine_send;
mod engine_shards;
#[cfg(not(sluice_loom))]
mod engine_snapshot;
// Real threads and std's Arc: nothing for loom to explore.
#[cfg(not(sluice_loom))]
mod engine_stress;

// The io layer and the server are left out of the loom build.
#[cfg(not(sluice_loom))]
mod io_driver;
#[cfg(not(sluice_loom))]
mod io_listeners;

#[cfg(not(sluice_loom))]
mod sim;

#[cfg(not(sluice_loom))]
mod server_util;

#[cfg(not(sluice_loom))]
mod server_auth;
#[cfg(not(sluice_loom))]
mod server_bad_input;
#[cfg(not(sluice_loom))]
mod server_bound_leases;
#[cfg(not(sluice_loom))]
mod server_fifo;
#[cfg(not(sluice_loom))]
mod server_labels;
#[cfg(not(sluice_loom))]
mod server_leases;
mod server_messages;
#[cfg(not(sluice_loom))]
mod server_metrics;
mod server_metrics_http;
#[cfg(not(sluice_loom))]
mod server_ports;
#[cfg(not(sluice_loom))]
mod server_process;
#[cfg(not(sluice_loom))]
mod server_shards;
#[cfg(not(sluice_loom))]
mod server_shutdown;
#[cfg(not(sluice_loom))]
mod server_snapshot;
#[cfg(not(sluice_loom))]
mod server_snapshot_files;
#[cfg(not(sluice_loom))]
mod server_sqs_bad_input;
#[cfg(not(sluice_loom))]
mod server_sqs_clients;
mod server_wal;
#[cfg(not(sluice_loom))]
mod server_wal_disk;

// The files of deploy/ against a real server and the real configuration.
#[cfg(not(sluice_loom))]
mod deploy_files;
