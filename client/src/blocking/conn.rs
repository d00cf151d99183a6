//! One blocking connection shared by every thread, with no thread of its
//! own: the callers read and write it themselves.
//!
//! Ground rules.
//!
//! - **State.** One mutex guards the request table (an entry per request in
//!   flight: its reply once read, and the bit its thread sleeps on when it
//!   is parked),
//!   the `leading` flag and the count of parked threads. Every rule below
//!   reads or changes them under that lock only.
//! - **Reading: leader and followers.** A caller waiting for its reply takes
//!   the reader role when nobody holds it (`leading`): it reads the socket
//!   on its own thread and fills the entries of every reply it reads, waking
//!   their threads. With one request in flight that is the only thread
//!   involved: no hand-off at all. A caller that finds a leader parks until
//!   its entry is filled or its deadline passes (its time-out fires whoever
//!   reads). The leader reads until its own reply arrives, its connection
//!   ends or its deadline passes, then gives the role up; whoever gives the
//!   role up, or leaves the wait for any reason while nobody leads, wakes
//!   one parked thread to take it (`hand_off`), so a thread never stays
//!   parked while replies wait unread. The leader reads whatever arrives, so
//!   a long-polling receive never holds up other replies.
//! - **Parking.** Parked threads sleep on one futex word, each on a bit of
//!   it chosen by its request id ([`Parking`]), and the leader wakes every
//!   thread a read answered with one system call. Woken one by one, each
//!   wake-up would switch the core to the woken thread and back to the
//!   leader: two switches per reply where one will do. Threads that share a
//!   bit (more than 32 waiting) may wake each other; each looks at its entry
//!   and parks again.
//! - **Writing: flat combining.** A caller encodes its frames into the
//!   shared `queued` buffer under the writer's mutex. If a write is in
//!   progress (`writing`), it leaves them there and goes to wait: the
//!   writer takes everything queued after each write and sends it in the
//!   next, so frames from many threads go out in one system call. The two
//!   buffers swap and are reused: no allocation per request.
//! - **Combining on one core.** When the leader wakes threads with their
//!   replies it takes the writer role first (if free), yields so they run,
//!   and then writes what they queued meanwhile in one go: on one core,
//!   where the woken threads run one after the other, that is one write per
//!   read instead of one per request.
//! - **Stalls.** A write that cannot go on (the server stopped reading until
//!   we read its replies) times out after [`WRITE_STALL`]; the writer then
//!   reads what is waiting, without blocking, when nobody leads, so a
//!   thread that writes a large pipeline alone cannot deadlock against the
//!   server's back-pressure.
//! - **The end.** End of stream, an I/O error, a malformed frame or an error
//!   that closes the connection fails every entry with that error (a
//!   disconnect-class one), wakes every parked thread, refuses new entries
//!   and shuts the socket, so a thread blocked in a read or a write returns.
//!   The client then opens a new connection for the next request.
//! - **Idle connections.** Nobody reads while nothing is in flight, so a
//!   connection the server closed while idle is noticed by the next request:
//!   after [`IDLE_CHECK_AFTER`] without reading, a request first reads what
//!   is waiting without blocking (an end of stream there makes the client
//!   reconnect before sending).
//! - **Heartbeat.** With a session timeout, the connection has one more
//!   thread, its heartbeat ([`heartbeat`]): it sleeps a quarter of the
//!   timeout at a time and sends a PING (and waits for its PONG like any
//!   caller) only when nothing was written during the last quarter. While
//!   requests flow it costs a timestamp store per write and a look at it
//!   per quarter. It holds the connection only weakly between looks and
//!   ends when the connection closes or is dropped (the drop closes its
//!   channel, which wakes it at once).
//! - **Checked by loom.** The mutexes, atomics and parking come from the
//!   facade `super::sync` and the socket through the [`Wire`] trait, so
//!   `conn_loom.rs` runs this very code over an in-memory wire under loom:
//!   callers and a server thread in every interleaving, failing on a lost
//!   wake-up, a reply left unread while nobody leads, or a stalled write
//!   that never reads what waits.
//! - **Atomics.** Copies let a request check its connection without a
//!   lock. `closed` is stored (Release) once the table is closed, under the
//!   state lock, and loaded (Acquire) by that check: a stale `false` only
//!   lets the request on to the table, which refuses it, and the client
//!   retries on a new connection. `last_read_ms` and `last_write_ms` are
//!   Relaxed: a stale value only moves the idle check, or a heartbeat, a
//!   little earlier or later.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::sync::Weak;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_protocol::{Frame, FrameDecoder, HelloReply, Reply, Request};

