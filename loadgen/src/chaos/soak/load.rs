//! The soak's load: paced producers, a feed for the long-poll queue,
//! consumers that delete, release, leave to run out and now and then crash,
//! a redriver and a long poller, each on a thread of its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::Rng;
use sluice_client::{Client, ReceiveOptions, ReceivedMessage};

use super::{DLQ, POLL, QUEUE, SoakSpec};
use crate::chaos::ChaosError;
use crate::chaos::ledger::{Ledger, delete_outcome_unknown};
use crate::chaos::workload::{self, OpCounts};

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) crashes: AtomicU64,
    pub(super) redrive_requests: AtomicU64,
    pub(super) redriven: AtomicU64,
    pub(super) polls_with: AtomicU64,
    pub(super) polls_empty: AtomicU64,
}

pub(super) struct Load {
    pub(super) stop_producers: Arc<AtomicBool>,
    pub(super) stop_all: Arc<AtomicBool>,
    pub(super) producers: Vec<JoinHandle<()>>,
    pub(super) others: Vec<JoinHandle<()>>,
}

pub(super) fn start_load(
    addr: &str,
    spec: &SoakSpec,
    ledger: &Arc<Ledger>,
    counts: &Arc<OpCounts>,
    counters: &Arc<Counters>,
    pause: &Arc<RwLock<()>>,
) -> Result<Load, ChaosError> {
    let stop_producers = Arc::new(AtomicBool::new(false));
    let stop_all = Arc::new(AtomicBool::new(false));
    let producers = start_producers(addr, spec, ledger, counts, &stop_producers)?;
    let mut others = Vec::new();
    // Consumers.
    for _ in 0..3 {
        let (ledger, counts, counters, stop, pause) = (
            Arc::clone(ledger),
            Arc::clone(counts),
            Arc::clone(counters),
            Arc::clone(&stop_all),
            Arc::clone(pause),
        );
        let addr = addr.to_owned();
        let c = workload::client(&addr)?;
        others.push(workload::spawn("soak-consumer", move || {
            consume(c, &addr, &ledger, &counts, &counters, &stop, &pause);
        })?);
    }
    others.push(start_redriver(addr, counts, counters, &stop_all)?);
    others.push(start_long_poller(
        addr, ledger, counts, counters, &stop_all,
    )?);
    Ok(Load {
        stop_producers,
        stop_all,
        producers,
        others,
    })
}

