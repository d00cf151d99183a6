//! The async client (tokio): one pipelined connection shared by every task.
//!
//! Ground rules: callers encode their request (with a placeholder id) and
//! hand it to the driver task over an unbounded channel with a oneshot for
//! the reply. The driver owns the write half and the connection's life: it
//! takes every command waiting, registers each in the connection's
//! [`Pending`] table (which assigns the id, patched into the frame) and
//! writes them in one go. A reader task per connection owns the read half
//! and fills the slot of each reply's id. When the connection ends the
//! reader fails every slot in flight with `Disconnected`; the driver
//! reconnects for the next command, after the reconnect policy's delay when
//! connecting failed before. The driver ends when the last [`AsyncClient`]
//! clone is dropped.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_protocol::limits::{FRAME_BYTES_MAX_DEFAULT, FRAME_BYTES_MAX_LIMIT};
use sluice_protocol::{
    AttributeUpdate, FrameDecoder, HelloReply, PeekedMessage, QueueInfo, Receipt, ReceivedMessage,
    Reply, Request, SendEntry, SendOutcome, ServerStatsReply,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{ClientConfig, ReconnectState};
use crate::error::{Error, Result};
use crate::ops::{self, Operation, ReceiveOptions, RedriveOutcome};
use crate::pending::{Pending, Slot};

type ReplySlot = oneshot::Sender<Result<Reply>>;

/// Offset of the request id in a frame: after the length, opcode and flags.
const REQUEST_ID_OFFSET: usize = 6;
/// Commands the driver writes in one go at most.
const WRITE_BATCH_MAX: usize = 1024;

/// A request on its way to the driver: its frame (id still to be patched)
/// and where the reply goes.
#[derive(Debug)]
struct Command {
    frames: BytesMut,
    count: usize,
    replies: Vec<ReplySlot>,
}

/// An async sluice client. Cheap to clone; every clone shares one connection
/// and any number of tasks may use it at once: their requests are pipelined
/// and each waits only for its own reply. Needs a tokio runtime with the
/// time and net drivers.
///
/// When the connection drops, requests in flight fail with
/// [`Error::Disconnected`] (a send may or may not have happened: delivery is
/// at-least-once) and the next request reconnects.
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
    commands: mpsc::UnboundedSender<Command>,
    info: Arc<Mutex<Option<HelloReply>>>,
}

/// One open connection, owned by the driver.
#[derive(Debug)]
struct AsyncConn {
    writer: OwnedWriteHalf,
    pending: Arc<Pending<ReplySlot>>,
    reader: JoinHandle<()>,
}

impl Drop for AsyncConn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn connect_error(addr: &str, err: std::io::Error) -> Error {
    Error::Connect {
        addr: addr.to_owned(),
        source: Arc::new(err),
    }
}

/// Connects, says HELLO and starts the reader task.
async fn open(config: &ClientConfig) -> Result<(AsyncConn, HelloReply)> {
    let addr = config.addr();
    let timeout = config.get_connect_timeout();
    let connecting = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| connect_error(addr, e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connect_error(addr, e))?;
        let mut buf = BytesMut::new();
        ops::Hello(config.token())
            .request()?
            .encode(1, &mut buf)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        stream
            .write_all(&buf)
            .await
            .map_err(|e| connect_error(addr, e))?;
        buf.clear();
        let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT);
        let frame = loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => break frame,
                Ok(None) => {}
                Err(e) => return Err(Error::Protocol(format!("HELLO reply: {e}"))),
            }
            let n = stream
                .read_buf(&mut buf)
                .await
                .map_err(|e| connect_error(addr, e))?;
            if n == 0 {
                let e = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection during HELLO",
                );
                return Err(connect_error(addr, e));
            }
        };
        let reply = Reply::decode(frame.opcode, frame.payload)
            .map_err(|e| Error::Protocol(format!("HELLO reply: {e}")))?;
        let hello = ops::parse::<ops::Hello>(Ok(reply))?;
        decoder.set_frame_bytes_max(hello.limits.frame_bytes_max);
        Ok((stream, decoder, buf, hello))
    };
    let (stream, decoder, buf, hello) =
        tokio::time::timeout(timeout, connecting)
            .await
            .map_err(|_| {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
                connect_error(addr, e)
            })??;
    let (read, writer) = stream.into_split();
    let pending = Arc::new(Pending::new());
    let reader = tokio::spawn(read_loop(read, decoder, buf, Arc::clone(&pending)));
    Ok((
        AsyncConn {
            writer,
            pending,
            reader,
        },
        hello,
    ))
}

