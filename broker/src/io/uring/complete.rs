//! Reaping the completion queue: each completion to its operation, and the
//! receive and send completions of the connections.

use std::io;

use io_uring::cqueue;

use super::{Kind, Recv, UringDriver, decode};
use crate::io::connections::CloseReq;
use crate::io::{ConnId, Event, OnEvent};

impl UringDriver {
    /// Hands out every completion in the ring. Returns the events delivered.
    pub(super) fn reap(&mut self, cb: &mut OnEvent<'_>) -> io::Result<usize> {
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
            Some(Kind::Accept) => return Ok(self.on_accept(index, res, flags, cb)),
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
}
