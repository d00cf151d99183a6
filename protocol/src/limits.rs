//! Every protocol limit in one place, with compile-time checks between related
//! ones. Units last in names.

/// Protocol version spoken by this crate. HELLO carries it; a server refuses
/// versions it does not speak with `UnsupportedVersion`.
pub const PROTOCOL_VERSION: u16 = 1;

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

/// Queue names: `[A-Za-z0-9_.-]{1,80}`.
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

/// Framing bytes of one SEND entry beyond its body, dedup key and attributes.
pub const SEND_ENTRY_OVERHEAD_BYTES: usize = 10;
/// Framing bytes of one received message beyond its body and attributes.
pub const RECEIVE_ENTRY_OVERHEAD_BYTES: usize = 63;

/// Room a queue's max message size must leave below the frame limit for the
/// frame header, the queue name and the entry framing (DESIGN §2).
pub const FRAME_RESERVED_BYTES: u32 = 256;

// DESIGN §4: at most 16 bytes per send entry and 64 per receive entry beyond
// body and attributes.
const _: () = assert!(SEND_ENTRY_OVERHEAD_BYTES <= 16);
const _: () = assert!(RECEIVE_ENTRY_OVERHEAD_BYTES <= 64);
const _: () = assert!(FRAME_BYTES_MAX_BEFORE_HELLO <= FRAME_BYTES_MAX_DEFAULT);
const _: () = assert!(FRAME_BYTES_MAX_DEFAULT <= FRAME_BYTES_MAX_LIMIT);
const _: () = assert!(BATCH_ENTRIES_MAX <= u16::MAX as usize);
const _: () = assert!(QUEUE_NAME_BYTES_MAX <= u8::MAX as usize);
const _: () = assert!(DEDUP_KEY_BYTES_MAX <= u8::MAX as usize);
const _: () = assert!(MESSAGE_ATTRIBUTES_MAX <= u8::MAX as usize);
const _: () = assert!(MESSAGE_ATTRIBUTES_BYTES_MAX <= u16::MAX as usize);
