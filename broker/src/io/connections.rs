//! The connection table both backends share: slots with generations, send
//! queues, the caller's wishes (reading, closing) and the list of slots whose
//! wishes the backend has yet to act on.
//!
//! The caller only records intent here; the backend acts on the dirty slots
//! after each batch of events (and at the start of each poll), which is what
//! batches io_uring submissions and lets the callback queue sends without a
//! syscall each.

use std::collections::VecDeque;
use std::fmt;
use std::io;

use bytes::{Buf, Bytes};

use std::net::SocketAddr;

use super::{ConnId, Event, ListenerId, OnEvent};

/// What the caller asked for a connection's end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CloseReq {
    /// Nothing: the connection stays open.
    None,
    /// Close once every queued send is written.
    AfterFlush,
    /// Close now, dropping what is queued.
    Now,
}

/// One connection slot.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) generation: u32,
    pub(crate) in_use: bool,
    /// Accepted only to be refused: not read unless the caller resumes
    /// reading it, closed after its flush unless the caller does.
    pub(crate) refused: bool,
    /// The caller knows it: `Accepted`/`Refused` reported, `Closed` not yet.
    pub(crate) user_open: bool,
    /// The caller wants its data.
    pub(crate) reading: bool,
    pub(crate) close: CloseReq,
    /// Queued sends, oldest first; the backend may have the first few in
    /// flight (it knows how many) and only removes them on completion.
    pub(crate) queue: VecDeque<Bytes>,
    /// Bytes in `queue`.
    pub(crate) unsent: usize,
    dirty: bool,
}

impl Slot {
    fn new() -> Self {
        Self {
            generation: 0,
            in_use: false,
            refused: false,
            user_open: false,
            reading: false,
            close: CloseReq::None,
            queue: VecDeque::new(),
            unsent: 0,
            dirty: false,
        }
    }
}

/// What [`Connections::admit`] decided for a new connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Admission {
    Accepted(ConnId),
    Refused(ConnId),
    /// Over both limits: close the socket at once.
    Full,
}

/// The connection table: how the caller sends, closes and pauses.
///
/// Handed to the [`poll`](super::Driver::poll) callback and reachable
/// between polls through [`Driver::connections_mut`](super::Driver::connections_mut). Every
/// method takes a [`ConnId`] and does nothing for a stale one.
pub struct Connections {
    slots: Vec<Slot>,
    free: Vec<u32>,
    dirty: Vec<u32>,
    connections_max: u32,
    refused_max: u32,
    admitted: u32,
    refused: u32,
    unsent_total: usize,
}

