//! SQS's errors in the AWS JSON 1.0 protocol: a `__type` naming the error,
//! a message, the HTTP status, and the `x-amzn-query-error` header carrying
//! the query protocol's code (`AWS.SimpleQueueService.NonExistentQueue;Sender`)
//! that the SDKs in query-compatible mode read.

use sluice_protocol::{ErrorCode, WireError};

/// One SQS error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SqsError {
    /// The error's name in the JSON protocol (`QueueDoesNotExist`).
    pub name: &'static str,
    /// For people.
    pub message: String,
}

/// (JSON name, query protocol code, HTTP status, whether the sender is at
/// fault). Names not in the table are their own query code, 400, sender.
const TABLE: &[(&str, &str, u16, bool)] = &[
    (
        "QueueDoesNotExist",
        "AWS.SimpleQueueService.NonExistentQueue",
        400,
        true,
    ),
    ("QueueNameExists", "QueueAlreadyExists", 400, true),
    ("InvalidClientTokenId", "InvalidClientTokenId", 403, true),
    ("SignatureDoesNotMatch", "SignatureDoesNotMatch", 403, true),
    (
        "MissingAuthenticationToken",
        "MissingAuthenticationToken",
        403,
        true,
    ),
    (
        "TooManyEntriesInBatchRequest",
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        400,
        true,
    ),
    (
        "EmptyBatchRequest",
        "AWS.SimpleQueueService.EmptyBatchRequest",
        400,
        true,
    ),
    (
        "BatchEntryIdsNotDistinct",
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        400,
        true,
    ),
    (
        "BatchRequestTooLong",
        "AWS.SimpleQueueService.BatchRequestTooLong",
        400,
        true,
    ),
    (
        "InvalidBatchEntryId",
        "AWS.SimpleQueueService.InvalidBatchEntryId",
        400,
        true,
    ),
    (
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        400,
        true,
    ),
    (
        "UnsupportedOperation",
        "AWS.SimpleQueueService.UnsupportedOperation",
        400,
        true,
    ),
    ("OverLimit", "OverLimit", 403, true),
    (
        "ResourceNotFoundException",
        "ResourceNotFoundException",
        404,
        true,
    ),
    ("InternalError", "InternalError", 500, false),
];

impl SqsError {
    /// The error `name` with `message`.
    pub fn new(name: &'static str, message: impl Into<String>) -> SqsError {
        SqsError {
            name,
            message: message.into(),
        }
    }

    /// `InvalidParameterValue`.
    pub fn invalid(message: impl Into<String>) -> SqsError {
        SqsError::new("InvalidParameterValue", message)
    }

    /// `MissingParameter` for `param`.
    pub fn missing(param: &str) -> SqsError {
        SqsError::new(
            "MissingParameter",
            format!("The request must contain the parameter {param}."),
        )
    }

    /// `SerializationException`: a body that is not the JSON the action
    /// takes.
    pub fn serialization(message: impl Into<String>) -> SqsError {
        SqsError::new("SerializationException", message)
    }

    /// `QueueDoesNotExist`.
    pub fn no_queue() -> SqsError {
        SqsError::new(
            "QueueDoesNotExist",
            "The specified queue does not exist for this wsdl version.",
        )
    }

    fn entry(&self) -> (&'static str, u16, bool) {
        TABLE
            .iter()
            .find(|(n, ..)| *n == self.name)
            .map_or((self.name, 400, true), |&(_, q, s, f)| (q, s, f))
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.entry().1
    }

    /// Whether the sender is at fault (`SenderFault` of a batch entry).
    pub fn sender_fault(&self) -> bool {
        self.entry().2
    }

    /// The query protocol's code (`AWS.SimpleQueueService.NonExistentQueue`).
    pub fn query_code(&self) -> &'static str {
        self.entry().0
    }

    /// The `x-amzn-query-error` header's value.
    pub fn query_error(&self) -> String {
        let (code, _, sender) = self.entry();
        format!("{code};{}", if sender { "Sender" } else { "Receiver" })
    }

    /// The `__type` of the JSON body.
    pub fn json_type(&self) -> String {
        let namespace = if self.name == "SerializationException" {
            "com.amazon.coral.service"
        } else {
            "com.amazonaws.sqs"
        };
        format!("{namespace}#{}", self.name)
    }

    /// The SQS error for the engine's `e` to a request about messages
    /// (`attributes`: to a CREATE or SET, whose bad values are
    /// `InvalidAttributeValue`).
    pub fn from_engine(e: &WireError, attributes: bool) -> SqsError {
        SqsError::from_code(e.code, &e.message, attributes)
    }

    /// As [`SqsError::from_engine`] for a bare code (a batch entry's).
    pub fn from_code(code: ErrorCode, detail: &str, attributes: bool) -> SqsError {
        match code {
            ErrorCode::QueueNotFound => SqsError::no_queue(),
            ErrorCode::QueueExists => SqsError::new(
                "QueueNameExists",
                "A queue already exists with the same name and a different value for an attribute.",
            ),
            ErrorCode::InvalidArgument if attributes => SqsError::new(
                "InvalidAttributeValue",
                format!("Invalid value for an attribute: {detail}"),
            ),
            ErrorCode::InvalidArgument => SqsError::invalid(detail.to_owned()),
            ErrorCode::MessageTooLarge => SqsError::invalid(
                "One or more parameters are invalid. Reason: Message must be shorter than the queue's MaximumMessageSize.",
            ),
            ErrorCode::BatchTooLarge => SqsError::new(
                "TooManyEntriesInBatchRequest",
                "Maximum number of entries per request are 10.",
            ),
            ErrorCode::QueueFull => {
                SqsError::new("OverLimit", "The queue holds its maximum depth.")
            }
            ErrorCode::Busy if detail.is_empty() => SqsError::new(
                "RequestThrottled",
                "The broker cannot take this now (its memory budget is spent, or its \
                 write-ahead log cannot be written); retry later.",
            ),
            ErrorCode::Busy => SqsError::new("RequestThrottled", detail.to_owned()),
            ErrorCode::InvalidReceipt => SqsError::new(
                "ReceiptHandleIsInvalid",
                "The input receipt handle is invalid.",
            ),
            ErrorCode::StaleReceipt => SqsError::invalid(
                "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
            ),
            ErrorCode::Gone => SqsError::new(
                "MessageNotInflight",
                "The message referred to is not in flight.",
            ),
            other => SqsError::new("InternalError", format!("engine: {other}: {detail}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Busy` is SQS's throttling, and says why when the engine did: a
    /// spent memory budget and a full disk read differently.
    #[test]
    fn busy_is_throttling_with_its_reason() {
        let disk = WireError {
            code: ErrorCode::Busy,
            message: "this shard's log cannot be written (No space left on device)".into(),
        };
        let e = SqsError::from_engine(&disk, false);
        assert_eq!(e.name, "RequestThrottled");
        assert!(e.message.contains("No space left on device"), "{e:?}");
        let entry = SqsError::from_code(ErrorCode::Busy, "", false);
        assert_eq!(entry.name, "RequestThrottled");
        assert!(entry.message.contains("retry later"), "{entry:?}");
    }
}
