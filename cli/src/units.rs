//! Adapters between the shared grammar ([`sluice_protocol::units`]: the
//! durations, sizes and addresses every sluice tool reads) and this
//! command's flags and wire fields. Nothing here parses a number itself.

use std::time::Duration;

use sluice_protocol::units;

/// A duration flag (clap value parser): the shared grammar, e.g. `250ms`,
/// `1.5s`, `1h30m`.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    units::parse_duration(input).map_err(|e| e.to_string())
}

/// A duration flag for what the broker counts in whole milliseconds (every
/// duration `sluice` sends): the shared grammar, and a remainder below a
/// millisecond refused rather than dropped, quoting the value as typed.
pub fn parse_ms_duration(input: &str) -> Result<Duration, String> {
    let d = parse_duration(input)?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!(
            "`{}` is not a whole number of milliseconds, which is what the broker counts in",
            input.trim()
        ));
    }
    Ok(d)
}

/// The longest long-poll wait a receive may ask for (20s).
pub const RECEIVE_WAIT_MAX: Duration =
    Duration::from_millis(sluice_protocol::limits::RECEIVE_WAIT_MS_MAX as u64);

/// A receive's long-poll wait: [`parse_ms_duration`], in 0 .. 20s.
pub fn parse_wait(input: &str) -> Result<Duration, String> {
    let d = parse_ms_duration(input)?;
    if d > RECEIVE_WAIT_MAX {
        return Err(format!(
            "`{}` is longer than a receive may wait: the range is 0 .. {}",
            input.trim(),
            format_ms(RECEIVE_WAIT_MAX.as_millis() as u64)
        ));
    }
    Ok(d)
}

/// A size flag (clap value parser): the shared grammar, e.g. `1048576`,
/// `256KiB`, `1M`.
pub fn parse_bytes(input: &str) -> Result<u64, String> {
    units::parse_bytes(input).map_err(|e| e.to_string())
}

/// `--addr`: a comma-separated list of broker addresses, each `HOST:PORT`
/// or `sluice://HOST:PORT`, given back as `HOST:PORT,HOST:PORT`.
pub fn parse_addrs(input: &str) -> Result<String, String> {
    let addrs = input
        .split(',')
        .map(|one| units::parse_address(one).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(addrs.join(","))
}

/// A parsed duration as the whole milliseconds of a `u32` wire field; a
/// remainder below a millisecond is refused rather than dropped.
pub fn duration_ms(d: Duration, what: &str) -> Result<u32, String> {
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!(
            "{what}: {} is not a whole number of milliseconds, which is what the broker counts in",
            units::format_duration(d)
        ));
    }
    u32::try_from(d.as_millis()).map_err(|_| format!("{what}: {d:?} is too large"))
}

/// A `BASE:MAX` pair of durations.
pub fn parse_backoff(input: &str) -> Result<(Duration, Duration), String> {
    let (base, max) = input
        .split_once(':')
        .ok_or_else(|| format!("{input:?}: expected BASE:MAX, for example 100ms:1m"))?;
    Ok((parse_ms_duration(base)?, parse_ms_duration(max)?))
}

/// A `KEY=VALUE` pair.
pub fn parse_attr(input: &str) -> Result<(String, String), String> {
    let (k, v) = input
        .split_once('=')
        .ok_or_else(|| format!("{input:?}: expected KEY=VALUE"))?;
    Ok((k.to_owned(), v.to_owned()))
}

/// Milliseconds as people read them: the largest unit that divides them
/// (`0s`, `250ms`, `30s`, `5m`, `4d`, `90s`), which the grammar reads back.
pub fn format_ms(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    if ms == 0 {
        return "0s".to_owned();
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
    fn the_shared_grammar_with_messages_for_clap() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_bytes("1M"), Ok(1 << 20));
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert!(parse_bytes("1MB").unwrap_err().contains("1MiB"));
    }

    #[test]
    fn addresses_in_either_form() {
        assert_eq!(
            parse_addrs("127.0.0.1:7171").as_deref(),
            Ok("127.0.0.1:7171")
        );
        assert_eq!(
            parse_addrs("sluice://a:1,b:2, sluice://c").as_deref(),
            Ok("a:1,b:2,c:7171")
        );
        for bad in ["", "a", "a:1,", "redis://a:1", "a:1,,b:2"] {
            let err = parse_addrs(bad).expect_err(bad);
            assert!(err.contains("sluice://HOST:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn wire_durations_are_whole_milliseconds_quoted_as_typed() {
        let ms = Duration::from_millis;
        assert_eq!(parse_ms_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_ms_duration("0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_ms_duration("1500us"),
            Err("`1500us` is not a whole number of milliseconds, which is what the broker counts in"
                .to_owned())
        );
        assert!(
            parse_ms_duration("0.5ms")
                .unwrap_err()
                .starts_with("`0.5ms` ")
        );
        assert!(
            parse_backoff("100ms:1500us")
                .unwrap_err()
                .contains("`1500us`")
        );
        assert!(parse_ms_duration("5").unwrap_err().contains("no unit"));
        assert_eq!(parse_wait("20s"), Ok(ms(20_000)));
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_wait("30s"),
            Err("`30s` is longer than a receive may wait: the range is 0 .. 20s".to_owned())
        );
        assert!(parse_wait("1500us").unwrap_err().contains("whole number"));
    }

    #[test]
    fn wire_milliseconds_are_whole() {
        assert_eq!(duration_ms(Duration::from_secs(2), "x"), Ok(2000));
        assert_eq!(duration_ms(Duration::from_micros(1500), "x"), Err(
            "x: 1ms500us is not a whole number of milliseconds, which is what the broker counts in"
                .to_owned()
        ));
        assert!(duration_ms(Duration::from_secs(u64::from(u32::MAX)), "x").is_err());
    }

    #[test]
    fn backoff_and_attrs() {
        let ms = Duration::from_millis;
        assert_eq!(parse_backoff("100ms:1m"), Ok((ms(100), ms(60_000))));
        assert_eq!(parse_backoff("0.1s:1.5m"), Ok((ms(100), ms(90_000))));
        assert!(parse_backoff("100ms").is_err());
        assert!(parse_backoff("100:1m").is_err());
        assert_eq!(parse_attr("k=v=w"), Ok(("k".into(), "v=w".into())));
        assert_eq!(parse_attr("k="), Ok(("k".into(), String::new())));
        assert!(parse_attr("k").is_err());
    }

    #[test]
    fn formatting_reads_back() {
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
        assert_eq!(format_ms(90_000), "90s");
        assert_eq!(format_ms(345_600_000), "4d");
    }
}
