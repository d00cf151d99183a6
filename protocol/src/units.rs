//! Durations, byte sizes and broker addresses as people write them on a
//! command line, in an environment variable or in a config file: one grammar
//! for the server, the `sluice` command and the load generator.
//!
//! # Durations
//! One or more terms that add up, each a number and a unit: `250ms`, `10s`,
//! `1.5s`, `0.25ms`, `2m`, `1h30m`, `4d`. Units: `ns`, `us` (or `µs`), `ms`,
//! `s`, `m` (minutes), `h`, `d`; case matters (`10S` is refused). Numbers are
//! decimal, with at most 18 digits after the point and a digit on each side
//! of it (`0.5s`, not `.5s` or `5.s`). Spaces may stand between a number and
//! its unit and between terms (`1h 30m`). A plain number is refused with a
//! message that asks for a unit, because `10` could mean seconds or
//! milliseconds; the one exception is zero (`0`, `0.0`), the same in every
//! unit.
//!
//! The arithmetic is exact: each term is multiplied out in decimal, the terms
//! are added, and only the total is rounded, to the nearest nanosecond, a
//! half rounding up (`1.5ns` is 2 ns, `0.4ns` is 0). A total beyond
//! [`Duration::MAX`] is refused, never wrapped or saturated.
//!
//! # Sizes
//! A number of bytes, optionally followed by a binary unit: `1048576`,
//! `512KiB`, `1MiB`, `1.5MiB`, `2GiB`, `1TiB`. `K`, `M`, `G` and `T` are
//! binary too (`1M` = `1MiB` = 1,048,576 bytes) and `B` means bytes; units
//! are case-insensitive and may follow a space (`64 MiB`). Decimals are
//! allowed when they come to a whole number of bytes (`1.5KiB` = 1536,
//! `0.5B` is refused). `KB`, `MB`, `GB` and `TB` are refused as ambiguous
//! (decimal or binary?) with a message that gives the binary spelling. A size
//! beyond `u64::MAX` bytes is refused.
//!
//! # Addresses
//! [`parse_address`]: `HOST:PORT` or `sluice://HOST:PORT`.
//!
//! [`format_duration`] and [`format_bytes`] write values back in a form these
//! parsers accept, so an effective configuration can be pasted into a config
//! file.

use std::time::Duration;

/// Why a duration, a size or an address did not parse. Each message quotes
/// the input and says what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// Nothing but whitespace.
    #[error("empty value: expected {expected}")]
    Empty {
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// A plain number where a duration needs a unit.
    #[error(
        "`{input}` has no unit: write `{input}s` for seconds or `{input}ms` for milliseconds \
         (units: ns, us, ms, s, m, h, d)"
    )]
    MissingUnit {
        /// The text as given.
        input: String,
    },
    /// A unit this parser does not know.
    #[error("`{unit}` in `{input}` is not a unit: use {units}")]
    UnknownUnit {
        /// The text as given.
        input: String,
        /// The unknown unit.
        unit: String,
        /// The units that are accepted.
        units: &'static str,
    },
    /// A decimal unit such as `MB`, which people read either way.
    #[error(
        "`{input}` is ambiguous: sizes are binary here, so write `{suggestion}` \
         ({bytes} bytes), or give the exact number of bytes"
    )]
    AmbiguousUnit {
        /// The text as given.
        input: String,
        /// The binary spelling of the same number.
        suggestion: String,
        /// What the binary spelling means in bytes, or why it has no such
        /// number ("too many", "not a whole number of").
        bytes: String,
    },
    /// A size that is not a whole number of bytes, such as `0.5B` or
    /// `1.1KiB`.
    #[error("`{input}` is not a whole number of bytes")]
    FractionalBytes {
        /// The text as given.
        input: String,
    },
    /// More digits after the decimal point than the parser keeps.
    #[error("`{input}` has more than {DECIMALS_MAX} digits after a decimal point")]
    TooPrecise {
        /// The text as given.
        input: String,
    },
    /// No number where one was expected (a sign, a stray character, a unit
    /// without a number, a decimal point without digits on both sides).
    #[error("`{input}` is not {expected}")]
    Malformed {
        /// The text as given.
        input: String,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// The value does not fit (u64 bytes, or a `Duration`).
    #[error("`{input}` is too large")]
    Overflow {
        /// The text as given.
        input: String,
    },
    /// Not a broker address (`HOST:PORT` or `sluice://HOST:PORT`).
    #[error(
        "`{input}` is not a broker address ({reason}): expected HOST:PORT or sluice://HOST:PORT"
    )]
    Address {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Digits after a decimal point, at most: 10^18 fits a `u64`, and a
/// nanosecond is 10^-14 of the largest unit, a day.
pub const DECIMALS_MAX: u32 = 18;

const DURATION_EXPECTED: &str = "a duration such as 250ms, 1.5s, 2m or 1h30m";
const DURATION_UNITS: &str = "ns, us, ms, s, m, h or d";
const SIZE_EXPECTED: &str = "a size such as 1048576, 512KiB, 1.5MiB or 2GiB";
const SIZE_UNITS: &str = "B, KiB (K), MiB (M), GiB (G) or TiB (T)";

const NANOS_PER_SEC: u128 = 1_000_000_000;
/// [`Duration::MAX`] in nanoseconds.
const DURATION_MAX_NANOS: u128 = u64::MAX as u128 * NANOS_PER_SEC + (NANOS_PER_SEC - 1);
/// 10^[`DECIMALS_MAX`]: every term is added up in these fractions of a
/// nanosecond before the total is rounded.
const FRACTION_ONE: u128 = 10u128.pow(DECIMALS_MAX);

/// A decimal number as written: `mantissa / 10^decimals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decimal {
    mantissa: u128,
    decimals: u32,
}

