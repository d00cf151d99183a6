//! SIGTERM in the middle of load: producers, consumers and long polls run,
//! the server gets SIGTERM, and then:
//! - it must exit with status 0 within `--shutdown-timeout` (plus slack);
//! - every request must be answered or fail with a clear error
//!   (`ShuttingDown`, or a disconnect once the connection closes, or a
//!   refused connect once the server is gone), never hang (a `Timeout`);
//! - parked long polls must be answered at once with an empty batch (or
//!   `ShuttingDown`);
//! - the counters of the last stats taken before the signal must satisfy
//!   the accounting identity.
//!
//! sluice keeps everything in memory: the messages held at the signal are
//! lost by design when the process exits. They are counted, not checked.

use std::collections::BTreeMap;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use sluice_client::{Client, Error, QueueOptions, QueueStats, ReceiveOptions, SendEntry};

use super::{memory_max_flag, usual_bound};
use crate::chaos::ledger::{Ledger, SendFate, delete_outcome_unknown};
use crate::chaos::workload;
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness};

pub(super) const FAULT: Fault = Fault {
    name: "sigterm",
    description: "SIGTERM under load: exit 0 within the shutdown time-out, every request \
                  answered or failed with a clear error, long polls answered at once",
    run,
};

const QUEUE: &str = "term.q";
const IDLE: &str = "term.idle";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Beyond the shutdown time-out, for the process to exit and the clients
/// to see it.
const EXIT_SLACK: Duration = Duration::from_secs(5);

/// What the workers saw.
#[derive(Debug, Default)]
struct Shared {
    signal_at: OnceLock<Instant>,
    stop: AtomicBool,
    /// Outcomes after the signal, by operation and name.
    after: Mutex<BTreeMap<String, u64>>,
    /// Errors before the signal.
    before: Mutex<BTreeMap<String, u64>>,
    /// Long polls: time from the signal to their reply, and what it was.
    long_polls: Mutex<Vec<(Duration, String)>>,
    /// Last stats of the two queues before the signal, and when.
    last_stats: Mutex<Option<(Instant, Vec<QueueStats>)>>,
}

impl Shared {
    fn signaled(&self) -> bool {
        self.signal_at.get().is_some()
    }

    /// Records how a request ended; returns whether the worker should stop
    /// (an error after the signal).
    fn outcome(&self, op: &str, result: Result<(), &Error>) -> bool {
        let name = match result {
            Ok(()) => "answered",
            Err(e) => e.name(),
        };
        if self.signaled() {
            let mut m = self.after.lock().unwrap_or_else(PoisonError::into_inner);
            *m.entry(format!("{op}: {name}")).or_default() += 1;
            result.is_err()
        } else {
            if result.is_err() {
                let mut m = self.before.lock().unwrap_or_else(PoisonError::into_inner);
                *m.entry(format!("{op}: {name}")).or_default() += 1;
            }
            false
        }
    }
}

