//! Consumers: run a handler on every message of a queue, N at a time,
//! keeping each message's lease while its handler runs.
//!
//! [`Consumer`] runs handlers as tokio tasks on an [`AsyncClient`];
//! [`BlockingConsumer`] runs them on threads with a [`Client`]. Both:
//!
//! - receive with their own visibility timeout and extend a running
//!   handler's lease when half of it is left ([`LeasePlan`]), for at most
//!   [`ConsumerConfig::max_processing`] after the receive; then they stop
//!   extending, so a message whose handler never finishes is redelivered
//!   and, after its queue's max receives, dead-lettered;
//! - tell the handler when its lease is lost through [`LeaseToken`]: an
//!   extension answered `StaleReceipt`, `Gone` or `InvalidReceipt`, or the
//!   lease ran out;
//! - delete the message when the handler succeeds, and on failure release
//!   it (visibility 0) or leave it for redelivery when the lease ends
//!   ([`OnFailure`]);
//! - stop gracefully: no new receives, running handlers get a grace period
//!   to finish, and what is still held after it is released;
//! - bind their leases to the connection by default
//!   ([`ConsumerConfig::bind_leases`]): if the consumer's process dies or
//!   its connection drops, the server releases what it held at once,
//!   rather than when each lease runs out. Give the client a session
//!   timeout ([`ClientConfig::session_timeout`](crate::ClientConfig::session_timeout))
//!   so that a process that hangs whole, or a host that vanishes, loses its
//!   connection (and leases) too.
//!
//! [`AsyncClient`]: crate::AsyncClient
//! [`Client`]: crate::Client

#[cfg(feature = "async")]
mod async_consumer;
#[cfg(feature = "blocking")]
mod blocking_consumer;
mod schedule;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

#[cfg(feature = "async")]
pub use async_consumer::{Consumer, ConsumerHandle};
#[cfg(feature = "blocking")]
pub use blocking_consumer::{BlockingConsumer, BlockingConsumerHandle};
pub use schedule::{LeasePlan, LeaseStep};

use crate::ReceivedMessage;
use crate::poison;

pub use crate::limits::{
    CONCURRENCY_DEFAULT, MAX_PROCESSING_DEFAULT, POLL_WAIT_DEFAULT, VISIBILITY_TIMEOUT_DEFAULT,
};

/// What to do with a message whose handler failed (returned an error or
/// panicked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// Release it (visibility 0): it is redelivered at once, subject to the
    /// queue's backoff.
    #[default]
    Release,
    /// Leave it: it is redelivered when its lease ends.
    Leave,
}

/// How a consumer runs.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::consumer::{ConsumerConfig, OnFailure};
///
/// let config = ConsumerConfig::new("orders")
///     .concurrency(8)
///     .visibility_timeout(Duration::from_secs(10))
///     .max_processing(Duration::from_secs(120))
///     .on_failure(OnFailure::Leave);
/// assert_eq!(config.queue(), "orders");
/// assert!(config.binds_leases(), "bound to the connection by default");
/// assert!(!config.bind_leases(false).binds_leases());
/// ```
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    queue: String,
    concurrency: usize,
    visibility_timeout: Duration,
    max_processing: Duration,
    on_failure: OnFailure,
    poll_wait: Duration,
    bind_leases: bool,
}

impl ConsumerConfig {
    /// Defaults, consuming `queue`.
    #[must_use]
    pub fn new(queue: impl Into<String>) -> ConsumerConfig {
        ConsumerConfig {
            queue: queue.into(),
            concurrency: CONCURRENCY_DEFAULT,
            visibility_timeout: VISIBILITY_TIMEOUT_DEFAULT,
            max_processing: MAX_PROCESSING_DEFAULT,
            on_failure: OnFailure::Release,
            poll_wait: POLL_WAIT_DEFAULT,
            bind_leases: true,
        }
    }

    /// Handlers running at once (at least 1; default 4).
    #[must_use]
    pub fn concurrency(mut self, handlers: usize) -> ConsumerConfig {
        self.concurrency = handlers.clamp(1, sluice_protocol::limits::BATCH_ENTRIES_MAX);
        self
    }

