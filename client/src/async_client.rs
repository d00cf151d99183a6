//! The async client (tokio): one pipelined connection shared by every task,
//! with no task hop per request where it can be avoided.
//!
//! `conn.rs` has the ground rules. A task whose request is the only one in
//! flight writes it at once and is woken by the runtime's reactor when its
//! reply arrives, and reads it itself: no task hop. With several in flight,
//! the connection's reader task reads for all (a future that is not polled
//! cannot be trusted to read for others) and wakes each task with its reply,
//! once per read however many replies it brings; frames queue in one buffer
//! that a flusher task writes with one write per wake-up. When the connection ends every request
//! in flight fails with a disconnect-class error, and the next request
//! reconnects, after the reconnect policy's delay when connecting failed
//! before.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_protocol::{
    HelloReply, PeekedMessage, Receipt, ReceivedBatch, ReceivedMessage, Reply, Request,
    SendEntryRef, SendOutcome, ServerStatsReply,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::attributes::{QueueInfo, QueueOptions};
use crate::config::{ClientConfig, ReconnectState};
use crate::error::{Error, Result};
use crate::hello::Handshake;
use crate::message::SendEntry;
use crate::ops::{self, ClockReading, Operation, OutFrame, ReceiveOptions, RedriveOutcome};
use crate::poison::lock;

mod conn;

use conn::{AsyncConn, Refused, ReplyFuture};

/// An async sluice client. Cheap to clone; every clone shares one connection
/// and any number of tasks may use it at once: their requests are pipelined
/// and each waits only for its own reply. Needs a tokio runtime with the
/// time and net drivers.
///
/// A task whose request is the only one in flight reads its reply itself,
/// woken by the runtime's reactor; when several are in flight the
/// connection's reader task reads for all, so a receive that long-polls
/// never holds up the replies of others. No allocation per request: frames
/// are encoded into one reused buffer and replies are matched in a slab.
///
/// When the connection drops, requests in flight fail with a
/// disconnect-class error ([`Error::is_disconnect`]; a send may or may not
/// have happened: delivery is at-least-once) and the next request
/// reconnects.
///
/// ```no_run
/// use std::time::Duration;
/// use sluice_client::{AsyncClient, ClientConfig, ReceiveOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sluice_client::Error> {
/// let client = AsyncClient::connect(ClientConfig::default()).await?;
/// client.create_queue("orders", &Default::default()).await?;
/// let sent = client.send("orders", "hello").await?;
/// let options = ReceiveOptions::new(10).wait(Duration::from_secs(1));
/// for message in client.receive("orders", options).await? {
///     assert_eq!(message.id, sent.id);
///     client.delete("orders", message.receipt).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncClient {
    inner: Arc<AsyncInner>,
}

#[derive(Debug)]
struct AsyncInner {
    config: ClientConfig,
    /// The connection in use and the HELLO reply of the latest one.
    current: Mutex<Current>,
    /// Held while (re)connecting, so one task connects at a time.
    reconnect: tokio::sync::Mutex<ReconnectState<Instant>>,
}

#[derive(Debug, Default)]
struct Current {
    conn: Option<Arc<AsyncConn>>,
    info: Option<HelloReply>,
}

fn connect_error(addr: &str, err: std::io::Error) -> Error {
    Error::Connect {
        addr: addr.to_owned(),
        source: Arc::new(err),
    }
}

fn closed_during(addr: &str, what: &str) -> Error {
    let e = std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("the server closed the connection during {what}"),
    );
    connect_error(addr, e)
}

/// Bytes read at a time during the TLS handshake.
const HELLO_CHUNK_BYTES: usize = 4 * 1024;