use super::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering, Parking, lock, wait_bit};
use super::wire::Wire;
use crate::error::{Error, Result};
use crate::ops::{OutFrame, encode_frames};
use crate::pending::{self, Table};
use crate::tls::TlsSession;

mod read;

/// Bytes asked of the socket per read.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// How long one blocked write may wait before the writer reads what the
/// server sent (see the ground rules: stalls).
pub(crate) const WRITE_STALL: Duration = Duration::from_millis(20);
/// How long a connection may go unread before a request checks it first.
const IDLE_CHECK_AFTER: Duration = Duration::from_millis(50);
/// [`IDLE_CHECK_AFTER`] in the unit of `last_read_ms`.
const IDLE_CHECK_AFTER_MS: u64 = 50;
const _: () = assert!(IDLE_CHECK_AFTER.as_millis() == IDLE_CHECK_AFTER_MS as u128);

/// A request in flight.
#[derive(Debug, Default)]
struct Waiter {
    /// The reply frame (its caller decodes it), or why there is none.
    reply: Option<Result<Frame>>,
    /// While the caller is parked waiting for the reply: the bit it sleeps
    /// on ([`wait_bit`]); 0 otherwise.
    parked: u32,
}

#[derive(Debug)]
struct State {
    table: Table<Waiter>,
    /// A thread holds the reader role.
    leading: bool,
    /// Entries whose thread is parked (has `parked` set).
    parked: usize,
    /// When the socket was last read.
    last_read: Instant,
}

impl State {
    /// Fills the entry of one reply; returns the bit to wake (0: its thread
    /// is not parked).
    fn fill(&mut self, id: u32, reply: Result<Frame>) -> u32 {
        let Some(waiter) = self.table.get_mut(id) else {
            return 0;
        };
        waiter.reply = Some(reply);
        let bit = std::mem::take(&mut waiter.parked);
        if bit != 0 {
            self.parked -= 1;
        }
        bit
    }

    /// Fails every entry with `err` and refuses new ones; returns the bits
    /// to wake.
    fn fail(&mut self, err: &Error) -> u32 {
        self.table.close(err);
        let mut wake = 0;
        for waiter in self.table.iter_mut() {
            if waiter.reply.is_none() {
                waiter.reply = Some(Err(err.clone()));
            }
            wake |= std::mem::take(&mut waiter.parked);
        }
        self.parked = 0;
        wake
    }

    /// When nobody leads and a thread is parked, picks one to take the
    /// reader role; returns its bit (the caller wakes it once the lock is
    /// released), or 0.
    fn hand_off(&mut self) -> u32 {
        if self.leading || self.parked == 0 {
            return 0;
        }
        let Some(bit) = self
            .table
            .iter_mut()
            .map(|waiter| std::mem::take(&mut waiter.parked))
            .find(|&bit| bit != 0)
        else {
            return 0;
        };
        self.parked -= 1;
        bit
    }
}

/// What only the leader touches.
#[derive(Debug)]
struct Reader {
    decoder: FrameDecoder,
    buf: BytesMut,
    chunk: Vec<u8>,
    /// The socket's read time-out as last set (`None`: none).
    timeout: Option<Duration>,
    /// Reply frames cut and not yet handed out (kept for its capacity).
    ready: Vec<Frame>,
}

