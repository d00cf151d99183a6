//! The workloads, one file each: pipelined raw frames (`send`, `e2e`,
//! `shards`), one request at a time (`rtt`, and the native clients' PINGs),
//! clients shared by threads and tasks (`client`, `shared`), and TLS next
//! to plain text (`tls`).

pub(crate) mod client;
pub(crate) mod echo;
pub(crate) mod pipelined;
pub(crate) mod rtt;
pub(crate) mod tls;
