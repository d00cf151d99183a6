//! The async consumer: handlers as tokio tasks.
//!
//! Ground rules: one supervisor task receives, at most `concurrency`
//! messages held at once (a semaphore permit per message, returned when its
//! handling ends). Each message gets a task that runs the handler (itself a
//! task, so a panic is caught) beside a lease keeper following the
//! [`LeasePlan`]; the keeper stops when the handler returns. A graceful stop
//! ends the receiving (a receive in flight finishes, and what it brought is
//! released), waits out the grace period, then tells the remaining message
//! tasks to abort their handler and release their message.

use std::fmt::Display;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use sluice_protocol::Receipt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::{
    ConsumerConfig, ConsumerStats, Count, Delivery, LeaseKeeper, LeaseLost, LeasePlan, LeaseStep,
    LeaseToken, OnFailure, SharedCounters, retry_pause,
};
use crate::{AsyncClient, ReceiveOptions, ReceivedMessage};

/// Runs a handler on every message of a queue with an [`AsyncClient`].
///
/// ```no_run
/// use std::time::Duration;
/// use sluice_client::consumer::{Consumer, ConsumerConfig, Delivery};
/// use sluice_client::{AsyncClient, ClientConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sluice_client::Error> {
/// let client = AsyncClient::connect(ClientConfig::default()).await?;
/// let consumer = Consumer::start(
///     client,
///     ConsumerConfig::new("orders").concurrency(8),
///     |delivery: Delivery| async move {
///         println!("order {:?}", delivery.message.body);
///         if delivery.lease.is_lost() {
///             return Err("lease lost: someone else has the order now");
///         }
///         Ok(())
///     },
/// );
/// // ... later: let running handlers finish for up to 10 s.
/// let stats = consumer.stop(Duration::from_secs(10)).await;
/// println!("{} handled", stats.succeeded);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Consumer;

/// A running [`Consumer`]: stop it gracefully, or abort it.
///
/// Dropping the handle stops receiving, as [`ConsumerHandle::stop`] does,
/// and lets running handlers finish in the background.
#[derive(Debug)]
pub struct ConsumerHandle {
    stopping: Arc<watch::Sender<bool>>,
    hard_stop: Arc<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
    counters: SharedCounters,
}

struct Shared<F> {
    client: AsyncClient,
    queue: Arc<str>,
    plan: LeasePlan,
    on_failure: OnFailure,
    handler: F,
    counters: SharedCounters,
    hard_stop: Arc<watch::Sender<bool>>,
}

impl Consumer {
    /// Starts consuming `config.queue()` on the current tokio runtime.
    ///
    /// The handler's future runs as its own task; returning `Ok` deletes
    /// the message, returning `Err` (or panicking) applies
    /// [`OnFailure`](super::OnFailure).
    pub fn start<F, Fut, E>(
        client: AsyncClient,
        config: ConsumerConfig,
        handler: F,
    ) -> ConsumerHandle
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let counters = SharedCounters::default();
        let stopping = Arc::new(watch::channel(false).0);
        let hard_stop = Arc::new(watch::channel(false).0);
        let shared = Arc::new(Shared {
            client,
            queue: Arc::from(config.queue.as_str()),
            plan: config.plan(),
            on_failure: config.on_failure,
            handler,
            counters: Arc::clone(&counters),
            hard_stop: Arc::clone(&hard_stop),
        });
        let task = tokio::spawn(supervise(shared, config, Arc::clone(&stopping)));
        ConsumerHandle {
            stopping,
            hard_stop,
            task: Some(task),
            counters,
        }
    }
}

impl ConsumerHandle {
    /// The counters so far.
    #[must_use]
    pub fn stats(&self) -> ConsumerStats {
        self.counters.snapshot()
    }

    /// Stops gracefully: no new receives (one in flight finishes and what
    /// it brought is released), running handlers get `grace` to finish
    /// (their leases are still extended); then those still running are
    /// aborted and their messages released. Returns the final counters.
    pub async fn stop(mut self, grace: Duration) -> ConsumerStats {
        self.stopping.send_replace(true);
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                self.hard_stop.send_replace(true);
                let _ = task.await;
            }
        }
        self.counters.snapshot()
    }

    /// Aborts at once, as a crash would: no delete, no release, no more
    /// extensions. Held messages are redelivered when their leases end.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for ConsumerHandle {
    fn drop(&mut self) {
        self.stopping.send_replace(true);
    }
}

