//! What every kind of session (binary, SQS, metrics) tells the shard loop:
//! its commands for the io layer and its phase. A leaf: it names nothing of
//! the server, so the sessions' shared parts (the outbox) depend on it
//! without depending on the binary protocol's session.

use bytes::Bytes;

/// What a session asks of the io layer, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Write these bytes after what is queued.
    Send(Bytes),
    /// Stop (`false`) or resume (`true`) reading the connection.
    SetReading(bool),
    /// Close once everything queued is written.
    Close,
    /// Close at once, dropping what is queued.
    CloseNow,
}

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; the first frame must be a HELLO.
    Hello,
    /// HELLO succeeded: requests are served.
    Ready,
    /// Closing after its last replies are written: nothing more is read or
    /// served.
    Closing,
}
