//! Memory pressure: a `--memory-max` small enough to fill. Each cycle sends
//! until sends get `Busy`, then drains the queue (receives, deletes, and
//! releases through a visibility change to 0) while sends go on being
//! tried, then checks that sends succeed again once it is drained.
//!
//! Receives, deletes and visibility changes must never get `Busy`; the
//! broker's memory in use must stay within `--memory-max`; a `Busy` entry
//! is a definite refusal (the ledger then expects it never to be
//! delivered).

use std::time::{Duration, Instant};

use sluice_client::{Client, QueueOptions, ReceiveOptions, ReceivedMessage};

use super::{RSS_SLACK_BYTES, check_errors};
use crate::chaos::ledger::{Ledger, SendFate};
use crate::chaos::report::mib;
use crate::chaos::workload::{self, OpCounts};
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness, MIB};

pub(super) const FAULT: Fault = Fault {
    name: "memory-pressure",
    description: "--memory-max reached: sends get Busy while receives, deletes and releases go \
                  on; sends succeed again once drained",
    run,
};

const QUEUE: &str = "memory.q";
const BODY_BYTES: usize = 1000;
const BATCH: usize = 64;

#[derive(Debug, Default)]
struct Tally {
    busy_entries: u64,
    busy_during_drain: u64,
    sent_during_drain: u64,
    released: u64,
    memory_used_peak: u64,
    depth_at_full: u64,
    cycles_without_busy: u64,
    refill_refused: u64,
}

fn counter(c: &Client, name: &str) -> Result<u64, ChaosError> {
    c.server_stats()
        .map(|s| s.counter(name).unwrap_or(0))
        .map_err(|e| ChaosError::Client(format!("server stats: {e}")))
}

/// How long one cycle's fill may take (its drain: twice that, from the
/// cycle's start).
const CYCLE_TIME_MAX: Duration = Duration::from_secs(60);

/// The clients and books of the fault.
struct Clients<'a> {
    producer: &'a Client,
    consumer: &'a Client,
    ledger: &'a Ledger,
    counts: &'a OpCounts,
}

fn run(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    let cycles = ctx.mode.pick(5, 2);
    let memory_max = ctx.mode.pick(64 * MIB, 8 * MIB);
    let mm = format!("{}MiB", memory_max / MIB);
    let mut h = Harness::start(ctx, &["--memory-max", &mm])?;
    workload::create_queue(&h.control, QUEUE, &QueueOptions::new())?;
    let ledger = Ledger::new(BODY_BYTES);
    let producer = workload::client(&h.addr)?;
    let consumer = workload::client(&h.addr)?;
    let counts = OpCounts::default();
    let mut t = Tally::default();
    let max_fill = 4 * memory_max / BODY_BYTES as u64;
    let c = Clients {
        producer: &producer,
        consumer: &consumer,
        ledger: &ledger,
        counts: &counts,
    };

    for cycle in 0..cycles {
        let start = Instant::now();
        let depth = fill(ctx, &mut h, &c, &mut t, cycle, start, max_fill)?;
        drain(&mut h, &c, &mut t, cycle, start, depth)?;
        // Drained: a whole batch must go through again.
        let fates = workload::send_batch(&producer, QUEUE, &ledger, BATCH, &counts);
        let refused = fates.iter().filter(|f| **f != SendFate::Acked).count() as u64;
        t.refill_refused += refused;
    }

    record(&mut h, &t, cycles, memory_max);
    // Busy on sends is the point; on anything else it is a violation.
    let errors = counts.errors.snapshot();
    let sends_only: std::collections::BTreeMap<String, u64> = errors
        .iter()
        .filter(|(k, _)| !k.starts_with("send entry: Busy"))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    check_errors(&mut h, "memory-pressure clients", &sends_only, &[]);
    let bound = (
        h.start_rss() + memory_max + RSS_SLACK_BYTES,
        format!(
            "RSS at start + --memory-max {} + {} MiB",
            mib(memory_max),
            RSS_SLACK_BYTES / MIB
        ),
    );
    drop((producer, consumer));
    h.finish(&FAULT, &ledger, &[QUEUE], bound)
}

/// Fills until three batches in a row are refused whole; returns the
/// queue's depth then.
fn fill(
    ctx: &Ctx,
    h: &mut Harness,
    c: &Clients<'_>,
    t: &mut Tally,
    cycle: u32,
    start: Instant,
    max_fill: u64,
) -> Result<u64, ChaosError> {
    let mut refused_in_row = 0;
    let mut busy_this_cycle = 0;
    let issued_before = c.ledger.issued();
    while refused_in_row < 3 && c.ledger.issued() - issued_before < max_fill {
        if start.elapsed() > CYCLE_TIME_MAX {
            h.violation(format!(
                "cycle {cycle}: sends never got Busy within {CYCLE_TIME_MAX:?}"
            ));
            break;
        }
        let fates = workload::send_batch(c.producer, QUEUE, c.ledger, BATCH, c.counts);
        let busy = fates.iter().filter(|f| **f == SendFate::Refused).count() as u64;
        busy_this_cycle += busy;
        refused_in_row = if busy == BATCH as u64 {
            refused_in_row + 1
        } else {
            0
        };
    }
    t.busy_entries += busy_this_cycle;
    if busy_this_cycle == 0 {
        t.cycles_without_busy += 1;
    }
    let used = counter(&h.control, "memory_used_bytes")?;
    t.memory_used_peak = t.memory_used_peak.max(used);
    let depth = workload::queue_stats(&h.control, &[QUEUE])?[0].visible;
    t.depth_at_full = t.depth_at_full.max(depth);
    ctx.say(format!(
        "cycle {cycle}: full at {} held, {} in use, {busy_this_cycle} entries Busy",
        depth,
        mib(used)
    ));
    Ok(depth)
}

