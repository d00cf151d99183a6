//! One connection's protocol state machine, without a socket: bytes and the
//! time go in; commands for the io layer, requests for the engine and reply
//! bytes come out (the shape of quinn-proto's `Connection`).
//!
//! A [`Session`] knows the protocol's rules for a connection: HELLO first
//! (4 KiB frames and a deadline until then), the auth token, the frame
//! limit and the deadline for a frame begun and not finished, the order of
//! requests, back-pressure, and how a connection closes. It knows nothing
//! of sockets or threads: the shard loop (`shard_loop/`) feeds it what
//! the driver reports and carries out its [`Command`]s, and lends it the
//! engine through the [`EngineAccess`] trait. The unit tests (`tests.rs`) drive
//! it without a socket; HELLO is in `hello.rs`, serving requests in
//! `serve.rs`.
//!
//! # Order
//!
//! Requests take effect, and are answered, in the order they arrive. A
//! request other than RECEIVE that the engine answers later (forwarded to
//! another shard, or fanned out to all) is a *barrier*: no further frame of
//! the connection is served until it is answered (its bytes wait in the
//! input buffer; reading pauses once a frame's worth waits). Only RECEIVE
//! replies may overtake: a RECEIVE that waits or steals holds nothing up.
//!
//! What a session needs of the whole server (the `SERVER_STATS` reply, a
//! move of the manual clock, the auth guard's verdict on a HELLO's token) it
//! asks with [`Command::Ask`]; the shard loop answers through
//! [`Session::on_answer`] before anything else of the connection is
//! served, so a question is a barrier too.
//!
//! `ADVANCE_CLOCK` is a barrier twice over: the server moves the manual
//! clock when asked, but its reply, and the frames behind it, wait until
//! every shard has caught up with the new time ([`Session::clock_wait`], [`Session::on_clock_caught_up`]),
//! so what a client sends after the reply sees the clock moved everywhere
//! (a lease that ran out on another shard is receivable from this one).
//!
//! # Back-pressure
//!
//! A session stops reading (and serving the frames it has buffered) while
//! it has its maximum of requests in flight, while its unsent reply bytes
//! (the io layer's and its own) reach their limit, or while it has any
//! unsent reply and the server's unsent total is over its limit. It reads
//! again once in flight and unsent bytes fall below the limits (unsent
//! bytes below half, so a connection does not flap).
//!
//! # Heartbeat
//!
//! A version-2 HELLO may ask for a session timeout: the session then closes
//! the connection once no bytes have arrived for that long (checked by
//! [`Session::tick`], on real time). A client keeps it open with PINGs.
//!
//! # Bound leases
//!
//! A RECEIVE with the bind flag records the receipts it delivers
//! ([`BoundLeases`]); a DELETE or a release (visibility 0) on the
//! connection forgets them. When the connection closes, for whatever
//! reason (the peer, an error, the session timeout, shutdown), the session
//! hands what is left to the engine as [`Op::Abandon`]: the owner of each
//! message (this shard or another) releases the lease if it is still
//! current and running.
//!
//! # Closing
//!
//! A protocol error is answered and then the connection closes: nothing
//! more is read or served, its requests still in the engine are cancelled,
//! replies to them are dropped, its bound leases are released, and what was
//! already written is flushed; a peer that does not read its last replies
//! within [`CLOSE_FLUSH_TIMEOUT_NS`] is cut off.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use sluice_protocol::{
    ErrorCode, Frame, FrameDecoder, HelloReply, QueueName, Reply, Request, WireError,
};

mod ask;
mod command;
mod hello;
mod serve;

pub use self::ask::Answer;
use self::ask::Asked;
pub use self::command::{Command, Phase, Question};
pub use super::bound_leases::BoundLeases;
use super::clock;
use super::config::AuthToken;
use super::limits::{CLOSE_FLUSH_TIMEOUT_NS, DRAIN_QUIET_NS};
use super::shared::{ShardStats, error_slot, op_slot};
use crate::engine::{Op, OpResult};

/// How the engine answered a request.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "a return value, never stored; boxing would allocate per request"
)]
pub enum Submitted {
    /// At once.
    Done(OpResult),
    /// Later: the result comes to [`Session::on_result`] under this ticket.
    Later(u64),
}

