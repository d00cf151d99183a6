//! The server's clocks: where the broker reads the time it acts on.
//!
//! Real time is monotonic nanoseconds since a process-wide origin (the
//! first read), offset by [`ORIGIN_NS`], so every shard agrees on it; wall time is Unix
//! milliseconds, for sent-at stamps only. The shard loop reads both after
//! each wait returns, never from before it, and hands them on: the
//! sessions (connection deadlines: HELLO, unfinished frames, the session
//! timeout, closing) always run on real time; the engine runs on its
//! [`Clock`]. `SERVER_STATS`' uptime and a scrape's wait for fresh
//! snapshots read real time here too.
//!
//! # The engine's clock: real or manual
//!
//! [`Clock::Real`] (the default) gives the engine the real readings.
//! [`Clock::Manual`] (`--clock manual`, for tests) gives it a
//! [`ManualClock`]: the real time of the server's start, moved on only by
//! [`Clock::advance`] (the `ADVANCE_CLOCK` request, or the in-process test
//! server's `advance`). Leases, delays, backoffs, long-poll waits, dedup
//! windows and retention then end when a test moves the clock past them,
//! at once, and never while it stands still. The engine is the same either
//! way: it takes its time as a parameter.
//!
//! Ground rules of [`ManualClock`]: one atomic, `elapsed_ns`, the only
//! state that changes. An advance adds to it (`AcqRel`) and then wakes every
//! shard (the caller does, see `ServerState::advance_clock`); a shard loads it
//! (`Acquire`) after each wait and before each operation it hands the
//! engine. The monotonic and the wall reading derive from the same load,
//! so they move together. A shard that loads the old value a moment before
//! an advance sees the new one on the wake-up the advance sends; the engine
//! takes the larger of its last `now` and the one it is given, so time
//! never goes back for it.
//!
//! Two other places time themselves with `Instant`, on their own and never
//! for the engine: the io backends (how much of a poll's timeout is left
//! after a signal or a wake-up with nothing to report, and how long
//! accepting pauses after running out of descriptors), and the in-process
//! test server's start-up retries.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_protocol::limits::RETENTION_MS_MAX;

use crate::sync::Arc;
use crate::sync::AtomicU64;
use crate::sync::Ordering::{AcqRel, Acquire};

static ORIGIN: OnceLock<Instant> = OnceLock::new();

const NS_PER_MS: u64 = 1_000_000;

/// Where monotonic time starts: past the longest retention, so that a
/// message loaded from a snapshot keeps its age (its send time lies before
/// this process started, and engine time has room for it).
pub const ORIGIN_NS: u64 = 2 * RETENTION_MS_MAX as u64 * NS_PER_MS;

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
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Wall-clock Unix milliseconds (0 if the clock is before 1970).
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The engine's time at one moment: monotonic nanoseconds and wall-clock
/// Unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineTime {
    /// Monotonic nanoseconds (on the process-wide origin).
    pub now_ns: u64,
    /// Unix milliseconds.
    pub wall_ms: u64,
}

/// Where the engine's time comes from (`--clock`).
#[derive(Clone, Debug)]
pub enum Clock {
    /// The real clocks.
    Real,
    /// A clock that only [`Clock::advance`] moves.
    Manual(Arc<ManualClock>),
}

/// `ADVANCE_CLOCK` on a server whose engine runs on the real clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "ADVANCE_CLOCK needs a server started with --clock manual; this one runs on the real clock, \
     which nothing moves"
)]
pub struct NotManual;

impl Clock {
    /// A manual clock standing at the real time of now.
    #[must_use]
    pub fn manual() -> Clock {
        Clock::Manual(Arc::new(ManualClock::new(now_ns(), wall_ms())))
    }

    /// Whether this is a manual clock.
    #[must_use]
    pub fn is_manual(&self) -> bool {
        matches!(self, Clock::Manual(_))
    }

    /// The engine's time, given the real readings of the same moment (which
    /// a real clock returns as they are).
    #[inline]
    #[must_use]
    pub fn engine_time(&self, real_ns: u64, real_wall_ms: u64) -> EngineTime {
        match self {
            Clock::Real => EngineTime {
                now_ns: real_ns,
                wall_ms: real_wall_ms,
            },
            Clock::Manual(m) => m.now(),
        }
    }

