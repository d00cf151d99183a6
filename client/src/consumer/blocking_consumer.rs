//! The blocking consumer: handlers on threads.
//!
//! Ground rules: `concurrency` worker threads each receive one message at a
//! time and run the handler on their own thread; beside it a keeper thread
//! follows the [`LeasePlan`], woken early through a channel when the handler
//! returns. A stop sets a flag the workers check between messages; after the
//! grace period a second flag tells the keepers of handlers still running to
//! release their message and mark the lease lost (a thread cannot be
//! interrupted: the handler is expected to poll [`LeaseToken::is_lost`]).

use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_protocol::Receipt;

use super::{
    ConsumerConfig, ConsumerStats, Count, Delivery, LeaseKeeper, LeaseLost, LeasePlan, LeaseStep,
    LeaseToken, OnFailure, SharedCounters, retry_pause,
};
use crate::{Client, ReceiveOptions};

use crate::limits::KEEPER_TICK;

/// Runs a handler on every message of a queue with a blocking [`Client`],
/// on `concurrency` threads.
///
/// ```no_run
/// use std::time::Duration;
/// use sluice_client::consumer::{BlockingConsumer, ConsumerConfig, Delivery};
/// use sluice_client::{Client, ClientConfig};
///
/// let client = Client::connect(ClientConfig::default())?;
/// let consumer = BlockingConsumer::start(client, ConsumerConfig::new("orders"), |d: Delivery| {
///     println!("order {:?}", d.message.body);
///     Ok::<(), String>(())
/// });
/// std::thread::sleep(Duration::from_secs(5));
/// let stats = consumer.stop(Duration::from_secs(10));
/// println!("{} handled", stats.succeeded);
/// # Ok::<(), sluice_client::Error>(())
/// ```
#[derive(Debug)]
pub struct BlockingConsumer;

/// A running [`BlockingConsumer`].
#[derive(Debug)]
pub struct BlockingConsumerHandle {
    flags: Arc<Flags>,
    workers: Vec<JoinHandle<()>>,
    counters: SharedCounters,
}

#[derive(Debug, Default)]
struct Flags {
    stopping: AtomicBool,
    hard_stop: AtomicBool,
}

struct Shared<F> {
    client: Client,
    config: ConsumerConfig,
    plan: LeasePlan,
    handler: F,
    counters: SharedCounters,
    flags: Arc<Flags>,
}

impl BlockingConsumer {
    /// Starts consuming `config.queue()` on `concurrency` threads. The
    /// handler returning `Ok` deletes the message; `Err` or a panic applies
    /// [`OnFailure`].
    ///
    /// # Panics
    /// When a thread cannot be spawned.
    pub fn start<F, E>(client: Client, config: ConsumerConfig, handler: F) -> BlockingConsumerHandle
    where
        F: Fn(Delivery) -> Result<(), E> + Send + Sync + 'static,
        E: Display,
    {
        let counters = SharedCounters::default();
        let flags = Arc::new(Flags::default());
        let shared = Arc::new(Shared {
            client,
            plan: config.plan(),
            config,
            handler,
            counters: Arc::clone(&counters),
            flags: Arc::clone(&flags),
        });
        let workers = (0..shared.config.concurrency)
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("sluice-consumer-{i}"))
                    .spawn(move || work(&shared))
                    .expect("spawning a consumer thread")
            })
            .collect();
        BlockingConsumerHandle {
            flags,
            workers,
            counters,
        }
    }
}

impl BlockingConsumerHandle {
    /// The counters so far.
    #[must_use]
    pub fn stats(&self) -> ConsumerStats {
        self.counters.snapshot()
    }

    /// Stops gracefully: no new receives; handlers get `grace` to finish
    /// (their leases are still extended); then the messages of those still
    /// running are released and their leases marked lost. Returns the
    /// counters; threads of handlers that never return are left behind.
    pub fn stop(mut self, grace: Duration) -> ConsumerStats {
        self.flags.stopping.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.flags.hard_stop.store(true, Ordering::SeqCst);
        // Keepers release within a tick; workers whose handler returns end.
        let settle = Instant::now() + KEEPER_TICK * 4;
        while Instant::now() < settle && self.workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        for w in std::mem::take(&mut self.workers) {
            if w.is_finished() {
                let _ = w.join();
            }
        }
        self.counters.snapshot()
    }
}

impl Drop for BlockingConsumerHandle {
    fn drop(&mut self) {
        self.flags.stopping.store(true, Ordering::SeqCst);
    }
}

fn work<F, E>(shared: &Shared<F>)
where
    F: Fn(Delivery) -> Result<(), E> + Send + Sync + 'static,
    E: Display,
{
    let queue = shared.config.queue();
    let mut failures = 0u32;
    let options = ReceiveOptions::new(1)
        .visibility_timeout(shared.plan.visibility())
        .wait(shared.config.poll_wait)
        .bind_leases(shared.config.bind_leases);
    while !shared.flags.stopping.load(Ordering::SeqCst) {
        let started = Instant::now();
        let messages = match shared.client.receive(queue, options) {
            Ok(m) => m,
            Err(err) => {
                shared.counters.add(Count::Errors, 1);
                failures = failures.saturating_add(1);
                tracing::warn!(%queue, error = %err, "sluice consumer: receive failed");
                std::thread::sleep(retry_pause(failures));
                continue;
            }
        };
        failures = 0;
        shared.counters.add(Count::Received, messages.len() as u64);
        for message in messages {
            if shared.flags.stopping.load(Ordering::SeqCst) {
                release(shared, message.receipt);
                continue;
            }
            handle_one(shared, message, started);
        }
    }
}

