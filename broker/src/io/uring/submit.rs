//! What becomes submission entries: the wake read, each connection's
//! multishot receive, its `sendmsg` and its cancellations; and entering the
//! kernel.

use std::io;
use std::mem;
use std::os::fd::AsRawFd;
use std::time::Duration;

use io_uring::{IoUring, opcode, squeue, types};

use super::{BGID, Kind, Recv, UringDriver, Waited, encode};
use crate::io::connections::CloseReq;
use crate::io::limits::STASH_KEEP_BYTES;
use crate::io::{Event, OnEvent};

/// Pushes one entry, submitting to make room when the queue is full.
pub(super) fn push(ring: &mut IoUring, entry: &squeue::Entry) -> io::Result<()> {
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

impl UringDriver {
    /// Acts on everything pending: the accept and wake operations, then each
    /// dirty connection. Returns how many events it handed out.
    pub(super) fn process(&mut self, cb: &mut OnEvent<'_>) -> io::Result<usize> {
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
    pub(super) fn enter(&mut self, wait: Option<Duration>) -> io::Result<Waited> {
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
    pub(super) fn submit_now(&mut self) -> io::Result<()> {
        match self.ring.submit() {
            Ok(_) => Ok(()),
            // Completions are backed up; the next enter submits these.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
