//! Batching producers: many callers each send one message; the producer
//! gathers them for up to a linger time or a batch size, sends each batch as
//! one SEND, and hands every caller its own entry's result.
//!
//! [`Producer`] is async (tokio) and keeps several batches in flight;
//! [`BlockingProducer`] runs its batching on a thread.

#[cfg(feature = "async")]
use std::sync::Arc;
use std::time::Duration;

use sluice_protocol::SendOutcome;
use sluice_protocol::limits::FRAME_BYTES_MAX_DEFAULT;
#[cfg(feature = "async")]
use tokio::sync::{Semaphore, mpsc, oneshot};
#[cfg(feature = "async")]
use tokio::task::JoinHandle;

#[cfg(feature = "async")]
use crate::AsyncClient;
#[cfg(feature = "blocking")]
use crate::Client;
use crate::error::{Error, Result};
use crate::message::SendEntry;

pub use crate::limits::{BATCH_MAX_DEFAULT, IN_FLIGHT_DEFAULT, LINGER_DEFAULT};
use crate::limits::{QUEUED_MAX, SEND_FRAME_OVERHEAD_BYTES};

/// How a producer batches.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::producer::ProducerConfig;
///
/// let config = ProducerConfig::new("events")
///     .linger(Duration::from_millis(5))
///     .batch_max(512);
/// assert_eq!(config.queue(), "events");
/// ```
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    queue: String,
    linger: Duration,
    batch_max: usize,
    in_flight: usize,
}

impl ProducerConfig {
    /// Defaults (1 ms linger, 256 per batch, 4 batches in flight), sending
    /// to `queue`.
    #[must_use]
    pub fn new(queue: impl Into<String>) -> ProducerConfig {
        ProducerConfig {
            queue: queue.into(),
            linger: LINGER_DEFAULT,
            batch_max: BATCH_MAX_DEFAULT,
            in_flight: IN_FLIGHT_DEFAULT,
        }
    }

    /// The longest a message waits for others to join its batch.
    #[must_use]
    pub fn linger(mut self, linger: Duration) -> ProducerConfig {
        self.linger = linger;
        self
    }

    /// Most messages per batch (1 ..= 1,024).
    #[must_use]
    pub fn batch_max(mut self, n: usize) -> ProducerConfig {
        self.batch_max = n.clamp(1, sluice_protocol::limits::BATCH_ENTRIES_MAX);
        self
    }

    /// Batches in flight at once (async producer; at least 1).
    #[must_use]
    pub fn in_flight(mut self, n: usize) -> ProducerConfig {
        self.in_flight = n.max(1);
        self
    }

    /// The queue.
    #[must_use]
    pub fn queue(&self) -> &str {
        &self.queue
    }
}

/// One caller's message and where its result goes.
type Job<R> = (SendEntry, R);
#[cfg(feature = "async")]
type AsyncJob = Job<oneshot::Sender<Result<SendOutcome>>>;
#[cfg(feature = "blocking")]
type BlockingJob = Job<std::sync::mpsc::SyncSender<Result<SendOutcome>>>;

/// Where a caller waits for its entry's result: a tokio oneshot for the
/// async producer, a std channel for the blocking one.
trait Respond {
    fn respond(self, result: Result<SendOutcome>);
}

#[cfg(feature = "async")]
impl Respond for oneshot::Sender<Result<SendOutcome>> {
    fn respond(self, result: Result<SendOutcome>) {
        // The caller may have given up; nobody else wants the result.
        let _ = self.send(result);
    }
}

impl Respond for std::sync::mpsc::SyncSender<Result<SendOutcome>> {
    fn respond(self, result: Result<SendOutcome>) {
        // As above; the channel has room for its one result.
        let _ = self.try_send(result);
    }
}

/// Gathers messages into batches: what to send now, or `None` when the
/// batch may still grow. Pure bookkeeping, shared by both producers.
#[derive(Debug)]
struct Batcher {
    batch_max: usize,
    bytes_max: usize,
    entries: Vec<SendEntry>,
    bytes: usize,
}

impl Batcher {
    fn new(batch_max: usize, frame_bytes_max: usize) -> Batcher {
        Batcher {
            batch_max,
            bytes_max: frame_bytes_max.saturating_sub(SEND_FRAME_OVERHEAD_BYTES),
            entries: Vec::new(),
            bytes: 0,
        }
    }

    /// Whether `entry` fits in the current batch (an empty batch takes
    /// anything: an oversized entry goes alone and fails alone).
    fn fits(&self, entry: &SendEntry) -> bool {
        self.entries.is_empty()
            || (self.entries.len() < self.batch_max
                && self.bytes + entry.encoded_len() <= self.bytes_max)
    }

    fn push(&mut self, entry: SendEntry) {
        self.bytes += entry.encoded_len();
        self.entries.push(entry);
    }

    fn is_full(&self) -> bool {
        self.entries.len() >= self.batch_max
    }

    fn take(&mut self) -> Vec<SendEntry> {
        self.bytes = 0;
        std::mem::take(&mut self.entries)
    }
}

