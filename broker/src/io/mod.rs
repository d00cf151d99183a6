//! The io layer: bytes and completions only.
//!
//! It moves bytes between TCP connections and its caller and knows nothing of
//! the protocol or the engine. One [`Driver`] runs on each shard thread
//! (single-threaded: a driver is created on the thread that polls it and never
//! leaves it); two backends sit behind the one contract:
//!
//! - [`Backend::IoUring`] (`uring/`): multishot accept, multishot receive
//!   into a provided buffer ring, batched submissions, single issuer and
//!   deferred task running where the kernel has them;
//! - [`Backend::Epoll`] (`epoll.rs`): the fallback for kernels or sandboxes
//!   (seccomp profiles, `io_uring_disabled`) without a usable io_uring.
//!
//! [`open`] picks one: [`BackendChoice::Auto`] tries io_uring and falls back
//! to epoll, returning why (the server logs it once); a forced choice fails
//! rather than fall back.
//!
//! # The contract
//!
//! [`Driver::poll`] waits for completions and hands each [`Event`] to a
//! callback together with [`Connections`], the connection table, through which the
//! callback (or the caller between polls, via [`Driver::connections_mut`]) queues
//! sends, closes connections and pauses reading. Received bytes are lent as
//! a slice for the duration of the callback only, so the buffer they sit in
//! goes straight back to the kernel; a caller that needs them later copies
//! them. Sends take [`bytes::Bytes`], which the driver owns until the kernel
//! has written them.
//!
//! Every connection gets exactly one [`Event::Accepted`] or
//! [`Event::Refused`] and, later, exactly one [`Event::Closed`]; after that
//! its [`ConnId`] is stale and every operation on it is a harmless no-op
//! (ids carry a generation, so a reused slot never answers to an old id).
//! Data of one connection arrives in order; an end of stream is reported only
//! after every byte before it has been delivered.
//!
//! # Accepting: a `SO_REUSEPORT` listener per shard
//!
//! Each shard's driver binds its own listening socket on the same address
//! with `SO_REUSEPORT`, and the kernel spreads incoming connections over them
//! by a hash of the connection's addresses and ports. We chose this over one
//! acceptor thread handing sockets to the shards because:
//!
//! - it keeps the shards shared-nothing: no cross-thread hand-off, no extra
//!   wake-up and no extra hop on the accept path, and each shard's io_uring
//!   owns its listener outright, so accept is one more multishot operation on
//!   the shard's own ring;
//! - the kernel's spreading is cheap and good for many connections, which is
//!   the case that matters for load.
//!
//! The costs we accept: with few connections the spread can be uneven (a
//! hash, not a balancer), and connections still waiting in one shard's
//! accept queue are reset if that shard closes its listener (for instance
//! when it stops accepting at shutdown). With port 0 the first shard binds
//! port 0 and the others bind the port it got ([`Driver::local_addr`]).
//! `reuse_port: false` gives a plain exclusive listener for a single shard.
//!
//! `SO_REUSEPORT` lets any process of the same user join the group and take
//! a share of the connections, so the server first checks that no process
//! listens on each port it will bind (a listener bound without it fails
//! there; `server/start.rs`, `check_ports_free`), and a second broker on a
//! port is refused.
//!
//! A driver may have several listeners (the binary port and the SQS door):
//! [`DriverConfig::listen`] and up to three [`DriverConfig::more_listeners`],
//! each with its own refusal reply. They share the driver's connection
//! limits, and each accept event names its [`ListenerId`], so the caller
//! knows which protocol a connection speaks.
//!
//! Accepted sockets get `TCP_NODELAY`. Each driver admits at most
//! [`DriverConfig::connections_max`] connections; past that it accepts up to
//! [`DriverConfig::refused_connections_max`] more only to refuse them
//! ([`Event::Refused`]: the caller may queue an error frame, then the driver
//! flushes it and closes the connection; or read it first, and close it
//! itself), and closes any further ones at once.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use crate::sync::Arc;

#[allow(unsafe_code)]
mod buf_ring;
mod connections;
mod epoll;
pub mod limits;
mod reserve;
#[allow(unsafe_code)]
mod sys;
#[allow(unsafe_code)]
mod uring;
mod waker;

pub use connections::Connections;
pub use limits::SHED_BATCH_MAX;
pub use waker::Waker;