/// Connects and says HELLO.
async fn open(config: &ClientConfig) -> Result<Arc<AsyncConn>> {
    let addr = config.connect_addr()?;
    let timeout = config.connect_timeout();
    let connecting = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| connect_error(addr, e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connect_error(addr, e))?;
        // TLS first, when configured.
        let tls = match config.tls_session(addr)? {
            None => None,
            Some(session) => {
                let tls_failed = |e: Error| match e {
                    Error::Tls { .. } => e,
                    e => connect_error(addr, std::io::Error::other(e.to_string())),
                };
                let mut out = Vec::new();
                let mut chunk = vec![0u8; HELLO_CHUNK_BYTES];
                loop {
                    session.outgoing(&mut out);
                    if !out.is_empty() {
                        stream
                            .write_all(&out)
                            .await
                            .map_err(|e| connect_error(addr, e))?;
                        out.clear();
                    }
                    if !session.is_handshaking() {
                        break;
                    }
                    let n = stream
                        .read(&mut chunk)
                        .await
                        .map_err(|e| connect_error(addr, e))?;
                    if n == 0 {
                        return Err(closed_during(addr, "the TLS handshake"));
                    }
                    session.handshake_input(&chunk[..n]).map_err(tls_failed)?;
                }
                Some(session)
            }
        };
        let (mut handshake, frame) =
            Handshake::start(addr, config.token(), config.session_timeout_ms())?;
        let mut sealed = Vec::new();
        let frame: &[u8] = match &tls {
            Some(session) => {
                session.seal(&frame, &mut sealed)?;
                &sealed
            }
            None => &frame,
        };
        stream
            .write_all(frame)
            .await
            .map_err(|e| connect_error(addr, e))?;
        let mut cipher = BytesMut::new();
        let hello = loop {
            if let Some(hello) = handshake.poll()? {
                break hello;
            }
            let into = if tls.is_some() {
                cipher.clear();
                &mut cipher
            } else {
                handshake.buffer()
            };
            let n = stream
                .read_buf(into)
                .await
                .map_err(|e| connect_error(addr, e))?;
            if n == 0 {
                return Err(closed_during(addr, "HELLO"));
            }
            if let Some(session) = &tls {
                // A refused client certificate shows here (TLS 1.3 sends
                // the alert after the client's side of the handshake).
                match session.open(&cipher, handshake.buffer()) {
                    Ok(false) => {}
                    // The server's last words (a refusal) may come with
                    // its close_notify.
                    Ok(true) => match handshake.poll()? {
                        Some(hello) => break hello,
                        None => return Err(closed_during(addr, "HELLO")),
                    },
                    Err(e @ Error::Tls { .. }) => return Err(e),
                    Err(e) => {
                        return Err(connect_error(addr, std::io::Error::other(e.to_string())));
                    }
                }
            }
        };
        let (decoder, buf) = handshake.finish(&hello);
        Ok((stream, tls, decoder, buf, hello))
    };
    let (stream, tls, decoder, buf, hello) = tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| {
            Error::connect_timed_out(addr, timeout, "connecting or waiting for HELLO")
        })??;
    let heartbeat = config
        .heartbeat_interval()
        .map(|interval| (interval, config.request_timeout()));
    Ok(AsyncConn::start(
        stream, tls, hello, decoder, buf, heartbeat,
    ))
}

impl AsyncClient {
    /// Connects to the server (HELLO included), so a bad address or token
    /// fails here.
    ///
    /// # Errors
    /// [`Error::Connect`] when no connection can be made in the connect
    /// time-out; the server's error when it refuses the HELLO.
    pub async fn connect(config: ClientConfig) -> Result<AsyncClient> {
        let client = AsyncClient::unconnected(config);
        client.connection().await?;
        Ok(client)
    }

