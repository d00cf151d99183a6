//! The client's error type: one variant per protocol error code, plus what
//! can go wrong on the client's side (connecting, I/O, time-outs, a lost
//! connection, a server that breaks the protocol).

use std::sync::Arc;
use std::time::Duration;

use sluice_protocol::{ErrorCode, WireError};

/// Why a request, or one entry of a batch, failed.
///
/// The first group mirrors the protocol's error codes (PROTOCOL.md §6); each
/// carries the server's message (empty for a per-entry status, which has
/// none). The rest are the client's own. Every error displays as its
/// [name](Error::name), a colon and a description, for example
/// `StaleReceipt: the receipt is from an older delivery`.
///
/// Errors are cheap to clone, so one failure can be handed to every request
/// it concerns.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The queue does not exist, or was deleted while a receive waited.
    #[error("QueueNotFound: {}", or_default(.0, ErrorCode::QueueNotFound))]
    QueueNotFound(String),
    /// A create named an existing queue with different attributes.
    #[error("QueueExists: {}", or_default(.0, ErrorCode::QueueExists))]
    QueueExists(String),
    /// An argument is out of range or inconsistent; the message names it.
    #[error("InvalidArgument: {}", or_default(.0, ErrorCode::InvalidArgument))]
    InvalidArgument(String),
    /// Body and attributes are above the queue's max message size.
    #[error("MessageTooLarge: {}", or_default(.0, ErrorCode::MessageTooLarge))]
    MessageTooLarge(String),
    /// A batch of more than 1,024 entries.
    #[error("BatchTooLarge: {}", or_default(.0, ErrorCode::BatchTooLarge))]
    BatchTooLarge(String),
    /// The queue holds its max depth.
    #[error("QueueFull: {}", or_default(.0, ErrorCode::QueueFull))]
    QueueFull(String),
    /// The broker's memory budget is spent: retry later.
    #[error("Busy: {}", or_default(.0, ErrorCode::Busy))]
    Busy(String),
    /// The receipt is from an older delivery of a message that still exists;
    /// the message is untouched.
    #[error("StaleReceipt: {}", or_default(.0, ErrorCode::StaleReceipt))]
    StaleReceipt(String),
    /// The message the receipt names no longer exists.
    #[error("Gone: {}", or_default(.0, ErrorCode::Gone))]
    Gone(String),
    /// The receipt is malformed, forged, or from another queue, incarnation
    /// or run of the broker.
    #[error("InvalidReceipt: {}", or_default(.0, ErrorCode::InvalidReceipt))]
    InvalidReceipt(String),
    /// Missing or wrong auth token (the server closed the connection).
    #[error("Unauthorized: {}", or_default(.0, ErrorCode::Unauthorized))]
    Unauthorized(String),
    /// The server does not speak this client's protocol version.
    #[error("UnsupportedVersion: {}", or_default(.0, ErrorCode::UnsupportedVersion))]
    UnsupportedVersion(String),
    /// A frame was above the server's limit (the server closed the
    /// connection).
    #[error("FrameTooLarge: {}", or_default(.0, ErrorCode::FrameTooLarge))]
    FrameTooLarge(String),
    /// The server could not parse the request.
    #[error("Malformed: {}", or_default(.0, ErrorCode::Malformed))]
    Malformed(String),
    /// The server does not know the operation.
    #[error("UnknownOperation: {}", or_default(.0, ErrorCode::UnknownOperation))]
    UnknownOperation(String),
    /// The server saw a request before HELLO.
    #[error("HelloRequired: {}", or_default(.0, ErrorCode::HelloRequired))]
    HelloRequired(String),
    /// The server is shutting down (it closes the connection).
    #[error("ShuttingDown: {}", or_default(.0, ErrorCode::ShuttingDown))]
    ShuttingDown(String),
    /// The server is at its connection limit.
    #[error("TooManyConnections: {}", or_default(.0, ErrorCode::TooManyConnections))]
    TooManyConnections(String),
    /// A bug in the server.
    #[error("Internal: {}", or_default(.0, ErrorCode::Internal))]
    Internal(String),
    /// The server does not offer the request as it is configured
    /// (`advance_clock` on a server running on the real clock); nothing
    /// changed.
    #[error("Unsupported: {}", or_default(.0, ErrorCode::Unsupported))]
    Unsupported(String),
    /// A code this client does not know (a newer server).
    #[error("{code}: {message}")]
    Other {
        /// The code.
        code: ErrorCode,
        /// The server's message.
        message: String,
    },

    /// No connection could be made (or its HELLO failed at the socket
    /// level). Nothing was sent.
    #[error("Connect: {addr}: {source}")]
    Connect {
        /// The address tried.
        addr: String,
        /// Why.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// TLS with the server could not be set up, for a reason that does not
    /// go away by itself: the server's certificate was refused (a CA
    /// certificate presented as the server's own, a CA this client does not
    /// trust, another name, out of its validity period), the server refused
    /// this client's certificate, the two share no TLS version or cipher
    /// suite, or the port does not speak TLS. The message says which and
    /// how to fix it. Nothing was sent.
    #[error("Tls: {addr}: {message}")]
    Tls {
        /// The address tried.
        addr: String,
        /// What failed, and the fix.
        message: String,
    },
    /// Reading or writing the connection failed: it is closed, and requests
    /// in flight on it may or may not have taken effect.
    #[error("Io: {0}")]
    Io(#[source] Arc<std::io::Error>),
    /// No reply within the request's time-out. The request may or may not
    /// have taken effect.
    #[error("Timeout: no reply within {0:?}")]
    Timeout(Duration),
    /// The connection dropped while the request was in flight (or before it
    /// could be written). A send may or may not have happened: delivery is
    /// at-least-once, so retrying may duplicate it (use a dedup key).
    #[error("Disconnected: {0}")]
    Disconnected(String),
    /// The server broke the protocol (an unexpected or undecodable reply).
    #[error("Protocol: {0}")]
    Protocol(String),
    /// The client (or the helper that owned the request) was shut down.
    #[error("Closed: the client was shut down")]
    Closed,
}

fn or_default(message: &str, code: ErrorCode) -> &str {
    if message.is_empty() {
        describe(code)
    } else {
        message
    }
}

/// A description of a code, for per-entry statuses that carry no message.
fn describe(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::QueueNotFound => "the queue does not exist",
        ErrorCode::QueueExists => "the queue exists with different attributes",
        ErrorCode::InvalidArgument => "an argument is out of range",
        ErrorCode::MessageTooLarge => "body and attributes are above the queue's max message size",
        ErrorCode::BatchTooLarge => "more than 1,024 entries",
        ErrorCode::QueueFull => "the queue holds its max depth",
        ErrorCode::Busy => "the broker's memory budget is spent: retry later",
        ErrorCode::StaleReceipt => "the receipt is from an older delivery",
        ErrorCode::Gone => "the message no longer exists",
        ErrorCode::InvalidReceipt => {
            "the receipt is malformed, or from another queue, incarnation or run"
        }
        ErrorCode::Unauthorized => "missing or wrong auth token",
        ErrorCode::UnsupportedVersion => "unsupported protocol version",
        ErrorCode::FrameTooLarge => "frame above the limit",
        ErrorCode::Malformed => "malformed request",
        ErrorCode::UnknownOperation => "unknown operation",
        ErrorCode::HelloRequired => "HELLO required first",
        ErrorCode::ShuttingDown => "the server is shutting down",
        ErrorCode::TooManyConnections => "the server's connection limit is reached",
        ErrorCode::Internal => "a bug in the server",
        ErrorCode::Unsupported => "the server does not offer this request as it is configured",
        _ => "unknown error",
    }
}

