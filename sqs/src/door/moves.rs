//! StartMessageMoveTask, ListMessageMoveTasks and CancelMessageMoveTask:
//! dead letters moved back, to their source queues or to a destination,
//! by a task that outlives the request that started it. The task is a
//! series of the engine's REDRIVEs (the native door's mechanism), paced
//! and followed in [`tasks`]; the server runs its steps.
//!
//! Starting one asks the engine, one request at a time: the source's GET
//! (it must exist: `ResourceNotFoundException`; its visible messages are
//! the task's to move), the destination's GET if one is named, then
//! whether any queue names the source as its dead-letter queue (as
//! ListDeadLetterSourceQueues does, stopping at the first): if none,
//! `InvalidParameterValue`, as SQS answers.

#[cfg(test)]
mod loom_models;
pub(crate) mod tasks;
#[cfg(test)]
mod tests;

use std::sync::PoisonError;

use serde_json::{Value, json};
use sluice_protocol::{QueueName, Reply, Request};

use super::errors::SqsError;
use super::names::Namespace;
use super::sources::{self, Sources};
use super::wire::Input;
use super::{Ctx, Started, uuid_text};
use crate::sync::{Arc, AtomicU64, Mutex, MutexGuard, Ordering};
use tasks::{CancelError, MoveTasks, NewTask};

/// The door's tasks, shared by every shard's calls.
pub(crate) type SharedTasks = Arc<Moves>;

/// The tasks behind their lock, and when the next step is due, readable
/// without it: a shard's loop looks at that every turn, and takes the lock
/// only when a step is due.
#[derive(Debug)]
pub(crate) struct Moves {
    tasks: Mutex<MoveTasks>,
    /// The next step's due time (Unix ms); `u64::MAX`: none. Written with
    /// the lock held, after every change.
    due_ms: AtomicU64,
}

impl Default for Moves {
    fn default() -> Self {
        Moves {
            tasks: Mutex::new(MoveTasks::default()),
            due_ms: AtomicU64::new(u64::MAX),
        }
    }
}

impl Moves {
    /// Runs `f` on the tasks under their lock, then publishes the next due
    /// time. (A panic elsewhere while holding the lock leaves the tasks as
    /// they were: each change is one step.)
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut MoveTasks) -> R) -> R {
        let mut tasks: MutexGuard<'_, MoveTasks> =
            self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        let r = f(&mut tasks);
        let due = tasks.next_due_ms().unwrap_or(u64::MAX);
        self.due_ms.store(due, Ordering::Release);
        r
    }

    /// When the next step is due, as last published.
    pub(crate) fn due_ms(&self) -> Option<u64> {
        let due = self.due_ms.load(Ordering::Acquire);
        (due != u64::MAX).then_some(due)
    }
}

/// The highest `MaxNumberOfMessagesPerSecond`, as in SQS.
const RATE_MAX: i64 = 500;

fn not_found(param: &str) -> SqsError {
    SqsError::new(
        "ResourceNotFoundException",
        format!("The resource that you specified for the {param} parameter doesn't exist."),
    )
}

/// The engine queue of a queue ARN given as `param`.
fn queue_of(ctx: &Ctx<'_>, arn: &str, param: &str) -> Result<QueueName, SqsError> {
    ctx.queue_of_arn(arn).ok_or_else(|| {
        SqsError::invalid(format!(
            "Value {arn} for parameter {param} is invalid. Reason: it is not the ARN of an SQS queue."
        ))
    })
}

/// A call in progress.
#[derive(Debug)]
pub(crate) enum Pending {
    /// StartMessageMoveTask: the source's GET.
    Source(Box<Starting>),
    /// StartMessageMoveTask: the destination's GET.
    Destination(Box<Starting>),
    /// StartMessageMoveTask: whether a queue names the source.
    Sources(Box<Starting>, Box<Sources>),
    /// ListMessageMoveTasks: the source's GET.
    List {
        tasks: SharedTasks,
        source_arn: String,
        max: usize,
    },
}

/// What a StartMessageMoveTask has learnt so far.
#[derive(Debug)]
pub(crate) struct Starting {
    tasks: SharedTasks,
    new: NewTask,
    ns: Namespace,
    host: String,
}

/// Starts one of the three actions.
pub(crate) fn start(
    ctx: &Ctx<'_>,
    action: super::Action,
    input: &Input,
) -> Result<Started, SqsError> {
    match action {
        super::Action::StartMessageMoveTask => start_task(ctx, input),
        super::Action::ListMessageMoveTasks => {
            let source_arn = input.str("SourceArn")?;
            let source = queue_of(ctx, source_arn, "SourceArn")?;
            let max = input.opt_int_in("MaxResults", 1, 10)?.unwrap_or(1) as usize;
            let pending = Pending::List {
                tasks: ctx.tasks.clone(),
                source_arn: source_arn.to_owned(),
                max,
            };
            Ok(Started::Engine(
                super::Pending::Moves(pending),
                Request::GetQueue { queue: source },
            ))
        }
        _ => {
            let handle = input.str("TaskHandle")?;
            match ctx.tasks.with(|t| t.cancel(handle)) {
                Ok(moved) => Ok(Started::Reply(
                    json!({ "ApproximateNumberOfMessagesMoved": moved }),
                    0,
                )),
                Err(CancelError::Unknown) => Err(not_found("TaskHandle")),
                Err(CancelError::NotRunning) => Err(SqsError::new(
                    "UnsupportedOperation",
                    "Only a message movement task whose status is RUNNING can be cancelled.",
                )),
            }
        }
    }
}

