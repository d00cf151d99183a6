//! The soak: mixed load against one server for a given time, sampling its
//! RSS, descriptors and counters.
//!
//! The load, all at once:
//! - producers sending batches at `--rate` messages/s in all;
//! - consumers receiving under a 2 s lease (queue with a retry backoff
//!   and a dead-letter queue after 4 deliveries), then deleting most
//!   messages, releasing some (visibility 0), leaving some to run out, and
//!   now and then "crashing": dropping their connection while they hold a
//!   batch, then connecting again;
//! - a redriver moving the dead-letter queue back every 10 s;
//! - a long poller (10 s waits) on a queue fed one message every 200 ms.
//!
//! Every `--sample-every` (and at the end) the server's RSS, descriptor
//! count and counters are sampled; crashes pause for the sample so the
//! descriptor count is not caught between a close and a connect. At the
//! end the load stops, the queues are drained and every message is
//! reconciled. Checks: RSS and descriptors flat after the warm-up (every
//! sample under load within 5% of the first sample after the warm-up, the
//! last one not above it by more than 5%), no WARN or ERROR line in the
//! server's log, nothing lost, the accounting identity intact.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_client::{QueueOptions, RedrivePolicy};

use super::ledger::{Ledger, Reconciled};
use super::report::mib;
use super::workload::{self, OpCounts};
use super::{ChaosError, Ctx, DRAIN_PATIENCE, Harness, MIB};

mod load;

use load::{Counters, Load, start_load};

const QUEUE: &str = "soak.q";
const DLQ: &str = "soak.dlq";
const POLL: &str = "soak.poll";
const VISIBILITY: Duration = Duration::from_secs(2);
/// Flatness tolerance after the warm-up.
const FLAT_PER_MILLE: u64 = 50;
/// The soak's `--memory-max`.
const MEMORY_MAX_BYTES: u64 = 256 * MIB;

/// How the soak runs.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSpec {
    /// How long the load runs.
    pub duration: Duration,
    /// Time between samples.
    pub sample_every: Duration,
    /// Samples before this are warm-up.
    pub warmup: Duration,
    /// Messages per second the producers aim at.
    pub rate: u32,
}

/// One sample of the server.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the load began.
    pub at_s: f64,
    /// Whether it was taken under load (the last one is not).
    pub under_load: bool,
    /// RSS, bytes.
    pub rss_bytes: u64,
    /// Open descriptors.
    pub fds: u64,
    /// Client connections (the server's counter).
    pub connections: u64,
    /// Memory for messages in use (the server's counter), bytes.
    pub memory_used_bytes: u64,
    /// Requests served so far.
    pub requests: u64,
    /// Messages held in the main queue (visible + delayed + in flight).
    pub held: u64,
    /// Messages in the dead-letter queue.
    pub dead_letter_depth: u64,
    /// Counters of the main queue.
    pub sent: u64,
    /// Deletes.
    pub deleted: u64,
    /// Leases run out.
    pub redelivered: u64,
    /// Releases (visibility 0).
    pub released: u64,
    /// Moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Moved back into the main queue by redrives (its `moved_in`).
    pub redriven_in: u64,
    /// Queues whose counters break the identity at this sample.
    pub identity_mismatches: u64,
}

/// The soak's result.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    /// How it ran.
    pub spec: SoakSpec,
    /// The server's flags.
    pub server_args: Vec<String>,
    /// Wall time, seconds.
    pub seconds: f64,
    /// The samples, in order.
    pub samples: Vec<Sample>,
    /// Index of the reference sample (the first after the warm-up).
    pub reference: Option<usize>,
    /// The per-message tally after the final drain.
    pub messages: Reconciled,
    /// Simulated consumer crashes (connections dropped holding leases).
    pub crashes: u64,
    /// Redrive requests and messages they moved.
    pub redrives: (u64, u64),
    /// Long polls answered (with messages, empty).
    pub long_polls: (u64, u64),
    /// Client errors by operation and name.
    pub client_errors: std::collections::BTreeMap<String, u64>,
    /// WARN and ERROR lines of the server's log.
    pub server_warnings: Vec<String>,
    /// Everything that went wrong.
    pub violations: Vec<String>,
}

