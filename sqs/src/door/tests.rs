use bytes::Bytes;
use serde_json::Value;
use sluice_protocol::{
    ErrorCode, MessageAttributes, MessageId, Millis, QueueAttributes, QueueInfo, QueueName,
    QueueStats, Receipt, ReceivedBatch, ReceivedMessage, Reply, Request, SendOutcome,
};

use super::md5::{SqsAttribute, md5_attributes};
use super::{Action, Door, DoorConfig, QueueMemo, Response, Step};
use crate::http;

pub(super) fn req(target: Option<&str>, body: &str) -> http::Request {
    req_parts(target, body).into()
}

fn req_parts(target: Option<&str>, body: &str) -> http::RequestParts {
    let mut headers = vec![
        ("host".to_owned(), "localhost:9324".to_owned()),
        (
            "content-type".to_owned(),
            "application/x-amz-json-1.0".to_owned(),
        ),
    ];
    if let Some(t) = target {
        headers.push(("x-amz-target".to_owned(), t.to_owned()));
    }
    http::RequestParts {
        method: "POST".to_owned(),
        path: "/".to_owned(),
        query: String::new(),
        headers,
        body: Bytes::from(body.to_owned()),
        keep_alive: true,
    }
}

pub(super) fn call(action: &str, body: &str) -> (super::Call, Step) {
    Door::new(DoorConfig::default()).call(&req(Some(&format!("AmazonSQS.{action}")), body), 1)
}

pub(super) fn done(step: Step) -> Response {
    match step {
        Step::Done(r) => r,
        Step::Engine(e) => panic!("expected done, got {e:?}"),
    }
}

pub(super) fn engine(step: Step) -> Request {
    match step {
        Step::Engine(r) => r,
        Step::Done(r) => panic!("expected engine, got {r:?}"),
    }
}

pub(super) fn json(r: &Response) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_ref())
}

pub(super) fn assert_error(r: &Response, name: &str, status: u16) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.error.unwrap(), name);
    let b = json(r);
    assert!(
        b["__type"].as_str().unwrap().ends_with(&format!("#{name}")),
        "{b}"
    );
    assert!(b["message"].is_string());
}

const URL: &str = "http://localhost:9324/000000000000/orders";

#[test]
fn door_unknown_action_and_missing_target() {
    let (c, s) = call("NoSuchThing", "{}");
    assert_eq!(c.action(), Action::Unknown);
    let r = done(s);
    assert_error(&r, "InvalidAction", 400);
    assert_eq!(
        header(&r, "x-amzn-query-error"),
        Some("InvalidAction;Sender")
    );
    let door = Door::new(DoorConfig::default());
    assert_error(
        &done(door.call(&req(None, "{}"), 1).1),
        "InvalidAction",
        400,
    );
}

#[test]
fn door_bad_json_and_types() {
    for body in ["{", "[1]", "\"x\"", "{\"QueueName\": 5}", "\u{0}\u{1}"] {
        let r = done(call("CreateQueue", body).1);
        assert_error(&r, "SerializationException", 400);
    }
    assert_error(&done(call("CreateQueue", "{}").1), "MissingParameter", 400);
    assert_error(&done(call("GetQueueUrl", "").1), "MissingParameter", 400);
}

#[test]
fn door_request_ids_and_headers() {
    let door = Door::new(DoorConfig::default());
    let a = door.call(&req(Some("AmazonSQS.ListQueues"), "{}"), 5).0;
    let b = door.call(&req(Some("AmazonSQS.ListQueues"), "{}"), 5).0;
    assert_ne!(a.request_id(), b.request_id());
    assert_eq!(a.request_id().len(), 36);
    assert_eq!(a.request_id().matches('-').count(), 4);
}

