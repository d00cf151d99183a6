//! The multishot accept: arming it, pausing it when out of descriptors,
//! cancelling it when the server stops accepting, and its completions.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types};

use super::{Accept, Kind, UConn, UringDriver, encode, push};
use crate::io::connections::{Admission, CloseReq};
use crate::io::{ACCEPT_PAUSE_MS, Event, OnEvent, sys};

impl UringDriver {
    pub(super) fn process_accept(&mut self) -> io::Result<()> {
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

    pub(super) fn on_accept(&mut self, res: i32, flags: u32, cb: &mut OnEvent<'_>) -> usize {
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
}