/// Runs the soak.
///
/// # Errors
/// The server did not start, or a request of the control client failed.
pub fn run(ctx: &Ctx, spec: &SoakSpec) -> Result<SoakReport, ChaosError> {
    let started = Instant::now();
    let mm = format!("{}MiB", MEMORY_MAX_BYTES / MIB);
    let h = Harness::start(ctx, &["--memory-max", &mm])?;
    create_queues(&h)?;
    let ledger = Arc::new(Ledger::new(100));
    let counts = Arc::new(OpCounts::default());
    let counters = Arc::new(Counters::default());
    let pause = Arc::new(RwLock::new(()));
    let load = start_load(&h.addr, spec, &ledger, &counts, &counters, &pause)?;
    println!(
        "sluice-chaos soak: {:?} at {} messages/s, a sample every {:?}, warm-up {:?}; server {}",
        spec.duration,
        spec.rate,
        spec.sample_every,
        spec.warmup,
        h.server.args().join(" ")
    );
    println!("{}", header());

    let (load_start, mut samples) = sample_under_load(&h, spec, &pause)?;

    // Wind down: producers stop; consumers take what is left; the DLQ is
    // redriven until empty; then everything stops and the queues drain.
    wind_down(&h, load)?;
    let mut violations = Vec::new();
    let drained = workload::drain(&h.control, &ledger, &[QUEUE, DLQ, POLL], DRAIN_PATIENCE)?;
    if !drained.complete {
        violations.push("the final drain did not empty the queues".to_owned());
    }
    let (totals, _, stats) = workload::totals(&h.control, &[QUEUE, DLQ, POLL])?;
    for s in stats.iter().filter(|s| !s.identity_holds()) {
        violations.push(format!("accounting identity broken at the end: {s:?}"));
    }
    let messages = ledger.reconcile(Some(totals), true);
    let last = sample(&h, load_start, false)?;
    println!("{}", row(&last));
    samples.push(last);

    // Flatness after the warm-up.
    let reference = check_flatness(&mut violations, &samples, spec);
    let server_warnings = h.server.warnings();
    for w in server_warnings.iter().take(10) {
        violations.push(format!("server log: {w}"));
    }
    if messages.violation_count > 0 {
        violations.push(format!("{} message violations", messages.violation_count));
        violations.extend(messages.violations.iter().cloned());
    }
    let client_errors = counts.errors.snapshot();
    for (what, n) in &client_errors {
        // A lease that ran out before its delete (a slow turn under load)
        // is at-least-once at work, not a fault.
        let lease_lost = ["StaleReceipt", "Gone"].iter().any(|n| what.ends_with(n));
        if !lease_lost {
            violations.push(format!("client errors: {n} x {what}"));
        }
    }
    Ok(SoakReport {
        spec: spec.clone(),
        server_args: h.server.args().to_vec(),
        seconds: started.elapsed().as_secs_f64(),
        samples,
        reference,
        messages,
        crashes: counters.crashes.load(Relaxed),
        redrives: (
            counters.redrive_requests.load(Relaxed),
            counters.redriven.load(Relaxed),
        ),
        long_polls: (
            counters.polls_with.load(Relaxed),
            counters.polls_empty.load(Relaxed),
        ),
        client_errors,
        server_warnings,
        violations,
    })
}

/// The main queue (lease, retry backoff, dead-letter queue after 4
/// deliveries), its dead-letter queue and the long-poll queue.
fn create_queues(h: &Harness) -> Result<(), ChaosError> {
    workload::create_queue(&h.control, DLQ, &QueueOptions::new())?;
    workload::create_queue(
        &h.control,
        QUEUE,
        &QueueOptions::new()
            .visibility_timeout(VISIBILITY)
            .redrive(RedrivePolicy::new(DLQ, 4))
            .backoff(Duration::from_millis(20), Duration::from_secs(1)),
    )?;
    workload::create_queue(&h.control, POLL, &QueueOptions::new())?;
    Ok(())
}

/// Samples every `--sample-every` until the soak's time is up, crashes
/// paused meanwhile; returns when the load started, and the samples.
fn sample_under_load(
    h: &Harness,
    spec: &SoakSpec,
    pause: &RwLock<()>,
) -> Result<(Instant, Vec<Sample>), ChaosError> {
    let load_start = Instant::now();
    let mut samples = Vec::new();
    let mut next = load_start + spec.sample_every.min(spec.duration);
    let end = load_start + spec.duration;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(
            next.min(end)
                .saturating_duration_since(now)
                .min(Duration::from_secs(1)),
        );
        if Instant::now() >= next && Instant::now() < end {
            let guard = pause
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Let the server finish closing what a crash just dropped.
            std::thread::sleep(Duration::from_millis(200));
            let s = sample(h, load_start, true)?;
            drop(guard);
            println!("{}", row(&s));
            samples.push(s);
            next += spec.sample_every;
        }
    }
    Ok((load_start, samples))
}

