//! The sluice broker: the engine (queues, leases, timing wheel), the io layer
//! and the thread-per-core server.

// `unsafe` lives in few places, each block with a `// SAFETY:` comment
// (`clippy::undocumented_unsafe_blocks` is denied workspace-wide): the
// global allocator's calls into mimalloc (`allocator.rs`), the SPSC
// ring (`engine/mesh/ring.rs`), the huge-page advice for the timing wheel
// (`engine/huge_pages.rs`), the prefetch hint (`engine/prefetch.rs`), the
// io layer's syscalls and buffer rings (`io/sys.rs`, `io/uring/`,
// `io/buf_ring.rs`; `io/sys.rs` also takes the snapshot path's `flock`).
// Everything else is compiled with `unsafe_code` denied.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod allocator;
pub mod engine;
// The loom build (`--cfg sluice_loom`) models the engine's shared memory;
// the io layer and the server are not modelled and stay out of it.
#[cfg(not(sluice_loom))]
pub mod io;
#[cfg(not(sluice_loom))]
pub mod server;
// The simulation is a test harness: built only with `test-util` (the
// integration tests and `sluice-sim` enable it), never into the server.
#[cfg(all(feature = "test-util", not(sluice_loom)))]
pub mod sim;
pub mod snapshot;
mod sync;
#[cfg(all(feature = "test-util", not(sluice_loom)))]
pub mod testing;
pub mod wal;