/// The reader task: frames in, replies to their slots, until the
/// connection ends.
async fn read_loop(
    mut read: OwnedReadHalf,
    mut decoder: FrameDecoder,
    mut buf: BytesMut,
    pending: Arc<Pending<ReplySlot>>,
) {
    let end = loop {
        if let Err(err) = pending.dispatch_buffered(&mut decoder, &mut buf) {
            break err;
        }
        buf.reserve(64 * 1024);
        match read.read_buf(&mut buf).await {
            Ok(0) => break Error::Disconnected("the server closed the connection".into()),
            Ok(_) => {}
            Err(e) => break Error::io(e),
        }
    };
    tracing::debug!(error = %end, "sluice async client: connection ended");
    pending.close(&end);
}

/// The driver task: connects, registers and writes requests.
async fn drive(
    config: ClientConfig,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut conn: Option<AsyncConn>,
    info: Arc<Mutex<Option<HelloReply>>>,
) {
    let mut reconnect = ReconnectState::<Instant>::new(config.reconnect_policy());
    let mut batch = Vec::new();
    let mut out = BytesMut::new();
    while let Some(first) = commands.recv().await {
        batch.push(first);
        while batch.len() < WRITE_BATCH_MAX {
            match commands.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        if conn.as_ref().is_none_or(|c| c.pending.is_closed()) {
            conn = None;
            *info.lock().unwrap_or_else(PoisonError::into_inner) = None;
            if let Some(at) = reconnect.next_attempt_at() {
                tokio::time::sleep_until(at).await;
            }
            match open(&config).await {
                Ok((c, hello)) => {
                    reconnect.succeeded();
                    *info.lock().unwrap_or_else(PoisonError::into_inner) = Some(hello);
                    conn = Some(c);
                }
                Err(err) => {
                    reconnect.failed(Instant::now());
                    for cmd in batch.drain(..) {
                        for slot in cmd.replies {
                            slot.fill(Err(err.clone()));
                        }
                    }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        out.clear();
        for cmd in batch.drain(..) {
            register(c, cmd, &mut out);
        }
        if out.is_empty() {
            continue;
        }
        if let Err(e) = c.writer.write_all(&out).await {
            let err = Error::io(e);
            c.pending.close(&err);
        }
    }
}

/// Registers the frames of one command and appends them to `out`, each
/// with its id patched in.
fn register(c: &AsyncConn, cmd: Command, out: &mut BytesMut) {
    let Command {
        mut frames,
        count,
        replies,
    } = cmd;
    debug_assert_eq!(count, replies.len());
    if replies.iter().all(oneshot::Sender::is_closed) {
        return; // The caller gave up before it was sent.
    }
    let mut at = 0;
    let mut ids = Vec::with_capacity(count);
    for slot in replies {
        match c.pending.register(slot) {
            Ok(id) => ids.push(id),
            Err((slot, err)) => {
                slot.fill(Err(err.clone()));
                for id in ids {
                    c.pending.complete(id, Err(err.clone()));
                }
                return;
            }
        }
    }
    for id in ids {
        let Some(len) = frames
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
        else {
            break;
        };
        let end = at + 4 + usize::try_from(len).unwrap_or(usize::MAX);
        frames[at + REQUEST_ID_OFFSET..at + REQUEST_ID_OFFSET + 4]
            .copy_from_slice(&id.to_le_bytes());
        at = end;
    }
    out.extend_from_slice(&frames);
}

impl AsyncClient {
    /// Connects to the server (HELLO included), so a bad address or token
    /// fails here, and starts the driver task on the current runtime.
    ///
    /// # Errors
    /// [`Error::Connect`] when no connection can be made in the connect
    /// time-out; the server's error when it refuses the HELLO.
    pub async fn connect(config: ClientConfig) -> Result<AsyncClient> {
        let (conn, hello) = open(&config).await?;
        let info = Arc::new(Mutex::new(Some(hello)));
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(drive(config.clone(), rx, Some(conn), Arc::clone(&info)));
        Ok(AsyncClient {
            inner: Arc::new(AsyncInner {
                config,
                commands: tx,
                info,
            }),
        })
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
        self.inner
            .info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn submit(&self, requests: &[Request]) -> Result<Vec<oneshot::Receiver<Result<Reply>>>> {
        let mut frames = BytesMut::new();
        let mut replies = Vec::with_capacity(requests.len());
        let mut receivers = Vec::with_capacity(requests.len());
        let frame_max = self
            .server_info()
            .map_or(FRAME_BYTES_MAX_DEFAULT, |h| h.limits.frame_bytes_max);
        for request in requests {
            let before = frames.len();
            request
                .encode(0, &mut frames)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?;
            crate::blocking::check_frame_size(frames.len() - before, frame_max)?;
            let (tx, rx) = oneshot::channel();
            replies.push(tx);
            receivers.push(rx);
        }
        let command = Command {
            frames,
            count: requests.len(),
            replies,
        };
        self.inner
            .commands
            .send(command)
            .map_err(|_| Error::Closed)?;
        Ok(receivers)
    }

    /// Sends one request and waits for its reply: the raw protocol, for
    /// what the typed methods do not cover. An ERROR reply is returned as
    /// [`Reply::Error`], not as an `Err`.
    ///
    /// # Errors
    /// [`Error::Timeout`] after the request time-out; connection failures.
    pub async fn call(&self, request: &Request) -> Result<Reply> {
        self.call_with(request, self.inner.config.get_request_timeout())
            .await
    }

    async fn call_with(&self, request: &Request, timeout: Duration) -> Result<Reply> {
        let rx = self
            .submit(std::slice::from_ref(request))?
            .pop()
            .ok_or(Error::Closed)?;
        wait(rx, Instant::now() + timeout).await
    }

    /// Pipelines `requests` in one write and waits for every reply: one
    /// result per request, in order.
    ///
    /// # Errors
    /// The outer error when nothing could be sent.
    pub async fn call_many(&self, requests: &[Request]) -> Result<Vec<Result<Reply>>> {
        let receivers = self.submit(requests)?;
        let extra = requests
            .iter()
            .map(|r| match r {
                Request::Receive(r) => Duration::from_millis(r.wait_ms.unwrap_or(20_000).into()),
                _ => Duration::ZERO,
            })
            .max()
            .unwrap_or_default();
        let deadline = Instant::now() + self.inner.config.get_request_timeout() + extra;
        let mut out = Vec::with_capacity(receivers.len());
        for rx in receivers {
            out.push(wait(rx, deadline).await);
        }
        Ok(out)
    }

    async fn run<O: Operation>(&self, op: &O) -> Result<O::Output> {
        let request = op.request()?;
        let timeout = self.inner.config.get_request_timeout() + op.extra_wait();
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

    /// Creates a queue; see [`Client::create_queue`](crate::Client::create_queue).
    ///
    /// # Errors
    /// `QueueExists`, `InvalidArgument`.
    pub async fn create_queue(&self, queue: &str, attributes: &AttributeUpdate) -> Result<bool> {
        self.run(&ops::CreateQueue(queue, attributes)).await
    }

    /// Changes a queue's attributes.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub async fn set_queue(&self, queue: &str, update: &AttributeUpdate) -> Result<()> {
        self.run(&ops::SetQueue(queue, update)).await
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
        self.run(&ops::ListQueues(prefix)).await
    }

    /// A queue's attributes and counters.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub async fn get_queue(&self, queue: &str) -> Result<QueueInfo> {
        self.run(&ops::GetQueue(queue)).await
    }

    /// Removes every message of a queue; returns how many.
    ///
    /// # Errors
    /// `QueueNotFound`.
    pub async fn purge_queue(&self, queue: &str) -> Result<u64> {
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
    pub async fn redrive(&self, queue: &str, max_messages: u32) -> Result<RedriveOutcome> {
        self.run(&ops::Redrive(queue, max_messages)).await
    }

    /// Reads up to `max_messages` visible messages without leasing them.
    ///
    /// # Errors
    /// `QueueNotFound`, `InvalidArgument`.
    pub async fn peek(&self, queue: &str, max_messages: u16) -> Result<Vec<PeekedMessage>> {
        self.run(&ops::Peek(queue, max_messages)).await
    }

    /// The server's version, io backend, shards and counters.
    ///
    /// # Errors
    /// Connection failures and time-outs.
    pub async fn server_stats(&self) -> Result<ServerStatsReply> {
        self.run(&ops::ServerStats).await
    }
}

async fn wait(rx: oneshot::Receiver<Result<Reply>>, deadline: Instant) -> Result<Reply> {
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout_at(deadline, rx).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(_)) => Err(Error::Disconnected("the connection ended".into())),
        Err(_) => Err(Error::Timeout(left)),
    }
}