/// Hands each caller its entry's result (the whole request's error to all
/// when it failed as a whole).
fn deliver<R: Respond>(replies: Vec<R>, results: Result<Vec<Result<SendOutcome>>>) {
    match results {
        Ok(results) if results.len() == replies.len() => {
            for (reply, result) in replies.into_iter().zip(results) {
                reply.respond(result);
            }
        }
        Ok(results) => {
            let err = Error::Protocol(format!(
                "{} results for a batch of {}",
                results.len(),
                replies.len()
            ));
            for reply in replies {
                reply.respond(Err(err.clone()));
            }
        }
        Err(err) => {
            for reply in replies {
                reply.respond(Err(err.clone()));
            }
        }
    }
}

#[cfg(feature = "async")]
/// An async batching producer. Cheap to clone; all clones feed one batcher.
///
/// ```no_run
/// use sluice_client::producer::{Producer, ProducerConfig};
/// use sluice_client::{AsyncClient, ClientConfig, SendEntry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sluice_client::Error> {
/// let client = AsyncClient::connect(ClientConfig::default()).await?;
/// let producer = Producer::start(client, ProducerConfig::new("events"));
/// let outcome = producer.send(SendEntry::new("clicked")).await?;
/// println!("sent {}", outcome.id);
/// producer.close().await; // sends what is still gathered
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "async")]
#[derive(Clone, Debug)]
pub struct Producer {
    jobs: mpsc::Sender<AsyncJob>,
    task: Arc<std::sync::Mutex<Option<JoinHandle<()>>>>,
}

#[cfg(feature = "async")]
impl Producer {
    /// Starts the batching task on the current tokio runtime.
    #[must_use]
    pub fn start(client: AsyncClient, config: ProducerConfig) -> Producer {
        let (tx, rx) = mpsc::channel(QUEUED_MAX);
        let task = tokio::spawn(batch_async(client, config, rx));
        Producer {
            jobs: tx,
            task: Arc::new(std::sync::Mutex::new(Some(task))),
        }
    }

    /// Sends one message in the next batch; completes with its own result.
    ///
    /// # Errors
    /// The entry's error, or the batch's when it failed as a whole;
    /// [`Error::Closed`] after [`Producer::close`].
    pub async fn send(&self, entry: SendEntry) -> Result<SendOutcome> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send((entry, tx))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.unwrap_or(Err(Error::Closed))
    }

    /// Drops this handle and, unless another clone is still open, sends
    /// what is gathered and waits until every batch in flight is answered.
    /// (The batching task ends when the last clone is closed or dropped; a
    /// close while other clones live returns at once.)
    pub async fn close(self) {
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let last = Arc::strong_count(&self.task) == 1;
        drop(self.jobs);
        if let Some(task) = task.filter(|_| last) {
            let _ = task.await;
        }
    }
}

#[cfg(feature = "async")]
async fn batch_async(
    client: AsyncClient,
    config: ProducerConfig,
    mut jobs: mpsc::Receiver<AsyncJob>,
) {
    let in_flight = Arc::new(Semaphore::new(config.in_flight));
    let queue: Arc<str> = Arc::from(config.queue.as_str());
    let frame_max = client
        .server_info()
        .map_or(FRAME_BYTES_MAX_DEFAULT, |h| h.limits.frame_bytes_max);
    let mut batcher = Batcher::new(
        config.batch_max,
        usize::try_from(frame_max).unwrap_or(usize::MAX),
    );
    let mut replies = Vec::new();
    let mut carry: Option<AsyncJob> = None;
    loop {
        let first = match carry.take() {
            Some(job) => job,
            None => match jobs.recv().await {
                Some(job) => job,
                None => break,
            },
        };
        batcher.push(first.0);
        replies.push(first.1);
        let deadline = tokio::time::Instant::now() + config.linger;
        while !batcher.is_full() {
            match tokio::time::timeout_at(deadline, jobs.recv()).await {
                Ok(Some(job)) if batcher.fits(&job.0) => {
                    batcher.push(job.0);
                    replies.push(job.1);
                }
                Ok(Some(job)) => {
                    carry = Some(job);
                    break;
                }
                Ok(None) | Err(_) => break,
            }
        }
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            break; // never closed
        };
        let entries = batcher.take();
        let batch_replies = std::mem::take(&mut replies);
        let client = client.clone();
        let queue = Arc::clone(&queue);
        tokio::spawn(async move {
            let results = client.send_batch(&queue, &entries).await;
            deliver(batch_replies, results);
            drop(permit);
        });
    }
    // Wait for the batches in flight.
    let total = u32::try_from(config.in_flight).unwrap_or(u32::MAX);
    let _ = in_flight.acquire_many(total).await;
}

