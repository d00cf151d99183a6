//! The reader role (see the ground rules in `conn.rs`): the leader's reads,
//! spinning or blocking, and the hand-out of every reply they bring.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::{Connection, ReadOutcome, Reader};
use crate::blocking::sync::{Ordering, lock, thread};
use crate::blocking::wire::Wire;
use crate::error::Error;
use crate::pending;

/// How far above the time a leader has left the socket's read time-out may
/// be before it is set again (each setting is a system call; a leader woken
/// a little late by it only reports its time-out that much later).
const READ_TIMEOUT_SLACK: Duration = Duration::from_millis(10);

impl<W: Wire> Connection<W> {
    /// The reader role: reads until the reply of `id` is in, the connection
    /// ends or `deadline` passes. The caller set `leading` and clears it.
    pub(super) fn lead(&self, id: u32, deadline: Instant) {
        let mut r = lock(&self.reader);
        loop {
            match self.read(&mut r, deadline) {
                ReadOutcome::Data => {
                    if !self.dispatch(&mut r, Some(deadline)) {
                        return;
                    }
                }
                ReadOutcome::Idle => {}
                ReadOutcome::End(err) => {
                    self.fail(&err);
                    return;
                }
            }
            let mut st = self.state();
            let answered = st.table.get_mut(id).is_none_or(|w| w.reply.is_some());
            if answered || Instant::now() >= deadline {
                return;
            }
        }
    }

    /// One read for the leader: spins first when configured, then blocks
    /// until bytes come or the time-out (at most until `deadline`).
    fn read(&self, r: &mut Reader, deadline: Instant) -> ReadOutcome {
        if !self.read_spin.is_zero() {
            let until = Instant::now() + self.read_spin;
            loop {
                match self.recv_now(r) {
                    ReadOutcome::Idle => {}
                    other => return other,
                }
                if Instant::now() >= until.min(deadline) {
                    break;
                }
                // Let a thread that is ready run first (on one core the
                // threads this one woke need it to send their next requests).
                thread::yield_now();
            }
        }
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let reset = r
            .timeout
            .is_none_or(|t| t > left + READ_TIMEOUT_SLACK || t * 4 < left);
        if reset {
            if let Err(e) = self.stream.set_read_timeout(Some(left)) {
                return ReadOutcome::End(Error::io(e));
            }
            r.timeout = Some(left);
        }
        let Reader { buf, chunk, .. } = r;
        match self.stream.read(chunk) {
            Ok(0) => ReadOutcome::End(Error::Disconnected(
                "the server closed the connection".into(),
            )),
            Ok(n) => self.take_in(buf, &chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                ReadOutcome::Idle
            }
            Err(e) => ReadOutcome::End(Error::io(e)),
        }
    }

    /// Bytes read from the socket into the reply buffer: as they are, or
    /// decrypted.
    fn take_in(&self, buf: &mut BytesMut, bytes: &[u8]) -> ReadOutcome {
        let Some(tls) = &self.tls else {
            buf.extend_from_slice(bytes);
            return ReadOutcome::Data;
        };
        match tls.open(bytes, buf) {
            Ok(false) => ReadOutcome::Data,
            Ok(true) => ReadOutcome::End(Error::Disconnected(
                "the server closed the TLS session".into(),
            )),
            Err(e) => ReadOutcome::End(e),
        }
    }

    /// One read that never blocks.
    pub(super) fn recv_now(&self, r: &mut Reader) -> ReadOutcome {
        let Reader { buf, chunk, .. } = r;
        match self.stream.read_now(&mut chunk[..]) {
            Ok(0) => ReadOutcome::End(Error::Disconnected(
                "the server closed the connection".into(),
            )),
            Ok(n) => self.take_in(buf, &chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                ReadOutcome::Idle
            }
            Err(e) => ReadOutcome::End(Error::io(e)),
        }
    }

    /// Hands every whole frame buffered to its request and wakes their
    /// threads; false when the connection ended.
    ///
    /// With `combine` (the leader's own deadline), when it wakes other
    /// threads it takes the writer role first and lets them run before it
    /// writes: each of them that sends its next request at once leaves it
    /// queued, and they all go out in one write. On one core, where the
    /// woken threads run one after the other, this turns a write per request
    /// into a write per read.
    pub(super) fn dispatch(&self, r: &mut Reader, combine: Option<Instant>) -> bool {
        let Reader {
            decoder,
            buf,
            ready,
            ..
        } = r;
        let end = pending::cut_frames(decoder, buf, |f| ready.push(f));
        let mut wake = 0;
        {
            let mut st = self.state();
            st.last_read = Instant::now();
            self.last_read_ms.store(self.age_ms(), Ordering::Relaxed);
            for f in ready.drain(..) {
                wake |= st.fill(f.request_id, Ok(f));
            }
            if let Err(err) = &end {
                wake |= st.fail(err);
                self.closed.store(true, Ordering::Release);
            }
        }
        let writer = match combine {
            Some(deadline) if end.is_ok() && wake != 0 => {
                let mut w = lock(&self.writer);
                if w.writing {
                    None
                } else {
                    w.writing = true;
                    drop(w);
                    Some(deadline)
                }
            }
            _ => None,
        };
        // One system call for every thread this read answered.
        self.parking.wake(wake);
        if let Some(deadline) = writer {
            thread::yield_now();
            self.write_queued(lock(&self.writer), deadline);
        }
        if let Err(err) = end {
            tracing::debug!(error = %err, "sluice client: connection ended");
            self.stream.shutdown();
            return false;
        }
        true
    }
}
