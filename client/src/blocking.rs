//! The blocking client: one pipelined connection shared by every thread,
//! with no thread of its own.
//!
//! Callers read and write the connection themselves (`conn.rs` has the
//! ground rules): a caller with the only request in flight reads its own
//! reply on its own thread; with several waiting, one reads for all and
//! hands the others their replies; frames that threads write at the same
//! moment go out in one write. When the connection ends (end of stream, an
//! I/O error, a closing error code), every request in flight fails with a
//! disconnect-class error and the next request reconnects, after the
//! reconnect policy's delay when connecting failed before.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_protocol::{
    HelloReply, PeekedMessage, Receipt, ReceivedBatch, ReceivedMessage, Reply, Request,
    SendEntryRef, SendOutcome, ServerStatsReply,
};

use crate::attributes::{QueueInfo, QueueOptions};
use crate::config::{ClientConfig, ReconnectState};
use crate::error::{Error, Result};
use crate::message::SendEntry;
use crate::ops::{self, ClockReading, Operation, OutFrame, ReceiveOptions, RedriveOutcome};
use crate::poison::{self, lock};

mod conn;
#[cfg(all(test, sluice_loom))]
mod conn_loom;
mod connect;
mod sync;
mod wire;

use conn::{Connection, Refused};
use connect::open;

/// A blocking sluice client. Cheap to clone; every clone shares one
/// connection, and any number of threads may use it at once: their requests
/// are pipelined and each waits only for its own reply.
///
/// The client has no thread of its own. A caller whose request is the only
/// one in flight reads its reply itself; when several wait, one of them
/// reads for all and hands each its reply, so a receive that long-polls
/// never holds up the replies of others. Requests that threads send at the
/// same moment go out in one write.
///
/// The connection is made by [`Client::connect`]; when it drops, requests in
/// flight fail with a disconnect-class error ([`Error::is_disconnect`]; a
/// send may or may not have happened: delivery is at-least-once) and the
/// next request reconnects.
///
/// ```no_run
/// use sluice_client::{Client, ClientConfig, ReceiveOptions};
/// use std::time::Duration;
///
/// let client = Client::connect(ClientConfig::default())?;
/// client.create_queue("orders", &Default::default())?;
/// client.send("orders", "hello")?;
/// let options = ReceiveOptions::new(10).wait(Duration::from_secs(1));
/// for message in client.receive("orders", options)? {
///     println!("{}: {:?}", message.id, message.body);
///     client.delete("orders", message.receipt)?;
/// }
/// # Ok::<(), sluice_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    /// The connection in use: read by every request, written on reconnect.
    current: RwLock<Option<Arc<Connection>>>,
    /// Held while reconnecting, so one thread connects at a time.
    reconnect: Mutex<Reconnect>,
}

#[derive(Debug)]
struct Reconnect {
    state: ReconnectState<Instant>,
    last_error: Option<Error>,
}

/// A request sent and not answered yet, from the `start_*` methods of
/// [`Client`]: [`PendingReply::wait`] waits for its reply. Several can be in
/// flight on one connection from one thread (pipelining); replies are
/// matched by request id, so they may be waited for in any order. Dropping
/// it without waiting gives up on the reply (the request may still take
/// effect).
#[must_use = "a request's reply is only read by waiting for it"]
pub struct PendingReply<T> {
    conn: Arc<Connection>,
    id: u32,
    deadline: Instant,
    timeout: Duration,
    parse: fn(Result<Reply>) -> Result<T>,
    waited: bool,
}

impl<T> std::fmt::Debug for PendingReply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingReply")
            .field("id", &self.id)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl<T> PendingReply<T> {
    /// Waits for the reply, until the request's time-out (counted from when
    /// it was started).
    ///
    /// # Errors
    /// As the blocking method of the same request: [`Error::Timeout`], a
    /// disconnect-class error, or the server's error.
    pub fn wait(mut self) -> Result<T> {
        self.waited = true;
        (self.parse)(self.conn.wait(self.id, self.deadline, self.timeout))
    }
}

impl<T> Drop for PendingReply<T> {
    fn drop(&mut self) {
        if !self.waited {
            self.conn.cancel(self.id);
        }
    }
}

impl Client {
    /// Connects to the server (HELLO included), so a bad address or token
    /// fails here.
    ///
    /// # Errors
    /// [`Error::Connect`] when no connection can be made in the connect
    /// time-out; the server's error (`Unauthorized`, `UnsupportedVersion`,
    /// `TooManyConnections`) when it refuses the HELLO.
    pub fn connect(config: ClientConfig) -> Result<Client> {
        let client = Client::unconnected(config);
        client.connection()?;
        Ok(client)
    }

