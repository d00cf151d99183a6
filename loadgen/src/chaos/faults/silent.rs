//! Clients that never read their replies: they pipeline PEEK requests
//! (each answered with some 800 KiB) and never read, until the server
//! stops reading them and their writes block.
//!
//! The server must stop reading each such connection once its unsent
//! replies pass `--unsent-bytes-max` (or, with replies waiting, once all
//! connections together pass `--unsent-bytes-total-max`), hold its unsent
//! bytes within those limits, and keep serving the steady load on other
//! connections meanwhile. When the silent clients go away, their memory
//! and descriptors come back.

use std::io::{ErrorKind, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use sluice_client::{QueueOptions, SendEntry};

use super::{MEMORY_MAX_BYTES, RSS_SLACK_BYTES, check_errors, memory_max_flag};
use crate::chaos::ledger::{Ledger, SendFate};
use crate::chaos::report::mib;
use crate::chaos::workload::{self, Steady, SteadySpec};
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness, MIB, raw};

pub(super) const FAULT: Fault = Fault {
    name: "silent-clients",
    description: "clients that pipeline PEEKs and never read the replies, until the server \
                  stops reading them",
    run,
};

const QUEUE: &str = "silent.peek";
const STEADY: &str = "silent.steady";
/// Messages PEEK returns: about 800 KiB per reply.
const PEEK_MESSAGES: u16 = 200;
const BODY_BYTES: usize = 4000;
/// The server's defaults: unsent replies per connection, frame limit.
const UNSENT_MAX_BYTES: u64 = 4 * MIB;
const FRAME_MAX_BYTES: u64 = MIB;
/// A writer that made no progress for this long is stalled: the server
/// stopped reading it.
const STALL: Duration = Duration::from_secs(2);
/// A silent client writes at most this much.
const WRITE_MAX_BYTES: u64 = 256 * MIB;

fn run(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    let silent = ctx.mode.pick(32u64, 8);
    let hold = ctx
        .mode
        .pick(Duration::from_secs(10), Duration::from_secs(2));
    let stall_limit = ctx
        .mode
        .pick(Duration::from_secs(60), Duration::from_secs(20));
    // Below what the silent clients would pile up at the per-connection
    // limit, so the limit over all connections is exercised too.
    let total_max = silent * 2 * MIB;
    let total_flag = format!("{}MiB", total_max / MIB);

    let mm = memory_max_flag();
    let mut h = Harness::start(
        ctx,
        &["--memory-max", &mm, "--unsent-bytes-total-max", &total_flag],
    )?;
    for q in [QUEUE, STEADY] {
        workload::create_queue(&h.control, q, &QueueOptions::new())?;
    }
    let ledger = Arc::new(Ledger::new(BODY_BYTES));
    fill_peeked(&h, &ledger)?;

    let steady = Steady::start(&h.addr, &SteadySpec::light(STEADY), &ledger)?;
    let c = Counts::default();
    let addr = h.server.addr();
    let mut threads = Vec::new();
    for _ in 0..silent {
        let c = c.clone();
        threads.push(workload::spawn("chaos-silent", move || {
            silent_client(addr, stall_limit, &c);
        })?);
    }
    let start = Instant::now();
    let all_done = workload::wait_until(stall_limit + STALL * 2, || {
        c.stalled.load(Relaxed) + c.never_stalled.load(Relaxed) + c.failed.load(Relaxed) == silent
    });
    let to_stall = start.elapsed();
    ctx.say(format!(
        "{} of {silent} silent clients stalled in {:.1} s",
        c.stalled.load(Relaxed),
        to_stall.as_secs_f64()
    ));

    let held = hold_stalled(&h, &steady, hold);
    c.release.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let unsent_back = workload::wait_until(Duration::from_secs(10), || {
        h.control
            .server_stats()
            .is_ok_and(|s| s.counter("unsent_bytes") == Some(0))
    });
    let steady = steady.stop(Duration::from_millis(300));
    std::thread::sleep(Duration::from_secs(1));
    let rss_after = h.server.memory().map_or(0, |m| m.rss_bytes);

    let unsent_bound = silent * (UNSENT_MAX_BYTES + FRAME_MAX_BYTES);
    let seen = Seen {
        silent,
        total_max,
        to_stall,
        all_done,
        unsent_back,
        unsent_bound,
        held,
        rss_after,
    };
    record(&mut h, &c, &seen);
    check_errors(&mut h, "steady load", &steady.errors.snapshot(), &[]);
    let bound = (
        h.start_rss() + MEMORY_MAX_BYTES + RSS_SLACK_BYTES + unsent_bound,
        format!(
            "RSS at start + --memory-max {} MiB + {} MiB + silent clients x (unsent max + \
             frame limit) {}",
            MEMORY_MAX_BYTES / MIB,
            RSS_SLACK_BYTES / MIB,
            mib(unsent_bound)
        ),
    );
    h.finish(&FAULT, &ledger, &[QUEUE, STEADY], bound)
}

/// Sends the messages every PEEK returns (they stay visible: PEEK leases
/// nothing, and the drain finds them at the end).
fn fill_peeked(h: &Harness, ledger: &Ledger) -> Result<(), ChaosError> {
    let (first, bodies) = ledger.issue(usize::from(PEEK_MESSAGES));
    let entries: Vec<SendEntry> = bodies.into_iter().map(SendEntry::new).collect();
    let fates: Vec<SendFate> = match h.control.send_batch(QUEUE, &entries) {
        Ok(r) => r
            .iter()
            .map(|r| {
                r.as_ref()
                    .map_or_else(SendFate::of_error, |_| SendFate::Acked)
            })
            .collect(),
        Err(e) => return Err(ChaosError::Client(format!("fill {QUEUE}: {e}"))),
    };
    ledger.sent(first, &fates);
    Ok(())
}