/// What is wrong with a number, before the input is attached.
enum NumberError {
    /// No digit where the number starts, or a point without digits after it.
    Malformed,
    /// More than [`DECIMALS_MAX`] digits after the point.
    TooPrecise,
    /// More digits than a `u128` holds.
    Overflow,
}

impl NumberError {
    fn into_unit_error(self, input: &str, expected: &'static str) -> UnitError {
        let input = input.to_owned();
        match self {
            NumberError::Malformed => UnitError::Malformed { input, expected },
            NumberError::TooPrecise => UnitError::TooPrecise { input },
            NumberError::Overflow => UnitError::Overflow { input },
        }
    }
}

/// Splits `s` at the end of its leading ASCII digits.
fn split_digits(s: &str) -> (&str, &str) {
    let end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    s.split_at(end)
}

/// Reads the decimal number `s` starts with, `DIGITS` or `DIGITS.DIGITS`,
/// and returns it with the rest of `s`.
fn split_decimal(s: &str) -> Result<(Decimal, &str), NumberError> {
    let (whole, after) = split_digits(s);
    if whole.is_empty() {
        return Err(NumberError::Malformed);
    }
    let (fraction, rest) = match after.strip_prefix('.') {
        Some(after_point) => {
            let (fraction, rest) = split_digits(after_point);
            if fraction.is_empty() {
                return Err(NumberError::Malformed);
            }
            (fraction, rest)
        }
        None => ("", after),
    };
    // A second point, or a decimal comma: not a number this grammar reads.
    if rest.starts_with(['.', ',']) {
        return Err(NumberError::Malformed);
    }
    let decimals = u32::try_from(fraction.len()).map_err(|_| NumberError::TooPrecise)?;
    if decimals > DECIMALS_MAX {
        return Err(NumberError::TooPrecise);
    }
    let mut mantissa: u128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(b - b'0')))
            .ok_or(NumberError::Overflow)?;
    }
    Ok((Decimal { mantissa, decimals }, rest))
}

/// Splits a unit (everything up to a digit, a point or a space) off `s`.
fn split_unit(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
        .unwrap_or(s.len());
    s.split_at(end)
}

/// Nanoseconds in one of a duration unit.
fn nanos_per(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        "d" => 86_400 * NANOS_PER_SEC,
        _ => return None,
    })
}

