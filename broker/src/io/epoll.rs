//! The epoll backend: the fallback where io_uring is unavailable.
//!
//! Non-blocking sockets; the listener and the waker's eventfd are
//! level-triggered, connections edge-triggered (`EPOLLET`), for two reasons:
//!
//! - backpressure costs no syscall: pausing a connection just stops reading
//!   it, where level triggering would keep reporting it until its interest
//!   was changed with `epoll_ctl` (and again on resume);
//! - one wake-up per burst of arrivals rather than one per wait while data
//!   sits unread.
//!
//! The price of edge triggering is that the driver must remember readiness
//! itself: a connection is `readable` from its edge until a read returns
//! `EAGAIN` or less than a full buffer (a short read shows the socket was
//! drained, as tokio's `poll_evented.rs` relies on), unless the edge also
//! signalled the peer's end (`EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`): bytes
//! and the end of stream often share one edge, and no edge follows, so such
//! a connection is read until a read returns 0 or fails (tokio likewise
//! keeps "read closed" apart from "readable"). Each connection reads at
//! most [`READ_BUDGET`] buffers per poll so one busy peer cannot starve the
//! others; one with data left is served again at the next poll without
//! waiting. Reads go into one reusable buffer, lent to the callback. Sends
//! are a non-blocking `sendmsg` (`MSG_NOSIGNAL`) gathering up to
//! [`SEND_IOVECS_MAX`] queued buffers, written as soon as the batch's
//! callbacks are done; `EPOLLOUT` interest is added only while a send is
//! blocked with bytes queued, and removed once the queue drains.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::connections::{Admission, CloseReq, Connections};
use super::reserve::Reserve;
use super::{
    ACCEPT_PAUSE_MS, Backend, Driver, DriverConfig, Event, LISTENERS_MAX, ListenerId, OnEvent,
    OpenError, SEND_IOVECS_MAX, Waker, sys,
};
use crate::sync::Arc;

use super::limits::{ACCEPT_BATCH, READ_BUDGET};

const TOKEN_WAKE: u64 = u64::MAX;
/// Listener `i`'s token is `TOKEN_LISTENER + i`; connection tokens have
/// their top byte clear (slot indexes are below 2^24).
const TOKEN_LISTENER: u64 = u64::MAX - 1 - LISTENERS_MAX as u64;

const CONN_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32;

fn token(index: u32, generation: u32) -> u64 {
    u64::from(index) << 32 | u64::from(generation)
}

/// The epoll side of one connection slot.
#[derive(Debug, Default)]
struct EConn {
    fd: Option<OwnedFd>,
    /// An edge arrived and the socket has not been read dry since.
    readable: bool,
    /// An edge signalled the peer's end of stream or an error: a short read
    /// no longer means the socket is drained, since the end is still to be
    /// read and no further edge will announce it.
    peer_closed: bool,
    /// The last send could not write everything; waiting for `EPOLLOUT`.
    write_blocked: bool,
    /// `EPOLLOUT` is in the interest set.
    out_registered: bool,
}

/// One listening socket.
#[derive(Debug)]
struct EListener {
    /// `None` once the driver stopped accepting.
    fd: Option<OwnedFd>,
    addr: SocketAddr,
    /// What a connection refused when out of descriptors is sent.
    shed_reply: Arc<[u8]>,
}

/// The epoll driver.
pub(crate) struct EpollDriver {
    epoll: OwnedFd,
    ops: Connections,
    conns: Vec<EConn>,
    buf: Box<[u8]>,
    events: Vec<libc::epoll_event>,
    waker: Arc<Waker>,
    listeners: Vec<EListener>,
    /// Accepting is paused on every listener until then.
    accept_paused: Option<Instant>,
    /// Connections whose read budget ran out with data left.
    carry: Vec<u32>,
    /// The spare descriptor for refusing connections when out of them.
    reserve: Reserve,
}

impl std::fmt::Debug for EpollDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpollDriver")
            .field("epoll", &self.epoll)
            .field("listeners", &self.listeners)
            .field("accept_paused", &self.accept_paused)
            .field("connections", &self.ops)
            .finish_non_exhaustive()
    }
}