#[derive(Debug, Default)]
struct Writer {
    /// Frames waiting for the next write.
    queued: BytesMut,
    /// The buffer the writer last sent, kept for its capacity.
    spare: BytesMut,
    /// TLS records of the last write, kept for its capacity.
    sealed: Vec<u8>,
    /// A thread is writing.
    writing: bool,
}

/// Why [`Connection::submit`] sent nothing.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The connection had ended: a fresh one may take the request.
    Closed(Error),
    /// The request itself cannot be sent.
    Invalid(Error),
}

/// What a leader's read brought.
enum ReadOutcome {
    /// Bytes, buffered.
    Data,
    /// Nothing within the time-out.
    Idle,
    /// The connection ended.
    End(Error),
}

/// One open connection, over a TCP stream (or, in the loom model, an
/// in-memory one).
#[derive(Debug)]
pub(crate) struct Connection<W = TcpStream> {
    stream: W,
    /// TLS, when the client was configured for it: frames are sealed on the
    /// way out and opened on the way in.
    tls: Option<TlsSession>,
    hello: HelloReply,
    read_spin: Duration,
    state: Mutex<State>,
    reader: Mutex<Reader>,
    writer: Mutex<Writer>,
    /// Where waiting threads sleep; who is parked is in `state`.
    parking: Parking,
    /// When the connection opened: the epoch of `last_read_ms`.
    opened: Instant,
    /// Milliseconds from `opened` to the last read, for the idle check
    /// without the lock (`State::last_read` is the exact one).
    last_read_ms: AtomicU64,
    /// Milliseconds from `opened` to the end of the last write (the
    /// heartbeat's look).
    last_write_ms: AtomicU64,
    /// Dropped with the connection: wakes its heartbeat to end.
    _heartbeat_stop: Option<mpsc::Sender<()>>,
    /// Set once the connection ended (`State::table.closed()` is the truth).
    closed: AtomicBool,
}

impl<W: Wire> Connection<W> {
    /// Wraps a connected stream whose HELLO is done, its write time-out set
    /// to [`WRITE_STALL`]. `buf` holds whatever came after the HELLO reply.
    pub(crate) fn new(
        stream: W,
        tls: Option<TlsSession>,
        hello: HelloReply,
        decoder: FrameDecoder,
        buf: BytesMut,
        read_spin: Duration,
        heartbeat_stop: Option<mpsc::Sender<()>>,
    ) -> std::io::Result<Connection<W>> {
        stream.set_read_timeout(None)?;
        Ok(Connection {
            stream,
            tls,
            hello,
            read_spin,
            state: Mutex::new(State {
                table: Table::new(),
                leading: false,
                parked: 0,
                last_read: Instant::now(),
            }),
            reader: Mutex::new(Reader {
                decoder,
                buf,
                chunk: vec![0; READ_CHUNK_BYTES],
                timeout: None,
                ready: Vec::new(),
            }),
            writer: Mutex::new(Writer::default()),
            parking: Parking::new(),
            opened: Instant::now(),
            last_read_ms: AtomicU64::new(0),
            last_write_ms: AtomicU64::new(0),
            _heartbeat_stop: heartbeat_stop,
            closed: AtomicBool::new(false),
        })
    }

    /// Whether something was written within the last `within`.
    fn wrote_within(&self, within: Duration) -> bool {
        let within_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        self.age_ms()
            .saturating_sub(self.last_write_ms.load(Ordering::Relaxed))
            < within_ms
    }