#[test]
fn door_create_queue_and_errors() {
    let (mut c, s) = call(
        "CreateQueue",
        r#"{"QueueName":"orders","Attributes":{"VisibilityTimeout":"45","DelaySeconds":"2",
        "RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:dlq\",\"maxReceiveCount\":3}"}}"#,
    );
    let Request::CreateQueue(cq) = engine(s) else {
        panic!()
    };
    assert_eq!(cq.queue.as_str(), "orders");
    assert_eq!(
        cq.attributes.visibility_timeout.map(Millis::get),
        Some(45_000)
    );
    assert_eq!(cq.attributes.delay.map(Millis::get), Some(2_000));
    let rd = cq.attributes.redrive.as_set().unwrap();
    assert_eq!((rd.dead_letter_queue.as_str(), rd.max_receives), ("dlq", 3));
    let r = done(c.resume(Reply::CreateQueue { created: true }, 2));
    assert_eq!(r.status, 200);
    assert_eq!(
        header(&r, "Content-Type"),
        Some("application/x-amz-json-1.0")
    );
    assert!(header(&r, "x-amzn-RequestId").is_some());
    assert_eq!(json(&r)["QueueUrl"], URL);

    let (mut c, s) = call("CreateQueue", r#"{"QueueName":"orders"}"#);
    engine(s);
    let r = done(c.resume(Reply::error(ErrorCode::QueueExists, "x"), 2));
    assert_error(&r, "QueueNameExists", 400);
    assert_eq!(
        header(&r, "x-amzn-query-error"),
        Some("QueueAlreadyExists;Sender")
    );

    for (body, err) in [
        // A FIFO queue needs both the suffix and the attribute.
        (r#"{"QueueName":"a.fifo"}"#, "InvalidParameterValue"),
        (
            r#"{"QueueName":"a","Attributes":{"FifoQueue":"true"}}"#,
            "InvalidParameterValue",
        ),
        (r#"{"QueueName":"bad name"}"#, "InvalidParameterValue"),
        (r#"{"QueueName":""}"#, "InvalidParameterValue"),
        (
            r#"{"QueueName":"a","Attributes":{"VisibilityTimeout":"43201"}}"#,
            "InvalidAttributeValue",
        ),
        (
            r#"{"QueueName":"a","Attributes":{"DelaySeconds":"x"}}"#,
            "InvalidAttributeValue",
        ),
        (
            r#"{"QueueName":"a","Attributes":{"Nope":"1"}}"#,
            "InvalidAttributeName",
        ),
        (
            r#"{"QueueName":"a","Attributes":{"RedrivePolicy":"{}"}}"#,
            "InvalidAttributeValue",
        ),
        (
            r#"{"QueueName":"a","Attributes":{"VisibilityTimeout":5}}"#,
            "SerializationException",
        ),
    ] {
        let r = done(call("CreateQueue", body).1);
        assert_error(&r, err, 400);
    }
}

#[test]
fn door_namespaces() {
    use super::names::{Namespace, arn_of_engine, parse_url};
    let ns = Namespace::new("123456789012", "eu-west-1", "000000000000", "us-east-1");
    assert_eq!(
        ns.engine_name("q").unwrap().as_str(),
        "123456789012.eu-west-1.q"
    );
    assert_eq!(ns.sqs_name("123456789012.eu-west-1.q"), Some("q"));
    assert_eq!(ns.sqs_name("q"), None);
    let long = "a".repeat(80);
    assert_eq!(
        ns.engine_name(&long).unwrap_err().name,
        "InvalidParameterValue"
    );
    let d = Namespace::new("000000000000", "us-east-1", "000000000000", "us-east-1");
    assert_eq!(d.engine_name(&long).unwrap().as_str(), long);
    assert_eq!(d.sqs_name("x.y.z"), None);
    assert_eq!(ns.arn("q"), "arn:aws:sqs:eu-west-1:123456789012:q");
    assert_eq!(
        arn_of_engine("123456789012.eu-west-1.q", &d),
        "arn:aws:sqs:eu-west-1:123456789012:q"
    );
    assert_eq!(parse_url("http://other-host/1/q").unwrap(), ("1", "q"));
    assert_eq!(parse_url("/1/q").unwrap(), ("1", "q"));
    // Against a reading by string patterns, over URL-shaped pieces.
    let by_patterns = |url: &str| -> Option<(String, String)> {
        let path = match url.find("://") {
            Some(i) => {
                let rest = &url[i + 3..];
                rest.find('/').map_or("", |j| &rest[j..])
            }
            None => url,
        };
        let path = path.split(['?', '#']).next().unwrap_or("");
        let mut parts = path.trim_matches('/').split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(n), None) if !a.is_empty() && !n.is_empty() => {
                Some((a.to_owned(), n.to_owned()))
            }
            _ => None,
        }
    };
    let pieces = [
        "http", "://", ":/", "/", "//", "h", "1", "q", "?", "#", "é", "a=b", ":",
    ];
    let mut seed = 0x9e37_79b9_u64;
    for _ in 0..20_000 {
        let mut url = String::new();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        for k in 0..(seed % 9) {
            url.push_str(pieces[((seed >> (5 * k + 8)) % pieces.len() as u64) as usize]);
        }
        let ours = parse_url(&url)
            .ok()
            .map(|(a, n)| (a.to_owned(), n.to_owned()));
        assert_eq!(ours, by_patterns(&url), "{url:?}");
    }
    for bad in ["", "http://h", "http://h/1", "http://h/1/q/x", "q"] {
        assert_eq!(parse_url(bad).unwrap_err().name, "InvalidAddress");
    }
}

#[test]
fn door_queue_url_lookup_uses_path_and_reports_missing() {
    let (mut c, s) = call(
        "GetQueueAttributes",
        r#"{"QueueUrl":"http://elsewhere/000000000000/orders","AttributeNames":["All"]}"#,
    );
    let Request::GetQueue { queue } = engine(s) else {
        panic!()
    };
    assert_eq!(queue.as_str(), "orders");
    let r = done(c.resume(Reply::error(ErrorCode::QueueNotFound, "no"), 1));
    assert_error(&r, "QueueDoesNotExist", 400);
    assert_eq!(
        header(&r, "x-amzn-query-error"),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
}

#[test]
fn door_get_queue_attributes() {
    let (mut c, s) = call(
        "GetQueueAttributes",
        &format!(r#"{{"QueueUrl":"{URL}","AttributeNames":["All"]}}"#),
    );
    engine(s);
    let attributes = QueueAttributes {
        redrive: Some(sluice_protocol::RedrivePolicy {
            dead_letter_queue: "dlq".to_owned(),
            max_receives: 4,
        }),
        ..QueueAttributes::default()
    };
    let stats = QueueStats {
        visible: 3,
        in_flight: 2,
        delayed: 1,
        ..QueueStats::default()
    };
    let info = QueueInfo {
        queue: QueueName::new("orders").unwrap(),
        attributes,
        stats,
        times: Some(sluice_protocol::QueueTimes {
            created_ms: 1_700_000_000_999,
            modified_ms: 1_700_000_100_000,
        }),
    };
    let r = done(c.resume(Reply::GetQueue(Box::new(info)), 1));
    let a = &json(&r)["Attributes"];
    assert_eq!(a["CreatedTimestamp"], "1700000000");
    assert_eq!(a["LastModifiedTimestamp"], "1700000100");
    assert_eq!(a["ApproximateNumberOfMessages"], "3");
    assert_eq!(a["ApproximateNumberOfMessagesNotVisible"], "2");
    assert_eq!(a["ApproximateNumberOfMessagesDelayed"], "1");
    assert_eq!(a["VisibilityTimeout"], "30");
    assert_eq!(a["QueueArn"], "arn:aws:sqs:us-east-1:000000000000:orders");
    let rp: Value = serde_json::from_str(a["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(
        rp["deadLetterTargetArn"],
        "arn:aws:sqs:us-east-1:000000000000:dlq"
    );
    assert_eq!(rp["maxReceiveCount"], 4);
    let r = done(
        call(
            "GetQueueAttributes",
            &format!(r#"{{"QueueUrl":"{URL}","AttributeNames":["Bogus"]}}"#),
        )
        .1,
    );
    assert_error(&r, "InvalidAttributeName", 400);
}

#[test]
fn door_list_queues_filters_and_pages() {
    let (mut c, s) = call("ListQueues", r#"{"QueueNamePrefix":"o","MaxResults":1}"#);
    let Request::ListQueues { prefix, .. } = engine(s) else {
        panic!()
    };
    assert_eq!(prefix, "o");
    let queues = ["orders", "o2", "1.r.o3", "o{x}"]
        .iter()
        .map(|n| QueueName::new(n).unwrap())
        .collect();
    let r = done(c.resume(Reply::ListQueues { queues, more: None }, 1));
    let b = json(&r);
    assert_eq!(
        b["QueueUrls"],
        serde_json::json!(["http://localhost:9324/000000000000/o2"])
    );
    assert_eq!(b["NextToken"], "o2");
    assert_error(
        &done(call("ListQueues", r#"{"MaxResults":0}"#).1),
        "InvalidParameterValue",
        400,
    );
}

#[test]
fn door_simple_queue_actions() {
    for (action, expect) in [("DeleteQueue", "DeleteQueue"), ("PurgeQueue", "PurgeQueue")] {
        let (mut c, s) = call(action, &format!(r#"{{"QueueUrl":"{URL}"}}"#));
        let e = engine(s);
        assert!(format!("{e:?}").starts_with(expect));
        let reply = if action == "DeleteQueue" {
            Reply::DeleteQueue
        } else {
            Reply::PurgeQueue { purged: 1 }
        };
        assert_eq!(json(&done(c.resume(reply, 1))), serde_json::json!({}));
    }
    let (mut c, s) = call(
        "SetQueueAttributes",
        &format!(r#"{{"QueueUrl":"{URL}","Attributes":{{"RedrivePolicy":""}}}}"#),
    );
    let Request::SetQueue(sq) = engine(s) else {
        panic!()
    };
    assert!(sq.attributes.redrive.is_clear());
    assert_eq!(done(c.resume(Reply::SetQueue, 1)).status, 200);
    assert_error(&done(call("DeleteQueue", "{}").1), "MissingParameter", 400);
}

#[test]
fn door_md5_of_attributes_matches_sqs() {
    // The AWS documentation's and SDKs' known vector: one String attribute.
    let a = SqsAttribute {
        name: "a".to_owned(),
        data_type: "String".to_owned(),
        value: b"b".to_vec(),
    };
    let mut bytes = Vec::new();
    for part in [&b"a"[..], b"String"] {
        bytes.extend_from_slice(&u32::try_from(part.len()).unwrap().to_be_bytes());
        bytes.extend_from_slice(part);
    }
    bytes.push(1);
    bytes.extend_from_slice(&1u32.to_be_bytes());
    bytes.push(b'b');
    assert_eq!(
        md5_attributes(&[a]).unwrap(),
        super::md5::md5_hex(&bytes).as_str()
    );
    assert_eq!(md5_attributes(&[]), None);
    assert_eq!(super::md5::md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
}

#[test]
fn door_md5s_match_the_values_aws_published() {
    // The aws CLI's example for send-message-batch gives SQS's MD5s of this
    // entry, shortened to their first and last 8 hex digits.
    let attribute = |name: &str, data_type: &str, value: &str| SqsAttribute {
        name: name.to_owned(),
        data_type: data_type.to_owned(),
        value: value.as_bytes().to_vec(),
    };
    let attributes = [
        attribute("SellerName", "String", "Example Store"),
        attribute("City", "String", "Any City"),
        attribute("Region", "String", "WA"),
        attribute("PostalCode", "String", "99065"),
        attribute("PricePerGallon", "Number", "1.99"),
    ];
    let short = |hex: String| format!("{}...{}", &hex[..8], &hex[24..]);
    assert_eq!(
        short(md5_attributes(&attributes).unwrap()),
        "10809b55...baf283ef"
    );
    let body = "Fuel report for account 0001 on 2015-09-16 at 02:07:31 PM.";
    assert_eq!(
        short(super::md5::md5_hex(body.as_bytes()).to_string()),
        "203c4a38...7943237e"
    );
}

#[test]
fn door_send_message_round_trip() {
    let body = format!(
        r#"{{"QueueUrl":"{URL}","MessageBody":"hello","DelaySeconds":3,
        "MessageAttributes":{{"s":{{"DataType":"String","StringValue":"v"}},
          "n":{{"DataType":"Number.int","StringValue":"42"}},
          "b":{{"DataType":"Binary","BinaryValue":"AAEC"}}}},
        "MessageSystemAttributes":{{"AWSTraceHeader":{{"DataType":"String","StringValue":"Root=1"}}}}}}"#
    );
    let (mut c, s) = call("SendMessage", &body);
    let Request::Send(send) = engine(s) else {
        panic!()
    };
    let entries = send.entries.to_entries();
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!(e.body, "hello");
    assert_eq!(e.delay.map(Millis::get), Some(3000));
    assert_eq!(e.attributes.get("s"), Some("v"));
    assert_eq!(e.attributes.get("n"), Some("\0Number.int\x0042"));
    assert_eq!(e.attributes.get("b"), Some("\0Binary\0AAEC"));
    assert_eq!(e.attributes.get("AWS.TraceHeader"), Some("Root=1"));
    // The body's MD5 is kept with it, for its receives.
    assert_eq!(
        e.attributes.get("AWS.MD5OfBody"),
        Some("5d41402abc4b2a76b9719d911017c592")
    );
    let id = MessageId(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    let r = done(c.resume(
        Reply::Send {
            results: vec![Ok(SendOutcome {
                id,
                duplicate: false,
            })],
        },
        1,
    ));
    let b = json(&r);
    assert_eq!(b["MessageId"], "01234567-89ab-cdef-0123-456789abcdef");
    assert_eq!(b["MD5OfMessageBody"], "5d41402abc4b2a76b9719d911017c592");
    assert_eq!(b["MD5OfMessageAttributes"].as_str().unwrap().len(), 32);
    assert_eq!(
        b["MD5OfMessageSystemAttributes"].as_str().unwrap().len(),
        32
    );
}

#[test]
fn door_sends_bodies_as_given_or_unescaped() {
    let body = format!(
        r#"{{"QueueUrl":"{URL}","Entries":[{{"Id":"a","MessageBody":"plain"}},
        {{"Id":"b","MessageBody":"say \"hi\"\n"}},{{"Id":"c","MessageBody":"\u00e9t\u00e9"}}]}}"#
    );
    let (_, s) = call("SendMessageBatch", &body);
    let Request::Send(send) = engine(s) else {
        panic!()
    };
    let bodies: Vec<Bytes> = send
        .entries
        .to_entries()
        .into_iter()
        .map(|e| e.body)
        .collect();
    assert_eq!(bodies, ["plain", "say \"hi\"\n", "été"]);
}

#[test]
fn door_remembers_a_connections_queue_and_names_each_queue_its_own() {
    let door = Door::new(DoorConfig::default());
    let other = Door::new(DoorConfig {
        account: "123456789012".to_owned(),
        ..DoorConfig::default()
    });
    let mut memo = QueueMemo::default();
    let send = |door: &Door, memo: &mut QueueMemo, url: &str| {
        let body = format!(r#"{{"QueueUrl":"{url}","MessageBody":"m"}}"#);
        let r = req(Some("AmazonSQS.SendMessage"), &body);
        match door.call_remembering(&r, 1, memo).1 {
            Step::Engine(Request::Send(s)) => Ok(s.queue.to_string()),
            Step::Engine(other) => panic!("{other:?}"),
            Step::Done(r) => Err(json(&r)["__type"].as_str().unwrap().to_owned()),
        }
    };
    let fifo = "http://localhost:9324/000000000000/jobs.fifo";
    let foreign = "http://localhost:9324/111111111111/orders";
    for _ in 0..2 {
        assert_eq!(send(&door, &mut memo, URL).unwrap(), "orders");
        // A FIFO queue, remembered as one: a send without a group is refused.
        assert!(
            send(&door, &mut memo, fifo)
                .unwrap_err()
                .ends_with("MissingParameter")
        );
        assert_eq!(
            send(&door, &mut memo, foreign).unwrap(),
            "111111111111.us-east-1.orders"
        );
        assert_eq!(send(&door, &mut memo, URL).unwrap(), "orders");
    }
    // The same URL on a door of another account: that door's name.
    assert_eq!(
        send(&other, &mut memo, URL).unwrap(),
        "000000000000.us-east-1.orders"
    );
    assert_eq!(send(&door, &mut memo, URL).unwrap(), "orders");
}

#[test]
fn door_keeps_a_bodys_md5_only_where_every_queue_takes_it() {
    // Within 1 KiB (the smallest MaximumMessageSize) with the digest: kept;
    // beyond: not, and its receives hash the body.
    for (len, kept) in [(900, true), (979, true), (980, false), (5000, false)] {
        let text = "x".repeat(len);
        let body = format!(r#"{{"QueueUrl":"{URL}","MessageBody":"{text}"}}"#);
        let Request::Send(send) = engine(call("SendMessage", &body).1) else {
            panic!()
        };
        let e = &send.entries.to_entries()[0];
        let md5 = super::md5::md5_hex(text.as_bytes());
        let want = kept.then_some(md5.as_str());
        assert_eq!(e.attributes.get("AWS.MD5OfBody"), want, "a body of {len}");
    }
}

#[test]
fn door_receive_takes_a_kept_md5_when_it_is_one() {
    let hello = "5d41402abc4b2a76b9719d911017c592";
    let kept = "00112233445566778899aabbccddeeff";
    // A digest kept in the form the door writes is the reply's (a native
    // sender that forges one makes the SDKs refuse the message); one in any
    // other form is ignored, and the body hashed.
    for (stored, want) in [
        (Some(kept), kept),
        (None, hello),
        (Some("not hex at all, not 32 digits"), hello),
        (Some("00112233445566778899AABBCCDDEEFF"), hello),
        (Some("0011223344556677\"<b>\"aabbccddeeff"), hello),
    ] {
        let body = format!(r#"{{"QueueUrl":"{URL}","MessageAttributeNames":["All"]}}"#);
        let (mut c, _) = call("ReceiveMessage", &body);
        let pairs = stored.map(|v| ("AWS.MD5OfBody", v));
        let m = ReceivedMessage {
            id: MessageId(7),
            receipt: receipt(1),
            receive_count: 1,
            sent_at_ms: 1000,
            first_received_delta_ms: 5,
            attributes: MessageAttributes::from_pairs(pairs).unwrap(),
            body: Bytes::from_static(b"hello"),
            group: None,
        };
        let messages = ReceivedBatch::from_messages([m.as_view()]).unwrap();
        let b = json(&done(c.resume(Reply::Receive { messages }, 1)));
        let m0 = &b["Messages"][0];
        assert_eq!(m0["MD5OfBody"], want, "{stored:?}");
        // The digest is no message attribute, nor part of their MD5.
        assert!(m0.get("MessageAttributes").is_none(), "{m0}");
        assert!(m0.get("MD5OfMessageAttributes").is_none(), "{m0}");
    }
}

#[test]
fn door_send_message_bad_input() {
    let bad = [
        (r#""MessageBody":"""#, "InvalidParameterValue"),
        (r#""MessageBody":"a\u0000""#, "InvalidMessageContents"),
        (
            r#""MessageBody":"a","DelaySeconds":901"#,
            "InvalidParameterValue",
        ),
        (
            r#""MessageBody":"a","DelaySeconds":"1""#,
            "SerializationException",
        ),
        (
            r#""MessageBody":"a","MessageAttributes":{"AWS.x":{"DataType":"String","StringValue":"v"}}"#,
            "InvalidParameterValue",
        ),
        (
            r#""MessageBody":"a","MessageAttributes":{"x":{"DataType":"Float","StringValue":"v"}}"#,
            "InvalidParameterValue",
        ),
        (
            r#""MessageBody":"a","MessageAttributes":{"x":{"DataType":"Number","StringValue":"zz"}}"#,
            "InvalidParameterValue",
        ),
        (
            r#""MessageBody":"a","MessageAttributes":{"x":{"DataType":"Binary","BinaryValue":"!!"}}"#,
            "SerializationException",
        ),
        (
            r#""MessageBody":"a","MessageAttributes":{"x":{"DataType":"String"}}"#,
            "InvalidParameterValue",
        ),
        (
            r#""MessageBody":"a","MessageAttributes":{"x":7}"#,
            "SerializationException",
        ),
        (
            r#""MessageBody":"a","MessageSystemAttributes":{"Other":{"DataType":"String","StringValue":"v"}}"#,
            "InvalidParameterValue",
        ),
        (
            r#""MessageBody":"a","MessageDeduplicationId":"d""#,
            "InvalidParameterValue",
        ),
    ];
    for (rest, err) in bad {
        let body = format!(r#"{{"QueueUrl":"{URL}",{rest}}}"#);
        assert_error(&done(call("SendMessage", &body).1), err, 400);
    }
    let eleven: Vec<String> = (0..11)
        .map(|i| format!(r#""k{i}":{{"DataType":"String","StringValue":"v"}}"#))
        .collect();
    let body = format!(
        r#"{{"QueueUrl":"{URL}","MessageBody":"a","MessageAttributes":{{{}}}}}"#,
        eleven.join(",")
    );
    assert_error(
        &done(call("SendMessage", &body).1),
        "InvalidParameterValue",
        400,
    );
    let big = "x".repeat(1_048_577);
    let body = format!(r#"{{"QueueUrl":"{URL}","MessageBody":"{big}"}}"#);
    assert_error(
        &done(call("SendMessage", &body).1),
        "InvalidParameterValue",
        400,
    );
    let (mut c, s) = call(
        "SendMessage",
        &format!(r#"{{"QueueUrl":"{URL}","MessageBody":"a"}}"#),
    );
    engine(s);
    let r = done(c.resume(
        Reply::Send {
            results: vec![Err(ErrorCode::MessageTooLarge)],
        },
        1,
    ));
    assert_error(&r, "InvalidParameterValue", 400);
}

#[test]
fn door_send_batch_limits_and_results() {
    let entry = |id: &str| format!(r#"{{"Id":"{id}","MessageBody":"m"}}"#);
    let batch = |entries: Vec<String>| {
        format!(
            r#"{{"QueueUrl":"{URL}","Entries":[{}]}}"#,
            entries.join(",")
        )
    };
    assert_error(
        &done(call("SendMessageBatch", &batch(vec![])).1),
        "EmptyBatchRequest",
        400,
    );
    let eleven = (0..11).map(|i| entry(&format!("e{i}"))).collect();
    assert_error(
        &done(call("SendMessageBatch", &batch(eleven)).1),
        "TooManyEntriesInBatchRequest",
        400,
    );
    assert_error(
        &done(call("SendMessageBatch", &batch(vec![entry("a"), entry("a")])).1),
        "BatchEntryIdsNotDistinct",
        400,
    );
    assert_error(
        &done(call("SendMessageBatch", &batch(vec![entry("bad id")])).1),
        "InvalidBatchEntryId",
        400,
    );
    let half = "x".repeat(600_000);
    let two = vec![
        format!(r#"{{"Id":"a","MessageBody":"{half}"}}"#),
        format!(r#"{{"Id":"b","MessageBody":"{half}"}}"#),
    ];
    assert_error(
        &done(call("SendMessageBatch", &batch(two)).1),
        "BatchRequestTooLong",
        400,
    );

    let entries = vec![
        entry("a"),
        r#"{"Id":"b","MessageBody":""}"#.to_owned(),
        entry("c"),
    ];
    let (mut c, s) = call("SendMessageBatch", &batch(entries));
    let Request::Send(send) = engine(s) else {
        panic!()
    };
    assert_eq!(send.entries.len(), 2);
    let r = done(c.resume(
        Reply::Send {
            results: vec![
                Ok(SendOutcome {
                    id: MessageId(1),
                    duplicate: false,
                }),
                Err(ErrorCode::QueueFull),
            ],
        },
        1,
    ));
    let b = json(&r);
    assert_eq!(b["Successful"][0]["Id"], "a");
    let failed = b["Failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2);
    assert_eq!(failed[0]["Id"], "b");
    assert_eq!(failed[0]["SenderFault"], true);
    assert_eq!(failed[1]["Id"], "c");
    assert_eq!(failed[1]["Code"], "OverLimit");
    // A reply of the wrong length is an internal error, not a panic.
    let (mut c, s) = call("SendMessageBatch", &batch(vec![entry("a")]));
    engine(s);
    assert_error(
        &done(c.resume(Reply::Send { results: vec![] }, 1)),
        "InternalError",
        500,
    );
}

fn receipt(delivery: u64) -> Receipt {
    Receipt {
        incarnation: 1,
        shard: 0,
        slot: 2,
        generation: 3,
        delivery,
        check: 4,
    }
}

#[test]
fn door_receive_message() {
    let body = format!(
        r#"{{"QueueUrl":"{URL}","MaxNumberOfMessages":5,"WaitTimeSeconds":2,"VisibilityTimeout":9,
        "MessageSystemAttributeNames":["All"],"MessageAttributeNames":["s","pre.*"]}}"#
    );
    let (mut c, s) = call("ReceiveMessage", &body);
    let Request::Receive(rr) = engine(s) else {
        panic!()
    };
    assert_eq!(rr.max_messages, 5);
    assert_eq!(rr.wait_ms, Some(2000));
    assert_eq!(rr.visibility_timeout_ms, Some(9000));
    assert!(rr.with_source, "All asks for DeadLetterQueueSourceArn");
    let attributes = MessageAttributes::from_pairs([
        ("s", "v"),
        ("pre.b", "\0Binary\0AAEC"),
        ("other", "x"),
        ("AWS.TraceHeader", "Root=1"),
        ("sluice:source", "orders-src"),
    ])
    .unwrap();
    let m = ReceivedMessage {
        id: MessageId(7),
        receipt: receipt(1),
        receive_count: 2,
        sent_at_ms: 1000,
        first_received_delta_ms: 5,
        attributes,
        body: Bytes::from_static(b"hello"),
        group: None,
    };
    let messages = ReceivedBatch::from_messages([m.as_view()]).unwrap();
    let r = done(c.resume(Reply::Receive { messages }, 1));
    let b = json(&r);
    let m0 = &b["Messages"][0];
    assert_eq!(m0["Body"], "hello");
    assert_eq!(m0["MD5OfBody"], "5d41402abc4b2a76b9719d911017c592");
    assert_eq!(m0["ReceiptHandle"], receipt(1).to_hex());
    assert_eq!(m0["Attributes"]["ApproximateReceiveCount"], "2");
    assert_eq!(m0["Attributes"]["SentTimestamp"], "1000");
    assert_eq!(m0["Attributes"]["SenderId"], "000000000000");
    assert_eq!(m0["Attributes"]["AWSTraceHeader"], "Root=1");
    assert_eq!(
        m0["Attributes"]["DeadLetterQueueSourceArn"],
        "arn:aws:sqs:us-east-1:000000000000:orders-src"
    );
    let ma = m0["MessageAttributes"].as_object().unwrap();
    assert_eq!(ma.len(), 2);
    // The source is no message attribute, nor part of their MD5.
    let without = [
        SqsAttribute {
            name: "pre.b".into(),
            data_type: "Binary".into(),
            value: vec![0, 1, 2],
        },
        SqsAttribute {
            name: "s".into(),
            data_type: "String".into(),
            value: b"v".to_vec(),
        },
    ];
    assert_eq!(
        m0["MD5OfMessageAttributes"].as_str(),
        md5_attributes(&without).as_deref()
    );
    assert_eq!(ma["pre.b"]["BinaryValue"], "AAEC");
    assert_eq!(ma["s"]["StringValue"], "v");
    assert_eq!(m0["MD5OfMessageAttributes"].as_str().unwrap().len(), 32);

    let (mut c, s) = call("ReceiveMessage", &format!(r#"{{"QueueUrl":"{URL}"}}"#));
    let Request::Receive(rr) = engine(s) else {
        panic!()
    };
    assert_eq!((rr.max_messages, rr.wait_ms), (1, None));
    assert!(!rr.with_source);
    let empty = ReceivedBatch::from_messages([]).unwrap();
    assert_eq!(
        json(&done(c.resume(Reply::Receive { messages: empty }, 1))),
        serde_json::json!({})
    );
    for rest in [
        r#""MaxNumberOfMessages":11"#,
        r#""MaxNumberOfMessages":0"#,
        r#""WaitTimeSeconds":21"#,
        r#""VisibilityTimeout":43201"#,
    ] {
        let body = format!(r#"{{"QueueUrl":"{URL}",{rest}}}"#);
        assert_error(
            &done(call("ReceiveMessage", &body).1),
            "InvalidParameterValue",
            400,
        );
    }
    let body = format!(r#"{{"QueueUrl":"{URL}","AttributeNames":["Nope"]}}"#);
    assert_error(
        &done(call("ReceiveMessage", &body).1),
        "InvalidAttributeName",
        400,
    );
}

#[test]
fn door_delete_and_change_visibility() {
    let h = receipt(1).to_hex();
    let (mut c, s) = call(
        "DeleteMessage",
        &format!(r#"{{"QueueUrl":"{URL}","ReceiptHandle":"{h}"}}"#),
    );
    let Request::Delete(d) = engine(s) else {
        panic!()
    };
    assert_eq!(d.receipts, vec![receipt(1)]);
    let r = done(c.resume(
        Reply::Delete {
            results: vec![Err(ErrorCode::StaleReceipt)],
        },
        1,
    ));
    assert_eq!((r.status, r.stale_deletes), (200, 1));

    let r = done(
        call(
            "DeleteMessage",
            &format!(r#"{{"QueueUrl":"{URL}","ReceiptHandle":"zz"}}"#),
        )
        .1,
    );
    assert_error(&r, "ReceiptHandleIsInvalid", 400);

    let body = format!(
        r#"{{"QueueUrl":"{URL}","Entries":[{{"Id":"a","ReceiptHandle":"{h}"}},{{"Id":"b","ReceiptHandle":"no"}}]}}"#
    );
    let (mut c, s) = call("DeleteMessageBatch", &body);
    engine(s);
    let b = json(&done(c.resume(
        Reply::Delete {
            results: vec![Ok(())],
        },
        1,
    )));
    assert_eq!(b["Successful"][0]["Id"], "a");
    assert_eq!(b["Failed"][0]["Code"], "ReceiptHandleIsInvalid");

    let (mut c, s) = call(
        "ChangeMessageVisibility",
        &format!(r#"{{"QueueUrl":"{URL}","ReceiptHandle":"{h}","VisibilityTimeout":10}}"#),
    );
    let Request::ChangeVisibility(cv) = engine(s) else {
        panic!()
    };
    assert_eq!(cv.entries[0].visibility_timeout_ms, 10_000);
    let r = done(c.resume(
        Reply::ChangeVisibility {
            results: vec![Err(ErrorCode::Gone)],
        },
        1,
    ));
    assert_error(&r, "MessageNotInflight", 400);
    let r = done(
        call(
            "ChangeMessageVisibility",
            &format!(r#"{{"QueueUrl":"{URL}","ReceiptHandle":"{h}"}}"#),
        )
        .1,
    );
    assert_error(&r, "MissingParameter", 400);

    let body = format!(
        r#"{{"QueueUrl":"{URL}","Entries":[{{"Id":"a","ReceiptHandle":"{h}","VisibilityTimeout":1}}]}}"#
    );
    let (mut c, s) = call("ChangeMessageVisibilityBatch", &body);
    engine(s);
    let b = json(&done(c.resume(
        Reply::ChangeVisibility {
            results: vec![Err(ErrorCode::InvalidReceipt)],
        },
        1,
    )));
    assert_eq!(b["Failed"][0]["Code"], "ReceiptHandleIsInvalid");
}

#[test]
fn door_resume_after_done_and_wrong_reply_do_not_panic() {
    let (mut c, s) = call("DeleteQueue", &format!(r#"{{"QueueUrl":"{URL}"}}"#));
    engine(s);
    assert_error(&done(c.resume(Reply::SetQueue, 1)), "InternalError", 500);
    assert_error(&done(c.resume(Reply::DeleteQueue, 1)), "InternalError", 500);
}

#[test]
fn door_skipped_actions_are_invalid_action() {
    for a in ["AddPermission", "RemovePermission"] {
        assert_error(&done(call(a, "{}").1), "InvalidAction", 400);
    }
}

/// A GET_QUEUE reply for `name`, dead-lettering into `dlq` if given.
fn info(name: &str, dlq: Option<&str>) -> Reply {
    Reply::GetQueue(Box::new(QueueInfo {
        queue: QueueName::new(name).unwrap(),
        attributes: QueueAttributes {
            redrive: dlq.map(|d| sluice_protocol::RedrivePolicy {
                dead_letter_queue: d.to_owned(),
                max_receives: 3,
            }),
            ..QueueAttributes::default()
        },
        stats: QueueStats::default(),
        times: None,
    }))
}

#[test]
fn door_dead_letter_sources_look_at_every_queue_in_name_order() {
    let dlq = "http://localhost:9324/000000000000/dlq";
    let (mut c, s) = call(
        "ListDeadLetterSourceQueues",
        &format!(r#"{{"QueueUrl":"{dlq}"}}"#),
    );
    assert!(matches!(engine(s), Request::GetQueue { queue } if queue.as_str() == "dlq"));
    let list = engine(c.resume(info("dlq", None), 1));
    assert!(matches!(list, Request::ListQueues { ref prefix, .. } if prefix.is_empty()));
    // Another namespace's queue and the dead-letter queue itself are not
    // looked at.
    let names = ["b", "dlq", "111111111111.us-east-1.a", "a", "c"]
        .iter()
        .map(|n| QueueName::new(n).unwrap())
        .collect();
    let mut step = c.resume(
        Reply::ListQueues {
            queues: names,
            more: None,
        },
        1,
    );
    let mut asked = Vec::new();
    for (name, target) in [("a", Some("dlq")), ("b", Some("other")), ("c", Some("dlq"))] {
        let Request::GetQueue { queue } = engine(step) else {
            panic!("a GET");
        };
        asked.push(queue.as_str().to_owned());
        assert_eq!(queue.as_str(), name);
        step = c.resume(info(name, target), 1);
    }
    assert_eq!(asked, ["a", "b", "c"]);
    let r = done(step);
    assert_eq!(r.status, 200);
    assert_eq!(
        json(&r),
        serde_json::json!({"queueUrls": [
            "http://localhost:9324/000000000000/a",
            "http://localhost:9324/000000000000/c"
        ]})
    );
}

#[test]
fn door_dead_letter_sources_page_and_skip_deleted_queues() {
    let dlq = "http://localhost:9324/000000000000/dlq";
    let (mut c, s) = call(
        "ListDeadLetterSourceQueues",
        &format!(r#"{{"QueueUrl":"{dlq}","MaxResults":1,"NextToken":"a"}}"#),
    );
    engine(s);
    engine(c.resume(info("dlq", None), 1));
    let names = ["a", "b", "c", "d"]
        .iter()
        .map(|n| QueueName::new(n).unwrap())
        .collect();
    // After the token: b (deleted meanwhile), c (a source), then the page
    // is full with d left.
    let step = c.resume(
        Reply::ListQueues {
            queues: names,
            more: None,
        },
        1,
    );
    assert!(matches!(engine(step), Request::GetQueue { queue } if queue.as_str() == "b"));
    let gone = Reply::error(ErrorCode::QueueNotFound, "b");
    assert!(
        matches!(engine(c.resume(gone, 1)), Request::GetQueue { queue } if queue.as_str() == "c")
    );
    let r = done(c.resume(info("c", Some("dlq")), 1));
    assert_eq!(
        json(&r),
        serde_json::json!({
            "queueUrls": ["http://localhost:9324/000000000000/c"],
            "NextToken": "c"
        })
    );
    // A missing dead-letter queue is QueueDoesNotExist.
    let (mut c, s) = call(
        "ListDeadLetterSourceQueues",
        &format!(r#"{{"QueueUrl":"{dlq}"}}"#),
    );
    engine(s);
    let r = done(c.resume(Reply::error(ErrorCode::QueueNotFound, "dlq"), 1));
    assert_error(&r, "QueueDoesNotExist", 400);
}

fn update_of(request: Request) -> sluice_protocol::AttributeUpdate {
    match request {
        Request::SetQueue(r) | Request::CreateQueue(r) => r.attributes,
        other => panic!("expected CREATE or SET, got {other:?}"),
    }
}

#[test]
fn door_tag_actions_become_the_queues_tags() {
    let (mut c, s) = call(
        "TagQueue",
        &format!(r#"{{"QueueUrl":"{URL}","Tags":{{"team":"payments","env":""}}}}"#),
    );
    let u = update_of(engine(s));
    let mut set = u.tags().set.clone();
    set.sort();
    assert_eq!(
        set,
        vec![
            ("env".to_owned(), String::new()),
            ("team".to_owned(), "payments".to_owned())
        ]
    );
    assert!(u.annotations().is_empty() && u.visibility_timeout.is_none());
    assert_eq!(
        json(&done(c.resume(Reply::SetQueue, 1))),
        serde_json::json!({})
    );

    let (_, s) = call(
        "UntagQueue",
        &format!(r#"{{"QueueUrl":"{URL}","TagKeys":["env","absent"]}}"#),
    );
    let u = update_of(engine(s));
    assert_eq!(u.tags().remove, ["env", "absent"]);
    assert!(u.tags().set.is_empty());

    let (mut c, s) = call("ListQueueTags", &format!(r#"{{"QueueUrl":"{URL}"}}"#));
    assert!(matches!(engine(s), Request::GetQueue { .. }));
    let mut attributes = QueueAttributes::default();
    attributes.tags.insert("team", "payments");
    let tagged = QueueInfo {
        queue: QueueName::new("orders").unwrap(),
        attributes,
        stats: QueueStats::default(),
        times: None,
    };
    let r = done(c.resume(Reply::GetQueue(Box::new(tagged)), 1));
    assert_eq!(json(&r), serde_json::json!({"Tags": {"team": "payments"}}));
    let (mut c, _) = call("ListQueueTags", &format!(r#"{{"QueueUrl":"{URL}"}}"#));
    let r = done(c.resume(info("orders", None), 1));
    assert_eq!(json(&r), serde_json::json!({}));
    let (mut c, _) = call(
        "TagQueue",
        &format!(r#"{{"QueueUrl":"{URL}","Tags":{{"a":"b"}}}}"#),
    );
    let gone = sluice_protocol::WireError::new(ErrorCode::QueueNotFound, "no queue");
    assert_error(
        &done(c.resume(Reply::Error(gone), 1)),
        "QueueDoesNotExist",
        400,
    );
}

#[test]
fn door_tag_actions_refuse_bad_tags() {
    let long_key = "k".repeat(129);
    let long_value = "v".repeat(257);
    let many: Vec<String> = (0..51).map(|i| format!(r#""k{i}":"v""#)).collect();
    let many = format!("{{{}}}", many.join(","));
    let cases = [
        (
            "TagQueue",
            r#""Tags":{"aws:owner":"x"}"#.to_owned(),
            "InvalidParameterValue",
        ),
        (
            "TagQueue",
            format!(r#""Tags":{{"{long_key}":"x"}}"#),
            "InvalidParameterValue",
        ),
        (
            "TagQueue",
            r#""Tags":{"":"x"}"#.to_owned(),
            "InvalidParameterValue",
        ),
        (
            "TagQueue",
            format!(r#""Tags":{{"k":"{long_value}"}}"#),
            "InvalidParameterValue",
        ),
        (
            "TagQueue",
            format!(r#""Tags":{many}"#),
            "InvalidParameterValue",
        ),
        ("TagQueue", r#""Tags":{}"#.to_owned(), "MissingParameter"),
        (
            "TagQueue",
            r#""Tags":{"k":1}"#.to_owned(),
            "SerializationException",
        ),
        (
            "TagQueue",
            r#""Tags":["k"]"#.to_owned(),
            "SerializationException",
        ),
        (
            "UntagQueue",
            r#""TagKeys":[]"#.to_owned(),
            "MissingParameter",
        ),
        (
            "UntagQueue",
            r#""TagKeys":"k""#.to_owned(),
            "SerializationException",
        ),
    ];
    for (action, member, error) in cases {
        let body = format!(r#"{{"QueueUrl":"{URL}",{member}}}"#);
        let r = done(call(action, &body).1);
        assert_eq!(r.error, Some(error), "{action} {member}: {r:?}");
    }
    let r = done(call("ListQueueTags", "{}").1);
    assert_error(&r, "MissingParameter", 400);
    // A key of 128 two-byte characters is within the bound.
    let key = "é".repeat(128);
    let body = format!(r#"{{"QueueUrl":"{URL}","Tags":{{"{key}":"v"}}}}"#);
    assert!(matches!(call("TagQueue", &body).1, Step::Engine(_)));
}

#[test]
fn door_create_queue_keeps_tags_and_the_policies() {
    let body = r#"{"QueueName":"orders","tags":{"team":"payments"},
        "Attributes":{"Policy":"{\"Version\":\"2012-10-17\"}",
        "RedriveAllowPolicy":"{\"redrivePermission\":\"denyAll\"}",
        "KmsMasterKeyId":"alias/aws/sqs","KmsDataKeyReusePeriodSeconds":"300",
        "SqsManagedSseEnabled":"false"}}"#;
    let u = update_of(engine(call("CreateQueue", body).1));
    assert_eq!(u.tags().set, [("team".to_owned(), "payments".to_owned())]);
    let mut kept: Vec<_> = u
        .annotations()
        .set
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        [
            "KmsDataKeyReusePeriodSeconds",
            "KmsMasterKeyId",
            "Policy",
            "RedriveAllowPolicy",
            "SqsManagedSseEnabled"
        ]
    );
    for (name, value) in [
        ("Policy", "not json"),
        ("Policy", "[1]"),
        ("RedriveAllowPolicy", r#"{\"redrivePermission\":\"some\"}"#),
        ("KmsDataKeyReusePeriodSeconds", "59"),
        ("SqsManagedSseEnabled", "yes"),
        ("CreatedTimestamp", "1"),
        ("LastModifiedTimestamp", "1"),
    ] {
        let body = format!(r#"{{"QueueName":"orders","Attributes":{{"{name}":"{value}"}}}}"#);
        let r = done(call("CreateQueue", &body).1);
        assert_eq!(r.status, 400, "{name}: {r:?}");
        assert!(
            matches!(
                r.error,
                Some("InvalidAttributeValue" | "InvalidAttributeName")
            ),
            "{name}: {r:?}"
        );
    }
    // An empty value: left out on create, removed on set.
    let body = r#"{"QueueName":"orders","Attributes":{"Policy":""}}"#;
    let u = update_of(engine(call("CreateQueue", body).1));
    assert!(u.labels.is_none());
    let body = format!(r#"{{"QueueUrl":"{URL}","Attributes":{{"Policy":""}}}}"#);
    let u = update_of(engine(call("SetQueueAttributes", &body).1));
    assert_eq!(u.annotations().remove, ["Policy"]);
}

#[test]
fn door_get_queue_attributes_reads_back_the_kept_policies() {
    let mut attributes = QueueAttributes::default();
    attributes.annotations.insert("Policy", "{}");
    let info = QueueInfo {
        queue: QueueName::new("orders").unwrap(),
        attributes,
        stats: QueueStats::default(),
        times: None,
    };
    for names in [r#"["All"]"#, r#"["Policy","RedriveAllowPolicy"]"#] {
        let body = format!(r#"{{"QueueUrl":"{URL}","AttributeNames":{names}}}"#);
        let (mut c, s) = call("GetQueueAttributes", &body);
        engine(s);
        let r = done(c.resume(Reply::GetQueue(Box::new(info.clone())), 1));
        let a = &json(&r)["Attributes"];
        assert_eq!(a["Policy"], "{}", "{names}");
        assert!(a.get("RedriveAllowPolicy").is_none(), "{names}");
    }
}

#[test]
fn door_with_credentials_refuses_what_is_not_signed_by_a_known_key() {
    let creds = crate::sigv4::Credentials::parse("AKIDEXAMPLE secret 123456789012").unwrap();
    let door = Door::new(DoorConfig {
        credentials: Some(creds),
        ..DoorConfig::default()
    });
    let unsigned = req(Some("AmazonSQS.ListQueues"), "{}");
    let r = done(door.call(&unsigned, 1_440_938_160_000).1);
    assert_error(&r, "MissingAuthenticationToken", 403);
    let mut unknown = req_parts(Some("AmazonSQS.ListQueues"), "{}");
    unknown
        .headers
        .push(("x-amz-date".into(), "20150830T123600Z".into()));
    unknown.headers.push((
        "authorization".into(),
        format!(
            "AWS4-HMAC-SHA256 Credential=NOBODY/20150830/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature={}",
            "0".repeat(64)
        ),
    ));
    let unknown: http::Request = unknown.into();
    let r = done(door.call(&unknown, 1_440_938_160_000).1);
    assert_error(&r, "InvalidClientTokenId", 403);
    assert_eq!(
        header(&r, "x-amzn-query-error"),
        Some("InvalidClientTokenId;Sender")
    );
    let r = done(door.call(&unknown, 1_440_938_160_000 + 16 * 60_000).1);
    assert_error(&r, "InvalidClientTokenId", 403);
}

#[test]
fn ids_are_uuid_shaped_hex_of_their_128_bits() {
    for x in [
        0u128,
        1,
        u128::MAX,
        0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
    ] {
        let hex = format!("{x:032x}");
        let want = format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        );
        assert_eq!(super::uuid_text(x).as_str(), want);
    }
}
