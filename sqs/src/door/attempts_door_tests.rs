//! `ReceiveRequestAttemptId` through the door: a retried receive on a FIFO
//! queue gets the same messages, leased again, while it fits cleanly.

use bytes::Bytes;
use serde_json::Value;
use sluice_protocol::{
    ErrorCode, MessageAttributes, MessageId, QueueAttributes, QueueInfo, QueueName, QueueStats,
    Receipt, ReceivedBatch, ReceivedMessage, Reply, Request,
};

use super::tests::{assert_error, done, engine, json, req};
use super::{Call, Door, DoorConfig, Step};

const FIFO_URL: &str = "http://localhost:9324/000000000000/ledger.fifo";

fn call(door: &Door, action: &str, body: &str, now_ms: u64) -> (Call, Step) {
    door.call(&req(Some(&format!("AmazonSQS.{action}")), body), now_ms)
}

fn receive_body(attempt: &str, extra: &str) -> String {
    format!(
        r#"{{"QueueUrl":"{FIFO_URL}","MaxNumberOfMessages":10,"ReceiveRequestAttemptId":"{attempt}"{extra}}}"#
    )
}

fn receipt(slot: u32, delivery: u64) -> Receipt {
    Receipt {
        slot,
        delivery,
        ..Receipt::default()
    }
}

fn delivered(receipts: &[Receipt]) -> Reply {
    let messages: Vec<ReceivedMessage> = receipts
        .iter()
        .map(|&receipt| ReceivedMessage {
            id: MessageId(u128::from(receipt.slot)),
            receipt,
            receive_count: 1,
            sent_at_ms: 1_000,
            first_received_delta_ms: 2,
            attributes: MessageAttributes::new(),
            body: Bytes::from(format!("m{}", receipt.slot)),
            group: None,
        })
        .collect();
    Reply::Receive {
        messages: ReceivedBatch::from_messages(messages.iter().map(ReceivedMessage::as_view))
            .unwrap(),
    }
}

fn queue_info(visibility_ms: u32) -> Reply {
    Reply::GetQueue(Box::new(QueueInfo {
        queue: QueueName::from_static("ledger.fifo"),
        attributes: QueueAttributes {
            visibility_timeout: sluice_protocol::Millis::new(visibility_ms),
            ..QueueAttributes::default()
        },
        stats: QueueStats::default(),
        times: None,
    }))
}

