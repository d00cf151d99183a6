//! The native sluice client: a blocking [`Client`] and an async (tokio)
//! [`AsyncClient`], a [`Consumer`](consumer::Consumer) that runs handlers
//! while keeping their leases, and a batching
//! [`Producer`](producer::Producer). The `sluice` command line (package
//! `sluice-cli`) is built on the blocking client.
//!
//! Both clients keep one connection and pipeline every request on it: any
//! number of threads or tasks can share a client (clones are cheap), and a
//! receive that long-polls does not hold up the replies behind it. Neither
//! has a thread of its own: a blocking caller whose request is the only one
//! in flight reads its own reply on its own thread, and with several
//! waiting one of them reads for all and hands the others their replies;
//! requests that threads send at the same moment go out in one write. The
//! blocking client can also keep several requests in flight from one
//! thread (`Client::start_send_batch`, `start_receive`, ...), and spin
//! briefly before sleeping on the socket
//! ([`ClientConfig::read_spin`](config::ClientConfig::read_spin), off by
//! default). Every
//! operation of the broker has a typed method; batches return one result
//! per entry. Errors are an [`Error`] with one variant per protocol error
//! code plus the client's own (`Connect`, `Io`, `Timeout`, `Disconnected`,
//! `Protocol`, `Closed`).
//!
//! **Delivery is at-least-once.** A lease that runs out makes its message
//! visible again; a request in flight when the connection drops fails with a
//! disconnect-class error ([`Error::is_disconnect`]) although it may have
//! taken effect (a send may have been enqueued); the next request
//! reconnects, with exponential backoff after failed attempts. Consumers
//! must be idempotent: see `examples/idempotent_consumer.rs`, and use
//! dedup keys for sends you retry ([`Error::is_retryable`] says which
//! errors are worth a retry).
//!
//! # Features
//!
//! - `blocking` (default): [`Client`], its [`Queue`] handle, the blocking
//!   consumer and producer, the blocking sharded client.
//! - `async` (default): [`AsyncClient`] (tokio), its [`AsyncQueue`] handle
//!   and [`MessageStream`], the async consumer and producer, the async
//!   sharded client.
//! - `tls` (off by default): TLS with rustls, for either client
//!   (`ClientConfig::with_tls`, the `tls` module).
//!
//! # A queue handle
//!
//! `client.queue("orders")` is a cheap handle on one queue ([`Queue`],
//! [`AsyncQueue`]): the client's shared connection and the name, with every
//! per-queue operation as a method. Options and attributes are
//! [`Duration`](std::time::Duration)s and counts ([`QueueOptions`],
//! [`ReceiveOptions`], [`SendEntry`]).
//!
//! ```
//! # #[cfg(feature = "blocking")] {
//! use std::time::Duration;
//! use sluice_broker::testing::TestServer;
//! use sluice_client::{Client, ClientConfig, QueueOptions, ReceiveOptions, SendEntry};
//!
//! let server = TestServer::start();
//! let client = Client::connect(ClientConfig::new(server.addr().to_string()))?;
//! let orders = client.queue("orders");
//! orders.create(&QueueOptions::new().visibility_timeout(Duration::from_secs(60)))?;
//! let sent = orders.send("order 42")?;
//! orders.send_entry(SendEntry::new("order 43").dedup_key("order-43"))?;
//! let options = ReceiveOptions::new(10).wait(Duration::from_secs(5));
//! let received = orders.receive(options)?;
//! assert_eq!(received[0].id, sent.id);
//! for message in &received {
//!     // ... handle it, then:
//!     orders.delete(message.receipt)?;
//! }
//! let stats = orders.stats()?;
//! assert_eq!((stats.sent, stats.depth()), (2, 0));
//! # }
//! # Ok::<(), sluice_client::Error>(())
//! ```
//!
//! # The async client and a stream of messages
//!
//! [`AsyncQueue::messages`] receives in batches, long-polling, and yields
//! the messages one at a time: a [`futures_core::Stream`], or call its
//! [`next`](MessageStream::next).
//!
//! ```
//! # #[cfg(not(feature = "async"))]
//! # fn main() {}
//! # #[cfg(feature = "async")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> sluice_client::Result<()> {
//! use std::time::Duration;
//! use sluice_broker::testing::TestServer;
//! use sluice_client::{AsyncClient, ClientConfig, QueueOptions, ReceiveOptions};
//!
//! let server = TestServer::start();
//! let client = AsyncClient::connect(ClientConfig::new(server.addr().to_string())).await?;
//! let events = client.queue("events");
//! events.create(&QueueOptions::new()).await?;
//! for i in 0..3 {
//!     events.send(format!("event {i}")).await?;
//! }
//! let mut stream = events.messages(ReceiveOptions::new(16).wait(Duration::from_secs(1)));
//! for i in 0..3 {
//!     let message = stream.next().await.expect("the stream goes on")?;
//!     assert_eq!(message.body, format!("event {i}"));
//!     events.delete(message.receipt).await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Configuration from the environment or a URL
//!
//! [`ClientConfig::from_env`] reads `SLUICE_ADDR`, `SLUICE_TOKEN_FILE`,
//! `SLUICE_REQUEST_TIMEOUT` and the others of [`config::env`];
//! [`ClientConfig::from_url`] (and `str::parse`) reads
//! `sluice://HOST:PORT`.
//!
//! ```
//! # #[cfg(feature = "blocking")] {
//! use std::time::Duration;
//! use sluice_broker::testing::TestServer;
//! use sluice_client::{Client, ClientConfig};
//!
//! let server = TestServer::start();
//! // As a deployment would set them (this example sets them itself).
//! // SAFETY: no other thread of this example reads or writes the environment.
//! unsafe {
//!     std::env::set_var("SLUICE_ADDR", format!("sluice://{}", server.addr()));
//!     std::env::set_var("SLUICE_REQUEST_TIMEOUT", "10s");
//! }
//! let config = ClientConfig::from_env()?;
//! assert_eq!(config.addr(), server.addr().to_string());
//! assert_eq!(config.request_timeout(), Duration::from_secs(10));
//! let client = Client::connect(config)?;
//! client.ping()?;
//!
//! let config: ClientConfig = "sluice://broker-1".parse()?;
//! assert_eq!(config.addr(), "broker-1:7171");
//! # }
//! # Ok::<(), sluice_client::Error>(())
//! ```
//!
//! The parts that need no server run anywhere: configuration, the
//! reconnect schedule, the consumer's lease plan and the errors.
//!
//! ```
//! use std::time::Duration;
//! use sluice_client::consumer::{LeasePlan, LeaseStep};
//! use sluice_client::{ClientConfig, Error, ErrorCode};
//!
//! let config = ClientConfig::default().with_request_timeout(Duration::from_secs(5));
//! assert_eq!(config.addr(), "127.0.0.1:7171");
//! // Backoff after 1, 2, 3 failed connects: 50 ms, 100 ms, 200 ms.
//! let policy = config.reconnect_policy();
//! assert_eq!(policy.delay(3), Duration::from_millis(200));
//!
//! // A consumer renews a 30 s lease when 15 s are left, up to 15 min.
//! let plan = LeasePlan::new(Duration::from_secs(30), Duration::from_secs(900));
//! assert!(matches!(plan.next(Duration::from_secs(30)), LeaseStep::Extend { .. }));
//!
//! let err = Error::from_code(ErrorCode::StaleReceipt, "");
//! assert!(err.is_lease_lost());
//! assert!(err.to_string().starts_with("StaleReceipt: "));
//! ```
//!
//! # Leases bound to the connection
//!
//! A receive may bind its leases to the client's connection
//! ([`ReceiveOptions::bind_leases`]; the [consumers](consumer) do by
//! default): if the connection closes, because the process died or the
//! network dropped it, the server releases those leases at once and
//! another consumer gets the messages, instead of after their visibility
//! timeout. A [session timeout](ClientConfig::session_timeout) makes the
//! server close a connection it has not heard from for that long (the
//! client sends PINGs when it has nothing else to send), which covers a
//! process that hangs whole or a host that vanishes.
//!
//! # Testing with a clock you move
//!
//! Tests of code built on sluice can run a broker in-process on a manual
//! clock: `sluice_broker::testing::TestServer` (a dev-dependency on
//! `sluice-broker` with the `test-util` feature), reached with the ordinary
//! clients. `advance` moves the clock: leases run out, delays end and
//! retention drops messages at once, so "the lease runs out, the message
//! comes back, the fourth failed delivery dead-letters it" takes
//! milliseconds, not minutes. ([`Client::advance_clock`] does the same over
//! the protocol, for a `sluice-server --clock manual` started elsewhere.)
//!
//! ```
//! # #[cfg(feature = "blocking")] {
//! use std::time::Duration;
//! use sluice_broker::testing::TestServer;
//! use sluice_client::{Client, ClientConfig, QueueOptions, ReceiveOptions, RedrivePolicy};
//!
//! let server = TestServer::builder().manual_clock().start();
//! let client = Client::connect(ClientConfig::new(server.addr().to_string()))?;
//! client.create_queue("orders.dlq", &QueueOptions::new())?;
//! client.create_queue(
//!     "orders",
//!     &QueueOptions::new()
//!         .visibility_timeout(Duration::from_secs(30))
//!         .redrive(RedrivePolicy::new("orders.dlq", 4)),
//! )?;
//! let sent = client.send("orders", "order 42")?;
//! let now = ReceiveOptions::new(1).wait(Duration::ZERO);
//!
//! // A consumer receives the message and fails: it never deletes it.
//! let first = client.receive("orders", now)?;
//! assert_eq!(first[0].id, sent.id);
//! // Nobody else gets it while its 30 s lease runs...
//! server.advance(Duration::from_secs(29));
//! assert!(client.receive("orders", now)?.is_empty());
//! // ...and when it has run out, it comes back.
//! server.advance(Duration::from_secs(1));
//! let again = client.receive("orders", now)?;
//! assert_eq!((again[0].id, again[0].receive_count), (sent.id, 2));
//!
//! // The third and the fourth delivery fail too...
//! for delivery in 3..=4 {
//!     server.advance(Duration::from_secs(30));
//!     assert_eq!(client.receive("orders", now)?[0].receive_count, delivery);
//! }
//! // ...so when the fourth lease runs out, the message is dead-lettered
//! // instead of delivered a fifth time.
//! server.advance(Duration::from_secs(30));
//! assert!(client.receive("orders", now)?.is_empty());
//! let dead = client.peek("orders.dlq", 10)?;
//! assert_eq!((dead[0].id, dead[0].receive_count), (sent.id, 4));
//! // Two minutes of the broker's time passed; the test did not sleep.
//! # }
//! # Ok::<(), sluice_client::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// The docs are written for the default features; with one of them off,
// links to its items have nothing to point at.
#![cfg_attr(
    not(all(feature = "blocking", feature = "async")),
    allow(rustdoc::broken_intra_doc_links)
)]
#![doc(test(attr(deny(warnings))))]

