//! The door over the query protocol: form posts and GETs read into the same
//! engine requests as the JSON protocol's, replies and errors in XML.

use bytes::Bytes;
use sluice_protocol::{
    MessageAttributes, MessageId, Receipt, ReceivedBatch, ReceivedMessage, Reply, Request,
    SendOutcome,
};

use super::tests::{done, engine};
use super::{Action, Door, DoorConfig, Protocol, Response, Step};
use crate::http;

const URL: &str = "http://localhost:9324/000000000000/orders";

fn form(query: &str, body: &str) -> http::Request {
    form_parts(query, body).into()
}

fn form_parts(query: &str, body: &str) -> http::RequestParts {
    http::RequestParts {
        method: if body.is_empty() { "GET" } else { "POST" }.to_owned(),
        path: "/".to_owned(),
        query: query.to_owned(),
        headers: vec![
            ("host".to_owned(), "localhost:9324".to_owned()),
            (
                "content-type".to_owned(),
                "application/x-www-form-urlencoded; charset=utf-8".to_owned(),
            ),
        ],
        body: Bytes::from(body.to_owned()),
        keep_alive: true,
    }
}

fn post(body: &str) -> (super::Call, Step) {
    Door::new(DoorConfig::default()).call(&form("", body), 1)
}

fn text(r: &Response) -> &str {
    core::str::from_utf8(&r.body).unwrap()
}

fn assert_xml_error(r: &Response, code: &str, status: u16) {
    assert_eq!(r.status, status, "{r:?}");
    let body = text(r);
    assert!(
        body.contains("<ErrorResponse") && body.contains(&format!("<Code>{code}</Code>")),
        "{body}"
    );
    assert!(
        r.headers
            .iter()
            .any(|(n, v)| *n == "Content-Type" && v == "text/xml")
    );
}

#[test]
fn the_protocol_is_told_by_the_target_header_the_form_or_the_action() {
    assert_eq!(
        Protocol::of(&form("", "Action=ListQueues")),
        Protocol::Query
    );
    let mut get = form_parts("Action=ListQueues&Version=2012-11-05", "");
    get.headers.truncate(1);
    assert_eq!(Protocol::of(&get.clone().into()), Protocol::Query);
    get.query = "NoAction=1".to_owned();
    assert_eq!(Protocol::of(&get.into()), Protocol::Json);
    let mut json = form_parts("", "{}");
    json.headers
        .push(("x-amz-target".to_owned(), "AmazonSQS.ListQueues".to_owned()));
    assert_eq!(Protocol::of(&json.into()), Protocol::Json);
}

#[test]
fn a_send_by_form_post_is_the_json_protocols_send_with_an_xml_reply() {
    let body = format!(
        "Action=SendMessage&Version=2012-11-05&QueueUrl={}&MessageBody=hello+%3Cworld%3E\
         &DelaySeconds=3&MessageAttribute.1.Name=s&MessageAttribute.1.Value.DataType=String\
         &MessageAttribute.1.Value.StringValue=v",
        URL.replace(':', "%3A").replace('/', "%2F")
    );
    let (mut c, s) = post(&body);
    assert_eq!(c.action(), Action::SendMessage);
    let Request::Send(send) = engine(s) else {
        panic!()
    };
    let entries = send.entries.to_entries();
    assert_eq!(entries[0].body, "hello <world>");
    assert_eq!(
        entries[0].delay.map(sluice_protocol::Millis::get),
        Some(3000)
    );
    assert_eq!(entries[0].attributes.get("s"), Some("v"));
    let r = done(c.resume(
        Reply::Send {
            results: vec![Ok(SendOutcome {
                id: MessageId(1),
                duplicate: false,
            })],
        },
        1,
    ));
    assert_eq!(r.status, 200);
    let xml = text(&r);
    assert!(
        xml.starts_with("<?xml version=\"1.0\"?><SendMessageResponse"),
        "{xml}"
    );
    assert!(xml.contains("<SendMessageResult>"), "{xml}");
    assert!(xml.contains("<MessageId>00000000-0000-0000-0000-000000000001</MessageId>"));
    assert!(xml.contains(&format!("<RequestId>{}</RequestId>", c.request_id())));
}

#[test]
fn a_receive_by_get_answers_its_messages_in_xml() {
    let query = format!(
        "Action=ReceiveMessage&Version=2012-11-05&QueueUrl={URL}&MaxNumberOfMessages=2\
         &AttributeName.1=All"
    );
    let (mut c, s) = Door::new(DoorConfig::default()).call(&form(&query, ""), 1);
    let Request::Receive(rr) = engine(s) else {
        panic!()
    };
    assert_eq!(rr.max_messages, 2);
    let m = ReceivedMessage {
        id: MessageId(7),
        receipt: Receipt {
            incarnation: 1,
            shard: 0,
            slot: 2,
            generation: 3,
            delivery: 1,
            check: 4,
        },
        receive_count: 1,
        sent_at_ms: 1000,
        first_received_delta_ms: 5,
        attributes: MessageAttributes::default(),
        body: Bytes::from_static(b"a\r\nb & c"),
        group: None,
    };
    let messages = ReceivedBatch::from_messages([m.as_view()]).unwrap();
    let r = done(c.resume(Reply::Receive { messages }, 1));
    let xml = text(&r);
    assert!(
        xml.contains("<Message>") && xml.contains("<Body>a&#xD;\nb &amp; c</Body>"),
        "{xml}"
    );
    assert!(
        xml.contains("<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>")
    );
}

