//! The faults, one module each. Every one starts its own server, makes its
//! own queues, bounds every loop in count and time, and ends with the
//! reconciliation of [`Harness::finish`](super::Harness::finish) (or its
//! own, for SIGTERM).

use super::{Fault, MIB};

mod churn;
mod crash;
mod idle;
mod kill;
mod memory;
mod partial;
mod sigterm;
mod silent;

/// `--memory-max` of the faults that are not about memory: far above what
/// they hold, so a send never gets `Busy`, yet small enough to make the
/// peak RSS bound mean something.
pub const MEMORY_MAX_BYTES: u64 = 128 * MIB;
/// What the server may use beyond its RSS at start and `--memory-max`:
/// allocator pages, io_uring buffer rings, connection buffers of the
/// steady load, thread stacks.
pub const RSS_SLACK_BYTES: u64 = 64 * MIB;

/// Every fault, in the order the suite runs them.
pub const ALL: &[Fault] = &[
    kill::FAULT,
    churn::FAULT,
    silent::FAULT,
    partial::FAULT,
    idle::FAULT,
    memory::FAULT,
    sigterm::FAULT,
    crash::FAULT,
    crash::FAULT_BATCH,
];

/// The `--memory-max` flag value for [`MEMORY_MAX_BYTES`].
fn memory_max_flag() -> String {
    format!("{}MiB", MEMORY_MAX_BYTES / MIB)
}

/// The usual peak RSS bound: RSS at start + `--memory-max` + slack.
fn usual_bound(start_rss: u64) -> (u64, String) {
    (
        start_rss + MEMORY_MAX_BYTES + RSS_SLACK_BYTES,
        format!(
            "RSS at start + --memory-max {} MiB + {} MiB",
            MEMORY_MAX_BYTES / MIB,
            RSS_SLACK_BYTES / MIB
        ),
    )
}

/// Rounds for the report.
#[allow(clippy::cast_precision_loss)] // display only
fn per_second(n: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".into();
    }
    format!("{:.0}", n as f64 / secs)
}

/// Checks a steady load's errors: any is a violation unless `allowed`
/// names it (as `op: Name`).
fn check_errors(
    h: &mut super::Harness,
    who: &str,
    errors: &std::collections::BTreeMap<String, u64>,
    allowed: &[&str],
) {
    for (what, n) in errors {
        let name = what.rsplit(": ").next().unwrap_or(what);
        if !allowed.contains(&name) {
            h.violation(format!("{who}: {n} x {what}"));
        }
    }
}

/// Looks a fault up by name.
#[must_use]
pub fn find(name: &str) -> Option<&'static Fault> {
    ALL.iter().find(|f| f.name == name)
}
