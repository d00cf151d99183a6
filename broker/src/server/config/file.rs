//! The `--config` TOML file: read once, deserialized into [`Settings`]
//! through the same declaration the flags use, and refused with the key,
//! the line and the column of what is wrong.
//!
//! Each setting's type decides what the file may hold there: a size, a
//! duration or a count as a string in the shared grammar or as a TOML
//! integer, `insecure` as a boolean, paths and the log filter as strings.

use std::fmt;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::{
    CONFIG_FILE_BYTES_MAX, ClockChoice, ConfigError, CpuPlacement, Durability, IoChoice,
    MetricsAddr, Settings, format_bytes, parse_clock, parse_count, parse_cpus, parse_durability,
    parse_io, parse_listen, parse_metrics_addr, parse_size, parse_time,
};

/// Where something is in the file, 1-based, the column in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1, in characters.
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` of `text`.
    fn of(text: &str, offset: usize) -> Position {
        let before = text.get(..offset).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Position {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

impl Settings {
    /// Reads a config file: at most [`CONFIG_FILE_BYTES_MAX`] bytes of TOML.
    /// A relative `token_file`, `tls_cert`, `tls_key`, `tls_client_ca` or
    /// `snapshot` in it is taken relative to the file's folder.
    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let read_error = |source| ConfigError::ReadConfigFile {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let mut text = String::new();
        file.take(CONFIG_FILE_BYTES_MAX + 1)
            .read_to_string(&mut text)
            .map_err(read_error)?;
        if text.len() as u64 > CONFIG_FILE_BYTES_MAX {
            return Err(ConfigError::ConfigFileTooLarge {
                path: path.to_owned(),
                max: format_bytes(CONFIG_FILE_BYTES_MAX),
            });
        }
        let mut settings = Settings::from_toml(&text, path)?;
        for file in [
            &mut settings.token_file,
            &mut settings.tls_cert,
            &mut settings.tls_key,
            &mut settings.tls_client_ca,
            &mut settings.snapshot,
        ]
        .into_iter()
        .flatten()
        {
            if file.is_relative() {
                if let Some(folder) = path.parent() {
                    *file = folder.join(&*file);
                }
            }
        }
        Ok(settings)
    }

    /// Parses config file text; `path` names the file in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Settings, ConfigError> {
        let at = |span: Option<Range<usize>>| Position::of(text, span.map_or(0, |s| s.start));
        let table =
            toml::de::DeTable::parse(text).map_err(|err| ConfigError::ConfigFileSyntax {
                path: path.to_owned(),
                at: at(err.span()),
                message: err.message().trim_end().to_owned(),
            })?;
        // Every key and where it and its value are, to name the key of an
        // error the deserializer reports by position only.
        let keys: Vec<(String, Range<usize>)> = table
            .get_ref()
            .iter()
            .map(|(key, value)| {
                let span =
                    key.span().start.min(value.span().start)..key.span().end.max(value.span().end);
                (key.get_ref().to_string(), span)
            })
            .collect();
        for (key, span) in &keys {
            if !Settings::KEYS.contains(&key.as_str()) {
                return Err(ConfigError::UnknownKey {
                    path: path.to_owned(),
                    key: key.clone(),
                    at: at(Some(span.clone())),
                    known: Settings::KEYS.join(", "),
                });
            }
        }
        Settings::deserialize(toml::de::Deserializer::from(table)).map_err(|err| {
            // Every error of a value carries the value's span; without one
            // (none is known to occur), the file is still named.
            let span = err.span();
            let key = span
                .as_ref()
                .and_then(|s| keys.iter().find(|(_, k)| k.contains(&s.start)))
                .map_or_else(|| "?".to_owned(), |(key, _)| key.clone());
            ConfigError::BadValue {
                path: path.to_owned(),
                key,
                at: at(span),
                message: err.message().trim_end().to_owned(),
            }
        })
    }
}

/// A setting written as text: a TOML string, or an integer read as its
/// decimal digits (`max_connections = 5000`, `frame_bytes_max = 1048576`),
/// then parsed by the flag's own parser.
fn text<'de, D, T>(d: D, parse: fn(&str) -> Result<T, String>) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
{
    struct Text;
    impl Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or a whole number")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    let text = d.deserialize_any(Text)?;
    parse(&text).map(Some).map_err(de::Error::custom)
}

pub(super) fn listen<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::net::SocketAddr>, D::Error> {
    text(d, parse_listen)
}

pub(super) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    text(d, parse_count)
}

pub(super) fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    text(d, parse_size)
}

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    text(d, parse_time)
}

pub(super) fn cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CpuPlacement>, D::Error> {
    text(d, parse_cpus)
}

pub(super) fn io<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IoChoice>, D::Error> {
    text(d, parse_io)
}

pub(super) fn clock<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ClockChoice>, D::Error> {
    text(d, parse_clock)
}

pub(super) fn durability<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Durability>, D::Error> {
    text(d, parse_durability)
}

pub(super) fn metrics_addr<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<MetricsAddr>, D::Error> {
    text(d, parse_metrics_addr)
}

pub(super) fn sqs_account<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    text(d, super::choices::parse_sqs_account)
}

pub(super) fn sqs_limits<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<sluice_sqs::Limits>, D::Error> {
    text(d, super::choices::parse_sqs_limits)
}

/// A string, as such (the log filter).
pub(super) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_any(Str("a string")).map(Some)
}

/// A path in a string.
pub(super) fn path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    d.deserialize_any(Str("a path in a string"))
        .map(|text| Some(PathBuf::from(text)))
}

/// Any string; the text says what the setting expected in its error.
struct Str(&'static str);

impl Visitor<'_> for Str {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
}

/// `true` or `false`, as TOML writes them.
pub(super) fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    struct Bool;
    impl Visitor<'_> for Bool {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("true or false")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
            Ok(v)
        }
    }
    d.deserialize_any(Bool).map(Some)
}

#[cfg(test)]
mod tests {
    use super::Position;

    #[test]
    fn positions_count_lines_and_characters_from_one() {
        let text = "a = 1\nbé = \"x\"\n";
        assert_eq!(Position::of(text, 0), Position { line: 1, column: 1 });
        assert_eq!(Position::of(text, 6), Position { line: 2, column: 1 });
        // After the two-byte é: column 4, not 5.
        let second_equals = text.rfind('=').expect("two `=`");
        assert_eq!(
            Position::of(text, second_equals),
            Position { line: 2, column: 4 }
        );
        assert_eq!(
            Position::of(text, text.len()),
            Position { line: 3, column: 1 }
        );
        assert_eq!(Position::of(text, 999), Position { line: 3, column: 1 });
    }
}
