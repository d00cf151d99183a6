//! Matching replies to requests on one pipelined connection, for both
//! clients.
//!
//! Ground rules: every request written on a connection first takes an entry
//! in that connection's [`Table`], whose request id names the entry's slot
//! (low 16 bits) and the slot's generation (high 16 bits, never 0, so no id
//! is 0). A slot's generation moves on when its entry is removed, so a late
//! reply to a request whose caller gave up names a generation no longer
//! there and is dropped, even when the slot holds a newer request. Whoever
//! reads the connection cuts frames with [`cut_frames`] and files each in
//! the entry of its id; the waiting caller decodes its own reply
//! ([`read_reply`]), on its own thread or task. When the connection ends,
//! [`Table::close`] records why and refuses new entries, all under the lock
//! that guards the table, so no request can be registered on a dead
//! connection and then wait forever. What each entry holds besides (a parked
//! thread, a waker) is the client's business.

use bytes::BytesMut;
use sluice_protocol::{Frame, FrameDecoder, Reply, opcode};

use crate::error::{Error, Result};

/// Most requests in flight on one connection (slots are 16 bits). The
/// server stops reading a connection long before (1,024 by default).
pub(crate) const IN_FLIGHT_MAX: usize = 1 << 16;

#[derive(Debug)]
struct Slot<E> {
    /// The generation the next id of this slot carries; never 0.
    generation: u16,
    entry: Option<E>,
}

/// The entries of one connection's requests in flight.
#[derive(Debug)]
pub(crate) struct Table<E> {
    slots: Vec<Slot<E>>,
    /// Slots without an entry.
    free: Vec<u16>,
    len: usize,
    closed: Option<Error>,
}

fn split(id: u32) -> (usize, u16) {
    // Both halves fit by construction: the low 16 bits and the high 16 bits.
    ((id & 0xffff) as usize, (id >> 16) as u16)
}

