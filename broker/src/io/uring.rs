//! The io_uring backend.
//!
//! One ring per driver, set up with `SINGLE_ISSUER | DEFER_TASKRUN |
//! COOP_TASKRUN | SUBMIT_ALL` where the kernel takes them (falling back step
//! by step to a plain ring). One multishot accept on the listener; one
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

use std::io;
use std::mem::{self, ManuallyDrop};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{IoUring, Probe, cqueue, opcode, squeue, types};

use super::buf_ring::BufRing;
use super::connections::{Admission, CloseReq, Connections};
use super::reserve::Reserve;
use super::{
    ACCEPT_PAUSE_MS, Backend, ConnId, Driver, DriverConfig, Event, OnEvent, OpenError,
    SEND_IOVECS_MAX, UringUnavailable, Waker, sys,
};
use crate::sync::Arc;

/// The buffer group of the provided buffer ring.
const BGID: u16 = 0;
use super::limits::{DRAIN_ROUNDS, DRAIN_WAIT, SELF_TEST_WAIT, STASH_KEEP_BYTES};

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

/// The state of the multishot accept.
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

/// Pushes one entry, submitting to make room when the queue is full.
fn push(ring: &mut IoUring, entry: &squeue::Entry) -> io::Result<()> {
    for _ in 0..2 {
        // SAFETY: every entry the driver builds points only at memory the
        // ground rules keep alive and unmoved until its last completion.
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return Ok(());
        }
        ring.submit()?;
    }
    Err(io::Error::other("io_uring submission queue stays full"))
}

/// Applies one set of setup flags to a ring builder.
type SetupFlags = fn(&mut io_uring::Builder);

