//! Snapshots: every queue and message written to a file on a graceful
//! shutdown and loaded back at the next start (`--snapshot PATH`).
//!
//! The file (its layout is in ARCHITECTURE.md, "Snapshot file format") is
//! a header with a section table, a registry section (the receipt key, the
//! id prefix, the queues) and one section per shard. Each shard writes and
//! loads its own section on its own thread, all at once: the save first
//! sizes every section (a walk that only counts), so each shard knows where
//! its section starts and writes it there with positioned writes; the load
//! reads the header and the registry section, then each shard reads its
//! section from its own file handle. Nothing here runs while the broker
//! serves: the hot path is untouched.
//!
//! Writing: a temporary file beside the target (mode 0600: it holds the
//! receipt key), sections, then the header, `fsync`, `rename` over the
//! target, `fsync` of the directory. Reading never trusts a length: every
//! read is bounded by its section, every count checked against the bytes
//! left, every value against what the engine allows, and every section's
//! CRC32C compared; an error names the problem and its byte offset and
//! never panics (a fuzz target, `broker/fuzz`, holds it to that).
//!
//! This module depends on the engine, never the other way: a shard writes
//! and reads its section through the engine's traits
//! (`crate::engine::section`), which the writers and the reader here
//! implement over the file; every file, thread and `O_DIRECT` write is
//! here.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | opening and loading a whole file, fresh shards, moving a file aside |
//! | `save.rs` | saving a whole file: sizing, the shards' writers, the header, the sync |
//! | `registry_section.rs` | the registry section, written and read |
//! | `check.rs` | the check (`--check-snapshot`, the fuzz target) and its report |
//! | `format.rs` | header, section readers and writers (the engine's `Out` and `SectionRead`) |
//! | `error.rs` | `SnapshotError`: what was refused, and at which byte |
//! | `files.rs` | the `.loaded-` files beside the snapshot path |
//! | `direct.rs` | a section's whole blocks written around the page cache (`O_DIRECT`) |
//! | `crc32c.rs` | the CRC-32C checksum (the `crc32c` crate) |
//! | `fuzz_harness.rs` | the harness of the fuzz target in `broker/fuzz` |
//! | `cluster.rs` | snapshots of the test harness `Cluster` (feature `test-util`) |
//! | `engine/shard/snapshot.rs`, `engine/shard/snapshot/load.rs` | a shard's section |
//! | `engine/section.rs` | the traits that section is written into and read from |

mod check;
#[cfg(any(test, feature = "test-util"))]
mod cluster;
pub mod crc32c;
mod direct;
mod error;
pub mod files;
pub mod format;
pub mod fuzz_harness;
mod registry_section;
mod save;

use std::fs::{File, OpenOptions};
use std::io::{self, Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use self::format::{
    Header, MEMORY_BYTES_OFFSET, QUEUES_OFFSET, Section, SectionRead, SectionReader, SnapshotError,
};
use self::registry_section::read_registry;
use crate::engine::mesh::doorbell::{self, Wake};
use crate::engine::registry::RestoredRegistry;
use crate::engine::shard::{LoadClock, ShardLoad};
use crate::engine::{Registry, RegistryConfig, Shard, ShardConfig};
use crate::sync::Arc;

pub use self::check::{CheckReport, check, check_within};
pub use self::files::loaded_path;
pub use self::save::{SaveReport, save, to_bytes};

/// Where a snapshot is read from: a file, or bytes in memory (tests, the
/// fuzz target).
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// A file.
    File(&'a Path),
    /// Bytes.
    Bytes(&'a [u8]),
}

impl Source<'_> {
    fn len(&self) -> Result<u64, SnapshotError> {
        match self {
            Source::File(p) => std::fs::metadata(p)
                .map(|m| m.len())
                .map_err(|source| SnapshotError::Io { offset: 0, source }),
            Source::Bytes(b) => Ok(b.len() as u64),
        }
    }

    /// A reader positioned at `offset`.
    fn reader(&self, offset: u64) -> Result<Box<dyn Read + Send + '_>, SnapshotError> {
        let io = |source| SnapshotError::Io { offset, source };
        match *self {
            Source::File(p) => {
                let mut f = File::open(p).map_err(io)?;
                f.seek(SeekFrom::Start(offset)).map_err(io)?;
                Ok(Box::new(f))
            }
            Source::Bytes(b) => {
                let mut c = Cursor::new(b);
                c.set_position(offset);
                Ok(Box::new(c))
            }
        }
    }
}

