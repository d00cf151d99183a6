//! Every protocol limit in one place, with compile-time checks between related
//! ones: frames, batches, names, keys, attributes, and the defaults and
//! ranges of queue attributes. Units last in names. The broker's and the
//! client's own limits are tied to these by compile-time checks of theirs.

/// Protocol version spoken by this crate. HELLO carries it; a server refuses
/// versions it does not speak with `UnsupportedVersion`. Version 2 added the
/// HELLO's session timeout, RECEIVE's flag that binds leases to the
/// connection, and `ADVANCE_CLOCK`; version 3, `LIST_QUEUES` in pages
/// ([`crate::frame::flags::LIST_QUEUES_PAGED`]); version 4, a queue's tags
/// and annotations (see [`crate::labels`]); version 5, FIFO queues: a
/// queue's kind and content-based dedup (attribute bits 11 and 12), and a
/// message group id on a SEND entry and on a received message
/// ([`crate::message::GROUP_FLAG`]).
pub const PROTOCOL_VERSION: u16 = 5;
/// The oldest protocol version a server of this crate still speaks: a
/// version-1 HELLO (no session timeout) is answered as before.
pub const PROTOCOL_VERSION_MIN: u16 = 1;

/// Bytes of the length prefix that starts every frame.
pub const FRAME_PREFIX_BYTES: usize = 4;
/// Bytes of the frame header after the length prefix: opcode (u8), flags (u8),
/// request id (u32).
pub const FRAME_HEADER_BYTES: usize = 6;
/// Default largest frame (length prefix included) a server accepts after HELLO.
pub const FRAME_BYTES_MAX_DEFAULT: u32 = 1024 * 1024;
/// Largest frame accepted before HELLO succeeded.
pub const FRAME_BYTES_MAX_BEFORE_HELLO: u32 = 4 * 1024;
/// Hard upper bound for any configured frame limit (64 MiB).
pub const FRAME_BYTES_MAX_LIMIT: u32 = 64 * 1024 * 1024;

/// Entries in one SEND, DELETE or CHANGE VISIBILITY batch, and messages in
/// one RECEIVE or PEEK.
pub const BATCH_ENTRIES_MAX: usize = 1024;

/// Queue names: 1 to 80 of `[A-Za-z0-9_.-]`, with at most one `{tag}`.
pub const QUEUE_NAME_BYTES_MAX: usize = 80;
/// Dedup keys: 1 to 128 bytes.
pub const DEDUP_KEY_BYTES_MAX: usize = 128;
/// Attributes per message.
pub const MESSAGE_ATTRIBUTES_MAX: usize = 16;
/// Bytes of all attribute keys and values of one message together.
pub const MESSAGE_ATTRIBUTES_BYTES_MAX: usize = 4 * 1024;
/// Bytes of an auth token.
pub const AUTH_TOKEN_BYTES_MAX: usize = 1024;
/// Bytes of an error message in an error reply.
pub const ERROR_MESSAGE_BYTES_MAX: usize = 1024;

/// Shortest session timeout a HELLO may ask for (0 asks for none).
pub const SESSION_TIMEOUT_MS_MIN: u32 = 100;
/// Longest session timeout a HELLO may ask for (1 h).
pub const SESSION_TIMEOUT_MS_MAX: u32 = 60 * 60 * 1000;
/// Most one `ADVANCE_CLOCK` moves a manual clock (366 days: past the
/// longest retention, with room).
pub const ADVANCE_CLOCK_MS_MAX: u64 = 366 * 24 * 60 * 60 * 1000;

/// Framing bytes of one SEND entry beyond its body, dedup key and attributes.
pub const SEND_ENTRY_OVERHEAD_BYTES: usize = 10;
/// Framing bytes of one received message beyond its body and attributes.
pub const RECEIVE_ENTRY_OVERHEAD_BYTES: usize = 63;

/// Room a queue's max message size must leave below the frame limit for the
/// frame header, the queue name and the entry framing.
pub const FRAME_RESERVED_BYTES: u32 = 256;

// ----- queue attributes: defaults and ranges -----------------------------------

const SECOND_MS: u32 = 1000;
const MINUTE_MS: u32 = 60 * SECOND_MS;
const HOUR_MS: u32 = 60 * MINUTE_MS;
const DAY_MS: u32 = 24 * HOUR_MS;

