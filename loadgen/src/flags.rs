//! What the binaries' flags read. Durations and sizes are sluice's shared
//! grammar ([`sluice_protocol::units`]: `250us`, `1.5s`, `1h30m`; `4KiB`,
//! `1M`, `1.5MiB`), exactly as the server and the `sluice` command read
//! them; these adapters only give clap a `String` error. Counts (`--messages`,
//! `--rate`) are this tool's own: whole numbers with decimal suffixes.

use std::path::Path;
use std::time::Duration;

use sluice_protocol::units;

/// A duration flag: the shared grammar.
///
/// # Errors
/// The grammar's message, which quotes the input and says what is accepted.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    units::parse_duration(input).map_err(|e| e.to_string())
}

/// A size flag in bytes: the shared grammar, narrowed to `usize`.
///
/// # Errors
/// The grammar's message, or that the size does not fit this machine.
pub fn parse_size(input: &str) -> Result<usize, String> {
    let bytes = units::parse_bytes(input).map_err(|e| e.to_string())?;
    usize::try_from(bytes).map_err(|_| format!("`{input}` is too large for this machine"))
}

/// A count: a whole number with optional `_` separators and an optional
/// decimal suffix `k` (10³), `M` (10⁶) or `G` (10⁹), so `200k` messages and
/// `1.5M` per second are 200,000 and 1,500,000. Unlike sizes, these
/// suffixes are decimal: a count of messages has no binary tradition.
///
/// # Errors
/// What is wrong with the text.
pub fn parse_count(input: &str) -> Result<u64, String> {
    let bad =
        |why: &str| format!("invalid count `{input}`: {why} (e.g. 200000, 200_000, 200k, 1.5M)");
    let text = input.trim().replace('_', "");
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let zeros: u32 = match suffix.trim() {
        "" => 0,
        "k" | "K" => 3,
        "M" => 6,
        "G" => 9,
        other => return Err(bad(&format!("unknown suffix `{other}`"))),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || (number.contains('.') && fraction.is_empty()) {
        return Err(bad("no number"));
    }
    if fraction.contains('.')
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return Err(bad("not a number"));
    }
    let Some(shift) = zeros.checked_sub(u32::try_from(fraction.len()).unwrap_or(u32::MAX)) else {
        return Err(bad("not a whole number"));
    };
    let digits: u64 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| bad("too large"))?;
    digits
        .checked_mul(10u64.pow(shift))
        .ok_or_else(|| bad("too large"))
}

/// Reads a `--token-file`: its content less trailing line ends (`\n`,
/// `\r`), as the server reads its own.
///
/// # Errors
/// The file cannot be read, or holds no token.
pub fn read_token_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the token file {}: {e}", path.display()))?;
    let token = text.trim_end_matches(['\n', '\r']);
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_are_the_shared_grammar() {
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        for bad in ["", "1.1B", "12 parsecs", "abc", "2KB"] {
            assert!(parse_size(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("200000"), Ok(200_000));
        assert_eq!(parse_count("200_000"), Ok(200_000));
        assert_eq!(parse_count("200k"), Ok(200_000));
        assert_eq!(parse_count("1.5M"), Ok(1_500_000));
        assert_eq!(parse_count("2G"), Ok(2_000_000_000));
        assert_eq!(parse_count(" 7 "), Ok(7));
        for bad in [
            "",
            "1.5",
            "10x",
            "k",
            "1.k",
            "1.2.3k",
            "-1",
            "99999999999999999999",
            "20000000000G",
        ] {
            assert!(parse_count(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn token_files_lose_only_trailing_line_ends() {
        let dir = std::env::temp_dir().join(format!("sluice-loadgen-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, " s3cret \r\n").unwrap();
        assert_eq!(read_token_file(&path), Ok(" s3cret ".to_owned()));
        std::fs::write(&path, "\n").unwrap();
        assert!(read_token_file(&path).unwrap_err().contains("empty"));
        assert!(read_token_file(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
