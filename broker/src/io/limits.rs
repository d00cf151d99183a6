//! Every limit of the io layer in one place: the bounds and defaults of a
//! driver's settings and the batch sizes and waits of the backends. The io
//! layer knows nothing of the protocol; the server's limits
//! (`server/limits.rs`) tie these to its flags. Units last in names.

use std::time::Duration;

// ----- a driver's settings (`DriverConfig`) ----------------------------------------

/// Highest connection slot count a driver supports (24 bits of an io_uring
/// `user_data`).
pub const CONNECTION_SLOTS_LIMIT: u32 = 1 << 24;
/// Default listen backlog.
pub const LISTEN_BACKLOG_DEFAULT: u32 = 1024;
/// Default connections admitted at once.
pub const CONNECTIONS_MAX_DEFAULT: u32 = 10_000;
/// Default connections accepted beyond the maximum only to be refused.
pub const REFUSED_CONNECTIONS_MAX_DEFAULT: u32 = 64;
/// Default bytes of one receive buffer.
pub const RECV_BUFFER_BYTES_DEFAULT: u32 = 16 * 1024;
/// Bounds of a receive buffer.
pub const RECV_BUFFER_BYTES_MIN: u32 = 64;
/// Upper bound of a receive buffer (16 MiB).
pub const RECV_BUFFER_BYTES_MAX: u32 = 1 << 24;
/// Default provided buffers in the io_uring buffer ring.
pub const RECV_BUFFER_COUNT_DEFAULT: u16 = 512;
/// Most provided buffers in the ring.
pub const RECV_BUFFER_COUNT_MAX: u16 = 1 << 15;
/// Most bytes of all provided buffers together (4 GiB).
pub const RECV_BUFFERS_BYTES_MAX: u64 = 1 << 32;
/// Default submission queue entries (io_uring) or events per wait (epoll).
pub const RING_ENTRIES_DEFAULT: u32 = 1024;
/// Bounds of the submission queue.
pub const RING_ENTRIES_MIN: u32 = 8;
/// Upper bound of the submission queue.
pub const RING_ENTRIES_MAX: u32 = 1 << 15;

// ----- the backends -----------------------------------------------------------------

/// Largest number of queued buffers one send (`sendmsg`) gathers.
pub const SEND_IOVECS_MAX: usize = 64;
/// How long accepting pauses after the process or system ran out of file
/// descriptors or memory, so a full table does not spin the shard.
pub const ACCEPT_PAUSE_MS: u64 = 100;
/// Most connections one shedding pass accepts and closes.
pub const SHED_BATCH_MAX: u32 = 64;
/// Bytes read and thrown away from a shed connection before it is closed, so
/// the close is an orderly end (FIN) rather than a reset that could
/// overtake the refusal.
pub const SHED_DRAIN_BYTES: usize = 4096;
/// Reads of one connection per epoll poll before the others get their turn.
pub const READ_BUDGET: u32 = 16;
/// Connections accepted per listener wake-up (epoll) before other work runs.
pub const ACCEPT_BATCH: u32 = 64;
/// Rounds of cancel-and-reap an io_uring driver's drop tries before it
/// leaks.
pub const DRAIN_ROUNDS: u32 = 100;
/// How long one drain round waits for completions.
pub const DRAIN_WAIT: Duration = Duration::from_millis(20);
/// How long the io_uring start-up self-test waits for each completion.
pub const SELF_TEST_WAIT: Duration = Duration::from_secs(2);
/// Receive stash capacity kept for reuse; a larger one is freed once empty.
pub const STASH_KEEP_BYTES: usize = 64 * 1024;

const _: () =
    assert!(CONNECTIONS_MAX_DEFAULT + REFUSED_CONNECTIONS_MAX_DEFAULT <= CONNECTION_SLOTS_LIMIT);
const _: () = assert!(RECV_BUFFER_BYTES_MIN <= RECV_BUFFER_BYTES_DEFAULT);
const _: () = assert!(RECV_BUFFER_BYTES_DEFAULT <= RECV_BUFFER_BYTES_MAX);
const _: () = assert!(RECV_BUFFER_COUNT_DEFAULT.is_power_of_two());
const _: () = assert!(RECV_BUFFER_COUNT_MAX.is_power_of_two());
const _: () = assert!(RECV_BUFFER_COUNT_DEFAULT <= RECV_BUFFER_COUNT_MAX);
const _: () = assert!(
    RECV_BUFFER_BYTES_DEFAULT as u64 * RECV_BUFFER_COUNT_DEFAULT as u64 <= RECV_BUFFERS_BYTES_MAX
);
const _: () = assert!(RING_ENTRIES_MIN <= RING_ENTRIES_DEFAULT);
const _: () = assert!(RING_ENTRIES_DEFAULT <= RING_ENTRIES_MAX);
