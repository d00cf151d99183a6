//! The cross-thread wake-up: an eventfd the driver keeps a read on (io_uring)
//! or watches (epoll).
//!
//! # Ground rules
//!
//! - The eventfd lives inside the `Arc<Waker>`: it closes when the driver and
//!   every other holder have dropped their handles, so a `wake` from another
//!   thread never writes to a closed (or reused) descriptor.
//! - `pending` coalesces wakes: only the `wake` that turns it from false to
//!   true writes to the eventfd. The driver turns it back with a `swap` after
//!   the eventfd read completed and before it reports [`Event::Woken`]; both
//!   sides use `AcqRel`, so whatever a waker wrote before its `wake` is
//!   visible to the driver's callback for that `Woken` (the waker's swap is
//!   in the modification order before the driver's, which acquires it). A
//!   `wake` that finds `pending` already true is covered by the `Woken` that
//!   follows the driver's swap.
//!
//! [`Event::Woken`]: super::Event::Woken

use crate::sync::{AtomicBool, Ordering};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sys;

/// Ends a driver's [`poll`](super::Driver::poll) early from another thread.
pub struct Waker {
    fd: OwnedFd,
    pending: AtomicBool,
}

impl Waker {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Self {
            fd: sys::eventfd()?,
            pending: AtomicBool::new(false),
        })
    }

    /// Makes the driver's current or next poll return with
    /// [`Event::Woken`](super::Event::Woken). Cheap when a wake is already
    /// pending; never blocks.
    pub fn wake(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            // An eventfd write fails only when the counter would overflow
            // (EAGAIN: then a wake is pending anyway) or the fd is bad, which
            // the `Arc` ownership rules out; nothing to do in either case.
            let _ = sys::eventfd_write(self.fd.as_raw_fd());
        }
    }

    /// The driver's side: called after the eventfd was read, before the
    /// `Woken` event is handed out.
    pub(crate) fn rearm(&self) {
        self.pending.swap(false, Ordering::AcqRel);
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl fmt::Debug for Waker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waker")
            .field("fd", &self.fd.as_raw_fd())
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish()
    }
}
