//! A reply's body before it is written: a JSON value (most actions), or,
//! for the message actions every message goes through (SendMessage and its
//! batch, ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibilityBatch),
//! typed records written straight to JSON: no map of strings built and
//! dropped per message. The query protocol's XML is made from the same
//! records as a JSON value.

use serde::Serialize;
use serde_json::{Map, Value};

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
    /// The body as JSON text.
    pub fn to_json(&self) -> String {
        let text = match self {
            Body::Value(v) => Ok(v.to_string()),
            Body::Sent(s) => serde_json::to_string(s),
            Body::SentBatch(b) => serde_json::to_string(b),
            Body::IdBatch(b) => serde_json::to_string(b),
            Body::Received(r) => serde_json::to_string(r),
        };
        // Strings and maps of strings always serialize.
        text.unwrap_or_default()
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

/// A batch's outcome: the entries done and the entries refused (each as
/// `failed` in `messages.rs` makes it).
#[derive(Debug, Serialize)]
pub(crate) struct Batch<T> {
    #[serde(rename = "Successful")]
    pub successful: Vec<T>,
    #[serde(rename = "Failed")]
    pub failed: Vec<Value>,
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
    pub message_id: String,
    #[serde(rename = "MD5OfMessageBody")]
    pub md5_body: String,
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
    pub message_id: String,
    #[serde(rename = "ReceiptHandle")]
    pub receipt_handle: String,
    #[serde(rename = "MD5OfBody")]
    pub md5_body: String,
    #[serde(rename = "Body")]
    pub body: String,
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