/// Parses a duration: `250ms`, `1.5s`, `2m`, `1h30m`, `0`. See the module
/// docs for the grammar and how decimals are rounded.
///
/// # Errors
/// A [`UnitError`] that quotes the input and says what would be accepted.
///
/// ```
/// use std::time::Duration;
/// use sluice_protocol::units::parse_duration;
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
/// assert!(parse_duration("10").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(UnitError::Empty {
            expected: DURATION_EXPECTED,
        });
    }
    let owned = || s.to_owned();
    let overflow = || UnitError::Overflow { input: owned() };
    // The total, whole nanoseconds and 10^-18ths of one kept apart so that
    // neither overflows before the end.
    let mut nanos: u128 = 0;
    let mut fraction: u128 = 0;
    let mut rest = s;
    let mut terms = 0u32;
    while !rest.is_empty() {
        let (number, after) =
            split_decimal(rest).map_err(|e| e.into_unit_error(s, DURATION_EXPECTED))?;
        let (unit, next) = split_unit(after.trim_start());
        if unit.is_empty() {
            // A plain number, or digits after full terms as in `1m30`. Zero
            // alone is the same in every unit.
            if terms == 0 && next.is_empty() && number.mantissa == 0 {
                return Ok(Duration::ZERO);
            }
            return Err(UnitError::MissingUnit { input: owned() });
        }
        let Some(per) = nanos_per(unit) else {
            return Err(UnitError::UnknownUnit {
                input: owned(),
                unit: unit.to_owned(),
                units: DURATION_UNITS,
            });
        };
        // number * per = mantissa * per / 10^decimals nanoseconds.
        let scaled = number.mantissa.checked_mul(per).ok_or_else(overflow)?;
        let denominator = 10u128.pow(number.decimals);
        nanos = nanos
            .checked_add(scaled / denominator)
            .ok_or_else(overflow)?;
        fraction += (scaled % denominator) * 10u128.pow(DECIMALS_MAX - number.decimals);
        if fraction >= FRACTION_ONE {
            nanos = nanos.checked_add(1).ok_or_else(overflow)?;
            fraction -= FRACTION_ONE;
        }
        if nanos > DURATION_MAX_NANOS {
            return Err(overflow());
        }
        terms += 1;
        rest = next.trim_start();
    }
    if fraction * 2 >= FRACTION_ONE {
        nanos += 1;
    }
    if nanos > DURATION_MAX_NANOS {
        return Err(overflow());
    }
    let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| overflow())?;
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).map_err(|_| overflow())?;
    Ok(Duration::new(secs, subsec))
}

/// `number * 2^shift` as a whole number of bytes.
fn bytes_of(number: Decimal, shift: u32) -> Result<u64, SizeError> {
    let scaled = number
        .mantissa
        .checked_mul(1u128 << shift)
        .ok_or(SizeError::Overflow)?;
    let denominator = 10u128.pow(number.decimals);
    if scaled % denominator != 0 {
        return Err(SizeError::Fractional);
    }
    u64::try_from(scaled / denominator).map_err(|_| SizeError::Overflow)
}

enum SizeError {
    Overflow,
    Fractional,
}

/// Parses a byte size: `1048576`, `512KiB`, `1.5MiB`, `2G`. See the module
/// docs.
///
/// # Errors
/// A [`UnitError`] that quotes the input and says what would be accepted.
///
/// ```
/// use sluice_protocol::units::parse_bytes;
/// assert_eq!(parse_bytes("512KiB"), Ok(512 * 1024));
/// assert_eq!(parse_bytes("1M"), Ok(1 << 20));
/// assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
/// assert!(parse_bytes("1MB").is_err());
/// assert!(parse_bytes("0.5B").is_err());
/// ```
pub fn parse_bytes(input: &str) -> Result<u64, UnitError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(UnitError::Empty {
            expected: SIZE_EXPECTED,
        });
    }
    let owned = || s.to_owned();
    let (number, after) = split_decimal(s).map_err(|e| e.into_unit_error(s, SIZE_EXPECTED))?;
    let unit = after.trim_start();
    let written = &s[..s.len() - after.len()];
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        ambiguous @ ("kb" | "mb" | "gb" | "tb") => {
            let shift = match ambiguous {
                "kb" => 10,
                "mb" => 20,
                "gb" => 30,
                _ => 40,
            };
            let binary = format!("{}iB", &unit[..1].to_ascii_uppercase());
            return Err(UnitError::AmbiguousUnit {
                input: owned(),
                suggestion: format!("{written}{binary}"),
                bytes: match bytes_of(number, shift) {
                    Ok(b) => b.to_string(),
                    Err(SizeError::Overflow) => "too many".to_owned(),
                    Err(SizeError::Fractional) => "not a whole number of".to_owned(),
                },
            });
        }
        _ => {
            return Err(UnitError::UnknownUnit {
                input: owned(),
                unit: unit.to_owned(),
                units: SIZE_UNITS,
            });
        }
    };
    bytes_of(number, shift).map_err(|e| match e {
        SizeError::Overflow => UnitError::Overflow { input: owned() },
        SizeError::Fractional => UnitError::FractionalBytes { input: owned() },
    })
}

