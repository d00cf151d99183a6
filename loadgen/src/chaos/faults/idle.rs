//! 10,000 idle connections: opened (with HELLO, so the HELLO time-out does
//! not close them) and held while the steady load runs, then a sample of
//! them pinged, then all closed.
//!
//! The server must hold them all (its `--max-connections` leaves room for
//! the suite's own connections), keep serving, answer a PING on any of
//! them, and give every descriptor back when they close. Its RSS per idle
//! connection is reported and bounded.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use sluice_client::QueueOptions;
use sluice_protocol::{Request, opcode};

use super::{MEMORY_MAX_BYTES, RSS_SLACK_BYTES, check_errors, memory_max_flag};
use crate::chaos::ledger::Ledger;
use crate::chaos::report::mib;
use crate::chaos::workload::{self, Steady, SteadySpec};
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness, MIB, raw};

pub(super) const FAULT: Fault = Fault {
    name: "idle-10k",
    description: "10,000 idle connections held open beside the steady load, then closed",
    run,
};

const STEADY: &str = "idle.steady";
const IDLE: u64 = 10_000;
/// Descriptors this process keeps for itself beyond the idle connections.
const OWN_FDS: u64 = 200;
/// The server's memory per idle connection may not exceed this.
const PER_CONNECTION_BYTES: u64 = 16 * 1024;
/// Idle connections pinged at the end.
const PINGED: usize = 200;

fn run(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    let hold = ctx
        .mode
        .pick(Duration::from_secs(30), Duration::from_secs(5));
    let openers = 8;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let want = IDLE.min(limit.saturating_sub(OWN_FDS));

    let mm = memory_max_flag();
    let max_conns = (IDLE + 100).to_string();
    let mut h = Harness::start(ctx, &["--memory-max", &mm, "--max-connections", &max_conns])?;
    if want < IDLE {
        h.fact(
            "NOTE",
            format!("this process may open {limit} files: {want} idle connections, not {IDLE}"),
        );
    }
    workload::create_queue(&h.control, STEADY, &QueueOptions::new())?;
    let ledger = Arc::new(Ledger::new(100));
    let steady = Steady::start(&h.addr, &SteadySpec::light(STEADY), &ledger)?;
    std::thread::sleep(Duration::from_millis(200));
    let rss_before = h.server.memory().map_or(0, |m| m.rss_bytes);
    let fds_before = h.server.fds().unwrap_or(0);

    let Opened {
        mut conns,
        errors,
        secs: open_secs,
    } = open_idle(h.server.addr(), want, openers)?;
    ctx.say(format!(
        "{} idle connections open in {open_secs:.1} s",
        conns.len()
    ));
    let peaks = hold_open(&h, &steady, hold);
    let ping_failures = ping_sample(&mut conns);
    let opened = conns.len() as u64;
    drop(conns);
    let steady = steady.stop(Duration::from_millis(300));

    let per_conn = peaks.rss.saturating_sub(rss_before) / opened.max(1);
    let seen = Seen {
        opened,
        open_secs,
        errors,
        hold,
        peaks,
        rss_before,
        fds_before,
        per_conn,
        ping_failures,
    };
    record(&mut h, &seen);
    check_errors(&mut h, "steady load", &steady.errors.snapshot(), &[]);
    let conn_bound = opened * PER_CONNECTION_BYTES;
    let bound = (
        h.start_rss() + MEMORY_MAX_BYTES + RSS_SLACK_BYTES + conn_bound,
        format!(
            "RSS at start + --memory-max {} MiB + {} MiB + {} KiB per idle connection",
            MEMORY_MAX_BYTES / MIB,
            RSS_SLACK_BYTES / MIB,
            PER_CONNECTION_BYTES / 1024
        ),
    );
    if per_conn > PER_CONNECTION_BYTES {
        h.violation(format!(
            "server RSS per idle connection {per_conn} bytes, above {PER_CONNECTION_BYTES}"
        ));
    }
    h.finish(&FAULT, &ledger, &[STEADY], bound)
}

/// The idle connections, as opened.
struct Opened {
    conns: Vec<TcpStream>,
    /// Why the others failed.
    errors: Vec<String>,
    /// Seconds it took.
    secs: f64,
}

