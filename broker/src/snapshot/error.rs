//! Why a snapshot was refused: one error per problem, each naming the byte
//! offset where it lies.

use std::io;

use super::format::{VERSION, VERSION_OLDEST};
use crate::engine::section::SectionError;

/// Why a snapshot was refused. Every variant names the byte offset (from
/// the start of the file) where the problem lies.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The file could not be read or written.
    #[error("i/o error at byte {offset}: {source}")]
    Io {
        /// Where.
        offset: u64,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Not a snapshot: the magic is wrong.
    #[error("not a sluice snapshot: bytes 0..8 are {found:02x?}, expected \"SLUICESN\"")]
    BadMagic {
        /// What the file starts with.
        found: Vec<u8>,
    },
    /// A format version this broker does not read.
    #[error(
        "unsupported snapshot format version {found} at byte 8: this broker reads versions {VERSION_OLDEST} to {VERSION}"
    )]
    Version {
        /// The file's version.
        found: u32,
    },
    /// The file ends early.
    #[error("truncated at byte {offset}: {field} needs {needed} more byte(s)")]
    Truncated {
        /// Where the field starts.
        offset: u64,
        /// The field.
        field: &'static str,
        /// How many more bytes it needs.
        needed: u64,
    },
    /// A checksum does not match: the bytes changed after they were written.
    #[error(
        "corrupt {what} (bytes {offset}..{end}): CRC32C stored {stored:08x}, computed {computed:08x}"
    )]
    Checksum {
        /// The header or which section.
        what: String,
        /// Its first byte.
        offset: u64,
        /// The byte after it.
        end: u64,
        /// The stored checksum.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// A field holds a value the format does not allow.
    #[error("invalid {field} at byte {offset}: {reason}")]
    Invalid {
        /// Where.
        offset: u64,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Written by a broker built with other limits.
    #[error("written by a broker built with {name} = {file} (byte {offset}); this one has {here}")]
    Limits {
        /// Where.
        offset: u64,
        /// The limit.
        name: &'static str,
        /// The file's value.
        file: u64,
        /// This build's.
        here: u64,
    },
    /// Written with another shard count.
    #[error(
        "written by a broker with {file} shard(s) (byte 16); this one runs {here}: start it \
         with --shards {file} to load it"
    )]
    Shards {
        /// The file's.
        file: u16,
        /// This broker's.
        here: u16,
    },
    /// More than `--memory-max` would hold.
    #[error(
        "its messages need {needs} bytes of memory (byte {offset}), more than --memory-max \
         ({max} bytes): raise --memory-max to load it"
    )]
    TooLarge {
        /// Where the figure is.
        offset: u64,
        /// What it needs.
        needs: u64,
        /// The budget.
        max: u64,
    },
    /// More queues than `--queues-max`.
    #[error("it holds {queues} queues (byte {offset}), more than --queues-max {max}")]
    TooManyQueues {
        /// Where.
        offset: u64,
        /// The file's.
        queues: u64,
        /// The limit.
        max: u64,
    },
}

impl From<SectionError> for SnapshotError {
    fn from(e: SectionError) -> Self {
        match e {
            SectionError::Invalid {
                offset,
                field,
                reason,
            } => SnapshotError::Invalid {
                offset,
                field,
                reason,
            },
            SectionError::TooLarge { offset, needs, max } => {
                SnapshotError::TooLarge { offset, needs, max }
            }
        }
    }
}

impl SnapshotError {
    pub(crate) fn invalid(offset: u64, field: &'static str, reason: impl Into<String>) -> Self {
        SnapshotError::Invalid {
            offset,
            field,
            reason: reason.into(),
        }
    }
}