    /// Moves a manual clock forward by `by_ms` and returns its time since the
    /// start (ms) and its wall reading after the move. The caller wakes the
    /// shards.
    ///
    /// # Errors
    /// [`NotManual`] on the real clock, which is left alone.
    pub fn advance(&self, by_ms: u64) -> Result<(u64, EngineTime), NotManual> {
        match self {
            Clock::Real => Err(NotManual),
            Clock::Manual(m) => Ok(m.advance(by_ms)),
        }
    }
}

/// A clock that stands still until it is moved (see the module docs).
#[derive(Debug)]
pub struct ManualClock {
    start_ns: u64,
    start_wall_ms: u64,
    elapsed_ns: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `start_ns` (monotonic, rounded up to a whole
    /// millisecond) and `start_wall_ms` (wall). The engine rounds deadlines
    /// up to whole milliseconds; starting on one, a clock moved in whole
    /// milliseconds always stands on one, so a lease of N ms taken at any
    /// moment ends after an advance of exactly N ms, not one more.
    #[must_use]
    pub fn new(start_ns: u64, start_wall_ms: u64) -> ManualClock {
        ManualClock {
            start_ns: start_ns.div_ceil(NS_PER_MS).saturating_mul(NS_PER_MS),
            start_wall_ms,
            elapsed_ns: AtomicU64::new(0),
        }
    }

    /// The time now.
    #[inline]
    #[must_use]
    pub fn now(&self) -> EngineTime {
        self.at(self.elapsed_ns.load(Acquire))
    }

    fn at(&self, elapsed_ns: u64) -> EngineTime {
        EngineTime {
            now_ns: self.start_ns.saturating_add(elapsed_ns),
            wall_ms: self.start_wall_ms.saturating_add(elapsed_ns / NS_PER_MS),
        }
    }

    /// Moves the clock forward by `by_ms` (saturating); returns the time since
    /// the start (ms) and the time after the move.
    pub fn advance(&self, by_ms: u64) -> (u64, EngineTime) {
        let by_ns = by_ms.saturating_mul(NS_PER_MS);
        let mut seen = self.elapsed_ns.load(Acquire);
        loop {
            let next = seen.saturating_add(by_ns);
            match self
                .elapsed_ns
                .compare_exchange_weak(seen, next, AcqRel, Acquire)
            {
                Ok(_) => return (next / NS_PER_MS, self.at(next)),
                Err(now) => seen = now,
            }
        }
    }
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

    #[test]
    fn the_real_clock_passes_readings_through_and_refuses_to_move() {
        let t = Clock::Real.engine_time(5, 7);
        assert_eq!(
            t,
            EngineTime {
                now_ns: 5,
                wall_ms: 7
            }
        );
        assert_eq!(Clock::Real.advance(1000), Err(NotManual));
        assert!(!Clock::Real.is_manual());
        assert!(NotManual.to_string().contains("--clock manual"));
    }

    #[test]
    fn a_manual_clock_stands_still_until_moved_and_both_readings_move_together() {
        let clock = Clock::Manual(Arc::new(ManualClock::new(1_000, 1_700_000_000_000)));
        assert!(clock.is_manual());
        let before = clock.engine_time(99_999_999, 1);
        assert_eq!(
            before.now_ns, NS_PER_MS,
            "on a whole ms; real readings ignored"
        );
        assert_eq!(clock.engine_time(5, 5), before, "it stands still");
        let (elapsed_ms, after) = clock.advance(30_000).unwrap();
        assert_eq!(elapsed_ms, 30_000);
        assert_eq!(after.now_ns, NS_PER_MS + 30_000 * NS_PER_MS);
        assert_eq!(after.wall_ms, 1_700_000_030_000);
        assert_eq!(clock.engine_time(0, 0), after);
        let (elapsed_ms, again) = clock.advance(0).unwrap();
        assert_eq!((elapsed_ms, again), (30_000, after), "0 only reads it");
        // Saturates rather than wraps.
        let (_, end) = clock.advance(u64::MAX).unwrap();
        assert_eq!(end.now_ns, u64::MAX);
    }
}