fn handles(v: &Value) -> Vec<String> {
    v["Messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| m["ReceiptHandle"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A first receive with attempt id `attempt` and no visibility timeout of
/// its own: the door learns the queue's, then receives `receipts`.
fn first_receive(door: &Door, attempt: &str, receipts: &[Receipt], now_ms: u64) -> Value {
    let (mut c, s) = call(door, "ReceiveMessage", &receive_body(attempt, ""), now_ms);
    let Request::GetQueue { queue } = engine(s) else {
        panic!("the queue's visibility timeout first")
    };
    assert_eq!(queue.as_str(), "ledger.fifo");
    let Request::Receive(r) = engine(c.resume(queue_info(45_000), now_ms)) else {
        panic!("then the receive")
    };
    assert_eq!(r.visibility_timeout_ms, Some(45_000));
    assert_eq!(r.max_messages, 10);
    json(&done(c.resume(delivered(receipts), now_ms)))
}

#[test]
fn a_retried_receive_gets_the_same_messages_leased_again() {
    let door = Door::new(DoorConfig::default());
    let first = [receipt(1, 1), receipt(2, 1)];
    let b1 = first_receive(&door, "try-1", &first, 1_000);
    assert_eq!(handles(&b1).len(), 2);

    let (mut c, s) = call(&door, "ReceiveMessage", &receive_body("try-1", ""), 61_000);
    let Request::ChangeVisibility(cv) = engine(s) else {
        panic!("a retry leases the same messages again")
    };
    assert_eq!(cv.queue.as_str(), "ledger.fifo");
    let asked: Vec<(Receipt, u32)> = cv
        .entries
        .iter()
        .map(|e| (e.receipt, e.visibility_timeout_ms))
        .collect();
    assert_eq!(asked, vec![(first[0], 45_000), (first[1], 45_000)]);
    let b2 = json(&done(c.resume(
        Reply::ChangeVisibility {
            results: vec![Ok(()), Ok(())],
        },
        61_000,
    )));
    assert_eq!(b2, b1, "the same messages and receipt handles");
}

#[test]
fn a_retry_that_does_not_fit_cleanly_receives_afresh() {
    let door = Door::new(DoorConfig::default());
    first_receive(&door, "t", &[receipt(1, 1), receipt(2, 1)], 0);
    let (mut c, s) = call(&door, "ReceiveMessage", &receive_body("t", ""), 5);
    assert!(matches!(engine(s), Request::ChangeVisibility(_)));
    // One of them was leased again by another receive after its lease ran
    // out: the retry is a new receive, for the same visibility timeout.
    let Request::Receive(r) = engine(c.resume(
        Reply::ChangeVisibility {
            results: vec![Ok(()), Err(ErrorCode::StaleReceipt)],
        },
        5,
    )) else {
        panic!("a fresh receive")
    };
    assert_eq!(r.visibility_timeout_ms, Some(45_000));
    let b = json(&done(c.resume(delivered(&[receipt(3, 1)]), 5)));
    assert_eq!(handles(&b), vec![receipt(3, 1).to_hex()]);
    // That new receive is what the id retries now.
    let (_, s) = call(&door, "ReceiveMessage", &receive_body("t", ""), 6);
    let Request::ChangeVisibility(cv) = engine(s) else {
        panic!()
    };
    assert_eq!(cv.entries.len(), 1);
    assert_eq!(cv.entries[0].receipt, receipt(3, 1));
}

#[test]
fn a_change_through_the_door_or_the_end_of_the_window_ends_the_retry() {
    let door = Door::new(DoorConfig::default());
    first_receive(&door, "d", &[receipt(1, 1)], 0);
    first_receive(&door, "v", &[receipt(2, 1)], 0);
    first_receive(&door, "w", &[receipt(3, 1)], 0);
    let del = format!(
        r#"{{"QueueUrl":"{FIFO_URL}","ReceiptHandle":"{}"}}"#,
        receipt(1, 1).to_hex()
    );
    assert!(matches!(
        engine(call(&door, "DeleteMessage", &del, 1).1),
        Request::Delete(_)
    ));
    let vis = format!(
        r#"{{"QueueUrl":"{FIFO_URL}","ReceiptHandle":"{}","VisibilityTimeout":9}}"#,
        receipt(2, 1).to_hex()
    );
    assert!(matches!(
        engine(call(&door, "ChangeMessageVisibility", &vis, 1).1),
        Request::ChangeVisibility(_)
    ));
    for id in ["d", "v"] {
        let (_, s) = call(&door, "ReceiveMessage", &receive_body(id, ""), 2);
        assert!(
            matches!(engine(s), Request::GetQueue { .. }),
            "{id}: a receive afresh"
        );
    }
    // Five minutes on, "w" is forgotten too.
    let (_, s) = call(&door, "ReceiveMessage", &receive_body("w", ""), 300_000);
    assert!(matches!(engine(s), Request::GetQueue { .. }));
}

#[test]
fn attempt_ids_are_checked_and_act_on_fifo_queues_only() {
    let door = Door::new(DoorConfig::default());
    // With a visibility timeout of its own, the receive goes at once.
    let (mut c, s) = call(
        &door,
        "ReceiveMessage",
        &receive_body("x", r#","VisibilityTimeout":7"#),
        0,
    );
    let Request::Receive(r) = engine(s) else {
        panic!()
    };
    assert_eq!(r.visibility_timeout_ms, Some(7_000));
    done(c.resume(delivered(&[receipt(4, 1)]), 0));
    let (_, s) = call(&door, "ReceiveMessage", &receive_body("x", ""), 1);
    let Request::ChangeVisibility(cv) = engine(s) else {
        panic!()
    };
    assert_eq!(cv.entries[0].visibility_timeout_ms, 7_000);
    // A receive that returned nothing is not remembered.
    let (mut c, s) = call(
        &door,
        "ReceiveMessage",
        &receive_body("e", r#","VisibilityTimeout":7"#),
        0,
    );
    engine(s);
    assert_eq!(
        json(&done(c.resume(delivered(&[]), 0))),
        serde_json::json!({})
    );
    let (_, s) = call(
        &door,
        "ReceiveMessage",
        &receive_body("e", r#","VisibilityTimeout":7"#),
        1,
    );
    assert!(matches!(engine(s), Request::Receive(_)));
    // A standard queue ignores it, as SQS does.
    let std =
        r#"{"QueueUrl":"http://localhost:9324/000000000000/orders","ReceiveRequestAttemptId":"x"}"#;
    for _ in 0..2 {
        assert!(matches!(
            engine(call(&door, "ReceiveMessage", std, 2).1),
            Request::Receive(_)
        ));
    }
    for bad in ["", "a b", "é", &"z".repeat(129)] {
        let body = serde_json::json!({ "QueueUrl": FIFO_URL, "ReceiveRequestAttemptId": bad });
        assert_error(
            &done(call(&door, "ReceiveMessage", &body.to_string(), 0).1),
            "InvalidParameterValue",
            400,
        );
    }
    // Not a string: the wire's type error, as for any member.
    let body = serde_json::json!({ "QueueUrl": FIFO_URL, "ReceiveRequestAttemptId": 5 });
    assert_error(
        &done(call(&door, "ReceiveMessage", &body.to_string(), 0).1),
        "SerializationException",
        400,
    );
}

#[test]
fn engine_errors_and_wrong_replies_end_an_attempt_with_an_error() {
    let door = Door::new(DoorConfig::default());
    let (mut c, s) = call(&door, "ReceiveMessage", &receive_body("q", ""), 0);
    engine(s);
    let gone = Reply::Error(sluice_protocol::WireError {
        code: ErrorCode::QueueNotFound,
        message: "no such queue".into(),
    });
    assert_error(&done(c.resume(gone, 0)), "QueueDoesNotExist", 400);
    let (mut c, s) = call(&door, "ReceiveMessage", &receive_body("q", ""), 0);
    engine(s);
    let r = done(c.resume(Reply::DeleteQueue, 0));
    assert_eq!(r.status, 500);
}
