//! The blocking client: one pipelined connection shared by every thread.
//!
//! Ground rules: callers encode their request, take a slot in the
//! connection's [`Pending`] table and write the frame under the writer's
//! mutex; one reader thread per connection cuts frames out of the socket and
//! fills the slot of each reply's request id, so a receive that waits does
//! not hold up the replies behind it. When the connection ends (end of
//! stream, an I/O error, a closing error code), the reader fails every slot
//! in flight with `Disconnected` and the next request reconnects, after the
//! reconnect policy's delay when connecting failed before.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT;
use sluice_protocol::{
    AttributeUpdate, FrameDecoder, HelloReply, PeekedMessage, QueueInfo, Receipt, ReceivedMessage,
    Reply, Request, SendEntry, SendOutcome, ServerStatsReply,
};

use crate::config::{ClientConfig, ReconnectState};
use crate::error::{Error, Result};
use crate::ops::{self, Operation, ReceiveOptions, RedriveOutcome};
use crate::pending::Pending;

type ReplySlot = SyncSender<Result<Reply>>;
/// A request written and waiting: its id and where its reply arrives.
type Waiting = (u32, std::sync::mpsc::Receiver<Result<Reply>>);

/// Bytes the reader asks the socket for at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A blocking sluice client. Cheap to clone; every clone shares one
/// connection, and any number of threads may use it at once: their requests
/// are pipelined and each waits only for its own reply.
///
/// The connection is made by [`Client::connect`]; when it drops, requests in
/// flight fail with [`Error::Disconnected`] (a send may or may not have
/// happened: delivery is at-least-once) and the next request reconnects.
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
    slot: Mutex<ConnSlot>,
}

#[derive(Debug)]
struct ConnSlot {
    current: Option<Arc<Connection>>,
    reconnect: ReconnectState<Instant>,
    last_error: Option<Error>,
}

/// One open connection. Dropping it shuts the socket, which ends its
/// reader thread.
#[derive(Debug)]
struct Connection {
    writer: Mutex<TcpStream>,
    pending: Arc<Pending<ReplySlot>>,
    hello: HelloReply,
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = lock(&self.writer).shutdown(Shutdown::Both);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent, so a panic in
    // another thread does not make it unusable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn connect_error(addr: &str, err: std::io::Error) -> Error {
    Error::Connect {
        addr: addr.to_owned(),
        source: Arc::new(err),
    }
}

impl Connection {
    /// Connects, says HELLO and starts the reader thread.
    fn open(config: &ClientConfig) -> Result<Arc<Connection>> {
        let addr = config.addr();
        let deadline = Instant::now() + config.get_connect_timeout();
        let addrs = addr.to_socket_addrs().map_err(|e| connect_error(addr, e))?;
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        let mut stream = None;
        for a in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(&a, left.max(Duration::from_millis(1))) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let mut stream = stream.ok_or_else(|| connect_error(addr, last))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connect_error(addr, e))?;

        // HELLO, synchronously, before anything else can use the socket.
        let mut buf = BytesMut::new();
        let hello = ops::Hello(config.token());
        hello
            .request()?
            .encode(1, &mut buf)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        stream.write_all(&buf).map_err(|e| connect_error(addr, e))?;
        buf.clear();
        let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT);
        let mut chunk = vec![0u8; READ_CHUNK_BYTES];
        let frame = loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => break frame,
                Ok(None) => {}
                Err(e) => return Err(Error::Protocol(format!("HELLO reply: {e}"))),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "no HELLO reply");
                return Err(connect_error(addr, e));
            }
            stream
                .set_read_timeout(Some(left))
                .map_err(|e| connect_error(addr, e))?;
            match stream.read(&mut chunk) {
                Ok(0) => {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the server closed the connection during HELLO",
                    );
                    return Err(connect_error(addr, e));
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(connect_error(addr, e)),
            }
        };
        let reply = Reply::decode(frame.opcode, frame.payload)
            .map_err(|e| Error::Protocol(format!("HELLO reply: {e}")))?;
        let hello = ops::parse::<ops::Hello>(Ok(reply))?;
        stream
            .set_read_timeout(None)
            .map_err(|e| connect_error(addr, e))?;
        decoder.set_frame_bytes_max(hello.limits.frame_bytes_max);

        let pending = Arc::new(Pending::new());
        let reader = stream.try_clone().map_err(|e| connect_error(addr, e))?;
        let reader_pending = Arc::clone(&pending);
        std::thread::Builder::new()
            .name("sluice-client-reader".into())
            .spawn(move || read_loop(reader, decoder, buf, chunk, &reader_pending))
            .map_err(|e| connect_error(addr, e))?;
        Ok(Arc::new(Connection {
            writer: Mutex::new(stream),
            pending,
            hello,
        }))
    }

    /// Marks the connection dead: fails what is in flight and shuts the
    /// socket so the reader ends too.
    fn fail(&self, err: &Error) {
        self.pending.close(err);
        let _ = lock(&self.writer).shutdown(Shutdown::Both);
    }

    fn write(&self, frame: &[u8]) -> Result<()> {
        let result = lock(&self.writer).write_all(frame);
        result.map_err(|e| {
            let err = Error::io(e);
            self.fail(&err);
            err
        })
    }
}

