//! One connection of the metrics endpoint (`GET /metrics`, `GET /healthz`),
//! without a socket: HTTP/1.1 request bytes in, one response out, as
//! commands for the shard loop. It reads requests with the SQS door's HTTP
//! parser (`sluice_sqs::http`) and is served by the shard loops' event-driven
//! io like every other connection, so a connection that sends nothing holds
//! no thread and cannot keep a scrape waiting.
//!
//! # A scrape
//!
//! `/metrics` needs every shard's per-queue counters, which each shard
//! publishes on its own loop when asked. The session asks
//! ([`Exposition::begin_scrape`]) and waits, without blocking its shard:
//! the shard loop calls [`MetricsSession::poll_scrape`] on each turn until
//! every shard has published ([`Exposition::scraped`]) or
//! [`MetricsConfig::scrape_wait_ns`] has passed (the counters are then
//! those last published), and the exposition is rendered on the shard
//! that serves the connection.
//!
//! # Bounds
//!
//! - One request per connection (`Connection: close`).
//! - The request head must arrive within [`MetricsConfig::head_timeout_ns`]
//!   of the accept (else `408`), within the parser's limits (else `431`,
//!   `413`, `400`).
//! - The whole exchange, the response's bytes included, ends within
//!   [`MetricsConfig::exchange_timeout_ns`] of the accept: past it the
//!   connection is closed at once, the response cut short, so a client that
//!   reads a large exposition a little at a time cannot hold it for long.
//! - How many such connections a server holds is the shard loop's to bound
//!   (the oldest still reading its request is closed to make room).

use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use bytes::BytesMut;
use sluice_sqs::http::{self, HttpLimits, Parsed};

use super::outbox::Outbox;
use super::session::{Command, EngineAccess, Phase, SessionContext};

/// What the endpoint serves: the exposition and the server's health.
pub trait Exposition: Send + Sync + core::fmt::Debug {
    /// Asks every shard for fresh counters; the generation to wait for.
    fn begin_scrape(&self) -> u64;
    /// Whether every shard has published `generation` (or a later one).
    fn scraped(&self, generation: u64) -> bool;
    /// Appends the Prometheus text exposition to `out`.
    fn render(&self, out: &mut String);
    /// The server is shutting down: `/healthz` answers 503.
    fn draining(&self) -> bool;
}

/// What every metrics connection of a shard shares.
#[derive(Clone, Debug)]
pub struct MetricsConfig {
    /// The exposition and the health.
    pub source: Arc<dyn Exposition>,
    /// What a request may take.
    pub http: HttpLimits,
    /// Time for the request head to arrive, from the accept.
    pub head_timeout_ns: u64,
    /// Time for the whole exchange, from the accept to the response's last
    /// byte.
    pub exchange_timeout_ns: u64,
    /// Longest wait for the shards' counters.
    pub scrape_wait_ns: u64,
}

/// `Content-Type` of the exposition (Prometheus text format 0.0.4).
pub const EXPOSITION_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const TEXT: &str = "text/plain; charset=utf-8";

/// Where the exchange is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading the request.
    Reading,
    /// Waiting for the shards' counters.
    Scraping {
        generation: u64,
        since_ns: u64,
        head_only: bool,
    },
    /// Answered (or closing).
    Answered,
}

/// One metrics connection's state. See the module docs.
#[derive(Debug)]
pub struct MetricsSession {
    peer: SocketAddr,
    config: MetricsConfig,
    accepted_ns: u64,
    inbuf: BytesMut,
    outbox: Outbox,
    state: State,
}

impl MetricsSession {
    /// A new connection, accepted at `now_ns`.
    #[must_use]
    pub fn new(peer: SocketAddr, config: MetricsConfig, now_ns: u64) -> MetricsSession {
        MetricsSession {
            peer,
            config,
            accepted_ns: now_ns,
            inbuf: BytesMut::new(),
            outbox: Outbox::default(),
            state: State::Reading,
        }
    }

    /// A connection refused at once (`503`, with `why`), then closed.
    #[must_use]
    pub fn refused(
        peer: SocketAddr,
        config: MetricsConfig,
        now_ns: u64,
        why: &str,
    ) -> MetricsSession {
        let mut s = MetricsSession::new(peer, config, now_ns);
        s.answer(503, TEXT, format!("{why}\n").as_bytes(), false, now_ns);
        s
    }

