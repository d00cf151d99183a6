//! The sluice broker: the engine (queues, leases, timing wheel), the io layer
//! and the thread-per-core server.

pub mod engine;
pub mod io;
pub mod server;
mod sync;