impl EpollDriver {
    pub(crate) fn open(config: &DriverConfig) -> Result<Self, OpenError> {
        let epoll = sys::epoll_create().map_err(OpenError::Epoll)?;
        let waker = Arc::new(Waker::new().map_err(OpenError::Waker)?);
        sys::epoll_ctl(
            epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            waker.raw_fd(),
            libc::EPOLLIN as u32,
            TOKEN_WAKE,
        )
        .map_err(OpenError::Epoll)?;
        let mut listeners = Vec::new();
        for (i, spec) in config.listeners().into_iter().enumerate() {
            let listen_error = |error| OpenError::Listen {
                addr: spec.addr,
                error,
            };
            let fd = sys::listen(&spec.addr, config.reuse_port, config.listen_backlog, true)
                .map_err(listen_error)?;
            let addr = sys::local_addr(fd.as_raw_fd()).map_err(listen_error)?;
            sys::epoll_ctl(
                epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                libc::EPOLLIN as u32,
                TOKEN_LISTENER + i as u64,
            )
            .map_err(OpenError::Epoll)?;
            listeners.push(EListener {
                fd: Some(fd),
                addr,
                shed_reply: spec.shed_reply,
            });
        }
        Ok(Self {
            epoll,
            ops: Connections::new(config.connections_max, config.refused_connections_max),
            conns: Vec::new(),
            buf: vec![0; config.recv_buffer_bytes as usize].into_boxed_slice(),
            events: Vec::with_capacity(config.ring_entries as usize),
            waker,
            listeners,
            accept_paused: None,
            carry: Vec::new(),
            reserve: Reserve::new(),
        })
    }

    /// Watches every open listener for accepts (`events`: `EPOLLIN`) or
    /// stops watching them (0).
    fn watch_listeners(&self, events: u32) -> io::Result<()> {
        for (i, l) in self.listeners.iter().enumerate() {
            if let Some(fd) = &l.fd {
                sys::epoll_ctl(
                    self.epoll.as_raw_fd(),
                    libc::EPOLL_CTL_MOD,
                    fd.as_raw_fd(),
                    events,
                    TOKEN_LISTENER + i as u64,
                )?;
            }
        }
        Ok(())
    }

    fn process(&mut self, cb: &mut OnEvent<'_>) -> io::Result<usize> {
        if let Some(until) = self.accept_paused {
            if Instant::now() >= until {
                self.watch_listeners(libc::EPOLLIN as u32)?;
                self.accept_paused = None;
            }
        }
        for k in 0..self.carry.len() {
            let index = self.carry[k];
            self.ops.mark_dirty(index);
        }
        self.carry.clear();
        let mut delivered = 0;
        while let Some(index) = self.ops.next_dirty() {
            delivered += self.service(index, cb)?;
        }
        Ok(delivered)
    }

