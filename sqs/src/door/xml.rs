//! SQS's query protocol, write side: the XML of a reply
//! (`<XResponse><XResult>...</XResult><ResponseMetadata>...`) and of an
//! error (`<ErrorResponse><Error>...`), written from the same JSON value
//! the JSON protocol sends, by the query protocol's rules:
//!
//! - a map is a run of entries (`<Attribute><Name/><Value/></Attribute>`,
//!   `<Tag><Key/><Value/></Tag>`), with no element around them;
//! - a list is a run of its items (`<QueueUrl>` after `<QueueUrl>`), with
//!   no element around them ("flattened");
//! - a structure is its members, each an element of its name.

use core::fmt::Write as _;

use serde_json::{Map, Value};

use super::Action;
use super::errors::SqsError;

/// The query API's XML namespace.
const NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";

/// The JSON members that are maps: (member, entry element, key element,
/// value element).
const MAPS: &[(&str, &str, &str, &str)] = &[
    ("Attributes", "Attribute", "Name", "Value"),
    ("MessageAttributes", "MessageAttribute", "Name", "Value"),
    ("Tags", "Tag", "Key", "Value"),
];

/// The item element of a list member (`Successful` is the action's).
fn item_name(member: &str, action: Action) -> &str {
    match member {
        "QueueUrls" | "queueUrls" => "QueueUrl",
        "Messages" => "Message",
        "Failed" => "BatchResultErrorEntry",
        "Results" => "ListMessageMoveTasksResultEntry",
        "StringListValues" => "StringListValue",
        "BinaryListValues" => "BinaryListValue",
        "Successful" => match action {
            Action::SendMessageBatch => "SendMessageBatchResultEntry",
            Action::DeleteMessageBatch => "DeleteMessageBatchResultEntry",
            _ => "ChangeMessageVisibilityBatchResultEntry",
        },
        other => other,
    }
}

/// Whether an action's reply has a result element (those with no output
/// have only the metadata).
fn has_result(action: Action) -> bool {
    !matches!(
        action,
        Action::DeleteQueue
            | Action::PurgeQueue
            | Action::SetQueueAttributes
            | Action::TagQueue
            | Action::UntagQueue
            | Action::DeleteMessage
            | Action::ChangeMessageVisibility
            | Action::AddPermission
            | Action::RemovePermission
    )
}

/// The reply to `action` whose JSON form is `body`.
pub(crate) fn reply(action: Action, body: &Value, request_id: &str) -> String {
    let name = action.name();
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        "<?xml version=\"1.0\"?><{name}Response xmlns=\"{NAMESPACE}\">"
    );
    if has_result(action) {
        let _ = write!(out, "<{name}Result>");
        if let Value::Object(members) = body {
            structure(&mut out, members, action);
        }
        let _ = write!(out, "</{name}Result>");
    }
    let _ = write!(
        out,
        "<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{name}Response>"
    );
    out
}

/// The `ErrorResponse` for `e`.
pub(crate) fn error(e: &SqsError, request_id: &str) -> String {
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"{NAMESPACE}\"><Error><Type>{}</Type><Code>",
        if e.sender_fault() {
            "Sender"
        } else {
            "Receiver"
        }
    );
    text(&mut out, e.query_code());
    out.push_str("</Code><Message>");
    text(&mut out, &e.message);
    let _ = write!(
        out,
        "</Message><Detail/></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    );
    out
}

fn structure(out: &mut String, members: &Map<String, Value>, action: Action) {
    for (name, v) in members {
        if let Some(&(_, entry, key, value)) = MAPS.iter().find(|m| m.0 == name) {
            if let Value::Object(map) = v {
                for (k, v) in map {
                    let _ = write!(out, "<{entry}><{key}>");
                    text(out, k);
                    let _ = write!(out, "</{key}>");
                    element(out, value, v, action);
                    let _ = write!(out, "</{entry}>");
                }
                continue;
            }
        }
        match v {
            Value::Array(items) => {
                let item = item_name(name, action);
                for v in items {
                    element(out, item, v, action);
                }
            }
            _ => element(out, name, v, action),
        }
    }
}

fn element(out: &mut String, name: &str, v: &Value, action: Action) {
    let _ = write!(out, "<{name}>");
    match v {
        Value::Object(members) => structure(out, members, action),
        Value::String(s) => text(out, s),
        Value::Null => {}
        other => {
            let _ = write!(out, "{other}");
        }
    }
    let _ = write!(out, "</{name}>");
}

