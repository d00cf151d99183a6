//! The steady producer/consumer load that runs beside a fault, the final
//! drain, and helpers around the client.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_client::{
    Client, ClientConfig, Error, QueueOptions, QueueStats, ReceiveOptions, SendEntry,
};

use super::ChaosError;
use super::ledger::{BrokerTotals, Ledger, SendFate, delete_outcome_unknown};

/// Requests of the suite's own clients time out after this: a reply that
/// takes longer is a hang.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Lease of the final drain: long enough that nothing comes back during it.
const DRAIN_VISIBILITY: Duration = Duration::from_secs(600);

/// A client with the suite's time-outs.
///
/// # Errors
/// The connection or its HELLO failed.
pub fn client(addr: &str) -> Result<Client, ChaosError> {
    let config = ClientConfig::new(addr)
        .with_connect_timeout(Duration::from_secs(5))
        .with_request_timeout(REQUEST_TIMEOUT)
        .with_reconnect_delays(Duration::from_millis(10), Duration::from_millis(200));
    Client::connect(config).map_err(|e| ChaosError::Client(format!("connect to {addr}: {e}")))
}

/// Creates a queue.
///
/// # Errors
/// The create failed.
pub fn create_queue(c: &Client, name: &str, attrs: &QueueOptions) -> Result<(), ChaosError> {
    c.create_queue(name, attrs)
        .map(|_| ())
        .map_err(|e| ChaosError::Client(format!("create queue {name}: {e}")))
}

/// The counters of each queue.
///
/// # Errors
/// A GET_QUEUE failed.
pub fn queue_stats(c: &Client, queues: &[&str]) -> Result<Vec<QueueStats>, ChaosError> {
    queues
        .iter()
        .map(|q| {
            c.queue_info(q)
                .map(|i| i.stats)
                .map_err(|e| ChaosError::Client(format!("stats of {q}: {e}")))
        })
        .collect()
}

/// Error counts by name, shared by a workload's threads.
#[derive(Debug, Default)]
pub struct ErrorCounts(Mutex<BTreeMap<String, u64>>);

impl ErrorCounts {
    /// Counts one error of operation `op`.
    pub fn add(&self, op: &str, err: &Error) {
        let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *m.entry(format!("{op}: {}", err.name())).or_default() += 1;
    }

