//! Every limit and default of the client in one place, tied to the
//! protocol's by compile-time checks, so none is restated by hand. Units
//! last in names.

use std::time::Duration;

use sluice_protocol::limits::{
    FRAME_HEADER_BYTES, FRAME_PREFIX_BYTES, QUEUE_NAME_BYTES_MAX,
    RECEIVE_WAIT_MS_MAX as WAIT_MS_MAX, SESSION_TIMEOUT_MS_MAX, SESSION_TIMEOUT_MS_MIN,
};

// ----- connections (`ClientConfig`) ---------------------------------------------

/// The address a client connects to by default.
pub const ADDR_DEFAULT: &str = "127.0.0.1:7171";
/// Default time to connect and complete the HELLO.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// Default time to wait for a reply (a receive adds its wait).
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default first reconnect delay.
pub const RECONNECT_DELAY_INITIAL_DEFAULT: Duration = Duration::from_millis(50);
/// Default cap on the reconnect delay.
pub const RECONNECT_DELAY_MAX_DEFAULT: Duration = Duration::from_secs(5);
/// The longest read spin [`ClientConfig::read_spin`](crate::ClientConfig::read_spin) accepts.
pub const READ_SPIN_MAX: Duration = Duration::from_millis(10);
/// The shortest session timeout a client may ask for (the protocol's).
pub const SESSION_TIMEOUT_MIN: Duration = Duration::from_millis(SESSION_TIMEOUT_MS_MIN as u64);
/// The longest session timeout a client may ask for (the protocol's: 1 h).
pub const SESSION_TIMEOUT_MAX: Duration = Duration::from_millis(SESSION_TIMEOUT_MS_MAX as u64);
/// A client with a session timeout sends a PING when it has sent nothing
/// for this fraction of it: with the server checking silence every
/// 250 ms at most, a quarter leaves room for a PING delayed by a busy
/// machine.
pub const HEARTBEAT_FRACTION: u32 = 4;

/// The longest a RECEIVE may wait on the server (the protocol's maximum):
/// a request's timeout allows for it when the wait is the queue's default,
/// which the client does not know.
pub const RECEIVE_WAIT_MAX: Duration = Duration::from_millis(WAIT_MS_MAX as u64);

// ----- consumers -------------------------------------------------------------------

/// Default number of handlers running at once.
pub const CONCURRENCY_DEFAULT: usize = 4;
/// Default lease the consumer asks for on each receive.
pub const VISIBILITY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default longest time a handler's lease is extended.
pub const MAX_PROCESSING_DEFAULT: Duration = Duration::from_secs(15 * 60);
/// Default long-poll wait of the consumer's receives (also the longest a
/// stop waits for a receive in flight).
pub const POLL_WAIT_DEFAULT: Duration = Duration::from_secs(1);
/// The longest a blocking consumer's keeper sleeps before looking at the
/// stop flag again.
pub const KEEPER_TICK: Duration = Duration::from_millis(50);

// ----- producers -------------------------------------------------------------------

/// Default longest wait for more messages before a batch is sent.
pub const LINGER_DEFAULT: Duration = Duration::from_millis(1);
/// Default most messages per batch.
pub const BATCH_MAX_DEFAULT: usize = 256;
/// Default batches in flight at once (async producer).
pub const IN_FLIGHT_DEFAULT: usize = 4;
/// Messages waiting to be batched before callers wait too.
pub const QUEUED_MAX: usize = 16 * 1024;
/// Frame bytes kept for a SEND's prefix, header, queue name (its length
/// byte and the longest name) and entry count.
pub const SEND_FRAME_OVERHEAD_BYTES: usize =
    FRAME_PREFIX_BYTES + FRAME_HEADER_BYTES + 1 + QUEUE_NAME_BYTES_MAX + 2;

const _: () = assert!(POLL_WAIT_DEFAULT.as_millis() <= RECEIVE_WAIT_MAX.as_millis());
const _: () = assert!(
    BATCH_MAX_DEFAULT <= sluice_protocol::limits::BATCH_ENTRIES_MAX,
    "a default batch the server takes"
);
const _: () = assert!(QUEUED_MAX >= BATCH_MAX_DEFAULT);