impl Error {
    /// The connect time-out ran out at `addr` while `during`: said so, with
    /// how long it was (a read time-out itself reports only "Resource
    /// temporarily unavailable").
    pub(crate) fn connect_timed_out(addr: &str, timeout: Duration, during: &str) -> Error {
        Error::Connect {
            addr: addr.to_owned(),
            source: Arc::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "timed out after {} (the connect time-out) {during}: is the server \
                     stopped or overloaded?",
                    sluice_protocol::units::format_duration(timeout)
                ),
            )),
        }
    }

    /// The error for a protocol code and the server's message.
    #[must_use]
    pub fn from_code(code: ErrorCode, message: impl Into<String>) -> Error {
        let m = message.into();
        match code {
            ErrorCode::QueueNotFound => Error::QueueNotFound(m),
            ErrorCode::QueueExists => Error::QueueExists(m),
            ErrorCode::InvalidArgument => Error::InvalidArgument(m),
            ErrorCode::MessageTooLarge => Error::MessageTooLarge(m),
            ErrorCode::BatchTooLarge => Error::BatchTooLarge(m),
            ErrorCode::QueueFull => Error::QueueFull(m),
            ErrorCode::Busy => Error::Busy(m),
            ErrorCode::StaleReceipt => Error::StaleReceipt(m),
            ErrorCode::Gone => Error::Gone(m),
            ErrorCode::InvalidReceipt => Error::InvalidReceipt(m),
            ErrorCode::Unauthorized => Error::Unauthorized(m),
            ErrorCode::UnsupportedVersion => Error::UnsupportedVersion(m),
            ErrorCode::FrameTooLarge => Error::FrameTooLarge(m),
            ErrorCode::Malformed => Error::Malformed(m),
            ErrorCode::UnknownOperation => Error::UnknownOperation(m),
            ErrorCode::HelloRequired => Error::HelloRequired(m),
            ErrorCode::ShuttingDown => Error::ShuttingDown(m),
            ErrorCode::TooManyConnections => Error::TooManyConnections(m),
            ErrorCode::Internal => Error::Internal(m),
            ErrorCode::Unsupported => Error::Unsupported(m),
            code => Error::Other { code, message: m },
        }
    }

    /// The protocol code of a server-reported error; `None` for the client's
    /// own errors.
    #[must_use]
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            Error::QueueNotFound(_) => ErrorCode::QueueNotFound,
            Error::QueueExists(_) => ErrorCode::QueueExists,
            Error::InvalidArgument(_) => ErrorCode::InvalidArgument,
            Error::MessageTooLarge(_) => ErrorCode::MessageTooLarge,
            Error::BatchTooLarge(_) => ErrorCode::BatchTooLarge,
            Error::QueueFull(_) => ErrorCode::QueueFull,
            Error::Busy(_) => ErrorCode::Busy,
            Error::StaleReceipt(_) => ErrorCode::StaleReceipt,
            Error::Gone(_) => ErrorCode::Gone,
            Error::InvalidReceipt(_) => ErrorCode::InvalidReceipt,
            Error::Unauthorized(_) => ErrorCode::Unauthorized,
            Error::UnsupportedVersion(_) => ErrorCode::UnsupportedVersion,
            Error::FrameTooLarge(_) => ErrorCode::FrameTooLarge,
            Error::Malformed(_) => ErrorCode::Malformed,
            Error::UnknownOperation(_) => ErrorCode::UnknownOperation,
            Error::HelloRequired(_) => ErrorCode::HelloRequired,
            Error::ShuttingDown(_) => ErrorCode::ShuttingDown,
            Error::TooManyConnections(_) => ErrorCode::TooManyConnections,
            Error::Internal(_) => ErrorCode::Internal,
            Error::Unsupported(_) => ErrorCode::Unsupported,
            Error::Other { code, .. } => *code,
            Error::Connect { .. }
            | Error::Tls { .. }
            | Error::Io(_)
            | Error::Timeout(_)
            | Error::Disconnected(_)
            | Error::Protocol(_)
            | Error::Closed => return None,
        })
    }

    /// The error's name: the protocol code's name (`StaleReceipt`) or the
    /// client-side kind (`Connect`, `Tls`, `Io`, `Timeout`, `Disconnected`,
    /// `Protocol`, `Closed`). Every [`Display`](std::fmt::Display) form
    /// starts with it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        if let Some(code) = self.code() {
            return code.name();
        }
        match self {
            Error::Connect { .. } => "Connect",
            Error::Tls { .. } => "Tls",
            Error::Io(_) => "Io",
            Error::Timeout(_) => "Timeout",
            Error::Disconnected(_) => "Disconnected",
            Error::Protocol(_) => "Protocol",
            _ => "Closed",
        }
    }

    /// Whether the connection was lost or could not be made: the request
    /// may or may not have taken effect (except for `Connect` and `Tls`,
    /// where nothing was sent), and a later request reconnects.
    #[must_use]
    pub fn is_disconnect(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::Tls { .. } | Error::Io(_) | Error::Disconnected(_) => {
                true
            }
            other => other.code().is_some_and(ErrorCode::closes_connection),
        }
    }

    /// Whether trying the same request again later may succeed: the
    /// broker was busy or the queue full (`Busy`, `QueueFull`), no reply
    /// came in time (`Timeout`), or the connection could not be made or
    /// was lost (`Connect`, `Io`, `Disconnected`), or the server closed it
    /// because it is shutting down or at its connection limit
    /// (`ShuttingDown`, `TooManyConnections`). Every other error is
    /// permanent for that request (a bad argument, a missing queue, a lost
    /// lease, a refused token, a TLS set-up that failed (`Tls`: a refused
    /// certificate does not become acceptable by itself), a protocol
    /// failure, a closed client).
    ///
    /// A retried send may be delivered twice when the first attempt took
    /// effect before the error (`Timeout` and the disconnect class): give it
    /// a dedup key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluice_client::Error;
    ///
    /// assert!(Error::Busy(String::new()).is_retryable());
    /// assert!(Error::Timeout(Duration::from_secs(30)).is_retryable());
    /// assert!(!Error::QueueNotFound(String::new()).is_retryable());
    /// assert!(!Error::Unauthorized(String::new()).is_retryable());
    /// ```
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Busy(_)
                | Error::QueueFull(_)
                | Error::Timeout(_)
                | Error::Connect { .. }
                | Error::Io(_)
                | Error::Disconnected(_)
                | Error::ShuttingDown(_)
                | Error::TooManyConnections(_)
        )
    }

    /// Whether the lease a receipt named is lost: `StaleReceipt` (someone
    /// received the message since), `Gone` (it was deleted, dead-lettered,
    /// purged or dropped) or `InvalidReceipt` (its queue was deleted).
    #[must_use]
    pub fn is_lease_lost(&self) -> bool {
        matches!(
            self,
            Error::StaleReceipt(_) | Error::Gone(_) | Error::InvalidReceipt(_)
        )
    }

    pub(crate) fn io(err: std::io::Error) -> Error {
        Error::Io(Arc::new(err))
    }
}

