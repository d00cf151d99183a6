//! What every kind of connection meets: the shard loop holds a
//! [`ConnSession`] per connection and drives it through the same calls,
//! whichever door the connection came through.
//!
//! - [`Session`]: the binary protocol (HELLO, frames, the native client);
//! - [`SqsSession`]: the SQS door (HTTP/1.1, the AWS JSON protocol);
//! - [`MetricsSession`]: the metrics endpoint (`/metrics`, `/healthz`).
//!
//! Each takes bytes and the time in and gives [`Command`]s for the io layer
//! out, lent the engine through [`EngineAccess`]; none knows a socket. The
//! calls below are the contract; what only the binary protocol has (the
//! manual clock's `ADVANCE_CLOCK` wait) answers "nothing" for the SQS door.

use std::net::SocketAddr;

use super::metrics_session::MetricsSession;
use super::session::{Answer, Command, EngineAccess, Phase, Session, SessionContext};
use super::sqs_session::SqsSession;
use crate::engine::OpResult;

/// One connection's protocol state, by door.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per connection, held in place in the connection table"
)]
pub enum ConnSession {
    /// The binary protocol.
    Sluice(Session),
    /// The SQS door.
    Sqs(SqsSession),
    /// The metrics endpoint.
    Metrics(MetricsSession),
}

/// Calls `$method` on whichever session it is.
macro_rules! each {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            ConnSession::Sluice($s) => $call,
            ConnSession::Sqs($s) => $call,
            ConnSession::Metrics($s) => $call,
        }
    };
}

impl ConnSession {
    /// Bytes arrived.
    pub fn on_data(
        &mut self,
        bytes: &[u8],
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        each!(self, s => s.on_data(bytes, cx, engine));
    }

    /// The engine answered `ticket`; false if it was not this session's.
    pub fn on_result(
        &mut self,
        ticket: u64,
        result: OpResult,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) -> bool {
        each!(self, s => s.on_result(ticket, result, cx, engine))
    }

    /// Reads again if back-pressure allows; false while still paused.
    pub fn resume(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) -> bool {
        each!(self, s => s.resume(cx, engine))
    }

    /// Whether reading is paused for back-pressure.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        each!(self, s => s.is_paused())
    }

    /// Hands what was written so far to the io layer.
    pub fn flush(&mut self) {
        each!(self, s => s.flush());
    }

    /// Whether output waits for [`ConnSession::flush`].
    #[must_use]
    pub fn has_output(&self) -> bool {
        each!(self, s => s.has_output())
    }

    /// Deadlines.
    pub fn tick(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        each!(self, s => s.tick(cx, engine));
    }

    /// Shutdown began.
    pub fn begin_drain(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        each!(self, s => s.begin_drain(cx, engine));
    }

    /// While shutting down: closes once quiet.
    pub fn drain(
        &mut self,
        drain_started_ns: u64,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        each!(self, s => s.drain(drain_started_ns, cx, engine));
    }

    /// The io layer reports the connection gone.
    pub fn on_closed(&mut self, engine: &mut dyn EngineAccess) {
        each!(self, s => s.on_closed(engine));
    }

    /// The commands issued since the last call, in order.
    pub fn commands(&mut self) -> std::vec::Drain<'_, Command> {
        each!(self, s => s.commands())
    }

    /// Where the connection is in its life.
    #[must_use]
    pub fn phase(&self) -> Phase {
        each!(self, s => s.phase())
    }

    /// The peer, for logs.
    #[must_use]
    pub fn peer(&self) -> SocketAddr {
        each!(self, s => s.peer())
    }

    /// The engine time an `ADVANCE_CLOCK` waits for (binary protocol only).
    #[must_use]
    pub fn clock_wait(&self) -> Option<u64> {
        match self {
            ConnSession::Sluice(s) => s.clock_wait(),
            ConnSession::Sqs(_) | ConnSession::Metrics(_) => None,
        }
    }

    /// Whether it is a metrics connection waiting for a scrape.
    #[must_use]
    pub fn awaits_scrape(&self) -> bool {
        matches!(self, ConnSession::Metrics(s) if s.awaits_scrape())
    }

    /// The server answers a session's [`Command::Ask`] (only the binary
    /// protocol's sessions ask).
    pub fn on_answer(
        &mut self,
        answer: Answer,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        if let ConnSession::Sluice(s) = self {
            s.on_answer(answer, cx, engine);
        }
    }

    /// Every shard reached the time of [`ConnSession::clock_wait`].
    pub fn on_clock_caught_up(&mut self, cx: &SessionContext<'_>, engine: &mut dyn EngineAccess) {
        if let ConnSession::Sluice(s) = self {
            s.on_clock_caught_up(cx, engine);
        }
    }
}