/// What a session may do with the engine, as the shard loop lends it
/// (`EngineLink`): start operations, forget those of a connection gone,
/// and hand results back for reuse. Not the engine itself (that is
/// `engine::Shard`).
pub trait EngineAccess {
    /// Starts `op`.
    fn submit(&mut self, op: Op) -> Submitted;
    /// Starts `op` whose result answers no one (a release).
    fn submit_unanswered(&mut self, op: Op);
    /// Forgets `ticket`: its connection is gone.
    fn cancel(&mut self, ticket: u64);
    /// Hands a result back once its reply is written, so the engine fills
    /// its vectors again instead of allocating new ones.
    fn recycle(&mut self, result: OpResult);
}

/// What every session of a shard shares: the limits it enforces and what a
/// HELLO is answered with.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Largest frame after HELLO.
    pub frame_bytes_max: u32,
    /// Largest frame before HELLO.
    pub hello_frame_bytes_max: u32,
    /// Time from accept to HELLO.
    pub hello_timeout_ns: u64,
    /// Time a frame may take to arrive once begun.
    pub frame_timeout_ns: u64,
    /// Requests read and not yet answered, per connection.
    pub in_flight_max: usize,
    /// Reply bytes not yet written, per connection.
    pub unsent_max: usize,
    /// The token HELLO must carry, if any.
    pub auth_token: Option<AuthToken>,
    /// The HELLO reply (server version, shard, limits).
    pub hello: HelloReply,
}

/// The shard's view of the moment, for one call into a session.
#[derive(Debug)]
pub struct SessionContext<'a> {
    /// Monotonic nanoseconds, read after the last wait returned.
    pub now_ns: u64,
    /// The server is shutting down: nothing new starts.
    pub draining: bool,
    /// The server's unsent reply total is over its limit.
    pub unsent_over: bool,
    /// Reply bytes the io layer holds for this connection, not yet written.
    pub io_unsent: usize,
    /// The shard's limits and HELLO reply.
    pub config: &'a SessionConfig,
    /// The shard's counters.
    pub stats: &'a ShardStats,
}

/// A request the engine answers later.
#[derive(Debug)]
struct Deferred {
    ticket: u64,
    request_id: u32,
    /// The queue of a RECEIVE, to release messages its reply cannot carry.
    receive_queue: Option<QueueName>,
    /// A RECEIVE whose leases bind to the connection.
    bind: bool,
    /// Its operation slot and when its frame was decoded.
    started: Option<(usize, u64)>,
}

/// One connection's protocol state. See the module docs.
#[derive(Debug)]
pub struct Session {
    peer: SocketAddr,
    phase: Phase,
    decoder: FrameDecoder,
    /// Received bytes not yet cut into frames. The driver lends each read
    /// for its callback only, so it is copied here; frames are split off
    /// its front without copying.
    inbuf: BytesMut,
    /// Replies encoded and not yet handed over in a [`Command::Send`].
    out: BytesMut,
    accepted_ns: u64,
    /// When the frame now partly in `inbuf` began arriving, if one did.
    partial_since_ns: Option<u64>,
    closing_since_ns: u64,
    /// When bytes last arrived (a draining server closes a connection once
    /// it has been quiet a moment, so what was already sent gets answered;
    /// the session timeout counts from it).
    last_data_ns: u64,
    /// The session timeout the HELLO asked for, if any.
    session_timeout_ns: Option<u64>,
    /// The protocol version the HELLO asked for (0 before it).
    version: u16,
    /// The leases bound to this connection.
    bound: BoundLeases,
    deferred: Vec<Deferred>,
    /// The ticket of the request that holds the connection up (see the module docs).
    barrier: Option<u64>,
    /// An `ADVANCE_CLOCK` answered once every shard reached this engine
    /// time: its request id, the time and the reply.
    clock_wait: Option<(u32, u64, Reply)>,
    /// The question asked of the server, with the operation slot and start
    /// of the request that asked it; it holds the connection up until
    /// [`Session::on_answer`].
    asked: Option<(Asked, Option<(usize, u64)>)>,
    paused: bool,
    commands: Vec<Command>,
    /// Bytes in the `Send`s of `commands`.
    commanded_bytes: usize,
    /// A failed HELLO's `Unauthorized`, held until the time given (a peer
    /// that keeps failing is slowed down); nothing more is read meanwhile.
    held: Option<(u64, u32, WireError)>,
    /// The request being served: its operation slot and when its frame was
    /// decoded (see [`RequestDurations`](super::shared::RequestDurations)).
    serving: Option<(usize, u64)>,
}

