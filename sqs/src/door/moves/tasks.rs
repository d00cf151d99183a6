//! The message-move tasks themselves: what each one is, how far it got,
//! and when its next REDRIVE is due. No engine and no clock of its own:
//! the door starts, lists and cancels tasks, the server asks for the next
//! step ([`MoveTasks::next_step`]) and hands its reply back
//! ([`MoveTasks::step_done`]), with the wall clock as a parameter.
//!
//! # Pacing
//!
//! With `MaxNumberOfMessagesPerSecond` R, a task has moved at most
//! `1 + R × t` messages `t` seconds after it started (`R` a second, from
//! the first message on), in steps at least [`STEP_GAP_MS`] apart; without
//! one, each step moves up to [`STEP_MAX`] messages and the next follows
//! the reply at once.
//!
//! # The end of a task
//!
//! A task moves the messages visible in its source when it started
//! (`ApproximateNumberOfMessagesToMove`), no more, so that a dead-letter
//! queue that keeps filling does not keep a task running. It is
//! `COMPLETED` once it moved them, or when a step finds no more visible
//! messages (some were received or deleted meanwhile); `FAILED` when a
//! message cannot move (its source queue, or the destination, is gone or
//! full: it stays in the dead-letter queue, first in line) or a queue is
//! gone; `CANCELLED` by CancelMessageMoveTask (`CANCELLING` until the
//! step in flight is answered).

use std::collections::VecDeque;

use serde_json::{Map, Value, json};
use sluice_protocol::{QueueName, Reply, Request};

/// The most messages one step (one REDRIVE) moves.
pub(crate) const STEP_MAX: u32 = 1024;

/// The least time between the steps of a paced task.
pub(crate) const STEP_GAP_MS: u64 = 50;

/// Tasks kept per source queue (ListMessageMoveTasks shows up to 10).
const KEPT_PER_SOURCE: usize = 10;

/// A task's status, as SQS names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Running,
    Cancelling,
    Cancelled,
    Completed,
    Failed,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Running => "RUNNING",
            Status::Cancelling => "CANCELLING",
            Status::Cancelled => "CANCELLED",
            Status::Completed => "COMPLETED",
            Status::Failed => "FAILED",
        }
    }

    /// Whether the task still moves messages (one per source at a time).
    pub(crate) fn active(self) -> bool {
        matches!(self, Status::Running | Status::Cancelling)
    }
}

/// What a new task is.
#[derive(Clone, Debug)]
pub(crate) struct NewTask {
    pub source_arn: String,
    pub destination_arn: Option<String>,
    /// The dead-letter queue's engine name.
    pub source: QueueName,
    /// The destination's engine name; `None`: each message's source.
    pub destination: Option<QueueName>,
    /// `MaxNumberOfMessagesPerSecond`.
    pub rate: Option<u32>,
    /// Visible messages in the source when it started.
    pub to_move: u64,
}

#[derive(Debug)]
struct Task {
    id: u64,
    handle: String,
    new: NewTask,
    status: Status,
    moved: u64,
    failure: Option<String>,
    started_ms: u64,
    /// A step is with the engine.
    in_flight: bool,
    /// When the last step was handed out.
    last_step_ms: u64,
}

/// One REDRIVE for the server to run: its reply goes back to the door's
/// `move_done` with `task` and `asked`.
#[derive(Debug)]
pub struct MoveStep {
    /// The task it belongs to.
    pub task: u64,
    /// How many messages it asks to move.
    pub asked: u32,
    /// The engine request.
    pub request: Request,
}

/// Why a task cannot be cancelled.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CancelError {
    /// No task has this handle.
    Unknown,
    /// The task is over.
    NotRunning,
}

/// Every message-move task the door knows, oldest first.
#[derive(Debug, Default)]
pub(crate) struct MoveTasks {
    tasks: VecDeque<Task>,
    next_id: u64,
}

impl Task {
    /// Messages this task may still move by `now_ms`, at most a step's.
    fn allowance(&self, now_ms: u64) -> u64 {
        let left = self.new.to_move.saturating_sub(self.moved);
        let paced = match self.new.rate {
            Some(r) => {
                let elapsed = now_ms.saturating_sub(self.started_ms);
                (1 + u64::from(r) * elapsed / 1000).saturating_sub(self.moved)
            }
            None => u64::MAX,
        };
        left.min(paced).min(u64::from(STEP_MAX))
    }

