//! The questions a session asks the whole server (the `SERVER_STATS`
//! reply, a move of the manual clock, the auth guard's verdict on a
//! HELLO's token) and their answers: the session asks with
//! [`Command::Ask`], the shard loop answers through
//! [`Session::on_answer`], and until then the connection is held up.

use core::fmt;

use sluice_protocol::{ErrorCode, HelloRequest, Reply, ServerStatsReply, WireError};

use super::{Command, EngineAccess, Question, Session, SessionContext};
use crate::server::clock::{EngineTime, NotManual};

/// The server's answer to a session's [`Question`].
#[derive(Debug)]
pub enum Answer {
    /// To [`Question::ServerStats`].
    ServerStats(ServerStatsReply),
    /// To [`Question::AdvanceClock`]: the manual time since the start (ms)
    /// and the time after the move, or why the clock cannot move.
    ClockAdvanced(Result<(u64, EngineTime), NotManual>),
    /// To [`Question::AuthOutcome`]: nanoseconds to hold the `Unauthorized`
    /// reply.
    AuthDelay(u64),
}

/// What a session asked and waits to be answered, with what it needs to
/// go on; the question itself follows from it ([`Asked::question`]).
pub(super) enum Asked {
    /// A `SERVER_STATS` request.
    ServerStats { request_id: u32 },
    /// An `ADVANCE_CLOCK` request.
    AdvanceClock { request_id: u32, by_ms: u64 },
    /// A HELLO whose token was checked.
    Auth {
        request_id: u32,
        hello: HelloRequest,
        ok: bool,
    },
}

impl Asked {
    /// The question to put to the server.
    fn question(&self) -> Question {
        match *self {
            Asked::ServerStats { .. } => Question::ServerStats,
            Asked::AdvanceClock { by_ms, .. } => Question::AdvanceClock { by_ms },
            Asked::Auth { ok, .. } => Question::AuthOutcome { ok },
        }
    }
}

impl fmt::Debug for Asked {
    /// The question and its request, without the HELLO (whose token must
    /// not reach a log).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (Asked::ServerStats { request_id }
        | Asked::AdvanceClock { request_id, .. }
        | Asked::Auth { request_id, .. }) = self;
        write!(f, "{:?} for request {request_id}", self.question())
    }
}

impl Session {
    /// Asks the server what `asked` needs, for the request being served,
    /// which then holds the connection up until [`Session::on_answer`].
    pub(super) fn ask(&mut self, asked: Asked) {
        let question = asked.question();
        self.asked = Some((asked, self.serving.take()));
        self.commands.push(Command::Ask(question));
    }

    /// The server answers the session's [`Command::Ask`]: the request that
    /// asked is answered (or, for HELLO, goes on) and the frames behind it
    /// are served.
    pub fn on_answer(
        &mut self,
        answer: Answer,
        cx: &SessionContext<'_>,
        engine: &mut dyn EngineAccess,
    ) {
        let Some((asked, started)) = self.asked.take() else {
            return;
        };
        self.serving = started;
        match (asked, answer) {
            (Asked::ServerStats { request_id }, Answer::ServerStats(stats)) => {
                self.reply(request_id, &Reply::ServerStats(stats), cx.stats);
            }
            (Asked::AdvanceClock { request_id, .. }, Answer::ClockAdvanced(moved)) => {
                self.on_clock_advanced(request_id, moved, cx);
            }
            (
                Asked::Auth {
                    request_id,
                    hello,
                    ok,
                },
                Answer::AuthDelay(delay_ns),
            ) => self.on_auth_outcome(request_id, hello, ok, delay_ns, cx, engine),
            (asked, answer) => {
                tracing::error!(?asked, ?answer, "a session's question got another's answer");
                let e = WireError::new(ErrorCode::Internal, "the server answered another question");
                self.protocol_error(0, e, cx, engine);
            }
        }
        self.serving = None;
        if !self.paused {
            self.process(cx, engine);
        }
    }
}