pub use limits::{ACCEPT_PAUSE_MS, CONNECTION_SLOTS_LIMIT, SEND_IOVECS_MAX};
use limits::{
    CONNECTIONS_MAX_DEFAULT, LISTEN_BACKLOG_DEFAULT, RECV_BUFFER_BYTES_DEFAULT,
    RECV_BUFFER_BYTES_MAX, RECV_BUFFER_BYTES_MIN, RECV_BUFFER_COUNT_DEFAULT, RECV_BUFFER_COUNT_MAX,
    RECV_BUFFERS_BYTES_MAX, REFUSED_CONNECTIONS_MAX_DEFAULT, RING_ENTRIES_DEFAULT,
    RING_ENTRIES_MAX, RING_ENTRIES_MIN,
};

/// Takes an exclusive advisory lock (`flock`) on `file` without waiting:
/// `Ok(false)` when another open file, in this process or another, holds
/// it. The lock lasts while the descriptor is open.
///
/// # Errors
/// The kernel's, other than "held".
pub fn try_lock_exclusive(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    sys::try_lock_exclusive(file.as_raw_fd())
}

/// A connection of one driver: a slot index and that slot's generation.
///
/// A slot is reused once its connection has closed and its generation then
/// moves on, so an id kept past its [`Event::Closed`] matches nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ConnId {
    index: u32,
    generation: u32,
}

impl ConnId {
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        Self { index, generation }
    }

    /// The slot index, below `connections_max + refused_connections_max`:
    /// callers can keep per-connection state in a table indexed by it.
    pub fn index(self) -> u32 {
        self.index
    }

    /// The slot's generation when this connection was accepted.
    pub fn generation(self) -> u32 {
        self.generation
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.index, self.generation)
    }
}

/// Which of a driver's listeners accepted a connection: 0 is
/// [`DriverConfig::listen`], 1 and on the [`DriverConfig::more_listeners`]
/// in order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ListenerId(pub u8);

/// A listener beside the first ([`DriverConfig::more_listeners`]).
#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// Address to listen on; port 0 picks one (see [`Driver::listener_addr`]).
    pub addr: SocketAddr,
    /// Written to each connection of this listener refused because the
    /// process is out of file descriptors (see [`Event::AcceptFailed`]).
    pub shed_reply: Arc<[u8]>,
}

/// What a [`Driver::poll`] reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// A new connection, admitted; reading starts after the callback returns
    /// (unless the callback pauses it).
    Accepted {
        /// Its id.
        conn: ConnId,
        /// The peer's address.
        peer: SocketAddr,
        /// The listener that accepted it.
        listener: ListenerId,
    },
    /// A new connection over [`DriverConfig::connections_max`]. It is not
    /// read: what the callback sends (an error frame) is flushed, then the
    /// driver closes it and reports [`Event::Closed`]. A callback that
    /// resumes reading it ([`Connections::set_reading`], for a TLS
    /// handshake before the error frame) gets its data and closes it
    /// itself, as any other connection.
    Refused {
        /// Its id.
        conn: ConnId,
        /// The peer's address.
        peer: SocketAddr,
        /// The listener that accepted it.
        listener: ListenerId,
    },
    /// Bytes received on a connection, lent for the callback only.
    Data {
        /// The connection.
        conn: ConnId,
        /// The bytes, never empty.
        bytes: &'a [u8],
    },
    /// The connection is gone for the caller: the peer ended the stream
    /// (`error: None`), an error broke it, or the caller closed it and the
    /// close completed. Its id is stale from now on. When the peer ended the
    /// stream, sends still queued are dropped and the socket is closed at
    /// once (as Redis does): a peer that half-closes and never reads could
    /// otherwise hold the connection forever, and no id is left to close it
    /// with. Clients read their replies before they close.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why, if it was not an orderly end.
        error: Option<io::Error>,
    },
    /// Another thread called [`Waker::wake`]. Several wakes may coalesce
    /// into one event, which comes after all of them.
    Woken,
    /// Accepting failed for lack of file descriptors (`EMFILE`, `ENFILE`)
    /// or kernel memory (`ENOBUFS`, `ENOMEM`). The driver pauses accepting
    /// for [`ACCEPT_PAUSE_MS`]; the connections it has go on. Out of
    /// descriptors, it first refused what was waiting in the backlog with
    /// its reserve descriptor ([`DriverConfig::shed_reply`]); `shed` counts
    /// those connections (they get no other event).
    AcceptFailed {
        /// What accept said.
        error: io::Error,
        /// Connections accepted and closed at once with the refusal.
        shed: u32,
    },
}

/// The backend a driver runs on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Backend {
    /// Linux io_uring.
    IoUring,
    /// Linux epoll, the fallback.
    Epoll,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::IoUring => "io_uring",
            Backend::Epoll => "epoll",
        })
    }
}