/// Opens `want` connections with HELLO, on `openers` threads.
fn open_idle(addr: SocketAddr, want: u64, openers: u64) -> Result<Opened, ChaosError> {
    let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
    let errors: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut threads = Vec::new();
    for t in 0..openers {
        let n = want / openers + u64::from(t < want % openers);
        let (conns, errors) = (Arc::clone(&conns), Arc::clone(&errors));
        threads.push(workload::spawn("chaos-idle", move || {
            let mut mine = Vec::new();
            for _ in 0..n {
                match raw::connect_hello(addr) {
                    Ok(s) => mine.push(s),
                    Err(e) => errors
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(e.to_string()),
                }
            }
            conns
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(mine);
        })?);
    }
    for t in threads {
        let _ = t.join();
    }
    let secs = start.elapsed().as_secs_f64();
    let conns = std::mem::take(&mut *conns.lock().unwrap_or_else(PoisonError::into_inner));
    let errors = std::mem::take(&mut *errors.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(Opened {
        conns,
        errors,
        secs,
    })
}

/// What the server showed while the idle connections were held.
struct Peaks {
    /// Its connections counter, at most.
    server_conns: u64,
    /// Its descriptors, at most.
    fds: u64,
    /// Its RSS, at most.
    rss: u64,
    /// Steady receives answered meanwhile.
    receives: u64,
}

/// Holds the idle connections open for `hold`, watching the server.
fn hold_open(h: &Harness, steady: &Steady, hold: Duration) -> Peaks {
    let hold_start = Instant::now();
    let receives_before = steady.counts.receives.load(Relaxed);
    let mut server_conns = 0;
    let mut fds_open = 0;
    let mut rss_open = 0;
    while hold_start.elapsed() < hold {
        if let Ok(s) = h.control.server_stats() {
            server_conns = server_conns.max(s.counter("connections").unwrap_or(0));
        }
        fds_open = fds_open.max(h.server.fds().unwrap_or(0));
        rss_open = rss_open.max(h.server.memory().map_or(0, |m| m.rss_bytes));
        std::thread::sleep(Duration::from_millis(250));
    }
    let receives_during = steady.counts.receives.load(Relaxed) - receives_before;
    Peaks {
        server_conns,
        fds: fds_open,
        rss: rss_open,
        receives: receives_during,
    }
}

/// PINGs a random sample of the idle connections; returns how many did
/// not answer.
fn ping_sample(conns: &mut [TcpStream]) -> usize {
    // A sample of the idle connections still answers.
    conns.shuffle(&mut rand::rng());
    let mut ping_failures = 0;
    for (i, s) in conns.iter_mut().take(PINGED).enumerate() {
        let ping = raw::frame(&Request::Ping { nonce: i as u64 }, 2);
        let ok = s.write_all(&ping).is_ok()
            && raw::read_frame_opcode(s, Duration::from_secs(10)).ok() == Some(opcode::PONG);
        if !ok {
            ping_failures += 1;
        }
    }
    ping_failures
}

/// Everything the fault measured, for [`record`].
struct Seen {
    opened: u64,
    open_secs: f64,
    errors: Vec<String>,
    hold: Duration,
    peaks: Peaks,
    rss_before: u64,
    fds_before: u64,
    per_conn: u64,
    ping_failures: usize,
}

/// The fault's facts, and its violations but for the steady load's errors
/// and the memory bound.
fn record(h: &mut Harness, seen: &Seen) {
    let Seen {
        opened,
        open_secs,
        ref errors,
        hold,
        peaks:
            Peaks {
                server_conns,
                fds: fds_open,
                rss: rss_open,
                receives: receives_during,
            },
        rss_before,
        fds_before,
        per_conn,
        ping_failures,
    } = *seen;
    h.fact("idle connections opened", opened);
    h.fact("  seconds to open them", format!("{open_secs:.1}"));
    h.fact("  failed to open", errors.len());
    h.fact("  held for", format!("{hold:?}"));
    h.fact("server connections (its counter), peak", server_conns);
    h.fact("server fds with them open, peak", fds_open);
    h.fact(
        "server RSS before them / with them",
        format!("{} / {}", mib(rss_before), mib(rss_open)),
    );
    h.fact(
        "server RSS per idle connection",
        format!("{:.1} KiB", per_conn as f64 / 1024.0),
    );
    h.fact(
        &format!("PINGs answered on {PINGED} of them"),
        PINGED - ping_failures,
    );
    h.fact("steady receives answered meanwhile", receives_during);
    if !errors.is_empty() {
        h.violation(format!(
            "{} idle connections could not be opened, e.g. {}",
            errors.len(),
            errors[0]
        ));
    }
    if fds_open < fds_before + opened {
        h.violation(format!(
            "the server had {fds_open} descriptors with {opened} idle connections open \
             (and {fds_before} without): some were not held"
        ));
    }
    if ping_failures > 0 {
        h.violation(format!(
            "{ping_failures} idle connections did not answer a PING"
        ));
    }
    if receives_during == 0 {
        h.violation("the steady load got no receive answered while the idle connections were open");
    }
}
