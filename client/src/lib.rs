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
//! dedup keys for sends you retry.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_client::{AttributeUpdate, Client, ClientConfig, ReceiveOptions};
//!
//! let client = Client::connect(ClientConfig::new("127.0.0.1:7171"))?;
//! client.create_queue("orders", &AttributeUpdate {
//!     visibility_timeout_ms: Some(60_000),
//!     ..AttributeUpdate::default()
//! })?;
//! let sent = client.send("orders", "order 42")?;
//! let options = ReceiveOptions::new(10).wait(Duration::from_secs(5));
//! for message in client.receive("orders", options)? {
//!     assert_eq!(message.id, sent.id);
//!     // ... handle it, then:
//!     client.delete("orders", message.receipt)?;
//! }
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
//! use std::time::Duration;
//! use sluice_broker::testing::TestServer;
//! use sluice_client::{AttributeUpdate, Client, ClientConfig, ReceiveOptions, RedrivePolicy};
//!
//! let server = TestServer::builder().manual_clock().start();
//! let client = Client::connect(ClientConfig::new(server.addr().to_string()))?;
//! client.create_queue("orders.dlq", &AttributeUpdate::default())?;
//! client.create_queue("orders", &AttributeUpdate {
//!     visibility_timeout_ms: Some(30_000),
//!     redrive: Some(RedrivePolicy { dead_letter_queue: "orders.dlq".into(), max_receives: 4 }),
//!     ..AttributeUpdate::default()
//! })?;
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
//! # Ok::<(), sluice_client::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![doc(test(attr(deny(warnings))))]

#[cfg(feature = "async")]
mod async_client;
#[cfg(feature = "blocking")]
mod blocking;
pub mod config;
pub mod consumer;
mod error;
mod hello;
pub mod limits;
mod ops;
mod pending;
pub mod producer;
pub mod sharded;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(not(feature = "tls"))]
#[path = "tls_none.rs"]
mod tls;

#[cfg(feature = "async")]
pub use async_client::AsyncClient;
#[cfg(feature = "blocking")]
pub use blocking::{Client, PendingReply};
pub use config::{ClientConfig, ReconnectPolicy};
pub use error::{Error, Result};
pub use ops::{ClockReading, ReceiveOptions, RedriveOutcome};
#[cfg(feature = "async")]
pub use sharded::AsyncShardedClient;
#[cfg(feature = "blocking")]
pub use sharded::ShardedClient;
pub use sluice_protocol::{
    AttributeUpdate, Backoff, ErrorCode, HelloReply, MessageAttributes, MessageId, PeekedMessage,
    QueueAttributes, QueueInfo, QueueStats, Receipt, ReceivedMessage, RedrivePolicy, Reply,
    Request, SendEntry, SendOutcome, ServerLimits, ServerStatsReply,
};