    fn age_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn hello(&self) -> &HelloReply {
        &self.hello
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Whether the connection can take requests. One that went unread for a
    /// while is first read without blocking, so that a close by the server
    /// is noticed here rather than by the request.
    pub(crate) fn usable(&self) -> bool {
        // The common case without the lock: open and read recently.
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let read_ms = self.last_read_ms.load(Ordering::Relaxed);
        if self.age_ms().saturating_sub(read_ms) < IDLE_CHECK_AFTER_MS {
            return true;
        }
        let check = {
            let st = self.state();
            if st.table.closed().is_some() {
                return false;
            }
            !st.leading && st.table.len() == 0 && st.last_read.elapsed() >= IDLE_CHECK_AFTER
        };
        if check {
            self.read_nonblocking();
        }
        self.state().table.closed().is_none()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Registers `requests` (their ids go to `ids`, one per request) and
    /// sends them, or leaves them to the thread writing. A failed write
    /// fails the connection, and so every request in flight, which their
    /// waits report.
    pub(crate) fn submit<F: OutFrame>(
        &self,
        requests: &[F],
        ids: &mut [u32],
        deadline: Instant,
    ) -> std::result::Result<(), Refused> {
        debug_assert_eq!(requests.len(), ids.len());
        self.state()
            .table
            .register_all(ids)
            .map_err(Refused::Closed)?;
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
        if w.writing {
            // The thread writing sends them with its next write.
            return Ok(());
        }
        w.writing = true;
        self.write_queued(w, deadline);
        Ok(())
    }

    /// The writer's loop: sends what is queued, then what was queued
    /// meanwhile, until nothing is left. The caller set `writing`; a failed
    /// write fails the connection.
    fn write_queued<'a>(&'a self, mut w: MutexGuard<'a, Writer>, deadline: Instant) {
        debug_assert!(w.writing);
        loop {
            if w.queued.is_empty() {
                w.writing = false;
                return;
            }
            let spare = std::mem::take(&mut w.spare);
            let mut out = std::mem::replace(&mut w.queued, spare);
            let mut sealed = std::mem::take(&mut w.sealed);
            drop(w);
            // One writer at a time: records are sealed in the order they go out.
            let written = match &self.tls {
                None => self.write_all(&out, deadline),
                Some(tls) => tls
                    .seal(&out, &mut sealed)
                    .and_then(|()| self.write_all(&sealed, deadline)),
            };
            self.last_write_ms.store(self.age_ms(), Ordering::Relaxed);
            out.clear();
            sealed.clear();
            w = lock(&self.writer);
            w.spare = out;
            w.sealed = sealed;
            if let Err(err) = written {
                w.writing = false;
                w.queued.clear();
                drop(w);
                self.fail(&err);
                return;
            }
        }
    }

    /// Writes `out` whole, reading what is waiting whenever the write
    /// stalls; gives up at `deadline`.
    fn write_all(&self, out: &[u8], deadline: Instant) -> Result<()> {
        let mut at = 0;
        while at < out.len() {
            match self.stream.write(&out[at..]) {
                Ok(0) => return Err(Error::io(ErrorKind::WriteZero.into())),
                Ok(n) => at += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if Instant::now() >= deadline {
                        return Err(Error::io(std::io::Error::new(
                            ErrorKind::TimedOut,
                            "the server took nothing more within the request time-out",
                        )));
                    }
                    self.read_nonblocking();
                }
                Err(e) => return Err(Error::io(e)),
            }
        }
        Ok(())
    }

    /// Takes the reader role if nobody holds it and reads whatever is
    /// waiting, without blocking.
    fn read_nonblocking(&self) {
        {
            let mut st = self.state();
            if st.leading || st.table.closed().is_some() {
                return;
            }
            st.leading = true;
        }
        let mut r = lock(&self.reader);
        loop {
            match self.recv_now(&mut r) {
                ReadOutcome::Data => {
                    if !self.dispatch(&mut r, None) {
                        break;
                    }
                }
                ReadOutcome::Idle => break,
                ReadOutcome::End(err) => {
                    self.fail(&err);
                    break;
                }
            }
        }
        drop(r);
        let wake = {
            let mut st = self.state();
            st.leading = false;
            st.hand_off()
        };
        self.parking.wake(wake);
    }

