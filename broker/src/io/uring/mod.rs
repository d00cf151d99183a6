//! The io_uring backend.
//!
//! One ring per driver, set up with `SINGLE_ISSUER | DEFER_TASKRUN |
//! COOP_TASKRUN | SUBMIT_ALL` where the kernel takes them (falling back step
//! by step to a plain ring). One multishot accept on each listener; one
//! multishot receive per connection into a provided buffer ring; at most one
//! `sendmsg` in flight per connection, gathering up to
//! [`SEND_IOVECS_MAX`] queued buffers; one read on the waker's eventfd.
//! Everything the callback asks for becomes submission entries after the
//! batch, and the whole batch goes to the kernel in one `io_uring_enter`.
//!
//! # Ground rules
//!
//! **Who owns what.** Memory the kernel reads or writes for an operation is
//! the driver's from before the operation is submitted until its last
//! completion has been reaped (the completion without `IORING_CQE_F_MORE`),
//! and is neither freed nor reused before:
//!
//! - the receive buffers and their ring ([`BufRing`], see its ground rules):
//!   allocated once, freed only after every operation has completed;
//! - send data: the `Bytes` an in-flight `sendmsg` points at are the first
//!   entries of the connection's queue, which drops them only when that
//!   send's completion arrives (a `close_now` cancels the send and still
//!   waits for its completion);
//! - the `msghdr` and `iovec` array of a send live in a `Box` per connection
//!   slot, so they do not move when the slot table grows, and are rewritten
//!   only when no send of that slot is in flight;
//! - the 8-byte buffer the eventfd read fills is a `Box` of the driver.
//!
//! **user_data.** `kind << 56 | index << 32 | generation`: `kind` is the
//! operation ([`Kind`]), `index` (24 bits) and `generation` (32 bits) name
//! the connection slot for per-connection operations and are 0 otherwise.
//!
//! **Why a completion never touches a freed buffer.** A connection slot is
//! released (its generation bumped, its queue cleared, its send state
//! reusable) only when its receive is idle, no send and no cancellation of it
//! is in flight, and its socket is closed; closing a connection first
//! cancels its operations and then waits for their completions. So every
//! completion for a slot arrives while the slot is still that connection's,
//! and the generation check on completions is a second line of defence. The
//! driver counts operations in flight; dropping it cancels them all and
//! reaps until the count is zero, and only then frees the buffer ring, the
//! send state and the wake buffer. If that cannot be made sure (the ring
//! fails), it leaks them instead: a leak is safe, a use after free is not
//! (the idea of tokio's `runtime/driver/op.rs`).
//!
//! **Single issuer.** The driver is not `Send`: the thread that opened it is
//! the only one that submits, as `SINGLE_ISSUER` and `DEFER_TASKRUN`
//! require. Other threads reach it only through the [`Waker`].
//!
//! # Files
//!
//! - `mod.rs`: the operation kinds and their user_data, the per-connection
//!   state, the driver and its [`Driver`] contract, the drain at drop;
//! - `setup.rs`: building the ring, the feature checks, the start-up
//!   self-test;
//! - `submit.rs`: what becomes submission entries: the wake read, each
//!   connection's receive, send and cancellations, entering the kernel;
//! - `accept.rs`: arming, pausing and cancelling the multishot accept, and
//!   its completions;
//! - `complete.rs`: reaping the completion queue and the receive and send
//!   completions.
//!
//! The whole module is declared `#[allow(unsafe_code)]`; each of these files
//! has `unsafe` blocks (building a `sendmsg`, pushing entries, registering
//! the buffer ring, taking an accepted descriptor, reading a received
//! buffer, the drop), every one with its `// SAFETY:` comment.

use std::io;
use std::mem::{self, ManuallyDrop};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, types};

use super::buf_ring::BufRing;
use super::connections::Connections;
use super::limits::{DRAIN_ROUNDS, DRAIN_WAIT, STASH_KEEP_BYTES};
use super::reserve::Reserve;
use super::{Backend, Driver, OnEvent, SEND_IOVECS_MAX, Waker};
use crate::sync::Arc;

mod accept;
mod complete;
mod setup;
mod submit;

use submit::push;

/// The buffer group of the provided buffer ring.
const BGID: u16 = 0;

