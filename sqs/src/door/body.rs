//! A reply's body before it is written: a JSON value (most actions), or,
//! for the message actions every message goes through (SendMessage and its
//! batch, ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibilityBatch),
//! typed records written straight to JSON: no map of strings built and
//! dropped per message. The query protocol's XML is made from the same
//! records as a JSON value.

use bytes::Bytes;
use serde::Serialize;

use crate::hex::HexText;
use serde_json::{Map, Value};

/// `,"NAME":"`: a plain member's start ([`Json::plain_member`]).
macro_rules! key {
    ($name:literal) => {
        concat!(",\"", $name, "\":\"")
    };
}

/// A reply's body (see the module docs).
#[derive(Debug)]
pub(crate) enum Body {
    /// Any reply, as a JSON value.
    Value(Value),
    /// SendMessage's.
    Sent(SentEntry),
    /// SendMessageBatch's.
    SentBatch(Batch<SentEntry>),
    /// DeleteMessageBatch's and ChangeMessageVisibilityBatch's.
    IdBatch(Batch<IdEntry>),
    /// ReceiveMessage's.
    Received(Received),
}

impl Body {
    /// The body as JSON text (UTF-8).
    pub fn to_json(&self) -> Vec<u8> {
        // Room for the whole reply at once: the fields but a body take
        // under 300 bytes a message.
        let room = match self {
            Body::Received(r) => r
                .messages
                .iter()
                .map(|m| 300 + m.body.as_bytes().len())
                .sum(),
            Body::SentBatch(b) => 200 * b.successful.len() + 100 * b.failed.len() + 32,
            Body::IdBatch(b) => 100 * (b.successful.len() + b.failed.len()) + 32,
            _ => 256,
        };
        let mut out = Json(Vec::with_capacity(room));
        match self {
            Body::Value(v) => return v.to_string().into_bytes(),
            Body::Sent(s) => s.write(&mut out),
            Body::SentBatch(b) => b.write(&mut out, SentEntry::write),
            Body::IdBatch(b) => b.write(&mut out, |e, out| {
                out.0.push(b'{');
                out.plain_member(true, key!("Id"), e.id.as_bytes());
                out.0.push(b'}');
            }),
            Body::Received(r) => {
                out.0.push(b'{');
                if !r.messages.is_empty() {
                    out.push_str("\"Messages\":[");
                    for (i, m) in r.messages.iter().enumerate() {
                        if i > 0 {
                            out.0.push(b',');
                        }
                        m.write(&mut out);
                    }
                    out.0.push(b']');
                }
                out.0.push(b'}');
            }
        }
        out.0
    }

    /// The body as a JSON value (for the query protocol's XML, and a
    /// receive remembered for its attempt id).
    pub fn into_value(self) -> Value {
        let value = match self {
            Body::Value(v) => return v,
            Body::Sent(s) => serde_json::to_value(s),
            Body::SentBatch(b) => serde_json::to_value(b),
            Body::IdBatch(b) => serde_json::to_value(b),
            Body::Received(r) => serde_json::to_value(r),
        };
        value.unwrap_or(Value::Null)
    }
}

/// JSON text being written, as bytes: the typed bodies' own writer, which
/// the tests hold to serde's form of the same records. Strings go in as
/// `&str` (UTF-8 already) and hex text as its ASCII bytes, so the text is
/// UTF-8 without a check.
struct Json(Vec<u8>);