/// `s` as XML text: the markup characters escaped, a carriage return
/// written as a reference so that XML's line-end rule keeps it, and a
/// character XML 1.0 cannot carry (a control character the engine may
/// hold from the binary door; SQS refuses them) as U+FFFD.
fn text(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\r' => out.push_str("&#xD;"),
            '\t' | '\n' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'.. => {
                out.push(c);
            }
            _ => out.push('\u{FFFD}'),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const META: &str = "<ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata>";

    fn inner(action: Action, body: &Value) -> String {
        let xml = reply(action, body, "r-1");
        let name = action.name();
        let head = format!("<?xml version=\"1.0\"?><{name}Response xmlns=\"{NAMESPACE}\">");
        let rest = xml.strip_prefix(&head).expect("the response element");
        rest.strip_suffix(&format!("{META}</{name}Response>"))
            .expect("the metadata at the end")
            .to_owned()
    }

    #[test]
    fn lists_and_maps_are_flattened() {
        assert_eq!(
            inner(
                Action::ListQueues,
                &json!({ "QueueUrls": ["http://h/1/a", "http://h/1/b"] })
            ),
            "<ListQueuesResult><QueueUrl>http://h/1/a</QueueUrl><QueueUrl>http://h/1/b</QueueUrl></ListQueuesResult>"
        );
        assert_eq!(
            inner(
                Action::GetQueueAttributes,
                &json!({ "Attributes": { "DelaySeconds": "5" } })
            ),
            "<GetQueueAttributesResult><Attribute><Name>DelaySeconds</Name><Value>5</Value></Attribute></GetQueueAttributesResult>"
        );
        assert_eq!(
            inner(Action::ListQueueTags, &json!({ "Tags": { "team": "a&b" } })),
            "<ListQueueTagsResult><Tag><Key>team</Key><Value>a&amp;b</Value></Tag></ListQueueTagsResult>"
        );
        assert_eq!(
            inner(
                Action::ListDeadLetterSourceQueues,
                &json!({ "queueUrls": [] })
            ),
            "<ListDeadLetterSourceQueuesResult></ListDeadLetterSourceQueuesResult>"
        );
    }

    #[test]
    fn messages_carry_their_attributes_and_typed_values() {
        let body = json!({ "Messages": [{
            "MessageId": "m",
            "Body": "<x>\r\n",
            "Attributes": { "SentTimestamp": "1" },
            "MessageAttributes": {
                "n": { "DataType": "Number", "StringValue": "1" },
                "b": { "DataType": "Binary", "BinaryValue": "AQI=" },
            },
        }]});
        assert_eq!(
            inner(Action::ReceiveMessage, &body),
            "<ReceiveMessageResult><Message>\
             <Attribute><Name>SentTimestamp</Name><Value>1</Value></Attribute>\
             <Body>&lt;x&gt;&#xD;\n</Body>\
             <MessageAttribute><Name>b</Name><Value><BinaryValue>AQI=</BinaryValue><DataType>Binary</DataType></Value></MessageAttribute>\
             <MessageAttribute><Name>n</Name><Value><DataType>Number</DataType><StringValue>1</StringValue></Value></MessageAttribute>\
             <MessageId>m</MessageId></Message></ReceiveMessageResult>"
        );
    }

    #[test]
    fn batch_entries_are_named_for_the_action() {
        // (Members come in name order: the query protocol's readers take
        // them in any.)
        let body = json!({
            "Successful": [{ "Id": "a" }],
            "Failed": [{ "Id": "b", "SenderFault": true, "Code": "X", "Message": "m" }],
        });
        assert_eq!(
            inner(Action::DeleteMessageBatch, &body),
            "<DeleteMessageBatchResult>\
             <BatchResultErrorEntry><Code>X</Code><Id>b</Id><Message>m</Message><SenderFault>true</SenderFault></BatchResultErrorEntry>\
             <DeleteMessageBatchResultEntry><Id>a</Id></DeleteMessageBatchResultEntry>\
             </DeleteMessageBatchResult>"
        );
        assert!(
            inner(Action::SendMessageBatch, &body)
                .contains("<SendMessageBatchResultEntry><Id>a</Id>")
        );
        assert!(
            inner(Action::ChangeMessageVisibilityBatch, &body)
                .contains("<ChangeMessageVisibilityBatchResultEntry><Id>a</Id>")
        );
    }

    #[test]
    fn actions_without_output_have_only_metadata() {
        for action in [Action::DeleteQueue, Action::DeleteMessage, Action::TagQueue] {
            assert_eq!(inner(action, &json!({})), "");
        }
    }

    #[test]
    fn errors_carry_the_query_code_and_fault() {
        let xml = error(&SqsError::no_queue(), "r-2");
        assert_eq!(
            xml,
            format!(
                "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"{NAMESPACE}\"><Error><Type>Sender</Type>\
                 <Code>AWS.SimpleQueueService.NonExistentQueue</Code>\
                 <Message>The specified queue does not exist for this wsdl version.</Message><Detail/></Error>\
                 <RequestId>r-2</RequestId></ErrorResponse>"
            )
        );
        let internal = error(&SqsError::new("InternalError", "a <b>"), "r-3");
        assert!(internal.contains(
            "<Type>Receiver</Type><Code>InternalError</Code><Message>a &lt;b&gt;</Message>"
        ));
    }

    #[test]
    fn text_xml_cannot_carry_becomes_a_replacement() {
        let mut out = String::new();
        text(&mut out, "a\u{1}b\u{FFFE}c\t\u{1F600}");
        assert_eq!(out, "a\u{FFFD}b\u{FFFD}c\t\u{1F600}");
    }
}