/// Default visibility timeout.
pub const VISIBILITY_TIMEOUT_MS_DEFAULT: u32 = 30 * SECOND_MS;
/// Largest visibility timeout (12 h).
pub const VISIBILITY_TIMEOUT_MS_MAX: u32 = 12 * HOUR_MS;
/// Largest delivery delay (15 min).
pub const DELAY_MS_MAX: u32 = 15 * MINUTE_MS;
/// Default retention (4 days).
pub const RETENTION_MS_DEFAULT: u32 = 4 * DAY_MS;
/// Smallest retention (60 s).
pub const RETENTION_MS_MIN: u32 = MINUTE_MS;
/// Largest retention (14 days).
pub const RETENTION_MS_MAX: u32 = 14 * DAY_MS;
/// Default max message size (256 KiB).
pub const MESSAGE_BYTES_MAX_DEFAULT: u32 = 256 * 1024;
/// Largest default receive wait (long poll, 20 s).
pub const RECEIVE_WAIT_MS_MAX: u32 = 20 * SECOND_MS;
/// Largest max receive count of a redrive policy.
pub const MAX_RECEIVES_MAX: u16 = 1000;
/// Largest max depth (2^32).
pub const MAX_DEPTH_MAX: u64 = 1 << 32;
/// Default dedup window (5 min).
pub const DEDUP_WINDOW_MS_DEFAULT: u32 = 5 * MINUTE_MS;
/// Largest dedup window (1 h).
pub const DEDUP_WINDOW_MS_MAX: u32 = HOUR_MS;
/// Smallest backoff base (1 ms).
pub const BACKOFF_BASE_MS_MIN: u32 = 1;
/// Largest backoff base (15 min).
pub const BACKOFF_BASE_MS_MAX: u32 = 15 * MINUTE_MS;
/// Largest backoff max (12 h).
pub const BACKOFF_MAX_MS_MAX: u32 = 12 * HOUR_MS;

// The framing promised per message in a batch: at most 16 bytes per send
// entry and 64 per receive entry beyond body and attributes.
const _: () = assert!(SEND_ENTRY_OVERHEAD_BYTES <= 16);
const _: () = assert!(RECEIVE_ENTRY_OVERHEAD_BYTES <= 64);
const _: () = assert!(FRAME_BYTES_MAX_BEFORE_HELLO <= FRAME_BYTES_MAX_DEFAULT);
const _: () = assert!(PROTOCOL_VERSION_MIN <= PROTOCOL_VERSION);
const _: () =
    assert!(0 < SESSION_TIMEOUT_MS_MIN && SESSION_TIMEOUT_MS_MIN <= SESSION_TIMEOUT_MS_MAX);
const _: () = assert!(ADVANCE_CLOCK_MS_MAX >= RETENTION_MS_MAX as u64);
const _: () = assert!(FRAME_BYTES_MAX_DEFAULT <= FRAME_BYTES_MAX_LIMIT);
const _: () = assert!(BATCH_ENTRIES_MAX <= u16::MAX as usize);
const _: () = assert!(QUEUE_NAME_BYTES_MAX <= u8::MAX as usize);
const _: () = assert!(DEDUP_KEY_BYTES_MAX <= u8::MAX as usize);
const _: () = assert!(MESSAGE_ATTRIBUTES_MAX <= u8::MAX as usize);
const _: () = assert!(MESSAGE_ATTRIBUTES_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(RETENTION_MS_MIN <= RETENTION_MS_DEFAULT);
const _: () = assert!(RETENTION_MS_DEFAULT <= RETENTION_MS_MAX);
const _: () = assert!(VISIBILITY_TIMEOUT_MS_DEFAULT <= VISIBILITY_TIMEOUT_MS_MAX);
const _: () = assert!(DEDUP_WINDOW_MS_DEFAULT <= DEDUP_WINDOW_MS_MAX);
const _: () = assert!(BACKOFF_BASE_MS_MIN <= BACKOFF_BASE_MS_MAX);
const _: () = assert!(BACKOFF_BASE_MS_MAX <= BACKOFF_MAX_MS_MAX);
const _: () = assert!(MESSAGE_BYTES_MAX_DEFAULT <= FRAME_BYTES_MAX_DEFAULT - FRAME_RESERVED_BYTES);