    /// A client that connects at its first request (the sharded client's,
    /// so that a broker that is down fails only its own queues).
    pub(crate) fn unconnected(config: ClientConfig) -> AsyncClient {
        let reconnect = ReconnectState::new(config.reconnect_policy());
        AsyncClient {
            inner: Arc::new(AsyncInner {
                config,
                current: Mutex::new(Current {
                    info: None,
                    conn: None,
                }),
                reconnect: tokio::sync::Mutex::new(reconnect),
            }),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The HELLO reply of the latest connection; `None` after a reconnect
    /// attempt failed, until one succeeds.
    #[must_use]
    pub fn server_info(&self) -> Option<HelloReply> {
        lock(&self.inner.current).info.clone()
    }

    /// The open connection, if it can take requests.
    fn open_connection(&self) -> Option<Arc<AsyncConn>> {
        let mut current = lock(&self.inner.current);
        let conn = current.conn.as_ref()?;
        if conn.usable() {
            return Some(Arc::clone(conn));
        }
        current.conn = None;
        None
    }

    /// The open connection, or a new one.
    async fn connection(&self) -> Result<Arc<AsyncConn>> {
        if let Some(c) = self.open_connection() {
            return Ok(c);
        }
        let mut reconnect = self.inner.reconnect.lock().await;
        // Another task may have reconnected while this one waited.
        if let Some(c) = self.open_connection() {
            return Ok(c);
        }
        if let Some(at) = reconnect.next_attempt_at() {
            tokio::time::sleep_until(at).await;
        }
        match open(&self.inner.config).await {
            Ok(c) => {
                reconnect.succeeded();
                let mut current = lock(&self.inner.current);
                current.info = Some(c.hello().clone());
                current.conn = Some(Arc::clone(&c));
                Ok(c)
            }
            Err(err) => {
                reconnect.failed(Instant::now());
                lock(&self.inner.current).info = None;
                Err(err)
            }
        }
    }

    /// Registers and sends `requests` (their ids go to `ids`); returns the
    /// connection they went out on.
    async fn submit<F: OutFrame + Sync>(
        &self,
        requests: &[F],
        ids: &mut [u32],
    ) -> Result<Arc<AsyncConn>> {
        // A connection can end between fetching it and registering: then it
        // refuses the requests, and one more try gets a fresh connection.
        // Nothing was written yet, so a retry sends nothing twice.
        let mut tries = 0;
        loop {
            tries += 1;
            let conn = self.connection().await?;
            match conn.submit(requests, ids) {
                Ok(()) => return Ok(conn),
                Err(Refused::Closed(_)) if tries < 2 => {}
                Err(Refused::Closed(err) | Refused::Invalid(err)) => return Err(err),
            }
        }
    }

    /// Sends one request and waits for its reply: the raw protocol, for
    /// what the typed methods do not cover. An ERROR reply is returned as
    /// [`Reply::Error`], not as an `Err`.
    ///
    /// # Errors
    /// [`Error::Timeout`] after the request time-out; connection failures.
    pub async fn call(&self, request: &Request) -> Result<Reply> {
        self.call_with(request, self.inner.config.request_timeout())
            .await
    }

    async fn call_with<F: OutFrame + Sync>(&self, request: &F, timeout: Duration) -> Result<Reply> {
        let deadline = Instant::now() + timeout;
        let mut id = [0u32];
        let conn = self.submit(std::slice::from_ref(request), &mut id).await?;
        wait(ReplyFuture::new(conn, id[0]), deadline, timeout).await
    }

    /// Pipelines `requests` in one write and waits for every reply: one
    /// result per request, in order.
    ///
    /// # Errors
    /// The outer error when nothing could be sent.
    pub async fn call_many(&self, requests: &[Request]) -> Result<Vec<Result<Reply>>> {
        let timeout = self.inner.config.request_timeout() + ops::longest_wait(requests);
        let deadline = Instant::now() + timeout;
        let mut ids = vec![0u32; requests.len()];
        let conn = self.submit(requests, &mut ids).await?;
        // Every reply gets a future now, so none is given up while an
        // earlier one is awaited.
        let futures: Vec<ReplyFuture> = ids
            .iter()
            .map(|&id| ReplyFuture::new(Arc::clone(&conn), id))
            .collect();
        let mut out = Vec::with_capacity(futures.len());
        for f in futures {
            out.push(wait(f, deadline, timeout).await);
        }
        Ok(out)
    }

    async fn run<O: Operation>(&self, op: &O) -> Result<O::Output> {
        let request = op.outgoing()?;
        let timeout = self.inner.config.request_timeout() + op.extra_wait();
        ops::parse::<O>(self.call_with(&request, timeout).await)
    }

    /// Checks the connection: the round-trip time of a PING.
    ///
    /// # Errors
    /// Connection failures and time-outs.
    pub async fn ping(&self) -> Result<Duration> {
        let start = Instant::now();
        let nonce = 0x5eed_1ce5_u64 ^ u64::from(std::process::id());
        let got = self.run(&ops::Ping(nonce)).await?;
        if got != nonce {
            return Err(Error::Protocol(format!(
                "PONG carried nonce {got}, not {nonce}"
            )));
        }
        Ok(start.elapsed())
    }

    /// Creates a queue; absent options take their defaults. Returns true
    /// when it was created, false when it existed with the same attributes.
    ///
    /// # Errors
    /// `QueueExists`, `InvalidArgument`.
    pub async fn create_queue(&self, queue: &str, options: &QueueOptions) -> Result<bool> {
        self.run(&ops::CreateQueue(queue, options)).await
    }

    /// Changes a queue's attributes.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub async fn set_queue(&self, queue: &str, options: &QueueOptions) -> Result<()> {
        self.run(&ops::SetQueue(queue, options)).await
    }

    /// Deletes a queue and its messages.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument` (it is another queue's
    /// dead-letter queue).
    pub async fn delete_queue(&self, queue: &str) -> Result<()> {
        self.run(&ops::DeleteQueue(queue)).await
    }

    /// The names of the queues starting with `prefix`.
    ///
    /// # Errors
    /// `InvalidArgument`.
    pub async fn list_queues(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names = self.queue_names(prefix);
        let mut all = Vec::new();
        while let Some(name) = names.next().await {
            all.push(name?);
        }
        Ok(all)
    }

    /// The names of the queues that start with `prefix`, in name order, as
    /// a stream that fetches a page (one reply frame) at a time. A server
    /// of protocol version 3 lists them all in pages; an older one lists
    /// what fits one frame.
    pub fn queue_names(&self, prefix: &str) -> crate::QueueNameStream {
        crate::listing::QueueNameStream::new(self.clone(), prefix)
    }

    /// One page of the names with `prefix` after `after` ("" from the
    /// first), and where the next page starts (`None`: the last).
    pub(crate) async fn list_page(
        &self,
        prefix: &str,
        after: &str,
    ) -> Result<crate::listing::Page> {
        let paged = self.connection().await?.hello().version >= ops::PAGED_LIST_VERSION;
        let (names, more) = self
            .run(&ops::ListQueues {
                prefix,
                after: paged.then_some(after),
            })
            .await?;
        let next = ops::next_page(&names, more);
        Ok((names, next))
    }

    /// A queue's attributes and counters.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub async fn queue_info(&self, queue: &str) -> Result<QueueInfo> {
        self.run(&ops::GetQueue(queue)).await
    }