/// What the silent clients report, and the word that lets them go.
#[derive(Clone, Default)]
struct Counts {
    stalled: Arc<AtomicU64>,
    release: Arc<AtomicBool>,
    /// Request bytes written, all clients together.
    written: Arc<AtomicU64>,
    never_stalled: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

/// One silent client: pipelines PEEKs without reading until its writes
/// stall (or it gave up), then holds the connection until released.
fn silent_client(addr: SocketAddr, stall_limit: Duration, c: &Counts) {
    let Ok(mut s) = raw::connect_hello(addr) else {
        c.failed.fetch_add(1, Relaxed);
        return;
    };
    let frame = raw::peek_frame(QUEUE, PEEK_MESSAGES, 2);
    let chunk: Vec<u8> = frame
        .iter()
        .copied()
        .cycle()
        .take(frame.len() * 1000)
        .collect();
    if s.set_nonblocking(true).is_err() {
        c.failed.fetch_add(1, Relaxed);
        return;
    }
    let start = Instant::now();
    let mut progress = Instant::now();
    let mut total = 0u64;
    let mut at = 0usize;
    let stalled_now = loop {
        if progress.elapsed() >= STALL {
            break true;
        }
        if total >= WRITE_MAX_BYTES || start.elapsed() >= stall_limit {
            break false;
        }
        match s.write(&chunk[at..]) {
            Ok(n) => {
                total += n as u64;
                at = (at + n) % chunk.len();
                progress = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                c.failed.fetch_add(1, Relaxed);
                return;
            }
        }
    };
    c.written.fetch_add(total, Relaxed);
    if stalled_now {
        c.stalled.fetch_add(1, Relaxed);
    } else {
        c.never_stalled.fetch_add(1, Relaxed);
    }
    // Hold the connection, never reading, until told to go.
    while !c.release.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(s);
}

/// What the server showed while the silent clients were stalled.
struct Held {
    unsent_peak: u64,
    connections: u64,
    /// Steady receives answered meanwhile.
    receives: u64,
    rss: u64,
}

/// While they are stalled: the steady load goes on, unsent bytes stay
/// bounded.
fn hold_stalled(h: &Harness, steady: &Steady, hold: Duration) -> Held {
    let receives_before = steady.counts.receives.load(Relaxed);
    let mut unsent_peak = 0u64;
    let mut connections = 0u64;
    let hold_start = Instant::now();
    while hold_start.elapsed() < hold {
        if let Ok(s) = h.control.server_stats() {
            unsent_peak = unsent_peak.max(s.counter("unsent_bytes").unwrap_or(0));
            connections = connections.max(s.counter("connections").unwrap_or(0));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let receives_during = steady.counts.receives.load(Relaxed) - receives_before;
    let rss_stalled = h.server.memory().map_or(0, |m| m.rss_bytes);
    Held {
        unsent_peak,
        connections,
        receives: receives_during,
        rss: rss_stalled,
    }
}

/// Everything the fault measured, for [`record`].
struct Seen {
    silent: u64,
    total_max: u64,
    to_stall: Duration,
    all_done: bool,
    unsent_back: bool,
    unsent_bound: u64,
    held: Held,
    rss_after: u64,
}

/// The fault's facts, and its violations but for the steady load's errors
/// and the memory bound.
fn record(h: &mut Harness, c: &Counts, seen: &Seen) {
    let Seen {
        silent,
        total_max,
        to_stall,
        all_done,
        unsent_back,
        unsent_bound,
        held:
            Held {
                unsent_peak,
                connections,
                receives: receives_during,
                rss: rss_stalled,
            },
        rss_after,
    } = *seen;
    let n_stalled = c.stalled.load(Relaxed);
    h.fact("silent clients", silent);
    h.fact("  stalled (server stopped reading them)", n_stalled);
    h.fact(
        "  time until all stalled, s",
        format!("{:.1}", to_stall.as_secs_f64()),
    );
    h.fact(
        "  request bytes each wrote before stalling (mean)",
        mib(c.written.load(Relaxed) / silent.max(1)),
    );
    h.fact(
        "--unsent-bytes-max / --unsent-bytes-total-max",
        format!("{} / {}", mib(UNSENT_MAX_BYTES), mib(total_max)),
    );
    h.fact("server unsent bytes, peak while stalled", mib(unsent_peak));
    h.fact("server RSS while stalled", mib(rss_stalled));
    h.fact("server RSS 1 s after they left", mib(rss_after));
    h.fact("steady receives answered while stalled", receives_during);
    h.fact("connections while stalled", connections);
    if !all_done || n_stalled != silent {
        h.violation(format!(
            "{} of {silent} silent clients never stalled: the server kept reading a \
             connection whose replies pile up ({} failed to connect or write)",
            c.never_stalled.load(Relaxed),
            c.failed.load(Relaxed)
        ));
    }
    if unsent_peak > unsent_bound {
        h.violation(format!(
            "server unsent bytes peaked at {}, above {} (silent clients x \
             (--unsent-bytes-max + frame limit))",
            mib(unsent_peak),
            mib(unsent_bound)
        ));
    }
    if receives_during == 0 {
        h.violation("the steady load got no receive answered while the silent clients stalled");
    }
    if !unsent_back {
        h.violation("the server's unsent bytes did not go back to 0 after the silent clients left");
    }
}