/// The reader thread: frames in, replies to their slots, until the
/// connection ends.
fn read_loop(
    mut stream: TcpStream,
    mut decoder: FrameDecoder,
    mut buf: BytesMut,
    mut chunk: Vec<u8>,
    pending: &Pending<ReplySlot>,
) {
    let end = loop {
        if let Err(err) = pending.dispatch_buffered(&mut decoder, &mut buf) {
            break err;
        }
        match stream.read(&mut chunk) {
            Ok(0) => break Error::Disconnected("the server closed the connection".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Error::io(e),
        }
    };
    tracing::debug!(error = %end, "sluice client: connection ended");
    pending.close(&end);
    let _ = stream.shutdown(Shutdown::Both);
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
        let reconnect = ReconnectState::new(config.reconnect_policy());
        let client = Client {
            inner: Arc::new(Inner {
                config,
                slot: Mutex::new(ConnSlot {
                    current: None,
                    reconnect,
                    last_error: None,
                }),
            }),
        };
        client.connection()?;
        Ok(client)
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
        let slot = lock(&self.inner.slot);
        slot.current
            .as_ref()
            .filter(|c| !c.pending.is_closed())
            .map(|c| c.hello.clone())
    }

    /// The open connection, or a new one.
    fn connection(&self) -> Result<Arc<Connection>> {
        let mut slot = lock(&self.inner.slot);
        if let Some(c) = &slot.current {
            if !c.pending.is_closed() {
                return Ok(Arc::clone(c));
            }
            slot.current = None;
        }
        if let Some(at) = slot.reconnect.next_attempt_at() {
            let wait = at.saturating_duration_since(Instant::now());
            if wait > self.inner.config.get_request_timeout() {
                if let Some(err) = &slot.last_error {
                    return Err(err.clone());
                }
            }
            std::thread::sleep(wait);
        }
        match Connection::open(&self.inner.config) {
            Ok(c) => {
                slot.reconnect.succeeded();
                slot.last_error = None;
                slot.current = Some(Arc::clone(&c));
                Ok(c)
            }
            Err(err) => {
                slot.reconnect.failed(Instant::now());
                slot.last_error = Some(err.clone());
                Err(err)
            }
        }
    }

    /// Encodes `requests`, registers them and writes them in one go: the
    /// connection and a receiver per request, in order.
    fn submit(&self, requests: &[Request]) -> Result<(Arc<Connection>, Vec<Waiting>)> {
        // A connection can die between fetching and registering: then the
        // table refuses the slot, and one more try gets a fresh connection.
        let mut tries = 0;
        'retry: loop {
            tries += 1;
            let conn = self.connection()?;
            let mut buf = BytesMut::new();
            let mut waits = Vec::with_capacity(requests.len());
            for request in requests {
                let (tx, rx) = sync_channel(1);
                let id = match conn.pending.register(tx) {
                    Ok(id) => id,
                    Err((_, err)) => {
                        for (id, _) in waits {
                            conn.pending.cancel(id);
                        }
                        // Nothing was written yet, so a retry sends nothing twice.
                        if tries < 2 {
                            continue 'retry;
                        }
                        return Err(err);
                    }
                };
                let before = buf.len();
                let encoded = request
                    .encode(id, &mut buf)
                    .map_err(|e| Error::InvalidArgument(e.to_string()))
                    .and_then(|()| {
                        check_frame_size(buf.len() - before, conn.hello.limits.frame_bytes_max)
                    });
                if let Err(err) = encoded {
                    conn.pending.cancel(id);
                    for (id, _) in waits {
                        conn.pending.cancel(id);
                    }
                    return Err(err);
                }
                waits.push((id, rx));
            }
            conn.write(&buf)?;
            return Ok((conn, waits));
        }
    }

    /// Sends one request and waits for its reply: the raw protocol, for
    /// what the typed methods do not cover. An ERROR reply is returned as
    /// [`Reply::Error`], not as an `Err`.
    ///
    /// # Errors
    /// [`Error::Timeout`] after the request time-out; connection failures.
    pub fn call(&self, request: &Request) -> Result<Reply> {
        self.call_with(request, self.inner.config.get_request_timeout())
    }

    fn call_with(&self, request: &Request, timeout: Duration) -> Result<Reply> {
        let (conn, mut waits) = self.submit(std::slice::from_ref(request))?;
        let (id, rx) = waits.pop().ok_or(Error::Closed)?;
        wait(&conn, id, &rx, Instant::now() + timeout)
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
        let (conn, waits) = self.submit(requests)?;
        let extra = requests
            .iter()
            .map(|r| match r {
                Request::Receive(r) => Duration::from_millis(r.wait_ms.unwrap_or(20_000).into()),
                _ => Duration::ZERO,
            })
            .max()
            .unwrap_or_default();
        let deadline = Instant::now() + self.inner.config.get_request_timeout() + extra;
        Ok(waits
            .into_iter()
            .map(|(id, rx)| wait(&conn, id, &rx, deadline))
            .collect())
    }

    fn run<O: Operation>(&self, op: &O) -> Result<O::Output> {
        let request = op.request()?;
        let timeout = self.inner.config.get_request_timeout() + op.extra_wait();
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
    pub fn create_queue(&self, queue: &str, attributes: &AttributeUpdate) -> Result<bool> {
        self.run(&ops::CreateQueue(queue, attributes))
    }

    /// Changes the attributes `update` names (and removes the policies it
    /// clears).
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub fn set_queue(&self, queue: &str, update: &AttributeUpdate) -> Result<()> {
        self.run(&ops::SetQueue(queue, update))
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
        self.run(&ops::ListQueues(prefix))
    }

    /// A queue's attributes and counters.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub fn get_queue(&self, queue: &str) -> Result<QueueInfo> {
        self.run(&ops::GetQueue(queue))
    }

    /// Removes every message of a queue; returns how many.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub fn purge_queue(&self, queue: &str) -> Result<u64> {
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

    /// Receives (leases) up to `options.max_messages` messages, waiting up
    /// to `options.wait` for the first.
    ///
    /// # Errors
    /// `QueueNotFound` (also when the queue is deleted while waiting),
    /// `InvalidArgument`.
    pub fn receive(&self, queue: &str, options: ReceiveOptions) -> Result<Vec<ReceivedMessage>> {
        self.run(&ops::Receive(queue, options))
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
    pub fn redrive(&self, queue: &str, max_messages: u32) -> Result<RedriveOutcome> {
        self.run(&ops::Redrive(queue, max_messages))
    }

    /// Reads up to `max_messages` visible messages without leasing them.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub fn peek(&self, queue: &str, max_messages: u16) -> Result<Vec<PeekedMessage>> {
        self.run(&ops::Peek(queue, max_messages))
    }

    /// The server's version, io backend, shards and counters.
    ///
    /// # Errors
    /// Connection failures and time-outs.
    pub fn server_stats(&self) -> Result<ServerStatsReply> {
        self.run(&ops::ServerStats)
    }
}

/// Refuses a frame above the server's limit before it is sent (the server
/// would close the connection).
pub(crate) fn check_frame_size(len: usize, frame_bytes_max: u32) -> Result<()> {
    let max = usize::try_from(frame_bytes_max).unwrap_or(usize::MAX);
    if len > max {
        return Err(Error::InvalidArgument(format!(
            "a request of {len} bytes is above the server's frame limit of {max} bytes; \
             nothing was sent"
        )));
    }
    Ok(())
}

/// Waits for one reply until `deadline`.
fn wait(
    conn: &Connection,
    id: u32,
    rx: &std::sync::mpsc::Receiver<Result<Reply>>,
    deadline: Instant,
) -> Result<Reply> {
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(reply) => reply,
        Err(RecvTimeoutError::Timeout) => {
            conn.pending.cancel(id);
            Err(Error::Timeout(left))
        }
        Err(RecvTimeoutError::Disconnected) => {
            Err(Error::Disconnected("the connection ended".into()))
        }
    }
}