    /// Removes every message of a queue; returns how many.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub async fn purge_queue(&self, queue: &str) -> Result<usize> {
        self.run(&ops::PurgeQueue(queue)).await
    }

    /// Sends one message with just a body.
    ///
    /// # Errors
    /// The request's or the entry's error.
    pub async fn send(&self, queue: &str, body: impl Into<Bytes>) -> Result<SendOutcome> {
        self.send_entry(queue, SendEntry::new(body)).await
    }

    /// Sends one message with options.
    ///
    /// # Errors
    /// The request's or the entry's error.
    pub async fn send_entry(&self, queue: &str, entry: SendEntry) -> Result<SendOutcome> {
        ops::single(self.send_batch(queue, std::slice::from_ref(&entry)).await?)
    }

    /// Sends up to 1,024 messages: one result per entry, in order.
    ///
    /// # Errors
    /// The outer error when the request failed as a whole.
    pub async fn send_batch(
        &self,
        queue: &str,
        entries: &[SendEntry],
    ) -> Result<Vec<Result<SendOutcome>>> {
        self.run(&ops::Send(queue, entries)).await
    }

    /// Sends up to 1,024 bare bodies, borrowed (the queue's delay, no dedup
    /// key, no attributes): one result per body, in order. As
    /// [`Client::send_bodies`](crate::Client::send_bodies), each body is
    /// copied once, into the connection's write buffer.
    ///
    /// # Errors
    /// As [`AsyncClient::send_batch`].
    pub async fn send_bodies(
        &self,
        queue: &str,
        bodies: &[&[u8]],
    ) -> Result<Vec<Result<SendOutcome>>> {
        self.run(&ops::Send(queue, bodies)).await
    }

    /// Sends up to 1,024 entries given as borrowed views, each copied once,
    /// into the connection's write buffer: as
    /// [`Client::send_views`](crate::Client::send_views).
    ///
    /// # Errors
    /// As [`AsyncClient::send_batch`].
    pub async fn send_views(
        &self,
        queue: &str,
        entries: &[SendEntryRef<'_>],
    ) -> Result<Vec<Result<SendOutcome>>> {
        self.run(&ops::Send(queue, entries)).await
    }

    /// Receives (leases) up to `options.max_messages` messages.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub async fn receive(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> Result<Vec<ReceivedMessage>> {
        self.run(&ops::Receive(queue, options)).await
    }

    /// [`AsyncClient::receive`] with the messages left in the reply's wire
    /// form, iterated as borrowed views: as
    /// [`Client::receive_batch`](crate::Client::receive_batch).
    ///
    /// # Errors
    /// As [`AsyncClient::receive`].
    pub async fn receive_batch(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> Result<ReceivedBatch> {
        self.run(&ops::ReceiveBatch(queue, options)).await
    }

    /// Deletes one delivered message.
    ///
    /// # Errors
    /// `StaleReceipt`, `Gone`, `InvalidReceipt`.
    pub async fn delete(&self, queue: &str, receipt: Receipt) -> Result<()> {
        ops::single(self.delete_batch(queue, &[receipt]).await?)
    }

    /// Deletes up to 1,024 delivered messages: one result per receipt.
    ///
    /// # Errors
    /// The outer error when the request failed as a whole.
    pub async fn delete_batch(&self, queue: &str, receipts: &[Receipt]) -> Result<Vec<Result<()>>> {
        self.run(&ops::Delete(queue, receipts)).await
    }

    /// Ends a lease `timeout` from now; zero releases the message.
    ///
    /// # Errors
    /// `StaleReceipt`, `Gone`, `InvalidReceipt`.
    pub async fn change_visibility(
        &self,
        queue: &str,
        receipt: Receipt,
        timeout: Duration,
    ) -> Result<()> {
        ops::single(
            self.change_visibility_batch(queue, &[(receipt, timeout)])
                .await?,
        )
    }

    /// Changes up to 1,024 leases: one result per entry.
    ///
    /// # Errors
    /// The outer error when the request failed as a whole.
    pub async fn change_visibility_batch(
        &self,
        queue: &str,
        changes: &[(Receipt, Duration)],
    ) -> Result<Vec<Result<()>>> {
        self.run(&ops::ChangeVisibility(queue, changes)).await
    }

    /// Moves up to `max_messages` messages of a dead-letter queue back.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub async fn redrive(&self, queue: &str, max_messages: usize) -> Result<RedriveOutcome> {
        self.run(&ops::Redrive(queue, max_messages, None)).await
    }

    /// Moves up to `max_messages` visible messages of `queue` to `to`.
    ///
    /// # Errors
    /// `QueueNotFound` (either queue), `InvalidArgument` (`to` is `queue`).
    pub async fn redrive_to(
        &self,
        queue: &str,
        to: &str,
        max_messages: usize,
    ) -> Result<RedriveOutcome> {
        self.run(&ops::Redrive(queue, max_messages, Some(to))).await
    }

    /// Reads up to `max_messages` visible messages without leasing them.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub async fn peek(&self, queue: &str, max_messages: usize) -> Result<Vec<PeekedMessage>> {
        Ok(self.peek_checked(queue, max_messages).await?.messages)
    }

    /// As [`peek`](Self::peek), saying whether visible messages were left
    /// out because one reply could not hold them (protocol version 3).
    ///
    /// # Errors
    /// As [`peek`](Self::peek).
    pub async fn peek_checked(&self, queue: &str, max_messages: usize) -> Result<crate::Peeked> {
        self.run(&ops::Peek(queue, max_messages)).await
    }

    /// The server's version, io backend, shards and counters.
    ///
    /// # Errors
    /// Connection failures and time-outs.
    pub async fn server_stats(&self) -> Result<ServerStatsReply> {
        self.run(&ops::ServerStats).await
    }

    /// Moves the broker's manual clock; see
    /// [`Client::advance_clock`](crate::Client::advance_clock).
    ///
    /// # Errors
    /// [`Error::Unsupported`] from a server on the real clock (nothing
    /// changes); `InvalidArgument` above 366 days.
    pub async fn advance_clock(&self, by: Duration) -> Result<ClockReading> {
        self.run(&ops::AdvanceClock(by)).await
    }
}

/// Waits for one reply until `deadline`; `timeout` is for the error.
async fn wait(reply: ReplyFuture, deadline: Instant, timeout: Duration) -> Result<Reply> {
    match tokio::time::timeout_at(deadline, reply).await {
        Ok(reply) => reply,
        Err(_) => Err(Error::Timeout(timeout)),
    }
}
