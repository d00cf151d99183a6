//! One async connection shared by every task, read by the task that waits
//! when it waits alone, by the connection's reader task otherwise, and
//! written by the tasks that send on it.
//!
//! Ground rules.
//!
//! - **State.** One (std) mutex guards the request table (an entry per
//!   request in flight: its reply once read, and the waker of its task) and
//!   `reader_active`, set while the reader task reads for everyone. No lock
//!   is ever held across an `.await` or a return to the runtime. Reads and
//!   their dispatch happen under the reader's mutex, so whoever reads, frames
//!   are handed out in order.
//! - **Reading alone.** A [`ReplyFuture`] polled while its request is the
//!   only one in flight and the reader task is idle reads the socket from
//!   its own task (`try_read_buf`, then `poll_read_ready` so the runtime's
//!   reactor wakes that very task when bytes come): no task hop between the
//!   reactor and the caller.
//! - **Reading for many.** A future is not polled just because bytes came
//!   for others (its task may be busy elsewhere, or hold it unpolled in a
//!   `select!`), so it cannot be trusted to read for other requests. As soon
//!   as a second request is in flight, the reader task reads for all: it
//!   waits for readability, reads, fills entries and wakes their tasks (one
//!   wake of the reader per read, however many replies the read brings),
//!   until the table is empty again.
//! - **Writing.** A task encodes its frames into the shared `queued`
//!   buffer under the writer's mutex. When nothing else is in flight and no
//!   flush is pending it writes them at once from its own task
//!   (`try_write`, which never blocks). Otherwise, or when the socket takes
//!   less than everything, it leaves them queued and wakes the flusher task,
//!   which first yields (so the tasks woken with it, typically by one read
//!   of many replies, queue their next requests too) and then writes
//!   everything queued with one write, waiting for the socket to be
//!   writable as needed. Frames are encoded straight into that buffer,
//!   which is reused: no allocation per request.
//! - **The end.** End of stream, an I/O error, a malformed frame or an error
//!   that closes the connection fails every entry with that error (a
//!   disconnect-class one), wakes every waiting task and refuses new
//!   entries; the client opens a new connection for the next request.
//! - **Idle connections.** Nobody reads while nothing is in flight, so a
//!   connection the server closed while idle is noticed by the next request:
//!   after [`IDLE_CHECK_AFTER`] without reading, it first reads what is
//!   waiting without blocking.
//! - **Heartbeat.** With a session timeout, a heartbeat task wakes every
//!   quarter of it and sends a PING (awaiting its PONG like any request)
//!   only when nothing was written during the last quarter: a timestamp
//!   (`last_write_ms`, Relaxed: a stale value only moves a PING a little)
//!   stored per write is all it costs while requests flow. It holds the
//!   connection weakly between looks and ends when it closes or is
//!   dropped.

use std::future::Future;
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use sluice_protocol::{Frame, FrameDecoder, HelloReply, Reply, Request};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::ops::{OutFrame, encode_frames};
use crate::pending::{self, Table};
use crate::poison::lock;
use crate::tls::TlsSession;

/// Room made in the read buffer before each read.
const READ_RESERVE_BYTES: usize = 64 * 1024;
/// How long a connection may go unread before a request checks it first.
const IDLE_CHECK_AFTER: Duration = Duration::from_millis(50);

/// A request in flight.
#[derive(Debug, Default)]
struct Entry {
    /// The reply frame (its task decodes it), or why there is none.
    reply: Option<Result<Frame>>,
    /// The waiting task, while another task leads.
    waker: Option<Waker>,
}

#[derive(Debug)]
struct State {
    table: Table<Entry>,
    /// The reader task reads for everyone.
    reader_active: bool,
    /// When the socket was last read.
    last_read: Instant,
}

impl State {
    fn fail(&mut self, err: &Error, wake: &mut Vec<Waker>) {
        self.table.close(err);
        for entry in self.table.iter_mut() {
            if entry.reply.is_none() {
                entry.reply = Some(Err(err.clone()));
            }
            wake.extend(entry.waker.take());
        }
    }
}

/// What only the one reading touches (under its mutex).
#[derive(Debug)]
struct Reader {
    decoder: FrameDecoder,
    buf: BytesMut,
    /// TLS records read and not yet opened (TLS only).
    cipher: BytesMut,
    /// Reply frames cut and not yet handed out (kept for its capacity).
    ready: Vec<Frame>,
    /// Tasks to wake (kept for its capacity).
    wake: Vec<Waker>,
}

#[derive(Debug, Default)]
struct Writer {
    /// Frames not yet written.
    queued: BytesMut,
    /// TLS only: `queued` sealed, and how much of it was written.
    sealed: Vec<u8>,
    sealed_at: usize,
    /// The flusher task owns the writing until `queued` is empty.
    flushing: bool,
}

