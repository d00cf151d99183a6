//! One connection's protocol state machine, without a socket: bytes and the
//! time go in; commands for the io layer, requests for the engine and reply
//! bytes come out (the shape of quinn-proto's `Connection`).
//!
//! A [`Session`] knows the protocol's rules for a connection: HELLO first
//! (4 KiB frames and a deadline until then), the auth token, the frame
//! limit and the deadline for a frame begun and not finished, the order of
//! requests, back-pressure, and how a connection closes. It knows nothing
//! of sockets or threads: the shard loop (`shard_loop.rs`) feeds it what
//! the driver reports and carries out its [`Command`]s, and lends it the
//! engine through the [`Engine`] trait. The unit tests below drive it
//! without a socket.
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
//! `ADVANCE_CLOCK` is a barrier too: it moves the manual clock at once, but
//! its reply, and the frames behind it, wait until every shard has caught
//! up with the new time ([`Session::clock_wait`], [`Session::on_clock_caught_up`]),
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
use sluice_protocol::limits::{
    PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, SESSION_TIMEOUT_MS_MAX, SESSION_TIMEOUT_MS_MIN,
};
use sluice_protocol::reply::RECEIVE_REPLY_FIXED_BYTES;
use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, ErrorCode, Frame, FrameDecoder, HelloReply, QueueName,
    ReceiveReplyWriter, ReceivedMessage, Reply, Request, ServerStatsReply, VisibilityChange,
    WireError, opcode,
};

pub use super::bound_leases::BoundLeases;
use super::clock::{self, EngineTime, NotManual};
use super::config::AuthToken;
use super::convert::{self, Route};
use super::limits::{CLOSE_FLUSH_TIMEOUT_NS, DRAIN_QUIET_NS};
use super::shared::{ShardStats, error_slot, op_slot};
use crate::engine::{Op, OpResult};

/// What a session asks of the io layer, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Write these bytes after what is queued.
    Send(Bytes),
    /// Stop (`false`) or resume (`true`) reading the connection.
    SetReading(bool),
    /// Close once everything queued is written.
    Close,
    /// Close at once, dropping what is queued.
    CloseNow,
}

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

/// The engine, as the shard loop lends it to a session.
pub trait Engine {
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
pub struct Cx<'a> {
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
    /// The `SERVER_STATS` reply.
    pub server_stats: &'a dyn Fn() -> ServerStatsReply,
    /// Moves the server's manual clock by this many ms (`ADVANCE_CLOCK`):
    /// the manual time since the start (ms) and the time after the move.
    pub advance_clock: &'a dyn Fn(u64) -> Result<(u64, EngineTime), NotManual>,
    /// A HELLO from this peer presented the configured token (`true`) or
    /// not (`false`): how many nanoseconds to hold the `Unauthorized` reply
    /// (see `auth_guard.rs`; 0 after a success).
    pub auth_outcome: &'a dyn Fn(SocketAddr, bool) -> u64,
}