/// Writes a duration as terms from days down to nanoseconds, e.g. `1m30s`,
/// `250ms`, `0s`. [`parse_duration`] reads it back exactly.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    let secs = d.as_secs();
    let nanos = u64::from(d.subsec_nanos());
    let terms = [
        (secs / 86_400, "d"),
        (secs % 86_400 / 3600, "h"),
        (secs % 3600 / 60, "m"),
        (secs % 60, "s"),
        (nanos / 1_000_000, "ms"),
        (nanos % 1_000_000 / 1000, "us"),
        (nanos % 1000, "ns"),
    ];
    let mut out = String::new();
    for (n, unit) in terms {
        if n != 0 {
            out.push_str(&n.to_string());
            out.push_str(unit);
        }
    }
    out
}

/// Writes a size in the largest binary unit that divides it exactly
/// (`1MiB`, `3KiB`), or as plain bytes (`1536`, `0`). [`parse_bytes`] reads
/// it back exactly.
#[must_use]
pub fn format_bytes(n: u64) -> String {
    if n == 0 {
        return "0".to_owned();
    }
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n.trailing_zeros() >= shift {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// The port a broker listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7171;

/// Parses a broker address, `HOST:PORT` or `sluice://HOST:PORT`, and gives
/// it back as `HOST:PORT`. In the URL form the port may be left out
/// ([`DEFAULT_PORT`]) and one trailing `/` is allowed. IPv6 hosts go in
/// brackets: `[::1]:7171`. The host is not resolved here.
///
/// # Errors
/// [`UnitError::Address`], saying what is wrong.
///
/// ```
/// use sluice_protocol::units::parse_address;
/// assert_eq!(parse_address("sluice://broker-1:7000").unwrap(), "broker-1:7000");
/// assert_eq!(parse_address("sluice://broker-1").unwrap(), "broker-1:7171");
/// assert_eq!(parse_address("127.0.0.1:7171").unwrap(), "127.0.0.1:7171");
/// assert!(parse_address("redis://127.0.0.1:6379").is_err());
/// assert!(parse_address("127.0.0.1").is_err());
/// ```
pub fn parse_address(input: &str) -> Result<String, UnitError> {
    let fail = |reason| UnitError::Address {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    let (authority, is_url) = match s.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("sluice") => {
            (rest.strip_suffix('/').unwrap_or(rest), true)
        }
        Some(_) => return Err(fail("the only scheme is sluice://")),
        None => (s, false),
    };
    if authority.is_empty() {
        return Err(fail("no host"));
    }
    if authority.contains(['/', '?', '#', '@', ' ', ',']) {
        return Err(fail("only a host and a port are allowed"));
    }
    // The port follows the last ':' outside IPv6 brackets.
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(|| fail("unclosed '['"))?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(p.strip_prefix(':').ok_or_else(|| fail("text after ']'"))?),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => return Err(fail("IPv6 hosts go in brackets")),
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(fail("no host"));
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| fail("the port is not a number from 1 to 65535"))?,
        None if is_url => DEFAULT_PORT,
        None => return Err(fail("no port")),
    };
    Ok(if authority.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        let cases = [
            ("250ms", Duration::from_millis(250)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("4d", Duration::from_secs(4 * 86_400)),
            ("15us", Duration::from_micros(15)),
            ("15µs", Duration::from_micros(15)),
            ("7ns", Duration::from_nanos(7)),
            ("1h30m", Duration::from_secs(5400)),
            ("1m30s500ms", Duration::from_millis(90_500)),
            (" 10s ", Duration::from_secs(10)),
            ("0", Duration::ZERO),
            ("000", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("0010s", Duration::from_secs(10)),
            ("10 s", Duration::from_secs(10)),
            ("1h 30m", Duration::from_secs(5400)),
            ("0.0", Duration::ZERO),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn durations_refused_with_a_reason() {
        let missing = parse_duration("10").unwrap_err();
        assert_eq!(missing, UnitError::MissingUnit { input: "10".into() });
        assert!(missing.to_string().contains("`10s`"), "{missing}");
        assert!(matches!(
            parse_duration("1m30"),
            Err(UnitError::MissingUnit { .. })
        ));
        assert!(matches!(parse_duration(""), Err(UnitError::Empty { .. })));
        assert!(matches!(
            parse_duration("   "),
            Err(UnitError::Empty { .. })
        ));
        for malformed in [".5s", "5.s", "1..5s", "1.5.5s", "1,5s", "1s -2s"] {
            assert!(
                matches!(parse_duration(malformed), Err(UnitError::Malformed { .. })),
                "{malformed}"
            );
        }
        assert!(matches!(
            parse_duration("0.0000000000000000001s"),
            Err(UnitError::TooPrecise { .. })
        ));
        assert!(matches!(
            parse_duration("1.5"),
            Err(UnitError::MissingUnit { .. })
        ));
        assert!(matches!(
            parse_duration("10 parsecs"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("-1s"),
            Err(UnitError::Malformed { .. })
        ));
        assert!(matches!(
            parse_duration("s"),
            Err(UnitError::Malformed { .. })
        ));
        let unknown = parse_duration("3w").unwrap_err();
        assert_eq!(
            unknown,
            UnitError::UnknownUnit {
                input: "3w".into(),
                unit: "w".into(),
                units: DURATION_UNITS
            }
        );
        assert!(unknown.to_string().contains("`w`"), "{unknown}");
        assert!(matches!(
            parse_duration("10S"),
            Err(UnitError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn durations_with_decimals_are_exact() {
        let cases = [
            ("1.5s", Duration::from_millis(1500)),
            ("0.25ms", Duration::from_micros(250)),
            ("0.5m", Duration::from_secs(30)),
            ("1.5h", Duration::from_secs(5400)),
            ("0.1s", Duration::from_millis(100)),
            ("2.5us", Duration::from_nanos(2500)),
            ("1.25d", Duration::from_secs(108_000)),
            ("1.5h30m", Duration::from_secs(7200)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("0.000000000000000001d", Duration::from_nanos(0)),
            // 0.1 in binary floating point is not exact; here it is.
            ("0.3s0.3s0.3s0.1s", Duration::from_secs(1)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn durations_round_the_total_to_the_nearest_nanosecond_halves_up() {
        for (input, nanos) in [
            ("0.4ns", 0),
            ("0.5ns", 1),
            ("1.5ns", 2),
            ("2.5ns", 3),
            ("1.49ns", 1),
            ("0.000000000499999999s", 0),
            ("0.0000000005s", 1),
            // Rounded once, after the sum: 0.3 + 0.3 = 0.6 ns, not 0 + 0.
            ("0.3ns0.3ns", 1),
            ("0.25ns0.25ns", 1),
            ("0.2ns0.2ns", 0),
        ] {
            assert_eq!(
                parse_duration(input),
                Ok(Duration::from_nanos(nanos)),
                "{input}"
            );
        }
    }

    #[test]
    fn durations_overflow_is_an_error() {
        for input in [
            "18446744073709551616s",                    // u64::MAX + 1
            "18446744073709551615m",                    // fits u64, not when multiplied
            "307445734561825861h",                      // just over u64::MAX seconds
            "213503982334602d",                         // just over u64::MAX seconds
            "18446744073709551615s1s",                  // the sum overflows
            "18446744073709551615.9999999995s",         // rounds up past the largest
            "999999999999999999999999999999999999999s", // beyond a u128 mantissa
        ] {
            assert_eq!(
                parse_duration(input),
                Err(UnitError::Overflow {
                    input: input.into()
                })
            );
        }
        assert_eq!(
            parse_duration("18446744073709551615s"),
            Ok(Duration::from_secs(u64::MAX)),
            "the largest whole number of seconds still fits"
        );
        assert_eq!(
            parse_duration("18446744073709551615.999999999s"),
            Ok(Duration::MAX),
            "so does the largest duration"
        );
    }

    #[test]
    fn sizes_in_every_unit() {
        let cases = [
            ("0", 0),
            ("1048576", 1 << 20),
            ("17B", 17),
            ("512KiB", 512 << 10),
            ("512K", 512 << 10),
            ("512k", 512 << 10),
            ("1MiB", 1 << 20),
            ("1mib", 1 << 20),
            ("1M", 1 << 20),
            ("2GiB", 2 << 30),
            ("2G", 2 << 30),
            ("3TiB", 3 << 40),
            ("3T", 3 << 40),
            ("64 MiB", 64 << 20),
            (" 4KiB ", 4 << 10),
            ("16777215TiB", 16_777_215 << 40),
            ("1.5KiB", 1536),
            ("1.5MiB", 3 << 19),
            ("0.5K", 512),
            ("2.0B", 2),
            ("1.0", 1),
            ("0.25 GiB", 1 << 28),
        ];
        for (input, want) in cases {
            assert_eq!(parse_bytes(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn sizes_refused_with_a_reason() {
        let ambiguous = parse_bytes("10MB").unwrap_err();
        assert_eq!(
            ambiguous,
            UnitError::AmbiguousUnit {
                input: "10MB".into(),
                suggestion: "10MiB".into(),
                bytes: "10485760".into()
            }
        );
        assert!(ambiguous.to_string().contains("10MiB"), "{ambiguous}");
        assert!(matches!(
            parse_bytes("1kb"),
            Err(UnitError::AmbiguousUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("1GB"),
            Err(UnitError::AmbiguousUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("1TB"),
            Err(UnitError::AmbiguousUnit { .. })
        ));
        assert!(matches!(parse_bytes(""), Err(UnitError::Empty { .. })));
        for fractional in ["0.5B", "1.5", "1.1KiB", "0.0000001TiB"] {
            assert_eq!(
                parse_bytes(fractional),
                Err(UnitError::FractionalBytes {
                    input: fractional.into()
                }),
                "{fractional}"
            );
        }
        assert!(matches!(
            parse_bytes(".5KiB"),
            Err(UnitError::Malformed { .. })
        ));
        assert!(matches!(
            parse_bytes("12 parsecs"),
            Err(UnitError::UnknownUnit { .. })
        ));
        let ambiguous_decimal = parse_bytes("1.5MB").unwrap_err();
        assert!(
            ambiguous_decimal
                .to_string()
                .contains("`1.5MiB` (1572864 bytes)"),
            "{ambiguous_decimal}"
        );
        assert!(matches!(
            parse_bytes("-1"),
            Err(UnitError::Malformed { .. })
        ));
        assert!(matches!(
            parse_bytes("MiB"),
            Err(UnitError::Malformed { .. })
        ));
        assert!(matches!(
            parse_bytes("1PiB"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("1MiB2"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("1 M iB"),
            Err(UnitError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn sizes_overflow_is_an_error() {
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        for input in [
            "18446744073709551616",
            "16777216TiB",
            "17179869184GiB",
            "99999999999999999999K",
            "16777216.0TiB",
        ] {
            assert_eq!(
                parse_bytes(input),
                Err(UnitError::Overflow {
                    input: input.into()
                })
            );
        }
        let huge = parse_bytes("99999999999999999TB").unwrap_err();
        assert!(matches!(huge, UnitError::AmbiguousUnit { ref bytes, .. } if bytes == "too many"));
    }

    #[test]
    fn formats_read_back_exactly() {
        let durations = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(10),
            Duration::from_millis(250),
            Duration::from_secs(10),
            Duration::from_secs(5400),
            Duration::new(90_061, 1_001_001),
            Duration::from_secs(u64::MAX),
            Duration::MAX,
        ];
        for d in durations {
            assert_eq!(
                parse_duration(&format_duration(d)),
                Ok(d),
                "{}",
                format_duration(d)
            );
        }
        assert_eq!(format_duration(Duration::from_millis(90_500)), "1m30s500ms");
        assert_eq!(format_duration(Duration::from_secs(14 * 86_400)), "14d");

        for n in [
            0,
            1,
            1023,
            1024,
            1536,
            3 << 10,
            1 << 20,
            256 << 20,
            5 << 40,
            u64::MAX,
        ] {
            assert_eq!(parse_bytes(&format_bytes(n)), Ok(n), "{}", format_bytes(n));
        }
        assert_eq!(format_bytes(1536), "1536");
        assert_eq!(format_bytes(4 << 20), "4MiB");
        assert_eq!(format_bytes(1 << 40), "1TiB");
        assert_eq!(format_bytes(1 << 50), "1024TiB");
    }
}

#[cfg(test)]
mod address_tests {
    use super::*;

    #[test]
    fn addresses_in_both_forms() {
        for (input, want) in [
            ("127.0.0.1:7171", "127.0.0.1:7171"),
            ("sluice://127.0.0.1:7171", "127.0.0.1:7171"),
            ("SLUICE://h:1/", "h:1"),
            ("sluice://h", "h:7171"),
            ("[::1]:9", "[::1]:9"),
            ("sluice://[::1]", "[::1]:7171"),
            (" localhost:80 ", "localhost:80"),
        ] {
            assert_eq!(parse_address(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn bad_addresses_say_why() {
        for input in [
            "",
            "h",
            "h:",
            "h:0",
            "h:65536",
            "h:x",
            "::1:80",
            "[::1",
            "[::1]x",
            "redis://h:1",
            "sluice://",
            "sluice://h:1/q",
            "sluice://u@h:1",
            ":80",
            "a:1,b:2",
        ] {
            let err = parse_address(input).expect_err(input);
            assert!(
                err.to_string().contains("sluice://HOST:PORT"),
                "{input}: {err}"
            );
        }
    }
}

#[cfg(test)]
mod property_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text: an answer, never a panic.
        #[test]
        fn any_text_is_answered(s in "\\PC{0,40}") {
            let _ = parse_duration(&s);
            let _ = parse_bytes(&s);
            let _ = parse_address(&s);
        }

        /// Text made of the grammar's own pieces, where mistakes are likeliest.
        #[test]
        fn grammar_like_text_is_answered(s in "[0-9. µnusmhdKMGTiBb]{0,30}") {
            let _ = parse_duration(&s);
            let _ = parse_bytes(&s);
        }

        /// Seconds with nine decimals are exactly that many nanoseconds, and
        /// every duration reads back from its formatted form.
        #[test]
        fn decimal_seconds_are_exact(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            prop_assert_eq!(parse_duration(&format!("{secs}.{nanos:09}s")), Ok(d));
            prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }

        /// A decimal number of milliseconds rounds to the nearest
        /// nanosecond, a half up.
        #[test]
        fn decimal_milliseconds_round_half_up(ms in 0u64..1_000_000_000, frac in 0u64..10_000_000) {
            // ms + frac / 10^7 milliseconds = ms * 10^6 + frac / 10 nanoseconds.
            let want = ms * 1_000_000 + frac / 10 + u64::from(frac % 10 >= 5);
            prop_assert_eq!(
                parse_duration(&format!("{ms}.{frac:07}ms")),
                Ok(Duration::from_nanos(want))
            );
        }

        /// A binary size with decimals is its exact number of bytes, or
        /// refused when that is not whole.
        #[test]
        fn decimal_sizes_are_exact_or_refused(whole in 0u64..1_000_000, half in any::<bool>()) {
            let text = format!("{whole}.{}KiB", if half { "5" } else { "0" });
            prop_assert_eq!(parse_bytes(&text), Ok(whole * 1024 + if half { 512 } else { 0 }));
            let n = whole * 1024 + 1;
            prop_assert_eq!(parse_bytes(&format_bytes(n)), Ok(n));
            prop_assert_eq!(
                parse_bytes(&format!("{whole}.001B")),
                Err(UnitError::FractionalBytes { input: format!("{whole}.001B") })
            );
        }
    }
}
