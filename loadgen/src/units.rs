//! Parsers for the numbers people type on the command line: durations
//! (`250us`, `1.5s`, `2m`), sizes (`100`, `4KiB`) and counts (`200000`,
//! `200k`, `1_000_000`, `1.5M`), and the matching formatters for output.

use std::time::Duration;

/// A value on the command line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: {reason}")]
pub struct UnitError {
    /// What was being read: "duration", "size" or "count".
    pub what: &'static str,
    /// The text as given.
    pub input: String,
    /// Why it was refused, in words.
    pub reason: String,
}

fn unit_error(what: &'static str, input: &str, reason: impl Into<String>) -> UnitError {
    UnitError {
        what,
        input: input.to_owned(),
        reason: reason.into(),
    }
}

/// Splits `"1.5ms"` into `("1.5", "ms")`; underscores in the number are dropped.
fn split_number(input: &str) -> (String, &str) {
    let trimmed = input.trim();
    let end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(trimmed.len());
    let number = trimmed[..end].replace('_', "");
    (number, trimmed[end..].trim())
}

/// Multiplies a decimal number given as text by `scale` exactly, refusing
/// results that are not whole or that overflow.
fn scaled(number: &str, scale: u128) -> Result<u128, String> {
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() && frac.is_empty() {
        return Err("no number".into());
    }
    if frac.contains('.') {
        return Err("more than one decimal point".into());
    }
    if frac.len() > 18 {
        return Err("too many decimals".into());
    }
    let digits = |s: &str| -> Result<u128, String> {
        if s.is_empty() {
            return Ok(0);
        }
        s.parse::<u128>().map_err(|_| "not a number".to_string())
    };
    let whole_value = digits(whole)?
        .checked_mul(scale)
        .ok_or_else(|| "too large".to_string())?;
    let frac_digits = digits(frac)?;
    let frac_den = 10u128.pow(frac.len() as u32);
    let frac_num = frac_digits
        .checked_mul(scale)
        .ok_or_else(|| "too large".to_string())?;
    if frac_num % frac_den != 0 {
        return Err("not a whole number of the smallest unit".into());
    }
    whole_value
        .checked_add(frac_num / frac_den)
        .ok_or_else(|| "too large".into())
}

/// Reads a duration: a number (decimals allowed) and a unit among `ns`,
/// `us` (or `µs`), `ms`, `s`, `m`, `h`. A unit is required: `30` alone is
/// refused, because seconds and milliseconds are both common guesses.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let (number, unit) = split_number(input);
    let scale: u128 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        "" => {
            return Err(unit_error(
                "duration",
                input,
                "a unit is required (ns, us, ms, s, m, h)",
            ));
        }
        other => {
            return Err(unit_error(
                "duration",
                input,
                format!("unknown unit {other:?}"),
            ));
        }
    };
    let nanos = scaled(&number, scale).map_err(|r| unit_error("duration", input, r))?;
    let nanos = u64::try_from(nanos).map_err(|_| unit_error("duration", input, "too large"))?;
    Ok(Duration::from_nanos(nanos))
}

/// Reads a size in bytes: a whole number with an optional unit, `B`,
/// `KiB`/`K`/`k` (1024), `MiB`/`M` (1024²), `KB` (1000) or `MB` (10⁶).
pub fn parse_size(input: &str) -> Result<usize, UnitError> {
    let (number, unit) = split_number(input);
    let scale: u128 = match unit {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        other => return Err(unit_error("size", input, format!("unknown unit {other:?}"))),
    };
    let bytes = scaled(&number, scale).map_err(|r| unit_error("size", input, r))?;
    usize::try_from(bytes).map_err(|_| unit_error("size", input, "too large"))
}

/// Reads a count: a whole number with optional `_` separators and an
/// optional decimal suffix `k` (10³), `M` (10⁶) or `G` (10⁹); `1.5M` is
/// 1,500,000.
pub fn parse_count(input: &str) -> Result<u64, UnitError> {
    let (number, unit) = split_number(input);
    let scale: u128 = match unit {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        other => {
            return Err(unit_error(
                "count",
                input,
                format!("unknown suffix {other:?}"),
            ));
        }
    };
    let count = scaled(&number, scale).map_err(|r| unit_error("count", input, r))?;
    u64::try_from(count).map_err(|_| unit_error("count", input, "too large"))
}

/// Formats a duration given in microseconds for a table: `850us`, `1.25ms`,
/// `3.40s`.
pub fn format_us(us: u64) -> String {
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

/// Formats a duration for a configuration line: `1s`, `250ms`, `1.5s`.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        "0s".into()
    } else if nanos % 1_000_000_000 == 0 {
        format!("{}s", nanos / 1_000_000_000)
    } else if nanos % 1_000_000 == 0 {
        format!("{}ms", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{}us", nanos / 1_000)
    } else {
        format!("{nanos}ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("250µs").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2ms").unwrap(), Duration::from_millis(2));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration(" 10 s ").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration(".5s").unwrap(), Duration::from_millis(500));
        for bad in [
            "30",
            "s",
            "1.2.3s",
            "1x",
            "-1s",
            "1.5ns",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
        let err = parse_duration("30").unwrap_err();
        assert!(err.to_string().contains("unit is required"), "{err}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("100").unwrap(), 100);
        assert_eq!(parse_size("100B").unwrap(), 100);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("2KB").unwrap(), 2000);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        for bad in ["", "1.1B", "12 parsecs", "abc"] {
            assert!(parse_size(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("200000").unwrap(), 200_000);
        assert_eq!(parse_count("200_000").unwrap(), 200_000);
        assert_eq!(parse_count("200k").unwrap(), 200_000);
        assert_eq!(parse_count("1.5M").unwrap(), 1_500_000);
        assert_eq!(parse_count("2G").unwrap(), 2_000_000_000);
        for bad in ["", "1.5", "10x", "k"] {
            assert!(parse_count(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_us(850), "850us");
        assert_eq!(format_us(1_250), "1.25ms");
        assert_eq!(format_us(3_400_000), "3.40s");
        assert_eq!(format_duration(Duration::from_secs(1)), "1s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_micros(20)), "20us");
    }
}
