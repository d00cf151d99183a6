//! What every kind of session (binary, SQS, metrics) tells the shard loop:
//! its commands for the io layer, the questions it asks the server, and its
//! phase. A leaf: it names nothing of
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
    /// Answer this question through the session's `on_answer`: nothing
    /// more of the connection is served until it is answered.
    Ask(Question),
}

/// What a session needs of the server beyond its shard: the shard loop
/// answers at once, after carrying out the commands before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Question {
    /// The `SERVER_STATS` reply.
    ServerStats,
    /// Move the server's manual clock by this many ms (`ADVANCE_CLOCK`).
    AdvanceClock {
        /// How far.
        by_ms: u64,
    },
    /// A HELLO from this peer presented the configured token (`ok`) or
    /// not: how long to hold its `Unauthorized` reply (see
    /// `auth_guard.rs`; 0 after a success).
    AuthOutcome {
        /// Whether the token matched.
        ok: bool,
    },
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
