//! Durations (`0`, `250ms`, `1s`, `2m`, `1h30m`) and byte counts (`1024`,
//! `256KiB`, `1MiB`) as people type them, and back.

use std::time::Duration;

/// What a duration looks like, for error messages.
const DURATION_EXPECTED: &str = "a duration such as 0, 250ms, 1s, 2m, 1h30m (units ms, s, m, h, d)";

/// Parses a duration: `0`, or one or more `<integer><unit>` terms with
/// units `ms`, `s`, `m`, `h`, `d`. A plain number other than 0 is refused,
/// since its unit would be a guess.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err(format!("empty: expected {DURATION_EXPECTED}"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        if s.bytes().all(|b| b == b'0') {
            return Ok(Duration::ZERO);
        }
        return Err(format!("{s:?} has no unit: expected {DURATION_EXPECTED}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, after) = rest.split_at(digits_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if digits.is_empty() || unit.is_empty() {
            return Err(format!("{s:?}: expected {DURATION_EXPECTED}"));
        }
        let n: u64 = digits.parse().map_err(|_| format!("{s:?} is too large"))?;
        let ms_per_unit: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            other => {
                return Err(format!(
                    "{s:?}: unknown unit {other:?}: expected {DURATION_EXPECTED}"
                ));
            }
        };
        let ms = n
            .checked_mul(ms_per_unit)
            .ok_or_else(|| format!("{s:?} is too large"))?;
        total = total
            .checked_add(Duration::from_millis(ms))
            .ok_or_else(|| format!("{s:?} is too large"))?;
        rest = next;
    }
    Ok(total)
}

/// Milliseconds of a parsed duration for a `u32` wire field.
pub fn duration_ms(d: Duration, what: &str) -> Result<u32, String> {
    u32::try_from(d.as_millis()).map_err(|_| format!("{what}: {d:?} is too large"))
}

/// Parses a byte count: an integer, optionally followed by `B`, `KiB`,
/// `MiB` or `GiB`.
pub fn parse_bytes(input: &str) -> Result<u64, String> {
    let s = input.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "{s:?}: expected a byte count such as 1024, 256KiB or 1MiB"
        ));
    }
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is too large"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(format!("{s:?}: unknown unit {other:?} (B, KiB, MiB, GiB)")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// A `BASE:MAX` pair of durations.
pub fn parse_backoff(input: &str) -> Result<(Duration, Duration), String> {
    let (base, max) = input
        .split_once(':')
        .ok_or_else(|| format!("{input:?}: expected BASE:MAX, for example 100ms:1m"))?;
    Ok((parse_duration(base)?, parse_duration(max)?))
}

/// A `KEY=VALUE` pair.
pub fn parse_attr(input: &str) -> Result<(String, String), String> {
    let (k, v) = input
        .split_once('=')
        .ok_or_else(|| format!("{input:?}: expected KEY=VALUE"))?;
    Ok((k.to_owned(), v.to_owned()))
}

/// Milliseconds as people read them: the largest unit that divides them
/// (`0`, `250ms`, `30s`, `5m`, `4d`, `90s`).
pub fn format_ms(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    if ms == 0 {
        return "0".to_owned();
    }
    for (size, unit) in UNITS {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("000"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("1s"), Ok(ms(1000)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("4d"), Ok(ms(345_600_000)));
        assert_eq!(parse_duration(" 5s "), Ok(ms(5000)));
        for bad in [
            "",
            "5",
            "1.5s",
            "s",
            "5x",
            "1m30",
            "-1s",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
    }

    #[test]
    fn bytes_backoff_and_attrs() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("256KiB"), Ok(262_144));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert!(parse_bytes("1MB").is_err());
        assert!(parse_bytes("KiB").is_err());
        let ms = Duration::from_millis;
        assert_eq!(parse_backoff("100ms:1m"), Ok((ms(100), ms(60_000))));
        assert!(parse_backoff("100ms").is_err());
        assert!(parse_backoff("100:1m").is_err());
        assert_eq!(parse_attr("k=v=w"), Ok(("k".into(), "v=w".into())));
        assert_eq!(parse_attr("k="), Ok(("k".into(), String::new())));
        assert!(parse_attr("k").is_err());
    }

    #[test]
    fn formatting_round_trips() {
        for ms in [
            0,
            1,
            250,
            1000,
            90_000,
            60_000,
            3_600_000,
            345_600_000,
            1_500,
        ] {
            let shown = format_ms(ms);
            let back = parse_duration(&shown).unwrap();
            assert_eq!(back.as_millis(), u128::from(ms), "{shown}");
        }
        assert_eq!(format_ms(30_000), "30s");
        assert_eq!(format_ms(90_000), "90s");
        assert_eq!(format_ms(345_600_000), "4d");
        assert!(duration_ms(Duration::from_secs(u64::from(u32::MAX)), "x").is_err());
        assert_eq!(duration_ms(Duration::from_secs(2), "x"), Ok(2000));
    }
}
