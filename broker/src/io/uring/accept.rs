//! The multishot accept: arming it, pausing it when out of descriptors,
//! cancelling it when the server stops accepting, and its completions.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types};

use super::{Accept, Kind, UConn, UListener, UringDriver, encode, push};
use crate::io::connections::Admission;
use crate::io::reserve::Reserve;
use crate::io::{ACCEPT_PAUSE_MS, Event, ListenerId, OnEvent, sys};

impl UringDriver {
    /// Arms, re-arms or cancels each listener's accept as the driver's
    /// state asks.
    pub(super) fn process_accept(&mut self) -> io::Result<()> {
        for l in 0..self.listeners.len() {
            self.process_listener(l)?;
        }
        Ok(())
    }

    fn process_listener(&mut self, l: usize) -> io::Result<()> {
        // Listener indexes are below LISTENERS_MAX.
        let index = u32::try_from(l).unwrap_or(u32::MAX);
        let listener = &mut self.listeners[l];
        let Some(fd) = listener.fd.as_ref().map(AsRawFd::as_raw_fd) else {
            return Ok(());
        };
        if !self.accepting || listener.stopping {
            match listener.accept {
                Accept::Armed => {
                    let entry = opcode::AsyncCancel::new(encode(Kind::Accept, index, 0))
                        .build()
                        .user_data(encode(Kind::CancelAccept, index, 0));
                    push(&mut self.ring, &entry)?;
                    self.inflight += 1;
                    listener.accept = Accept::Cancelling;
                }
                Accept::Idle | Accept::Paused(_) => {
                    listener.fd = None;
                    listener.accept = Accept::Stopped;
                }
                Accept::Cancelling | Accept::Stopped => {}
            }
            return Ok(());
        }
        let arm = match listener.accept {
            Accept::Idle => true,
            Accept::Paused(until) => Instant::now() >= until,
            _ => false,
        };
        if arm {
            let entry = opcode::AcceptMulti::new(types::Fd(fd))
                .flags(libc::SOCK_CLOEXEC)
                .build()
                .user_data(encode(Kind::Accept, index, 0));
            push(&mut self.ring, &entry)?;
            self.inflight += 1;
            listener.accept = Accept::Armed;
        }
        Ok(())
    }

    /// A completion of listener `index`'s accept.
    pub(super) fn on_accept(
        &mut self,
        index: u32,
        res: i32,
        flags: u32,
        cb: &mut OnEvent<'_>,
    ) -> usize {
        let l = index as usize;
        let Some(listener) = self.listeners.get_mut(l) else {
            if res >= 0 {
                // SAFETY: a non-negative accept result is a new descriptor
                // that nothing else owns; closed at once.
                drop(unsafe { OwnedFd::from_raw_fd(res) });
            }
            return 0;
        };
        if !cqueue::more(flags) {
            listener.accept = match listener.accept {
                Accept::Cancelling => {
                    listener.fd = None;
                    Accept::Stopped
                }
                _ => Accept::Idle,
            };
        }
        if res < 0 {
            if matches!(
                -res,
                libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM
            ) && listener.accept == Accept::Idle
            {
                let shed = shed_backlog(listener, &mut self.reserve, -res);
                cb(
                    &mut self.ops,
                    Event::AcceptFailed {
                        error: io::Error::from_raw_os_error(-res),
                        shed,
                    },
                );
                self.listeners[l].accept =
                    Accept::Paused(Instant::now() + Duration::from_millis(ACCEPT_PAUSE_MS));
            }
            // Anything else (a connection aborted before it was accepted,
            // our own cancellation) just ends this accept; it is re-armed.
            return 0;
        }
        // SAFETY: a non-negative accept result is a new descriptor that
        // nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(res) };
        if !self.accepting || self.listeners[l].stopping {
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
        // Below LISTENERS_MAX.
        let listener = ListenerId(u8::try_from(index).unwrap_or(u8::MAX));
        self.ops.report_accept(cb, conn, peer, listener, refused);
        1
    }
}

/// Out of descriptors (`errno`), with no accept armed on `listener`:
/// refuses what waits in its backlog with the reserve descriptor
/// (non-blocking for that pass only, since the kernel's own accepts want a
/// blocking listener). Returns how many were refused.
fn shed_backlog(listener: &UListener, reserve: &mut Reserve, errno: i32) -> u32 {
    let Some(fd) = listener.fd.as_ref().map(AsRawFd::as_raw_fd) else {
        return 0;
    };
    if !matches!(errno, libc::EMFILE | libc::ENFILE) {
        return 0;
    }
    match sys::set_nonblocking(fd, true) {
        Ok(()) => {
            let n = reserve.shed(fd, &listener.shed_reply);
            // A listener left non-blocking would fail io_uring's accepts
            // with EAGAIN: the driver cannot go on without it.
            let _ = sys::set_nonblocking(fd, false);
            n
        }
        Err(_) => 0,
    }
}