/// Why [`AsyncConn::submit`] sent nothing.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The connection had ended: a fresh one may take the request.
    Closed(Error),
    /// The request itself cannot be sent.
    Invalid(Error),
}

/// One open connection.
#[derive(Debug)]
pub(crate) struct AsyncConn {
    stream: TcpStream,
    /// TLS, when the client was configured for it.
    tls: Option<TlsSession>,
    hello: HelloReply,
    state: Mutex<State>,
    reader: Mutex<Reader>,
    writer: Mutex<Writer>,
    /// Wakes the flusher task.
    flush: Arc<Notify>,
    /// Wakes the reader task: to start reading, or to see that it can stop.
    read: Arc<Notify>,
    /// When the connection opened: the epoch of `last_write_ms`.
    opened: Instant,
    /// Milliseconds from `opened` to the last write (the heartbeat's look).
    last_write_ms: AtomicU64,
}

impl Drop for AsyncConn {
    fn drop(&mut self) {
        // The tasks hold only weak references while they wait: woken, they
        // find the connection gone and end.
        self.flush.notify_one();
        self.read.notify_one();
    }
}

impl AsyncConn {
    /// Wraps a connected stream whose HELLO is done (`buf` holds whatever
    /// came after the HELLO reply) and starts its flusher and reader tasks,
    /// and its heartbeat when given one (interval, PONG time-out).
    pub(crate) fn start(
        stream: TcpStream,
        tls: Option<TlsSession>,
        hello: HelloReply,
        decoder: FrameDecoder,
        buf: BytesMut,
        heartbeat: Option<(Duration, Duration)>,
    ) -> Arc<AsyncConn> {
        let flush = Arc::new(Notify::new());
        let read = Arc::new(Notify::new());
        let conn = Arc::new(AsyncConn {
            stream,
            tls,
            hello,
            state: Mutex::new(State {
                table: Table::new(),
                reader_active: false,
                last_read: Instant::now(),
            }),
            reader: Mutex::new(Reader {
                decoder,
                buf,
                cipher: BytesMut::new(),
                ready: Vec::new(),
                wake: Vec::new(),
            }),
            writer: Mutex::new(Writer::default()),
            flush: Arc::clone(&flush),
            read: Arc::clone(&read),
            opened: Instant::now(),
            last_write_ms: AtomicU64::new(0),
        });
        tokio::spawn(flusher(Arc::downgrade(&conn), flush));
        tokio::spawn(reader(Arc::downgrade(&conn), read));
        if let Some((interval, timeout)) = heartbeat {
            tokio::spawn(heartbeat_task(Arc::downgrade(&conn), interval, timeout));
        }
        conn
    }

    fn age_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether something was written within the last `within`.
    fn wrote_within(&self, within: Duration) -> bool {
        let within_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        self.age_ms()
            .saturating_sub(self.last_write_ms.load(Ordering::Relaxed))
            < within_ms
    }

    pub(crate) fn hello(&self) -> &HelloReply {
        &self.hello
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state().table.closed().is_some()
    }

    /// Whether the connection can take requests; one that went unread for a
    /// while is first read without blocking, so that a close by the server
    /// is noticed here rather than by the request.
    pub(crate) fn usable(&self) -> bool {
        let check = {
            let st = self.state();
            if st.table.closed().is_some() {
                return false;
            }
            !st.reader_active && st.table.len() == 0 && st.last_read.elapsed() >= IDLE_CHECK_AFTER
        };
        if check {
            let _ = self.read_available();
        }
        !self.is_closed()
    }