fn start_task(ctx: &Ctx<'_>, input: &Input) -> Result<Started, SqsError> {
    let source_arn = input.str("SourceArn")?;
    let source = queue_of(ctx, source_arn, "SourceArn")?;
    let destination_arn = input.opt_str("DestinationArn")?;
    let destination = destination_arn
        .map(|arn| queue_of(ctx, arn, "DestinationArn"))
        .transpose()?;
    if destination.as_ref() == Some(&source) {
        return Err(SqsError::invalid(
            "The DestinationArn must name another queue than the SourceArn.",
        ));
    }
    let rate = input.opt_int_in("MaxNumberOfMessagesPerSecond", 1, RATE_MAX)?;
    let starting = Starting {
        tasks: ctx.tasks.clone(),
        new: NewTask {
            source_arn: source_arn.to_owned(),
            destination_arn: destination_arn.map(str::to_owned),
            source: source.clone(),
            destination,
            rate,
            to_move: 0,
        },
        ns: ctx.ns.clone(),
        host: ctx.host(),
    };
    Ok(Started::Engine(
        super::Pending::Moves(Pending::Source(Box::new(starting))),
        Request::GetQueue { queue: source },
    ))
}

/// What a step of a call gives.
#[derive(Debug)]
pub(crate) enum Next {
    Engine(Pending, Request),
    Done(Value),
}

impl Pending {
    /// The engine's `reply` to the last request, at `now_ms`.
    pub(crate) fn step(self, reply: Reply, now_ms: u64) -> Result<Next, SqsError> {
        match (self, reply) {
            (Pending::Source(_) | Pending::List { .. }, Reply::Error(_)) => {
                Err(not_found("SourceArn"))
            }
            (Pending::Destination(_), Reply::Error(_)) => Err(not_found("DestinationArn")),
            (Pending::Source(mut s), Reply::GetQueue(info)) => {
                s.new.to_move = info.stats.visible;
                match s.new.destination.clone() {
                    Some(queue) => Ok(Next::Engine(
                        Pending::Destination(s),
                        Request::GetQueue { queue },
                    )),
                    None => Ok(s.check_sources()),
                }
            }
            (Pending::Destination(s), Reply::GetQueue(_)) => Ok(s.check_sources()),
            (Pending::Sources(s, mut sources), reply) => match sources.step(reply)? {
                sources::Next::Engine(request) => {
                    Ok(Next::Engine(Pending::Sources(s, sources), request))
                }
                sources::Next::Done(found) => s.begin(&found, now_ms).map(Next::Done),
            },
            (
                Pending::List {
                    tasks,
                    source_arn,
                    max,
                },
                Reply::GetQueue(_),
            ) => Ok(Next::Done(tasks::results(
                tasks.with(|t| t.list(&source_arn, max)),
            ))),
            (_, other) => Err(SqsError::new(
                "InternalError",
                format!("unexpected engine reply {:?}", other.opcode()),
            )),
        }
    }
}

impl Starting {
    /// Whether a queue names the source: ListDeadLetterSourceQueues's
    /// walk, stopping at the first (the source's GET is done).
    fn check_sources(self: Box<Self>) -> Next {
        let (sources, request) = Sources::of(
            self.ns.clone(),
            self.host.clone(),
            self.new.source.clone(),
            Some(1),
            true,
        );
        Next::Engine(Pending::Sources(self, Box::new(sources)), request)
    }

    /// The task begins, if the source is a dead-letter queue (`found`,
    /// ListDeadLetterSourceQueues's reply, names a source) and has no
    /// task running.
    fn begin(self: Box<Self>, found: &Value, now_ms: u64) -> Result<Value, SqsError> {
        let names_it = found["queueUrls"].as_array().is_some_and(|a| !a.is_empty());
        if !names_it {
            return Err(SqsError::invalid(
                "Source queue must be configured as a Dead Letter Queue.",
            ));
        }
        let Starting { tasks, new, .. } = *self;
        tasks.with(|tasks| {
            if tasks.active_on(&new.source_arn) {
                return Err(SqsError::new(
                    "UnsupportedOperation",
                    "There is already a message movement task running on this source queue.",
                ));
            }
            let handle = handle(&new.source_arn, now_ms, tasks.next_id());
            tasks.start(new, handle.clone(), now_ms);
            Ok(json!({ "TaskHandle": handle }))
        })
    }
}

/// A task handle: opaque to the caller, distinct for every task.
fn handle(source_arn: &str, now_ms: u64, n: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in source_arn.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let id = uuid_text((u128::from(h ^ now_ms) << 64) | u128::from(n)).to_string();
    format!("sluice-move-{id}")
}