    /// Reads, writes and closes one connection as its state asks.
    fn service(&mut self, index: u32, cb: &mut OnEvent<'_>) -> io::Result<usize> {
        let i = index as usize;
        if !self.ops.slot(index).in_use {
            return Ok(0);
        }
        let Some(fd) = self.conns[i].fd.as_ref().map(AsRawFd::as_raw_fd) else {
            return Ok(0);
        };
        let mut delivered = 0;

        let mut budget = READ_BUDGET;
        loop {
            let slot = self.ops.slot(index);
            let wanted = slot.user_open
                && slot.close == CloseReq::None
                && slot.reading
                && self.conns[i].readable;
            if !wanted {
                break;
            }
            if budget == 0 {
                self.carry.push(index);
                break;
            }
            budget -= 1;
            match sys::recv(fd, &mut self.buf) {
                Ok(0) => {
                    self.conns[i].readable = false;
                    if let Some(conn) = self.ops.take_open(index) {
                        cb(&mut self.ops, Event::Closed { conn, error: None });
                        delivered += 1;
                    }
                    // As with io_uring: after the peer's end, close at once.
                    self.ops.slot_mut(index).close = CloseReq::Now;
                }
                Ok(n) => {
                    if n < self.buf.len() && !self.conns[i].peer_closed {
                        self.conns[i].readable = false;
                    }
                    let conn = self.ops.id(index);
                    cb(
                        &mut self.ops,
                        Event::Data {
                            conn,
                            bytes: &self.buf[..n],
                        },
                    );
                    delivered += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.conns[i].readable = false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.conns[i].readable = false;
                    delivered += self.ops.fail(index, e, cb);
                }
            }
        }

        if self.ops.slot(index).close != CloseReq::Now && !self.conns[i].write_blocked {
            if let Err(e) = self.flush(index, fd) {
                delivered += self.ops.fail(index, e, cb);
            }
        }

        let slot = self.ops.slot(index);
        let close = slot.close;
        let want_out =
            close != CloseReq::Now && self.conns[i].write_blocked && !slot.queue.is_empty();
        if close == CloseReq::Now {
            self.ops.drop_queue(index);
        }
        let closing = close == CloseReq::Now
            || (close == CloseReq::AfterFlush && self.ops.slot(index).queue.is_empty());
        if closing {
            // Closing the only descriptor also removes it from the epoll set.
            self.conns[i] = EConn::default();
            if let Some(conn) = self.ops.take_open(index) {
                cb(&mut self.ops, Event::Closed { conn, error: None });
                delivered += 1;
            }
            self.ops.release(index);
            return Ok(delivered);
        }
        if want_out != self.conns[i].out_registered {
            let mut events = CONN_EVENTS;
            if want_out {
                events |= libc::EPOLLOUT as u32;
            }
            let generation = self.ops.slot(index).generation;
            sys::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_MOD,
                fd,
                events,
                token(index, generation),
            )?;
            self.conns[i].out_registered = want_out;
        }
        Ok(delivered)
    }

    /// Writes queued sends until the queue is empty or the socket is full.
    fn flush(&mut self, index: u32, fd: RawFd) -> io::Result<()> {
        loop {
            let queue = &self.ops.slot(index).queue;
            if queue.is_empty() {
                return Ok(());
            }
            let mut iov = [IoSlice::new(&[]); SEND_IOVECS_MAX];
            let mut count = 0;
            let mut total = 0;
            for (slice, data) in iov.iter_mut().zip(queue.iter()) {
                *slice = IoSlice::new(data);
                total += data.len();
                count += 1;
            }
            match sys::sendmsg(fd, &iov[..count]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    self.ops.consume_sent(index, n);
                    if n < total {
                        // The socket buffer is full.
                        self.conns[index as usize].write_blocked = true;
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.conns[index as usize].write_blocked = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn accept_ready(&mut self, l: usize, cb: &mut OnEvent<'_>) -> io::Result<usize> {
        let mut delivered = 0;
        // Listener tokens are below LISTENERS_MAX.
        let listener = ListenerId(u8::try_from(l).unwrap_or(u8::MAX));
        for _ in 0..ACCEPT_BATCH {
            let Some(listener_fd) = self
                .listeners
                .get(l)
                .and_then(|x| x.fd.as_ref())
                .map(AsRawFd::as_raw_fd)
            else {
                break;
            };
            let (fd, peer) = match sys::accept(listener_fd) {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    // Out of descriptors: refuse what waits in the backlog
                    // with the reserve descriptor, so those clients get an
                    // answer instead of hanging.
                    let shed = if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        self.reserve
                            .shed(listener_fd, &self.listeners[l].shed_reply)
                    } else {
                        0
                    };
                    cb(&mut self.ops, Event::AcceptFailed { error: e, shed });
                    // Then stop watching the listeners for a while instead
                    // of spinning on them.
                    self.watch_listeners(0)?;
                    self.accept_paused =
                        Some(Instant::now() + Duration::from_millis(ACCEPT_PAUSE_MS));
                    break;
                }
                // A connection aborted before it was accepted, and the like.
                Err(_) => continue,
            };
            // Failing to set it only costs latency on a socket that works.
            let _ = sys::set_nodelay(fd.as_raw_fd());
            let (conn, refused) = match self.ops.admit() {
                Admission::Accepted(conn) => (conn, false),
                Admission::Refused(conn) => (conn, true),
                Admission::Full => continue,
            };
            let registered = sys::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                CONN_EVENTS,
                token(conn.index(), conn.generation()),
            );
            if registered.is_err() {
                // Never reported, so simply forgotten.
                self.ops.release(conn.index());
                continue;
            }
            let i = conn.index() as usize;
            if self.conns.len() <= i {
                self.conns.resize_with(i + 1, EConn::default);
            }
            self.conns[i] = EConn {
                fd: Some(fd),
                // Bytes may have arrived before registration (an end of
                // stream too: registering a ready socket reports its edge).
                readable: true,
                peer_closed: false,
                write_blocked: false,
                out_registered: false,
            };
            self.ops.report_accept(cb, conn, peer, listener, refused);
            delivered += 1;
        }
        Ok(delivered)
    }

    fn wait_time(&self, deadline: Option<Instant>) -> Option<Duration> {
        super::wait_time(deadline, self.accept_paused)
    }
}