    /// When the next step is due (`None`: the task waits for nothing).
    fn due_ms(&self) -> Option<u64> {
        if self.status != Status::Running || self.in_flight {
            return None;
        }
        match self.new.rate {
            None => Some(self.last_step_ms),
            Some(r) => {
                // The time the next message is allowed: moved < 1 + r×t/1000.
                let r = u64::from(r.max(1));
                let next = self.started_ms + (self.moved * 1000).div_ceil(r);
                Some(next.max(self.last_step_ms + STEP_GAP_MS))
            }
        }
    }

    fn entry(&self) -> Value {
        let mut e = Map::new();
        if self.status == Status::Running {
            e.insert("TaskHandle".into(), self.handle.clone().into());
        }
        e.insert("Status".into(), self.status.name().into());
        e.insert("SourceArn".into(), self.new.source_arn.clone().into());
        if let Some(d) = &self.new.destination_arn {
            e.insert("DestinationArn".into(), d.clone().into());
        }
        if let Some(r) = self.new.rate {
            e.insert("MaxNumberOfMessagesPerSecond".into(), r.into());
        }
        e.insert("ApproximateNumberOfMessagesMoved".into(), self.moved.into());
        e.insert(
            "ApproximateNumberOfMessagesToMove".into(),
            self.new.to_move.into(),
        );
        if let Some(f) = &self.failure {
            e.insert("FailureReason".into(), f.clone().into());
        }
        e.insert("StartedTimestamp".into(), self.started_ms.into());
        Value::Object(e)
    }
}

impl MoveTasks {
    /// The id the next task gets (ids never repeat).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Whether `source_arn` has a task that still moves messages.
    pub(crate) fn active_on(&self, source_arn: &str) -> bool {
        self.tasks
            .iter()
            .any(|t| t.new.source_arn == source_arn && t.status.active())
    }

    /// Starts `new` at `now_ms` under `handle`; the caller checked that no
    /// task is active on its source. Older tasks of the source beyond the
    /// ten kept are forgotten.
    pub(crate) fn start(&mut self, new: NewTask, handle: String, now_ms: u64) {
        let id = self.next_id;
        self.next_id += 1;
        let done = new.to_move == 0;
        let source = new.source_arn.clone();
        self.tasks.push_back(Task {
            id,
            handle,
            new,
            status: if done {
                Status::Completed
            } else {
                Status::Running
            },
            moved: 0,
            failure: None,
            started_ms: now_ms,
            in_flight: false,
            // The first step is due at once.
            last_step_ms: now_ms.saturating_sub(STEP_GAP_MS),
        });
        let mut of_source = self
            .tasks
            .iter()
            .filter(|t| t.new.source_arn == source)
            .count();
        self.tasks.retain(|t| {
            let drop = of_source > KEPT_PER_SOURCE && t.new.source_arn == source;
            if drop {
                of_source -= 1;
            }
            !drop
        });
    }

    /// The entries of `source_arn`'s tasks, newest first, at most `max`.
    pub(crate) fn list(&self, source_arn: &str, max: usize) -> Vec<Value> {
        self.tasks
            .iter()
            .rev()
            .filter(|t| t.new.source_arn == source_arn)
            .take(max)
            .map(Task::entry)
            .collect()
    }

    /// Cancels the task `handle`: its messages moved so far.
    pub(crate) fn cancel(&mut self, handle: &str) -> Result<u64, CancelError> {
        let t = self
            .tasks
            .iter_mut()
            .find(|t| t.handle == handle)
            .ok_or(CancelError::Unknown)?;
        if t.status != Status::Running {
            return Err(CancelError::NotRunning);
        }
        t.status = if t.in_flight {
            Status::Cancelling
        } else {
            Status::Cancelled
        };
        Ok(t.moved)
    }

    /// The next due step at `now_ms`, marked in flight.
    pub fn next_step(&mut self, now_ms: u64) -> Option<MoveStep> {
        let t = self
            .tasks
            .iter_mut()
            .find(|t| t.due_ms().is_some_and(|d| d <= now_ms) && t.allowance(now_ms) > 0)?;
        t.in_flight = true;
        t.last_step_ms = now_ms;
        let max = u32::try_from(t.allowance(now_ms)).unwrap_or(STEP_MAX);
        Some(MoveStep {
            task: t.id,
            asked: max,
            request: Request::Redrive {
                queue: t.new.source.clone(),
                max_messages: max,
                to: t.new.destination.clone(),
            },
        })
    }