    /// A client that connects at its first request (the sharded client's,
    /// so that a broker that is down fails only its own queues).
    pub(crate) fn unconnected(config: ClientConfig) -> Client {
        let state = ReconnectState::new(config.reconnect_policy());
        Client {
            inner: Arc::new(Inner {
                config,
                current: RwLock::new(None),
                reconnect: Mutex::new(Reconnect {
                    state,
                    last_error: None,
                }),
            }),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The HELLO reply of the current connection (server version, shard,
    /// limits); `None` while disconnected.
    #[must_use]
    pub fn server_info(&self) -> Option<HelloReply> {
        poison::read(&self.inner.current)
            .as_ref()
            .filter(|c| !c.is_closed())
            .map(|c| c.hello().clone())
    }

    /// The open connection, if it can take requests.
    fn open_connection(&self) -> Option<Arc<Connection>> {
        let current = poison::read(&self.inner.current);
        current.as_ref().filter(|c| c.usable()).map(Arc::clone)
    }

    /// The open connection, or a new one.
    fn connection(&self) -> Result<Arc<Connection>> {
        if let Some(c) = self.open_connection() {
            return Ok(c);
        }
        let mut rc = lock(&self.inner.reconnect);
        // Another thread may have reconnected while this one waited.
        if let Some(c) = self.open_connection() {
            return Ok(c);
        }
        *poison::write(&self.inner.current) = None;
        if let Some(at) = rc.state.next_attempt_at() {
            let wait = at.saturating_duration_since(Instant::now());
            if wait > self.inner.config.request_timeout() {
                if let Some(err) = &rc.last_error {
                    return Err(err.clone());
                }
            }
            std::thread::sleep(wait);
        }
        match open(&self.inner.config) {
            Ok(c) => {
                rc.state.succeeded();
                rc.last_error = None;
                *poison::write(&self.inner.current) = Some(Arc::clone(&c));
                Ok(c)
            }
            Err(err) => {
                rc.state.failed(Instant::now());
                rc.last_error = Some(err.clone());
                Err(err)
            }
        }
    }

    /// Registers and sends `requests` (their ids go to `ids`); returns the
    /// connection they went out on.
    fn submit<F: OutFrame>(
        &self,
        requests: &[F],
        ids: &mut [u32],
        deadline: Instant,
    ) -> Result<Arc<Connection>> {
        // A connection can end between fetching it and registering: then it
        // refuses the requests, and one more try gets a fresh connection.
        // Nothing was written yet, so a retry sends nothing twice.
        let mut tries = 0;
        loop {
            tries += 1;
            let conn = self.connection()?;
            match conn.submit(requests, ids, deadline) {
                Ok(()) => return Ok(conn),
                Err(Refused::Closed(_)) if tries < 2 => {}
                Err(Refused::Closed(err) | Refused::Invalid(err)) => return Err(err),
            }
        }
    }

    /// Starts `op` and returns its pending reply.
    fn start<O: Operation>(&self, op: &O) -> Result<PendingReply<O::Output>> {
        let request = op.outgoing()?;
        let timeout = self.inner.config.request_timeout() + op.extra_wait();
        let deadline = Instant::now() + timeout;
        let mut id = [0u32];
        let conn = self.submit(std::slice::from_ref(&request), &mut id, deadline)?;
        Ok(PendingReply {
            conn,
            id: id[0],
            deadline,
            timeout,
            parse: ops::parse::<O>,
            waited: false,
        })
    }

    /// Sends one request and waits for its reply: the raw protocol, for
    /// what the typed methods do not cover. An ERROR reply is returned as
    /// [`Reply::Error`], not as an `Err`.
    ///
    /// # Errors
    /// [`Error::Timeout`] after the request time-out; connection failures.
    pub fn call(&self, request: &Request) -> Result<Reply> {
        self.call_with(request, self.inner.config.request_timeout())
    }

    fn call_with<F: OutFrame>(&self, request: &F, timeout: Duration) -> Result<Reply> {
        let deadline = Instant::now() + timeout;
        let mut id = [0u32];
        let conn = self.submit(std::slice::from_ref(request), &mut id, deadline)?;
        conn.wait(id[0], deadline, timeout)
    }

    /// Pipelines `requests` on the connection in one write and waits for
    /// every reply: one result per request, in order. Replies to receives
    /// that wait may arrive after those of later requests; each is matched
    /// by its request id.
    ///
    /// # Errors
    /// The outer error when nothing could be sent (no connection, a request
    /// that cannot be encoded).
    pub fn call_many(&self, requests: &[Request]) -> Result<Vec<Result<Reply>>> {
        let timeout = self.inner.config.request_timeout() + ops::longest_wait(requests);
        let deadline = Instant::now() + timeout;
        let mut ids = vec![0u32; requests.len()];
        let conn = self.submit(requests, &mut ids, deadline)?;
        Ok(ids
            .into_iter()
            .map(|id| conn.wait(id, deadline, timeout))
            .collect())
    }

    /// Sends one request without waiting for its reply: the raw protocol,
    /// pipelined. An ERROR reply is returned as [`Reply::Error`].
    ///
    /// # Errors
    /// When nothing could be sent (no connection, a request that cannot be
    /// encoded).
    pub fn start_call(&self, request: &Request) -> Result<PendingReply<Reply>> {
        let timeout = self.inner.config.request_timeout();
        let deadline = Instant::now() + timeout;
        let mut id = [0u32];
        let conn = self.submit(std::slice::from_ref(request), &mut id, deadline)?;
        Ok(PendingReply {
            conn,
            id: id[0],
            deadline,
            timeout,
            parse: |reply| reply,
            waited: false,
        })
    }

    /// [`Client::send_batch`] without waiting: several batches can be in
    /// flight on the connection from one thread.
    ///
    /// # Errors
    /// When nothing could be sent.
    pub fn start_send_batch(
        &self,
        queue: &str,
        entries: &[SendEntry],
    ) -> Result<PendingReply<Vec<Result<SendOutcome>>>> {
        self.start(&ops::Send(queue, entries))
    }

    /// [`Client::send_views`] without waiting.
    ///
    /// # Errors
    /// When nothing could be sent.
    pub fn start_send_views(
        &self,
        queue: &str,
        entries: &[SendEntryRef<'_>],
    ) -> Result<PendingReply<Vec<Result<SendOutcome>>>> {
        self.start(&ops::Send(queue, entries))
    }

    /// [`Client::send_bodies`] without waiting.
    ///
    /// # Errors
    /// When nothing could be sent.
    pub fn start_send_bodies(
        &self,
        queue: &str,
        bodies: &[&[u8]],
    ) -> Result<PendingReply<Vec<Result<SendOutcome>>>> {
        self.start(&ops::Send(queue, bodies))
    }

    /// [`Client::receive`] without waiting.
    ///
    /// # Errors
    /// When nothing could be sent.
    pub fn start_receive(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> Result<PendingReply<Vec<ReceivedMessage>>> {
        self.start(&ops::Receive(queue, options))
    }

    /// [`Client::receive_batch`] without waiting.
    ///
    /// # Errors
    /// When nothing could be sent.
    pub fn start_receive_batch(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> Result<PendingReply<ReceivedBatch>> {
        self.start(&ops::ReceiveBatch(queue, options))
    }

    /// [`Client::delete_batch`] without waiting.
    ///
    /// # Errors
    /// When nothing could be sent.
    pub fn start_delete_batch(
        &self,
        queue: &str,
        receipts: &[Receipt],
    ) -> Result<PendingReply<Vec<Result<()>>>> {
        self.start(&ops::Delete(queue, receipts))
    }

    fn run<O: Operation>(&self, op: &O) -> Result<O::Output> {
        let request = op.outgoing()?;
        let timeout = self.inner.config.request_timeout() + op.extra_wait();
        ops::parse::<O>(self.call_with(&request, timeout))
    }

    /// Checks the connection: the round-trip time of a PING.
    ///
    /// # Errors
    /// Connection failures and time-outs.
    pub fn ping(&self) -> Result<Duration> {
        let start = Instant::now();
        let nonce = u64::from(start.elapsed().subsec_nanos()) ^ 0x5eed_1ce5;
        let got = self.run(&ops::Ping(nonce))?;
        if got != nonce {
            return Err(Error::Protocol(format!(
                "PONG carried nonce {got}, not {nonce}"
            )));
        }
        Ok(start.elapsed())
    }

    /// Creates a queue; absent attributes take their defaults. Returns true
    /// when it was created, false when it existed with the same attributes.
    ///
    /// # Errors
    /// `QueueExists` when it exists with different attributes;
    /// `InvalidArgument` for a bad name or attribute.
    pub fn create_queue(&self, queue: &str, options: &QueueOptions) -> Result<bool> {
        self.run(&ops::CreateQueue(queue, options))
    }

    /// Changes the attributes `options` sets (and removes the policies it
    /// clears), leaving the others as they are.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub fn set_queue(&self, queue: &str, options: &QueueOptions) -> Result<()> {
        self.run(&ops::SetQueue(queue, options))
    }

    /// Deletes a queue and its messages.
    ///
    /// # Errors
    /// `QueueNotFound`; `InvalidArgument` when another queue names it as its
    /// dead-letter queue.
    pub fn delete_queue(&self, queue: &str) -> Result<()> {
        self.run(&ops::DeleteQueue(queue))
    }

    /// The names of the queues starting with `prefix` (all for `""`).
    ///
    /// # Errors
    /// `InvalidArgument` for a prefix that is not made of name characters.
    pub fn list_queues(&self, prefix: &str) -> Result<Vec<String>> {
        self.queue_names(prefix).collect()
    }

    /// The names of the queues that start with `prefix`, in name order, as
    /// an iterator that fetches a page (one reply frame) at a time. A
    /// server of protocol version 3 lists them all in pages; an older one
    /// lists what fits one frame.
    pub fn queue_names(&self, prefix: &str) -> crate::QueueNames {
        crate::listing::QueueNames::new(self.clone(), prefix)
    }

    /// One page of the names with `prefix` after `after` ("" from the
    /// first), and where the next page starts (`None`: the last).
    pub(crate) fn list_page(&self, prefix: &str, after: &str) -> Result<crate::listing::Page> {
        let paged = self.connection()?.hello().version >= ops::PAGED_LIST_VERSION;
        let (names, more) = self.run(&ops::ListQueues {
            prefix,
            after: paged.then_some(after),
        })?;
        let next = ops::next_page(&names, more);
        Ok((names, next))
    }

    /// A queue's attributes and counters.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub fn queue_info(&self, queue: &str) -> Result<QueueInfo> {
        self.run(&ops::GetQueue(queue))
    }

    /// Removes every message of a queue; returns how many.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub fn purge_queue(&self, queue: &str) -> Result<usize> {
        self.run(&ops::PurgeQueue(queue))
    }

    /// Sends one message with just a body.
    ///
    /// # Errors
    /// The request's or the entry's error (`QueueNotFound`,
    /// `MessageTooLarge`, `QueueFull`, `Busy`, ...).
    pub fn send(&self, queue: &str, body: impl Into<Bytes>) -> Result<SendOutcome> {
        self.send_entry(queue, SendEntry::new(body))
    }

    /// Sends one message with options (delay, dedup key, attributes).
    ///
    /// # Errors
    /// As [`Client::send`].
    pub fn send_entry(&self, queue: &str, entry: SendEntry) -> Result<SendOutcome> {
        ops::single(self.send_batch(queue, std::slice::from_ref(&entry))?)
    }

    /// Sends up to 1,024 messages in one request: one result per entry, in
    /// order.
    ///
    /// # Errors
    /// The outer error when the request failed as a whole.
    pub fn send_batch(
        &self,
        queue: &str,
        entries: &[SendEntry],
    ) -> Result<Vec<Result<SendOutcome>>> {
        self.run(&ops::Send(queue, entries))
    }

    /// Sends up to 1,024 bare bodies in one request (the queue's delay, no
    /// dedup key, no attributes): one result per body, in order. The
    /// bodies are borrowed and copied once, into the connection's write
    /// buffer; [`send_batch`](Client::send_batch) takes owned [`Bytes`]
    /// per entry instead, which a caller whose bodies live in its own
    /// buffers must copy (and count) first.
    ///
    /// # Errors
    /// As [`Client::send_batch`].
    pub fn send_bodies(&self, queue: &str, bodies: &[&[u8]]) -> Result<Vec<Result<SendOutcome>>> {
        self.run(&ops::Send(queue, bodies))
    }

    /// Sends up to 1,024 entries given as borrowed views (the protocol's
    /// [`SendEntryRef`]: body, delay, dedup key, attributes and group, all
    /// borrowed): one result per entry, in order. Like
    /// [`send_bodies`](Client::send_bodies), each entry is copied once,
    /// into the connection's write buffer, for a caller whose bodies, keys
    /// and group ids live in its own buffers. A group id or dedup key the
    /// protocol cannot carry, or a delay from [`SendEntry::DELAY_CUT`] on,
    /// is `InvalidArgument` and sends nothing.
    ///
    /// # Errors
    /// As [`Client::send_batch`].
    pub fn send_views(
        &self,
        queue: &str,
        entries: &[SendEntryRef<'_>],
    ) -> Result<Vec<Result<SendOutcome>>> {
        self.run(&ops::Send(queue, entries))
    }

    /// Receives (leases) up to `options.max_messages` messages, waiting up
    /// to `options.wait` for the first.
    ///
    /// # Errors
    /// `QueueNotFound` (also when the queue is deleted while waiting),
    /// `InvalidArgument`.
    pub fn receive(&self, queue: &str, options: ReceiveOptions) -> Result<Vec<ReceivedMessage>> {
        self.run(&ops::Receive(queue, options))
    }

    /// [`Client::receive`] with the messages left in the reply's wire form:
    /// [`ReceivedBatch::iter`] gives each as a borrowed view
    /// ([`ReceivedMessageRef`](crate::ReceivedMessageRef): body, attributes
    /// and group borrowed from the frame), where `receive` makes an owned
    /// [`ReceivedMessage`] of each. For a consumer that reads each message
    /// where it lies (and keeps its receipt, which is `Copy`).
    ///
    /// # Errors
    /// As [`Client::receive`].
    pub fn receive_batch(&self, queue: &str, options: ReceiveOptions) -> Result<ReceivedBatch> {
        self.run(&ops::ReceiveBatch(queue, options))
    }

    /// Deletes one delivered message.
    ///
    /// # Errors
    /// `StaleReceipt` (delivered again since), `Gone` (no longer exists),
    /// `InvalidReceipt`.
    pub fn delete(&self, queue: &str, receipt: Receipt) -> Result<()> {
        ops::single(self.delete_batch(queue, &[receipt])?)
    }

    /// Deletes up to 1,024 delivered messages: one result per receipt.
    ///
    /// # Errors
    /// The outer error when the request failed as a whole.
    pub fn delete_batch(&self, queue: &str, receipts: &[Receipt]) -> Result<Vec<Result<()>>> {
        self.run(&ops::Delete(queue, receipts))
    }

    /// Ends a lease `timeout` from now; zero releases the message at once
    /// (subject to the queue's backoff).
    ///
    /// # Errors
    /// As [`Client::delete`].
    pub fn change_visibility(
        &self,
        queue: &str,
        receipt: Receipt,
        timeout: Duration,
    ) -> Result<()> {
        ops::single(self.change_visibility_batch(queue, &[(receipt, timeout)])?)
    }

    /// Changes up to 1,024 leases: one result per entry.
    ///
    /// # Errors
    /// The outer error when the request failed as a whole.
    pub fn change_visibility_batch(
        &self,
        queue: &str,
        changes: &[(Receipt, Duration)],
    ) -> Result<Vec<Result<()>>> {
        self.run(&ops::ChangeVisibility(queue, changes))
    }

    /// Moves up to `max_messages` visible messages of a dead-letter queue
    /// back to the queues they came from.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub fn redrive(&self, queue: &str, max_messages: usize) -> Result<RedriveOutcome> {
        self.run(&ops::Redrive(queue, max_messages, None))
    }

    /// Moves up to `max_messages` visible messages of `queue` to the queue
    /// `to` (on the same broker); those that do not fit `to`'s maximum
    /// depth stay.
    ///
    /// # Errors
    /// `QueueNotFound` (either queue), `InvalidArgument` (`to` is `queue`).
    pub fn redrive_to(&self, queue: &str, to: &str, max_messages: usize) -> Result<RedriveOutcome> {
        self.run(&ops::Redrive(queue, max_messages, Some(to)))
    }

    /// Reads up to `max_messages` visible messages without leasing them.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub fn peek(&self, queue: &str, max_messages: usize) -> Result<Vec<PeekedMessage>> {
        Ok(self.peek_checked(queue, max_messages)?.messages)
    }

    /// As [`peek`](Self::peek), saying whether visible messages were left
    /// out because one reply could not hold them (protocol version 3).
    ///
    /// # Errors
    /// As [`peek`](Self::peek).
    pub fn peek_checked(&self, queue: &str, max_messages: usize) -> Result<crate::Peeked> {
        self.run(&ops::Peek(queue, max_messages))
    }

    /// The server's version, io backend, shards and counters.
    ///
    /// # Errors
    /// Connection failures and time-outs.
    pub fn server_stats(&self) -> Result<ServerStatsReply> {
        self.run(&ops::ServerStats)
    }

    /// Moves the broker's manual clock forward by `by` (whole
    /// milliseconds): for tests, against a server started with `--clock
    /// manual` (or the test kit's `TestServer::builder().manual_clock()`).
    /// Leases, delays, backoffs, long-poll waits and retention that end
    /// within it end now, on every shard, before the reply comes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] from a server on the real clock (nothing
    /// changes); `InvalidArgument` above 366 days.
    pub fn advance_clock(&self, by: Duration) -> Result<ClockReading> {
        self.run(&ops::AdvanceClock(by))
    }
}

// Real sockets and std threads: outside the loom build.
#[cfg(all(test, not(sluice_loom)))]
mod tests;
