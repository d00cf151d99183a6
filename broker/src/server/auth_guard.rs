//! Failed HELLOs, by peer address: the slowdown that makes guessing the
//! auth token slow, and the rate limit on the log lines that report them.
//!
//! A wrong token is answered `Unauthorized` and the connection closed, as
//! always; what this adds is a delay before that reply once one address
//! has failed [`AUTH_FREE_FAILURES`] times within
//! [`AUTH_FAILURE_WINDOW_NS`] of its last failure: [`AUTH_DELAY_BASE_NS`],
//! doubling with each further failure up to [`AUTH_DELAY_MAX_NS`]. A
//! client with the right token is never delayed, and a typo costs
//! nothing. A guesser gets one answer per connection per delay, and every
//! connection it holds waiting counts against
//! `--max-connections-before-hello`.
//!
//! Socket-free and clock-free: the caller passes the peer's address and
//! the time. The table is bounded ([`AUTH_TRACKED_ADDRESSES_MAX`]): when
//! it is full, addresses quiet for longer than the window go first, then
//! the one quiet longest.

use std::collections::HashMap;
use std::net::IpAddr;

use super::limits::{
    AUTH_DELAY_BASE_NS, AUTH_DELAY_MAX_NS, AUTH_FAILURE_LOG_INTERVAL_NS, AUTH_FAILURE_WINDOW_NS,
    AUTH_FREE_FAILURES, AUTH_TRACKED_ADDRESSES_MAX,
};

#[derive(Clone, Copy, Debug)]
struct Strikes {
    failures: u32,
    last_ns: u64,
}

/// What one failure means: how long to hold its reply, and whether (and
/// with how many left unlogged since the last line) to log it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Nanoseconds to hold the `Unauthorized` reply.
    pub delay_ns: u64,
    /// This address's failures within the window, this one included.
    pub failures: u32,
    /// `Some(n)`: log this failure, and say that `n` were not logged since
    /// the last line. `None`: the line is suppressed.
    pub log: Option<u64>,
}

/// The failed HELLOs of every address, for the whole server.
#[derive(Debug, Default)]
pub struct AuthGuard {
    by_addr: HashMap<IpAddr, Strikes>,
    last_logged_ns: Option<u64>,
    unlogged: u64,
}

impl AuthGuard {
    /// A failed HELLO from `addr` at `now_ns`.
    pub fn failed(&mut self, addr: IpAddr, now_ns: u64) -> Verdict {
        if !self.by_addr.contains_key(&addr) && self.by_addr.len() >= AUTH_TRACKED_ADDRESSES_MAX {
            self.make_room(now_ns);
        }
        let s = self.by_addr.entry(addr).or_insert(Strikes {
            failures: 0,
            last_ns: now_ns,
        });
        if now_ns.saturating_sub(s.last_ns) > AUTH_FAILURE_WINDOW_NS {
            s.failures = 0;
        }
        s.failures = s.failures.saturating_add(1);
        s.last_ns = now_ns;
        let failures = s.failures;
        let log = if self
            .last_logged_ns
            .is_none_or(|at| now_ns.saturating_sub(at) >= AUTH_FAILURE_LOG_INTERVAL_NS)
        {
            self.last_logged_ns = Some(now_ns);
            Some(core::mem::take(&mut self.unlogged))
        } else {
            self.unlogged += 1;
            None
        };
        Verdict {
            delay_ns: delay_ns(failures),
            failures,
            log,
        }
    }

    /// A successful HELLO from `addr`: its failures are forgotten.
    pub fn succeeded(&mut self, addr: IpAddr) {
        if !self.by_addr.is_empty() {
            self.by_addr.remove(&addr);
        }
    }

    /// Addresses tracked now.
    #[must_use]
    pub fn tracked(&self) -> usize {
        self.by_addr.len()
    }