fn produce(c: &Client, ledger: &Ledger, shared: &Shared) {
    while !shared.stop.load(Relaxed) {
        let (first, bodies) = ledger.issue(32);
        let entries: Vec<SendEntry> = bodies.into_iter().map(SendEntry::new).collect();
        let result = c.send_batch(QUEUE, &entries);
        let fates: Vec<SendFate> = match &result {
            Ok(r) => r
                .iter()
                .map(|e| {
                    e.as_ref()
                        .map_or_else(SendFate::of_error, |_| SendFate::Acked)
                })
                .collect(),
            Err(e) => vec![SendFate::of_error(e); entries.len()],
        };
        ledger.sent(first, &fates);
        if shared.outcome("send", result.as_ref().map(|_| ())) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn consume(c: &Client, ledger: &Ledger, shared: &Shared) {
    let options = ReceiveOptions::new(64).wait(Duration::from_millis(500));
    while !shared.stop.load(Relaxed) {
        let got = match c.receive(QUEUE, options) {
            Ok(got) => got,
            Err(e) => {
                if shared.outcome("receive", Err(&e)) {
                    return;
                }
                continue;
            }
        };
        if shared.outcome("receive", Ok(())) {
            return;
        }
        if got.is_empty() {
            continue;
        }
        ledger.delivered(got.iter().map(|m| (&m.body[..], m.delivery())));
        // Work a little, holding the leases: the consumers fall behind the
        // producers, so the signal finds messages visible and in flight.
        std::thread::sleep(Duration::from_millis(5));
        let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
        match c.delete_batch(QUEUE, &receipts) {
            Ok(results) => {
                let done = results.iter().zip(&got).filter_map(|(r, m)| {
                    r.is_ok()
                        .then(|| ledger.seq_of(&m.body).map(|s| (s, m.delivery())))
                        .flatten()
                });
                ledger.deleted(done.collect::<Vec<_>>());
                if shared.outcome("delete", Ok(())) {
                    return;
                }
            }
            Err(e) => {
                if delete_outcome_unknown(&e) {
                    ledger.delete_unknown(got.iter().filter_map(|m| ledger.seq_of(&m.body)));
                }
                if shared.outcome("delete", Err(&e)) {
                    return;
                }
            }
        }
    }
}

fn long_poll(c: &Client, shared: &Shared) {
    let options = ReceiveOptions::new(1).wait(Duration::from_secs(20));
    let mut measured = false;
    while !shared.stop.load(Relaxed) {
        let result = c.receive(IDLE, options);
        if let (Some(at), false) = (shared.signal_at.get(), measured) {
            measured = true;
            let what = match &result {
                Ok(got) if got.is_empty() => "empty batch".to_owned(),
                Ok(got) => format!("{} messages", got.len()),
                Err(e) => e.name().to_owned(),
            };
            shared
                .long_polls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((at.elapsed(), what));
        }
        // The first reply after the signal is measured; the next request
        // finds the connection gone.
        if shared.outcome("long poll", result.as_ref().map(|_| ())) {
            return;
        }
    }
}

fn sample(c: &Client, shared: &Shared) {
    while !shared.signaled() && !shared.stop.load(Relaxed) {
        if let Ok(stats) = workload::queue_stats(c, &[QUEUE, IDLE]) {
            if !shared.signaled() {
                *shared
                    .last_stats
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), stats));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    let load = ctx
        .mode
        .pick(Duration::from_secs(10), Duration::from_secs(3));
    let mm = memory_max_flag();
    let st = format!("{}s", SHUTDOWN_TIMEOUT.as_secs());
    let mut h = Harness::start(ctx, &["--memory-max", &mm, "--shutdown-timeout", &st])?;
    for q in [QUEUE, IDLE] {
        workload::create_queue(&h.control, q, &QueueOptions::new())?;
    }
    let ledger = Arc::new(Ledger::new(100));
    let shared = Arc::new(Shared::default());
    let (workers, done_rx) = spawn_workers(&h, &ledger, &shared)?;
    std::thread::sleep(load);

    let peak_before = h.server.memory().map(|m| m.peak_bytes);
    let signal_at = Instant::now();
    let _ = shared.signal_at.set(signal_at);
    h.server.sigterm()?;
    let exit = h.server.wait_exit(SHUTDOWN_TIMEOUT + EXIT_SLACK);
    // Every worker must come back: by now its connection is closed and a
    // new one is refused at once.
    let mut finished = 0;
    let worker_deadline = signal_at + SHUTDOWN_TIMEOUT + EXIT_SLACK * 2;
    while finished < workers {
        let left = worker_deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(_) => finished += 1,
            Err(_) => break,
        }
    }
    shared.stop.store(true, Relaxed);

    judge_exit(&mut h, exit, finished, workers, worker_deadline - signal_at);
    judge_requests(&mut h, &shared);
    judge_long_polls(&mut h, &shared);
    // The identity on the last stats before the signal.
    let mismatches = judge_last_stats(&mut h, &shared, signal_at);
    let messages = ledger.reconcile(None, false);
    h.fact(
        "acknowledged sends not deleted by the end (held at exit)",
        messages.sent.saturating_sub(messages.deleted),
    );
    let bound = usual_bound(h.start_rss());
    Ok(h.report(&FAULT, messages, mismatches, None, peak_before, Some(bound)))
}

/// Starts the producers, consumers, long polls and the stats sampler; returns
/// how many, and the channel each reports its end on.
fn spawn_workers(
    h: &Harness,
    ledger: &Arc<Ledger>,
    shared: &Arc<Shared>,
) -> Result<(usize, Receiver<&'static str>), ChaosError> {
    let (done_tx, done_rx) = std::sync::mpsc::channel::<&'static str>();
    let mut workers = 0;
    let roles: [(&'static str, usize); 4] = [
        ("producer", 2),
        ("consumer", 2),
        ("long poll", 4),
        ("stats", 1),
    ];
    for (role, n) in roles {
        for _ in 0..n {
            let c = workload::client(&h.addr)?;
            let (ledger, shared, done) = (Arc::clone(ledger), Arc::clone(shared), done_tx.clone());
            workload::spawn("chaos-sigterm", move || {
                match role {
                    "producer" => produce(&c, &ledger, &shared),
                    "consumer" => consume(&c, &ledger, &shared),
                    "long poll" => long_poll(&c, &shared),
                    _ => sample(&c, &shared),
                }
                let _ = done.send(role);
            })?;
            workers += 1;
        }
    }
    drop(done_tx);
    Ok((workers, done_rx))
}

/// The server's exit, and whether every client thread came back
/// (`waited`: how long after the signal they were given).
fn judge_exit(
    h: &mut Harness,
    exit: Option<(ExitStatus, Duration)>,
    finished: usize,
    workers: usize,
    waited: Duration,
) {
    match exit {
        Some((status, took)) => {
            h.fact("server exit", format!("{status} after {:.0} ms", took.as_secs_f64() * 1000.0));
            if !status.success() {
                h.violation(format!("the server exited with {status} after SIGTERM"));
            }
        }
        None => h.violation(format!(
            "the server was still running {:?} after SIGTERM (--shutdown-timeout {SHUTDOWN_TIMEOUT:?})",
            SHUTDOWN_TIMEOUT + EXIT_SLACK
        )),
    }
    if finished < workers {
        h.violation(format!(
            "{} of {workers} client threads still waiting {:?} after SIGTERM: a client hang",
            workers - finished,
            waited
        ));
    }
}

/// Errors before the signal, and the outcome of every request after it.
fn judge_requests(h: &mut Harness, shared: &Shared) {
    let before = shared
        .before
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for (what, n) in &before {
        h.violation(format!("before the signal: {n} x {what}"));
    }
    let after = shared
        .after
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    h.fact(
        "requests after the signal, by outcome",
        format!("{after:?}"),
    );
    for (what, n) in &after {
        let name = what.rsplit(": ").next().unwrap_or(what);
        if !matches!(
            name,
            "answered" | "ShuttingDown" | "Disconnected" | "Io" | "Connect"
        ) {
            h.violation(format!(
                "after the signal: {n} x {what} (not a clear shutdown error)"
            ));
        }
    }
}

/// The long polls parked at the signal: each answered, and at once.
fn judge_long_polls(h: &mut Harness, shared: &Shared) {
    let polls = shared
        .long_polls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let slowest = polls.iter().map(|p| p.0).max().unwrap_or_default();
    let kinds: BTreeMap<&str, usize> = polls.iter().fold(BTreeMap::new(), |mut m, p| {
        *m.entry(p.1.as_str()).or_default() += 1;
        m
    });
    h.fact(
        "long polls parked at the signal: answered, slowest after",
        format!("{kinds:?}, {:.0} ms", slowest.as_secs_f64() * 1000.0),
    );
    if polls.len() < 4 {
        h.violation(format!(
            "{} of 4 parked long polls got no answer after the signal",
            4 - polls.len()
        ));
    }
    if slowest > SHUTDOWN_TIMEOUT {
        h.violation(format!(
            "a parked long poll was answered {:.1} s after the signal, not at once",
            slowest.as_secs_f64()
        ));
    }
}

/// The accounting identity on the last stats before the signal; returns how
/// many queues broke it.
fn judge_last_stats(h: &mut Harness, shared: &Shared, signal_at: Instant) -> u64 {
    let last = shared
        .last_stats
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut mismatches = 0;
    match last {
        Some((at, stats)) => {
            h.fact(
                "last stats before the signal, taken before it by",
                format!(
                    "{:.0} ms",
                    signal_at.duration_since(at).as_secs_f64() * 1000.0
                ),
            );
            for (q, s) in [QUEUE, IDLE].iter().zip(&stats) {
                if !s.identity_holds() {
                    mismatches += 1;
                    h.violation(format!(
                        "accounting identity broken on {q} before the signal: {s:?}"
                    ));
                }
            }
            let s = &stats[0];
            h.fact(
                "held at the last stats (lost by design: in memory only)",
                s.visible + s.delayed + s.in_flight,
            );
            h.fact(
                "sent / deleted at the last stats",
                format!("{} / {}", s.sent, s.deleted),
            );
        }
        None => h.violation("no stats were taken before the signal"),
    }
    mismatches
}
