//! A descriptor held in reserve for the moment the process runs out.
//!
//! When `accept` fails with `EMFILE` (the process's open-files limit) or
//! `ENFILE` (the system's), new connections wait in the listener's backlog
//! and their clients hang with no answer. A driver that hits this frees its
//! reserve descriptor, accepts what is waiting one at a time, writes each
//! the caller's refusal ([`DriverConfig::shed_reply`], opaque bytes: the
//! server's error frame), closes it, and takes the reserve back. Clients see
//! an error and a closed connection at once instead of a hang, and the
//! connections already open go on.
//!
//! [`DriverConfig::shed_reply`]: super::DriverConfig::shed_reply

use std::fs::File;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sys;

use super::limits::{SHED_BATCH_MAX, SHED_DRAIN_BYTES};

/// One spare descriptor (`/dev/null`).
#[derive(Debug)]
pub(crate) struct Reserve {
    fd: Option<OwnedFd>,
}

impl Reserve {
    /// Takes a descriptor in reserve (none if even that fails: shedding is
    /// then skipped, and accepting pauses as before).
    pub(crate) fn new() -> Self {
        Self { fd: open_spare() }
    }

    /// Frees the reserve, accepts and refuses up to [`SHED_BATCH_MAX`]
    /// waiting connections from the non-blocking `listener`, and takes the
    /// reserve back. Returns how many it refused.
    pub(crate) fn shed(&mut self, listener: RawFd, reply: &[u8]) -> u32 {
        let Some(spare) = self.fd.take() else {
            self.fd = open_spare();
            return 0;
        };
        drop(spare);
        let mut shed = 0;
        while shed < SHED_BATCH_MAX {
            // WouldBlock: the backlog is empty. EMFILE again: another
            // thread took the freed descriptor first.
            let Ok((conn, _peer)) = sys::accept(listener) else {
                break;
            };
            refuse(&conn, reply);
            shed += 1;
        }
        self.fd = open_spare();
        shed
    }
}

fn open_spare() -> Option<OwnedFd> {
    File::open("/dev/null").ok().map(OwnedFd::from)
}

/// Best effort: what the client sent is read and dropped, the refusal is
/// written if the socket takes it at once, then the socket is closed.
fn refuse(conn: &OwnedFd, reply: &[u8]) {
    let mut sink = [0u8; SHED_DRAIN_BYTES];
    let _ = sys::recv(conn.as_raw_fd(), &mut sink);
    if !reply.is_empty() {
        let _ = sys::sendmsg(conn.as_raw_fd(), &[IoSlice::new(reply)]);
    }
}
