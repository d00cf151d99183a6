//! Partial frames left hanging: connections that begin a frame and never
//! finish it (a few bytes of HELLO, a lone length prefix, a large declared
//! frame with 100 bytes of it, a frame trickled one byte at a time) and
//! one that declares a frame above the limit.
//!
//! The server, started with a low `--frame-timeout`, must close each
//! unfinished frame's connection once the time-out has passed (never
//! before), close the oversized one at once, keep serving the steady load,
//! and give back every descriptor.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use sluice_client::QueueOptions;

use super::{check_errors, memory_max_flag, usual_bound};
use crate::chaos::ledger::Ledger;
use crate::chaos::workload::{self, Steady, SteadySpec};
use crate::chaos::{ChaosError, Ctx, Fault, FaultReport, Harness, raw};

pub(super) const FAULT: Fault = Fault {
    name: "partial-frames",
    description: "frames begun and never finished (HELLO, length prefix, large declared frame, \
                  a byte at a time) and one above the limit",
    run,
};

const STEADY: &str = "partial.steady";
/// Time between the bytes of a trickled frame.
const TRICKLE_EVERY: Duration = Duration::from_millis(250);
/// Connections still open this long after the time-out are a violation.
const CLOSE_SLACK: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    HelloPart,
    PrefixPart,
    LargeDeclared,
    Trickle,
    OverLimit,
}

const KINDS: [(Kind, &str); 5] = [
    (Kind::HelloPart, "5 bytes of a HELLO"),
    (Kind::PrefixPart, "after HELLO, 3 bytes of a length prefix"),
    (
        Kind::LargeDeclared,
        "after HELLO, 100 bytes of a declared 512 KiB frame",
    ),
    (Kind::Trickle, "after HELLO, a SEND one byte every 250 ms"),
    (
        Kind::OverLimit,
        "after HELLO, a frame declared at 2 MiB (above the limit)",
    ),
];

struct Hanging {
    kind: Kind,
    stream: TcpStream,
    /// The rest of a trickled frame.
    rest: Vec<u8>,
    next_byte: Instant,
    /// When its first unfinished byte went out.
    began: Instant,
    closed_after: Option<Duration>,
}

fn begin(kind: Kind, addr: std::net::SocketAddr) -> std::io::Result<Hanging> {
    let mut stream = if kind == Kind::HelloPart {
        raw::connect(addr)?
    } else {
        raw::connect_hello(addr)?
    };
    let mut rest = Vec::new();
    let first: Vec<u8> = match kind {
        Kind::HelloPart => raw::hello_frame()[..5].to_vec(),
        Kind::PrefixPart => vec![0x40, 0x00, 0x00],
        Kind::LargeDeclared => {
            let mut f = (512u32 * 1024 - 4).to_le_bytes().to_vec();
            f.extend_from_slice(&[0x20, 0, 2, 0, 0, 0]);
            f.resize(100, b'.');
            f
        }
        Kind::Trickle => {
            let frame = raw::send_frame(STEADY, vec![b'.'; 100], 2);
            rest = frame[1..].to_vec();
            frame[..1].to_vec()
        }
        Kind::OverLimit => {
            let mut f = (2u32 * 1024 * 1024).to_le_bytes().to_vec();
            f.extend_from_slice(&[0x20, 0, 2, 0, 0, 0]);
            f
        }
    };
    stream.write_all(&first)?;
    let began = Instant::now();
    stream.set_nonblocking(true)?;
    Ok(Hanging {
        kind,
        stream,
        rest,
        next_byte: began + TRICKLE_EVERY,
        began,
        closed_after: None,
    })
}

/// Polls a connection: trickles its next byte when due, notices the close.
fn poll(h: &mut Hanging) {
    if h.closed_after.is_some() {
        return;
    }
    let mut sink = [0u8; 4096];
    let closed = loop {
        match h.stream.read(&mut sink) {
            Ok(0) => break true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break true,
        }
    };
    if !closed && h.kind == Kind::Trickle && !h.rest.is_empty() && Instant::now() >= h.next_byte {
        match h.stream.write(&h.rest[..1]) {
            Ok(1) => {
                h.rest.remove(0);
                h.next_byte += TRICKLE_EVERY;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => {
                h.closed_after = Some(h.began.elapsed());
                return;
            }
        }
    }
    if closed {
        h.closed_after = Some(h.began.elapsed());
    }
}

fn run(ctx: &Ctx) -> Result<FaultReport, ChaosError> {
    let per_kind = ctx.mode.pick(100, 20);
    let frame_timeout = ctx
        .mode
        .pick(Duration::from_secs(2), Duration::from_secs(1));
    let ft = format!("{}ms", frame_timeout.as_millis());

    let mm = memory_max_flag();
    let mut h = Harness::start(
        ctx,
        &[
            "--memory-max",
            &mm,
            "--frame-timeout",
            &ft,
            "--hello-timeout",
            "60s",
        ],
    )?;
    workload::create_queue(&h.control, STEADY, &QueueOptions::new())?;
    let ledger = Arc::new(Ledger::new(100));
    let steady = Steady::start(&h.addr, &SteadySpec::light(STEADY), &ledger)?;
    let addr = h.server.addr();
    let mut hanging = Vec::new();
    let mut failed = 0u64;
    for _ in 0..per_kind {
        for (kind, _) in KINDS {
            match begin(kind, addr) {
                Ok(c) => hanging.push(c),
                Err(_) => failed += 1,
            }
        }
    }
    let deadline = Instant::now() + frame_timeout + CLOSE_SLACK;
    while Instant::now() < deadline && hanging.iter().any(|c| c.closed_after.is_none()) {
        for c in &mut hanging {
            poll(c);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let steady = steady.stop(Duration::from_millis(300));

    h.fact("--frame-timeout", format!("{frame_timeout:?}"));
    h.fact("connections that failed to begin", failed);
    if failed > 0 {
        h.violation(format!("{failed} hanging connections could not be set up"));
    }
    for (kind, what) in KINDS {
        let mine: Vec<&Hanging> = hanging.iter().filter(|c| c.kind == kind).collect();
        let closed: Vec<Duration> = mine.iter().filter_map(|c| c.closed_after).collect();
        let open = mine.len() - closed.len();
        let (min, max) = (
            closed.iter().min().copied().unwrap_or_default(),
            closed.iter().max().copied().unwrap_or_default(),
        );
        h.fact(
            &format!("{what}: closed, after"),
            format!(
                "{} of {}, {:.2} .. {:.2} s",
                closed.len(),
                mine.len(),
                min.as_secs_f64(),
                max.as_secs_f64()
            ),
        );
        if open > 0 {
            h.violation(format!(
                "{what}: {open} connections still open {:?} after --frame-timeout",
                CLOSE_SLACK
            ));
        }
        if kind != Kind::OverLimit && !closed.is_empty() && min < frame_timeout {
            h.violation(format!(
                "{what}: a connection closed {:.3} s after its frame began, before \
                 --frame-timeout {frame_timeout:?}",
                min.as_secs_f64()
            ));
        }
    }
    drop(hanging);
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
    h.finish(&FAULT, &ledger, &[STEADY], bound)
}
