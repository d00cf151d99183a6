//! The JSON of the SQS actions the target uses: requests written into a
//! reused buffer, responses read with serde, and the message body as SQS
//! text.
//!
//! SQS bodies are text (XML characters), and the load generator's bodies
//! start with a 32-byte binary header ([`crate::body`]). So a body goes out
//! as its header in base64 (44 characters) followed by the body's bytes
//! from the 45th on (its padding, `.`): a body of `--size` bytes is `--size`
//! characters of SQS text, 44 at the least. A received body's first 44
//! characters give the header back.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::body::HEADER_BYTES;

/// Characters of a body's header in base64.
pub(crate) const HEADER_TEXT_CHARS: usize = HEADER_BYTES.div_ceil(3) * 4;

/// Appends the SQS text of `body` to `out` (see the module docs).
pub(crate) fn push_body_text(out: &mut Vec<u8>, body: &[u8]) {
    let header = &body[..HEADER_BYTES.min(body.len())];
    let at = out.len();
    out.resize(at + HEADER_TEXT_CHARS, 0);
    let n = STANDARD
        .encode_slice(header, &mut out[at..])
        .unwrap_or_default();
    out.truncate(at + n);
    if let Some(rest) = body.get(HEADER_TEXT_CHARS..) {
        // The padding: text already (`.`); anything else goes as base64 too.
        if rest
            .iter()
            .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            out.extend_from_slice(rest);
        } else {
            let at = out.len();
            out.resize(at + rest.len().div_ceil(3) * 4, 0);
            let n = STANDARD
                .encode_slice(rest, &mut out[at..])
                .unwrap_or_default();
            out.truncate(at + n);
        }
    }
}

/// The body whose SQS text is `text`, into `out`: its header from the first
/// [`HEADER_TEXT_CHARS`] characters, then the rest as it is. Text that is
/// not one of ours is handed on as it is (the tracker counts it foreign).
pub(crate) fn body_from_text(text: &str, out: &mut Vec<u8>) {
    out.clear();
    let header = text
        .get(..HEADER_TEXT_CHARS)
        .and_then(|h| STANDARD.decode(h).ok());
    match header {
        Some(header) if header.len() == HEADER_BYTES => {
            out.extend_from_slice(&header);
            out.extend_from_slice(&text.as_bytes()[HEADER_TEXT_CHARS..]);
        }
        _ => out.extend_from_slice(text.as_bytes()),
    }
}

/// Appends `s` as a JSON string.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    serde_json::to_writer(&mut *out, s).unwrap_or_default();
}

/// `{"QueueUrl":"<url>","Entries":[` : the start of a batch request.
pub(crate) fn start_batch(out: &mut Vec<u8>, queue_url: &str) {
    out.clear();
    out.extend_from_slice(b"{\"QueueUrl\":");
    push_str(out, queue_url);
    out.extend_from_slice(b",\"Entries\":[");
}

/// Entry `i` of a batch: `{"Id":"<i>","<field>":`, its value to follow.
pub(crate) fn start_entry(out: &mut Vec<u8>, i: usize, field: &str) {
    if i > 0 {
        out.push(b',');
    }
    out.extend_from_slice(b"{\"Id\":\"");
    super::super::wire::push_u64(out, i as u64);
    out.extend_from_slice(b"\",\"");
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b"\":");
}

/// A batch action's response (SendMessageBatch, DeleteMessageBatch).
#[derive(Debug, Deserialize)]
pub(crate) struct BatchResult {
    #[serde(rename = "Successful", default)]
    pub successful: Vec<IgnoredAny>,
    #[serde(rename = "Failed", default)]
    pub failed: Vec<Failed>,
}

/// An entry of a batch the server refused.
#[derive(Debug, Deserialize)]
pub(crate) struct Failed {
    #[serde(rename = "Id")]
    pub id: String,
    #[serde(rename = "Code", default)]
    pub code: String,
    #[serde(rename = "Message", default)]
    pub message: String,
}

/// ReceiveMessage's response.
#[derive(Debug, Deserialize)]
pub(crate) struct Received<'a> {
    #[serde(rename = "Messages", default, borrow)]
    pub messages: Vec<Message<'a>>,
}

