//! Loom models of the message-move tasks the shards share: a cancel on one
//! shard racing the step another shard runs, and two starts racing on one source.
//! Run under `RUSTFLAGS="--cfg sluice_loom"` (every interleaving); as plain
//! tests otherwise.

use serde_json::json;
use sluice_protocol::{QueueName, Reply};

use super::tasks::{CancelError, NewTask};
use super::{SharedTasks, Starting};
use crate::door::names::Namespace;
use crate::door::{Door, DoorConfig};
use crate::sync::model;

// A thread of a model: loom's under `cfg(sluice_loom)`, std's otherwise
// (this file is test code: the door's own code starts no thread).
#[cfg(sluice_loom)]
use loom::thread::spawn;
#[cfg(not(sluice_loom))]
use std::thread::spawn;

const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:dlq";

fn new_task(to_move: u64) -> NewTask {
    NewTask {
        source_arn: ARN.into(),
        destination_arn: None,
        source: QueueName::new("dlq").unwrap(),
        destination: None,
        rate: None,
        to_move,
    }
}

#[test]
fn loom_a_cancel_racing_a_step_ends_in_one_consistent_state() {
    model(|| {
        let door = Door::new(DoorConfig::default());
        door.inner
            .tasks
            .with(|t| t.start(new_task(4), "h".into(), 0));
        let runner = {
            let door = door.clone();
            spawn(move || match door.next_move(0) {
                Some(step) => {
                    let all = Reply::Redrive {
                        moved: u64::from(step.asked),
                        stayed: 0,
                    };
                    door.move_done(step.task, step.asked, &all);
                    true
                }
                None => false,
            })
        };
        let cancelled = door.inner.tasks.with(|t| t.cancel("h"));
        let ran = runner.join().unwrap();
        let entry = door.inner.tasks.with(|t| t.list(ARN, 1)).remove(0);
        let moved = entry["ApproximateNumberOfMessagesMoved"].as_u64().unwrap();
        match (cancelled, ran) {
            // Cancelled before the step was taken: nothing moved.
            (Ok(0), false) => assert_eq!((entry["Status"].clone(), moved), (json!("CANCELLED"), 0)),
            // Cancelled while the step was with the engine: its result counts.
            (Ok(0), true) => assert_eq!((entry["Status"].clone(), moved), (json!("CANCELLED"), 4)),
            // The step ended the task first.
            (Err(CancelError::NotRunning), true) => {
                assert_eq!((entry["Status"].clone(), moved), (json!("COMPLETED"), 4));
            }
            other => panic!("{other:?}: {entry}"),
        }
        assert!(
            door.next_move(u64::MAX).is_none(),
            "a task that is over takes no step"
        );
        assert_eq!(door.next_move_due_ms(), None);
    });
}

#[test]
fn loom_two_starts_on_one_source_start_one_task() {
    model(|| {
        let tasks = SharedTasks::default();
        let starting = |tasks: &SharedTasks| {
            Box::new(Starting {
                tasks: tasks.clone(),
                new: new_task(3),
                ns: Namespace::new("000000000000", "us-east-1", "000000000000", "us-east-1"),
                host: "http://localhost".into(),
            })
        };
        let found = json!({ "queueUrls": ["http://localhost/000000000000/a"] });
        let other = {
            let (s, found) = (starting(&tasks), found.clone());
            spawn(move || s.begin(&found, 1).is_ok())
        };
        let here = starting(&tasks).begin(&found, 2).is_ok();
        let there = other.join().unwrap();
        assert!(here ^ there, "exactly one start wins: {here} {there}");
        assert_eq!(tasks.with(|t| t.list(ARN, 10)).len(), 1);
    });
}