    /// The lease each receive asks for and each extension renews (default
    /// 30 s; at least 1 ms).
    #[must_use]
    pub fn visibility_timeout(mut self, timeout: Duration) -> ConsumerConfig {
        self.visibility_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How long after its receive a message's lease is extended at most
    /// (default 15 min).
    #[must_use]
    pub fn max_processing(mut self, limit: Duration) -> ConsumerConfig {
        self.max_processing = limit;
        self
    }

    /// What to do when a handler fails (default: release).
    #[must_use]
    pub fn on_failure(mut self, action: OnFailure) -> ConsumerConfig {
        self.on_failure = action;
        self
    }

    /// The long-poll wait of each receive (default 1 s, at most 20 s).
    #[must_use]
    pub fn poll_wait(mut self, wait: Duration) -> ConsumerConfig {
        self.poll_wait = wait.min(crate::limits::RECEIVE_WAIT_MAX);
        self
    }

    /// Whether the leases of received messages are bound to the
    /// connection (default true): when it closes (the process dies, the
    /// connection drops, its session timeout runs out), the server releases
    /// them at once and another consumer gets the messages, instead of
    /// after their visibility timeout. A handler still running then loses
    /// its lease ([`LeaseToken`] tells it when an extension is refused), so
    /// it had better be idempotent, as always. Turn it off to keep leases
    /// across reconnects.
    #[must_use]
    pub fn bind_leases(mut self, bind: bool) -> ConsumerConfig {
        self.bind_leases = bind;
        self
    }

    /// The queue.
    #[must_use]
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Whether leases are bound to the connection.
    #[must_use]
    pub fn binds_leases(&self) -> bool {
        self.bind_leases
    }

    fn plan(&self) -> LeasePlan {
        LeasePlan::new(self.visibility_timeout, self.max_processing)
    }
}

/// Why a lease was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseLost {
    /// An extension was refused: the message was delivered again
    /// (`StaleReceipt`), is gone (`Gone`), or its queue was deleted
    /// (`InvalidReceipt`).
    Refused(String),
    /// The lease ran out before an extension succeeded (the server could not
    /// be reached in time).
    Expired,
    /// `max_processing` passed and the lease ran out: the message may be
    /// redelivered.
    MaxProcessing,
    /// The consumer stopped and its grace period ended: the message was
    /// released.
    Stopped,
}

/// Tells a handler whether it still holds its message's lease. Cheap to
/// clone; poll [`LeaseToken::is_lost`] (or, with the `async` feature,
/// await `LeaseToken::lost`).
#[derive(Clone, Debug)]
pub struct LeaseToken {
    state: Arc<LeaseState>,
}

/// What the keeper of a lease has said, shared with every token.
#[derive(Debug, Default)]
struct LeaseState {
    verdict: Mutex<Verdict>,
    /// Wakes the tasks awaiting `lost`.
    #[cfg(feature = "async")]
    changed: tokio::sync::Notify,
}

#[derive(Clone, Debug, Default)]
enum Verdict {
    /// The lease is kept.
    #[default]
    Held,
    /// The lease is lost.
    Lost(LeaseLost),
    /// The keeper is gone without a verdict: the lease is no longer kept.
    KeeperGone,
}

/// The keeper's side of a [`LeaseToken`]: says when the lease is lost, and
/// when dropped without a verdict tells waiters it is no longer kept.
#[derive(Debug)]
pub(crate) struct LeaseKeeper {
    state: Arc<LeaseState>,
}

impl LeaseKeeper {
    /// Records that the lease is lost (the latest reason wins).
    pub(crate) fn lose(&self, why: LeaseLost) {
        self.state.set(Verdict::Lost(why));
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        let mut verdict = self.state.lock();
        if matches!(*verdict, Verdict::Held) {
            *verdict = Verdict::KeeperGone;
            drop(verdict);
            self.state.wake();
        }
    }
}

impl LeaseState {
    fn lock(&self) -> MutexGuard<'_, Verdict> {
        poison::lock(&self.verdict)
    }

    fn set(&self, verdict: Verdict) {
        *self.lock() = verdict;
        self.wake();
    }

    #[cfg(feature = "async")]
    fn wake(&self) {
        self.changed.notify_waiters();
    }

    #[cfg(not(feature = "async"))]
    #[allow(clippy::unused_self)]
    fn wake(&self) {}
}

impl LeaseToken {
    pub(crate) fn new() -> (LeaseKeeper, LeaseToken) {
        let state = Arc::new(LeaseState::default());
        (
            LeaseKeeper {
                state: Arc::clone(&state),
            },
            LeaseToken { state },
        )
    }

