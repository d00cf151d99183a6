//! When a consumer extends a lease: pure arithmetic on durations measured
//! from the receive, so it is tested without a clock.

use std::time::Duration;

/// The lease-extension plan of a consumer: each lease is renewed for the
/// visibility timeout when half of it is left, and never past
/// `max_processing` after the receive.
///
/// Times are durations since the receive was sent (the lease cannot have
/// started earlier), so the plan works on any clock.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::consumer::{LeasePlan, LeaseStep};
///
/// let s = Duration::from_secs;
/// let plan = LeasePlan::new(s(30), s(60));
/// // The first lease ends at 30 s: extend at 15 s for another 30 s.
/// assert_eq!(plan.next(s(30)), LeaseStep::Extend { at: s(15), visibility: s(30) });
/// // Extended at 15 s, the lease ends at 45 s: extend at 30 s.
/// assert_eq!(plan.next(s(45)), LeaseStep::Extend { at: s(30), visibility: s(30) });
/// // Ending at 60 s, the limit: stop extending; the lease is lost at 60 s.
/// assert_eq!(plan.next(s(60)), LeaseStep::Expire { at: s(60) });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasePlan {
    visibility: Duration,
    max_processing: Duration,
}

/// The next thing to do for a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseStep {
    /// At `at`, extend the lease by `visibility` (from then).
    Extend {
        /// When, since the receive.
        at: Duration,
        /// The new visibility timeout.
        visibility: Duration,
    },
    /// Extend no more: the lease ends at `at` (since the receive).
    Expire {
        /// When the lease ends.
        at: Duration,
    },
}

impl LeasePlan {
    /// A plan renewing `visibility` leases until `max_processing` after the
    /// receive.
    #[must_use]
    pub fn new(visibility: Duration, max_processing: Duration) -> LeasePlan {
        LeasePlan {
            visibility,
            max_processing,
        }
    }

    /// The lease each receive asks for.
    #[must_use]
    pub fn visibility(&self) -> Duration {
        self.visibility
    }

    /// The next step for a lease that ends at `lease_ends` (since the
    /// receive): extend when half a visibility timeout is left, for a full
    /// timeout or up to `max_processing`, whichever is sooner; expire when
    /// the lease already reaches `max_processing`.
    #[must_use]
    pub fn next(&self, lease_ends: Duration) -> LeaseStep {
        let limit = self.max_processing;
        let at = lease_ends.saturating_sub(self.visibility / 2);
        if lease_ends >= limit || at >= limit {
            return LeaseStep::Expire { at: lease_ends };
        }
        LeaseStep::Extend {
            at,
            visibility: self.visibility.min(limit - at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Runs the plan as a consumer would when every extension succeeds on
    /// time: the steps in order.
    fn steps(plan: LeasePlan) -> Vec<LeaseStep> {
        let mut lease_ends = plan.visibility();
        let mut out = Vec::new();
        for _ in 0..1000 {
            let step = plan.next(lease_ends);
            out.push(step);
            match step {
                LeaseStep::Extend { at, visibility } => lease_ends = at + visibility,
                LeaseStep::Expire { .. } => return out,
            }
        }
        panic!("the plan never expires: {out:?}")
    }

    #[test]
    fn extends_at_half_the_lease_until_max_processing() {
        let out = steps(LeasePlan::new(s(30), s(15 * 60)));
        let extend_times: Vec<u64> = out
            .iter()
            .filter_map(|st| match st {
                LeaseStep::Extend { at, .. } => Some(at.as_secs()),
                LeaseStep::Expire { .. } => None,
            })
            .collect();
        // Every 15 s from 15 s; the last one, at 870 s, reaches 900 s.
        assert_eq!(extend_times.first(), Some(&15));
        assert_eq!(extend_times.last(), Some(&870));
        assert_eq!(extend_times.len(), 58);
        assert_eq!(out.last(), Some(&LeaseStep::Expire { at: s(900) }));
        // The lease never reaches past max_processing.
        for st in &out {
            if let LeaseStep::Extend { at, visibility } = st {
                assert!(*at + *visibility <= s(900));
            }
        }
    }

    #[test]
    fn the_last_extension_is_shortened_to_the_limit() {
        let plan = LeasePlan::new(s(10), s(22));
        assert_eq!(
            plan.next(s(10)),
            LeaseStep::Extend {
                at: s(5),
                visibility: s(10)
            }
        );
        assert_eq!(
            plan.next(s(15)),
            LeaseStep::Extend {
                at: s(10),
                visibility: s(10)
            }
        );
        assert_eq!(
            plan.next(s(20)),
            LeaseStep::Extend {
                at: s(15),
                visibility: s(7)
            }
        );
        assert_eq!(plan.next(s(22)), LeaseStep::Expire { at: s(22) });
    }

    #[test]
    fn no_extension_when_the_first_lease_covers_max_processing() {
        let plan = LeasePlan::new(s(30), s(10));
        assert_eq!(plan.next(s(30)), LeaseStep::Expire { at: s(30) });
        let plan = LeasePlan::new(s(30), Duration::ZERO);
        assert_eq!(plan.next(s(30)), LeaseStep::Expire { at: s(30) });
    }

    #[test]
    fn a_late_extension_moves_the_schedule() {
        // Extended at 20 s instead of 15 s (a slow reply): the lease now
        // ends at 50 s and the next extension is at 35 s.
        let plan = LeasePlan::new(s(30), s(600));
        assert_eq!(
            plan.next(s(50)),
            LeaseStep::Extend {
                at: s(35),
                visibility: s(30)
            }
        );
    }
}
