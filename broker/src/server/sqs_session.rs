//! One connection of the SQS door, without a socket: HTTP/1.1 request
//! bytes in, SQS calls through the sans-IO door (`sluice_sqs`) to the
//! engine, HTTP responses out, as commands for the shard loop, the way the
//! binary protocol's [`Session`](super::session::Session) does it.
//!
//! # Order
//!
//! Requests are served one at a time, in the order they arrive: a pipelined
//! request waits in the input buffer until the one before it is answered
//! (a long poll included), so responses go out in request order, as
//! HTTP/1.1 requires. An SQS call may take several engine requests
//! (`Step::Engine`); each is submitted when the one before is answered.
//!
//! # Deadlines and bounds
//!
//! - A request must arrive whole within [`SqsConfig::request_timeout_ns`]
//!   of its first byte (a client sending a byte a second is cut off), with
//!   its head and body within the door's [`HttpLimits`].
//! - A keep-alive connection with no request for
//!   [`SqsConfig::idle_timeout_ns`] is closed.
//! - Reading pauses while the connection's unsent responses reach
//!   `--unsent-bytes-max` (or any are unsent while the server's total is
//!   over its limit), as for the binary protocol.
//! - A request that cannot be read is answered with its HTTP status
//!   (400, 411, 413, 431, 505) and the connection closes.

use std::borrow::Cow;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use sluice_protocol::{ErrorCode, Reply};
use sluice_sqs::http::{self, HttpLimits, Parsed};
use sluice_sqs::{Call, Door, QueueMemo, Response, Step};

use super::clock;
use super::convert::{self, Route};
use super::limits::DRAIN_QUIET_NS;
use super::outbox::Outbox;
use super::session::{Command, EngineAccess, Phase, SessionContext, Submitted};

/// What every SQS connection of a shard shares.
#[derive(Clone, Debug)]
pub struct SqsConfig {
    /// The door: its configuration and request ids.
    pub door: Door,
    /// What one request may take.
    pub http: HttpLimits,
    /// Time for a request to arrive whole once its first byte did.
    pub request_timeout_ns: u64,
    /// Time a keep-alive connection may wait for its next request.
    pub idle_timeout_ns: u64,
}

/// A call waiting for the engine.
#[derive(Debug)]
struct Waiting {
    call: Call,
    ticket: u64,
    keep_alive: bool,
}

/// One SQS connection's state. See the module docs.
#[derive(Debug)]
pub struct SqsSession {
    peer: SocketAddr,
    config: SqsConfig,
    /// Bytes received and not yet taken by a request.
    inbuf: BytesMut,
    /// Responses and commands for the io layer.
    outbox: Outbox,
    /// When the request now partly in `inbuf` began arriving.
    partial_since_ns: Option<u64>,
    /// When the connection last finished a response or was accepted (the
    /// idle timeout counts from it) and when bytes last arrived.
    idle_since_ns: u64,
    last_data_ns: u64,
    /// The call the engine is working on.
    waiting: Option<Waiting>,
    /// `100 Continue` was sent for the request now arriving.
    continued: bool,
    paused: bool,
    /// The queue the connection's last message action named.
    queues: QueueMemo,
}

impl SqsSession {
    /// A new connection.
    #[must_use]
    pub fn new(peer: SocketAddr, config: SqsConfig, now_ns: u64) -> SqsSession {
        SqsSession {
            peer,
            config,
            inbuf: BytesMut::new(),
            outbox: Outbox::default(),
            partial_since_ns: None,
            idle_since_ns: now_ns,
            last_data_ns: now_ns,
            waiting: None,
            continued: false,
            paused: false,
            queues: QueueMemo::default(),
        }
    }

    /// A connection refused at once (`503`, with `why`), then closed.
    #[must_use]
    pub fn refused(peer: SocketAddr, config: SqsConfig, now_ns: u64, why: &str) -> SqsSession {
        let mut s = SqsSession::new(peer, config, now_ns);
        write_unavailable(s.outbox.buf(), why);
        s.close(now_ns);
        s
    }

