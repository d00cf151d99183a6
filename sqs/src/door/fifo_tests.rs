//! The door's FIFO queues: created with the suffix and the attribute, their
//! attributes, their sends (group, deduplication id, no delay of their own)
//! and what a receive reports (group, deduplication id, sequence number).

use bytes::Bytes;
use sluice_protocol::{
    MessageAttributes, MessageGroupId, MessageId, QueueAttributes, QueueInfo, QueueKind, QueueName,
    QueueStats, Receipt, ReceivedBatch, ReceivedMessage, Reply, Request, SendOutcome,
};

use super::tests::{assert_error, call, done, engine, json};

const FIFO_URL: &str = "http://localhost:9324/000000000000/ledger.fifo";
const URL: &str = "http://localhost:9324/000000000000/orders";

#[test]
fn door_creates_a_fifo_queue_with_its_attributes() {
    let (_, s) = call(
        "CreateQueue",
        r#"{"QueueName":"ledger.fifo","Attributes":{"FifoQueue":"true",
        "ContentBasedDeduplication":"true","DeduplicationScope":"queue",
        "FifoThroughputLimit":"perQueue"}}"#,
    );
    let Request::CreateQueue(cq) = engine(s) else {
        panic!()
    };
    assert_eq!(cq.queue.as_str(), "ledger.fifo");
    assert_eq!(cq.attributes.kind, Some(QueueKind::Fifo));
    assert_eq!(cq.attributes.content_based_dedup, Some(true));
    for (body, err) in [
        // The values sluice does not serve, and FIFO attributes elsewhere.
        (
            r#"{"QueueName":"l.fifo","Attributes":{"FifoQueue":"true","DeduplicationScope":"messageGroup"}}"#,
            "InvalidAttributeValue",
        ),
        (
            r#"{"QueueName":"l.fifo","Attributes":{"FifoQueue":"true","FifoThroughputLimit":"perMessageGroupId"}}"#,
            "InvalidAttributeValue",
        ),
        (
            r#"{"QueueName":"l.fifo","Attributes":{"FifoQueue":"true","ContentBasedDeduplication":"maybe"}}"#,
            "InvalidAttributeValue",
        ),
        (
            r#"{"QueueName":"l","Attributes":{"ContentBasedDeduplication":"true"}}"#,
            "InvalidAttributeName",
        ),
        (
            r#"{"QueueName":"l.fifo","Attributes":{"FifoQueue":"false"}}"#,
            "InvalidParameterValue",
        ),
        (
            r#"{"QueueName":"a.fifo.fifo","Attributes":{"FifoQueue":"true"}}"#,
            "InvalidParameterValue",
        ),
    ] {
        assert_error(&done(call("CreateQueue", body).1), err, 400);
    }
    let long = format!(
        r#"{{"QueueName":"{}.fifo","Attributes":{{"FifoQueue":"true"}}}}"#,
        "a".repeat(76)
    );
    assert_error(
        &done(call("CreateQueue", &long).1),
        "InvalidParameterValue",
        400,
    );
    // The kind is set at creation only.
    let body = format!(r#"{{"QueueUrl":"{FIFO_URL}","Attributes":{{"FifoQueue":"true"}}}}"#);
    assert_error(
        &done(call("SetQueueAttributes", &body).1),
        "InvalidAttributeName",
        400,
    );
}

#[test]
fn door_reports_a_fifo_queue_s_attributes_and_a_standard_one_none() {
    for (kind, url) in [(QueueKind::Fifo, FIFO_URL), (QueueKind::Standard, URL)] {
        let body = format!(r#"{{"QueueUrl":"{url}","AttributeNames":["All"]}}"#);
        let (mut c, s) = call("GetQueueAttributes", &body);
        engine(s);
        let info = QueueInfo {
            queue: QueueName::from_static("q"),
            attributes: QueueAttributes {
                kind,
                content_based_dedup: kind == QueueKind::Fifo,
                ..QueueAttributes::default()
            },
            stats: QueueStats::default(),
            times: None,
        };
        let b = json(&done(c.resume(Reply::GetQueue(Box::new(info)), 1)));
        let a = &b["Attributes"];
        if kind == QueueKind::Fifo {
            assert_eq!(a["FifoQueue"], "true");
            assert_eq!(a["ContentBasedDeduplication"], "true");
            assert_eq!(a["DeduplicationScope"], "queue");
            assert_eq!(a["FifoThroughputLimit"], "perQueue");
        } else {
            assert!(a.get("FifoQueue").is_none(), "{a}");
            assert!(a.get("ContentBasedDeduplication").is_none(), "{a}");
        }
    }
}

#[test]
fn door_sends_to_a_fifo_queue_with_group_and_dedup_id() {
    let body = format!(
        r#"{{"QueueUrl":"{FIFO_URL}","MessageBody":"debit","MessageGroupId":"account-7",
        "MessageDeduplicationId":"txn-41"}}"#
    );
    let (mut c, s) = call("SendMessage", &body);
    let Request::Send(send) = engine(s) else {
        panic!()
    };
    assert_eq!(send.queue.as_str(), "ledger.fifo");
    let e = &send.entries.to_entries()[0];
    assert_eq!(
        e.group.as_ref().map(MessageGroupId::as_str),
        Some("account-7")
    );
    assert_eq!(e.dedup_key.as_deref(), Some(&b"txn-41"[..]));
    assert_eq!(e.attributes.get("AWS.DeduplicationId"), Some("txn-41"));
    assert_eq!(e.delay, None);
    let id = MessageId((7u128 << 64) | (3 << 48) | 1234);
    let b = json(&done(c.resume(
        Reply::Send {
            results: vec![Ok(SendOutcome {
                id,
                duplicate: false,
            })],
        },
        1,
    )));
    assert_eq!(b["SequenceNumber"], ((3u64 << 48) | 1234).to_string());
    assert!(b.get("MD5OfMessageAttributes").is_none(), "{b}");
    // A standard queue's reply has none.
    let body = format!(r#"{{"QueueUrl":"{URL}","MessageBody":"x","MessageGroupId":"g"}}"#);
    let (mut c, s) = call("SendMessage", &body);
    let Request::Send(send) = engine(s) else {
        panic!()
    };
    assert!(send.entries.to_entries()[0].group.is_some(), "carried");
    let b = json(&done(c.resume(
        Reply::Send {
            results: vec![Ok(SendOutcome {
                id,
                duplicate: false,
            })],
        },
        1,
    )));
    assert!(b.get("SequenceNumber").is_none());
}

