//! SQS counts time in whole seconds, the engine in milliseconds: every
//! conversion between the two happens here, and nowhere else in the door.

use sluice_protocol::Millis;

/// `s` seconds as the engine's milliseconds (the door has checked `s`
/// against SQS's ranges, which are far below the field's limit; a larger
/// value saturates, and the engine refuses it as out of range).
pub(crate) fn millis(s: u32) -> Millis {
    Millis::new(s.saturating_mul(1000))
}

/// `s` seconds as a millisecond count, for a request field.
pub(crate) fn ms(s: u32) -> u32 {
    millis(s).get()
}

/// Whole seconds of `m`, rounded down, as SQS reports a queue's times.
pub(crate) fn of(m: Millis) -> u32 {
    m.get() / 1000
}

/// Whole seconds of a Unix time in ms, as SQS reports a queue's
/// timestamps.
pub(crate) fn of_unix_ms(ms: u64) -> u64 {
    ms / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_milliseconds_meet_here() {
        assert_eq!(millis(30), Millis::new(30_000));
        assert_eq!(ms(0), 0);
        assert_eq!(
            ms(u32::MAX),
            u32::MAX,
            "saturates, so the engine refuses it"
        );
        assert_eq!(of(Millis::new(1_999)), 1);
        assert_eq!(of(millis(43_200)), 43_200);
        assert_eq!(of_unix_ms(1_700_000_000_999), 1_700_000_000);
    }
}