    /// Registers `requests` (their ids go to `ids`) and writes them, or
    /// leaves them to the flusher. A failed write fails the connection, and
    /// so every request in flight, which their futures report.
    pub(crate) fn submit<F: OutFrame>(
        &self,
        requests: &[F],
        ids: &mut [u32],
    ) -> std::result::Result<(), Refused> {
        debug_assert_eq!(requests.len(), ids.len());
        let (alone, start_reader) = {
            let mut st = self.state();
            let alone = st.table.len() == 0;
            st.table.register_all(ids).map_err(Refused::Closed)?;
            let start_reader = !st.reader_active && st.table.len() > 1;
            if start_reader {
                st.reader_active = true;
            }
            (alone, start_reader)
        };
        if start_reader {
            self.read.notify_one();
        }
        let mut w = lock(&self.writer);
        let encoded = encode_frames(
            requests,
            ids,
            &mut w.queued,
            self.hello.limits.frame_bytes_max,
        );
        if let Err(err) = encoded {
            drop(w);
            self.state().table.remove_all(ids);
            return Err(Refused::Invalid(err));
        }
        if w.flushing {
            return Ok(());
        }
        if alone {
            // The only request in flight: write it now, from this task.
            match self.write_some(&mut w) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(err) => {
                    w.queued.clear();
                    drop(w);
                    self.fail(&err);
                    return Ok(());
                }
            }
        }
        w.flushing = true;
        drop(w);
        self.flush.notify_one();
        Ok(())
    }

    /// Writes what is queued without blocking; true when it all went.
    fn write_some(&self, w: &mut Writer) -> Result<bool> {
        if let Some(tls) = &self.tls {
            // Sealed in the order written: one writer holds `w` at a time.
            if !w.queued.is_empty() {
                tls.seal(&w.queued, &mut w.sealed)?;
                w.queued.clear();
            }
            while w.sealed_at < w.sealed.len() {
                match self.stream.try_write(&w.sealed[w.sealed_at..]) {
                    Ok(0) => return Err(Error::io(ErrorKind::WriteZero.into())),
                    Ok(n) => w.sealed_at += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io(e)),
                }
            }
            w.sealed.clear();
            w.sealed_at = 0;
            return Ok(true);
        }
        while !w.queued.is_empty() {
            match self.stream.try_write(&w.queued) {
                Ok(0) => return Err(Error::io(ErrorKind::WriteZero.into())),
                Ok(n) => {
                    w.queued.advance(n);
                    self.last_write_ms.store(self.age_ms(), Ordering::Relaxed);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(e)),
            }
        }
        w.queued.clear();
        Ok(true)
    }

    /// Reads what the socket holds now and hands it out; `Pending` once it
    /// would block (the reactor then wakes `cx`, when one is given).
    fn read_available(&self) -> Poll<()> {
        let mut r = lock(&self.reader);
        loop {
            let read = if self.tls.is_some() {
                r.cipher.clear();
                r.cipher.reserve(READ_RESERVE_BYTES);
                self.stream.try_read_buf(&mut r.cipher)
            } else {
                r.buf.reserve(READ_RESERVE_BYTES);
                self.stream.try_read_buf(&mut r.buf)
            };
            match read {
                Ok(0) => {
                    drop(r);
                    self.fail(&Error::Disconnected(
                        "the server closed the connection".into(),
                    ));
                    return Poll::Ready(());
                }
                Ok(_) => {
                    if let Some(tls) = &self.tls {
                        let Reader { cipher, buf, .. } = &mut *r;
                        let end = match tls.open(cipher, buf) {
                            Ok(false) => None,
                            Ok(true) => Some(Error::Disconnected(
                                "the server closed the TLS session".into(),
                            )),
                            Err(e) => Some(e),
                        };
                        if let Some(err) = end {
                            drop(r);
                            self.fail(&err);
                            return Poll::Ready(());
                        }
                    }
                    if !self.dispatch(&mut r) {
                        return Poll::Ready(());
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    drop(r);
                    self.fail(&Error::io(e));
                    return Poll::Ready(());
                }
            }
        }
    }

    /// Hands every whole frame buffered to its request and wakes their
    /// tasks; false when the connection ended.
    fn dispatch(&self, r: &mut Reader) -> bool {
        let Reader {
            decoder,
            buf,
            ready,
            wake,
            ..
        } = r;
        let end = pending::cut_frames(decoder, buf, |f| ready.push(f));
        {
            let mut st = self.state();
            st.last_read = Instant::now();
            for f in ready.drain(..) {
                if let Some(entry) = st.table.get_mut(f.request_id) {
                    entry.reply = Some(Ok(f));
                    wake.extend(entry.waker.take());
                }
            }
            if let Err(err) = &end {
                st.fail(err, wake);
            }
        }
        for w in wake.drain(..) {
            w.wake();
        }
        if let Err(err) = end {
            tracing::debug!(error = %err, "sluice async client: connection ended");
            return false;
        }
        true
    }

    /// Ends the connection: fails what is in flight and wakes every waiter.
    pub(crate) fn fail(&self, err: &Error) {
        let mut wake = Vec::new();
        let first = {
            let mut st = self.state();
            let first = st.table.closed().is_none();
            st.fail(err, &mut wake);
            first
        };
        if first {
            tracing::debug!(error = %err, "sluice async client: connection ended");
            self.flush.notify_one();
        }
        for w in wake {
            w.wake();
        }
    }

    /// Polls for the reply of `id`: reads the socket itself when its request
    /// is the only one in flight and the reader task is idle.
    fn poll_reply(&self, id: u32, cx: &mut Context<'_>) -> Poll<Result<Reply>> {
        loop {
            {
                let mut st = self.state();
                let s = &mut *st;
                let alone = !s.reader_active && s.table.len() == 1;
                let Some(entry) = s.table.get_mut(id) else {
                    return Poll::Ready(Err(Error::Disconnected(
                        "the request was cancelled".into(),
                    )));
                };
                if let Some(reply) = entry.reply.take() {
                    drop(st);
                    return Poll::Ready(reply.and_then(pending::read_reply));
                }
                // Whoever reads wakes this task with the reply.
                if !entry
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    entry.waker = Some(cx.waker().clone());
                }
                if !alone {
                    return Poll::Pending;
                }
            }
            if self.read_available().is_ready() || self.answered(id) {
                continue;
            }
            match self.stream.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => self.fail(&Error::io(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn answered(&self, id: u32) -> bool {
        self.state()
            .table
            .get_mut(id)
            .is_none_or(|e| e.reply.is_some())
    }

    /// Removes the entry of `id` when its future ends, however it ends.
    fn release(&self, id: u32) {
        let idle_reader = {
            let mut st = self.state();
            st.table.remove(id);
            st.reader_active && st.table.len() == 0
        };
        if idle_reader {
            // The reader task may stop: tell it rather than let it wait for
            // bytes that may never come.
            self.read.notify_one();
        }
    }
}

/// The reply of one request; dropping it gives the reply up.
#[derive(Debug)]
pub(crate) struct ReplyFuture {
    conn: Arc<AsyncConn>,
    id: u32,
    done: bool,
}

impl ReplyFuture {
    pub(crate) fn new(conn: Arc<AsyncConn>, id: u32) -> ReplyFuture {
        ReplyFuture {
            conn,
            id,
            done: false,
        }
    }
}

impl Future for ReplyFuture {
    type Output = Result<Reply>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Reply>> {
        if self.done {
            return Poll::Ready(Err(Error::Closed));
        }
        let out = self.conn.poll_reply(self.id, cx);
        if out.is_ready() {
            self.done = true;
            self.conn.release(self.id);
        }
        out
    }
}

impl Drop for ReplyFuture {
    fn drop(&mut self) {
        if !self.done {
            self.conn.release(self.id);
        }
    }
}

/// The reader task of one connection: reads for every request while more
/// than one was in flight, until none is.
async fn reader(conn: Weak<AsyncConn>, notify: Arc<Notify>) {
    loop {
        notify.notified().await;
        loop {
            let Some(c) = conn.upgrade() else { return };
            if c.is_closed() {
                return;
            }
            // Read first, then stop only when nothing is in flight.
            let _ = c.read_available();
            {
                let mut st = c.state();
                if st.table.len() == 0 {
                    st.reader_active = false;
                    break;
                }
            }
            // Wait for bytes, or for a word that the table emptied.
            let mut emptied = std::pin::pin!(notify.notified());
            let ready = std::future::poll_fn(|cx| {
                if let Poll::Ready(r) = c.stream.poll_read_ready(cx) {
                    return Poll::Ready(r);
                }
                emptied.as_mut().poll(cx).map(Ok)
            })
            .await;
            if let Err(e) = ready {
                c.fail(&Error::io(e));
                return;
            }
        }
    }
}

/// The flusher task of one connection: writes what the tasks queued when
/// they could not write it themselves.
async fn flusher(conn: Weak<AsyncConn>, notify: Arc<Notify>) {
    loop {
        notify.notified().await;
        // Let the tasks woken with this one queue their frames first: they
        // go out in the same write.
        tokio::task::yield_now().await;
        let Some(c) = conn.upgrade() else { return };
        if c.is_closed() {
            return;
        }
        loop {
            let result = {
                let mut w = lock(&c.writer);
                match c.write_some(&mut w) {
                    Ok(true) => {
                        w.flushing = false;
                        break;
                    }
                    other => other,
                }
            };
            match result {
                Ok(_) => {
                    if let Err(e) = c.stream.writable().await {
                        c.fail(&Error::io(e));
                        return;
                    }
                }
                Err(err) => {
                    c.fail(&err);
                    return;
                }
            }
        }
    }
}

/// The heartbeat task of one connection (see the ground rules): every
/// `interval`, a PING if nothing was written during the last one.
async fn heartbeat_task(conn: Weak<AsyncConn>, interval: Duration, timeout: Duration) {
    let ping = [Request::Ping {
        nonce: 0x6865_6172_7462_6561,
    }];
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once.
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(c) = conn.upgrade() else { return };
        if c.is_closed() {
            return;
        }
        if c.wrote_within(interval) {
            continue;
        }
        let mut id = [0u32];
        if c.submit(&ping, &mut id).is_err() {
            return;
        }
        // The PONG itself says nothing; a failure ends the connection for
        // every request, and the next look finds it closed.
        let _ = tokio::time::timeout(timeout, ReplyFuture::new(c, id[0])).await;
    }
}
