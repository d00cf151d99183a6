//! Error codes carried on the wire (in ERROR replies and per-entry results)
//! and the decoder's own errors.

/// A status code on the wire: `0` is success, everything else an error. The
/// numbers are part of the protocol and never change meaning.
///
/// "Closes" says whether the server closes the connection after sending an
/// error reply with this code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The named queue does not exist (or was deleted while a receive waited).
    /// Does not close.
    QueueNotFound = 0x0001,
    /// CREATE named an existing queue with different attributes. Does not close.
    QueueExists = 0x0002,
    /// An argument is out of range or inconsistent; the message names it.
    /// Does not close.
    InvalidArgument = 0x0003,
    /// Body plus attributes exceed the queue's max message size. Does not close.
    MessageTooLarge = 0x0004,
    /// A batch has more than 1,024 entries. Does not close.
    BatchTooLarge = 0x0005,
    /// The queue holds its max depth already. Does not close.
    QueueFull = 0x0006,
    /// The broker's memory budget is spent, or its write-ahead log cannot
    /// be written (a full disk); retry later. Does not close.
    Busy = 0x0007,
    /// The receipt names an older delivery of a message that still exists; the
    /// message is untouched. Does not close.
    StaleReceipt = 0x0008,
    /// The message the receipt names no longer exists. Does not close.
    Gone = 0x0009,
    /// The receipt is malformed, forged, from another queue, from an earlier
    /// incarnation of the queue or from an earlier run. Does not close.
    InvalidReceipt = 0x000A,
    /// Missing or wrong auth token. Closes.
    Unauthorized = 0x000B,
    /// The HELLO asked for a protocol version the server does not speak. Closes.
    UnsupportedVersion = 0x000C,
    /// A frame declared a length above the limit. Closes.
    FrameTooLarge = 0x000D,
    /// A frame could not be decoded. Closes when the framing itself is lost
    /// (bad length prefix); a well-framed request with a bad payload does not.
    Malformed = 0x000E,
    /// The opcode is not one this server knows. Does not close (the frame was
    /// well delimited).
    UnknownOperation = 0x000F,
    /// The first frame was not a HELLO. Closes.
    HelloRequired = 0x0010,
    /// The server is shutting down. Closes.
    ShuttingDown = 0x0011,
    /// The server's connection limit is reached. Closes.
    TooManyConnections = 0x0012,
    /// A bug in the server; the message says what. Does not close.
    Internal = 0x0013,
    /// The server does not offer this request as it is configured
    /// (`ADVANCE_CLOCK` on a server that runs on the real clock); nothing
    /// changed. Does not close. (Protocol version 2.)
    Unsupported = 0x0014,
}

impl ErrorCode {
    /// Every code, in wire order.
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::QueueNotFound,
        ErrorCode::QueueExists,
        ErrorCode::InvalidArgument,
        ErrorCode::MessageTooLarge,
        ErrorCode::BatchTooLarge,
        ErrorCode::QueueFull,
        ErrorCode::Busy,
        ErrorCode::StaleReceipt,
        ErrorCode::Gone,
        ErrorCode::InvalidReceipt,
        ErrorCode::Unauthorized,
        ErrorCode::UnsupportedVersion,
        ErrorCode::FrameTooLarge,
        ErrorCode::Malformed,
        ErrorCode::UnknownOperation,
        ErrorCode::HelloRequired,
        ErrorCode::ShuttingDown,
        ErrorCode::TooManyConnections,
        ErrorCode::Internal,
        ErrorCode::Unsupported,
    ];

    /// The code's wire value.
    #[must_use]
    pub const fn to_u16(self) -> u16 {
        self as u16
    }

    /// The code for a wire value; `None` for 0 (success) and unknown values.
    #[must_use]
    pub fn from_u16(value: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.to_u16() == value)
    }

    /// Whether the server closes the connection after this error.
    #[must_use]
    pub const fn closes_connection(self) -> bool {
        matches!(
            self,
            ErrorCode::Unauthorized
                | ErrorCode::UnsupportedVersion
                | ErrorCode::FrameTooLarge
                | ErrorCode::HelloRequired
                | ErrorCode::ShuttingDown
                | ErrorCode::TooManyConnections
        )
    }

    /// The code's name as written in PROTOCOL.md and printed by the CLI.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ErrorCode::QueueNotFound => "QueueNotFound",
            ErrorCode::QueueExists => "QueueExists",
            ErrorCode::InvalidArgument => "InvalidArgument",
            ErrorCode::MessageTooLarge => "MessageTooLarge",
            ErrorCode::BatchTooLarge => "BatchTooLarge",
            ErrorCode::QueueFull => "QueueFull",
            ErrorCode::Busy => "Busy",
            ErrorCode::StaleReceipt => "StaleReceipt",
            ErrorCode::Gone => "Gone",
            ErrorCode::InvalidReceipt => "InvalidReceipt",
            ErrorCode::Unauthorized => "Unauthorized",
            ErrorCode::UnsupportedVersion => "UnsupportedVersion",
            ErrorCode::FrameTooLarge => "FrameTooLarge",
            ErrorCode::Malformed => "Malformed",
            ErrorCode::UnknownOperation => "UnknownOperation",
            ErrorCode::HelloRequired => "HelloRequired",
            ErrorCode::ShuttingDown => "ShuttingDown",
            ErrorCode::TooManyConnections => "TooManyConnections",
            ErrorCode::Internal => "Internal",
            ErrorCode::Unsupported => "Unsupported",
        }
    }
}

impl core::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// An error code with a human-readable message, as carried by an ERROR reply
/// and by per-entry failures.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct WireError {
    /// What went wrong.
    pub code: ErrorCode,
    /// Details for people, for example the argument that was out of range.
    pub message: String,
}

impl WireError {
    /// A new error with a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        WireError {
            code,
            message: message.into(),
        }
    }
}