/// Aborts a task when dropped (so aborting the consumer aborts handlers).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn supervise<F, Fut, E>(
    shared: Arc<Shared<F>>,
    config: ConsumerConfig,
    stopping: Arc<watch::Sender<bool>>,
) where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let mut stop_rx = stopping.subscribe();
    let permits = Arc::new(Semaphore::new(config.concurrency));
    let mut tasks = JoinSet::new();
    let mut failures = 0u32;
    let visibility = shared.plan.visibility();
    loop {
        while tasks.try_join_next().is_some() {}
        if *stop_rx.borrow_and_update() {
            break;
        }
        // A permit, or (to look again) a stop or a finished handler.
        let woken = {
            let mut acquire = pin!(Arc::clone(&permits).acquire_owned());
            let mut changed = pin!(stop_rx.changed());
            poll_fn(|cx| {
                if let Poll::Ready(permit) = acquire.as_mut().poll(cx) {
                    return Poll::Ready(Some(permit));
                }
                if changed.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                if let Poll::Ready(Some(_)) = tasks.poll_join_next(cx) {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await
        };
        let first = match woken {
            Some(Ok(p)) => p,
            Some(Err(_)) => break, // never closed
            None => continue,
        };
        let mut held = vec![first];
        while held.len() < config.concurrency {
            match Arc::clone(&permits).try_acquire_owned() {
                Ok(p) => held.push(p),
                Err(_) => break,
            }
        }
        let options = ReceiveOptions::new(held.len())
            .visibility_timeout(visibility)
            .wait(config.poll_wait)
            .bind_leases(config.bind_leases);
        let started = Instant::now();
        match shared.client.receive(&shared.queue, options).await {
            Err(err) => {
                shared.counters.add(Count::Errors, 1);
                failures = failures.saturating_add(1);
                tracing::warn!(queue = %shared.queue, error = %err, "sluice consumer: receive failed");
                // The pause, cut short by a stop.
                let mut pause = pin!(tokio::time::sleep(retry_pause(failures)));
                let mut changed = pin!(stop_rx.changed());
                poll_fn(|cx| {
                    if pause.as_mut().poll(cx).is_ready() || changed.as_mut().poll(cx).is_ready() {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
            }
            Ok(messages) => {
                failures = 0;
                shared.counters.add(Count::Received, messages.len() as u64);
                if *stop_rx.borrow() {
                    release_all(&shared, &messages).await;
                    break;
                }
                for (message, permit) in messages.into_iter().zip(held) {
                    tasks.spawn(handle_one(Arc::clone(&shared), message, started, permit));
                }
            }
        }
    }
    while tasks.join_next().await.is_some() {}
}

async fn release_all<F>(shared: &Shared<F>, messages: &[ReceivedMessage]) {
    if messages.is_empty() {
        return;
    }
    let changes: Vec<(Receipt, Duration)> = messages
        .iter()
        .map(|m| (m.receipt, Duration::ZERO))
        .collect();
    match shared
        .client
        .change_visibility_batch(&shared.queue, &changes)
        .await
    {
        Ok(results) => {
            let released = results.iter().filter(|r| r.is_ok()).count();
            shared.counters.add(Count::Released, released as u64);
        }
        Err(err) => {
            shared.counters.add(Count::Errors, 1);
            tracing::warn!(queue = %shared.queue, error = %err, "sluice consumer: release failed");
        }
    }
}

async fn handle_one<F, Fut, E>(
    shared: Arc<Shared<F>>,
    message: ReceivedMessage,
    received_at: Instant,
    _permit: OwnedSemaphorePermit,
) where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let receipt = message.receipt;
    let (lost_tx, lease) = LeaseToken::new();
    let mut work = AbortOnDrop(tokio::spawn((shared.handler)(Delivery { message, lease })));
    let keeper = keep_lease(&shared, receipt, received_at, &lost_tx);
    let mut keeper = pin!(keeper);
    let mut keeping = true;
    let mut hard = shared.hard_stop.subscribe();
    let mut hard_stop = pin!(hard.wait_for(|stop| *stop));
    // The handler's result, or `None` at a hard stop; the keeper runs
    // alongside until it is done.
    let outcome = poll_fn(|cx| {
        if let Poll::Ready(result) = Pin::new(&mut work.0).poll(cx) {
            return Poll::Ready(Some(result));
        }
        if keeping && keeper.as_mut().poll(cx).is_ready() {
            keeping = false;
        }
        if hard_stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await;
    let queue = &shared.queue;
    match outcome {
        None => {
            work.0.abort();
            lost_tx.lose(LeaseLost::Stopped);
            release(&shared, receipt).await;
        }
        Some(Ok(Ok(()))) => {
            shared.counters.add(Count::Succeeded, 1);
            match shared.client.delete(queue, receipt).await {
                Ok(()) => shared.counters.add(Count::Deleted, 1),
                Err(err) => {
                    shared.counters.add(Count::Errors, 1);
                    tracing::warn!(%queue, error = %err, "sluice consumer: delete failed");
                }
            }
        }
        Some(Ok(Err(err))) => {
            shared.counters.add(Count::Failed, 1);
            tracing::warn!(%queue, error = %err, "sluice consumer: handler failed");
            if shared.on_failure == OnFailure::Release {
                release(&shared, receipt).await;
            }
        }
        Some(Err(join)) => {
            shared.counters.add(Count::Failed, 1);
            tracing::warn!(%queue, error = %join, "sluice consumer: handler panicked");
            if shared.on_failure == OnFailure::Release {
                release(&shared, receipt).await;
            }
        }
    }
}

async fn release<F>(shared: &Shared<F>, receipt: Receipt) {
    match shared
        .client
        .change_visibility(&shared.queue, receipt, Duration::ZERO)
        .await
    {
        Ok(()) => shared.counters.add(Count::Released, 1),
        Err(err) if err.is_lease_lost() => {}
        Err(err) => {
            shared.counters.add(Count::Errors, 1);
            tracing::warn!(queue = %shared.queue, error = %err, "sluice consumer: release failed");
        }
    }
}

/// Extends the lease on the plan until it is lost or `max_processing`
/// passes; returns then (and is dropped when the handler returns first).
async fn keep_lease<F>(shared: &Shared<F>, receipt: Receipt, t0: Instant, lost: &LeaseKeeper) {
    let plan = shared.plan;
    let mut lease_ends = plan.visibility();
    let mut failures = 0u32;
    let lose = |why: LeaseLost| {
        shared.counters.add(Count::Lost, 1);
        lost.lose(why);
    };
    loop {
        match plan.next(lease_ends) {
            LeaseStep::Expire { at } => {
                tokio::time::sleep_until(t0 + at).await;
                lose(LeaseLost::MaxProcessing);
                return;
            }
            LeaseStep::Extend { at, visibility } => {
                tokio::time::sleep_until(t0 + at).await;
                let sent = Instant::now();
                if sent >= t0 + lease_ends {
                    lose(LeaseLost::Expired);
                    return;
                }
                match shared
                    .client
                    .change_visibility(&shared.queue, receipt, visibility)
                    .await
                {
                    Ok(()) => {
                        failures = 0;
                        shared.counters.add(Count::Extended, 1);
                        lease_ends = sent.duration_since(t0) + visibility;
                    }
                    Err(err) if err.is_lease_lost() => {
                        lose(LeaseLost::Refused(err.to_string()));
                        return;
                    }
                    Err(err) => {
                        shared.counters.add(Count::Errors, 1);
                        failures = failures.saturating_add(1);
                        tracing::warn!(queue = %shared.queue, error = %err,
                            "sluice consumer: lease extension failed; retrying");
                        let retry = (Instant::now() + retry_pause(failures)).min(t0 + lease_ends);
                        tokio::time::sleep_until(retry).await;
                    }
                }
            }
        }
    }
}