/// Which backend [`open`] may use.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum BackendChoice {
    /// io_uring when it works, epoll otherwise (reporting why).
    #[default]
    Auto,
    /// io_uring or an error.
    IoUring,
    /// epoll.
    Epoll,
}

/// One driver's settings.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// Address to listen on; port 0 picks one (see [`Driver::local_addr`]).
    pub listen: SocketAddr,
    /// Bind with `SO_REUSEPORT`, so every shard can bind the same address.
    pub reuse_port: bool,
    /// The listen backlog.
    pub listen_backlog: u32,
    /// Connections admitted at once.
    pub connections_max: u32,
    /// Connections beyond `connections_max` accepted only to be refused with
    /// an error frame; further ones are closed at once.
    pub refused_connections_max: u32,
    /// Bytes of one receive buffer (io_uring: each provided buffer; epoll:
    /// the one read buffer).
    pub recv_buffer_bytes: u32,
    /// Provided buffers in the io_uring buffer ring (a power of two, at most
    /// 32768). They bound what one shard holds received and not yet handed to
    /// its caller.
    pub recv_buffer_count: u16,
    /// Submission queue entries (io_uring; the completion queue gets four
    /// times as many) or events per wait (epoll).
    pub ring_entries: u32,
    /// Written to each connection refused because the process is out of
    /// file descriptors (see [`Event::AcceptFailed`]); opaque to the driver.
    pub shed_reply: Arc<[u8]>,
    /// Listeners beside `listen` (at most [`LISTENERS_MAX`] in all), on the
    /// same driver: their connections share its connection limits and are
    /// told apart by the [`ListenerId`] of their accept event.
    pub more_listeners: Vec<ListenerConfig>,
}

/// The most listeners one driver has.
pub const LISTENERS_MAX: usize = 4;

impl DriverConfig {
    /// Defaults for a listener on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            reuse_port: true,
            listen_backlog: LISTEN_BACKLOG_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            refused_connections_max: REFUSED_CONNECTIONS_MAX_DEFAULT,
            recv_buffer_bytes: RECV_BUFFER_BYTES_DEFAULT,
            recv_buffer_count: RECV_BUFFER_COUNT_DEFAULT,
            ring_entries: RING_ENTRIES_DEFAULT,
            shed_reply: Arc::from(&[][..]),
            more_listeners: Vec::new(),
        }
    }

    /// Every listener, the first (`listen`) first.
    pub fn listeners(&self) -> Vec<ListenerConfig> {
        let first = ListenerConfig {
            addr: self.listen,
            shed_reply: self.shed_reply.clone(),
        };
        core::iter::once(first)
            .chain(self.more_listeners.iter().cloned())
            .collect()
    }

    /// Checks the settings against each other and the driver's limits.
    pub fn validate(&self) -> Result<(), OpenError> {
        let invalid = |what: &'static str| Err(OpenError::InvalidConfig(what));
        let slots = u64::from(self.connections_max) + u64::from(self.refused_connections_max);
        if self.connections_max == 0 {
            return invalid("connections_max must be at least 1");
        }
        if self.more_listeners.len() >= LISTENERS_MAX {
            return invalid("a driver has at most 4 listeners");
        }
        if slots > u64::from(CONNECTION_SLOTS_LIMIT) {
            return invalid("connections_max + refused_connections_max must be below 2^24");
        }
        if self.listen_backlog == 0 || self.listen_backlog > i32::MAX as u32 {
            return invalid("listen_backlog must be between 1 and 2^31 - 1");
        }
        if !(RECV_BUFFER_BYTES_MIN..=RECV_BUFFER_BYTES_MAX).contains(&self.recv_buffer_bytes) {
            return invalid("recv_buffer_bytes must be between 64 B and 16 MiB");
        }
        if !self.recv_buffer_count.is_power_of_two()
            || self.recv_buffer_count > RECV_BUFFER_COUNT_MAX
        {
            return invalid("recv_buffer_count must be a power of two, at most 32768");
        }
        if u64::from(self.recv_buffer_bytes) * u64::from(self.recv_buffer_count)
            > RECV_BUFFERS_BYTES_MAX
        {
            return invalid("recv_buffer_bytes * recv_buffer_count must be at most 4 GiB");
        }
        if !(RING_ENTRIES_MIN..=RING_ENTRIES_MAX).contains(&self.ring_entries) {
            return invalid("ring_entries must be between 8 and 32768");
        }
        Ok(())
    }
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self::new(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7171)))
    }
}