/// What an operation is, in the top byte of its user_data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Kind {
    Accept = 1,
    Wake = 2,
    Recv = 3,
    Send = 4,
    /// A cancellation of a connection's operation.
    CancelConn = 5,
    /// The cancellation of the multishot accept.
    CancelAccept = 6,
    /// A cancel-everything at drop.
    CancelAll = 7,
    /// The start-up self-test's receive.
    SelfTest = 8,
}

impl Kind {
    fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => Kind::Accept,
            2 => Kind::Wake,
            3 => Kind::Recv,
            4 => Kind::Send,
            5 => Kind::CancelConn,
            6 => Kind::CancelAccept,
            7 => Kind::CancelAll,
            8 => Kind::SelfTest,
            _ => return None,
        })
    }
}

const INDEX_MASK: u64 = 0xff_ffff;

fn encode(kind: Kind, index: u32, generation: u32) -> u64 {
    (kind as u64) << 56 | (u64::from(index) & INDEX_MASK) << 32 | u64::from(generation)
}

fn decode(user_data: u64) -> (Option<Kind>, u32, u32) {
    (
        Kind::from_u8((user_data >> 56) as u8),
        ((user_data >> 32) & INDEX_MASK) as u32,
        user_data as u32,
    )
}

/// The state of a connection's multishot receive.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recv {
    Idle,
    Armed,
    /// A cancellation was submitted; the final completion is due.
    Cancelling,
}

/// The `sendmsg` arguments of one slot (boxed: the kernel holds pointers).
struct SendArgs {
    msg: libc::msghdr,
    iov: [libc::iovec; SEND_IOVECS_MAX],
}

impl SendArgs {
    fn new() -> Box<Self> {
        Box::new(Self {
            // SAFETY: msghdr is plain data; all zeroes is an empty message.
            msg: unsafe { mem::zeroed() },
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; SEND_IOVECS_MAX],
        })
    }
}

/// The io_uring side of one connection slot.
struct UConn {
    fd: Option<OwnedFd>,
    recv: Recv,
    /// Bytes of the `sendmsg` in flight; `None` when there is none.
    send_len: Option<usize>,
    send_cancelled: bool,
    /// Cancellations in flight.
    cancels: u32,
    /// The peer ended its stream.
    eof: bool,
    /// Bytes received while the caller was not reading, delivered on resume.
    stash: Vec<u8>,
    send: Box<SendArgs>,
}

impl UConn {
    fn new() -> Self {
        Self {
            fd: None,
            recv: Recv::Idle,
            send_len: None,
            send_cancelled: false,
            cancels: 0,
            eof: false,
            stash: Vec::new(),
            send: SendArgs::new(),
        }
    }

    fn reset(&mut self, fd: OwnedFd) {
        debug_assert!(self.recv == Recv::Idle && self.send_len.is_none() && self.cancels == 0);
        self.fd = Some(fd);
        self.send_cancelled = false;
        self.eof = false;
        self.stash.clear();
        if self.stash.capacity() > STASH_KEEP_BYTES {
            self.stash = Vec::new();
        }
    }
}

/// One listening socket and its multishot accept.
#[derive(Debug)]
struct UListener {
    /// `None` once closed.
    fd: Option<OwnedFd>,
    /// Told to stop accepting while others go on.
    stopping: bool,
    addr: SocketAddr,
    accept: Accept,
    /// What a connection refused when out of descriptors is sent.
    shed_reply: Arc<[u8]>,
}

/// The state of a multishot accept.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Accept {
    Idle,
    Armed,
    /// Out of descriptors or memory: re-arm at this time.
    Paused(Instant),
    /// Stopping: the cancellation was submitted.
    Cancelling,
    /// The listener is closed.
    Stopped,
}

/// How a wait in `io_uring_enter` ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Waited {
    Completed,
    TimedOut,
    Interrupted,
}

/// The io_uring driver.
pub(crate) struct UringDriver {
    ring: IoUring,
    setup: &'static str,
    ops: Connections,
    /// Per-slot io_uring state, parallel to the slots of `ops`.
    conns: ManuallyDrop<Vec<UConn>>,
    bufs: ManuallyDrop<BufRing>,
    wake_buf: ManuallyDrop<Box<u64>>,
    waker: Arc<Waker>,
    wake_armed: bool,
    /// The listeners, by [`ListenerId`](crate::io::ListenerId); a
    /// listener's accept and its cancellation carry its index.
    listeners: Vec<UListener>,
    accepting: bool,
    /// Operations submitted (or queued) whose last completion is not reaped.
    inflight: usize,
    /// Completions copied out of the ring, reused across batches.
    cqes: Vec<(u64, i32, u32)>,
    /// The spare descriptor for refusing connections when out of them.
    reserve: Reserve,
}