impl<E> Table<E> {
    pub(crate) fn new() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            closed: None,
        }
    }

    /// Adds an entry; returns its request id, or the error that closed the
    /// connection (or says too many requests are in flight).
    pub(crate) fn register(&mut self, entry: E) -> Result<u32> {
        if let Some(err) = &self.closed {
            return Err(err.clone());
        }
        let index = match self.free.pop() {
            Some(i) => usize::from(i),
            None if self.slots.len() < IN_FLIGHT_MAX => {
                self.slots.push(Slot {
                    generation: 1,
                    entry: None,
                });
                self.slots.len() - 1
            }
            None => {
                return Err(Error::InvalidArgument(format!(
                    "more than {IN_FLIGHT_MAX} requests in flight on one connection"
                )));
            }
        };
        let slot = &mut self.slots[index];
        slot.entry = Some(entry);
        self.len += 1;
        // `index` is below IN_FLIGHT_MAX = 2^16.
        Ok(u32::from(slot.generation) << 16 | index as u32)
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut E> {
        let (index, generation) = split(id);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        slot.entry.as_mut()
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<E> {
        let (index, generation) = split(id);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let entry = slot.entry.take()?;
        slot.generation = slot.generation.checked_add(1).unwrap_or(1);
        self.len -= 1;
        // `index` came from a u32 id's low 16 bits.
        self.free.push(index as u16);
        Some(entry)
    }

    /// Registers a fresh entry for each slot of `ids` and writes its id
    /// there: all of them, or, on an error, none (those already registered
    /// are removed again).
    pub(crate) fn register_all(&mut self, ids: &mut [u32]) -> Result<()>
    where
        E: Default,
    {
        for i in 0..ids.len() {
            match self.register(E::default()) {
                Ok(id) => ids[i] = id,
                Err(err) => {
                    self.remove_all(&ids[..i]);
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Removes the entries of `ids`.
    pub(crate) fn remove_all(&mut self, ids: &[u32]) {
        for &id in ids {
            self.remove(id);
        }
    }

    /// Every entry, for failing them all or finding one to wake.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut E> {
        self.slots.iter_mut().filter_map(|s| s.entry.as_mut())
    }

    /// Records why the connection ended (only the first reason counts) and
    /// refuses new entries. The entries stay for their callers to collect.
    pub(crate) fn close(&mut self, err: &Error) {
        if self.closed.is_none() {
            self.closed = Some(err.clone());
        }
    }

    /// Why the connection ended, once it has.
    pub(crate) fn closed(&self) -> Option<&Error> {
        self.closed.as_ref()
    }

    /// Requests waiting for a reply.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Decodes a reply frame, on the thread or task of the request it answers.
/// An undecodable payload fails only that request.
pub(crate) fn read_reply(frame: Frame) -> Result<Reply> {
    let id = frame.request_id;
    Reply::decode(frame.opcode, frame.payload)
        .map_err(|e| Error::Protocol(format!("undecodable reply to request {id}: {e}")))
}

/// The error that ends the connection when `frame` ends it: an ERROR whose
/// code closes the connection (for one request or for none).
fn closing(frame: &Frame) -> Option<Error> {
    if frame.opcode != opcode::ERROR {
        return None;
    }
    match Reply::decode(frame.opcode, frame.payload.clone()) {
        Ok(Reply::Error(e)) if e.code.closes_connection() => Some(Error::from(e)),
        _ => None,
    }
}

/// Cuts every whole frame buffered in `buf` and hands each to `each`.
/// `Ok` when it needs more bytes; the error that ends the connection when a
/// frame is malformed or ends it (the frames before it, and a closing error
/// that answers a request, are handed over).
pub(crate) fn cut_frames(
    decoder: &mut FrameDecoder,
    buf: &mut BytesMut,
    mut each: impl FnMut(Frame),
) -> Result<()> {
    loop {
        match decoder.decode(buf) {
            Ok(Some(frame)) => {
                let end = closing(&frame);
                if frame.request_id != 0 {
                    each(frame);
                } else if end.is_none() {
                    tracing::warn!(opcode = frame.opcode, "sluice: a reply to no request");
                }
                if let Some(err) = end {
                    return Err(err);
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => return Err(Error::Protocol(format!("bad frame from the server: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use sluice_protocol::{ErrorCode, FrameDecoder, WireError};

    use super::*;

    fn frame(id: u32, reply: &Reply) -> Frame {
        let mut buf = BytesMut::new();
        reply.encode(id, &mut buf).unwrap();
        FrameDecoder::new(1 << 20)
            .decode(&mut buf)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn ids_are_never_zero_and_a_reused_slot_gets_a_new_id() {
        let mut t = Table::new();
        let a = t.register('a').unwrap();
        assert_ne!(a, 0);
        assert_eq!(t.remove(a), Some('a'));
        let b = t.register('b').unwrap();
        assert_eq!(a & 0xffff, b & 0xffff, "the slot is reused");
        assert_ne!(a, b, "under a new generation");
        assert_eq!(t.remove(a), None, "a late reply to `a` finds nothing");
        assert!(t.get_mut(a).is_none());
        assert_eq!(t.get_mut(b), Some(&mut 'b'));
        assert_eq!(t.len(), 1);
        // Generations wrap past 0.
        t.slots[0].generation = u16::MAX;
        assert_eq!(t.remove(b), None, "b's generation is gone");
        t.slots[0].entry = None;
        t.len = 0;
        t.free.push(0);
        let c = t.register('c').unwrap();
        assert_eq!(c >> 16, u32::from(u16::MAX));
        t.remove(c);
        let d = t.register('d').unwrap();
        assert_eq!(d >> 16, 1, "0 is skipped");
    }

    #[test]
    fn the_table_holds_at_most_its_limit() {
        let mut t = Table::new();
        for _ in 0..IN_FLIGHT_MAX {
            t.register(()).unwrap();
        }
        assert!(matches!(t.register(()), Err(Error::InvalidArgument(_))));
        assert_eq!(t.len(), IN_FLIGHT_MAX);
        assert!(t.get_mut(0).is_none(), "id 0 names nothing");
    }

    #[test]
    fn requests_are_registered_all_or_none() {
        let mut t: Table<()> = Table::new();
        let mut ids = [0u32; 3];
        t.register_all(&mut ids).unwrap();
        assert!(ids.iter().all(|&id| id != 0 && t.get_mut(id).is_some()));
        assert_eq!(t.len(), 3);
        // Room for two more: a batch of five takes none.
        for _ in 0..IN_FLIGHT_MAX - 5 {
            t.register(()).unwrap();
        }
        let mut five = [0u32; 5];
        assert!(matches!(
            t.register_all(&mut five),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(t.len(), IN_FLIGHT_MAX - 2);
        t.remove_all(&ids);
        assert_eq!(t.len(), IN_FLIGHT_MAX - 5);
        assert!(ids.iter().all(|&id| t.get_mut(id).is_none()));
        // A closed table takes none either.
        t.close(&Error::Closed);
        let mut one = [0u32; 1];
        assert!(matches!(t.register_all(&mut one), Err(Error::Closed)));
        assert_eq!(t.len(), IN_FLIGHT_MAX - 5);
    }

    #[test]
    fn close_refuses_new_entries_and_keeps_the_first_reason() {
        let mut t = Table::new();
        let id = t.register(()).unwrap();
        t.close(&Error::Disconnected("eof".into()));
        assert!(matches!(t.register(()), Err(Error::Disconnected(_))));
        assert!(t.get_mut(id).is_some(), "entries stay for their callers");
        t.close(&Error::Closed);
        assert!(matches!(t.closed(), Some(Error::Disconnected(_))));
        assert_eq!(t.iter_mut().count(), 1);
    }

    #[test]
    fn errors_that_close_the_connection_are_reported() {
        let shutting = Reply::Error(WireError::new(ErrorCode::ShuttingDown, "bye"));
        assert!(matches!(
            closing(&frame(7, &shutting)),
            Some(Error::ShuttingDown(_))
        ));
        // An ordinary error answers its request and keeps the connection.
        let gone = Reply::Error(WireError::new(ErrorCode::QueueNotFound, "q"));
        assert!(closing(&frame(8, &gone)).is_none());
        assert!(closing(&frame(8, &Reply::Pong { nonce: 1 })).is_none());
    }

    #[test]
    fn undecodable_replies_fail_their_request_only() {
        let bogus = Frame {
            opcode: sluice_protocol::opcode::PONG,
            flags: 0,
            request_id: 3,
            payload: Bytes::from_static(b"short"),
        };
        assert!(closing(&bogus).is_none());
        assert!(matches!(read_reply(bogus), Err(Error::Protocol(_))));
    }

    #[test]
    fn buffered_frames_are_cut_in_order_until_one_closes() {
        let mut buf = BytesMut::new();
        Reply::Pong { nonce: 1 }.encode(1, &mut buf).unwrap();
        Reply::Pong { nonce: 2 }.encode(2, &mut buf).unwrap();
        let half = buf.len();
        Reply::Pong { nonce: 3 }.encode(3, &mut buf).unwrap();
        let mut rest = buf.split_off(half + 4);
        let mut decoder = FrameDecoder::new(1 << 20);
        let mut ids = Vec::new();
        cut_frames(&mut decoder, &mut buf, |f| ids.push(f.request_id)).unwrap();
        assert_eq!(ids, [1, 2], "the third frame is not whole yet");
        buf.unsplit(rest.split());
        cut_frames(&mut decoder, &mut buf, |f| ids.push(f.request_id)).unwrap();
        assert_eq!(ids, [1, 2, 3]);

        // A closing error for no request ends it without being handed over;
        // one that answers a request is handed to it first.
        let too_many = Reply::Error(WireError::new(ErrorCode::TooManyConnections, "full"));
        too_many.encode(0, &mut buf).unwrap();
        Reply::Pong { nonce: 5 }.encode(5, &mut buf).unwrap();
        let end = cut_frames(&mut decoder, &mut buf, |f| ids.push(f.request_id));
        assert!(matches!(end, Err(Error::TooManyConnections(_))));
        assert_eq!(ids, [1, 2, 3], "nothing after the closing frame");
        buf.clear();
        let shutting = Reply::Error(WireError::new(ErrorCode::ShuttingDown, "bye"));
        shutting.encode(4, &mut buf).unwrap();
        let end = cut_frames(&mut decoder, &mut buf, |f| ids.push(f.request_id));
        assert!(matches!(end, Err(Error::ShuttingDown(_))));
        assert_eq!(ids, [1, 2, 3, 4]);

        let mut junk = BytesMut::from(&[2u8, 0, 0, 0, 0, 0][..]);
        assert!(matches!(
            cut_frames(&mut decoder, &mut junk, |_| {}),
            Err(Error::Protocol(_))
        ));
    }
}