#[cfg(feature = "async")]
mod async_client;
mod attributes;
#[cfg(feature = "blocking")]
mod blocking;
pub mod config;
pub mod consumer;
mod error;
mod fields;
mod hello;
pub mod limits;
mod listing;
mod message;
mod ops;
mod pending;
mod poison;
pub mod producer;
mod queue;
pub mod sharded;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(not(feature = "tls"))]
#[path = "tls_none.rs"]
mod tls;

#[cfg(feature = "async")]
pub use async_client::AsyncClient;
pub use attributes::{
    AttributeUpdate, Backoff, Millis, QueueAttributes, QueueInfo, QueueKind, QueueOptions,
    QueueStats, RedrivePolicy, Setting,
};
#[cfg(feature = "blocking")]
pub use blocking::{Client, PendingReply};
pub use config::{ClientConfig, ReconnectPolicy};
pub use error::{Error, Result};
#[cfg(feature = "async")]
pub use listing::QueueNameStream;
#[cfg(feature = "blocking")]
pub use listing::QueueNames;
pub use message::SendEntry;
pub use ops::{ClockReading, Peeked, ReceiveOptions, RedriveOutcome};
#[cfg(feature = "blocking")]
pub use queue::Queue;
#[cfg(feature = "async")]
pub use queue::{AsyncQueue, MessageStream};
#[cfg(feature = "async")]
pub use sharded::AsyncShardedClient;
#[cfg(feature = "blocking")]
pub use sharded::ShardedClient;
pub use sluice_protocol::{
    ErrorCode, HelloReply, MessageAttributes, MessageGroupId, MessageId, PeekedMessage, QueueName,
    QueueTimes, Receipt, ReceivedBatch, ReceivedMessage, ReceivedMessageRef, Reply, Request,
    SendEntryRef, SendOutcome, ServerLimits, ServerStatsReply,
};
pub use sluice_protocol::{Labels, LabelsUpdate};

/// README.md's Rust examples, compiled and run as doctests (each runs
/// against in-process brokers in lines the README hides).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}