    /// Where the connection is: ready, or closing.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.outbox.phase()
    }

    /// The peer, for logs.
    #[must_use]
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether reading is paused for back-pressure.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether responses wait for [`SqsSession::flush`].
    #[must_use]
    pub fn has_output(&self) -> bool {
        self.outbox.has_output()
    }

    /// The commands issued since the last call, in order.
    pub fn commands(&mut self) -> std::vec::Drain<'_, Command> {
        self.outbox.commands()
    }

    /// Hands the responses written so far to the io layer.
    pub fn flush(&mut self) {
        self.outbox.flush();
    }

    /// Bytes arrived.
    pub fn on_data(
        &mut self,
        bytes: &[u8],
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        if self.outbox.is_closing() {
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
        result: crate::engine::OpResult,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) -> bool {
        if self.waiting.as_ref().is_none_or(|w| w.ticket != ticket) {
            return false;
        }
        let Some(Waiting {
            mut call,
            keep_alive,
            ..
        }) = self.waiting.take()
        else {
            return false;
        };
        let step = call.resume(convert::to_reply(result), clock::wall_ms());
        self.run(call, step, keep_alive, cx, engine);
        if self.waiting.is_none() && !self.paused {
            self.process(cx, engine);
        }
        true
    }

    /// Reads again if back-pressure allows; false while still paused.
    pub fn resume(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) -> bool {
        if !self.paused || self.outbox.is_closing() {
            return true;
        }
        if self.blocked(cx, true) {
            return false;
        }
        self.paused = false;
        self.outbox.push(Command::SetReading(true));
        self.process(cx, engine);
        !self.paused
    }

    /// Deadlines: a request left unfinished, an idle keep-alive
    /// connection, a closing connection whose peer does not read.
    pub fn tick(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        let now = cx.now_ns;
        if self.outbox.tick_closing(now) {
            return;
        }
        if self
            .partial_since_ns
            .is_some_and(|t| now.saturating_sub(t) >= self.config.request_timeout_ns)
        {
            tracing::debug!(peer = %self.peer, "closing SQS connection: a request was left unfinished");
            cx.stats.closed_bad_input.add(1);
            http::write_response(
                self.outbox.buf(),
                408,
                &[("Content-Type", "text/plain; charset=utf-8")],
                b"the request did not arrive in time\n",
                true,
            );
            self.begin_close(now, engine);
        } else if self.waiting.is_none()
            && self.inbuf.is_empty()
            && now.saturating_sub(self.idle_since_ns.max(self.last_data_ns))
                >= self.config.idle_timeout_ns
        {
            tracing::debug!(peer = %self.peer, "closing idle SQS connection");
            self.begin_close(now, engine);
        }
    }

    /// Shutdown began: an idle connection closes now; one with a call in
    /// the engine is answered first.
    pub fn begin_drain(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        if self.waiting.is_none() && self.inbuf.is_empty() {
            self.begin_close(cx.now_ns, engine);
        }
    }

    /// While shutting down: closes the connection once nothing of it is in
    /// the engine and no bytes arrived for a moment.
    pub fn drain(
        &mut self,
        drain_started_ns: u64,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        let quiet_since = self.last_data_ns.max(drain_started_ns);
        if !self.outbox.is_closing()
            && self.waiting.is_none()
            && cx.now_ns.saturating_sub(quiet_since) >= DRAIN_QUIET_NS
        {
            self.begin_close(cx.now_ns, engine);
        }
    }

    /// The io layer reports the connection gone: its call in the engine is
    /// cancelled.
    pub fn on_closed(&mut self, engine: &mut dyn EngineAccess) {
        if let Some(w) = self.waiting.take() {
            engine.cancel(w.ticket);
        }
        self.outbox.closed();
    }

    // ----- requests ---------------------------------------------------------

    /// Whether the connection must not be read: `resume` asks with the
    /// lower threshold that lets a paused connection go on.
    fn blocked(&self, cx: &SessionContext<'_>, resume: bool) -> bool {
        let unsent = cx.io_unsent + self.outbox.pending_bytes();
        let unsent_max = if resume {
            cx.config.unsent_max / 2
        } else {
            cx.config.unsent_max
        };
        unsent >= unsent_max || (cx.unsent_over && unsent > 0)
    }

    /// Serves the whole requests buffered, one at a time.
    fn process(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        while !self.outbox.is_closing() && self.waiting.is_none() {
            if self.blocked(cx, false) {
                self.partial_since_ns = None;
                if !self.paused {
                    self.paused = true;
                    self.outbox.push(Command::SetReading(false));
                }
                return;
            }
            if self.inbuf.is_empty() {
                self.partial_since_ns = None;
                return;
            }
            match http::parse(&self.inbuf, &self.config.http) {
                Ok(Parsed::Incomplete { expect_continue }) => {
                    if expect_continue && !self.continued {
                        self.continued = true;
                        http::write_continue(self.outbox.buf());
                    }
                    if self.partial_since_ns.is_none() {
                        self.partial_since_ns = Some(cx.now_ns);
                    }
                    return;
                }
                Ok(Parsed::Request(req, used)) => {
                    let _ = self.inbuf.split_to(used);
                    self.partial_since_ns = None;
                    self.continued = false;
                    self.serve(&req, cx, engine);
                }
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "closing SQS connection: bad request");
                    cx.stats.closed_bad_input.add(1);
                    http::write_error(self.outbox.buf(), &e);
                    self.begin_close(cx.now_ns, engine);
                    return;
                }
            }
        }
    }

    fn serve(
        &mut self,
        req: &http::Request,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        if cx.draining {
            write_unavailable(self.outbox.buf(), "the server is shutting down");
            self.begin_close(cx.now_ns, engine);
            return;
        }
        if req.method() != "POST" && req.method() != "GET" {
            let response = method_not_allowed();
            self.write(&response, req.keep_alive, cx.now_ns, engine);
            return;
        }
        let (call, step) =
            self.config
                .door
                .call_remembering(req, clock::wall_ms(), &mut self.queues);
        self.run(call, step, req.keep_alive, cx, engine);
    }

    /// Carries `call` on from `step` until it waits for the engine or is
    /// done.
    fn run(
        &mut self,
        mut call: Call,
        mut step: Step,
        keep_alive: bool,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        loop {
            match step {
                Step::Done(response) => {
                    cx.stats.sqs.count(call.action(), &response);
                    self.write(&response, keep_alive, cx.now_ns, engine);
                    return;
                }
                Step::Engine(request) => {
                    let Route::Engine(op) = convert::route(request) else {
                        // The door asks the engine only for engine work.
                        let reply = Reply::error(ErrorCode::Internal, "not an engine request");
                        step = call.resume(reply, clock::wall_ms());
                        continue;
                    };
                    match engine.submit(op) {
                        Submitted::Done(result) => {
                            step = call.resume(convert::to_reply(result), clock::wall_ms());
                        }
                        Submitted::Later(ticket) => {
                            self.waiting = Some(Waiting {
                                call,
                                ticket,
                                keep_alive,
                            });
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Writes `response`; closes after it unless `keep_alive`.
    fn write(
        &mut self,
        response: &Response,
        keep_alive: bool,
        now_ns: u64,
        engine: &mut dyn EngineAccess,
    ) {
        http::write_response(
            self.outbox.buf(),
            response.status,
            &response.headers,
            &response.body,
            !keep_alive,
        );
        self.idle_since_ns = now_ns;
        if !keep_alive {
            self.begin_close(now_ns, engine);
        }
    }

    /// Closes after what is written; a call in the engine is cancelled.
    fn begin_close(&mut self, now_ns: u64, engine: &mut dyn EngineAccess) {
        if let Some(w) = self.waiting.take() {
            engine.cancel(w.ticket);
        }
        self.close(now_ns);
    }

    fn close(&mut self, now_ns: u64) {
        if self.outbox.is_closing() {
            return;
        }
        self.inbuf = BytesMut::new();
        self.partial_since_ns = None;
        self.outbox.close(now_ns);
    }
}

/// `503 Service Unavailable` saying `why`, closing the connection.
fn write_unavailable(out: &mut BytesMut, why: &str) {
    let body = format!("{why}\n");
    http::write_response(
        out,
        503,
        &[("Content-Type", "text/plain; charset=utf-8")],
        body.as_bytes(),
        true,
    );
}

/// The response to a method other than POST and GET.
fn method_not_allowed() -> Response {
    Response {
        status: 405,
        headers: vec![
            ("Allow", Cow::Borrowed("POST, GET")),
            ("Content-Type", Cow::Borrowed("text/plain; charset=utf-8")),
        ],
        body: Bytes::from_static(b"the SQS API takes POST (and GET for the query protocol)\n"),
        error: Some("MethodNotAllowed"),
        stale_deletes: 0,
    }
}

#[cfg(test)]
mod tests;