/// A snapshot whose header and registry section were read and checked.
#[derive(Debug)]
pub struct Opened {
    /// The header.
    pub header: Header,
    /// The registry section.
    pub registry: RestoredRegistry,
}

/// Reads and checks a snapshot's header and registry section.
///
/// # Errors
/// The first problem, with its byte offset.
pub fn open(source: Source<'_>) -> Result<Opened, SnapshotError> {
    let len = source.len()?;
    let mut r = source.reader(0)?;
    let header = Header::read(&mut r, len)?;
    let section = header.sections[0];
    let mut r = SectionReader::new(source.reader(section.offset)?, section);
    let registry = match read_registry(&mut r, header.version) {
        Ok(reg) => r.finish().map(|()| reg),
        Err(e) => Err(r.verify().err().unwrap_or(e)),
    }?;
    if registry.queues.len() as u64 != header.queues {
        return Err(SnapshotError::invalid(
            QUEUES_OFFSET,
            "queue count",
            format!(
                "the header says {}, the registry section holds {}",
                header.queues,
                registry.queues.len()
            ),
        ));
    }
    Ok(Opened { header, registry })
}

impl Opened {
    /// Whether a broker with `shards` shards, `memory_max` bytes for
    /// messages and `queues_max` queues can load it.
    ///
    /// # Errors
    /// `Shards`, `TooLarge` or `TooManyQueues`.
    pub fn check_fit(
        &self,
        shards: u16,
        memory_max: u64,
        queues_max: usize,
    ) -> Result<(), SnapshotError> {
        if self.header.shards != shards {
            return Err(SnapshotError::Shards {
                file: self.header.shards,
                here: shards,
            });
        }
        if self.header.memory_bytes > memory_max {
            return Err(SnapshotError::TooLarge {
                offset: MEMORY_BYTES_OFFSET,
                needs: self.header.memory_bytes,
                max: memory_max,
            });
        }
        if self.header.queues > queues_max as u64 {
            return Err(SnapshotError::TooManyQueues {
                offset: QUEUES_OFFSET,
                queues: self.header.queues,
                max: queues_max as u64,
            });
        }
        Ok(())
    }

    /// The registry the snapshot describes, under `config` (whose shard
    /// count must be the file's: [`Opened::check_fit`]).
    ///
    /// # Errors
    /// `Invalid` naming the registry section when its queues do not hold
    /// together.
    pub fn registry(&self, config: RegistryConfig) -> Result<Registry, SnapshotError> {
        Registry::restored(config, self.registry.clone()).map_err(|reason| SnapshotError::Invalid {
            offset: self.header.sections[0].offset,
            field: "registry section",
            reason,
        })
    }
}