impl Json {
    fn push_str(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    /// A string, quoted and escaped: plain runs of eight bytes are found a
    /// word at a time and copied whole.
    fn str(&mut self, s: &Text) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const TOPS: u64 = 0x8080_8080_8080_8080;
        let out = &mut self.0;
        out.push(b'"');
        let bytes = s.as_bytes();
        let mut plain = 0;
        // Whole words without '"', '\\' or a control byte.
        while plain + 8 <= bytes.len() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[plain..plain + 8]);
            let w = u64::from_le_bytes(b);
            let zero = |x: u64| x.wrapping_sub(ONES) & !x & TOPS;
            let control = w.wrapping_sub(0x20 * ONES) & !w & TOPS;
            if control | zero(w ^ (0x22 * ONES)) | zero(w ^ (0x5c * ONES)) != 0 {
                break;
            }
            plain += 8;
        }
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate().skip(plain) {
            let escaped = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0..=0x1f => "",
                _ => continue,
            };
            out.extend_from_slice(&bytes[start..i]);
            if escaped.is_empty() {
                out.extend_from_slice(b"\\u00");
                out.extend_from_slice(crate::hex::HexText::<2>::of(&[b]).as_bytes());
            } else {
                out.extend_from_slice(escaped.as_bytes());
            }
            start = i + 1;
        }
        out.extend_from_slice(&bytes[start..]);
        out.push(b'"');
    }

    /// `,"key":"value"` (without the comma for the first member).
    fn member(&mut self, first: bool, key: &str, value: &Text) {
        if !first {
            self.0.push(b',');
        }
        self.0.push(b'"');
        self.push_str(key);
        self.push_str("\":");
        self.str(value);
    }

    /// [`Json::member`] for a value that needs no escaping and is ASCII
    /// (hex digits, ids, a batch entry's checked id): copied as it is,
    /// after its member's `,"key":"` made at compile time ([`key!`]).
    fn plain_member(&mut self, first: bool, key: &'static str, value: &[u8]) {
        debug_assert!(
            value
                .iter()
                .all(|&b| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\'),
            "{value:?} needs escaping"
        );
        let out = &mut self.0;
        out.extend_from_slice(&key.as_bytes()[usize::from(first)..]);
        out.extend_from_slice(value);
        out.push(b'"');
    }

    /// `,"key":<value as serde writes it>`.
    fn value_member(&mut self, key: &str, value: &impl Serialize) {
        self.push_str(",\"");
        self.push_str(key);
        self.push_str("\":");
        // Maps of strings always serialize.
        let _ = serde_json::to_writer(&mut self.0, value);
    }
}

/// UTF-8 text held as shared bytes: a received body, sliced from the
/// engine's reply without a copy. Made only from text checked to be UTF-8
/// (or made so), which the reply writer relies on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Text(Bytes);