/// Drains: receive, release some, delete the rest; keep trying sends until
/// half the backlog is gone (they get Busy, then go through as room frees
/// up).
fn drain(
    h: &mut Harness,
    c: &Clients<'_>,
    t: &mut Tally,
    cycle: u32,
    start: Instant,
    depth: u64,
) -> Result<(), ChaosError> {
    loop {
        if start.elapsed() > CYCLE_TIME_MAX * 2 {
            h.violation(format!("cycle {cycle}: the drain did not finish"));
            break;
        }
        let backlog = c.ledger.issued() - c.ledger.deleted_count();
        if backlog > depth / 2 {
            let fates = workload::send_batch(c.producer, QUEUE, c.ledger, 16, c.counts);
            let busy = fates.iter().filter(|f| **f == SendFate::Refused).count() as u64;
            t.busy_during_drain += busy;
            t.sent_during_drain += fates.len() as u64 - busy;
        }
        let options = ReceiveOptions::new(256).visibility_timeout(Duration::from_secs(30));
        let got = match c.consumer.receive(QUEUE, options) {
            Ok(got) => got,
            Err(e) => {
                c.counts.errors.add("receive", &e);
                continue;
            }
        };
        if got.is_empty() {
            let s = &workload::queue_stats(&h.control, &[QUEUE])?[0];
            if s.visible + s.delayed + s.in_flight == 0 {
                break;
            }
            continue;
        }
        c.ledger
            .delivered(got.iter().map(|m| (&m.body[..], m.delivery())));
        release_and_delete(c, t, &got);
    }
    Ok(())
}

/// Releases one in eight first deliveries through a visibility change to 0
/// (each message at most once) and deletes the rest.
fn release_and_delete(c: &Clients<'_>, t: &mut Tally, got: &[ReceivedMessage]) {
    let (release, delete): (Vec<_>, Vec<_>) = got
        .iter()
        .enumerate()
        .partition(|(k, m)| k % 8 == 0 && m.receive_count == 1);
    let changes: Vec<_> = release
        .iter()
        .map(|(_, m)| (m.receipt, Duration::ZERO))
        .collect();
    let changed = if changes.is_empty() {
        Ok(Vec::new())
    } else {
        c.consumer.change_visibility_batch(QUEUE, &changes)
    };
    match changed {
        Ok(results) => {
            for r in results {
                match r {
                    Ok(()) => t.released += 1,
                    Err(e) => c.counts.errors.add("change visibility entry", &e),
                }
            }
        }
        Err(e) => c.counts.errors.add("change visibility", &e),
    }
    let receipts: Vec<_> = delete.iter().map(|(_, m)| m.receipt).collect();
    if receipts.is_empty() {
        return;
    }
    match c.consumer.delete_batch(QUEUE, &receipts) {
        Ok(results) => {
            let mut done = Vec::new();
            for (r, (_, m)) in results.iter().zip(&delete) {
                match (r, c.ledger.seq_of(&m.body)) {
                    (Ok(()), Some(seq)) => done.push((seq, m.delivery())),
                    (Ok(()), None) => {}
                    (Err(e), _) => c.counts.errors.add("delete entry", e),
                }
            }
            c.ledger.deleted(done);
        }
        Err(e) => c.counts.errors.add("delete", &e),
    }
}

/// The fault's facts and its violations but for the clients' errors.
fn record(h: &mut Harness, t: &Tally, cycles: u32, memory_max: u64) {
    h.fact("--memory-max", mib(memory_max));
    h.fact("cycles (fill to Busy, drain, send again)", cycles);
    h.fact("send entries refused with Busy while full", t.busy_entries);
    h.fact("messages held when full, peak", t.depth_at_full);
    h.fact(
        "server memory in use (its counter), peak",
        mib(t.memory_used_peak),
    );
    h.fact(
        "during drains: send entries Busy / accepted",
        format!("{} / {}", t.busy_during_drain, t.sent_during_drain),
    );
    h.fact("messages released (visibility 0)", t.released);
    if t.cycles_without_busy > 0 {
        h.violation(format!("{} cycles never got Busy", t.cycles_without_busy));
    }
    if t.busy_during_drain == 0 {
        h.violation("no send got Busy during the drains, though they began full");
    }
    if t.memory_used_peak > memory_max {
        h.violation(format!(
            "memory in use {} above --memory-max {}",
            mib(t.memory_used_peak),
            mib(memory_max)
        ));
    }
    if t.refill_refused > 0 {
        h.violation(format!(
            "{} send entries refused after the queue was drained",
            t.refill_refused
        ));
    }
}