    /// When the next step is due, if any task waits for one.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.tasks.iter().filter_map(Task::due_ms).min()
    }

    /// The engine's `reply` to task `task`'s step of `asked` messages.
    pub fn step_done(&mut self, task: u64, asked: u32, reply: &Reply) {
        let Some(t) = self.tasks.iter_mut().find(|t| t.id == task) else {
            return;
        };
        t.in_flight = false;
        let cancelling = t.status == Status::Cancelling;
        match reply {
            Reply::Redrive { moved, stayed } => {
                t.moved += moved;
                if cancelling {
                    t.status = Status::Cancelled;
                } else if *stayed > 0 {
                    t.status = Status::Failed;
                    t.failure = Some(format!(
                        "{stayed} messages could not move: the queue they move to is gone or holds its maximum depth. They stay in the dead-letter queue."
                    ));
                } else if t.moved >= t.new.to_move || moved + stayed < u64::from(asked) {
                    t.status = Status::Completed;
                }
            }
            Reply::Error(e) => {
                t.status = if cancelling {
                    Status::Cancelled
                } else {
                    Status::Failed
                };
                t.failure = Some(format!("{}: {}", e.code, e.message));
            }
            other => {
                t.status = Status::Failed;
                t.failure = Some(format!("unexpected engine reply {:?}", other.opcode()));
            }
        }
    }
}

/// The JSON of a task list (ListMessageMoveTasks's reply).
pub(crate) fn results(entries: Vec<Value>) -> Value {
    json!({ "Results": entries })
}

#[cfg(test)]
mod tests {
    use sluice_protocol::{ErrorCode, WireError};

    use super::*;

    fn new(to_move: u64, rate: Option<u32>) -> NewTask {
        NewTask {
            source_arn: "arn:aws:sqs:us-east-1:000000000000:dlq".into(),
            destination_arn: None,
            source: QueueName::new("dlq").unwrap(),
            destination: None,
            rate,
            to_move,
        }
    }

    fn asked(step: &MoveStep) -> u32 {
        match &step.request {
            Request::Redrive { max_messages, .. } => *max_messages,
            other => panic!("{other:?}"),
        }
    }

    fn moved(n: u64) -> Reply {
        Reply::Redrive {
            moved: n,
            stayed: 0,
        }
    }

    #[test]
    fn a_paced_task_moves_no_faster_than_its_rate() {
        let mut m = MoveTasks::default();
        m.start(new(100, Some(10)), "h".into(), 1_000);
        // At the start: one message.
        let s = m.next_step(1_000).unwrap();
        assert_eq!(asked(&s), 1);
        assert!(m.next_step(1_000).is_none(), "one step in flight at a time");
        m.step_done(s.task, 1, &moved(1));
        // The next message is allowed 100 ms later (10 a second).
        assert_eq!(m.next_due_ms(), Some(1_100));
        assert!(m.next_step(1_099).is_none());
        let s = m.next_step(1_100).unwrap();
        assert_eq!(asked(&s), 1);
        m.step_done(s.task, 1, &moved(1));
        // Half a second on: 1 + 10 × 0.6 = 7 in all, 5 more.
        let s = m.next_step(1_600).unwrap();
        assert_eq!(asked(&s), 5);
        m.step_done(s.task, 5, &moved(5));
        // Over ten seconds, never more than 1 + 10 t.
        let mut total = 7;
        let mut now = 1_600;
        while now < 11_000 {
            now += 10;
            if let Some(s) = m.next_step(now) {
                let n = asked(&s);
                total += u64::from(n);
                assert!(total <= 1 + 10 * (now - 1_000) / 1000, "{total} at {now}");
                m.step_done(s.task, n, &moved(u64::from(n)));
            }
        }
        // All 100 by 10.9 s (1 + 10 × 9.9 = 100), and the task is over.
        assert_eq!(total, 100);
        let e = &m.list(&new(0, None).source_arn, 1)[0];
        assert_eq!(e["Status"], "COMPLETED");
    }