    /// The counts.
    #[must_use]
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Operation counts of a workload.
#[derive(Debug, Default)]
pub struct OpCounts {
    /// Send requests answered.
    pub sends: AtomicU64,
    /// Receive requests answered.
    pub receives: AtomicU64,
    /// Delete requests answered.
    pub deletes: AtomicU64,
    /// Errors by operation and name.
    pub errors: ErrorCounts,
}

/// How the steady load runs.
#[derive(Debug, Clone)]
pub struct SteadySpec {
    /// Its queue.
    pub queue: String,
    /// Producer threads.
    pub producers: usize,
    /// Consumer threads.
    pub consumers: usize,
    /// Messages per send batch.
    pub batch: usize,
    /// Pause between a producer's batches.
    pub pause: Duration,
    /// Body bytes.
    pub body_bytes: usize,
}

impl SteadySpec {
    /// A light load on `queue`: one producer and one consumer, batches of
    /// 16 every 5 ms (about 3,000 messages/s).
    #[must_use]
    pub fn light(queue: &str) -> SteadySpec {
        SteadySpec {
            queue: queue.to_owned(),
            producers: 1,
            consumers: 1,
            batch: 16,
            pause: Duration::from_millis(5),
            body_bytes: 100,
        }
    }
}

/// A running steady load.
#[derive(Debug)]
pub struct Steady {
    stop_producers: Arc<AtomicBool>,
    stop_consumers: Arc<AtomicBool>,
    producers: Vec<JoinHandle<()>>,
    consumers: Vec<JoinHandle<()>>,
    /// What it did.
    pub counts: Arc<OpCounts>,
}

impl Steady {
    /// Starts the load on its own connections (one per thread).
    ///
    /// # Errors
    /// A connection failed.
    pub fn start(
        addr: &str,
        spec: &SteadySpec,
        ledger: &Arc<Ledger>,
    ) -> Result<Steady, ChaosError> {
        let stop_producers = Arc::new(AtomicBool::new(false));
        let stop_consumers = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(OpCounts::default());
        let mut producers = Vec::new();
        for _ in 0..spec.producers {
            let c = client(addr)?;
            let (spec, ledger, stop, counts) = (
                spec.clone(),
                Arc::clone(ledger),
                Arc::clone(&stop_producers),
                Arc::clone(&counts),
            );
            producers.push(spawn("chaos-producer", move || {
                while !stop.load(Relaxed) {
                    send_batch(&c, &spec.queue, &ledger, spec.batch, &counts);
                    std::thread::sleep(spec.pause);
                }
            })?);
        }
        let mut consumers = Vec::new();
        for _ in 0..spec.consumers {
            let c = client(addr)?;
            let (spec, ledger, stop, counts) = (
                spec.clone(),
                Arc::clone(ledger),
                Arc::clone(&stop_consumers),
                Arc::clone(&counts),
            );
            consumers.push(spawn("chaos-consumer", move || {
                let options = ReceiveOptions::new(64).wait(Duration::from_millis(100));
                while !stop.load(Relaxed) {
                    if receive_and_delete(&c, &spec.queue, &ledger, options, &counts).is_err() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })?);
        }
        Ok(Steady {
            stop_producers,
            stop_consumers,
            producers,
            consumers,
            counts,
        })
    }

    /// Stops the producers, lets the consumers run `linger` longer, stops
    /// them and waits for every thread.
    pub fn stop(self, linger: Duration) -> Arc<OpCounts> {
        self.stop_producers.store(true, Relaxed);
        for t in self.producers {
            let _ = t.join();
        }
        std::thread::sleep(linger);
        self.stop_consumers.store(true, Relaxed);
        for t in self.consumers {
            let _ = t.join();
        }
        self.counts
    }
}

/// Spawns a named thread.
///
/// # Errors
/// The thread could not be started.
pub fn spawn<F>(name: &str, f: F) -> Result<JoinHandle<()>, ChaosError>
where
    F: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map_err(|e| ChaosError::Setup(format!("thread {name}: {e}")))
}

/// Sends one batch of `n` fresh messages and records how each ended.
/// Returns the per-entry fates.
pub fn send_batch(
    c: &Client,
    queue: &str,
    ledger: &Ledger,
    n: usize,
    counts: &OpCounts,
) -> Vec<SendFate> {
    let (first, bodies) = ledger.issue(n);
    let entries: Vec<SendEntry> = bodies.into_iter().map(SendEntry::new).collect();
    let fates: Vec<SendFate> = match c.send_batch(queue, &entries) {
        Ok(results) => {
            counts.sends.fetch_add(1, Relaxed);
            results
                .iter()
                .map(|r| match r {
                    Ok(_) => SendFate::Acked,
                    Err(e) => {
                        counts.errors.add("send entry", e);
                        SendFate::of_error(e)
                    }
                })
                .collect()
        }
        Err(e) => {
            counts.errors.add("send", &e);
            vec![SendFate::of_error(&e); entries.len()]
        }
    };
    ledger.sent(first, &fates);
    fates
}

/// One receive (with `options`) and a delete of everything it got.
/// Returns how many messages were received.
///
/// # Errors
/// The receive or the delete request failed as a whole (already counted).
pub fn receive_and_delete(
    c: &Client,
    queue: &str,
    ledger: &Ledger,
    options: ReceiveOptions,
    counts: &OpCounts,
) -> Result<usize, Error> {
    let got = c.receive(queue, options).inspect_err(|e| {
        counts.errors.add("receive", e);
    })?;
    counts.receives.fetch_add(1, Relaxed);
    if got.is_empty() {
        return Ok(0);
    }
    ledger.delivered(got.iter().map(|m| (&m.body[..], m.delivery())));
    let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
    let seqs: Vec<Option<u64>> = got.iter().map(|m| ledger.seq_of(&m.body)).collect();
    match c.delete_batch(queue, &receipts) {
        Ok(results) => {
            counts.deletes.fetch_add(1, Relaxed);
            let mut done = Vec::new();
            for ((r, seq), m) in results.iter().zip(&seqs).zip(&got) {
                match (r, seq) {
                    (Ok(()), Some(seq)) => done.push((*seq, m.delivery())),
                    (Ok(()), None) => {}
                    (Err(e), _) => counts.errors.add("delete entry", e),
                }
            }
            ledger.deleted(done);
        }
        Err(e) => {
            counts.errors.add("delete", &e);
            if delete_outcome_unknown(&e) {
                ledger.delete_unknown(seqs.into_iter().flatten());
            }
            return Err(e);
        }
    }
    Ok(got.len())
}

/// What the final drain found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drained {
    /// Messages found held (now leased to the drain).
    pub messages: u64,
    /// Whether every queue was empty but for the drain's leases at the end.
    pub complete: bool,
}

/// Leases every message left in `queues` (waiting up to `patience` for
/// leases held elsewhere to run out) and records them as held. Run it
/// when nothing else consumes these queues.
///
/// # Errors
/// A request failed.
pub fn drain(
    c: &Client,
    ledger: &Ledger,
    queues: &[&str],
    patience: Duration,
) -> Result<Drained, ChaosError> {
    let deadline = Instant::now() + patience;
    let mut out = Drained {
        complete: true,
        ..Drained::default()
    };
    for q in queues {
        let mut mine = 0u64;
        loop {
            let options = ReceiveOptions::new(1024).visibility_timeout(DRAIN_VISIBILITY);
            let got = c
                .receive(q, options)
                .map_err(|e| ChaosError::Client(format!("drain {q}: {e}")))?;
            if !got.is_empty() {
                mine += got.len() as u64;
                ledger.delivered(got.iter().map(|m| (&m.body[..], m.delivery())));
                ledger.held(got.iter().filter_map(|m| ledger.seq_of(&m.body)));
                continue;
            }
            let s = c
                .queue_info(q)
                .map_err(|e| ChaosError::Client(format!("stats of {q}: {e}")))?
                .stats;
            if s.visible + s.delayed == 0 && s.in_flight == mine {
                break;
            }
            if Instant::now() >= deadline {
                out.complete = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        out.messages += mine;
    }
    Ok(out)
}

/// The broker's totals over `queues` and how many of them break the
/// accounting identity.
///
/// # Errors
/// A GET_QUEUE failed.
pub fn totals(
    c: &Client,
    queues: &[&str],
) -> Result<(BrokerTotals, u64, Vec<QueueStats>), ChaosError> {
    let stats = queue_stats(c, queues)?;
    let broken = stats.iter().filter(|s| !s.identity_holds()).count() as u64;
    Ok((BrokerTotals::of(&stats), broken, stats))
}

/// Waits until `f` holds or `limit` passes; whether it held.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