/// Builds the ring with the best flags the kernel accepts.
fn build_ring(entries: u32) -> io::Result<(IoUring, &'static str)> {
    let cq_entries = entries.saturating_mul(4);
    let attempts: [(&'static str, SetupFlags); 4] = [
        ("single_issuer+defer_taskrun+coop_taskrun+submit_all", |b| {
            b.setup_single_issuer()
                .setup_defer_taskrun()
                .setup_coop_taskrun()
                .setup_submit_all();
        }),
        ("single_issuer+coop_taskrun+submit_all", |b| {
            b.setup_single_issuer()
                .setup_coop_taskrun()
                .setup_submit_all();
        }),
        ("coop_taskrun+submit_all", |b| {
            b.setup_coop_taskrun().setup_submit_all();
        }),
        ("plain", |_| {}),
    ];
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for (name, flags) in attempts {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(cq_entries).setup_clamp();
        flags(&mut builder);
        match builder.build(entries) {
            Ok(ring) => return Ok((ring, name)),
            // EINVAL: a flag this kernel does not know; try fewer.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
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
    listener: Option<OwnedFd>,
    local_addr: Option<SocketAddr>,
    accept: Accept,
    accepting: bool,
    /// Operations submitted (or queued) whose last completion is not reaped.
    inflight: usize,
    /// Completions copied out of the ring, reused across batches.
    cqes: Vec<(u64, i32, u32)>,
    /// The spare descriptor for refusing connections when out of them.
    reserve: Reserve,
    /// What a refused connection is sent then.
    shed_reply: Arc<[u8]>,
}

impl std::fmt::Debug for UringDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringDriver")
            .field("setup", &self.setup)
            .field("local_addr", &self.local_addr)
            .field("accept", &self.accept)
            .field("inflight", &self.inflight)
            .field("connections", &self.ops)
            .finish_non_exhaustive()
    }
}

impl UringDriver {
    pub(crate) fn open(config: &DriverConfig) -> Result<Self, OpenError> {
        let (ring, setup) = build_ring(config.ring_entries).map_err(UringUnavailable::Setup)?;
        let params = ring.params();
        if !params.is_feature_ext_arg() {
            return Err(UringUnavailable::Unsupported("IORING_FEAT_EXT_ARG (Linux 5.11)").into());
        }
        if !params.is_feature_nodrop() {
            return Err(UringUnavailable::Unsupported("IORING_FEAT_NODROP (Linux 5.5)").into());
        }
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|error| UringUnavailable::Register {
                what: "probe",
                error,
            })?;
        for (code, name) in [
            (opcode::AcceptMulti::CODE, "IORING_OP_ACCEPT"),
            (opcode::RecvMulti::CODE, "IORING_OP_RECV"),
            (opcode::SendMsg::CODE, "IORING_OP_SENDMSG"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
            (opcode::Read::CODE, "IORING_OP_READ"),
        ] {
            if !probe.is_supported(code) {
                return Err(UringUnavailable::Unsupported(name).into());
            }
        }
        let bufs = BufRing::new(config.recv_buffer_count, config.recv_buffer_bytes)
            .map_err(OpenError::Buffers)?;
        // SAFETY: the ring memory stays allocated and in place until the
        // driver's drop has reaped every operation (ground rules); `bufs`
        // moves into the driver below, which moves only the handle.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(bufs.ring_addr(), bufs.entries(), BGID, 0)
        }
        .map_err(|error| UringUnavailable::Register {
            what: "provided buffer ring",
            error,
        })?;
        let waker = Arc::new(Waker::new().map_err(OpenError::Waker)?);
        let cq_entries = ring.params().cq_entries() as usize;
        let mut driver = Self {
            ring,
            setup,
            ops: Connections::new(config.connections_max, config.refused_connections_max),
            conns: ManuallyDrop::new(Vec::new()),
            bufs: ManuallyDrop::new(bufs),
            wake_buf: ManuallyDrop::new(Box::new(0)),
            waker,
            wake_armed: false,
            listener: None,
            local_addr: None,
            accept: Accept::Stopped,
            accepting: false,
            inflight: 0,
            cqes: Vec::with_capacity(cq_entries),
            reserve: Reserve::new(),
            shed_reply: config.shed_reply.clone(),
        };
        driver.self_test()?;
        let listener = sys::listen(
            &config.listen,
            config.reuse_port,
            config.listen_backlog,
            false,
        )
        .map_err(|error| OpenError::Listen {
            addr: config.listen,
            error,
        })?;
        let local = sys::local_addr(listener.as_raw_fd()).map_err(|error| OpenError::Listen {
            addr: config.listen,
            error,
        })?;
        driver.listener = Some(listener);
        driver.local_addr = Some(local);
        driver.accept = Accept::Idle;
        driver.accepting = true;
        Ok(driver)
    }

    /// Checks that multishot receive into provided buffers works (Linux
    /// 6.0), on a socket pair: one byte must arrive with `F_MORE` set, and
    /// the end of stream must end the receive.
    fn self_test(&mut self) -> Result<(), UringUnavailable> {
        let fail = |what: String| UringUnavailable::SelfTest(what);
        let (rx, tx) = sys::socketpair().map_err(|e| fail(format!("socketpair: {e}")))?;
        let entry = opcode::RecvMulti::new(types::Fd(rx.as_raw_fd()), BGID)
            .build()
            .user_data(encode(Kind::SelfTest, 0, 0));
        push(&mut self.ring, &entry).map_err(|e| fail(format!("submit: {e}")))?;
        self.inflight += 1;
        sys::write(tx.as_raw_fd(), b"x").map_err(|e| fail(format!("write: {e}")))?;
        let (res, flags) = self.self_test_wait()?;
        if res != 1 || cqueue::buffer_select(flags).is_none() {
            return Err(fail(format!(
                "receive into a provided buffer gave {}",
                describe_res(res)
            )));
        }
        if !cqueue::more(flags) {
            return Err(fail("multishot receive ended after one completion".into()));
        }
        drop(tx);
        let (res, flags) = self.self_test_wait()?;
        if res != 0 || cqueue::more(flags) {
            return Err(fail(format!(
                "end of stream gave {} (more: {})",
                describe_res(res),
                cqueue::more(flags)
            )));
        }
        Ok(())
    }

    /// Waits for the self-test receive's next completion.
    fn self_test_wait(&mut self) -> Result<(i32, u32), UringUnavailable> {
        let deadline = Instant::now() + SELF_TEST_WAIT;
        loop {
            let found = {
                let mut cq = self.ring.completion();
                cq.sync();
                cq.next().map(|c| (c.user_data(), c.result(), c.flags()))
            };
            if let Some((user_data, res, flags)) = found {
                if !cqueue::more(flags) {
                    self.inflight = self.inflight.saturating_sub(1);
                }
                if let Some(bid) = cqueue::buffer_select(flags) {
                    self.bufs.recycle(bid);
                }
                if decode(user_data).0 == Some(Kind::SelfTest) {
                    return Ok((res, flags));
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(UringUnavailable::SelfTest("no completion in time".into()));
            }
            let ts = types::Timespec::from(left);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
                Err(e) => return Err(UringUnavailable::SelfTest(format!("wait: {e}"))),
            }
        }
    }

    /// Acts on everything pending: the accept and wake operations, then each
    /// dirty connection. Returns how many events it handed out.
    fn process(&mut self, cb: &mut OnEvent<'_>) -> io::Result<usize> {
        self.process_accept()?;
        if !self.wake_armed {
            let entry = opcode::Read::new(
                types::Fd(self.waker.raw_fd()),
                (&raw mut **self.wake_buf).cast::<u8>(),
                mem::size_of::<u64>() as u32,
            )
            .build()
            .user_data(encode(Kind::Wake, 0, 0));
            push(&mut self.ring, &entry)?;
            self.inflight += 1;
            self.wake_armed = true;
        }
        let mut delivered = 0;
        while let Some(index) = self.ops.next_dirty() {
            delivered += self.service(index, cb)?;
        }
        Ok(delivered)
    }

    fn process_accept(&mut self) -> io::Result<()> {
        let Some(listener) = &self.listener else {
            return Ok(());
        };
        if !self.accepting {
            match self.accept {
                Accept::Armed => {
                    let entry = opcode::AsyncCancel::new(encode(Kind::Accept, 0, 0))
                        .build()
                        .user_data(encode(Kind::CancelAccept, 0, 0));
                    push(&mut self.ring, &entry)?;
                    self.inflight += 1;
                    self.accept = Accept::Cancelling;
                }
                Accept::Idle | Accept::Paused(_) => {
                    self.listener = None;
                    self.accept = Accept::Stopped;
                }
                Accept::Cancelling | Accept::Stopped => {}
            }
            return Ok(());
        }
        let arm = match self.accept {
            Accept::Idle => true,
            Accept::Paused(until) => Instant::now() >= until,
            _ => false,
        };
        if arm {
            let entry = opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
                .flags(libc::SOCK_CLOEXEC)
                .build()
                .user_data(encode(Kind::Accept, 0, 0));
            push(&mut self.ring, &entry)?;
            self.inflight += 1;
            self.accept = Accept::Armed;
        }
        Ok(())
    }

    /// Brings one connection's operations in line with its state.
    fn service(&mut self, index: u32, cb: &mut OnEvent<'_>) -> io::Result<usize> {
        let i = index as usize;
        if !self.ops.slot(index).in_use {
            return Ok(0);
        }
        let mut delivered = 0;

        // Bytes received while paused go first, once reading resumes.
        let slot = self.ops.slot(index);
        if slot.user_open
            && slot.close == CloseReq::None
            && slot.reading
            && !self.conns[i].stash.is_empty()
        {
            let mut stash = mem::take(&mut self.conns[i].stash);
            let conn = self.ops.id(index);
            cb(
                &mut self.ops,
                Event::Data {
                    conn,
                    bytes: &stash,
                },
            );
            delivered += 1;
            stash.clear();
            if stash.capacity() <= STASH_KEEP_BYTES {
                self.conns[i].stash = stash;
            }
        }

        // The end of stream is reported once the bytes before it are out;
        // then the connection closes without flushing (see Event::Closed).
        if self.conns[i].eof && self.conns[i].stash.is_empty() {
            if let Some(conn) = self.ops.take_open(index) {
                cb(&mut self.ops, Event::Closed { conn, error: None });
                delivered += 1;
            }
            self.ops.slot_mut(index).close = CloseReq::Now;
        }

        let slot = self.ops.slot(index);
        let u = &mut self.conns[i];
        let Some(fd) = u.fd.as_ref().map(AsRawFd::as_raw_fd) else {
            return Ok(delivered);
        };
        let generation = slot.generation;
        let want_recv = slot.user_open && slot.close == CloseReq::None && slot.reading && !u.eof;
        match (want_recv, u.recv) {
            (true, Recv::Idle) => {
                let entry = opcode::RecvMulti::new(types::Fd(fd), BGID)
                    .build()
                    .user_data(encode(Kind::Recv, index, generation));
                push(&mut self.ring, &entry)?;
                self.inflight += 1;
                u.recv = Recv::Armed;
            }
            (false, Recv::Armed) => {
                let entry = opcode::AsyncCancel::new(encode(Kind::Recv, index, generation))
                    .build()
                    .user_data(encode(Kind::CancelConn, index, generation));
                push(&mut self.ring, &entry)?;
                self.inflight += 1;
                u.cancels += 1;
                u.recv = Recv::Cancelling;
            }
            _ => {}
        }

        if slot.close == CloseReq::Now {
            if u.send_len.is_some() && !u.send_cancelled {
                let entry = opcode::AsyncCancel::new(encode(Kind::Send, index, generation))
                    .build()
                    .user_data(encode(Kind::CancelConn, index, generation));
                push(&mut self.ring, &entry)?;
                self.inflight += 1;
                u.cancels += 1;
                u.send_cancelled = true;
            }
        } else if u.send_len.is_none() && !slot.queue.is_empty() {
            let args = &mut *u.send;
            let mut count = 0;
            let mut total = 0;
            for (iov, data) in args.iov.iter_mut().zip(slot.queue.iter()) {
                iov.iov_base = data.as_ptr().cast_mut().cast();
                iov.iov_len = data.len();
                total += data.len();
                count += 1;
            }
            args.msg.msg_iov = args.iov.as_mut_ptr();
            args.msg.msg_iovlen = count;
            let entry = opcode::SendMsg::new(types::Fd(fd), &raw const args.msg)
                .flags(libc::MSG_NOSIGNAL as u32)
                .build()
                .user_data(encode(Kind::Send, index, generation));
            push(&mut self.ring, &entry)?;
            self.inflight += 1;
            u.send_len = Some(total);
        }

        let flushed =
            u.send_len.is_none() && (slot.close == CloseReq::Now || slot.queue.is_empty());
        if slot.close != CloseReq::None && flushed && u.recv == Recv::Idle && u.cancels == 0 {
            // Nothing of this connection is in flight: close and release.
            u.fd = None;
            if let Some(conn) = self.ops.take_open(index) {
                cb(&mut self.ops, Event::Closed { conn, error: None });
                delivered += 1;
            }
            self.ops.release(index);
        }
        Ok(delivered)
    }

    /// Submits what is queued and waits for at least one completion, at
    /// most `wait`.
    fn enter(&mut self, wait: Option<Duration>) -> io::Result<Waited> {
        let res = match wait {
            None => self.ring.submit_and_wait(1),
            Some(wait) => {
                let ts = types::Timespec::from(wait);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match res {
            Ok(_) => Ok(Waited::Completed),
            Err(e) => match e.raw_os_error() {
                Some(libc::ETIME) => Ok(Waited::TimedOut),
                Some(libc::EINTR) => Ok(Waited::Interrupted),
                // Completions are backed up: reaping them is the remedy.
                Some(libc::EBUSY | libc::EAGAIN) => Ok(Waited::Completed),
                _ => Err(e),
            },
        }
    }

    /// Submits without waiting.
    fn submit_now(&mut self) -> io::Result<()> {
        match self.ring.submit() {
            Ok(_) => Ok(()),
            // Completions are backed up; the next enter submits these.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands out every completion in the ring. Returns the events delivered.
    fn reap(&mut self, cb: &mut OnEvent<'_>) -> io::Result<usize> {
        let mut delivered = 0;
        loop {
            self.cqes.clear();
            let cap = self.cqes.capacity().max(1);
            {
                let mut cq = self.ring.completion();
                cq.sync();
                for cqe in cq.by_ref().take(cap) {
                    self.cqes.push((cqe.user_data(), cqe.result(), cqe.flags()));
                }
            }
            let n = self.cqes.len();
            for k in 0..n {
                let (user_data, res, flags) = self.cqes[k];
                delivered += self.complete(user_data, res, flags, cb)?;
            }
            if n < cap {
                return Ok(delivered);
            }
        }
    }

    fn complete(
        &mut self,
        user_data: u64,
        res: i32,
        flags: u32,
        cb: &mut OnEvent<'_>,
    ) -> io::Result<usize> {
        if !cqueue::more(flags) {
            self.inflight = self.inflight.saturating_sub(1);
        }
        let (kind, index, generation) = decode(user_data);
        match kind {
            Some(Kind::Recv) => return Ok(self.on_recv(index, generation, res, flags, cb)),
            Some(Kind::Send) => return Ok(self.on_send(index, generation, res, cb)),
            Some(Kind::Accept) => return Ok(self.on_accept(res, flags, cb)),
            Some(Kind::Wake) => {
                self.wake_armed = false;
                if res >= 0 {
                    self.waker.rearm();
                    cb(&mut self.ops, Event::Woken);
                    return Ok(1);
                }
                if res != -libc::ECANCELED {
                    return Err(io::Error::from_raw_os_error(-res));
                }
            }
            Some(Kind::CancelConn) => {
                if self.ops.matches(index, generation) {
                    let u = &mut self.conns[index as usize];
                    u.cancels = u.cancels.saturating_sub(1);
                    self.ops.mark_dirty(index);
                }
            }
            Some(Kind::CancelAccept | Kind::CancelAll | Kind::SelfTest) | None => {}
        }
        // Any completion that picked a buffer gives it back, whatever it is.
        if let Some(bid) = cqueue::buffer_select(flags) {
            self.bufs.recycle(bid);
        }
        Ok(0)
    }

    fn on_accept(&mut self, res: i32, flags: u32, cb: &mut OnEvent<'_>) -> usize {
        if !cqueue::more(flags) {
            self.accept = match self.accept {
                Accept::Cancelling => {
                    self.listener = None;
                    Accept::Stopped
                }
                _ => Accept::Idle,
            };
        }
        if res < 0 {
            if matches!(
                -res,
                libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM
            ) && self.accept == Accept::Idle
            {
                // Out of descriptors: with no accept armed on the listener,
                // refuse what waits in its backlog with the reserve
                // descriptor (non-blocking for that pass only, since the
                // kernel's own accepts want a blocking listener).
                let shed = match &self.listener {
                    Some(l) if matches!(-res, libc::EMFILE | libc::ENFILE) => {
                        let fd = l.as_raw_fd();
                        match sys::set_nonblocking(fd, true) {
                            Ok(()) => {
                                let n = self.reserve.shed(fd, &self.shed_reply);
                                // A listener left non-blocking would fail
                                // io_uring's accepts with EAGAIN: the driver
                                // cannot go on without it.
                                let _ = sys::set_nonblocking(fd, false);
                                n
                            }
                            Err(_) => 0,
                        }
                    }
                    _ => 0,
                };
                cb(
                    &mut self.ops,
                    Event::AcceptFailed {
                        error: io::Error::from_raw_os_error(-res),
                        shed,
                    },
                );
                self.accept =
                    Accept::Paused(Instant::now() + Duration::from_millis(ACCEPT_PAUSE_MS));
            }
            // Anything else (a connection aborted before it was accepted,
            // our own cancellation) just ends this accept; it is re-armed.
            return 0;
        }
        // SAFETY: a non-negative accept result is a new descriptor that
        // nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(res) };
        if !self.accepting {
            return 0;
        }
        // A connection that is already gone has no peer: drop it silently.
        let Ok(peer) = sys::peer_addr(fd.as_raw_fd()) else {
            return 0;
        };
        // Failing to set it only costs latency on a socket that works.
        let _ = sys::set_nodelay(fd.as_raw_fd());
        let (conn, refused) = match self.ops.admit() {
            Admission::Accepted(conn) => (conn, false),
            Admission::Refused(conn) => (conn, true),
            Admission::Full => return 0,
        };
        while self.conns.len() < self.ops.slot_count() {
            self.conns.push(UConn::new());
        }
        self.conns[conn.index() as usize].reset(fd);
        if refused {
            cb(&mut self.ops, Event::Refused { conn, peer });
            let slot = self.ops.slot_mut(conn.index());
            // Unless the caller reads it (a TLS handshake to finish before
            // its refusal can be sent), it goes once the refusal is out.
            if slot.close == CloseReq::None && !slot.reading {
                slot.close = CloseReq::AfterFlush;
            }
        } else {
            cb(&mut self.ops, Event::Accepted { conn, peer });
        }
        self.ops.mark_dirty(conn.index());
        1
    }

    fn on_recv(
        &mut self,
        index: u32,
        generation: u32,
        res: i32,
        flags: u32,
        cb: &mut OnEvent<'_>,
    ) -> usize {
        let bid = cqueue::buffer_select(flags);
        if !self.ops.matches(index, generation) {
            if let Some(bid) = bid {
                self.bufs.recycle(bid);
            }
            return 0;
        }
        let i = index as usize;
        if !cqueue::more(flags) {
            self.conns[i].recv = Recv::Idle;
        }
        self.ops.mark_dirty(index);
        if res > 0 {
            let Some(bid) = bid else {
                let error = io::Error::other("io_uring receive completed without a buffer");
                return self.ops.fail(index, error, cb);
            };
            let slot = self.ops.slot(index);
            let open = slot.user_open && slot.close == CloseReq::None;
            let direct = open && slot.reading && self.conns[i].stash.is_empty();
            let conn = ConnId::new(index, generation);
            // SAFETY: this completion handed buffer `bid` to us and it is
            // recycled only below, after the slice's last use.
            let bytes = unsafe { self.bufs.get(bid, res as usize) };
            let delivered = match bytes {
                Some(bytes) if direct => {
                    cb(&mut self.ops, Event::Data { conn, bytes });
                    1
                }
                Some(bytes) => {
                    if open {
                        self.conns[i].stash.extend_from_slice(bytes);
                    }
                    0
                }
                None => {
                    self.bufs.recycle(bid);
                    let error = io::Error::other("io_uring named a buffer outside the ring");
                    return self.ops.fail(index, error, cb);
                }
            };
            self.bufs.recycle(bid);
            return delivered;
        }
        if let Some(bid) = bid {
            self.bufs.recycle(bid);
        }
        match -res {
            0 => {
                self.conns[i].eof = true;
                0
            }
            // Out of buffers ends the multishot receive; it is re-armed once
            // this batch has given its buffers back. ECANCELED: ours.
            libc::ENOBUFS | libc::ECANCELED => 0,
            errno => self
                .ops
                .fail(index, io::Error::from_raw_os_error(errno), cb),
        }
    }

    fn on_send(&mut self, index: u32, generation: u32, res: i32, cb: &mut OnEvent<'_>) -> usize {
        if !self.ops.matches(index, generation) {
            return 0;
        }
        let i = index as usize;
        let requested = self.conns[i].send_len.take().unwrap_or(0);
        self.ops.mark_dirty(index);
        let mut delivered = 0;
        if res > 0 {
            self.ops.consume_sent(index, res as usize);
        } else if res == 0 && requested > 0 {
            let error = io::Error::from(io::ErrorKind::WriteZero);
            delivered = self.ops.fail(index, error, cb);
        } else if res < 0 && res != -libc::ECANCELED {
            delivered = self.ops.fail(index, io::Error::from_raw_os_error(-res), cb);
        }
        if self.ops.slot(index).close == CloseReq::Now {
            // Nothing of the queue is in flight any more.
            self.ops.drop_queue(index);
        }
        delivered
    }

    /// How long the next wait may last: until `deadline`, and no later than
    /// a paused accept's re-arm time.
    fn wait_time(&self, deadline: Option<Instant>) -> Option<Duration> {
        let pause = match self.accept {
            Accept::Paused(until) if self.accepting => Some(until),
            _ => None,
        };
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

fn describe_res(res: i32) -> String {
    if res < 0 {
        io::Error::from_raw_os_error(-res).to_string()
    } else {
        format!("{res} bytes")
    }
}

impl Driver for UringDriver {
    fn backend(&self) -> Backend {
        Backend::IoUring
    }

    fn setup_detail(&self) -> &str {
        self.setup
    }

    fn local_addr(&self) -> SocketAddr {
        // Set in `open` before the driver is handed out.
        self.local_addr
            .unwrap_or_else(|| unreachable!("a driver always has its address"))
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

    fn stop_accepting(&mut self) {
        self.accepting = false;
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
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// A driver on 127.0.0.1:0, or `None` (with a skip line) where io_uring
    /// is unavailable, except under `CI=true`.
    fn driver() -> Option<UringDriver> {
        let config = DriverConfig::new("127.0.0.1:0".parse().unwrap());
        match UringDriver::open(&config) {
            Ok(driver) => Some(driver),
            Err(OpenError::UringUnavailable(why)) => {
                assert!(
                    std::env::var("CI").map_or(true, |v| v != "true"),
                    "io_uring is required under CI=true: {why}"
                );
                eprintln!("SKIP: io_uring unavailable here ({why})");
                None
            }
            Err(e) => panic!("open: {e}"),
        }
    }

    #[test]
    fn drain_reaps_every_operation() {
        let Some(mut driver) = driver() else {
            return;
        };
        let mut client = TcpStream::connect(driver.local_addr()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        client.write_all(b"ping").unwrap();
        let mut conn = None;
        for _ in 0..1000 {
            driver
                .poll(Some(Duration::from_millis(10)), &mut |ops, event| {
                    if let Event::Data { conn: c, bytes } = event {
                        ops.send(c, bytes::Bytes::copy_from_slice(bytes));
                        conn = Some(c);
                    }
                })
                .unwrap();
            if conn.is_some() {
                break;
            }
        }
        assert!(conn.is_some(), "no data arrived");
        let mut got = [0u8; 4];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        // Accept, wake read and the connection's receive are in flight.
        assert!(driver.inflight >= 3, "{} in flight", driver.inflight);
        assert!(driver.drain(), "drain left {} in flight", driver.inflight);
        assert_eq!(driver.inflight, 0);
    }

    #[test]
    fn user_data_round_trips() {
        for (kind, index, generation) in [
            (Kind::Recv, 0, 0),
            (Kind::Send, 0xff_ffff, u32::MAX),
            (Kind::CancelConn, 12345, 7),
            (Kind::SelfTest, 1, 1 << 31),
        ] {
            let (k, i, g) = decode(encode(kind, index, generation));
            assert_eq!((k, i, g), (Some(kind), index, generation));
        }
        assert_eq!(decode(0).0, None);
    }
}
