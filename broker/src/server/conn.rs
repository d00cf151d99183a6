//! One client connection as its shard sees it: where it is in its life
//! (HELLO, ready, closing), the frames it is cutting out of its bytes, the
//! replies waiting to be handed to the driver, and its requests in flight.

use std::net::SocketAddr;

use bytes::BytesMut;
use sluice_protocol::FrameDecoder;

use crate::io::ConnId;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; the first frame must be a HELLO.
    Hello,
    /// HELLO succeeded: requests are served.
    Ready,
    /// Closing after its last replies are written: nothing more is read or
    /// served.
    Closing,
}

/// A connection's state.
#[derive(Debug)]
pub struct Conn {
    /// The driver's id (slot and generation).
    pub id: ConnId,
    /// The peer, for logs.
    pub peer: SocketAddr,
    /// Where it is.
    pub phase: Phase,
    /// Cuts frames out of `inbuf`; its limit rises after HELLO.
    pub decoder: FrameDecoder,
    /// Received bytes not yet cut into frames. The driver lends each read
    /// for its callback only, so it is copied here; frames are split off
    /// its front without copying.
    pub inbuf: BytesMut,
    /// Replies encoded this loop turn, handed to the driver at its end.
    pub out: BytesMut,
    /// When it was accepted (engine ns): the HELLO deadline counts from it.
    pub accepted_ns: u64,
    /// When the frame now partly in `inbuf` began arriving, if one did.
    pub partial_since_ns: Option<u64>,
    /// When closing began.
    pub closing_since_ns: u64,
    /// When bytes last arrived (a draining server closes a connection once
    /// it has been quiet a moment, so what was already sent gets answered).
    pub last_data_ns: u64,
    /// Tickets of its requests the engine has not answered yet.
    pub deferred: Vec<u64>,
    /// A request other than RECEIVE that the engine answers later (another
    /// shard must act: a forwarded delete, a fan-out). Until it is answered
    /// no further frame of this connection is served, so requests take
    /// effect, and are answered, in the order they arrived; only RECEIVE
    /// replies may come late (PROTOCOL.md §3).
    pub barrier: Option<u64>,
    /// Whether it holds one of `--max-connections`.
    pub counted: bool,
    /// Whether reading is paused for back-pressure.
    pub paused: bool,
}

impl Conn {
    /// A new connection, waiting for its HELLO.
    pub fn new(
        id: ConnId,
        peer: SocketAddr,
        hello_frame_bytes_max: u32,
        now_ns: u64,
        counted: bool,
    ) -> Conn {
        Conn {
            id,
            peer,
            phase: Phase::Hello,
            decoder: FrameDecoder::new(hello_frame_bytes_max),
            inbuf: BytesMut::new(),
            out: BytesMut::new(),
            accepted_ns: now_ns,
            partial_since_ns: None,
            closing_since_ns: 0,
            last_data_ns: now_ns,
            deferred: Vec::new(),
            barrier: None,
            counted,
            paused: false,
        }
    }

    /// Requests read and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.deferred.len()
    }

    /// Forgets a ticket the engine answered; false if it was not this
    /// connection's.
    pub fn take_ticket(&mut self, ticket: u64) -> bool {
        match self.deferred.iter().position(|&t| t == ticket) {
            Some(i) => {
                self.deferred.swap_remove(i);
                true
            }
            None => false,
        }
    }
}