#[test]
fn door_refuses_what_a_fifo_send_must_not_carry() {
    let bad = [
        (FIFO_URL, r#""MessageBody":"x""#, "MissingParameter"),
        (
            FIFO_URL,
            r#""MessageBody":"x","MessageGroupId":"g","DelaySeconds":5"#,
            "InvalidParameterValue",
        ),
        (
            FIFO_URL,
            r#""MessageBody":"x","MessageGroupId":"with space""#,
            "InvalidParameterValue",
        ),
        (
            FIFO_URL,
            r#""MessageBody":"x","MessageGroupId":"""#,
            "InvalidParameterValue",
        ),
        (
            FIFO_URL,
            r#""MessageBody":"x","MessageGroupId":"g","MessageDeduplicationId":"é""#,
            "InvalidParameterValue",
        ),
        (
            URL,
            r#""MessageBody":"x","MessageDeduplicationId":"d""#,
            "InvalidParameterValue",
        ),
    ];
    for (url, fields, err) in bad {
        let body = format!(r#"{{"QueueUrl":"{url}",{fields}}}"#);
        assert_error(&done(call("SendMessage", &body).1), err, 400);
    }
    let long = "g".repeat(129);
    let body =
        format!(r#"{{"QueueUrl":"{FIFO_URL}","MessageBody":"x","MessageGroupId":"{long}"}}"#);
    assert_error(
        &done(call("SendMessage", &body).1),
        "InvalidParameterValue",
        400,
    );
    // No dedup id on a queue without content-based dedup: the engine's
    // InvalidArgument, told as SQS tells it; in a batch, per entry.
    let body = format!(r#"{{"QueueUrl":"{FIFO_URL}","MessageBody":"x","MessageGroupId":"g"}}"#);
    let (mut c, s) = call("SendMessage", &body);
    engine(s);
    let refused = Reply::Send {
        results: vec![Err(sluice_protocol::ErrorCode::InvalidArgument)],
    };
    let r = done(c.resume(refused, 1));
    assert_error(&r, "InvalidParameterValue", 400);
    assert!(
        json(&r)["message"]
            .as_str()
            .unwrap()
            .contains("ContentBasedDeduplication"),
        "{r:?}"
    );
    let body = format!(
        r#"{{"QueueUrl":"{FIFO_URL}","Entries":[{{"Id":"a","MessageBody":"x","MessageGroupId":"g"}},
        {{"Id":"b","MessageBody":"y"}}]}}"#
    );
    let (mut c, s) = call("SendMessageBatch", &body);
    engine(s);
    let refused = Reply::Send {
        results: vec![Err(sluice_protocol::ErrorCode::InvalidArgument)],
    };
    let b = json(&done(c.resume(refused, 1)));
    let failed = b["Failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{b}");
    assert!(
        failed
            .iter()
            .any(|f| f["Id"] == "b" && f["Code"] == "MissingParameter")
    );
    assert!(
        failed
            .iter()
            .any(|f| f["Id"] == "a" && f["Code"] == "InvalidParameterValue")
    );
}

#[test]
fn door_receive_reports_group_dedup_id_and_sequence_number() {
    let body = format!(
        r#"{{"QueueUrl":"{FIFO_URL}","MessageSystemAttributeNames":["All"],"MessageAttributeNames":["All"]}}"#
    );
    let (mut c, s) = call("ReceiveMessage", &body);
    engine(s);
    let id = MessageId((9u128 << 64) | (1 << 48) | 77);
    let message = |body: &'static [u8], attributes: MessageAttributes| ReceivedMessage {
        id,
        receipt: Receipt::default(),
        receive_count: 1,
        sent_at_ms: 1000,
        first_received_delta_ms: 5,
        attributes,
        body: Bytes::from_static(body),
        group: Some(MessageGroupId::new("account-7").unwrap()),
    };
    let kept = MessageAttributes::from_pairs([("AWS.DeduplicationId", "txn-41")]).unwrap();
    let messages = ReceivedBatch::from_messages([
        message(b"debit", kept).as_view(),
        message(b"credit", MessageAttributes::new()).as_view(),
    ])
    .unwrap();
    let b = json(&done(c.resume(Reply::Receive { messages }, 1)));
    let m0 = &b["Messages"][0];
    assert_eq!(m0["Attributes"]["MessageGroupId"], "account-7");
    assert_eq!(m0["Attributes"]["MessageDeduplicationId"], "txn-41");
    assert_eq!(
        m0["Attributes"]["SequenceNumber"],
        ((1u64 << 48) | 77).to_string()
    );
    assert!(
        m0.get("MessageAttributes").is_none(),
        "the id is not a user attribute: {m0}"
    );
    // By content: the body's SHA-256, in hex.
    let m1 = &b["Messages"][1];
    assert_eq!(
        m1["Attributes"]["MessageDeduplicationId"],
        "ecc4873a1694eb0de0b33d68f0df091d6816127c1422266399700d02599a8628"
    );
}
