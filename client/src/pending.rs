//! Matching replies to requests on one pipelined connection.
//!
//! Ground rules: every request written on a connection first takes a slot in
//! that connection's [`Pending`] table, under a request id unique among the
//! slots in it (a counter that skips 0 and ids still in use). The reader
//! fills the slot of each reply's id; a reply whose slot is gone (its caller
//! timed out) is dropped. When the connection ends, [`Pending::close`] fails
//! every slot and refuses new ones, all under the table's lock, so no
//! request can be registered on a dead connection and then wait forever.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::BytesMut;
use sluice_protocol::{Frame, FrameDecoder, Reply};

use crate::error::{Error, Result};

/// Where a reply goes: a channel end held by the waiting caller.
pub(crate) trait Slot {
    /// Hands over the reply (or the failure). A caller that stopped waiting
    /// simply never reads it.
    fn fill(self, reply: Result<Reply>);
}

impl Slot for std::sync::mpsc::SyncSender<Result<Reply>> {
    fn fill(self, reply: Result<Reply>) {
        // Fails only when the caller gave up waiting: nothing to do.
        let _ = self.try_send(reply);
    }
}

impl Slot for tokio::sync::oneshot::Sender<Result<Reply>> {
    fn fill(self, reply: Result<Reply>) {
        // Fails only when the caller gave up waiting: nothing to do.
        let _ = self.send(reply);
    }
}

#[derive(Debug)]
struct Table<S> {
    slots: HashMap<u32, S>,
    next_id: u32,
    closed: Option<Error>,
}

/// The slots of one connection's requests in flight.
#[derive(Debug)]
pub(crate) struct Pending<S> {
    table: Mutex<Table<S>>,
}

