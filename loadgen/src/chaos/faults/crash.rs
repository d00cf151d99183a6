//! The broker itself killed with SIGKILL under load, and started again on
//! its write-ahead log (`--durability always`).
//!
//! Two producers and two consumers run against a queue whose messages go
//! to a dead-letter queue after their third receive. At random moments
//! (from a printed seed) the server is killed with SIGKILL and started
//! again on the same address and log folder; the clients reconnect. A
//! request cut by a kill has an unknown outcome (the ledger says so). At
//! the end the queues are drained and every message is accounted for:
//! every acknowledged send is deleted, dead-lettered or still held (none
//! lost), no message is delivered after an acknowledged delete, and the
//! broker's counters, rebuilt from its log at each start, agree with the
//! tool's and with the accounting identity.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};
use sluice_client::{QueueOptions, ReceiveOptions, RedrivePolicy};

use super::{memory_max_flag, per_second, usual_bound};
use crate::chaos::ledger::{Ledger, SendFate};
use crate::chaos::workload::{self, OpCounts};
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness};

pub(super) const FAULT: Fault = Fault {
    name: "crash",
    description: "the broker killed with SIGKILL at random moments under load and started \
                  again on its write-ahead log (--durability always): no acknowledged send \
                  lost, no acknowledged delete back",
    run: run_always,
};

/// The same under `--durability batch`, whose records wait in memory until
/// the sync interval is up (or 256 KiB of them gather): a kill may take
/// what was acknowledged within the interval before it, and nothing older.
/// The ledger counts what the kills took (sends lost, deletes undone) and
/// holds everything else to the rules.
pub(super) const FAULT_BATCH: Fault = Fault {
    name: "crash-batch",
    description: "the same with --durability batch (100 ms): a kill may take only what was \
                  acknowledged within the interval before it, and what it took is counted",
    run: run_batch,
};

/// How long before a kill `batch` may lose what it acknowledged: the
/// interval (the server's default, 100 ms), and as much again for the turn
/// that writes late and for the scheduling of a loaded two-core machine
/// (the report gives the oldest loss it saw).
const BATCH_LOSS_WINDOW: Duration = Duration::from_millis(200);

fn run_always(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    run(ctx, &FAULT, "always")
}

fn run_batch(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    run(ctx, &FAULT_BATCH, "batch")
}

const QUEUE: &str = "crash.q";
const DLQ: &str = "crash.dlq";
const VISIBILITY: Duration = Duration::from_secs(1);
/// The seed of the kill times (printed in the report).
const SEED: u64 = 20_261_207;

/// A worker's loop: `step` until `stop`, a short pause after a failed step
/// (the server is down or starting; the client reconnects by itself).
fn work(stop: &AtomicBool, mut step: impl FnMut() -> bool) {
    while !stop.load(Relaxed) {
        if !step() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn run(ctx: &Ctx, fault: &Fault, durability: &str) -> Result<FaultReport, ChaosError> {
    let kills = ctx.mode.pick(20, 3);
    let messages_max: u64 = ctx.mode.pick(400_000, 60_000);
    let dir = std::env::temp_dir().join(format!(
        "sluice-chaos-{}-{}",
        fault.name,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_flag = dir.to_string_lossy().into_owned();
    let mm = memory_max_flag();
    let flags = [
        "--memory-max",
        mm.as_str(),
        "--durability",
        durability,
        "--log-dir",
        dir_flag.as_str(),
    ];
    let mut h = Harness::start(ctx, &flags)?;
    workload::create_queue(&h.control, DLQ, &QueueOptions::new())?;
    workload::create_queue(
        &h.control,
        QUEUE,
        &QueueOptions::new()
            .visibility_timeout(VISIBILITY)
            .redrive(RedrivePolicy::new(DLQ, 3)),
    )?;
    // The sends spread over the kills (about 0.7 s apart): every kill
    // lands on producers at work, not on a queue already filled. The load
    // phase starts here.
    let pace = messages_max as f64 / (f64::from(kills) * 0.7);
    let load_began = Instant::now();
    let ledger = Arc::new(Ledger::new(100));
    if durability == "batch" {
        ledger.allow_loss_before_kills(BATCH_LOSS_WINDOW);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(OpCounts::default());
    let mut workers = Vec::new();
    for i in 0..2 {
        let c = workload::client(&h.addr)?;
        let (l, s, n) = (Arc::clone(&ledger), Arc::clone(&stop), Arc::clone(&counts));
        workers.push(workload::spawn(
            &format!("chaos-producer-{i}"),
            move || {
                work(&s, || {
                    let due = (load_began.elapsed().as_secs_f64() * pace) as u64;
                    if l.issued() >= messages_max.min(due) {
                        std::thread::sleep(Duration::from_millis(20));
                        return true;
                    }
                    let fates = workload::send_batch(&c, QUEUE, &l, 32, &n);
                    fates.iter().all(|f| *f == SendFate::Acked)
                });
            },
        )?);
        let c = workload::client(&h.addr)?;
        let (l, s, n) = (Arc::clone(&ledger), Arc::clone(&stop), Arc::clone(&counts));
        workers.push(workload::spawn(
            &format!("chaos-consumer-{i}"),
            move || {
                let options = ReceiveOptions::new(64)
                    .visibility_timeout(VISIBILITY)
                    .wait(Duration::from_millis(100));
                work(&s, || {
                    workload::receive_and_delete(&c, QUEUE, &l, options, &n).is_ok()
                });
            },
        )?);
    }

    let mut rng = StdRng::seed_from_u64(SEED);
    let restarts = Mutex::new(Vec::new());
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(rng.random_range(200..1_200)));
        let acked = ledger.acked();
        let began = Instant::now();
        h.crash_and_restart(ctx, &flags, &ledger)?;
        restarts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((acked, began.elapsed()));
    }
    // Load after the last start too, then the consumers catch up.
    std::thread::sleep(Duration::from_millis(500));
    let load_secs = load_began.elapsed().as_secs_f64();
    stop.store(true, Relaxed);
    for w in workers {
        let _ = w.join();
    }
    ctx.say(format!("{kills} kills in {load_secs:.1} s"));

    let restarts = restarts
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let slowest = restarts.iter().map(|r| r.1).max().unwrap_or_default();
    let at_kills: Vec<String> = restarts.iter().map(|r| r.0.to_string()).collect();
    let sent = ledger.acked();
    h.fact("server kills (SIGKILL), each followed by a start", kills);
    h.fact("kill times' seed", SEED);
    h.fact("load phase, s", format!("{load_secs:.1}"));
    h.fact("acknowledged sends", sent);
    h.fact("acknowledged sends at each kill", at_kills.join(" "));
    h.fact("messages sent per second", per_second(sent, load_secs));
    h.fact(
        "slowest kill-to-serving (log replay included), ms",
        slowest.as_millis(),
    );
    for (what, n) in counts.errors.snapshot() {
        h.fact(&format!("client errors around the kills: {what}"), n);
    }
    let q = &workload::queue_stats(&h.control, &[QUEUE])?[0];
    h.fact("dead-lettered (broker)", q.dead_lettered);
    let bound = usual_bound(h.start_rss());
    let report = h.finish(fault, &ledger, &[QUEUE, DLQ], bound);
    let _ = std::fs::remove_dir_all(&dir);
    report
}