    fn make_room(&mut self, now_ns: u64) {
        self.by_addr
            .retain(|_, s| now_ns.saturating_sub(s.last_ns) <= AUTH_FAILURE_WINDOW_NS);
        if self.by_addr.len() >= AUTH_TRACKED_ADDRESSES_MAX {
            if let Some(oldest) = self
                .by_addr
                .iter()
                .min_by_key(|(_, s)| s.last_ns)
                .map(|(a, _)| *a)
            {
                self.by_addr.remove(&oldest);
            }
        }
    }
}

/// The delay before the reply to an address's `failures`-th failure in a
/// row.
#[must_use]
pub fn delay_ns(failures: u32) -> u64 {
    let Some(over) = failures.checked_sub(AUTH_FREE_FAILURES + 1) else {
        return 0;
    };
    AUTH_DELAY_BASE_NS
        .checked_shl(over)
        .map_or(AUTH_DELAY_MAX_NS, |d| d.min(AUTH_DELAY_MAX_NS))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ip(n: u32) -> IpAddr {
        IpAddr::from(n.to_be_bytes())
    }

    #[test]
    fn the_first_failures_are_free_then_the_delay_doubles_up_to_its_cap() {
        let mut g = AuthGuard::default();
        let delays: Vec<u64> = (0..12).map(|i| g.failed(ip(1), i * MS).delay_ns).collect();
        let free = AUTH_FREE_FAILURES as usize;
        assert!(delays[..free].iter().all(|&d| d == 0), "{delays:?}");
        assert_eq!(delays[free], AUTH_DELAY_BASE_NS);
        assert_eq!(delays[free + 1], 2 * AUTH_DELAY_BASE_NS);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(*delays.last().unwrap(), AUTH_DELAY_MAX_NS);
        // Another address is not slowed by this one's failures.
        assert_eq!(g.failed(ip(2), 12 * MS).delay_ns, 0);
    }

    #[test]
    fn failures_are_forgotten_after_the_window_or_a_success() {
        let mut g = AuthGuard::default();
        for i in 0..=u64::from(AUTH_FREE_FAILURES) {
            g.failed(ip(1), i);
        }
        assert!(g.failed(ip(1), 10).delay_ns > 0);
        let later = 10 + AUTH_FAILURE_WINDOW_NS + 1;
        assert_eq!(g.failed(ip(1), later).failures, 1);
        for i in 0..=u64::from(AUTH_FREE_FAILURES) {
            g.failed(ip(3), i);
        }
        g.succeeded(ip(3));
        assert_eq!(g.failed(ip(3), 20).failures, 1);
    }

    #[test]
    fn log_lines_are_rate_limited_and_count_what_they_left_out() {
        let mut g = AuthGuard::default();
        assert_eq!(g.failed(ip(1), 0).log, Some(0));
        assert_eq!(g.failed(ip(2), MS).log, None);
        assert_eq!(g.failed(ip(3), 2 * MS).log, None);
        let next = AUTH_FAILURE_LOG_INTERVAL_NS;
        assert_eq!(g.failed(ip(1), next).log, Some(2));
        assert_eq!(g.failed(ip(1), next + 1).log, None);
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_the_addresses_failing_now() {
        let mut g = AuthGuard::default();
        let n = u32::try_from(AUTH_TRACKED_ADDRESSES_MAX).unwrap();
        for i in 0..n {
            g.failed(ip(i), u64::from(i));
        }
        // Full, every entry within the window: the quietest goes.
        for _ in 0..=AUTH_FREE_FAILURES {
            g.failed(ip(n), u64::from(n));
        }
        assert_eq!(g.tracked(), AUTH_TRACKED_ADDRESSES_MAX);
        assert!(g.failed(ip(n), u64::from(n) + 1).delay_ns > 0);
        // Long after: everything stale is dropped at once.
        g.failed(ip(n + 1), AUTH_FAILURE_WINDOW_NS * 3);
        assert!(g.tracked() <= 2, "{}", g.tracked());
    }
}