impl From<WireError> for Error {
    fn from(err: WireError) -> Error {
        Error::from_code(err.code, err.message)
    }
}

/// The result of a client operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_displays_its_name() {
        for code in ErrorCode::ALL {
            let err = Error::from_code(code, "");
            assert_eq!(err.code(), Some(code));
            assert_eq!(err.name(), code.name());
            let shown = err.to_string();
            assert!(shown.starts_with(&format!("{}: ", code.name())), "{shown}");
            assert!(
                shown.len() > code.name().len() + 2,
                "a description: {shown}"
            );
            let with_message = Error::from_code(code, "queue not found: q");
            assert_eq!(
                with_message.to_string(),
                format!("{}: queue not found: q", code.name())
            );
        }
    }

    #[test]
    fn client_side_errors_are_named() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = Error::Connect {
            addr: "127.0.0.1:1".into(),
            source: Arc::new(refused),
        };
        assert_eq!(err.name(), "Connect");
        assert!(err.to_string().starts_with("Connect: 127.0.0.1:1: "));
        assert!(err.is_disconnect());
        assert!(Error::Disconnected("eof".into()).is_disconnect());
        assert!(Error::ShuttingDown(String::new()).is_disconnect());
        assert!(!Error::Timeout(Duration::from_secs(1)).is_disconnect());
        assert!(!Error::StaleReceipt(String::new()).is_disconnect());
        assert_eq!(Error::Timeout(Duration::from_secs(1)).name(), "Timeout");
        assert_eq!(Error::Closed.name(), "Closed");
        assert_eq!(Error::Protocol("x".into()).code(), None);
    }

    #[test]
    fn retryable_errors_are_the_transient_ones() {
        let io = || Arc::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        let retryable = [
            Error::Busy(String::new()),
            Error::QueueFull(String::new()),
            Error::Timeout(Duration::from_secs(1)),
            Error::Connect {
                addr: "a:1".into(),
                source: io(),
            },
            Error::Io(io()),
            Error::Disconnected(String::new()),
            Error::ShuttingDown(String::new()),
            Error::TooManyConnections(String::new()),
        ];
        for err in retryable {
            assert!(err.is_retryable(), "{err}");
        }
        let retryable_codes = [
            ErrorCode::Busy,
            ErrorCode::QueueFull,
            ErrorCode::ShuttingDown,
            ErrorCode::TooManyConnections,
        ];
        for code in ErrorCode::ALL {
            let err = Error::from_code(code, "");
            assert_eq!(err.is_retryable(), retryable_codes.contains(&code), "{err}");
        }
        assert!(!Error::Protocol(String::new()).is_retryable());
        assert!(!Error::Closed.is_retryable());
        let tls = Error::Tls {
            addr: "a:1".into(),
            message: "the server's certificate is a CA certificate".into(),
        };
        assert!(!tls.is_retryable(), "{tls}");
        assert!(tls.is_disconnect());
        assert_eq!(tls.name(), "Tls");
        assert!(tls.to_string().starts_with("Tls: a:1: "), "{tls}");
    }

    #[test]
    fn lease_loss_is_stale_gone_or_invalid() {
        assert!(Error::StaleReceipt(String::new()).is_lease_lost());
        assert!(Error::Gone(String::new()).is_lease_lost());
        assert!(Error::InvalidReceipt(String::new()).is_lease_lost());
        assert!(!Error::Busy(String::new()).is_lease_lost());
        assert!(!Error::Disconnected(String::new()).is_lease_lost());
    }
}