/// The producers (paced batches of 20) and the long-poll queue's feed (one
/// message every 200 ms), all stopped by `stop`.
fn start_producers(
    addr: &str,
    spec: &SoakSpec,
    ledger: &Arc<Ledger>,
    counts: &Arc<OpCounts>,
    stop_producers: &Arc<AtomicBool>,
) -> Result<Vec<JoinHandle<()>>, ChaosError> {
    let mut producers = Vec::new();
    // Producers: paced batches of 20.
    let per_producer = f64::from(spec.rate.max(2)) / 2.0;
    let interval = Duration::from_secs_f64(20.0 / per_producer);
    for _ in 0..2 {
        let c = workload::client(addr)?;
        let (ledger, counts, stop) = (
            Arc::clone(ledger),
            Arc::clone(counts),
            Arc::clone(stop_producers),
        );
        producers.push(workload::spawn("soak-producer", move || {
            let mut next = Instant::now();
            while !stop.load(Relaxed) {
                workload::send_batch(&c, QUEUE, &ledger, 20, &counts);
                next += interval;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        })?);
    }
    // Feeding the long-poll queue: one message every 200 ms.
    {
        let c = workload::client(addr)?;
        let (ledger, counts, stop) = (
            Arc::clone(ledger),
            Arc::clone(counts),
            Arc::clone(stop_producers),
        );
        producers.push(workload::spawn("soak-poll-feed", move || {
            while !stop.load(Relaxed) {
                workload::send_batch(&c, POLL, &ledger, 1, &counts);
                std::thread::sleep(Duration::from_millis(200));
            }
        })?);
    }
    Ok(producers)
}

/// One consumer's thread: receives under the queue's lease and handles each
/// batch, or (one batch in 400) crashes holding the leases and connects
/// again.
fn consume(
    mut c: Client,
    addr: &str,
    ledger: &Ledger,
    counts: &OpCounts,
    counters: &Counters,
    stop: &AtomicBool,
    pause: &RwLock<()>,
) {
    let mut rng = rand::rng();
    let options = ReceiveOptions::new(32).wait(Duration::from_secs(1));
    while !stop.load(Relaxed) {
        let got = match c.receive(QUEUE, options) {
            Ok(got) => got,
            Err(e) => {
                counts.errors.add("receive", &e);
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if got.is_empty() {
            continue;
        }
        ledger.delivered(got.iter().map(|m| (&m.body[..], m.delivery())));
        // One batch in 400: crash holding the leases.
        if rng.random_range(0..400) == 0 {
            let _guard = pause
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            drop(c);
            counters.crashes.fetch_add(1, Relaxed);
            c = loop {
                match workload::client(addr) {
                    Ok(c) => break c,
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            };
            continue;
        }
        handle_batch(&c, &mut rng, &got, ledger, counts);
    }
}

/// Releases about 6% of a batch (visibility 0), leaves 4% to run out and
/// deletes the rest.
fn handle_batch(
    c: &Client,
    rng: &mut impl Rng,
    got: &[ReceivedMessage],
    ledger: &Ledger,
    counts: &OpCounts,
) {
    let mut deletes = Vec::new();
    let mut releases = Vec::new();
    for m in got {
        match rng.random_range(0..100) {
            0..6 => releases.push((m.receipt, Duration::ZERO)),
            6..10 => {} // left to run out
            _ => deletes.push(m),
        }
    }
    if !releases.is_empty() {
        if let Err(e) = c.change_visibility_batch(QUEUE, &releases).map(|r| {
            for e in r.into_iter().filter_map(Result::err) {
                counts.errors.add("release entry", &e);
            }
        }) {
            counts.errors.add("release", &e);
        }
    }
    if deletes.is_empty() {
        return;
    }
    let receipts: Vec<_> = deletes.iter().map(|m| m.receipt).collect();
    match c.delete_batch(QUEUE, &receipts) {
        Ok(results) => {
            let mut done = Vec::new();
            for (r, m) in results.iter().zip(&deletes) {
                match (r, ledger.seq_of(&m.body)) {
                    (Ok(()), Some(seq)) => done.push((seq, m.delivery())),
                    (Ok(()), None) => {}
                    (Err(e), _) => counts.errors.add("delete entry", e),
                }
            }
            ledger.deleted(done);
        }
        Err(e) => {
            counts.errors.add("delete", &e);
            if delete_outcome_unknown(&e) {
                ledger.delete_unknown(deletes.iter().filter_map(|m| ledger.seq_of(&m.body)));
            }
        }
    }
}

/// The redriver: moves the dead-letter queue back every 10 s.
fn start_redriver(
    addr: &str,
    counts: &Arc<OpCounts>,
    counters: &Arc<Counters>,
    stop_all: &Arc<AtomicBool>,
) -> Result<JoinHandle<()>, ChaosError> {
    let c = workload::client(addr)?;
    let (counts, counters, stop) = (
        Arc::clone(counts),
        Arc::clone(counters),
        Arc::clone(stop_all),
    );
    workload::spawn("soak-redriver", move || {
        let mut last = Instant::now();
        while !stop.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if last.elapsed() < Duration::from_secs(10) {
                continue;
            }
            last = Instant::now();
            match c.redrive(DLQ, 1_000) {
                Ok(r) => {
                    counters.redrive_requests.fetch_add(1, Relaxed);
                    counters.redriven.fetch_add(r.moved as u64, Relaxed);
                }
                Err(e) => counts.errors.add("redrive", &e),
            }
        }
    })
}

/// The long poller: 10 s waits on the queue fed every 200 ms.
fn start_long_poller(
    addr: &str,
    ledger: &Arc<Ledger>,
    counts: &Arc<OpCounts>,
    counters: &Arc<Counters>,
    stop_all: &Arc<AtomicBool>,
) -> Result<JoinHandle<()>, ChaosError> {
    let c = workload::client(addr)?;
    let (ledger, counts, counters, stop) = (
        Arc::clone(ledger),
        Arc::clone(counts),
        Arc::clone(counters),
        Arc::clone(stop_all),
    );
    workload::spawn("soak-long-poll", move || {
        let options = ReceiveOptions::new(10).wait(Duration::from_secs(10));
        while !stop.load(Relaxed) {
            match workload::receive_and_delete(&c, POLL, &ledger, options, &counts) {
                Ok(0) => counters.polls_empty.fetch_add(1, Relaxed),
                Ok(_) => counters.polls_with.fetch_add(1, Relaxed),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(20));
                    0
                }
            };
        }
    })
}
