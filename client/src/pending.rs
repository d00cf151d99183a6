//! Matching replies to requests on one pipelined connection, for both
//! clients.
//!
//! Ground rules: every request written on a connection first takes an entry
//! in that connection's [`Table`], under a request id unique among the
//! entries in it (a counter that skips 0 and ids still in use). Whoever
//! reads the connection decodes each reply frame with [`decode`] and fills
//! the entry of its id; a reply whose entry is gone (its caller timed out or
//! gave up) is dropped. When the connection ends, [`Table::close`] records
//! why and refuses new entries, all under the lock that guards the table, so
//! no request can be registered on a dead connection and then wait forever.
//! What each entry holds (a reply slot, a parked thread, a waker) is the
//! client's business.

use std::collections::HashMap;

use bytes::BytesMut;
use sluice_protocol::{Frame, FrameDecoder, Reply};

use crate::error::{Error, Result};

/// The entries of one connection's requests in flight.
#[derive(Debug)]
pub(crate) struct Table<E> {
    entries: HashMap<u32, E>,
    next_id: u32,
    closed: Option<Error>,
}

impl<E> Table<E> {
    pub(crate) fn new() -> Self {
        Table {
            entries: HashMap::new(),
            next_id: 1,
            closed: None,
        }
    }

    /// Adds an entry; returns its request id, or the error that closed the
    /// connection.
    pub(crate) fn register(&mut self, entry: E) -> Result<u32> {
        if let Some(err) = &self.closed {
            return Err(err.clone());
        }
        let mut id = self.next_id;
        while id == 0 || self.entries.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        self.next_id = id.wrapping_add(1);
        self.entries.insert(id, entry);
        Ok(id)
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut E> {
        self.entries.get_mut(&id)
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<E> {
        self.entries.remove(&id)
    }

    /// Every entry, for failing them all or finding one to wake.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut E)> {
        self.entries.iter_mut().map(|(id, e)| (*id, e))
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
        self.entries.len()
    }
}

/// One frame from the server, read.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The request it answers; 0 for none.
    pub(crate) id: u32,
    pub(crate) reply: Result<Reply>,
    /// The error that ends the connection, when this frame ends it: an ERROR
    /// with a code that closes the connection (for one request or for none).
    pub(crate) closing: Option<Error>,
}

/// Reads one frame from the server. An undecodable payload fails only its
/// own request.
pub(crate) fn decode(frame: Frame) -> Decoded {
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
    if frame.request_id == 0 && closing.is_none() {
        tracing::warn!(?reply, "sluice: a reply to no request");
    }
    Decoded {
        id: frame.request_id,
        reply,
        closing,
    }
}

/// Cuts every whole frame buffered in `buf` and hands each, read, to `each`.
/// `Ok` when it needs more bytes; the error that ends the connection when a
/// frame is malformed or ends it (the frames before it are handed over).
pub(crate) fn decode_buffered(
    decoder: &mut FrameDecoder,
    buf: &mut BytesMut,
    mut each: impl FnMut(Decoded),
) -> Result<()> {
    loop {
        match decoder.decode(buf) {
            Ok(Some(frame)) => {
                let decoded = decode(frame);
                let closing = decoded.closing.clone();
                each(decoded);
                if let Some(err) = closing {
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
    fn ids_skip_zero_and_ids_in_use() {
        let mut t = Table::new();
        t.next_id = u32::MAX;
        assert_eq!(t.register('a').unwrap(), u32::MAX);
        assert_eq!(t.register('b').unwrap(), 1, "0 is skipped");
        t.next_id = u32::MAX;
        assert_eq!(t.register('c').unwrap(), 2, "MAX and 1 are in use");
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove(1), Some('b'));
        assert_eq!(t.remove(1), None);
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
    }

    #[test]
    fn errors_that_close_the_connection_are_reported() {
        let shutting = Reply::Error(WireError::new(ErrorCode::ShuttingDown, "bye"));
        let d = decode(frame(7, &shutting));
        assert_eq!(d.id, 7);
        assert!(matches!(d.closing, Some(Error::ShuttingDown(_))));
        assert!(matches!(d.reply, Ok(Reply::Error(_))));
        // An ordinary error answers its request and keeps the connection.
        let gone = Reply::Error(WireError::new(ErrorCode::QueueNotFound, "q"));
        assert!(decode(frame(8, &gone)).closing.is_none());
        // An error for no request that closes the connection.
        let too_many = Reply::Error(WireError::new(ErrorCode::TooManyConnections, "full"));
        let d = decode(frame(0, &too_many));
        assert!(matches!(d.closing, Some(Error::TooManyConnections(_))));
    }

    #[test]
    fn undecodable_replies_fail_their_request_only() {
        let bogus = Frame {
            opcode: sluice_protocol::opcode::PONG,
            flags: 0,
            request_id: 3,
            payload: Bytes::from_static(b"short"),
        };
        let d = decode(bogus);
        assert!(matches!(d.reply, Err(Error::Protocol(_))));
        assert!(d.closing.is_none());
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
        decode_buffered(&mut decoder, &mut buf, |d| ids.push(d.id)).unwrap();
        assert_eq!(ids, [1, 2], "the third frame is not whole yet");
        buf.unsplit(rest.split());
        decode_buffered(&mut decoder, &mut buf, |d| ids.push(d.id)).unwrap();
        assert_eq!(ids, [1, 2, 3]);

        let shutting = Reply::Error(WireError::new(ErrorCode::ShuttingDown, "bye"));
        shutting.encode(4, &mut buf).unwrap();
        Reply::Pong { nonce: 5 }.encode(5, &mut buf).unwrap();
        let end = decode_buffered(&mut decoder, &mut buf, |d| ids.push(d.id));
        assert!(matches!(end, Err(Error::ShuttingDown(_))));
        assert_eq!(ids, [1, 2, 3, 4], "nothing after the closing frame");

        let mut junk = BytesMut::from(&[2u8, 0, 0, 0, 0, 0][..]);
        assert!(matches!(
            decode_buffered(&mut decoder, &mut junk, |_| {}),
            Err(Error::Protocol(_))
        ));
    }
}
