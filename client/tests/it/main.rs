//! Integration tests of the client against a real in-process server.

mod addresses;
#[cfg(feature = "async")]
mod api_async;
mod api_blocking;
#[cfg(feature = "async")]
mod consumer;
#[cfg(feature = "async")]
mod heartbeat;
#[cfg(feature = "async")]
mod kill;
mod listing;
#[cfg(feature = "async")]
mod pipelining;
#[cfg(feature = "async")]
mod producer;
mod queue_handle;
#[cfg(feature = "async")]
mod reconnect;
#[cfg(feature = "async")]
mod sharded;
mod sharing;
#[cfg(feature = "async")]
mod tls;
mod util;
