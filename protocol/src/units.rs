//! Durations and byte sizes as people write them on a command line or in a
//! config file, parsed and formatted by hand.
//!
//! # Durations
//! One or more terms, each a whole number followed by a unit, that add up:
//! `250ms`, `10s`, `2m`, `1h30m`, `4d`. Units: `ns`, `us` (or `µs`), `ms`,
//! `s`, `m`, `h`, `d`. A plain number is refused with a message that asks for
//! a unit, because `10` could mean seconds or milliseconds; the one
//! exception is `0`, which means the same in every unit.
//!
//! # Sizes
//! A whole number of bytes, optionally followed by a binary unit:
//! `1048576`, `512KiB`, `1MiB`, `2GiB`, `1TiB`. `K`, `M`, `G` and `T` are
//! binary too (`1M` = `1MiB` = 1,048,576 bytes), and `B` means bytes. Units
//! are case-insensitive. `KB`, `MB`, `GB` and `TB` are refused as ambiguous
//! (decimal or binary?) with a message that suggests the binary spelling.
//!
//! Fractions (`1.5s`, `0.5GiB`) are refused with a message: write the next
//! smaller unit instead. Values that overflow are errors, never wrap.
//!
//! [`format_duration`] and [`format_bytes`] write values back in a form these
//! parsers accept, so an effective configuration can be pasted into a config
//! file.

use std::time::Duration;

/// Why a duration or a size did not parse. Each message quotes the input and
/// says what would be accepted.
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
        /// What the binary spelling means in bytes, or "too many" if it
        /// overflows.
        bytes: String,
    },
    /// A fraction such as `1.5s`.
    #[error("`{input}`: fractions are not accepted, use a smaller unit (e.g. 1500ms, 512MiB)")]
    Fraction {
        /// The text as given.
        input: String,
    },
    /// No number where one was expected (a sign, a stray character, a unit
    /// without a number).
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

const DURATION_EXPECTED: &str = "a duration such as 250ms, 10s, 2m or 1h30m";
const DURATION_UNITS: &str = "ns, us, ms, s, m, h or d";
const SIZE_EXPECTED: &str = "a size such as 1048576, 512KiB, 1MiB or 2GiB";
const SIZE_UNITS: &str = "B, KiB (K), MiB (M), GiB (G) or TiB (T)";

/// Splits `s` at the end of its leading ASCII digits.
fn split_digits(s: &str) -> (&str, &str) {
    let end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    s.split_at(end)
}

/// Parses a duration: `250ms`, `10s`, `2m`, `1h30m`, `0`. See the module docs.
///
/// # Errors
/// A [`UnitError`] that quotes the input and says what would be accepted.
///
/// ```
/// use std::time::Duration;
/// use sluice_protocol::units::parse_duration;
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
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
    if s.bytes().all(|b| b.is_ascii_digit()) {
        // A plain number: only zero is unambiguous.
        if s.bytes().all(|b| b == b'0') {
            return Ok(Duration::ZERO);
        }
        return Err(UnitError::MissingUnit { input: owned() });
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let (digits, after) = split_digits(rest);
        if digits.is_empty() {
            return Err(UnitError::Malformed {
                input: owned(),
                expected: DURATION_EXPECTED,
            });
        }
        if after.starts_with('.') || after.starts_with(',') {
            return Err(UnitError::Fraction { input: owned() });
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if unit.is_empty() {
            // Digits at the end after at least one full term, as in `1m30`.
            return Err(UnitError::MissingUnit { input: owned() });
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| UnitError::Overflow { input: owned() })?;
        let overflow = || UnitError::Overflow { input: owned() };
        let term = match unit {
            "ns" => Duration::from_nanos(n),
            "us" | "µs" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(overflow)?),
            "h" => Duration::from_secs(n.checked_mul(3600).ok_or_else(overflow)?),
            "d" => Duration::from_secs(n.checked_mul(86_400).ok_or_else(overflow)?),
            _ => {
                return Err(UnitError::UnknownUnit {
                    input: owned(),
                    unit: unit.to_owned(),
                    units: DURATION_UNITS,
                });
            }
        };
        total = total.checked_add(term).ok_or_else(overflow)?;
        rest = next;
    }
    Ok(total)
}

/// Parses a byte size: `1048576`, `512KiB`, `1MiB`, `2G`. See the module docs.
///
/// # Errors
/// A [`UnitError`] that quotes the input and says what would be accepted.
///
/// ```
/// use sluice_protocol::units::parse_bytes;
/// assert_eq!(parse_bytes("512KiB"), Ok(512 * 1024));
/// assert!(parse_bytes("1MB").is_err());
/// ```
pub fn parse_bytes(input: &str) -> Result<u64, UnitError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(UnitError::Empty {
            expected: SIZE_EXPECTED,
        });
    }
    let owned = || s.to_owned();
    let (digits, after) = split_digits(s);
    if digits.is_empty() {
        return Err(UnitError::Malformed {
            input: owned(),
            expected: SIZE_EXPECTED,
        });
    }
    if after.starts_with('.') || after.starts_with(',') {
        return Err(UnitError::Fraction { input: owned() });
    }
    let unit = after.trim_start();
    let n: u64 = digits
        .parse()
        .map_err(|_| UnitError::Overflow { input: owned() })?;
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
                suggestion: format!("{digits}{binary}"),
                bytes: n
                    .checked_mul(1 << shift)
                    .map_or_else(|| "too many".to_owned(), |b| b.to_string()),
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
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| UnitError::Overflow { input: owned() })
}

/// Writes a duration as terms from days down to nanoseconds, e.g. `1m30s`,
/// `250ms`, `0`. [`parse_duration`] reads it back exactly.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0".to_owned();
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
        assert!(matches!(
            parse_duration("1.5s"),
            Err(UnitError::Fraction { .. })
        ));
        assert!(matches!(
            parse_duration("-1s"),
            Err(UnitError::Malformed { .. })
        ));
        assert!(matches!(
            parse_duration("s"),
            Err(UnitError::Malformed { .. })
        ));
        assert!(matches!(
            parse_duration("10 s"),
            Err(UnitError::UnknownUnit { .. })
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
    fn durations_overflow_is_an_error() {
        for input in [
            "18446744073709551616s",   // u64::MAX + 1
            "18446744073709551615m",   // fits u64, not when multiplied
            "307445734561825861h",     // just over u64::MAX seconds
            "213503982334602d",        // just over u64::MAX seconds
            "18446744073709551615s1s", // the sum overflows
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
        assert!(matches!(
            parse_bytes("1.5GiB"),
            Err(UnitError::Fraction { .. })
        ));
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