/// A received message.
#[derive(Debug, Deserialize)]
pub(crate) struct Message<'a> {
    #[serde(rename = "ReceiptHandle", borrow)]
    pub receipt: Cow<'a, str>,
    #[serde(rename = "Body", borrow)]
    pub body: Cow<'a, str>,
}

/// CreateQueue's response.
#[derive(Debug, Deserialize)]
pub(crate) struct Created {
    #[serde(rename = "QueueUrl")]
    pub queue_url: String,
}

/// An error response: `{"__type": "...#Code", "message": "..."}`.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(rename = "__type", default)]
    pub kind: String,
    #[serde(default, alias = "Message")]
    pub message: String,
}

impl ErrorBody {
    /// The error's code (`QueueDoesNotExist`) and message, in words.
    pub(crate) fn describe(body: &[u8], status: u16) -> String {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(e) => {
                let code = e.kind.rsplit('#').next().unwrap_or_default();
                format!("HTTP {status} {code}: {}", e.message)
            }
            Err(_) => format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{Stamp, read_stamp, write_body};

    #[test]
    fn a_body_goes_as_text_and_comes_back_with_its_stamp() {
        let stamp = Stamp {
            run_tag: 7,
            seq: u64::MAX - 3,
            intended_ns: 12_345,
            sent_ns: 67_890,
        };
        for size in [32, 40, 44, 45, 100, 4096] {
            let mut body = Vec::new();
            write_body(&mut body, size, stamp);
            let mut text = Vec::new();
            push_body_text(&mut text, &body);
            assert_eq!(text.len(), size.max(HEADER_TEXT_CHARS), "size {size}");
            let text = String::from_utf8(text).unwrap();
            assert!(text.bytes().all(|b| (0x20..0x7f).contains(&b)), "{text}");
            let mut back = Vec::new();
            body_from_text(&text, &mut back);
            assert_eq!(read_stamp(&back).unwrap(), stamp);
        }
        // Bytes past the header that are not text go as base64 too.
        let mut text = Vec::new();
        let mut odd = vec![0u8; 50];
        odd[48] = b'"';
        push_body_text(&mut text, &odd);
        assert!(
            String::from_utf8(text)
                .unwrap()
                .bytes()
                .all(|b| b != b'"' && b != 0)
        );
        // Text that is not ours is handed on as it is.
        let mut back = Vec::new();
        body_from_text("hello", &mut back);
        assert_eq!(back, b"hello");
        body_from_text(&"!".repeat(60), &mut back);
        assert_eq!(back, "!".repeat(60).as_bytes());
    }

    #[test]
    fn batch_requests_are_json() {
        let mut out = Vec::new();
        start_batch(&mut out, "http://h:1/000000000000/q\"");
        start_entry(&mut out, 0, "MessageBody");
        push_str(&mut out, "a");
        out.push(b'}');
        start_entry(&mut out, 1, "MessageBody");
        push_str(&mut out, "b\n");
        out.extend_from_slice(b"}]}");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["QueueUrl"], "http://h:1/000000000000/q\"");
        assert_eq!(v["Entries"][0]["Id"], "0");
        assert_eq!(v["Entries"][1]["MessageBody"], "b\n");
    }

    #[test]
    fn responses_are_read_and_errors_named() {
        let r: BatchResult = serde_json::from_str(
            r#"{"Successful":[{"Id":"0","MessageId":"m"}],"Failed":[{"Id":"1","SenderFault":true,"Code":"ReceiptHandleIsInvalid","Message":"gone"}]}"#,
        )
        .unwrap();
        assert_eq!(r.successful.len(), 1);
        assert_eq!(
            (r.failed[0].id.as_str(), r.failed[0].code.as_str()),
            ("1", "ReceiptHandleIsInvalid")
        );
        let r: Received = serde_json::from_str(
            r#"{"Messages":[{"MessageId":"m","ReceiptHandle":"r\/1","MD5OfBody":"x","Body":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(
            (&*r.messages[0].receipt, &*r.messages[0].body),
            ("r/1", "b")
        );
        let empty: Received = serde_json::from_str("{}").unwrap();
        assert!(empty.messages.is_empty());
        assert_eq!(
            ErrorBody::describe(
                br#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"no queue"}"#,
                400
            ),
            "HTTP 400 QueueDoesNotExist: no queue"
        );
        assert_eq!(ErrorBody::describe(b"<html>", 502), "HTTP 502: <html>");
    }
}