impl Text {
    /// `part` (bytes of `whole`) as text: shared when it is UTF-8, else
    /// its invalid sequences replaced (a body sent natively may be any
    /// bytes).
    pub fn shared(whole: &Bytes, part: &[u8]) -> Text {
        match core::str::from_utf8(part) {
            Ok(_) => Text(whole.slice_ref(part)),
            Err(_) => Text(Bytes::from(String::from_utf8_lossy(part).into_owned())),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As a `&str` (checked again: for the slow paths).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A batch's outcome: the entries done and the entries refused (each as
/// `failed` in `messages.rs` makes it).
#[derive(Debug, Serialize)]
pub(crate) struct Batch<T> {
    #[serde(rename = "Successful")]
    pub successful: Vec<T>,
    #[serde(rename = "Failed")]
    pub failed: Vec<Value>,
}

impl<T> Batch<T> {
    fn write(&self, out: &mut Json, entry: impl Fn(&T, &mut Json)) {
        out.push_str("{\"Successful\":[");
        for (i, e) in self.successful.iter().enumerate() {
            if i > 0 {
                out.0.push(b',');
            }
            entry(e, out);
        }
        out.0.push(b']');
        out.value_member("Failed", &self.failed);
        out.0.push(b'}');
    }
}

/// A batch entry done, named by its id.
#[derive(Debug, Serialize)]
pub(crate) struct IdEntry {
    #[serde(rename = "Id")]
    pub id: String,
}

/// A message sent.
#[derive(Debug, Serialize)]
pub(crate) struct SentEntry {
    /// Its batch entry's id (a batch's).
    #[serde(rename = "Id", skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "MessageId")]
    pub message_id: HexText<36>,
    #[serde(rename = "MD5OfMessageBody")]
    pub md5_body: HexText<32>,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_attributes: Option<String>,
    #[serde(
        rename = "MD5OfMessageSystemAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_system: Option<String>,
    /// A FIFO queue's.
    #[serde(rename = "SequenceNumber", skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
}

impl SentEntry {
    fn write(&self, out: &mut Json) {
        out.0.push(b'{');
        if let Some(id) = &self.id {
            out.plain_member(true, key!("Id"), id.as_bytes());
        }
        out.plain_member(
            self.id.is_none(),
            key!("MessageId"),
            self.message_id.as_bytes(),
        );
        out.plain_member(false, key!("MD5OfMessageBody"), self.md5_body.as_bytes());
        let optional = [
            (key!("MD5OfMessageAttributes"), &self.md5_attributes),
            (key!("MD5OfMessageSystemAttributes"), &self.md5_system),
            (key!("SequenceNumber"), &self.sequence_number),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                out.plain_member(false, key, v.as_bytes());
            }
        }
        out.0.push(b'}');
    }
}

/// ReceiveMessage's reply: `{}` when no message came.
#[derive(Debug, Serialize)]
pub(crate) struct Received {
    #[serde(rename = "Messages", skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<ReceivedEntry>,
}

/// A message received.
#[derive(Debug, Serialize)]
pub(crate) struct ReceivedEntry {
    #[serde(rename = "MessageId")]
    pub message_id: HexText<36>,
    #[serde(rename = "ReceiptHandle")]
    pub receipt_handle: HexText<52>,
    #[serde(rename = "MD5OfBody")]
    pub md5_body: HexText<32>,
    #[serde(rename = "Body")]
    pub body: Text,
    /// The system attributes asked for, when any is.
    #[serde(rename = "Attributes", skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Map<String, Value>>,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_attributes: Option<String>,
    /// The message attributes asked for, when any is.
    #[serde(rename = "MessageAttributes", skip_serializing_if = "Option::is_none")]
    pub message_attributes: Option<Map<String, Value>>,
}

impl ReceivedEntry {
    fn write(&self, out: &mut Json) {
        out.0.push(b'{');
        out.plain_member(true, key!("MessageId"), self.message_id.as_bytes());
        out.plain_member(false, key!("ReceiptHandle"), self.receipt_handle.as_bytes());
        out.plain_member(false, key!("MD5OfBody"), self.md5_body.as_bytes());
        out.member(false, "Body", &self.body);
        if let Some(a) = &self.attributes {
            out.value_member("Attributes", a);
        }
        if let Some(m) = &self.md5_attributes {
            out.plain_member(false, key!("MD5OfMessageAttributes"), m.as_bytes());
        }
        if let Some(a) = &self.message_attributes {
            out.value_member("MessageAttributes", a);
        }
        out.0.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The hand-written JSON reads back as serde's value of the same body.
    fn same(body: Body) {
        let text = String::from_utf8(body.to_json()).unwrap();
        let read: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(read, body.into_value(), "{text}");
    }

    fn received(body: &str, attributes: bool) -> ReceivedEntry {
        let map = |k: &str| {
            let mut m = Map::new();
            m.insert(k.to_owned(), json!("v\"1"));
            m
        };
        ReceivedEntry {
            message_id: HexText::of(&[0x5a; 18]),
            receipt_handle: HexText::of(&[0xab; 26]),
            md5_body: HexText::of(&[0xd4; 16]),
            body: body.into(),
            attributes: attributes.then(|| map("SentTimestamp")),
            md5_attributes: attributes.then(|| "77".into()),
            message_attributes: attributes.then(|| map("a")),
        }
    }

    fn sent(id: Option<&str>, extra: bool) -> SentEntry {
        SentEntry {
            id: id.map(str::to_owned),
            message_id: HexText::of(&[0x01; 18]),
            md5_body: HexText::of(&[0x55; 16]),
            md5_attributes: extra.then(|| "6".into()),
            md5_system: extra.then(|| "7".into()),
            sequence_number: extra.then(|| "0001".into()),
        }
    }

    #[test]
    fn typed_bodies_write_what_serde_writes() {
        same(Body::Received(Received { messages: vec![] }));
        same(Body::Received(Received {
            messages: vec![
                received("plain body of some length", false),
                received("", true),
            ],
        }));
        same(Body::Sent(sent(None, false)));
        same(Body::Sent(sent(None, true)));
        same(Body::SentBatch(Batch {
            successful: vec![sent(Some("a"), false), sent(Some("b"), true)],
            failed: vec![json!({"Id": "c", "Code": "X", "SenderFault": true, "Message": "m"})],
        }));
        same(Body::IdBatch(Batch {
            successful: vec![IdEntry { id: "1".into() }, IdEntry { id: "2".into() }],
            failed: vec![],
        }));
        same(Body::Value(json!({"QueueUrl": "u"})));
    }

    #[test]
    fn a_body_is_shared_when_it_is_utf_8_and_replaced_where_it_is_not() {
        let whole = Bytes::from_static(b"head caf\xc3\xa9 \xff tail");
        let good = Text::shared(&whole, &whole[5..10]);
        assert_eq!(good.as_str(), "café");
        assert_eq!(
            good.as_bytes().as_ptr(),
            whole[5..].as_ptr(),
            "shared, not copied"
        );
        let bad = Text::shared(&whole, &whole[11..13]);
        assert_eq!(bad.as_str(), "\u{fffd} ");
        assert_eq!(serde_json::to_string(&good).unwrap(), "\"café\"");
    }

    proptest! {
        #[test]
        fn any_body_text_is_escaped_as_json(body in any::<String>(), pad in 0usize..20) {
            let body = format!("{}{body}", "x".repeat(pad));
            let text = Body::Received(Received { messages: vec![received(&body, false)] }).to_json();
            let read: Value = serde_json::from_slice(&text).unwrap();
            prop_assert_eq!(read["Messages"][0]["Body"].as_str(), Some(body.as_str()));
        }
    }
}