impl Connections {
    pub(crate) fn new(connections_max: u32, refused_max: u32) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            dirty: Vec::new(),
            connections_max,
            refused_max,
            admitted: 0,
            refused: 0,
            unsent_total: 0,
        }
    }

    /// Queues `data` to be written to `conn` after what is already queued.
    /// The driver owns it until the kernel has written it. Returns false,
    /// dropping `data`, when `conn` is stale or closing.
    pub fn send(&mut self, conn: ConnId, data: Bytes) -> bool {
        let Some(slot) = self.live_mut(conn) else {
            return false;
        };
        if slot.close != CloseReq::None {
            return false;
        }
        if data.is_empty() {
            return true;
        }
        let len = data.len();
        slot.unsent += len;
        slot.queue.push_back(data);
        self.unsent_total += len;
        self.mark_dirty(conn.index);
        true
    }

    /// Closes `conn` once its queued sends are written; reading stops now.
    /// [`Event::Closed`](super::Event::Closed) follows when the socket is
    /// closed (with the error, if the flush failed). If the peer never reads,
    /// the flush never ends: use [`Connections::close_now`] after a deadline of your
    /// own.
    pub fn close(&mut self, conn: ConnId) {
        if let Some(slot) = self.live_mut(conn) {
            if slot.close == CloseReq::None {
                slot.close = CloseReq::AfterFlush;
                self.mark_dirty(conn.index);
            }
        }
    }

    /// Closes `conn` at once, dropping its queued sends (any send already
    /// handed to the kernel is cancelled). [`Event::Closed`] follows.
    ///
    /// [`Event::Closed`]: super::Event::Closed
    pub fn close_now(&mut self, conn: ConnId) {
        if let Some(slot) = self.live_mut(conn) {
            if slot.close != CloseReq::Now {
                slot.close = CloseReq::Now;
                self.mark_dirty(conn.index);
            }
        }
    }

    /// Pauses (`false`) or resumes (`true`) reading `conn`, for
    /// backpressure. While paused no [`Event::Data`] arrives for it; bytes
    /// the kernel had already received are kept and delivered, in order, on
    /// resume.
    ///
    /// [`Event::Data`]: super::Event::Data
    pub fn set_reading(&mut self, conn: ConnId, on: bool) {
        if let Some(slot) = self.live_mut(conn) {
            if slot.reading != on {
                slot.reading = on;
                self.mark_dirty(conn.index);
            }
        }
    }

    /// Whether `conn` is being read (not paused); false when stale.
    pub fn is_reading(&self, conn: ConnId) -> bool {
        self.live(conn).is_some_and(|s| s.reading)
    }

    /// Bytes queued on `conn` and not yet written (in flight included): what
    /// the per-connection unsent limit is checked against. 0 when stale.
    pub fn unsent_bytes(&self, conn: ConnId) -> usize {
        self.live(conn).map_or(0, |s| s.unsent)
    }

    /// Bytes queued and not yet written on all connections of this driver,
    /// closing ones included.
    pub fn unsent_bytes_total(&self) -> usize {
        self.unsent_total
    }

    /// Whether `conn` is open as far as the caller is concerned: accepted
    /// (or refused) and not yet reported closed.
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.live(conn).is_some()
    }

    /// Admitted connections holding a slot (closing ones included, refused
    /// ones not): what is checked against `connections_max`.
    pub fn admitted(&self) -> usize {
        self.admitted as usize
    }

    fn live(&self, conn: ConnId) -> Option<&Slot> {
        self.slots
            .get(conn.index as usize)
            .filter(|s| s.in_use && s.user_open && s.generation == conn.generation)
    }

    fn live_mut(&mut self, conn: ConnId) -> Option<&mut Slot> {
        self.slots
            .get_mut(conn.index as usize)
            .filter(|s| s.in_use && s.user_open && s.generation == conn.generation)
    }

    // ---- the backends' side ----

    /// Takes a slot for a new connection, or says it is over the limits.
    /// The slot starts open for the caller, reading unless refused.
    pub(crate) fn admit(&mut self) -> Admission {
        let refused = if self.admitted < self.connections_max {
            false
        } else if self.refused < self.refused_max {
            true
        } else {
            return Admission::Full;
        };
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                // Slots never exceed connections_max + refused_max, which the
                // config check keeps below 2^24.
                let index = self.slots.len() as u32;
                self.slots.push(Slot::new());
                index
            }
        };
        let slot = &mut self.slots[index as usize];
        debug_assert!(!slot.in_use && slot.queue.is_empty());
        slot.in_use = true;
        slot.refused = refused;
        slot.user_open = true;
        slot.reading = !refused;
        slot.close = CloseReq::None;
        slot.unsent = 0;
        let id = ConnId::new(index, slot.generation);
        if refused {
            self.refused += 1;
            Admission::Refused(id)
        } else {
            self.admitted += 1;
            Admission::Accepted(id)
        }
    }

    /// Gives a slot back once its socket is closed and nothing of it is in
    /// flight. Its generation moves on, so old ids go stale.
    pub(crate) fn release(&mut self, index: u32) {
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return;
        };
        if !slot.in_use {
            return;
        }
        self.unsent_total -= slot.unsent;
        slot.unsent = 0;
        slot.queue.clear();
        slot.in_use = false;
        slot.user_open = false;
        slot.generation = slot.generation.wrapping_add(1);
        if slot.refused {
            self.refused -= 1;
        } else {
            self.admitted -= 1;
        }
        self.free.push(index);
    }

    /// How many slots exist (in use or free); backends size their own
    /// per-slot state to match.
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn slot(&self, index: u32) -> &Slot {
        &self.slots[index as usize]
    }

    pub(crate) fn slot_mut(&mut self, index: u32) -> &mut Slot {
        &mut self.slots[index as usize]
    }

    /// The id of the connection now in slot `index`.
    pub(crate) fn id(&self, index: u32) -> ConnId {
        ConnId::new(index, self.slots[index as usize].generation)
    }

    /// Whether `index` is in use by the connection `generation`.
    pub(crate) fn matches(&self, index: u32, generation: u32) -> bool {
        self.slots
            .get(index as usize)
            .is_some_and(|s| s.in_use && s.generation == generation)
    }

    /// Marks a slot for the backend's attention.
    pub(crate) fn mark_dirty(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(index);
        }
    }

    /// The next slot marked dirty, unmarking it.
    pub(crate) fn next_dirty(&mut self) -> Option<u32> {
        let index = self.dirty.pop()?;
        self.slots[index as usize].dirty = false;
        Some(index)
    }

    /// If the caller still knows the connection in `index`, marks it closed
    /// for the caller and returns the id to report [`Event::Closed`] for.
    ///
    /// [`Event::Closed`]: super::Event::Closed
    pub(crate) fn take_open(&mut self, index: u32) -> Option<ConnId> {
        let slot = &mut self.slots[index as usize];
        if slot.in_use && slot.user_open {
            slot.user_open = false;
            Some(ConnId::new(index, slot.generation))
        } else {
            None
        }
    }

    /// Reports a connection just accepted on `listener`, admitted or
    /// `refused`, and has the backend look at it. A refused one goes once
    /// its refusal is out, unless the caller reads it (a TLS handshake to
    /// finish before its refusal can be sent).
    pub(crate) fn report_accept(
        &mut self,
        cb: &mut OnEvent<'_>,
        conn: ConnId,
        peer: SocketAddr,
        listener: ListenerId,
        refused: bool,
    ) {
        if refused {
            cb(
                self,
                Event::Refused {
                    conn,
                    peer,
                    listener,
                },
            );
            let slot = self.slot_mut(conn.index());
            if slot.close == CloseReq::None && !slot.reading {
                slot.close = CloseReq::AfterFlush;
            }
        } else {
            cb(
                self,
                Event::Accepted {
                    conn,
                    peer,
                    listener,
                },
            );
        }
        self.mark_dirty(conn.index());
    }

    /// Reports the connection in slot `index` broken (if the caller still
    /// knows it) and asks the backend to close it now. Returns how many
    /// events it handed out.
    pub(crate) fn fail(&mut self, index: u32, error: io::Error, cb: &mut OnEvent<'_>) -> usize {
        let mut delivered = 0;
        if let Some(conn) = self.take_open(index) {
            cb(
                self,
                Event::Closed {
                    conn,
                    error: Some(error),
                },
            );
            delivered = 1;
        }
        self.slot_mut(index).close = CloseReq::Now;
        self.mark_dirty(index);
        delivered
    }

    /// Records that the first `written` queued bytes of slot `index` went
    /// out: drops the buffers written in full, advances a partial one.
    pub(crate) fn consume_sent(&mut self, index: u32, mut written: usize) {
        let slot = &mut self.slots[index as usize];
        let written_total = written.min(slot.unsent);
        while written > 0 {
            let Some(front) = slot.queue.front_mut() else {
                break;
            };
            if front.len() <= written {
                written -= front.len();
                slot.queue.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
        slot.unsent -= written_total;
        self.unsent_total -= written_total;
    }

    /// Drops everything queued on slot `index` (the caller guarantees none
    /// of it is in flight).
    pub(crate) fn drop_queue(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        self.unsent_total -= slot.unsent;
        slot.unsent = 0;
        slot.queue.clear();
    }
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections")
            .field("slots", &self.slots.len())
            .field("admitted", &self.admitted)
            .field("refused", &self.refused)
            .field("unsent_total", &self.unsent_total)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(ops: &mut Connections) -> ConnId {
        match ops.admit() {
            Admission::Accepted(id) => id,
            other => panic!("expected an admission, got {other:?}"),
        }
    }

    #[test]
    fn limits_then_refusals_then_full() {
        let mut ops = Connections::new(2, 1);
        let a = accepted(&mut ops);
        let _b = accepted(&mut ops);
        let Admission::Refused(r) = ops.admit() else {
            panic!("third connection should be refused")
        };
        assert_eq!(ops.admit(), Admission::Full);
        assert!(!ops.is_reading(r), "refused connections are never read");
        assert_eq!(ops.admitted(), 2);
        ops.release(a.index());
        assert_eq!(ops.admitted(), 1);
        let c = accepted(&mut ops);
        assert_eq!(c.index(), a.index(), "slot reused");
        assert_ne!(c, a, "with a new generation");
    }

    #[test]
    fn stale_ids_do_nothing() {
        let mut ops = Connections::new(4, 0);
        let a = accepted(&mut ops);
        assert!(ops.send(a, Bytes::from_static(b"hi")));
        ops.release(a.index());
        let b = accepted(&mut ops);
        assert!(!ops.send(a, Bytes::from_static(b"stale")));
        ops.close_now(a);
        ops.set_reading(a, false);
        assert_eq!(ops.unsent_bytes(a), 0);
        assert!(ops.is_open(b) && ops.is_reading(b));
        assert_eq!(ops.slot(b.index()).close, CloseReq::None);
        assert_eq!(ops.unsent_bytes_total(), 0);
    }

    #[test]
    fn consume_sent_advances_partially() {
        let mut ops = Connections::new(1, 0);
        let a = accepted(&mut ops);
        ops.send(a, Bytes::from_static(b"abc"));
        ops.send(a, Bytes::from_static(b"defgh"));
        assert_eq!(ops.unsent_bytes(a), 8);
        ops.consume_sent(a.index(), 5);
        assert_eq!(ops.unsent_bytes(a), 3);
        assert_eq!(ops.slot(a.index()).queue.front().unwrap().as_ref(), b"fgh");
        ops.consume_sent(a.index(), 3);
        assert!(ops.slot(a.index()).queue.is_empty());
        assert_eq!(ops.unsent_bytes_total(), 0);
    }

    #[test]
    fn closing_refuses_more_sends_and_dirty_is_deduplicated() {
        let mut ops = Connections::new(1, 0);
        let a = accepted(&mut ops);
        ops.send(a, Bytes::from_static(b"x"));
        ops.close(a);
        assert!(!ops.send(a, Bytes::from_static(b"y")));
        assert_eq!(ops.next_dirty(), Some(a.index()));
        assert_eq!(ops.next_dirty(), None);
        assert_eq!(ops.take_open(a.index()), Some(a));
        assert_eq!(ops.take_open(a.index()), None, "Closed is reported once");
    }
}