#[cfg(feature = "blocking")]
/// A blocking batching producer: callers on any thread block until their
/// message's batch is answered. Cheap to clone.
///
/// ```no_run
/// use sluice_client::producer::{BlockingProducer, ProducerConfig};
/// use sluice_client::{Client, ClientConfig, SendEntry};
///
/// let client = Client::connect(ClientConfig::default())?;
/// let producer = BlockingProducer::start(client, ProducerConfig::new("events"));
/// let outcome = producer.send(SendEntry::new("clicked"))?;
/// println!("sent {}", outcome.id);
/// # Ok::<(), sluice_client::Error>(())
/// ```
#[cfg(feature = "blocking")]
#[derive(Clone, Debug)]
pub struct BlockingProducer {
    jobs: std::sync::mpsc::SyncSender<BlockingJob>,
}

#[cfg(feature = "blocking")]
impl BlockingProducer {
    /// Starts the batching thread. It ends when every clone is dropped,
    /// after sending what it gathered.
    ///
    /// # Panics
    /// When the thread cannot be spawned.
    #[must_use]
    pub fn start(client: Client, config: ProducerConfig) -> BlockingProducer {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUED_MAX);
        std::thread::Builder::new()
            .name("sluice-producer".into())
            .spawn(move || batch_blocking(&client, &config, &rx))
            .expect("spawning the producer thread");
        BlockingProducer { jobs: tx }
    }

    /// Sends one message in the next batch and waits for its own result.
    ///
    /// # Errors
    /// The entry's error, or the batch's when it failed as a whole.
    pub fn send(&self, entry: SendEntry) -> Result<SendOutcome> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.jobs.send((entry, tx)).map_err(|_| Error::Closed)?;
        rx.recv().unwrap_or(Err(Error::Closed))
    }
}

#[cfg(feature = "blocking")]
fn batch_blocking(
    client: &Client,
    config: &ProducerConfig,
    jobs: &std::sync::mpsc::Receiver<BlockingJob>,
) {
    let frame_max = client
        .server_info()
        .map_or(FRAME_BYTES_MAX_DEFAULT, |h| h.limits.frame_bytes_max);
    let mut batcher = Batcher::new(
        config.batch_max,
        usize::try_from(frame_max).unwrap_or(usize::MAX),
    );
    let mut carry: Option<BlockingJob> = None;
    loop {
        let first = match carry.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut replies = vec![first.1];
        batcher.push(first.0);
        let deadline = std::time::Instant::now() + config.linger;
        while !batcher.is_full() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match jobs.recv_timeout(left) {
                Ok(job) if batcher.fits(&job.0) => {
                    batcher.push(job.0);
                    replies.push(job.1);
                }
                Ok(job) => {
                    carry = Some(job);
                    break;
                }
                Err(_) => break,
            }
        }
        let entries = batcher.take();
        deliver(replies, client.send_batch(&config.queue, &entries));
    }
}

#[cfg(test)]
mod tests {
    use sluice_protocol::MessageId;

    use super::*;

    #[test]
    fn batches_cut_at_the_count_or_the_frame_size() {
        let mut b = Batcher::new(3, 1 << 20);
        for _ in 0..3 {
            let e = SendEntry::new("x");
            assert!(b.fits(&e));
            b.push(e);
        }
        assert!(b.is_full());
        assert_eq!(b.take().len(), 3);
        assert!(!b.is_full());

        // 1,000-byte bodies in a 2,600-byte frame: two fit, the third waits.
        let mut b = Batcher::new(100, 2600);
        let big = SendEntry::new(vec![0u8; 1000]);
        b.push(big.clone());
        assert!(b.fits(&big));
        b.push(big.clone());
        assert!(!b.fits(&big));
        assert_eq!(b.take().len(), 2);
        // An entry above the frame goes alone rather than never.
        let mut b = Batcher::new(100, 100);
        assert!(b.fits(&big));
        b.push(big.clone());
        assert!(!b.fits(&SendEntry::new("y")));
    }

    #[test]
    fn every_caller_gets_its_own_result() {
        let (tx1, rx1) = std::sync::mpsc::sync_channel(1);
        let (tx2, rx2) = std::sync::mpsc::sync_channel(1);
        let ok = SendOutcome {
            id: MessageId(5),
            duplicate: false,
        };
        deliver(
            vec![tx1, tx2],
            Ok(vec![Ok(ok), Err(Error::QueueFull(String::new()))]),
        );
        assert_eq!(rx1.try_recv().unwrap().unwrap(), ok);
        assert!(matches!(rx2.try_recv().unwrap(), Err(Error::QueueFull(_))));

        let (tx1, rx1) = std::sync::mpsc::sync_channel(1);
        let (tx2, rx2) = std::sync::mpsc::sync_channel(1);
        deliver(vec![tx1, tx2], Err(Error::QueueNotFound("q".into())));
        assert!(matches!(
            rx1.try_recv().unwrap(),
            Err(Error::QueueNotFound(_))
        ));
        assert!(matches!(
            rx2.try_recv().unwrap(),
            Err(Error::QueueNotFound(_))
        ));

        let (tx1, rx1) = std::sync::mpsc::sync_channel(1);
        deliver(vec![tx1], Ok(vec![]));
        assert!(matches!(rx1.try_recv().unwrap(), Err(Error::Protocol(_))));
    }
}