    #[test]
    fn an_unpaced_task_moves_in_full_steps_and_completes() {
        let mut m = MoveTasks::default();
        m.start(new(3000, None), "h".into(), 0);
        let mut steps = Vec::new();
        while let Some(s) = m.next_step(5) {
            let n = asked(&s);
            steps.push(n);
            m.step_done(s.task, n, &moved(u64::from(n)));
        }
        assert_eq!(steps, [1024, 1024, 952]);
        let e = &m.list("arn:aws:sqs:us-east-1:000000000000:dlq", 10)[0];
        assert_eq!(e["Status"], "COMPLETED");
        assert_eq!(e["ApproximateNumberOfMessagesMoved"], 3000);
        assert!(
            e.get("TaskHandle").is_none(),
            "only a running task shows it"
        );
        assert_eq!(m.next_due_ms(), None);
    }

    #[test]
    fn a_step_that_finds_fewer_messages_completes_the_task() {
        let mut m = MoveTasks::default();
        m.start(new(10, None), "h".into(), 0);
        let s = m.next_step(0).unwrap();
        m.step_done(s.task, 10, &moved(4));
        assert_eq!(
            m.list(&new(0, None).source_arn, 1)[0]["Status"],
            "COMPLETED"
        );
    }

    #[test]
    fn what_cannot_move_fails_the_task_and_errors_too() {
        let mut m = MoveTasks::default();
        m.start(new(10, None), "a".into(), 0);
        let s = m.next_step(0).unwrap();
        m.step_done(
            s.task,
            10,
            &Reply::Redrive {
                moved: 3,
                stayed: 2,
            },
        );
        let e = &m.list(&new(0, None).source_arn, 1)[0];
        assert_eq!(e["Status"], "FAILED");
        assert_eq!(e["ApproximateNumberOfMessagesMoved"], 3);
        assert!(e["FailureReason"].as_str().unwrap().contains("2 messages"));
        m.start(new(10, None), "b".into(), 0);
        let s = m.next_step(0).unwrap();
        m.step_done(
            s.task,
            10,
            &Reply::Error(WireError::new(ErrorCode::QueueNotFound, "dlq")),
        );
        let e = &m.list(&new(0, None).source_arn, 1)[0];
        assert_eq!(e["Status"], "FAILED");
        assert!(e["FailureReason"].as_str().unwrap().contains("dlq"));
    }

    #[test]
    fn cancel_stops_a_task_at_once_or_after_its_step() {
        let mut m = MoveTasks::default();
        m.start(new(10, Some(1)), "idle".into(), 0);
        assert_eq!(m.cancel("idle"), Ok(0));
        assert_eq!(m.cancel("idle"), Err(CancelError::NotRunning));
        assert_eq!(m.cancel("nope"), Err(CancelError::Unknown));
        assert!(m.next_step(10_000).is_none());
        m.start(new(10, None), "busy".into(), 0);
        let s = m.next_step(0).unwrap();
        assert_eq!(m.cancel("busy"), Ok(0));
        assert_eq!(
            m.list(&new(0, None).source_arn, 1)[0]["Status"],
            "CANCELLING"
        );
        m.step_done(s.task, 10, &moved(10));
        let e = &m.list(&new(0, None).source_arn, 1)[0];
        assert_eq!(e["Status"], "CANCELLED");
        assert_eq!(e["ApproximateNumberOfMessagesMoved"], 10);
    }

    #[test]
    fn one_active_task_per_source_and_ten_kept() {
        let mut m = MoveTasks::default();
        let arn = new(0, None).source_arn;
        m.start(new(5, None), "h0".into(), 0);
        assert!(m.active_on(&arn));
        m.cancel("h0").unwrap();
        assert!(!m.active_on(&arn));
        for i in 1..15 {
            // Nothing to move: completed at once.
            m.start(new(0, None), format!("h{i}"), i);
        }
        let all = m.list(&arn, 100);
        assert_eq!(all.len(), 10);
        assert_eq!(all[0]["StartedTimestamp"], 14, "newest first");
        assert_eq!(all[0]["Status"], "COMPLETED");
        assert_eq!(m.list(&arn, 1).len(), 1);
        assert!(
            m.list("arn:aws:sqs:us-east-1:000000000000:other", 10)
                .is_empty()
        );
    }
}