impl std::fmt::Debug for UringDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringDriver")
            .field("setup", &self.setup)
            .field("listeners", &self.listeners)
            .field("inflight", &self.inflight)
            .field("connections", &self.ops)
            .finish_non_exhaustive()
    }
}
impl UringDriver {
    /// How long the next wait may last: until `deadline`, and no later than
    /// a paused accept's re-arm time.
    fn wait_time(&self, deadline: Option<Instant>) -> Option<Duration> {
        let pause = self
            .listeners
            .iter()
            .filter_map(|l| match l.accept {
                Accept::Paused(until) if self.accepting => Some(until),
                _ => None,
            })
            .min();
        super::wait_time(deadline, pause)
    }

    /// Cancels everything and reaps until nothing is in flight. Returns
    /// whether it got there.
    fn drain(&mut self) -> bool {
        for _ in 0..DRAIN_ROUNDS {
            if self.inflight == 0 {
                return true;
            }
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(encode(Kind::CancelAll, 0, 0));
            if push(&mut self.ring, &cancel).is_err() {
                return false;
            }
            self.inflight += 1;
            let ts = types::Timespec::from(DRAIN_WAIT);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
                    ) => {}
                Err(_) => return false,
            }
            let mut cq = self.ring.completion();
            cq.sync();
            for cqe in cq {
                if !cqueue::more(cqe.flags()) {
                    self.inflight = self.inflight.saturating_sub(1);
                }
                if let Some(bid) = cqueue::buffer_select(cqe.flags()) {
                    self.bufs.recycle(bid);
                }
                if decode(cqe.user_data()).0 == Some(Kind::Accept) && cqe.result() >= 0 {
                    // SAFETY: a new descriptor from accept, owned by nobody.
                    drop(unsafe { OwnedFd::from_raw_fd(cqe.result()) });
                }
            }
        }
        self.inflight == 0
    }
}

impl Driver for UringDriver {
    fn backend(&self) -> Backend {
        Backend::IoUring
    }

    fn setup_detail(&self) -> &str {
        self.setup
    }

    fn listener_addr(&self, id: crate::io::ListenerId) -> Option<SocketAddr> {
        self.listeners.get(usize::from(id.0)).map(|l| l.addr)
    }

    fn poll(&mut self, timeout: Option<Duration>, cb: &mut OnEvent<'_>) -> io::Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let mut delivered = self.process(cb)?;
            let wait = if delivered > 0 {
                Some(Duration::ZERO)
            } else {
                self.wait_time(deadline)
            };
            let waited = self.enter(wait)?;
            delivered += self.reap(cb)?;
            delivered += self.process(cb)?;
            if !self.ring.submission().is_empty() {
                // Replies go out now, not at the caller's next poll; what
                // the kernel completes inline is reaped right away, and what
                // that produced is submitted too (its completions wait for
                // the next poll).
                self.submit_now()?;
                delivered += self.reap(cb)?;
                delivered += self.process(cb)?;
                if !self.ring.submission().is_empty() {
                    self.submit_now()?;
                }
            }
            // A wait cut short by a paused accept's re-arm time goes on.
            let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
            if delivered > 0 || timed_out || waited == Waited::Interrupted {
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

    fn stop_accepting_except(&mut self, keep: Option<crate::io::ListenerId>) {
        match keep {
            None => self.accepting = false,
            Some(k) => {
                for (i, l) in self.listeners.iter_mut().enumerate() {
                    l.stopping |= usize::from(k.0) != i;
                }
            }
        }
    }
}

impl Drop for UringDriver {
    fn drop(&mut self) {
        if self.drain() {
            // The ring no longer needs the buffer ring; failing to say so
            // only matters to a ring that is about to close anyway.
            let _ = self.ring.submitter().unregister_buf_ring(BGID);
            // SAFETY: nothing is in flight, so no completion can reach these
            // any more, and they are not used after this.
            unsafe {
                ManuallyDrop::drop(&mut self.bufs);
                ManuallyDrop::drop(&mut self.conns);
                ManuallyDrop::drop(&mut self.wake_buf);
            }
        }
        // Otherwise they leak: the kernel may still write into them.
    }
}

#[cfg(test)]
mod tests;
