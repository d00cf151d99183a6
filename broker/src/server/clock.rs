//! The server's clocks: where the broker reads the time it acts on.
//!
//! Engine time is monotonic nanoseconds since a process-wide origin (the
//! first read), offset by [`ORIGIN_NS`], so every shard agrees on it; wall time is Unix
//! milliseconds, for sent-at stamps only. The shard loop reads both after
//! each wait returns, never from before it, and hands them to the engine
//! and the sessions: they never read a clock. `SERVER_STATS`' uptime and a
//! scrape's wait for fresh snapshots read it here too.
//!
//! Three other places time themselves with `Instant`, on their own and
//! never for the engine: the io backends (how much of a poll's timeout is
//! left after a signal or a wake-up with nothing to report, and how long
//! accepting pauses after running out of descriptors), the metrics
//! endpoint (its socket reads and linger, on its own thread), and the
//! in-process test server's start-up retries.

use std::sync::OnceLock;

use sluice_protocol::limits::RETENTION_MS_MAX;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// Where engine time starts: past the longest retention, so that a message
/// loaded from a snapshot keeps its age (its send time lies before this
/// process started, and engine time has room for it).
pub const ORIGIN_NS: u64 = 2 * RETENTION_MS_MAX as u64 * 1_000_000;

/// Monotonic nanoseconds since the process-wide origin, plus
/// [`ORIGIN_NS`].
pub fn now_ns() -> u64 {
    let origin = *ORIGIN.get_or_init(Instant::now);
    // u64 nanoseconds last 584 years.
    u64::try_from(origin.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_add(ORIGIN_NS)
}

/// A duration in nanoseconds, saturating.
pub fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Wall-clock Unix milliseconds (0 if the clock is before 1970).
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_time_never_goes_back() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
        assert!(wall_ms() > 1_600_000_000_000);
    }
}
