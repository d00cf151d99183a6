//! The engine as the loop lends it to one session.

use std::collections::HashMap;

use crate::engine::{Op, OpResult, Shard};
use crate::io::ConnId;
use crate::server::clock::{Clock, EngineTime};
use crate::server::session::{EngineAccess, Submitted};

/// The engine as the loop lends it to one session: tickets come from the
/// shard's counter, and a request answered later is mapped to the session's
/// connection.
pub(super) struct EngineLink<'a> {
    pub(super) shard: &'a mut Shard,
    pub(super) tickets: &'a mut HashMap<u64, ConnId>,
    pub(super) next_ticket: &'a mut u64,
    pub(super) conn: ConnId,
    /// The engine's time as read after the wait.
    pub(super) time: EngineTime,
    pub(super) clock: &'a Clock,
}

impl EngineLink<'_> {
    fn ticket(&mut self) -> u64 {
        let t = *self.next_ticket;
        *self.next_ticket += 1;
        t
    }

    /// The engine's time for the next operation: as read after the wait,
    /// or the manual clock as it stands now (see the module docs).
    #[inline]
    fn time(&self) -> EngineTime {
        match self.clock {
            Clock::Real => self.time,
            Clock::Manual(m) => m.now(),
        }
    }
}

impl EngineAccess for EngineLink<'_> {
    fn submit(&mut self, op: Op) -> Submitted {
        let ticket = self.ticket();
        let t = self.time();
        match self.shard.submit(ticket, op, t.now_ns, t.wall_ms) {
            Some(result) => Submitted::Done(result),
            None => {
                self.tickets.insert(ticket, self.conn);
                Submitted::Later(ticket)
            }
        }
    }

    fn submit_unanswered(&mut self, op: Op) {
        // A later result finds no ticket entry and answers no one.
        let ticket = self.ticket();
        let t = self.time();
        let _ = self.shard.submit(ticket, op, t.now_ns, t.wall_ms);
    }

    fn cancel(&mut self, ticket: u64) {
        self.shard.cancel(ticket);
        self.tickets.remove(&ticket);
    }

    fn recycle(&mut self, result: OpResult) {
        self.shard.recycle(result);
    }
}
