//! Integration tests of the client against a real in-process server.

mod api_async;
mod api_blocking;
mod consumer;
mod heartbeat;
mod kill;
mod pipelining;
mod producer;
mod queue_handle;
mod reconnect;
mod sharded;
mod sharing;
mod tls;
mod util;
