//! The server: configuration and metrics, and (to come from the integrator)
//! the shards and connections that use them.

pub mod config;
