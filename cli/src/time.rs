//! Wall-clock times as RFC 3339 text (`2025-01-01T00:00:00.000Z`).
//!
//! The broker reports times as milliseconds since the Unix epoch, UTC. The
//! conversion is the proleptic Gregorian calendar's days-to-civil mapping
//! (Howard Hinnant's `civil_from_days`), which is short enough not to need
//! a date crate.

/// Milliseconds since the Unix epoch as RFC 3339 in UTC with milliseconds:
/// `1970-01-01T00:00:00.000Z`. Years past 9999 print with more digits.
pub fn rfc3339_ms(epoch_ms: u64) -> String {
    let ms = epoch_ms % 1_000;
    let secs = epoch_ms / 1_000;
    let (days, secs_of_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        secs_of_day / 3_600,
        secs_of_day % 3_600 / 60,
        secs_of_day % 60,
    )
}

/// The (year, month 1..=12, day 1..=31) of a count of days since
/// 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01, so that a leap day is the last day of
    // its "year" and every era of 400 years has the same 146,097 days.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097; // 0 ..= 146_096
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365; // 0 ..= 399
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100); // 0 ..= 365
    let month_from_march = (5 * day_of_year + 2) / 153; // 0 ..= 11, 0 is March
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1), "1970-01-01T00:00:00.001Z");
        assert_eq!(rfc3339_ms(946_684_799_999), "1999-12-31T23:59:59.999Z");
        // Leap days: an ordinary leap year and a 400-year one.
        assert_eq!(rfc3339_ms(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_868_800_000), "2000-03-01T00:00:00.000Z");
        // 2100 is not a leap year: February 28 is followed by March 1.
        assert_eq!(rfc3339_ms(4_107_542_399_000), "2100-02-28T23:59:59.000Z");
        assert_eq!(rfc3339_ms(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_735_689_600_000), "2025-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        // The largest input does not overflow.
        assert!(rfc3339_ms(u64::MAX).ends_with(".615Z"));
    }

    #[test]
    fn every_day_follows_the_one_before() {
        // Walks 1970 .. 2101 day by day against a calendar kept by hand.
        let (mut year, mut month, mut day) = (1970, 1, 1);
        for days in 0..48_000 {
            assert_eq!(civil_from_days(days), (year, month, day), "day {days}");
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            let month_days = match month {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            day += 1;
            if day > month_days {
                day = 1;
                month += 1;
                if month > 12 {
                    month = 1;
                    year += 1;
                }
            }
        }
    }
}
