//! Connection churn: thousands of connects per second, with and without
//! HELLO, closed politely or with a reset, some in the middle of a request
//! and some right after a whole SEND whose reply they never read.
//!
//! Threads cycle through the kinds of connection below while a steady
//! producer/consumer load runs on its own connections, which must see no
//! error. Sends made by connections that close without reading their
//! reply have an unknown outcome; the drain and the broker's `sent`
//! counter settle which were enqueued.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use sluice_client::QueueOptions;

use super::{check_errors, memory_max_flag, per_second, usual_bound};
use crate::chaos::ledger::{Ledger, SendFate};
use crate::chaos::raw;
use crate::chaos::workload::{self, Steady, SteadySpec};
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness};

pub(super) const FAULT: Fault = Fault {
    name: "churn",
    description: "connection churn: connects with and without HELLO, closed with FIN or RST, \
                  mid-request and after an unread SEND",
    run,
};

const QUEUE: &str = "churn.blind";
const STEADY: &str = "churn.steady";

/// The kinds of connection, in the order each thread cycles through them.
const KINDS: [&str; 7] = [
    "connect, close",
    "connect, reset",
    "HELLO, close",
    "HELLO, half a SEND frame, close",
    "HELLO, a whole SEND, reset without reading",
    "HELLO, PING and its PONG, close",
    "client library: connect, send, drop",
];

#[derive(Debug, Default)]
struct Counts {
    by_kind: [AtomicU64; KINDS.len()],
    failed: AtomicU64,
    /// The first failures, word for word.
    first_failures: std::sync::Mutex<Vec<String>>,
}

fn run(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    let threads = 4;
    let duration = ctx
        .mode
        .pick(Duration::from_secs(20), Duration::from_secs(3));
    let connects_max: u64 = ctx.mode.pick(400_000, 60_000);

    let mm = memory_max_flag();
    let mut h = Harness::start(ctx, &["--memory-max", &mm])?;
    for q in [QUEUE, STEADY] {
        workload::create_queue(&h.control, q, &QueueOptions::new())?;
    }
    let accepted_before = accepted(&h)?;
    let ledger = Arc::new(Ledger::new(100));
    let steady = Steady::start(&h.addr, &SteadySpec::light(STEADY), &ledger)?;
    let counts = Arc::new(Counts::default());
    let addr = h.server.addr();
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..threads {
        let (ledger, counts) = (Arc::clone(&ledger), Arc::clone(&counts));
        let addr_s = h.addr.clone();
        handles.push(workload::spawn("chaos-churn", move || {
            let mut i = t;
            let total = || counts.by_kind.iter().map(|c| c.load(Relaxed)).sum::<u64>();
            while start.elapsed() < duration && total() < connects_max {
                let kind = i % KINDS.len();
                i += 1;
                match churn_once(kind, addr, &addr_s, &ledger) {
                    Ok(()) => {
                        counts.by_kind[kind].fetch_add(1, Relaxed);
                    }
                    Err(e) => {
                        counts.failed.fetch_add(1, Relaxed);
                        let mut first = counts
                            .first_failures
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if first.len() < 5 {
                            first.push(format!("{}: {e}", KINDS[kind]));
                        }
                    }
                }
            }
        })?);
    }
    for t in handles {
        let _ = t.join();
    }
    let secs = start.elapsed().as_secs_f64();
    let steady = steady.stop(Duration::from_millis(300));

    let total: u64 = counts.by_kind.iter().map(|c| c.load(Relaxed)).sum();
    let failed = counts.failed.load(Relaxed);
    ctx.say(format!("{total} connections in {secs:.1} s"));
    h.fact("connections made", total);
    h.fact("connections per second", per_second(total, secs));
    for (k, c) in KINDS.iter().zip(&counts.by_kind) {
        h.fact(&format!("  {k}"), c.load(Relaxed));
    }
    h.fact("connections that failed", failed);
    if failed > 0 {
        h.violation(format!(
            "{failed} churn connections failed (connect, HELLO or PONG)"
        ));
    }
    let accepted_now = accepted(&h)?;
    let server_saw = accepted_now - accepted_before;
    h.fact("accepted by the server (its counter)", server_saw);
    // A connection reset before the server accepted it is dropped by the
    // kernel from the listen queue: the server never sees it.
    let resets = counts.by_kind[1].load(Relaxed);
    if server_saw + resets < total {
        h.violation(format!(
            "the server counts {server_saw} accepted connections; the tool made {total}, \
             of which {resets} reset at once"
        ));
    }
    h.fact(
        "steady load: sends, receives answered",
        format!(
            "{}, {}",
            steady.sends.load(Relaxed),
            steady.receives.load(Relaxed)
        ),
    );
    check_errors(&mut h, "steady load", &steady.errors.snapshot(), &[]);
    let bound = usual_bound(h.start_rss());
    h.finish(&FAULT, &ledger, &[QUEUE, STEADY], bound)
}

fn accepted(h: &Harness) -> Result<u64, ChaosError> {
    h.control
        .server_stats()
        .map(|s| s.counter("connections_accepted").unwrap_or(0))
        .map_err(|e| ChaosError::Client(format!("server stats: {e}")))
}

/// One connection of `kind`.
fn churn_once(kind: usize, addr: SocketAddr, addr_s: &str, ledger: &Ledger) -> std::io::Result<()> {
    match kind {
        0 => drop(raw::connect(addr)?),
        1 => raw::close_with_reset(raw::connect(addr)?),
        2 => drop(raw::connect_hello(addr)?),
        3 => {
            let mut s = raw::connect_hello(addr)?;
            let frame = raw::send_frame(QUEUE, vec![b'x'; 64], 2);
            s.write_all(&frame[..frame.len() / 2])?;
        }
        4 => {
            let mut s = raw::connect_hello(addr)?;
            let (first, mut bodies) = ledger.issue(1);
            let body = bodies.pop().unwrap_or_default();
            let frame = raw::send_frame(QUEUE, body, 2);
            let written = s.write_all(&frame);
            // Whether the server took it is for the drain to say.
            ledger.sent(first, &[SendFate::Unknown]);
            written?;
            raw::close_with_reset(s);
        }
        5 => {
            let mut s = raw::connect_hello(addr)?;
            let ping = raw::frame(&sluice_protocol::Request::Ping { nonce: 7 }, 2);
            s.write_all(&ping)?;
            let op = raw::read_frame_opcode(&mut s, raw::HANDSHAKE_TIMEOUT)?;
            if op != sluice_protocol::opcode::PONG {
                return Err(std::io::Error::other(format!(
                    "PING answered with {op:#04x}"
                )));
            }
        }
        _ => {
            let c = workload::client(addr_s).map_err(std::io::Error::other)?;
            let (first, mut bodies) = ledger.issue(1);
            let body = bodies.pop().unwrap_or_default();
            let fate = match c.send(QUEUE, body) {
                Ok(_) => SendFate::Acked,
                Err(e) => SendFate::of_error(&e),
            };
            ledger.sent(first, &[fate]);
            if fate != SendFate::Acked {
                return Err(std::io::Error::other("a send through the client failed"));
            }
        }
    }
    Ok(())
}
