//! The server: configuration and metrics, and (to come) the shards and
//! connections that use them.

pub mod config;
pub mod metrics;