    /// Waits for the reply of `id` until `deadline`: reads the socket when
    /// nobody else does, parks otherwise. `timeout` is only for the error.
    pub(crate) fn wait(&self, id: u32, deadline: Instant, timeout: Duration) -> Result<Reply> {
        #[allow(
            clippy::large_enum_variant,
            reason = "a temporary on the stack, moved once; boxing would allocate per request"
        )]
        enum Step {
            Done(Result<Frame>),
            Lead,
            Park { ticket: u32, left: Duration },
        }
        let mut st = self.state();
        loop {
            let now = Instant::now();
            let s = &mut *st;
            let Some(waiter) = s.table.get_mut(id) else {
                // Only its caller removes an entry; kept total all the same.
                return Err(Error::Disconnected("the request was cancelled".into()));
            };
            let step = if let Some(reply) = waiter.reply.take() {
                Step::Done(reply)
            } else if now >= deadline {
                Step::Done(Err(Error::Timeout(timeout)))
            } else if !s.leading {
                s.leading = true;
                Step::Lead
            } else {
                waiter.parked = wait_bit(id);
                s.parked += 1;
                Step::Park {
                    ticket: self.parking.ticket(),
                    left: deadline - now,
                }
            };
            match step {
                Step::Done(out) => {
                    self.leave(st, id);
                    return out.and_then(pending::read_reply);
                }
                Step::Lead => {
                    drop(st);
                    self.lead(id, deadline);
                    st = self.state();
                    st.leading = false;
                }
                Step::Park { ticket, left } => {
                    drop(st);
                    self.parking.park(ticket, wait_bit(id), left);
                    st = self.state();
                    let s = &mut *st;
                    if let Some(waiter) = s.table.get_mut(id)
                        && std::mem::take(&mut waiter.parked) != 0
                    {
                        s.parked -= 1;
                    }
                }
            }
        }
    }

    /// Removes the entry of `id` on the way out of a wait, passing the
    /// reader role on if needed.
    fn leave(&self, mut st: MutexGuard<'_, State>, id: u32) {
        st.table.remove(id);
        let wake = st.hand_off();
        drop(st);
        self.parking.wake(wake);
    }

    /// Frees the entry of a request whose caller stopped waiting; its late
    /// reply is dropped.
    pub(crate) fn cancel(&self, id: u32) {
        let mut st = self.state();
        if let Some(waiter) = st.table.remove(id)
            && waiter.parked != 0
        {
            st.parked -= 1;
        }
    }

    /// Ends the connection: fails what is in flight, wakes every waiter and
    /// shuts the socket so a blocked read or write returns.
    pub(crate) fn fail(&self, err: &Error) {
        let (first, wake) = {
            let mut st = self.state();
            let first = st.table.closed().is_none();
            let wake = st.fail(err);
            self.closed.store(true, Ordering::Release);
            (first, wake)
        };
        if first {
            tracing::debug!(error = %err, "sluice client: connection ended");
        }
        self.parking.wake(wake);
        self.stream.shutdown();
    }

    /// Requests in flight and whether a thread leads, for tests.
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> (usize, bool, usize) {
        let st = self.state();
        (st.table.len(), st.leading, st.parked)
    }
}

/// A connection's heartbeat thread (see the ground rules): every
/// `interval`, a PING if nothing was written during the last one. Ends when
/// the connection is dropped (`stop`'s sender goes with it) or closed.
pub(crate) fn heartbeat(
    conn: &Weak<Connection>,
    stop: &mpsc::Receiver<()>,
    interval: Duration,
    timeout: Duration,
) {
    let ping = [Request::Ping {
        nonce: 0x6865_6172_7462_6561,
    }];
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(conn) = conn.upgrade() else { return };
        if conn.is_closed() {
            return;
        }
        if conn.wrote_within(interval) {
            continue;
        }
        let deadline = Instant::now() + timeout;
        let mut id = [0u32];
        if conn.submit(&ping, &mut id, deadline).is_err() {
            return;
        }
        // The PONG itself says nothing; a failure ends the connection for
        // everyone, and the next look finds it closed.
        let _ = conn.wait(id[0], deadline, timeout);
    }
}