    /// Whether the lease is lost: another consumer may be handling the
    /// message now, so side effects should stop (or be fenced with the
    /// delivery number).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        matches!(*self.state.lock(), Verdict::Lost(_))
    }

    /// Why the lease was lost, if it was.
    #[must_use]
    pub fn reason(&self) -> Option<LeaseLost> {
        match &*self.state.lock() {
            Verdict::Lost(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// Completes when the lease is lost (never, while it is kept).
    #[cfg(feature = "async")]
    pub async fn lost(&self) -> LeaseLost {
        loop {
            let notified = self.state.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before looking, so a verdict set in between wakes
            // it.
            notified.as_mut().enable();
            match &*self.state.lock() {
                Verdict::Lost(why) => return why.clone(),
                Verdict::KeeperGone => return LeaseLost::Expired,
                Verdict::Held => {}
            }
            notified.await;
        }
    }
}

/// One message handed to a handler, with its lease.
#[derive(Debug)]
pub struct Delivery {
    /// The message.
    pub message: ReceivedMessage,
    /// Its lease.
    pub lease: LeaseToken,
}

/// Counters of a consumer (a snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Messages received.
    pub received: u64,
    /// Handlers that succeeded.
    pub succeeded: u64,
    /// Handlers that failed (error or panic).
    pub failed: u64,
    /// Messages deleted after success.
    pub deleted: u64,
    /// Messages released (after a failure or at stop).
    pub released: u64,
    /// Successful lease extensions.
    pub extended: u64,
    /// Leases lost while a handler ran.
    pub lost: u64,
    /// Requests that failed (receive, delete, extension, release).
    pub errors: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    received: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    deleted: AtomicU64,
    released: AtomicU64,
    extended: AtomicU64,
    lost: AtomicU64,
    errors: AtomicU64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    Received,
    Succeeded,
    Failed,
    Deleted,
    Released,
    Extended,
    Lost,
    Errors,
}

impl Counters {
    pub(crate) fn add(&self, which: Count, n: u64) {
        let c = match which {
            Count::Received => &self.received,
            Count::Succeeded => &self.succeeded,
            Count::Failed => &self.failed,
            Count::Deleted => &self.deleted,
            Count::Released => &self.released,
            Count::Extended => &self.extended,
            Count::Lost => &self.lost,
            Count::Errors => &self.errors,
        };
        // Independent counters: no ordering with other memory is needed.
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ConsumerStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConsumerStats {
            received: r(&self.received),
            succeeded: r(&self.succeeded),
            failed: r(&self.failed),
            deleted: r(&self.deleted),
            released: r(&self.released),
            extended: r(&self.extended),
            lost: r(&self.lost),
            errors: r(&self.errors),
        }
    }
}

pub(crate) type SharedCounters = Arc<Counters>;

/// A short pause after a failed request, so a consumer that cannot reach
/// its server does not spin.
pub(crate) fn retry_pause(failures: u32) -> Duration {
    crate::ReconnectPolicy::new(Duration::from_millis(50), Duration::from_secs(1))
        .delay(failures.max(1) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_token_reports_what_its_keeper_says() {
        let (keeper, token) = LeaseToken::new();
        let clone = token.clone();
        assert!(!token.is_lost());
        assert_eq!(token.reason(), None);
        keeper.lose(LeaseLost::Expired);
        keeper.lose(LeaseLost::Refused("StaleReceipt".into()));
        assert!(clone.is_lost(), "every clone sees it");
        assert_eq!(
            clone.reason(),
            Some(LeaseLost::Refused("StaleReceipt".into())),
            "the latest reason"
        );
        drop(keeper);
        assert!(token.is_lost(), "a verdict outlives its keeper");

        let (keeper, token) = LeaseToken::new();
        drop(keeper);
        assert!(!token.is_lost(), "no verdict, only a keeper gone");
    }

    #[cfg(feature = "async")]
    #[test]
    fn awaiting_a_lost_lease_wakes_when_it_is_lost_or_no_longer_kept() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (keeper, token) = LeaseToken::new();
        let waiter = std::thread::spawn(move || rt.block_on(token.lost()));
        keeper.lose(LeaseLost::MaxProcessing);
        assert_eq!(waiter.join().unwrap(), LeaseLost::MaxProcessing);

        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (keeper, token) = LeaseToken::new();
        let waiter = std::thread::spawn(move || rt.block_on(token.lost()));
        drop(keeper);
        assert_eq!(waiter.join().unwrap(), LeaseLost::Expired);
    }
}
