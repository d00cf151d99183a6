//! The three message-move actions through the door, with the engine's
//! replies written by hand, and the steps the server runs.

use bytes::Bytes;
use serde_json::{Value, json};
use sluice_protocol::{
    ErrorCode, QueueAttributes, QueueInfo, QueueName, QueueStats, Reply, Request, WireError,
};

use crate::door::tests::{done, engine};
use crate::door::{Door, DoorConfig, Response, Step};
use crate::http;

const DLQ_ARN: &str = "arn:aws:sqs:us-east-1:000000000000:dlq";

fn req(action: &str, body: &Value) -> http::Request {
    http::RequestParts {
        method: "POST".to_owned(),
        path: "/".to_owned(),
        query: String::new(),
        headers: vec![
            ("host".to_owned(), "localhost:9324".to_owned()),
            ("x-amz-target".to_owned(), format!("AmazonSQS.{action}")),
        ],
        body: Bytes::from(body.to_string()),
        keep_alive: true,
    }
    .into()
}

fn body(r: &Response) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn error(r: &Response) -> String {
    body(r)["__type"]
        .as_str()
        .unwrap()
        .rsplit('#')
        .next()
        .unwrap()
        .to_owned()
}

fn info(name: &str, dlq: Option<&str>, visible: u64) -> Reply {
    Reply::GetQueue(Box::new(QueueInfo {
        queue: QueueName::new(name).unwrap(),
        attributes: QueueAttributes {
            redrive: dlq.map(|d| sluice_protocol::RedrivePolicy {
                dead_letter_queue: d.to_owned(),
                max_receives: 3,
            }),
            ..QueueAttributes::default()
        },
        stats: QueueStats {
            visible,
            ..QueueStats::default()
        },
        times: None,
    }))
}

fn missing() -> Reply {
    Reply::Error(WireError::new(ErrorCode::QueueNotFound, "gone"))
}

/// Runs a StartMessageMoveTask of `input` to its end: the source holds
/// `visible` messages, and `sources` are the other queues, each with the
/// dead-letter queue it names.
fn start(door: &Door, input: &Value, visible: u64, sources: &[(&str, Option<&str>)]) -> Response {
    let (mut c, s) = door.call(&req("StartMessageMoveTask", input), 1_000);
    let mut step = s;
    loop {
        let request = match step {
            Step::Done(r) => return r,
            Step::Engine(r) => r,
        };
        let reply = match request {
            Request::GetQueue { queue } => match queue.as_str() {
                "dlq" => info("dlq", None, visible),
                "dest" => info("dest", None, 0),
                other => match sources.iter().find(|(n, _)| *n == other) {
                    Some((n, d)) => info(n, *d, 0),
                    None => missing(),
                },
            },
            Request::ListQueues { .. } => Reply::ListQueues {
                queues: std::iter::once("dlq")
                    .chain(sources.iter().map(|(n, _)| *n))
                    .map(|n| QueueName::new(n).unwrap())
                    .collect(),
                more: None,
            },
            other => panic!("{other:?}"),
        };
        step = c.resume(reply, 1_000);
    }
}

#[test]
fn a_task_starts_on_a_dead_letter_queue_runs_as_redrives_and_is_listed() {
    let door = Door::new(DoorConfig::default());
    let r = start(
        &door,
        &json!({ "SourceArn": DLQ_ARN }),
        3,
        &[("a", Some("dlq"))],
    );
    assert_eq!(r.status, 200, "{r:?}");
    let handle = body(&r)["TaskHandle"].as_str().unwrap().to_owned();
    assert_eq!(door.next_move_due_ms(), Some(950));
    let step = door.next_move(1_000).unwrap();
    match &step.request {
        Request::Redrive {
            queue,
            max_messages,
            to,
        } => {
            assert_eq!((queue.as_str(), *max_messages, to), ("dlq", 3, &None));
        }
        other => panic!("{other:?}"),
    }
    assert!(door.next_move(1_000).is_none(), "one step at a time");
    // Listed while it runs, with its handle.
    let (mut c, s) = door.call(
        &req("ListMessageMoveTasks", &json!({ "SourceArn": DLQ_ARN })),
        1_001,
    );
    assert!(matches!(engine(s), Request::GetQueue { .. }));
    let list = body(&done(c.resume(info("dlq", None, 3), 1_001)));
    assert_eq!(list["Results"][0]["TaskHandle"], handle.as_str());
    assert_eq!(list["Results"][0]["Status"], "RUNNING");
    assert_eq!(list["Results"][0]["ApproximateNumberOfMessagesToMove"], 3);
    door.move_done(
        step.task,
        step.asked,
        &Reply::Redrive {
            moved: 3,
            stayed: 0,
        },
    );
    let (mut c, _) = door.call(
        &req("ListMessageMoveTasks", &json!({ "SourceArn": DLQ_ARN })),
        1_002,
    );
    let list = body(&done(c.resume(info("dlq", None, 0), 1_002)));
    assert_eq!(list["Results"][0]["Status"], "COMPLETED");
    assert_eq!(list["Results"][0]["ApproximateNumberOfMessagesMoved"], 3);
    assert_eq!(list["Results"][0]["StartedTimestamp"], 1_000);
    // Over: a cancel is refused.
    let (_, s) = door.call(
        &req("CancelMessageMoveTask", &json!({ "TaskHandle": handle })),
        1_003,
    );
    assert_eq!(error(&done(s)), "UnsupportedOperation");
}