#[test]
fn actions_without_output_answer_only_their_metadata() {
    let body = format!("Action=DeleteQueue&Version=2012-11-05&QueueUrl={URL}");
    let (mut c, s) = post(&body);
    assert!(matches!(engine(s), Request::DeleteQueue { .. }));
    let r = done(c.resume(Reply::DeleteQueue, 1));
    let xml = text(&r);
    assert!(!xml.contains("Result>"), "{xml}");
    assert!(xml.contains("<DeleteQueueResponse") && xml.contains("<ResponseMetadata>"));
}

#[test]
fn bad_queries_are_answered_with_sqs_xml_errors() {
    let cases = [
        (
            "Action=ListQueues&Version=2012-11-05&QueueNamePrefix=%zz",
            "MalformedQueryString",
        ),
        ("Action=ListQueues&Version=2010-01-01", "NoSuchVersion"),
        ("Action=ListQueues", "MissingParameter"),
        ("Version=2012-11-05", "MissingAction"),
        ("Action=&Version=2012-11-05", "MissingAction"),
        ("Action=Frobnicate&Version=2012-11-05", "InvalidAction"),
        (
            "Action=GetQueueAttributes&Version=2012-11-05&QueueUrl=x&AttributeName.1=A&AttributeName.3=B",
            "InvalidParameterValue",
        ),
        ("Action=SendMessage&Version=2012-11-05", "MissingParameter"),
        (
            "Action=GetQueueUrl&Version=2012-11-05&QueueName=nope",
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
    ];
    for (body, code) in cases {
        let (mut c, s) = post(body);
        let r = match s {
            Step::Done(r) => r,
            // GetQueueUrl asks the engine first.
            Step::Engine(_) => done(c.resume(
                Reply::Error(sluice_protocol::WireError {
                    code: sluice_protocol::ErrorCode::QueueNotFound,
                    message: String::new(),
                }),
                1,
            )),
        };
        assert_xml_error(&r, code, 400);
    }
    // A body that is no UTF-8.
    let mut bad = form("", "");
    bad.body = Bytes::from_static(b"Action=ListQueues&Version=2012-11-05&x=\xff");
    assert_xml_error(
        &done(Door::new(DoorConfig::default()).call(&bad, 1).1),
        "MalformedQueryString",
        400,
    );
}

mod robustness {
    use proptest::prelude::*;

    use super::*;

    /// Parameter names a query request has, numbered lists among them.
    const KEYS: &[&str] = &[
        "Action",
        "Version",
        "QueueUrl",
        "QueueName",
        "MessageBody",
        "ReceiptHandle",
        "MaxNumberOfMessages",
        "Attribute.1.Name",
        "Attribute.1.Value",
        "Attribute.2.Name",
        "AttributeName.1",
        "AttributeName.2",
        "MessageAttribute.1.Name",
        "MessageAttribute.1.Value.DataType",
        "MessageAttribute.1.Value.StringValue",
        "MessageAttribute.1.Value.BinaryValue",
        "SendMessageBatchRequestEntry.1.Id",
        "SendMessageBatchRequestEntry.1.MessageBody",
        "DeleteMessageBatchRequestEntry.1.Id",
        "Tag.1.Key",
        "Tag.1.Value",
        "TagKey.1",
        "%zz",
        "",
    ];

    const ACTIONS: &[&str] = &[
        "CreateQueue",
        "ListQueues",
        "SendMessage",
        "SendMessageBatch",
        "ReceiveMessage",
        "DeleteMessageBatch",
        "GetQueueAttributes",
        "TagQueue",
        "Nope",
    ];

    fn pair() -> impl Strategy<Value = String> {
        (
            prop::sample::select(KEYS),
            prop::sample::select(ACTIONS),
            "[ -~]{0,12}",
        )
            .prop_map(|(k, action, v)| match k {
                "Action" => format!("Action={action}"),
                "Version" => "Version=2012-11-05".to_owned(),
                "QueueUrl" => format!("QueueUrl={URL}"),
                k => format!("{k}={v}"),
            })
    }

    /// The call answered to the end: engine requests get an error reply.
    fn answer(req: &http::Request) -> Response {
        let (mut c, mut step) = Door::new(DoorConfig::default()).call(req, 1);
        for _ in 0..8 {
            match step {
                Step::Done(r) => return r,
                Step::Engine(_) => {
                    step = c.resume(
                        Reply::Error(sluice_protocol::WireError {
                            code: sluice_protocol::ErrorCode::QueueNotFound,
                            message: String::new(),
                        }),
                        1,
                    );
                }
            }
        }
        panic!("a call that does not end");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_form_is_answered_in_xml(pairs in prop::collection::vec(pair(), 0..12)) {
            let r = answer(&form("", &pairs.join("&")));
            let body = text(&r);
            prop_assert!(body.starts_with("<?xml version=\"1.0\"?><"), "{}", body);
            prop_assert!(body.contains("<RequestId>"), "{}", body);
        }

        #[test]
        fn any_bytes_in_a_form_body_or_query_do_not_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            query in "[ -~]{0,64}",
        ) {
            let mut req = form(&query, "");
            req.body = Bytes::from(bytes);
            let r = answer(&req);
            prop_assert!(r.status >= 200);
        }
    }
}
