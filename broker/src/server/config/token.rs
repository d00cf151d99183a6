//! The auth token file: read once at start, compared in constant time.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use sluice_protocol::limits as wire;

use super::ConfigError;

/// Bytes beyond the token an auth token file may hold (its trailing line
/// ends).
const TOKEN_FILE_SLACK_BYTES: usize = 64;

/// The auth token clients must present in HELLO. Its `Debug` shows the
/// length, never the bytes.
#[derive(Clone)]
pub struct AuthToken {
    bytes: Vec<u8>,
    path: PathBuf,
}

impl AuthToken {
    /// Reads a token file: its content less trailing `\n` and `\r`, 1 ..=
    /// [`wire::AUTH_TOKEN_BYTES_MAX`] bytes.
    pub fn read(path: &Path) -> Result<AuthToken, ConfigError> {
        let read_error = |source| ConfigError::ReadTokenFile {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let cap = wire::AUTH_TOKEN_BYTES_MAX + TOKEN_FILE_SLACK_BYTES;
        let mut bytes = Vec::with_capacity(cap + 1);
        file.take(cap as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        let too_long = || ConfigError::TokenTooLong {
            path: path.to_owned(),
            max: wire::AUTH_TOKEN_BYTES_MAX,
        };
        if bytes.len() > cap {
            return Err(too_long());
        }
        while bytes.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            bytes.pop();
        }
        if bytes.is_empty() {
            return Err(ConfigError::TokenFileEmpty {
                path: path.to_owned(),
            });
        }
        if bytes.len() > wire::AUTH_TOKEN_BYTES_MAX {
            return Err(too_long());
        }
        Ok(AuthToken {
            bytes,
            path: path.to_owned(),
        })
    }

    /// A token given in code (tests), with no file behind it.
    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: &[u8]) -> AuthToken {
        AuthToken {
            bytes: bytes.to_vec(),
            path: PathBuf::from("<given in code>"),
        }
    }

    /// The token.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `presented` is the token, comparing every byte whatever the
    /// first difference (the time taken tells only the lengths).
    pub fn matches(&self, presented: &[u8]) -> bool {
        if presented.len() != self.bytes.len() {
            return false;
        }
        let diff = self
            .bytes
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthToken")
            .field("path", &self.path)
            .field(
                "bytes",
                &format_args!("<{} bytes, redacted>", self.bytes.len()),
            )
            .finish()
    }
}
