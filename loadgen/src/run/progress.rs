//! The progress line: once a second, the send and delete rates, the
//! messages in flight and the p99 of send to receive so far.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::pass::Pass;
use crate::report::format_us;
use crate::stats::{Percentiles, new_histogram};

/// How often the line is printed.
const INTERVAL: Duration = Duration::from_secs(1);
/// How often the thread checks whether the pass is over.
const POLL: Duration = Duration::from_millis(20);

/// Prints a progress line every second until the pass is over.
pub(super) fn report(pass: &Pass<'_>, label: &str, out: &mut (dyn Write + Send)) {
    let start = Instant::now();
    let mut next = start + INTERVAL;
    let (mut last_sent, mut last_settled) = (0u64, 0u64);
    while !pass.finished.load(Ordering::Acquire) {
        std::thread::sleep(POLL);
        let now = Instant::now();
        if now < next {
            continue;
        }
        let secs = now.duration_since(next - INTERVAL).as_secs_f64();
        next += INTERVAL;
        let sent = pass.sent.load(Ordering::Relaxed);
        let settled = pass.settled.load(Ordering::Relaxed);
        let mut s2r = new_histogram();
        for r in &pass.recorders {
            let r = r.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            crate::stats::merge_into(&mut s2r, &r.send_to_receive);
        }
        let p = Percentiles::of(&s2r);
        let line = format!(
            "[{label}] {:>4}s  sent {sent} ({:.0}/s)  deleted {settled} ({:.0}/s)  in flight {}  p99 {}",
            start.elapsed().as_secs(),
            (sent - last_sent) as f64 / secs,
            (settled - last_settled) as f64 / secs,
            sent.saturating_sub(settled),
            if p.count == 0 {
                "-".to_string()
            } else {
                format_us(p.p99)
            },
        );
        // Progress is best effort: a closed stderr must not stop the pass.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        last_sent = sent;
        last_settled = settled;
    }
}
