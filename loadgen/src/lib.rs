//! sluice's load generator: throughput, latency and redelivery workloads
//! against sluice and, for fair side-by-side comparisons, against Redis 7
//! streams, beanstalkd and NATS JetStream through adapters that use each
//! peer's best batch or pipeline path.
//!
//! The pieces, in the order a run uses them:
//! - [`config`]: the validated configuration and every limit;
//! - [`adapter`]: the [`Target`](adapter::Target) / [`Adapter`](adapter::Adapter)
//!   contract and the peers' adapters (see ADAPTERS.md beside this crate);
//! - [`run`]: the producer and consumer threads of a pass;
//! - [`body`], [`schedule`], [`tracker`], [`stats`]: what a message carries,
//!   when it is meant to go out, what became of it, how long it took;
//! - [`report`] and [`slo`]: tables, JSON, `.hgrm`, SVG, objectives;
//!   [`machine`]: what the host and the load generator itself took.
//!
//! [`chaos`] is the fault suite and the soak of `sluice-chaos`: a real
//! `sluice-server` process, faults over real sockets, every message counted.
//!
//! ```
//! use sluice_loadgen::slo::Slo;
//! use sluice_loadgen::stats::{Percentiles, new_histogram};
//!
//! let mut h = new_histogram();
//! for us in 1..=1_000 {
//!     h.record(us).unwrap();
//! }
//! let slo = Slo::parse("p99<2ms,max<=1ms").unwrap();
//! assert!(slo.check(&Percentiles::of(&h)).is_empty());
//! ```

#![forbid(unsafe_code)]

pub mod adapter;
pub mod body;
pub mod chaos;
pub mod config;
pub mod flags;
pub mod machine;
pub mod report;
pub mod run;
pub mod schedule;
pub mod slo;
pub mod stats;
pub mod tracker;