/// Loads every shard's section into `shards` (fresh shards on the registry
/// from [`Opened::registry`]), one thread per shard, all at once.
///
/// # Errors
/// The first shard's error (by index), with its byte offset.
pub fn load_shards(
    source: Source<'_>,
    opened: &Opened,
    shards: &mut [Shard],
    clock: LoadClock,
) -> Result<ShardLoad, SnapshotError> {
    let sections = &opened.header.sections[1..];
    if sections.len() != shards.len() {
        return Err(SnapshotError::Shards {
            file: opened.header.shards,
            // At most SHARDS_MAX shards.
            here: shards.len() as u16,
        });
    }
    let results: Vec<Result<ShardLoad, SnapshotError>> = std::thread::scope(|s| {
        let handles: Vec<_> = shards
            .iter_mut()
            .zip(sections)
            .map(|(shard, &section)| {
                s.spawn(move || match source {
                    // A file is read ahead on a thread of its own, so the
                    // disk works while the shard rebuilds.
                    Source::File(path) => {
                        let file = File::open(path).map_err(|source| SnapshotError::Io {
                            offset: section.offset,
                            source,
                        })?;
                        let (tx, rx) = std::sync::mpsc::sync_channel(READ_AHEAD_BLOCKS);
                        std::thread::scope(|inner| {
                            inner.spawn(move || read_ahead(&file, section, &tx));
                            let mut r = SectionReader::new(Blocks::new(rx), section);
                            shard.load_snapshot(&mut r, clock)
                        })
                    }
                    Source::Bytes(_) => {
                        let mut r = SectionReader::new(source.reader(section.offset)?, section);
                        shard.load_snapshot(&mut r, clock)
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(SnapshotError::invalid(
                        0,
                        "load",
                        "a loading thread panicked",
                    ))
                })
            })
            .collect()
    });
    let mut total = ShardLoad::default();
    for r in results {
        total.add(&r?);
    }
    if total.messages() != opened.header.messages {
        return Err(SnapshotError::invalid(
            72,
            "message count",
            format!(
                "the header says {}, the sections hold {}",
                opened.header.messages,
                total.messages()
            ),
        ));
    }
    Ok(total)
}

/// Blocks a section's read-ahead thread keeps ready.
const READ_AHEAD_BLOCKS: usize = 2;

/// Reads `section` of `file` in blocks of `READ_BLOCK_BYTES` and sends
/// them in order; an error is sent in place of a block and ends it. Stops
/// early when the loader hangs up (it failed, or is done).
fn read_ahead(
    file: &File,
    section: Section,
    tx: &std::sync::mpsc::SyncSender<io::Result<Vec<u8>>>,
) {
    use std::os::unix::fs::FileExt;
    let block = format::READ_BLOCK_BYTES as u64;
    let mut at = 0;
    // One turn per block of the section.
    while at < section.len {
        let n = (section.len - at).min(block);
        // At most READ_BLOCK_BYTES.
        let mut buf = vec![0u8; n as usize];
        let r = file
            .read_exact_at(&mut buf, section.offset + at)
            .map(|()| buf);
        let failed = r.is_err();
        if tx.send(r).is_err() || failed {
            return;
        }
        at += n;
    }
}

/// The blocks [`read_ahead`] sends, as a `Read`.
struct Blocks {
    rx: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    block: Vec<u8>,
    pos: usize,
}

impl Blocks {
    fn new(rx: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>) -> Blocks {
        Blocks {
            rx,
            block: Vec::new(),
            pos: 0,
        }
    }
}

impl Read for Blocks {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.block.len() {
            match self.rx.recv() {
                Ok(block) => {
                    self.block = block?;
                    self.pos = 0;
                }
                // The read-ahead is done: the end of the section.
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.block.len() - self.pos);
        out[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

pub(super) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

pub(super) fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Checks that a snapshot can be written at `path`: creates and removes
/// the temporary file a save would write (mode 0600).
///
/// # Errors
/// Why not (no such folder, no permission).
pub fn probe_writable(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = temp_path(path);
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    std::fs::remove_file(&tmp)
}

/// Moves a loaded snapshot aside (renamed to [`loaded_path`], the directory
/// synced), so that only a later graceful shutdown leaves a file to load:
/// a crash must not bring back messages deleted since.
///
/// # Errors
/// The rename's.
pub fn move_aside(path: &Path, wall_ms: u64) -> io::Result<PathBuf> {
    let to = loaded_path(path, wall_ms);
    std::fs::rename(path, &to)?;
    sync_dir(path)?;
    Ok(to)
}

/// Fresh shards on `registry`, wired by a mesh of `capacity` whose
/// doorbells call `wakers`.
#[must_use]
pub fn fresh_shards(
    registry: &Arc<Registry>,
    capacity: usize,
    wakers: Vec<Box<dyn Wake>>,
    mut seed: u64,
    now_ns: u64,
    wall_ms: u64,
) -> Vec<Shard> {
    let n = registry.config().shards;
    doorbell::mesh(usize::from(n), capacity, wakers)
        .into_iter()
        .enumerate()
        .map(|(i, links)| {
            let config = ShardConfig {
                // At most SHARDS_MAX shards.
                shard: i as u16,
                seed: crate::engine::random::splitmix64(&mut seed),
            };
            Shard::new(config, links, registry.clone(), now_ns, wall_ms)
        })
        .collect()
}