impl<S: Slot> Pending<S> {
    pub(crate) fn new() -> Self {
        Pending {
            table: Mutex::new(Table {
                slots: HashMap::new(),
                next_id: 1,
                closed: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table<S>> {
        // A panic while holding this lock leaves the table consistent (every
        // operation is a single map call), so a poisoned lock is usable.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a slot; returns its request id, or hands the slot back with
    /// the error that closed the connection.
    pub(crate) fn register(&self, slot: S) -> Result<u32, (S, Error)> {
        let mut t = self.lock();
        if let Some(err) = &t.closed {
            return Err((slot, err.clone()));
        }
        let mut id = t.next_id;
        while id == 0 || t.slots.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        t.next_id = id.wrapping_add(1);
        t.slots.insert(id, slot);
        Ok(id)
    }

    /// Frees a slot whose caller stopped waiting; a late reply is dropped.
    pub(crate) fn cancel(&self, id: u32) {
        self.lock().slots.remove(&id);
    }

    /// Fills the slot of `id`; false when there is none (a late reply).
    pub(crate) fn complete(&self, id: u32, reply: Result<Reply>) -> bool {
        let slot = self.lock().slots.remove(&id);
        match slot {
            Some(slot) => {
                slot.fill(reply);
                true
            }
            None => false,
        }
    }

    /// Fails every slot with `err` and refuses new ones. Only the first
    /// close counts.
    pub(crate) fn close(&self, err: &Error) {
        let slots = {
            let mut t = self.lock();
            if t.closed.is_none() {
                t.closed = Some(err.clone());
            }
            std::mem::take(&mut t.slots)
        };
        for (_, slot) in slots {
            slot.fill(Err(err.clone()));
        }
    }

    /// Whether the connection was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }

    /// Requests waiting for a reply.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Hands every whole frame buffered in `buf` to its request, for the
    /// reader of either client. `Ok` when it needs more bytes; the error
    /// that ends the connection when a frame is malformed or ends it.
    pub(crate) fn dispatch_buffered(
        &self,
        decoder: &mut FrameDecoder,
        buf: &mut BytesMut,
    ) -> Result<()> {
        loop {
            match decoder.decode(buf) {
                Ok(Some(frame)) => {
                    if let Some(err) = self.dispatch(frame) {
                        return Err(err);
                    }
                }
                Ok(None) => return Ok(()),
                Err(e) => {
                    return Err(Error::Protocol(format!("bad frame from the server: {e}")));
                }
            }
        }
    }

    /// Hands one frame from the server to its request. Returns the error
    /// that ends the connection, if this frame ends it: an ERROR with a code
    /// that closes the connection (for one request or for none).
    pub(crate) fn dispatch(&self, frame: Frame) -> Option<Error> {
        let reply = Reply::decode(frame.opcode, frame.payload).map_err(|e| {
            Error::Protocol(format!(
                "undecodable reply to request {}: {e}",
                frame.request_id
            ))
        });
        let closing = match &reply {
            Ok(Reply::Error(e)) if e.code.closes_connection() => Some(Error::from(e.clone())),
            _ => None,
        };
        if frame.request_id != 0 {
            self.complete(frame.request_id, reply);
        } else if closing.is_none() {
            tracing::warn!(?reply, "sluice: a reply to no request");
        }
        closing
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{Receiver, sync_channel};

    use bytes::{Bytes, BytesMut};
    use sluice_protocol::{ErrorCode, FrameDecoder, WireError};

    use super::*;

    type Tx = std::sync::mpsc::SyncSender<Result<Reply>>;

    fn slot() -> (Tx, Receiver<Result<Reply>>) {
        sync_channel(1)
    }

    fn frame(id: u32, reply: &Reply) -> Frame {
        let mut buf = BytesMut::new();
        reply.encode(id, &mut buf).unwrap();
        FrameDecoder::new(1 << 20)
            .decode(&mut buf)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn replies_find_their_requests_in_any_order() {
        let p = Pending::new();
        let (a, ra) = slot();
        let (b, rb) = slot();
        let ia = p.register(a).unwrap();
        let ib = p.register(b).unwrap();
        assert_ne!(ia, ib);
        assert_ne!(ia, 0);
        // The second request's reply comes first (a waiting receive).
        assert!(p.dispatch(frame(ib, &Reply::Pong { nonce: 2 })).is_none());
        assert!(matches!(rb.try_recv(), Ok(Ok(Reply::Pong { nonce: 2 }))));
        assert!(ra.try_recv().is_err(), "not answered yet");
        assert!(p.dispatch(frame(ia, &Reply::Pong { nonce: 1 })).is_none());
        assert!(matches!(ra.try_recv(), Ok(Ok(Reply::Pong { nonce: 1 }))));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn late_replies_to_cancelled_requests_are_dropped() {
        let p = Pending::new();
        let (a, ra) = slot();
        let id = p.register(a).unwrap();
        p.cancel(id);
        assert!(!p.complete(id, Ok(Reply::SetQueue)));
        assert!(ra.try_recv().is_err());
    }

    #[test]
    fn ids_skip_zero_and_ids_in_use() {
        let p = Pending::new();
        p.lock().next_id = u32::MAX;
        let (a, _ra) = slot();
        let (b, _rb) = slot();
        assert_eq!(p.register(a).unwrap(), u32::MAX);
        assert_eq!(p.register(b).unwrap(), 1, "0 is skipped");
        p.lock().next_id = u32::MAX;
        let (c, _rc) = slot();
        assert_eq!(p.register(c).unwrap(), 2, "MAX and 1 are in use");
    }

    #[test]
    fn close_fails_everything_and_refuses_new_requests() {
        let p = Pending::new();
        let (a, ra) = slot();
        p.register(a).unwrap();
        p.close(&Error::Disconnected("eof".into()));
        assert!(matches!(ra.try_recv(), Ok(Err(Error::Disconnected(_)))));
        let (b, _rb) = slot();
        let Err((_, err)) = p.register(b) else {
            panic!("refused")
        };
        assert!(matches!(err, Error::Disconnected(_)));
        assert!(p.is_closed());
        // A second close does not replace the first reason.
        p.close(&Error::Closed);
        let (c, _rc) = slot();
        assert!(matches!(p.register(c), Err((_, Error::Disconnected(_)))));
    }

    #[test]
    fn errors_that_close_the_connection_are_reported() {
        let p = Pending::new();
        let (a, ra) = slot();
        let id = p.register(a).unwrap();
        let shutting = Reply::Error(WireError::new(ErrorCode::ShuttingDown, "bye"));
        let closing = p.dispatch(frame(id, &shutting));
        assert!(matches!(closing, Some(Error::ShuttingDown(_))));
        assert!(matches!(ra.try_recv(), Ok(Ok(Reply::Error(_)))));
        // An ordinary error answers its request and keeps the connection.
        let (b, rb) = slot();
        let id = p.register(b).unwrap();
        let gone = Reply::Error(WireError::new(ErrorCode::QueueNotFound, "q"));
        assert!(p.dispatch(frame(id, &gone)).is_none());
        assert!(rb.try_recv().is_ok());
        // An error for no request that closes the connection.
        let too_many = Reply::Error(WireError::new(ErrorCode::TooManyConnections, "full"));
        assert!(matches!(
            p.dispatch(frame(0, &too_many)),
            Some(Error::TooManyConnections(_))
        ));
    }

    #[test]
    fn undecodable_replies_fail_their_request_only() {
        let p = Pending::new();
        let (a, ra) = slot();
        let id = p.register(a).unwrap();
        let bogus = Frame {
            opcode: sluice_protocol::opcode::PONG,
            flags: 0,
            request_id: id,
            payload: Bytes::from_static(b"short"),
        };
        assert!(p.dispatch(bogus).is_none());
        assert!(matches!(ra.try_recv(), Ok(Err(Error::Protocol(_)))));
    }
}