impl Driver for EpollDriver {
    fn backend(&self) -> Backend {
        Backend::Epoll
    }

    fn setup_detail(&self) -> &str {
        "edge-triggered connections"
    }

    fn listener_addr(&self, id: ListenerId) -> Option<SocketAddr> {
        self.listeners.get(usize::from(id.0)).map(|l| l.addr)
    }

    fn poll(&mut self, timeout: Option<Duration>, cb: &mut OnEvent<'_>) -> io::Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let mut delivered = self.process(cb)?;
            let wait = if delivered > 0 || !self.carry.is_empty() {
                Some(Duration::ZERO)
            } else {
                self.wait_time(deadline)
            };
            let n = match sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, wait) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
                Err(e) => return Err(e),
            };
            for k in 0..n {
                let event = self.events[k];
                let (token, flags) = (event.u64, event.events);
                match token {
                    t if (TOKEN_LISTENER..TOKEN_WAKE).contains(&t) => {
                        // Below LISTENERS_MAX.
                        let l = usize::try_from(t - TOKEN_LISTENER).unwrap_or(usize::MAX);
                        delivered += self.accept_ready(l, cb)?;
                    }
                    TOKEN_WAKE => {
                        match sys::eventfd_read(self.waker.raw_fd()) {
                            Ok(_) => {}
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                        self.waker.rearm();
                        cb(&mut self.ops, Event::Woken);
                        delivered += 1;
                    }
                    _ => {
                        let (index, generation) = ((token >> 32) as u32, token as u32);
                        if !self.ops.matches(index, generation) {
                            continue;
                        }
                        let conn = &mut self.conns[index as usize];
                        let hangup = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
                        if flags & ((libc::EPOLLIN | libc::EPOLLRDHUP) as u32 | hangup) != 0 {
                            conn.readable = true;
                        }
                        if flags & (libc::EPOLLRDHUP as u32 | hangup) != 0 {
                            conn.peer_closed = true;
                        }
                        if flags & (libc::EPOLLOUT as u32 | hangup) != 0 {
                            conn.write_blocked = false;
                        }
                        self.ops.mark_dirty(index);
                    }
                }
            }
            delivered += self.process(cb)?;
            // A wait cut short by a paused accept's re-arm time, or a turn
            // for connections with data left that gave nothing, goes on.
            let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
            if delivered > 0 || timed_out {
                return Ok(());
            }
        }
    }

    fn connections(&self) -> &Connections {
        &self.ops
    }

    fn connections_mut(&mut self) -> &mut Connections {
        &mut self.ops
    }

    fn waker(&self) -> Arc<Waker> {
        Arc::clone(&self.waker)
    }

    fn stop_accepting_except(&mut self, keep: Option<ListenerId>) {
        // Closing a listener removes it from the epoll set.
        for (i, l) in self.listeners.iter_mut().enumerate() {
            if keep.is_none_or(|k| usize::from(k.0) != i) {
                l.fd = None;
            }
        }
        if keep.is_none() {
            self.accept_paused = None;
        }
    }
}