#[test]
fn a_destination_is_checked_and_carried_to_the_steps() {
    let door = Door::new(DoorConfig::default());
    let input = json!({
        "SourceArn": DLQ_ARN,
        "DestinationArn": "arn:aws:sqs:us-east-1:000000000000:dest",
        "MaxNumberOfMessagesPerSecond": 2,
    });
    let r = start(&door, &input, 5, &[("a", Some("dlq"))]);
    assert_eq!(r.status, 200, "{r:?}");
    let step = door.next_move(1_000).unwrap();
    assert!(
        matches!(&step.request, Request::Redrive { max_messages: 1, to: Some(t), .. } if t.as_str() == "dest"),
        "{step:?}"
    );
    let missing_dest = json!({
        "SourceArn": DLQ_ARN,
        "DestinationArn": "arn:aws:sqs:us-east-1:000000000000:nowhere",
    });
    let r = start(&door, &missing_dest, 5, &[("a", Some("dlq"))]);
    assert_eq!(error(&r), "ResourceNotFoundException");
    assert_eq!(r.status, 404);
}

#[test]
fn a_queue_no_queue_names_or_one_missing_is_refused() {
    let door = Door::new(DoorConfig::default());
    let r = start(
        &door,
        &json!({ "SourceArn": DLQ_ARN }),
        3,
        &[("a", Some("other")), ("b", None)],
    );
    assert_eq!(error(&r), "InvalidParameterValue");
    assert!(
        body(&r)["message"]
            .as_str()
            .unwrap()
            .contains("must be configured as a Dead Letter Queue")
    );
    let nowhere = json!({ "SourceArn": "arn:aws:sqs:us-east-1:000000000000:nowhere" });
    let (mut c, s) = door.call(&req("StartMessageMoveTask", &nowhere), 1);
    assert!(matches!(engine(s), Request::GetQueue { .. }));
    let r = done(c.resume(missing(), 1));
    assert_eq!(error(&r), "ResourceNotFoundException");
    assert!(door.next_move(u64::MAX).is_none());
}

#[test]
fn one_task_runs_per_source() {
    let door = Door::new(DoorConfig::default());
    let input = json!({ "SourceArn": DLQ_ARN, "MaxNumberOfMessagesPerSecond": 1 });
    assert_eq!(start(&door, &input, 9, &[("a", Some("dlq"))]).status, 200);
    let again = start(&door, &input, 9, &[("a", Some("dlq"))]);
    assert_eq!(error(&again), "UnsupportedOperation");
}

#[test]
fn cancel_answers_the_count_moved_and_stops_the_steps() {
    let door = Door::new(DoorConfig::default());
    let input = json!({ "SourceArn": DLQ_ARN, "MaxNumberOfMessagesPerSecond": 1 });
    let r = start(&door, &input, 9, &[("a", Some("dlq"))]);
    let handle = body(&r)["TaskHandle"].as_str().unwrap().to_owned();
    let step = door.next_move(1_000).unwrap();
    door.move_done(
        step.task,
        step.asked,
        &Reply::Redrive {
            moved: 1,
            stayed: 0,
        },
    );
    let (_, s) = door.call(
        &req("CancelMessageMoveTask", &json!({ "TaskHandle": handle })),
        1_500,
    );
    let r = done(s);
    assert_eq!(body(&r), json!({ "ApproximateNumberOfMessagesMoved": 1 }));
    assert!(door.next_move(100_000).is_none());
    assert_eq!(door.next_move_due_ms(), None);
    let (_, s) = door.call(
        &req(
            "CancelMessageMoveTask",
            &json!({ "TaskHandle": "sluice-move-nope" }),
        ),
        1_500,
    );
    assert_eq!(error(&done(s)), "ResourceNotFoundException");
}

#[test]
fn bad_input_is_refused_before_the_engine_is_asked() {
    let door = Door::new(DoorConfig::default());
    let cases = [
        ("StartMessageMoveTask", json!({}), "MissingParameter"),
        (
            "StartMessageMoveTask",
            json!({ "SourceArn": "dlq" }),
            "InvalidParameterValue",
        ),
        (
            "StartMessageMoveTask",
            json!({ "SourceArn": 5 }),
            "SerializationException",
        ),
        (
            "StartMessageMoveTask",
            json!({ "SourceArn": DLQ_ARN, "MaxNumberOfMessagesPerSecond": 0 }),
            "InvalidParameterValue",
        ),
        (
            "StartMessageMoveTask",
            json!({ "SourceArn": DLQ_ARN, "MaxNumberOfMessagesPerSecond": 501 }),
            "InvalidParameterValue",
        ),
        (
            "StartMessageMoveTask",
            json!({ "SourceArn": DLQ_ARN, "DestinationArn": DLQ_ARN }),
            "InvalidParameterValue",
        ),
        (
            "StartMessageMoveTask",
            json!({ "SourceArn": DLQ_ARN, "DestinationArn": "arn:aws:sns:us-east-1:1:t" }),
            "InvalidParameterValue",
        ),
        ("ListMessageMoveTasks", json!({}), "MissingParameter"),
        (
            "ListMessageMoveTasks",
            json!({ "SourceArn": DLQ_ARN, "MaxResults": 11 }),
            "InvalidParameterValue",
        ),
        ("CancelMessageMoveTask", json!({}), "MissingParameter"),
    ];
    for (action, input, want) in cases {
        let (_, s) = door.call(&req(action, &input), 1);
        assert_eq!(error(&done(s)), want, "{action} {input}");
    }
}
