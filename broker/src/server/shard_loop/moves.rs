//! The SQS door's message-move tasks, run by the shards' loops: each due
//! step (a REDRIVE) goes to the engine of the shard that takes it, like a
//! connection's request, and its reply back to the door, which paces the
//! next one. The door keeps the tasks (`sluice_sqs`'s `moves`); this file
//! only carries steps, on the real wall clock (a manual clock moves leases,
//! not tasks).
//!
//! Every shard looks at the door's next due time each turn (one atomic
//! load; nothing more while no task runs) and bounds its wait by it, so a
//! task started on any shard takes its first step on that shard at once,
//! and its later steps on whichever shard wakes first when they are due;
//! the door hands each step to one shard only.

use std::time::Duration;

use sluice_sqs::Door;

use super::State;
use crate::engine::OpResult;
use crate::server::clock;
use crate::server::convert::{self, Route};

/// A shard's side of the move tasks.
#[derive(Debug)]
pub(super) struct Mover {
    door: Door,
    /// The step with the engine: (ticket, task, messages asked).
    step: Option<(u64, u64, u32)>,
}

impl Mover {
    /// Steps for `door`'s tasks.
    pub(super) fn new(door: Door) -> Mover {
        Mover { door, step: None }
    }
}

impl State {
    /// Hands the due steps to the engine; those it answers at once go back
    /// to the door at once, the others when their result comes.
    pub(super) fn run_moves(&mut self) {
        let Some(mover) = self.mover.as_mut() else {
            return;
        };
        while mover.step.is_none() {
            // Nothing due: one atomic load, no clock read, no lock.
            let Some(due) = mover.door.next_move_due_ms() else {
                return;
            };
            let now = clock::wall_ms();
            if due > now {
                return;
            }
            let Some(step) = mover.door.next_move(now) else {
                return;
            };
            let Route::Engine(op) = convert::route(step.request) else {
                // A REDRIVE is engine work; nothing else is asked.
                return;
            };
            let ticket = self.next_ticket;
            self.next_ticket += 1;
            let t = self.engine_time;
            match self.engine.submit(ticket, op, t.now_ns, t.wall_ms) {
                Some(result) => {
                    mover
                        .door
                        .move_done(step.task, step.asked, &convert::to_reply(result));
                }
                None => mover.step = Some((ticket, step.task, step.asked)),
            }
        }
    }

    /// The result of `ticket`, if it is a move step's: true when it was.
    pub(super) fn move_result(&mut self, ticket: u64, result: OpResult) -> bool {
        let Some(mover) = self.mover.as_mut() else {
            return false;
        };
        match mover.step {
            Some((t, task, asked)) if t == ticket => {
                mover.step = None;
                mover
                    .door
                    .move_done(task, asked, &convert::to_reply(result));
                true
            }
            _ => false,
        }
    }

    /// How long until a move step is due, if one waits.
    pub(super) fn move_wait(&self) -> Option<Duration> {
        let mover = self.mover.as_ref()?;
        if mover.step.is_some() {
            // Its result wakes the shard.
            return None;
        }
        let due = mover.door.next_move_due_ms()?;
        Some(Duration::from_millis(due.saturating_sub(clock::wall_ms())))
    }
}