/// Winds down: producers stop; consumers take what is left; the DLQ is
/// redriven until empty; then everything stops (the queues drain after).
fn wind_down(h: &Harness, load: Load) -> Result<(), ChaosError> {
    load.stop_producers.store(true, Relaxed);
    for t in load.producers {
        let _ = t.join();
    }
    let settle = Instant::now() + Duration::from_secs(60);
    while Instant::now() < settle {
        let s = workload::queue_stats(&h.control, &[QUEUE, DLQ, POLL])?;
        if s.iter().all(|s| s.visible + s.delayed + s.in_flight == 0) {
            break;
        }
        if s[1].visible > 0 {
            let _ = h.control.redrive(DLQ, 1_000);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    load.stop_all.store(true, Relaxed);
    for t in load.others {
        let _ = t.join();
    }
    Ok(())
}

/// RSS and descriptors flat from the first sample under load after the
/// warm-up (returned) on.
fn check_flatness(
    violations: &mut Vec<String>,
    samples: &[Sample],
    spec: &SoakSpec,
) -> Option<usize> {
    let reference = samples
        .iter()
        .position(|s| s.under_load && s.at_s >= spec.warmup.as_secs_f64());
    match reference {
        Some(r) => {
            let (rss0, fds0) = (samples[r].rss_bytes, samples[r].fds);
            for s in &samples[r..] {
                check_flat(violations, "RSS", s, s.rss_bytes, rss0);
                check_flat(violations, "descriptors", s, s.fds, fds0);
            }
        }
        None => violations.push(format!(
            "no sample under load after the warm-up of {:?}: run longer than --warmup",
            spec.warmup
        )),
    }
    reference
}

fn check_flat(violations: &mut Vec<String>, what: &str, s: &Sample, value: u64, reference: u64) {
    let limit = reference * FLAT_PER_MILLE / 1000;
    let above = value > reference + limit;
    let below = s.under_load && value + limit < reference;
    if above || below {
        violations.push(format!(
            "{what} not flat: {value} at {:.0} s against {reference} after the warm-up \
             (more than {}% apart)",
            s.at_s,
            FLAT_PER_MILLE / 10
        ));
    }
}

fn sample(h: &Harness, load_start: Instant, under_load: bool) -> Result<Sample, ChaosError> {
    let server = h
        .control
        .server_stats()
        .map_err(|e| ChaosError::Client(format!("server stats: {e}")))?;
    let stats = workload::queue_stats(&h.control, &[QUEUE, DLQ, POLL])?;
    let q = &stats[0];
    Ok(Sample {
        at_s: load_start.elapsed().as_secs_f64(),
        under_load,
        rss_bytes: h.server.memory().map_or(0, |m| m.rss_bytes),
        fds: h.server.fds().unwrap_or(0),
        connections: server.counter("connections").unwrap_or(0),
        memory_used_bytes: server.counter("memory_used_bytes").unwrap_or(0),
        requests: server.counter("requests").unwrap_or(0),
        held: q.depth(),
        dead_letter_depth: stats[1].depth(),
        sent: q.sent,
        deleted: q.deleted,
        redelivered: q.redelivered,
        released: q.released,
        dead_lettered: q.dead_lettered,
        redriven_in: q.moved_in,
        identity_mismatches: stats.iter().filter(|s| !s.identity_holds()).count() as u64,
    })
}

fn header() -> String {
    format!(
        "{:>7} {:>10} {:>5} {:>5} {:>10} {:>12} {:>6} {:>5} {:>10} {:>10} {:>8} {:>8} {:>6} {:>7} {:>8}",
        "min",
        "RSS",
        "fds",
        "conns",
        "msg mem",
        "requests",
        "held",
        "dlq",
        "sent",
        "deleted",
        "expired",
        "released",
        "dead",
        "redrive",
        "identity"
    )
}

fn row(s: &Sample) -> String {
    format!(
        "{:>7.1} {:>10} {:>5} {:>5} {:>10} {:>12} {:>6} {:>5} {:>10} {:>10} {:>8} {:>8} {:>6} {:>7} {:>8}",
        s.at_s / 60.0,
        mib(s.rss_bytes),
        s.fds,
        s.connections,
        mib(s.memory_used_bytes),
        s.requests,
        s.held,
        s.dead_letter_depth,
        s.sent,
        s.deleted,
        s.redelivered,
        s.released,
        s.dead_lettered,
        s.redriven_in,
        if s.identity_mismatches == 0 {
            if s.under_load { "ok" } else { "ok (end)" }
        } else {
            "BROKEN"
        }
    )
}

/// The soak's report as text: the samples, the tally, the verdict.
#[must_use]
pub fn table(r: &SoakReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== soak [{}] {:.0} s",
        if r.violations.is_empty() {
            "PASS"
        } else {
            "FAIL"
        },
        r.seconds
    );
    let _ = writeln!(out, "   server: sluice-server {}", r.server_args.join(" "));
    let _ = writeln!(out, "{}", header());
    for s in &r.samples {
        let _ = writeln!(out, "{}", row(s));
    }
    if let Some(i) = r.reference {
        let s = &r.samples[i];
        let _ = writeln!(
            out,
            "   reference (first sample after the warm-up): {:.1} min, RSS {}, {} fds",
            s.at_s / 60.0,
            mib(s.rss_bytes),
            s.fds
        );
    }
    let m = &r.messages;
    let _ = writeln!(
        out,
        "   messages: sent {}, deliveries {}, duplicates delivered {}, deleted {} (+{}), held at \
         the end {}, lost {}",
        m.sent, m.deliveries, m.duplicates, m.deleted, m.deleted_unacknowledged, m.held, m.lost
    );
    let _ = writeln!(
        out,
        "   crashes (connections dropped holding leases) {}, redrives {} moving {}, long polls \
         answered {} with messages and {} empty",
        r.crashes, r.redrives.0, r.redrives.1, r.long_polls.0, r.long_polls.1
    );
    let _ = writeln!(out, "   client errors: {:?}", r.client_errors);
    let _ = writeln!(
        out,
        "   server WARN/ERROR log lines: {}",
        r.server_warnings.len()
    );
    for v in &r.violations {
        let _ = writeln!(out, "   VIOLATION: {v}");
    }
    out
}