    /// Ready, or closing.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.outbox.phase()
    }

    /// The peer, for logs.
    #[must_use]
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether the connection is still reading its request: the one the
    /// shard loop may close to make room.
    #[must_use]
    pub fn is_reading(&self) -> bool {
        self.state == State::Reading && !self.outbox.is_closing()
    }

    /// Whether the connection waits for the shards' counters.
    #[must_use]
    pub fn awaits_scrape(&self) -> bool {
        matches!(self.state, State::Scraping { .. })
    }

    /// Never paused: one response, no back-pressure to apply.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        false
    }

    /// Whether output waits for [`MetricsSession::flush`].
    #[must_use]
    pub fn has_output(&self) -> bool {
        self.outbox.has_output()
    }

    /// Hands the response written so far to the io layer.
    pub fn flush(&mut self) {
        self.outbox.flush();
    }

    /// The commands issued since the last call, in order.
    pub fn commands(&mut self) -> std::vec::Drain<'_, Command> {
        self.outbox.commands()
    }

    /// Bytes arrived.
    pub fn on_data(
        &mut self,
        bytes: &[u8],
        cx: &SessionContext<'_>,
        _engine: &mut dyn EngineAccess,
    ) {
        if self.state != State::Reading || self.outbox.is_closing() {
            return;
        }
        self.inbuf.extend_from_slice(bytes);
        match http::parse(&self.inbuf, &self.config.http) {
            Ok(Parsed::Incomplete { .. }) => {}
            Ok(Parsed::Request(req, _)) => {
                self.inbuf = BytesMut::new();
                self.serve(&req, cx.now_ns);
            }
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "metrics request refused");
                cx.stats.closed_bad_input.add(1);
                self.inbuf = BytesMut::new();
                http::write_error(self.outbox.buf(), &e);
                self.finish(cx.now_ns);
            }
        }
    }

    /// Never the engine's: the endpoint asks it nothing.
    pub fn on_result(
        &mut self,
        _ticket: u64,
        _result: crate::engine::OpResult,
        _cx: &SessionContext<'_>,
        _engine: &mut dyn EngineAccess,
    ) -> bool {
        false
    }

    /// Never paused, so always reading.
    pub fn resume(&mut self, _cx: &SessionContext<'_>, _engine: &mut dyn EngineAccess) -> bool {
        true
    }

    /// Answers a scrape once every shard has published, or its wait is
    /// over; true when the connection no longer waits.
    pub fn poll_scrape(&mut self, now_ns: u64) -> bool {
        let State::Scraping {
            generation,
            since_ns,
            head_only,
        } = self.state
        else {
            return true;
        };
        let source = self.config.source.clone();
        if !source.scraped(generation)
            && now_ns.saturating_sub(since_ns) < self.config.scrape_wait_ns
        {
            return false;
        }
        let mut body = String::new();
        // The rendering is the server's own code; were it to panic, the
        // scrape gets a 500 and the shard goes on.
        let rendered = catch_unwind(AssertUnwindSafe(|| source.render(&mut body)));
        if rendered.is_ok() {
            self.answer(
                200,
                EXPOSITION_CONTENT_TYPE,
                body.as_bytes(),
                head_only,
                now_ns,
            );
        } else {
            tracing::error!("rendering the metrics failed");
            let body = b"the metrics could not be rendered\n";
            self.answer(500, TEXT, body, head_only, now_ns);
        }
        true
    }

    /// Deadlines: the request head and the whole exchange.
    pub fn tick(&mut self, cx: &SessionContext<'_>, _engine: &mut dyn EngineAccess) {
        let now = cx.now_ns;
        let age = now.saturating_sub(self.accepted_ns);
        if age >= self.config.exchange_timeout_ns {
            tracing::debug!(peer = %self.peer, "metrics exchange over its deadline: closed");
            self.evict(now);
            return;
        }
        // A closing connection whose peer does not read is cut at the
        // exchange deadline above, not sooner.
        if self.outbox.is_closing() {
            return;
        }
        if self.state == State::Reading && age >= self.config.head_timeout_ns {
            tracing::debug!(peer = %self.peer, "metrics request did not arrive in time");
            cx.stats.closed_bad_input.add(1);
            self.inbuf = BytesMut::new();
            self.answer(408, TEXT, b"request timeout\n", false, now);
        }
    }

    /// Shutdown began: nothing changes. The endpoint answers until the
    /// shards are done (`/healthz` then says the server is draining), and
    /// its connections end within their own deadlines.
    pub fn begin_drain(&mut self, _cx: &SessionContext<'_>, _engine: &mut dyn EngineAccess) {}

    /// While shutting down: as [`MetricsSession::begin_drain`].
    pub fn drain(
        &mut self,
        _drain_started_ns: u64,
        _cx: &SessionContext<'_>,
        _engine: &mut dyn EngineAccess,
    ) {
    }

    /// The io layer reports the connection gone.
    pub fn on_closed(&mut self, _engine: &mut dyn EngineAccess) {
        self.outbox.closed();
        self.state = State::Answered;
    }

    /// Closed at once to make room for a newer connection.
    pub fn evict(&mut self, now_ns: u64) {
        self.outbox.close(now_ns);
        self.outbox.push(Command::CloseNow);
        self.state = State::Answered;
    }

    fn serve(&mut self, req: &http::Request, now_ns: u64) {
        let head_only = req.method() == "HEAD";
        if req.method() != "GET" && !head_only {
            let mut out = BytesMut::new();
            http::write_response(
                &mut out,
                405,
                &[("Content-Type", TEXT), ("Allow", "GET, HEAD")],
                b"method not allowed: use GET\n",
                true,
            );
            self.outbox.buf().extend_from_slice(&out);
            self.finish(now_ns);
            return;
        }
        match req.path() {
            "/metrics" => {
                self.state = State::Scraping {
                    generation: self.config.source.begin_scrape(),
                    since_ns: now_ns,
                    head_only,
                };
            }
            "/healthz" => {
                if self.config.source.draining() {
                    let body = b"draining: the server is shutting down\n";
                    self.answer(503, TEXT, body, head_only, now_ns);
                } else {
                    self.answer(200, TEXT, b"ok\n", head_only, now_ns);
                }
            }
            _ => {
                let body = b"not found: try /metrics or /healthz\n";
                self.answer(404, TEXT, body, head_only, now_ns);
            }
        }
    }

    /// Writes the response (its head alone for `HEAD`) and closes after it.
    fn answer(
        &mut self,
        status: u16,
        content_type: &str,
        body: &[u8],
        head_only: bool,
        now_ns: u64,
    ) {
        let out = self.outbox.buf();
        let start = out.len();
        http::write_response(out, status, &[("Content-Type", content_type)], body, true);
        if head_only {
            out.truncate(out.len() - body.len());
        }
        debug_assert!(out.len() > start);
        self.finish(now_ns);
    }

    fn finish(&mut self, now_ns: u64) {
        self.state = State::Answered;
        self.outbox.close(now_ns);
    }
}

#[cfg(test)]
mod tests;
