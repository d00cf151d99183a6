//! [`Millis`]: a span of time as the protocol carries it, in whole
//! milliseconds in a `u32`. Queue attributes hold it; a program reads it as
//! a [`Duration`] and writes it from one, and the engine does its integer
//! arithmetic on [`Millis::get`].

use core::fmt;
use std::time::Duration;

/// A span of time in whole milliseconds, 0 ..= `u32::MAX` (about 49.7
/// days), as the protocol's time fields carry it.
///
/// ```
/// use std::time::Duration;
/// use sluice_protocol::Millis;
///
/// let m = Millis::try_from(Duration::from_micros(1500)).unwrap();
/// assert_eq!(m.get(), 2, "rounded up, so a tiny time never becomes 0");
/// assert_eq!(Duration::from(Millis::new(250)), Duration::from_millis(250));
/// assert!(Millis::try_from(Duration::from_secs(50 * 86_400)).is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(u32);

impl Millis {
    /// No time at all.
    pub const ZERO: Millis = Millis(0);

    /// `ms` milliseconds.
    #[must_use]
    pub const fn new(ms: u32) -> Millis {
        Millis(ms)
    }

    /// The milliseconds, for arithmetic.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The span as a [`Duration`].
    #[must_use]
    pub const fn as_duration(self) -> Duration {
        Duration::from_millis(self.0 as u64)
    }
}

impl From<u32> for Millis {
    /// `ms` milliseconds.
    fn from(ms: u32) -> Millis {
        Millis(ms)
    }
}

impl From<Millis> for u32 {
    fn from(m: Millis) -> u32 {
        m.0
    }
}

impl From<Millis> for u64 {
    fn from(m: Millis) -> u64 {
        u64::from(m.0)
    }
}

impl From<Millis> for Duration {
    fn from(m: Millis) -> Duration {
        m.as_duration()
    }
}

impl PartialEq<Duration> for Millis {
    fn eq(&self, other: &Duration) -> bool {
        self.as_duration() == *other
    }
}

impl PartialEq<Millis> for Duration {
    fn eq(&self, other: &Millis) -> bool {
        *self == other.as_duration()
    }
}

/// A [`Duration`] too long for [`Millis`]. Where a field is known (a
/// queue option, say), the caller names it in front of this message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MillisOutOfRange(pub Duration);

impl fmt::Display for MillisOutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} does not fit the protocol's millisecond field (at most {} ms)",
            self.0,
            u32::MAX
        )
    }
}

impl std::error::Error for MillisOutOfRange {}

impl TryFrom<Duration> for Millis {
    type Error = MillisOutOfRange;

    /// The milliseconds of `d`, rounded up, so that a tiny non-zero time
    /// never becomes 0 (which would, say, release a message at once).
    fn try_from(d: Duration) -> Result<Millis, MillisOutOfRange> {
        u32::try_from(d.as_nanos().div_ceil(1_000_000))
            .map(Millis)
            .map_err(|_| MillisOutOfRange(d))
    }
}

impl fmt::Display for Millis {
    /// As a duration people read: `250ms`, `30s`, `1h30m`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::units::format_duration(self.as_duration()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_and_refuse_what_does_not_fit() {
        let ms = |d: Duration| Millis::try_from(d).map(Millis::get);
        assert_eq!(ms(Duration::ZERO), Ok(0));
        assert_eq!(ms(Duration::from_nanos(1)), Ok(1));
        assert_eq!(ms(Duration::from_millis(7)), Ok(7));
        assert_eq!(ms(Duration::from_nanos(7_000_001)), Ok(8));
        assert_eq!(ms(Duration::from_millis(u64::from(u32::MAX))), Ok(u32::MAX));
        let over = Duration::from_millis(u64::from(u32::MAX)) + Duration::from_nanos(1);
        assert_eq!(ms(over), Err(MillisOutOfRange(over)));
        assert!(MillisOutOfRange(over).to_string().contains("4294967295 ms"));
        assert_eq!(ms(Duration::MAX), Err(MillisOutOfRange(Duration::MAX)));
    }

    #[test]
    fn reads_back_as_a_duration_and_compares_with_one() {
        let m = Millis::new(1500);
        assert_eq!(Duration::from(m), Duration::from_millis(1500));
        assert_eq!(m, Duration::from_millis(1500));
        assert_ne!(m, Duration::from_millis(1501));
        assert_eq!(m.to_string(), "1s500ms");
        assert_eq!(Millis::new(90_000).to_string(), "1m30s");
    }
}