impl Session {
    /// A new connection, waiting for its HELLO.
    #[must_use]
    pub fn new(peer: SocketAddr, config: &SessionConfig, now_ns: u64) -> Session {
        Session {
            peer,
            phase: Phase::Hello,
            decoder: FrameDecoder::new(config.hello_frame_bytes_max),
            inbuf: BytesMut::new(),
            out: BytesMut::new(),
            accepted_ns: now_ns,
            partial_since_ns: None,
            closing_since_ns: 0,
            last_data_ns: now_ns,
            session_timeout_ns: None,
            version: 0,
            bound: BoundLeases::new(),
            deferred: Vec::new(),
            barrier: None,
            clock_wait: None,
            asked: None,
            paused: false,
            commands: Vec::new(),
            commanded_bytes: 0,
            held: None,
            serving: None,
        }
    }

    /// A connection refused at once: `reply` (request id 0), then closed.
    #[must_use]
    pub fn refused(
        peer: SocketAddr,
        config: &SessionConfig,
        now_ns: u64,
        reply: &Reply,
    ) -> Session {
        let mut s = Session::new(peer, config, now_ns);
        encode_into(&mut s.out, 0, reply);
        s.close(now_ns);
        s
    }

    /// Where the connection is.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Requests read and not yet answered.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.deferred.len()
    }

    /// Leases bound to the connection now.
    #[must_use]
    pub fn bound_leases(&self) -> usize {
        self.bound.len()
    }

    /// Whether reading is paused for back-pressure.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether replies wait in the output for [`Session::flush`].
    #[must_use]
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// The peer, for logs.
    #[must_use]
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The commands issued since the last call, in order, for the io layer to carry out.
    pub fn commands(&mut self) -> std::vec::Drain<'_, Command> {
        self.commanded_bytes = 0;
        self.commands.drain(..)
    }

    /// Bytes arrived.
    pub fn on_data(
        &mut self,
        bytes: &[u8],
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        if self.phase == Phase::Closing || self.held.is_some() {
            return;
        }
        self.inbuf.extend_from_slice(bytes);
        self.last_data_ns = cx.now_ns;
        self.process(cx, engine);
    }

    /// The engine answered `ticket`; false if it was not this session's.
    pub fn on_result(
        &mut self,
        ticket: u64,
        result: OpResult,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) -> bool {
        let Some(i) = self.deferred.iter().position(|d| d.ticket == ticket) else {
            return false;
        };
        let d = self.deferred.swap_remove(i);
        let lifted = self.barrier == Some(ticket);
        if lifted {
            self.barrier = None;
        }
        self.serving = d.started;
        self.answer(
            d.request_id,
            d.receive_queue,
            d.bind,
            result,
            cx.stats,
            engine,
        );
        self.serving = None;
        if lifted && !self.paused {
            // Serve what arrived behind it (a paused session is resumed by
            // `resume` instead).
            self.process(cx, engine);
        }
        true
    }

    /// Reads again if back-pressure allows; false while still paused.
    pub fn resume(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) -> bool {
        if !self.paused || self.phase == Phase::Closing {
            return true;
        }
        if self.blocked(cx, true) {
            return false;
        }
        self.paused = false;
        self.commands.push(Command::SetReading(true));
        self.process(cx, engine);
        !self.paused
    }

    /// Hands the replies written so far to the io layer.
    pub fn flush(&mut self) {
        if !self.out.is_empty() {
            let bytes = self.out.split().freeze();
            self.send(bytes);
        }
    }

    /// Deadlines: HELLO, a frame left unfinished, the session timeout, a
    /// closing connection whose peer does not read.
    pub fn tick(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        let now = cx.now_ns;
        if let Some((until, _, _)) = &self.held {
            if now >= *until {
                if let Some((_, request_id, e)) = self.held.take() {
                    self.protocol_error(request_id, e, cx, engine);
                }
            }
            return;
        }
        match self.phase {
            Phase::Closing => {
                if now.saturating_sub(self.closing_since_ns) >= CLOSE_FLUSH_TIMEOUT_NS {
                    self.commands.push(Command::CloseNow);
                }
            }
            Phase::Hello if now.saturating_sub(self.accepted_ns) >= cx.config.hello_timeout_ns => {
                tracing::debug!(peer = %self.peer, "closing connection: no HELLO in time");
                self.close_bad_input(cx, engine);
            }
            Phase::Ready
                if self
                    .session_timeout_ns
                    .is_some_and(|t| now.saturating_sub(self.last_data_ns) >= t) =>
            {
                tracing::debug!(
                    peer = %self.peer,
                    bound_leases = self.bound.len(),
                    "closing connection: silent for longer than its session timeout"
                );
                cx.stats.timed_out.add(1);
                self.begin_close(now, engine);
            }
            _ => {
                if self
                    .partial_since_ns
                    .is_some_and(|t| now.saturating_sub(t) >= cx.config.frame_timeout_ns)
                {
                    tracing::debug!(peer = %self.peer, "closing connection: a frame was left unfinished");
                    self.close_bad_input(cx, engine);
                }
            }
        }
    }

    /// The engine time every shard must reach before this session's
    /// `ADVANCE_CLOCK` is answered, if one waits.
    #[must_use]
    pub fn clock_wait(&self) -> Option<u64> {
        self.clock_wait.as_ref().map(|(_, t, _)| *t)
    }

    /// Every shard reached the time of [`Session::clock_wait`]: the reply
    /// goes out and the frames behind it are served.
    pub fn on_clock_caught_up(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        let Some((request_id, _, reply)) = self.clock_wait.take() else {
            return;
        };
        self.reply(request_id, &reply, cx.stats);
        if !self.paused {
            self.process(cx, engine);
        }
    }

    /// Whether a request holds the connection up (module docs: order).
    fn held_up(&self) -> bool {
        self.barrier.is_some() || self.clock_wait.is_some() || self.asked.is_some()
    }

    /// Shutdown began: a connection still waiting for its HELLO is told and
    /// closed; the others are served until [`Session::drain`] closes them.
    pub fn begin_drain(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        if let Some((_, request_id, e)) = self.held.take() {
            return self.protocol_error(request_id, e, cx, engine);
        }
        if self.phase == Phase::Hello {
            self.reply(0, &shutting_down(), cx.stats);
            self.begin_close(cx.now_ns, engine);
        }
    }

    /// While shutting down: closes the connection once nothing of it is in
    /// flight and no bytes arrived for a moment (so requests the client had
    /// already sent are read and answered rather than cut off).
    pub fn drain(
        &mut self,
        drain_started_ns: u64,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        let quiet_since = self.last_data_ns.max(drain_started_ns);
        if self.phase != Phase::Closing
            && self.deferred.is_empty()
            && cx.now_ns.saturating_sub(quiet_since) >= DRAIN_QUIET_NS
        {
            self.reply(0, &shutting_down(), cx.stats);
            self.begin_close(cx.now_ns, engine);
        }
    }

    /// The io layer reports the connection gone: its requests still in the
    /// engine are cancelled and its bound leases released.
    pub fn on_closed(&mut self, engine: &mut dyn EngineAccess) {
        for d in self.deferred.drain(..) {
            engine.cancel(d.ticket);
        }
        self.release_bound(engine);
        self.phase = Phase::Closing;
    }

    // ----- frames -----------------------------------------------------------

    /// Whether the connection must not be read: `resume` asks with the lower
    /// threshold that lets a paused connection go on.
    fn blocked(&self, cx: &SessionContext<'_>, resume: bool) -> bool {
        let unsent = cx.io_unsent + self.commanded_bytes + self.out.len();
        let unsent_max = if resume {
            cx.config.unsent_max / 2
        } else {
            cx.config.unsent_max
        };
        self.deferred.len() >= cx.config.in_flight_max
            || unsent >= unsent_max
            || (cx.unsent_over && unsent > 0)
            || (self.held_up() && self.inbuf.len() >= cx.config.frame_bytes_max as usize)
    }

    /// Serves the whole frames buffered, as far as back-pressure and the barrier allow.
    fn process(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        loop {
            if self.phase == Phase::Closing || self.held.is_some() {
                return;
            }
            if self.blocked(cx, false) {
                // The stall is ours, not the peer's.
                self.partial_since_ns = None;
                if !self.paused {
                    self.paused = true;
                    self.commands.push(Command::SetReading(false));
                }
                return;
            }
            if self.held_up() {
                // Served once the earlier request is answered.
                return;
            }
            match self.decoder.decode(&mut self.inbuf) {
                Ok(Some(frame)) => {
                    self.partial_since_ns = None;
                    self.on_frame(frame, cx, engine);
                }
                Ok(None) => {
                    if self.inbuf.is_empty() {
                        self.partial_since_ns = None;
                    } else if self.partial_since_ns.is_none() {
                        self.partial_since_ns = Some(cx.now_ns);
                    }
                    return;
                }
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "framing lost");
                    self.protocol_error(0, e.to_wire_error(), cx, engine);
                    return;
                }
            }
        }
    }

    fn on_frame(&mut self, frame: Frame, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        let slot = op_slot(frame.opcode);
        cx.stats.requests[slot].add(1);
        self.serving = Some((slot, clock::now_ns()));
        self.on_frame_inner(frame, cx, engine);
        // Answered (and recorded), or deferred with its start.
        self.serving = None;
    }

    fn on_frame_inner(
        &mut self,
        frame: Frame,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        match self.phase {
            Phase::Closing => {}
            Phase::Hello => self.on_hello(frame, cx, engine),
            Phase::Ready if cx.draining => {
                // Shutting down: nothing new starts; the connection closes
                // once what is in flight is answered and it is quiet.
                self.reply(frame.request_id, &shutting_down(), cx.stats);
            }
            Phase::Ready => match Request::decode(frame.opcode, frame.flags, frame.payload) {
                Err(e) => self.reply(frame.request_id, &Reply::Error(e.to_wire_error()), cx.stats),
                Ok(request) => self.dispatch(frame.request_id, request, cx, engine),
            },
        }
    }

    // ----- replies --------------------------------------------------------------

    /// Writes `reply` (dropped if the connection is closing), counting the
    /// error codes it returns and the request's duration.
    fn reply(&mut self, request_id: u32, reply: &Reply, stats: &ShardStats) {
        if self.phase == Phase::Closing {
            self.serving = None;
            return;
        }
        encode_into(&mut self.out, request_id, reply);
        count_errors(reply, stats);
        self.served(stats);
    }

    /// The reply to the request being served is queued: its duration,
    /// from the frame decoded, is recorded.
    fn served(&mut self, stats: &ShardStats) {
        if let Some((slot, started_ns)) = self.serving.take() {
            let nanos = clock::now_ns().saturating_sub(started_ns);
            stats.durations.record(slot, nanos);
        }
    }

    fn send(&mut self, bytes: Bytes) {
        self.commanded_bytes += bytes.len();
        self.commands.push(Command::Send(bytes));
    }

    // ----- closing ----------------------------------------------------------------

    /// A request that leaves the connection unusable: answer, then close.
    fn protocol_error(
        &mut self,
        request_id: u32,
        e: WireError,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        tracing::debug!(peer = %self.peer, code = %e.code, message = %e.message, "closing connection");
        self.reply(request_id, &Reply::Error(e), cx.stats);
        self.close_bad_input(cx, engine);
    }

    fn close_bad_input(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        if self.phase != Phase::Closing {
            cx.stats.closed_bad_input.add(1);
        }
        self.begin_close(cx.now_ns, engine);
    }

    /// Closes after what is written; requests still in the engine are
    /// cancelled, bound leases released.
    fn begin_close(&mut self, now_ns: u64, engine: &mut dyn EngineAccess) {
        for d in self.deferred.drain(..) {
            engine.cancel(d.ticket);
        }
        self.release_bound(engine);
        self.close(now_ns);
    }

    fn close(&mut self, now_ns: u64) {
        if self.phase == Phase::Closing {
            return;
        }
        self.phase = Phase::Closing;
        self.closing_since_ns = now_ns;
        self.barrier = None;
        self.clock_wait = None;
        self.asked = None;
        self.inbuf = BytesMut::new();
        self.partial_since_ns = None;
        self.flush();
        self.commands.push(Command::Close);
    }
}

/// Counts the error codes `reply` returns: a whole-request error, or each
/// refused entry of a batch.
fn count_errors(reply: &Reply, stats: &ShardStats) {
    let count = |code: ErrorCode| stats.errors[error_slot(code)].add(1);
    match reply {
        Reply::Error(e) => count(e.code),
        Reply::Send { results } => results.iter().filter_map(|r| r.err()).for_each(count),
        Reply::Delete { results } | Reply::ChangeVisibility { results } => {
            results.iter().filter_map(|r| r.err()).for_each(count);
        }
        _ => {}
    }
}

fn encode_into(out: &mut BytesMut, request_id: u32, reply: &Reply) {
    if reply.encode(request_id, out).is_err() {
        // Only a value too long for its wire field fails, and `out` is left
        // as it was: say so instead.
        let e = Reply::error(ErrorCode::Internal, "the reply could not be encoded");
        let _ = e.encode(request_id, out);
    }
}

/// The error a connection gets while the server shuts down.
#[must_use]
pub fn shutting_down() -> Reply {
    Reply::error(ErrorCode::ShuttingDown, "the server is shutting down")
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
