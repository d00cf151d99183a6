//! The native sluice client.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![doc(test(attr(deny(warnings))))]

mod async_client;
mod blocking;
pub mod config;
pub mod consumer;
mod error;
mod ops;
mod pending;
pub mod producer;

pub use async_client::AsyncClient;
pub use blocking::Client;
pub use config::{ClientConfig, ReconnectPolicy};
pub use error::{Error, Result};
pub use ops::{ReceiveOptions, RedriveOutcome};
pub use sluice_protocol::{
    AttributeUpdate, Backoff, ErrorCode, HelloReply, MessageAttributes, MessageId, PeekedMessage,
    QueueAttributes, QueueInfo, QueueStats, Receipt, ReceivedMessage, RedrivePolicy, Reply,
    Request, SendEntry, SendOutcome, ServerLimits, ServerStatsReply,
};