/// Why io_uring cannot be used here (the reason [`open`] falls back).
#[derive(Debug, thiserror::Error)]
pub enum UringUnavailable {
    /// `io_uring_setup` failed (no kernel support, `io_uring_disabled`,
    /// a seccomp profile).
    #[error("io_uring setup failed: {0}")]
    Setup(#[source] io::Error),
    /// The kernel lacks an operation or feature the driver needs.
    #[error("io_uring lacks {0}")]
    Unsupported(&'static str),
    /// Registering something with the ring failed.
    #[error("io_uring registration of {what} failed: {error}")]
    Register {
        /// What was registered.
        what: &'static str,
        /// The error.
        #[source]
        error: io::Error,
    },
    /// The start-up self-test (a multishot receive on a socket pair) failed.
    #[error("io_uring self-test failed: {0}")]
    SelfTest(String),
}

/// Why [`open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The configuration is invalid.
    #[error("invalid io driver configuration: {0}")]
    InvalidConfig(&'static str),
    /// The listener could not be set up.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        error: io::Error,
    },
    /// io_uring was required and is not available.
    #[error(transparent)]
    UringUnavailable(#[from] UringUnavailable),
    /// Setting up the epoll backend failed.
    #[error("epoll setup failed: {0}")]
    Epoll(#[source] io::Error),
    /// Allocating the receive buffers failed.
    #[error("receive buffer allocation failed: {0}")]
    Buffers(#[source] io::Error),
    /// Creating the wake-up eventfd failed.
    #[error("eventfd setup failed: {0}")]
    Waker(#[source] io::Error),
}

/// The callback [`Driver::poll`] hands its events to.
pub type OnEvent<'c> = dyn FnMut(&mut Connections, Event<'_>) + 'c;

/// How long a backend's next wait may last: until `deadline`, and no later
/// than `accept_paused_until`, when a paused accept is to be re-armed.
fn wait_time(deadline: Option<Instant>, accept_paused_until: Option<Instant>) -> Option<Duration> {
    let until = match (deadline, accept_paused_until) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    until.map(|t| t.saturating_duration_since(Instant::now()))
}

/// One shard's io driver. See the module docs for the contract.
pub trait Driver: fmt::Debug {
    /// The backend in use.
    fn backend(&self) -> Backend;

    /// How the backend was set up, for logs and stats (for io_uring, the
    /// setup flags the kernel accepted).
    fn setup_detail(&self) -> &str;

    /// The first listener's address (the port the kernel chose for port 0).
    fn local_addr(&self) -> SocketAddr {
        // Every driver has its first listener from `open` on.
        self.listener_addr(ListenerId(0))
            .unwrap_or_else(|| unreachable!("a driver always has its first listener"))
    }

    /// Listener `id`'s address (the port the kernel chose for port 0), or
    /// `None` for a listener the driver does not have.
    fn listener_addr(&self, id: ListenerId) -> Option<SocketAddr>;

    /// Waits at most `timeout` (`None`: until something happens) and hands
    /// the events of a batch to `on_event`. Returns after at least one event
    /// was handled, when the timeout passes, or early when a signal
    /// interrupted the wait; sends queued by the callback are submitted
    /// before it returns.
    ///
    /// Errors are only those of the driver itself (its ring or epoll
    /// instance); errors of one connection become [`Event::Closed`].
    fn poll(&mut self, timeout: Option<Duration>, on_event: &mut OnEvent<'_>) -> io::Result<()>;

    /// The connection table, to read.
    fn connections(&self) -> &Connections;

    /// The connection table, to send, close and pause between polls; what is
    /// queued here goes out at the next [`Driver::poll`].
    fn connections_mut(&mut self) -> &mut Connections;

    /// A handle another thread uses to end a poll early.
    fn waker(&self) -> Arc<Waker>;

    /// Stops accepting and closes the listeners (at shutdown). Connections
    /// already accepted are unaffected. With `SO_REUSEPORT`, connections
    /// waiting in this listener's queue are reset, while other shards'
    /// listeners go on accepting.
    fn stop_accepting(&mut self) {
        self.stop_accepting_except(None);
    }

    /// As [`Driver::stop_accepting`], but listener `keep` (if any) goes on
    /// accepting: the metrics endpoint answers while the server drains.
    fn stop_accepting_except(&mut self, keep: Option<ListenerId>);

    /// Queues `data` on `conn`; see [`Connections::send`].
    fn send(&mut self, conn: ConnId, data: bytes::Bytes) -> bool {
        self.connections_mut().send(conn, data)
    }

    /// Closes `conn` after its queued sends; see [`Connections::close`].
    fn close(&mut self, conn: ConnId) {
        self.connections_mut().close(conn);
    }

    /// Closes `conn` at once; see [`Connections::close_now`].
    fn close_now(&mut self, conn: ConnId) {
        self.connections_mut().close_now(conn);
    }

    /// Pauses or resumes reading `conn`; see [`Connections::set_reading`].
    fn set_reading(&mut self, conn: ConnId, on: bool) {
        self.connections_mut().set_reading(conn, on);
    }

    /// Bytes queued on `conn` and not yet written; see [`Connections::unsent_bytes`].
    fn unsent_bytes(&self, conn: ConnId) -> usize {
        self.connections().unsent_bytes(conn)
    }
}

/// A driver and, when [`BackendChoice::Auto`] fell back to epoll, why.
#[derive(Debug)]
pub struct Opened {
    /// The driver.
    pub driver: Box<dyn Driver>,
    /// Why io_uring was not used, when it was not.
    pub fallback: Option<UringUnavailable>,
}

/// Opens a driver listening on `config.listen` with the chosen backend.
///
/// The driver must be polled on the thread that opened it (io_uring's single
/// issuer rule); it is not `Send`.
pub fn open(config: &DriverConfig, choice: BackendChoice) -> Result<Opened, OpenError> {
    config.validate()?;
    match choice {
        BackendChoice::Epoll => Ok(Opened {
            driver: Box::new(epoll::EpollDriver::open(config)?),
            fallback: None,
        }),
        BackendChoice::IoUring => Ok(Opened {
            driver: Box::new(uring::UringDriver::open(config)?),
            fallback: None,
        }),
        BackendChoice::Auto => match uring::UringDriver::open(config) {
            Ok(driver) => Ok(Opened {
                driver: Box::new(driver),
                fallback: None,
            }),
            Err(OpenError::UringUnavailable(why)) => Ok(Opened {
                driver: Box::new(epoll::EpollDriver::open(config)?),
                fallback: Some(why),
            }),
            Err(other) => Err(other),
        },
    }
}

/// Pins the calling thread to CPU `cpu` (`sched_setaffinity`), as a
/// thread-per-core shard (or a benchmark) wants.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    sys::pin_current_thread(cpu)
}

/// The CPUs the calling thread may run on (`sched_getaffinity`), ascending:
/// what `taskset`, `numactl` or a container's cpuset gave the process.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    sys::allowed_cpus()
}

/// The process's open-files limit after [`raise_open_files_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFilesLimit {
    /// The soft limit found at start.
    pub before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit, which only a privileged process can raise.
    pub hard: u64,
}

/// The open-files limit (`RLIMIT_NOFILE`) now: (soft, hard).
pub fn open_files_limit() -> io::Result<(u64, u64)> {
    sys::open_files_limit()
}

/// Memory page size and clock ticks per second, as `/proc` counts them.
pub fn proc_units() -> (u64, u64) {
    (sys::page_size() as u64, sys::clock_ticks_per_second())
}

/// Raises the process's soft open-files limit (`RLIMIT_NOFILE`) to its hard
/// limit, as a server with many connections wants. A soft limit already at
/// the hard one is left alone.
pub fn raise_open_files_limit() -> io::Result<OpenFilesLimit> {
    let (before, hard) = sys::open_files_limit()?;
    if before < hard {
        sys::set_open_files_soft_limit(hard, hard)?;
    }
    let (soft, hard) = sys::open_files_limit()?;
    Ok(OpenFilesLimit { before, soft, hard })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        DriverConfig::default().validate().unwrap();
    }

    #[test]
    fn config_checks_reject_bad_values() {
        let bad = [
            DriverConfig {
                connections_max: 0,
                ..DriverConfig::default()
            },
            DriverConfig {
                recv_buffer_count: 100,
                ..DriverConfig::default()
            },
            DriverConfig {
                connections_max: CONNECTION_SLOTS_LIMIT,
                ..DriverConfig::default()
            },
            DriverConfig {
                ring_entries: 1 << 20,
                ..DriverConfig::default()
            },
            DriverConfig {
                recv_buffer_bytes: 8,
                ..DriverConfig::default()
            },
            DriverConfig {
                more_listeners: vec![
                    ListenerConfig {
                        addr: DriverConfig::default().listen,
                        shed_reply: Arc::from(&[][..]),
                    };
                    LISTENERS_MAX
                ],
                ..DriverConfig::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(config.validate(), Err(OpenError::InvalidConfig(_))),
                "{config:?} passed"
            );
        }
    }

    #[test]
    fn backend_names() {
        assert_eq!(Backend::IoUring.to_string(), "io_uring");
        assert_eq!(Backend::Epoll.to_string(), "epoll");
    }
}