fn handle_one<F, E>(shared: &Shared<F>, message: crate::ReceivedMessage, t0: Instant)
where
    F: Fn(Delivery) -> Result<(), E> + Send + Sync + 'static,
    E: Display,
{
    let queue = shared.config.queue();
    let receipt = message.receipt;
    let (lost_tx, lease) = LeaseToken::new();
    let (done_tx, done_rx) = channel::<()>();
    let released = std::thread::scope(|scope| {
        let lost_tx = &lost_tx;
        let keeper = scope.spawn(move || keep_lease(shared, receipt, t0, lost_tx, &done_rx));
        let result = catch_unwind(AssertUnwindSafe(|| {
            (shared.handler)(Delivery { message, lease })
        }));
        let _ = done_tx.send(());
        let released = keeper.join().unwrap_or(false);
        let succeeded = matches!(result, Ok(Ok(())));
        match result {
            Ok(Ok(())) => {
                shared.counters.add(Count::Succeeded, 1);
                match shared.client.delete(queue, receipt) {
                    Ok(()) => shared.counters.add(Count::Deleted, 1),
                    Err(err) => {
                        shared.counters.add(Count::Errors, 1);
                        tracing::warn!(%queue, error = %err, "sluice consumer: delete failed");
                    }
                }
            }
            Ok(Err(err)) => {
                shared.counters.add(Count::Failed, 1);
                tracing::warn!(%queue, error = %err, "sluice consumer: handler failed");
            }
            Err(_) => {
                shared.counters.add(Count::Failed, 1);
                tracing::warn!(%queue, "sluice consumer: handler panicked");
            }
        }
        released || succeeded
    });
    if !released && shared.config.on_failure == OnFailure::Release {
        release(shared, receipt);
    }
}

fn release<F>(shared: &Shared<F>, receipt: Receipt) {
    match shared
        .client
        .change_visibility(shared.config.queue(), receipt, Duration::ZERO)
    {
        Ok(()) => shared.counters.add(Count::Released, 1),
        Err(err) if err.is_lease_lost() => {}
        Err(err) => {
            shared.counters.add(Count::Errors, 1);
            tracing::warn!(queue = shared.config.queue(), error = %err, "sluice consumer: release failed");
        }
    }
}

/// Sleeps until `until`, the handler's end or a hard stop; true when the
/// handler ended.
fn pause(shared_flags: &Flags, done: &std::sync::mpsc::Receiver<()>, until: Instant) -> Wake {
    loop {
        if shared_flags.hard_stop.load(Ordering::SeqCst) {
            return Wake::HardStop;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Wake::Time;
        }
        match done.recv_timeout(left.min(KEEPER_TICK)) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return Wake::Done,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

enum Wake {
    Time,
    Done,
    HardStop,
}

/// Keeps the lease until the handler ends; returns whether it released the
/// message (at a hard stop).
fn keep_lease<F>(
    shared: &Shared<F>,
    receipt: Receipt,
    t0: Instant,
    lost: &LeaseKeeper,
    done: &std::sync::mpsc::Receiver<()>,
) -> bool {
    let plan = shared.plan;
    let queue = shared.config.queue();
    let mut lease_ends = plan.visibility();
    let mut failures = 0u32;
    let lose = |why: LeaseLost| {
        shared.counters.add(Count::Lost, 1);
        lost.lose(why);
    };
    // After the lease is lost, only wait for the handler (or a hard stop).
    let wait_out = |released: bool| loop {
        match pause(&shared.flags, done, Instant::now() + KEEPER_TICK) {
            Wake::Done | Wake::HardStop => return released,
            Wake::Time => {}
        }
    };
    loop {
        let (at, extend) = match plan.next(lease_ends) {
            LeaseStep::Expire { at } => (at, None),
            LeaseStep::Extend { at, visibility } => (at, Some(visibility)),
        };
        match pause(&shared.flags, done, t0 + at) {
            Wake::Done => return false,
            Wake::HardStop => {
                lost.lose(LeaseLost::Stopped);
                release(shared, receipt);
                return true;
            }
            Wake::Time => {}
        }
        let Some(visibility) = extend else {
            lose(LeaseLost::MaxProcessing);
            return wait_out(false);
        };
        let sent = Instant::now();
        if sent >= t0 + lease_ends {
            lose(LeaseLost::Expired);
            return wait_out(false);
        }
        match shared.client.change_visibility(queue, receipt, visibility) {
            Ok(()) => {
                failures = 0;
                shared.counters.add(Count::Extended, 1);
                lease_ends = sent.duration_since(t0) + visibility;
            }
            Err(err) if err.is_lease_lost() => {
                lose(LeaseLost::Refused(err.to_string()));
                return wait_out(false);
            }
            Err(err) => {
                shared.counters.add(Count::Errors, 1);
                failures = failures.saturating_add(1);
                tracing::warn!(%queue, error = %err, "sluice consumer: lease extension failed; retrying");
                let retry = (Instant::now() + retry_pause(failures)).min(t0 + lease_ends);
                match pause(&shared.flags, done, retry) {
                    Wake::Done => return false,
                    Wake::HardStop => {
                        lost.lose(LeaseLost::Stopped);
                        release(shared, receipt);
                        return true;
                    }
                    Wake::Time => {}
                }
            }
        }
    }
}