impl core::fmt::Debug for Cx<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cx")
            .field("now_ns", &self.now_ns)
            .field("draining", &self.draining)
            .field("unsent_over", &self.unsent_over)
            .field("io_unsent", &self.io_unsent)
            .finish_non_exhaustive()
    }
}

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
    /// The leases bound to this connection.
    bound: BoundLeases,
    deferred: Vec<Deferred>,
    /// The ticket of the request that holds the connection up (see the
    /// module docs).
    barrier: Option<u64>,
    /// An `ADVANCE_CLOCK` answered once every shard reached this engine
    /// time: its request id, the time and the reply.
    clock_wait: Option<(u32, u64, Reply)>,
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
            bound: BoundLeases::new(),
            deferred: Vec::new(),
            barrier: None,
            clock_wait: None,
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

    /// The commands issued since the last call, in order, for the io layer
    /// to carry out.
    pub fn commands(&mut self) -> impl Iterator<Item = Command> + '_ {
        self.commanded_bytes = 0;
        self.commands.drain(..)
    }

    /// Bytes arrived.
    pub fn on_data(&mut self, bytes: &[u8], cx: &Cx<'_>, engine: &mut dyn Engine) {
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
        cx: &Cx<'_>,
        engine: &mut dyn Engine,
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
    pub fn resume(&mut self, cx: &Cx<'_>, engine: &mut dyn Engine) -> bool {
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
    pub fn tick(&mut self, cx: &Cx<'_>, engine: &mut dyn Engine) {
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
    pub fn on_clock_caught_up(&mut self, cx: &Cx<'_>, engine: &mut dyn Engine) {
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
        self.barrier.is_some() || self.clock_wait.is_some()
    }

    /// Shutdown began: a connection still waiting for its HELLO is told and
    /// closed; the others are served until [`Session::drain`] closes them.
    pub fn begin_drain(&mut self, cx: &Cx<'_>, engine: &mut dyn Engine) {
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
    pub fn drain(&mut self, drain_started_ns: u64, cx: &Cx<'_>, engine: &mut dyn Engine) {
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
    pub fn on_closed(&mut self, engine: &mut dyn Engine) {
        for d in self.deferred.drain(..) {
            engine.cancel(d.ticket);
        }
        self.release_bound(engine);
        self.phase = Phase::Closing;
    }

    // ----- frames -----------------------------------------------------------

    /// Whether the connection must not be read: `resume` asks with the lower
    /// threshold that lets a paused connection go on.
    fn blocked(&self, cx: &Cx<'_>, resume: bool) -> bool {
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

    /// Serves the whole frames buffered, as far as back-pressure and the
    /// barrier allow.
    fn process(&mut self, cx: &Cx<'_>, engine: &mut dyn Engine) {
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

    fn on_frame(&mut self, frame: Frame, cx: &Cx<'_>, engine: &mut dyn Engine) {
        let slot = op_slot(frame.opcode);
        cx.stats.requests[slot].add(1);
        self.serving = Some((slot, clock::now_ns()));
        self.on_frame_inner(frame, cx, engine);
        // Answered (and recorded), or deferred with its start.
        self.serving = None;
    }

    fn on_frame_inner(&mut self, frame: Frame, cx: &Cx<'_>, engine: &mut dyn Engine) {
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

    fn on_hello(&mut self, frame: Frame, cx: &Cx<'_>, engine: &mut dyn Engine) {
        if cx.draining {
            self.reply(frame.request_id, &shutting_down(), cx.stats);
            self.begin_close(cx.now_ns, engine);
            return;
        }
        if frame.opcode != opcode::HELLO {
            let name = opcode::name(frame.opcode).unwrap_or("an unknown opcode");
            let e = WireError::new(
                ErrorCode::HelloRequired,
                format!(
                    "the first frame must be HELLO (0x01), not {name} ({:#04x})",
                    frame.opcode
                ),
            );
            return self.protocol_error(frame.request_id, e, cx, engine);
        }
        // The version is the first two bytes of every version's HELLO:
        // checked before the rest, whose layout a later version may change.
        if let Some(v) = frame.payload.first_chunk::<2>() {
            let version = u16::from_le_bytes(*v);
            if !(PROTOCOL_VERSION_MIN..=PROTOCOL_VERSION).contains(&version) {
                let e = WireError::new(
                    ErrorCode::UnsupportedVersion,
                    format!(
                        "this server speaks protocol versions {PROTOCOL_VERSION_MIN} to \
                         {PROTOCOL_VERSION}, not {version}"
                    ),
                );
                return self.protocol_error(frame.request_id, e, cx, engine);
            }
        }
        let hello = match Request::decode(frame.opcode, frame.flags, frame.payload) {
            Ok(Request::Hello(h)) => h,
            Ok(_) => {
                let e = WireError::new(ErrorCode::Internal, "HELLO decoded as another request");
                return self.protocol_error(frame.request_id, e, cx, engine);
            }
            Err(e) => return self.protocol_error(frame.request_id, e.to_wire_error(), cx, engine),
        };
        if let Some(token) = &cx.config.auth_token {
            let ok = token.matches(&hello.token);
            let delay_ns = (cx.auth_outcome)(self.peer, ok);
            if !ok {
                let e = WireError::new(
                    ErrorCode::Unauthorized,
                    if hello.token.is_empty() {
                        "this server requires an auth token in HELLO"
                    } else {
                        "wrong auth token"
                    },
                );
                if delay_ns == 0 {
                    return self.protocol_error(frame.request_id, e, cx, engine);
                }
                // Held: nothing more is read, and the reply and close come
                // at the first tick after the delay.
                self.inbuf = BytesMut::new();
                self.partial_since_ns = None;
                self.held = Some((cx.now_ns.saturating_add(delay_ns), frame.request_id, e));
                return;
            }
        }
        let timeout_ms = hello.session_timeout_ms;
        if timeout_ms != 0
            && !(SESSION_TIMEOUT_MS_MIN..=SESSION_TIMEOUT_MS_MAX).contains(&timeout_ms)
        {
            let e = WireError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "session_timeout_ms {timeout_ms} is out of range: 0 (none) or \
                     {SESSION_TIMEOUT_MS_MIN} to {SESSION_TIMEOUT_MS_MAX}"
                ),
            );
            return self.protocol_error(frame.request_id, e, cx, engine);
        }
        self.session_timeout_ns = (timeout_ms != 0).then(|| u64::from(timeout_ms) * 1_000_000);
        self.phase = Phase::Ready;
        self.decoder.set_frame_bytes_max(cx.config.frame_bytes_max);
        let mut reply = cx.config.hello.clone();
        // The version the client asked for: a version-1 client gets the
        // version-1 protocol.
        reply.version = hello.version;
        self.reply(frame.request_id, &Reply::Hello(reply), cx.stats);
    }

    fn dispatch(
        &mut self,
        request_id: u32,
        request: Request,
        cx: &Cx<'_>,
        engine: &mut dyn Engine,
    ) {
        let (receive_queue, bind) = match &request {
            Request::Receive(r) => (Some(r.queue.clone()), r.bind_leases),
            _ => (None, false),
        };
        if !self.bound.is_empty() {
            self.forget_ended_leases(&request);
        }
        match convert::route(request) {
            Route::Engine(op) => match engine.submit(op) {
                Submitted::Done(result) => {
                    self.answer(request_id, receive_queue, bind, result, cx.stats, engine);
                }
                Submitted::Later(ticket) => {
                    if receive_queue.is_none() {
                        self.barrier = Some(ticket);
                    }
                    self.deferred.push(Deferred {
                        ticket,
                        request_id,
                        receive_queue,
                        bind,
                        started: self.serving.take(),
                    });
                }
            },
            Route::Ping { nonce } => self.reply(request_id, &Reply::Pong { nonce }, cx.stats),
            Route::ServerStats => self.reply(
                request_id,
                &Reply::ServerStats((cx.server_stats)()),
                cx.stats,
            ),
            Route::AdvanceClock { by_ms } => match (cx.advance_clock)(by_ms) {
                Ok((elapsed_ms, now)) => {
                    let reply = Reply::AdvanceClock {
                        elapsed_ms,
                        wall_ms: now.wall_ms,
                    };
                    self.clock_wait = Some((request_id, now.now_ns, reply));
                }
                Err(e) => self.reply(
                    request_id,
                    &Reply::error(ErrorCode::Unsupported, e.to_string()),
                    cx.stats,
                ),
            },
            Route::Hello => self.reply(
                request_id,
                &Reply::error(
                    ErrorCode::InvalidArgument,
                    "HELLO was already answered on this connection",
                ),
                cx.stats,
            ),
        }
    }

    /// A DELETE or a release (visibility 0) ends the leases it names: they
    /// are bound no more (see `bound_leases.rs` for why on the request).
    fn forget_ended_leases(&mut self, request: &Request) {
        match request {
            Request::Delete(r) => {
                for receipt in &r.receipts {
                    self.bound.forget(&r.queue, receipt);
                }
            }
            Request::ChangeVisibility(r) => {
                for e in r.entries.iter().filter(|e| e.visibility_timeout_ms == 0) {
                    self.bound.forget(&r.queue, &e.receipt);
                }
            }
            _ => {}
        }
    }

    /// Hands the bound leases to the engine to release (those still
    /// current): the connection is closing.
    fn release_bound(&mut self, engine: &mut dyn Engine) {
        if self.bound.is_empty() {
            return;
        }
        tracing::debug!(
            peer = %self.peer,
            leases = self.bound.len(),
            "connection closed: releasing its bound leases"
        );
        for (queue, receipts) in self.bound.take() {
            engine.submit_unanswered(Op::Abandon(DeleteRequest { queue, receipts }));
        }
    }

    // ----- replies --------------------------------------------------------------

    fn answer(
        &mut self,
        request_id: u32,
        receive_queue: Option<QueueName>,
        bind: bool,
        result: OpResult,
        stats: &ShardStats,
        engine: &mut dyn Engine,
    ) {
        if let OpResult::Received(messages) = result {
            self.answer_receive(request_id, receive_queue, bind, &messages, stats, engine);
            engine.recycle(OpResult::Received(messages));
            return;
        }
        let mut reply = convert::to_reply(result);
        let dropped = reply.fit_frame(self.decoder.frame_bytes_max() as usize);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "a reply was above the frame limit and lost its last entries"
            );
        }
        self.reply(request_id, &reply, stats);
        if let Some(storage) = convert::into_storage(reply) {
            engine.recycle(storage);
        }
    }

    /// Writes a RECEIVE reply straight into the output. The engine budgets
    /// a receive to fit one frame; should a message not fit anyway (or the
    /// connection be closing), it is released at once rather than left to
    /// wait out a lease nobody holds.
    fn answer_receive(
        &mut self,
        request_id: u32,
        queue: Option<QueueName>,
        bind: bool,
        messages: &[ReceivedMessage],
        stats: &ShardStats,
        engine: &mut dyn Engine,
    ) {
        let mut undelivered = Vec::new();
        if self.phase == Phase::Closing {
            undelivered.extend(messages.iter().map(|m| m.receipt));
        } else {
            let frame_bytes_max = self.decoder.frame_bytes_max();
            // Room for the whole reply before writing it. Were the buffer
            // grown message by message, or with the replies of this turn
            // still in it, each growth would copy all it holds into a new
            // allocation. Rather, what is there goes to the io layer now, as
            // its own buffer of the same gathered send.
            let reply_bytes = messages
                .iter()
                .fold(RECEIVE_REPLY_FIXED_BYTES, |n, m| {
                    n.saturating_add(m.encoded_len())
                })
                .min(frame_bytes_max as usize);
            if !self.out.is_empty() && self.out.capacity() - self.out.len() < reply_bytes {
                self.flush();
            }
            self.out.reserve(reply_bytes);
            let mut w = ReceiveReplyWriter::begin(&mut self.out, request_id, frame_bytes_max);
            let mut delivered = 0;
            for m in messages {
                if !undelivered.is_empty() || !w.push(&mut self.out, &m.as_view()) {
                    undelivered.push(m.receipt);
                } else {
                    delivered += 1;
                }
            }
            w.finish(&mut self.out);
            self.served(stats);
            if let Some(queue) = queue.as_ref().filter(|_| bind && delivered > 0) {
                self.bound
                    .bind(queue, messages[..delivered].iter().map(|m| m.receipt));
            }
        }
        let Some(queue) = queue.filter(|_| !undelivered.is_empty()) else {
            return;
        };
        tracing::warn!(
            messages = undelivered.len(),
            "received messages could not be delivered; released"
        );
        let entries = undelivered
            .into_iter()
            .map(|receipt| VisibilityChange {
                receipt,
                visibility_timeout_ms: 0,
            })
            .collect();
        engine.submit_unanswered(Op::ChangeVisibility(ChangeVisibilityRequest {
            queue,
            entries,
        }));
    }

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
        cx: &Cx<'_>,
        engine: &mut dyn Engine,
    ) {
        tracing::debug!(peer = %self.peer, code = %e.code, message = %e.message, "closing connection");
        self.reply(request_id, &Reply::Error(e), cx.stats);
        self.close_bad_input(cx, engine);
    }

    fn close_bad_input(&mut self, cx: &Cx<'_>, engine: &mut dyn Engine) {
        if self.phase != Phase::Closing {
            cx.stats.closed_bad_input.add(1);
        }
        self.begin_close(cx.now_ns, engine);
    }

    /// Closes after what is written; requests still in the engine are
    /// cancelled, bound leases released.
    fn begin_close(&mut self, now_ns: u64, engine: &mut dyn Engine) {
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
mod tests {
    //! The session driven by hand: bytes in, commands and replies out, an
    //! engine that answers as each test says. No socket anywhere.

    use std::collections::VecDeque;

    use bytes::{Bytes, BytesMut};
    use sluice_protocol::limits::FRAME_BYTES_MAX_DEFAULT;
    use sluice_protocol::{
        ChangeVisibilityRequest, DeleteRequest, ErrorCode, FrameDecoder, HelloReply, HelloRequest,
        MessageAttributes, MessageId, QueueName, Receipt, ReceiveRequest, ReceivedMessage, Reply,
        Request, SendEntry, SendRequest, ServerLimits, ServerStatsReply, VisibilityChange,
    };

    use super::{Command, Cx, Engine, Phase, Session, SessionConfig, Submitted};
    use crate::engine::{EntryError, Op, OpResult};
    use crate::server::clock::{EngineTime, NotManual};
    use crate::server::config::AuthToken;
    use crate::server::limits::CLOSE_FLUSH_TIMEOUT_NS;
    use crate::server::shared::ShardStats;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_000 * MS;

    /// An engine that answers what it is told to: each submit takes the
    /// next scripted answer (`None`: later, under a new ticket), or answers
    /// at once with a fitting empty result when nothing is scripted.
    #[derive(Default)]
    struct FakeEngine {
        script: VecDeque<Option<OpResult>>,
        submitted: Vec<Op>,
        unanswered: Vec<Op>,
        cancelled: Vec<u64>,
        recycled: Vec<OpResult>,
        next_ticket: u64,
    }

    impl FakeEngine {
        fn later(&mut self) {
            self.script.push_back(None);
        }
    }

    impl Engine for FakeEngine {
        fn submit(&mut self, op: Op) -> Submitted {
            let answer = self.script.pop_front().unwrap_or_else(|| {
                Some(match &op {
                    Op::Delete(r) => OpResult::Deleted(vec![Ok(()); r.receipts.len()]),
                    Op::Receive(_) => OpResult::Received(Vec::new()),
                    _ => OpResult::QueueUpdated,
                })
            });
            self.submitted.push(op);
            match answer {
                Some(result) => Submitted::Done(result),
                None => {
                    self.next_ticket += 1;
                    Submitted::Later(self.next_ticket)
                }
            }
        }

        fn submit_unanswered(&mut self, op: Op) {
            self.unanswered.push(op);
        }

        fn cancel(&mut self, ticket: u64) {
            self.cancelled.push(ticket);
        }

        fn recycle(&mut self, result: OpResult) {
            self.recycled.push(result);
        }
    }

    /// A session with its shard around it: the config, counters and the
    /// io layer's unsent bytes as a test sets them.
    struct Harness {
        config: SessionConfig,
        stats: ShardStats,
        engine: FakeEngine,
        session: Session,
        now_ns: u64,
        draining: bool,
        io_unsent: usize,
        /// A manual clock's time since the start (ms); `None`: the real
        /// clock.
        manual_clock: Option<u64>,
        /// Every command so far, replies decoded out of the `Send`s.
        commands: Vec<Command>,
        replies: Vec<(u32, Reply)>,
        reply_bytes: BytesMut,
        reply_decoder: FrameDecoder,
        /// What `Cx::auth_outcome` answers for a wrong token.
        auth_delay_ns: u64,
    }

    fn config() -> SessionConfig {
        SessionConfig {
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            hello_frame_bytes_max: 4096,
            hello_timeout_ns: 10_000 * MS,
            frame_timeout_ns: 30_000 * MS,
            in_flight_max: 4,
            unsent_max: 64 * 1024,
            auth_token: None,
            hello: HelloReply {
                version: 1,
                server_version: "sluice test".into(),
                shard: 1,
                shards: 2,
                limits: ServerLimits {
                    frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
                    batch_entries_max: 1024,
                    requests_in_flight_max: 4,
                    receive_wait_ms_max: 20_000,
                },
            },
        }
    }

    fn q() -> QueueName {
        QueueName::from_static("q")
    }

    fn frame(id: u32, request: &Request) -> Bytes {
        let mut b = BytesMut::new();
        request.encode(id, &mut b).expect("encodes");
        b.freeze()
    }

    fn hello(token: &[u8]) -> Request {
        Request::Hello(HelloRequest {
            version: 1,
            token: Bytes::copy_from_slice(token),
            session_timeout_ms: 0,
        })
    }

    fn delete(receipts: usize) -> Request {
        Request::Delete(DeleteRequest {
            queue: q(),
            receipts: vec![Receipt::default(); receipts],
        })
    }

    fn receive() -> Request {
        Request::Receive(ReceiveRequest {
            queue: q(),
            max_messages: 10,
            visibility_timeout_ms: None,
            wait_ms: Some(1000),
            bind_leases: false,
        })
    }

    impl Harness {
        fn new(config: SessionConfig) -> Harness {
            let session = Session::new("127.0.0.1:9".parse().unwrap(), &config, T0);
            Harness {
                config,
                stats: ShardStats::new(),
                engine: FakeEngine::default(),
                session,
                now_ns: T0,
                draining: false,
                io_unsent: 0,
                manual_clock: None,
                commands: Vec::new(),
                replies: Vec::new(),
                reply_bytes: BytesMut::new(),
                reply_decoder: FrameDecoder::new(sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT),
                auth_delay_ns: 0,
            }
        }

        /// A session that has said HELLO.
        fn ready() -> Harness {
            let mut h = Harness::new(config());
            h.data(&frame(1, &hello(b"")));
            assert!(matches!(h.replies.pop(), Some((1, Reply::Hello(_)))));
            h
        }

        fn call(&mut self, f: impl FnOnce(&mut Session, &Cx<'_>, &mut FakeEngine)) {
            let server_stats = || ServerStatsReply {
                server_version: "sluice test".into(),
                io_backend: "none".into(),
                shards: 2,
                counters: Vec::new(),
            };
            let auth_delay_ns = self.auth_delay_ns;
            let manual = std::cell::Cell::new(self.manual_clock);
            let advance_clock = |by_ms: u64| {
                let elapsed = manual.get().ok_or(NotManual)? + by_ms;
                manual.set(Some(elapsed));
                Ok((
                    elapsed,
                    EngineTime {
                        now_ns: T0 + elapsed * MS,
                        wall_ms: 1_700_000_000_000 + elapsed,
                    },
                ))
            };
            let cx = Cx {
                now_ns: self.now_ns,
                draining: self.draining,
                unsent_over: false,
                io_unsent: self.io_unsent,
                config: &self.config,
                stats: &self.stats,
                server_stats: &server_stats,
                advance_clock: &advance_clock,
                auth_outcome: &|_, ok| if ok { 0 } else { auth_delay_ns },
            };
            f(&mut self.session, &cx, &mut self.engine);
            self.manual_clock = manual.get();
            self.session.flush();
            for c in self.session.commands() {
                if let Command::Send(bytes) = &c {
                    self.reply_bytes.extend_from_slice(bytes);
                    while let Some(f) = self.reply_decoder.decode(&mut self.reply_bytes).unwrap() {
                        let reply = Reply::decode(f.opcode, f.payload).expect("a valid reply");
                        self.replies.push((f.request_id, reply));
                    }
                } else {
                    self.commands.push(c);
                }
            }
        }

        fn data(&mut self, bytes: &[u8]) {
            self.call(|s, cx, e| s.on_data(bytes, cx, e));
        }

        fn result(&mut self, ticket: u64, result: OpResult) -> bool {
            let mut ours = false;
            self.call(|s, cx, e| ours = s.on_result(ticket, result, cx, e));
            ours
        }

        fn tick_at(&mut self, now_ns: u64) {
            self.now_ns = now_ns;
            self.call(|s, cx, e| s.tick(cx, e));
        }

        fn error_codes(&self) -> Vec<(u32, ErrorCode)> {
            self.replies
                .iter()
                .filter_map(|(id, r)| match r {
                    Reply::Error(e) => Some((*id, e.code)),
                    _ => None,
                })
                .collect()
        }

        fn closed(&self) -> bool {
            self.commands.contains(&Command::Close)
        }
    }

    #[test]
    fn hello_is_answered_with_the_shard_and_raises_the_frame_limit() {
        let mut h = Harness::new(config());
        h.data(&frame(7, &hello(b"")));
        let (id, reply) = h.replies.pop().expect("a reply");
        assert_eq!(id, 7);
        let Reply::Hello(hello) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!((hello.shard, hello.shards), (1, 2));
        assert_eq!(h.session.phase(), Phase::Ready);
        // A frame above the 4 KiB of before HELLO is taken now.
        let entry = SendEntry::new(Bytes::from(vec![b'x'; 8 * 1024]));
        let send = Request::Send(SendRequest::new(q(), [&entry]).unwrap());
        h.data(&frame(8, &send));
        assert!(matches!(h.engine.submitted[..], [Op::Send(_)]));
        assert!(!h.closed());
    }

    #[test]
    fn the_first_frame_must_be_hello() {
        let mut h = Harness::new(config());
        h.data(&frame(3, &Request::Ping { nonce: 1 }));
        assert_eq!(h.error_codes(), [(3, ErrorCode::HelloRequired)]);
        assert!(h.closed());
        assert_eq!(h.session.phase(), Phase::Closing);
        assert_eq!(h.stats.closed_bad_input.get(), 1);
        // Nothing more is read or answered.
        h.data(&frame(4, &hello(b"")));
        assert_eq!(h.replies.len(), 1);
    }

    #[test]
    fn a_hello_of_another_version_is_refused() {
        for version in [0, 3, 0xffff] {
            let mut h = Harness::new(config());
            let hello = Request::Hello(HelloRequest {
                version,
                token: Bytes::new(),
                session_timeout_ms: 0,
            });
            h.data(&frame(1, &hello));
            assert_eq!(h.error_codes(), [(1, ErrorCode::UnsupportedVersion)]);
            assert!(h.closed());
        }
    }

    #[test]
    fn both_versions_are_answered_in_their_own() {
        for version in [1, 2] {
            let mut h = Harness::new(config());
            h.data(&frame(
                7,
                &Request::Hello(HelloRequest {
                    version,
                    token: Bytes::new(),
                    session_timeout_ms: 0,
                }),
            ));
            let Some((7, Reply::Hello(reply))) = h.replies.pop() else {
                panic!("{:?}", h.replies)
            };
            assert_eq!(reply.version, version);
            assert_eq!(h.session.phase(), Phase::Ready);
        }
    }

    fn hello_with_timeout(timeout_ms: u32) -> Request {
        Request::Hello(HelloRequest {
            version: 2,
            token: Bytes::new(),
            session_timeout_ms: timeout_ms,
        })
    }

    #[test]
    fn a_session_timeout_out_of_range_is_refused() {
        for timeout_ms in [1, 99, 3_600_001, u32::MAX] {
            let mut h = Harness::new(config());
            h.data(&frame(1, &hello_with_timeout(timeout_ms)));
            assert_eq!(
                h.error_codes(),
                [(1, ErrorCode::InvalidArgument)],
                "{timeout_ms}"
            );
            assert!(h.closed());
        }
        for timeout_ms in [0, 100, 3_600_000] {
            let mut h = Harness::new(config());
            h.data(&frame(1, &hello_with_timeout(timeout_ms)));
            assert!(
                matches!(h.replies[..], [(1, Reply::Hello(_))]),
                "{timeout_ms}"
            );
        }
    }

    #[test]
    fn a_silent_connection_is_closed_after_its_session_timeout_and_pings_keep_it() {
        let mut h = Harness::new(config());
        h.data(&frame(1, &hello_with_timeout(1000)));
        h.tick_at(T0 + 999 * MS);
        assert!(!h.closed());
        // A PING (any bytes) restarts the count.
        h.now_ns = T0 + 900 * MS;
        h.data(&frame(2, &Request::Ping { nonce: 1 }));
        h.tick_at(T0 + 1_899 * MS);
        assert!(!h.closed(), "pinged 999 ms ago");
        // A long poll in flight does not count as activity.
        h.engine.later();
        h.now_ns = T0 + 1_500 * MS;
        h.data(&frame(3, &receive()));
        h.tick_at(T0 + 2_499 * MS);
        assert!(!h.closed());
        h.tick_at(T0 + 2_500 * MS);
        assert!(h.closed(), "silent for its whole timeout");
        assert_eq!(h.stats.timed_out.get(), 1);
        assert_eq!(h.engine.cancelled, [1], "the long poll is cancelled");
        assert_eq!(h.stats.closed_bad_input.get(), 0, "not bad input");
    }

    #[test]
    fn without_a_session_timeout_a_silent_connection_stays() {
        let mut h = Harness::ready();
        h.tick_at(T0 + 3_600_000 * MS);
        assert!(!h.closed());
    }

    fn bound_receive() -> Request {
        Request::Receive(ReceiveRequest {
            bind_leases: true,
            ..match receive() {
                Request::Receive(r) => r,
                _ => unreachable!(),
            }
        })
    }

    fn delivered(i: u8) -> ReceivedMessage {
        ReceivedMessage {
            id: MessageId(i.into()),
            receipt: Receipt {
                slot: i.into(),
                delivery: 1,
                ..Receipt::default()
            },
            receive_count: 1,
            sent_at_ms: 0,
            first_received_delta_ms: 0,
            attributes: MessageAttributes::new(),
            body: Bytes::from_static(b"m"),
        }
    }

    /// The receipts of the `Op::Abandon`s the session handed the engine.
    fn abandoned(h: &Harness) -> Vec<Receipt> {
        let mut out: Vec<Receipt> = h
            .engine
            .unanswered
            .iter()
            .flat_map(|op| match op {
                Op::Abandon(r) => {
                    assert_eq!(r.queue, q());
                    r.receipts.clone()
                }
                other => panic!("{other:?}"),
            })
            .collect();
        out.sort_by_key(|r| r.slot);
        out
    }

    #[test]
    fn bound_leases_are_released_when_the_peer_closes_except_those_it_ended() {
        let mut h = Harness::ready();
        // One bound receive answered at once, one later; one unbound.
        h.engine.script.push_back(Some(OpResult::Received(vec![
            delivered(1),
            delivered(2),
            delivered(3),
        ])));
        h.data(&frame(10, &bound_receive()));
        h.engine.later();
        h.data(&frame(11, &bound_receive()));
        assert!(h.result(1, OpResult::Received(vec![delivered(4)])));
        h.engine
            .script
            .push_back(Some(OpResult::Received(vec![delivered(5)])));
        h.data(&frame(12, &receive()));
        assert_eq!(h.session.bound_leases(), 4, "1 to 4 are bound, 5 is not");
        // The client deletes 1 and releases 2; extending 3 keeps it bound.
        h.data(&frame(
            13,
            &Request::Delete(DeleteRequest {
                queue: q(),
                receipts: vec![delivered(1).receipt],
            }),
        ));
        let change = |receipt, visibility_timeout_ms| {
            Request::ChangeVisibility(ChangeVisibilityRequest {
                queue: q(),
                entries: vec![VisibilityChange {
                    receipt,
                    visibility_timeout_ms,
                }],
            })
        };
        h.data(&frame(14, &change(delivered(2).receipt, 0)));
        h.data(&frame(15, &change(delivered(3).receipt, 60_000)));
        assert_eq!(h.session.bound_leases(), 2);
        assert!(h.engine.unanswered.is_empty());
        // The peer goes away: 3 and 4 are handed to the engine to release.
        h.call(|s, _, e| s.on_closed(e));
        assert_eq!(abandoned(&h), [delivered(3).receipt, delivered(4).receipt]);
        assert_eq!(h.session.bound_leases(), 0);
    }

    #[test]
    fn bound_leases_are_released_on_a_close_by_the_server_too() {
        // A protocol error...
        let mut h = Harness::ready();
        h.engine
            .script
            .push_back(Some(OpResult::Received(vec![delivered(7)])));
        h.data(&frame(10, &bound_receive()));
        h.data(&[1, 0, 0, 0]);
        assert!(h.closed());
        assert_eq!(abandoned(&h), [delivered(7).receipt]);
        // ...released once, not again when the io layer reports the close.
        h.call(|s, _, e| s.on_closed(e));
        assert_eq!(abandoned(&h), [delivered(7).receipt]);

        // The session timeout...
        let mut h = Harness::new(config());
        h.data(&frame(1, &hello_with_timeout(100)));
        h.engine
            .script
            .push_back(Some(OpResult::Received(vec![delivered(8)])));
        h.data(&frame(10, &bound_receive()));
        h.tick_at(T0 + 100 * MS);
        assert!(h.closed());
        assert_eq!(abandoned(&h), [delivered(8).receipt]);

        // ...and shutdown.
        let mut h = Harness::ready();
        h.engine
            .script
            .push_back(Some(OpResult::Received(vec![delivered(9)])));
        h.data(&frame(10, &bound_receive()));
        h.draining = true;
        h.now_ns = T0 + 200 * MS;
        h.call(|s, cx, e| s.drain(T0, cx, e));
        assert!(h.closed());
        assert_eq!(abandoned(&h), [delivered(9).receipt]);
    }

    #[test]
    fn messages_a_bound_reply_cannot_carry_are_released_not_bound() {
        let mut h = Harness::new(SessionConfig {
            frame_bytes_max: 4096,
            ..config()
        });
        h.data(&frame(1, &hello(b"")));
        h.engine.later();
        h.data(&frame(60, &bound_receive()));
        let big = |i: u8| ReceivedMessage {
            body: Bytes::from(vec![i; 3000]),
            ..delivered(i)
        };
        assert!(h.result(1, OpResult::Received(vec![big(1), big(2)])));
        assert_eq!(h.session.bound_leases(), 1, "only the one delivered");
        assert!(matches!(h.engine.unanswered[..], [Op::ChangeVisibility(_)]));
        h.engine.unanswered.clear();
        h.call(|s, _, e| s.on_closed(e));
        assert_eq!(abandoned(&h), [big(1).receipt]);
    }

    #[test]
    fn advance_clock_moves_a_manual_clock_and_is_refused_on_the_real_one() {
        let mut h = Harness::ready();
        h.data(&frame(5, &Request::AdvanceClock { by_ms: 30_000 }));
        assert_eq!(h.error_codes(), [(5, ErrorCode::Unsupported)]);
        let Some((_, Reply::Error(e))) = h.replies.last() else {
            panic!()
        };
        assert!(e.message.contains("--clock manual"), "{}", e.message);
        assert!(!h.closed());
        assert_eq!(h.manual_clock, None, "nothing moved");

        let mut h = Harness::ready();
        h.manual_clock = Some(0);
        let mut both = BytesMut::new();
        both.extend_from_slice(&frame(6, &Request::AdvanceClock { by_ms: 30_000 }));
        both.extend_from_slice(&frame(7, &Request::Ping { nonce: 1 }));
        h.data(&both);
        // The clock moved at once; the reply, and the PING behind it, wait
        // until every shard caught up with the new time.
        assert_eq!(h.manual_clock, Some(30_000));
        assert_eq!(h.session.clock_wait(), Some(T0 + 30_000 * MS));
        assert!(h.replies.is_empty());
        h.call(|s, cx, e| s.on_clock_caught_up(cx, e));
        assert_eq!(h.session.clock_wait(), None);
        assert_eq!(
            h.replies,
            [
                (
                    6,
                    Reply::AdvanceClock {
                        elapsed_ms: 30_000,
                        wall_ms: 1_700_000_030_000
                    }
                ),
                (7, Reply::Pong { nonce: 1 })
            ]
        );
        assert!(h.engine.submitted.is_empty(), "answered by the session");
    }

    #[test]
    fn a_configured_token_is_required_and_checked() {
        let with_token = || SessionConfig {
            auth_token: Some(AuthToken::from_bytes(b"s3cret")),
            ..config()
        };
        for token in [&b""[..], b"wrong!"] {
            let mut h = Harness::new(with_token());
            h.data(&frame(1, &hello(token)));
            assert_eq!(h.error_codes(), [(1, ErrorCode::Unauthorized)], "{token:?}");
            assert!(h.closed());
        }
        let mut h = Harness::new(with_token());
        h.data(&frame(1, &hello(b"s3cret")));
        assert!(matches!(h.replies[..], [(1, Reply::Hello(_))]));
        assert!(!h.closed());
    }

    /// A peer that keeps failing gets its `Unauthorized` only after the
    /// delay the guard gives, on the session's own clock, and nothing it
    /// sends meanwhile is read.
    #[test]
    fn a_slowed_down_failure_is_answered_only_after_its_delay() {
        let mut h = Harness::new(SessionConfig {
            auth_token: Some(AuthToken::from_bytes(b"s3cret")),
            ..config()
        });
        h.auth_delay_ns = 400 * MS;
        let mut bytes = frame(1, &hello(b"guess")).to_vec();
        bytes.extend_from_slice(&frame(2, &hello(b"s3cret")));
        h.data(&bytes);
        assert!(h.replies.is_empty() && !h.closed(), "{:?}", h.replies);
        h.data(&frame(3, &hello(b"s3cret")));
        h.tick_at(T0 + 399 * MS);
        assert!(h.replies.is_empty() && !h.closed(), "{:?}", h.replies);
        h.tick_at(T0 + 400 * MS);
        assert_eq!(h.error_codes(), [(1, ErrorCode::Unauthorized)]);
        assert_eq!(h.replies.len(), 1, "the later HELLOs were not read");
        assert!(h.closed());
    }

    #[test]
    fn a_frame_above_the_hello_limit_is_refused_unread() {
        let mut h = Harness::new(config());
        // A length prefix declaring 5 KiB: refused before anything of it is
        // buffered.
        h.data(&(5 * 1024u32).to_le_bytes());
        assert_eq!(h.error_codes(), [(0, ErrorCode::FrameTooLarge)]);
        assert!(h.closed());
    }

    #[test]
    fn no_hello_in_time_closes() {
        let mut h = Harness::new(config());
        h.tick_at(T0 + 9_999 * MS);
        assert!(!h.closed());
        h.tick_at(T0 + 10_000 * MS);
        assert!(h.closed());
        assert_eq!(h.stats.closed_bad_input.get(), 1);
    }

    #[test]
    fn a_frame_left_unfinished_closes_and_a_finished_one_does_not() {
        let mut h = Harness::ready();
        let ping = frame(2, &Request::Ping { nonce: 9 });
        h.data(&ping[..3]);
        h.tick_at(T0 + 29_999 * MS);
        assert!(!h.closed());
        h.data(&ping[3..]);
        assert_eq!(h.replies.pop(), Some((2, Reply::Pong { nonce: 9 })));
        h.tick_at(T0 + 60_000 * MS);
        assert!(!h.closed(), "the whole frame arrived");
        h.data(&ping[..3]);
        h.tick_at(T0 + 90_000 * MS);
        assert!(h.closed());
    }

    #[test]
    fn a_late_answer_holds_later_requests_back_but_a_receive_does_not() {
        let mut h = Harness::ready();
        // A RECEIVE that waits: later frames are served meanwhile.
        h.engine.later();
        h.data(&frame(10, &receive()));
        h.data(&frame(11, &Request::Ping { nonce: 1 }));
        assert_eq!(h.replies.pop(), Some((11, Reply::Pong { nonce: 1 })));
        // A DELETE forwarded to another shard: a barrier.
        h.engine.later();
        let mut both = BytesMut::new();
        both.extend_from_slice(&frame(12, &delete(1)));
        both.extend_from_slice(&frame(13, &Request::Ping { nonce: 2 }));
        h.data(&both);
        assert_eq!(h.engine.submitted.len(), 2);
        assert!(h.replies.is_empty(), "PING waits behind the DELETE");
        assert_eq!(h.session.in_flight(), 2);
        // The DELETE's answer comes: it, then the PING, in order.
        let results = vec![Err(EntryError::Gone)];
        let storage = results.as_ptr() as usize;
        assert!(h.result(2, OpResult::Deleted(results)));
        // Its vector goes back to the engine, empty, once written.
        assert!(matches!(
            h.engine.recycled.pop(),
            Some(OpResult::Deleted(v)) if v.is_empty() && v.as_ptr() as usize == storage
        ));
        assert_eq!(
            h.replies,
            [
                (
                    12,
                    Reply::Delete {
                        results: vec![Err(ErrorCode::Gone)]
                    }
                ),
                (13, Reply::Pong { nonce: 2 })
            ]
        );
        // The RECEIVE's answer overtakes nothing and is still delivered.
        h.replies.clear();
        assert!(h.result(1, OpResult::Received(Vec::new())));
        assert!(matches!(h.replies[..], [(10, Reply::Receive { .. })]));
        assert!(!h.result(99, OpResult::QueueUpdated), "not its ticket");
    }

    #[test]
    fn too_many_requests_in_flight_pause_reading_until_answers_come() {
        let mut h = Harness::ready();
        let mut four = BytesMut::new();
        for id in 0..5 {
            h.engine.later();
            four.extend_from_slice(&frame(20 + id, &receive()));
        }
        h.data(&four);
        // Four in flight (the limit): the fifth waits, reading stops.
        assert_eq!(h.session.in_flight(), 4);
        assert_eq!(h.commands, [Command::SetReading(false)]);
        assert!(h.session.is_paused());
        let mut resumed = true;
        h.call(|s, cx, e| resumed = s.resume(cx, e));
        assert!(!resumed, "still four in flight");
        assert!(h.result(1, OpResult::Received(Vec::new())));
        assert!(h.session.is_paused(), "a paused session waits for resume");
        h.call(|s, cx, e| resumed = s.resume(cx, e));
        // Reading resumes; the fifth is served and fills the limit again.
        assert_eq!(
            h.commands,
            [
                Command::SetReading(false),
                Command::SetReading(true),
                Command::SetReading(false)
            ]
        );
        assert!(!resumed);
        assert_eq!(h.session.in_flight(), 4);
        assert_eq!(h.engine.submitted.len(), 5);
    }

    #[test]
    fn unsent_replies_pause_reading_until_half_drained() {
        let mut h = Harness::ready();
        h.io_unsent = 64 * 1024;
        h.data(&frame(30, &Request::Ping { nonce: 1 }));
        assert!(
            h.replies.is_empty(),
            "not served while the peer does not read"
        );
        assert_eq!(h.commands, [Command::SetReading(false)]);
        let mut resumed = true;
        h.io_unsent = 40 * 1024;
        h.call(|s, cx, e| resumed = s.resume(cx, e));
        assert!(!resumed, "above half the limit");
        h.io_unsent = 30 * 1024;
        h.call(|s, cx, e| resumed = s.resume(cx, e));
        assert!(resumed);
        assert_eq!(h.replies, [(30, Reply::Pong { nonce: 1 })]);
    }

    #[test]
    fn a_closing_session_cancels_what_is_in_flight_and_is_cut_off_if_it_does_not_read() {
        let mut h = Harness::ready();
        h.engine.later();
        h.data(&frame(40, &receive()));
        // Framing lost: an error, then the close; the RECEIVE is cancelled.
        h.data(&[1, 0, 0, 0]);
        assert_eq!(h.error_codes(), [(0, ErrorCode::Malformed)]);
        assert_eq!(h.commands, [Command::Close]);
        assert_eq!(h.engine.cancelled, [1]);
        // Its answer, had it raced the cancel, is not the session's.
        assert!(!h.result(1, OpResult::Received(Vec::new())));
        h.tick_at(T0 + CLOSE_FLUSH_TIMEOUT_NS - 1);
        assert_eq!(h.commands, [Command::Close]);
        h.tick_at(T0 + CLOSE_FLUSH_TIMEOUT_NS);
        assert_eq!(h.commands, [Command::Close, Command::CloseNow]);
    }

    #[test]
    fn a_bad_payload_is_answered_and_the_connection_stays() {
        let mut h = Harness::ready();
        // A well-framed frame of an unknown opcode.
        let mut f = BytesMut::from(&frame(50, &Request::Ping { nonce: 0 })[..]);
        f[4] = 0x7e;
        h.data(&f);
        assert_eq!(h.error_codes(), [(50, ErrorCode::UnknownOperation)]);
        assert!(!h.closed());
        h.data(&frame(51, &Request::Ping { nonce: 3 }));
        assert_eq!(h.replies.last(), Some(&(51, Reply::Pong { nonce: 3 })));
        // HELLO, the unknown frame and the PING, counted by operation.
        assert_eq!(h.stats.requests.iter().map(|c| c.get()).sum::<u64>(), 3);
    }

    #[test]
    fn a_flag_the_request_does_not_define_is_malformed_and_the_connection_stays() {
        let mut h = Harness::ready();
        // PING defines no flag; RECEIVE defines bit 0 only.
        let mut ping = BytesMut::from(&frame(52, &Request::Ping { nonce: 0 })[..]);
        ping[5] = 0x01;
        h.data(&ping);
        let mut recv = BytesMut::from(&frame(53, &receive())[..]);
        recv[5] = 0x02;
        h.data(&recv);
        assert_eq!(
            h.error_codes(),
            [(52, ErrorCode::Malformed), (53, ErrorCode::Malformed)]
        );
        assert!(h.engine.submitted.is_empty());
        assert!(!h.closed());
        h.data(&frame(54, &bound_receive()));
        assert!(matches!(h.engine.submitted[..], [Op::Receive(ref r)] if r.bind_leases));
    }

    #[test]
    fn received_messages_a_reply_cannot_carry_are_released() {
        let mut h = Harness::new(SessionConfig {
            frame_bytes_max: 4096,
            ..config()
        });
        h.data(&frame(1, &hello(b"")));
        h.replies.clear();
        h.engine.later();
        h.data(&frame(60, &receive()));
        let message = |i: u8| ReceivedMessage {
            id: MessageId(i.into()),
            receipt: Receipt {
                delivery: i.into(),
                ..Receipt::default()
            },
            receive_count: 1,
            sent_at_ms: 0,
            first_received_delta_ms: 0,
            attributes: MessageAttributes::new(),
            body: Bytes::from(vec![i; 3000]),
        };
        // Two messages of 3,000 bytes: a 4 KiB reply holds the first.
        assert!(h.result(1, OpResult::Received(vec![message(1), message(2)])));
        let Some((60, Reply::Receive { messages })) = h.replies.pop() else {
            panic!("{:?}", h.replies)
        };
        assert_eq!(messages.to_messages(), [message(1)]);
        let [Op::ChangeVisibility(release)] = &h.engine.unanswered[..] else {
            panic!("{:?}", h.engine.unanswered)
        };
        assert_eq!(release.queue, q());
        assert_eq!(release.entries.len(), 1);
        assert_eq!(release.entries[0].receipt, message(2).receipt);
        assert_eq!(release.entries[0].visibility_timeout_ms, 0);
    }

    #[test]
    fn the_io_layer_closing_a_connection_cancels_its_requests() {
        let mut h = Harness::ready();
        h.engine.later();
        h.data(&frame(61, &receive()));
        h.engine.later();
        h.data(&frame(62, &delete(1)));
        h.call(|s, _, e| s.on_closed(e));
        h.engine.cancelled.sort_unstable();
        assert_eq!(h.engine.cancelled, [1, 2]);
        assert_eq!(h.session.in_flight(), 0);
        h.data(&frame(63, &Request::Ping { nonce: 1 }));
        assert!(h.replies.is_empty(), "nothing is read after the close");
    }

    #[test]
    fn a_draining_server_answers_shutting_down_and_closes_quiet_connections() {
        let mut waiting = Harness::new(config());
        waiting.draining = true;
        waiting.call(|s, cx, e| s.begin_drain(cx, e));
        assert_eq!(waiting.error_codes(), [(0, ErrorCode::ShuttingDown)]);
        assert!(waiting.closed());

        let mut h = Harness::ready();
        h.draining = true;
        h.call(|s, cx, e| s.begin_drain(cx, e));
        assert!(!h.closed(), "a ready connection is served on");
        h.data(&frame(70, &Request::Ping { nonce: 1 }));
        assert_eq!(h.error_codes(), [(70, ErrorCode::ShuttingDown)]);
        h.now_ns = T0 + 50 * MS;
        h.call(|s, cx, e| s.drain(T0, cx, e));
        assert!(!h.closed(), "bytes arrived a moment ago");
        h.now_ns = T0 + 100 * MS;
        h.call(|s, cx, e| s.drain(T0, cx, e));
        assert!(h.closed());
        assert_eq!(h.error_codes().len(), 2);
    }
}
