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
//! | `mod.rs` | saving and loading a whole file, moving it aside, the check |
//! | `format.rs` | header, section readers and writers (the engine's `Out` and `SectionRead`) |
//! | `error.rs` | `SnapshotError`: what was refused, and at which byte |
//! | `files.rs` | the `.loaded-` files beside the snapshot path |
//! | `direct.rs` | a section's whole blocks written around the page cache (`O_DIRECT`) |
//! | `crc32c.rs` | the CRC-32C checksum (the `crc32c` crate) |
//! | `fuzz_harness.rs` | the harness of the fuzz target in `broker/fuzz` |
//! | `cluster.rs` | snapshots of the test harness `Cluster` (feature `test-util`) |
//! | `engine/shard/snapshot.rs` | a shard's section |
//! | `engine/section.rs` | the traits that section is written into and read from |

#[cfg(any(test, feature = "test-util"))]
mod cluster;
pub mod crc32c;
mod direct;
mod error;
pub mod files;
pub mod format;
pub mod fuzz_harness;

use std::fs::{File, OpenOptions};
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use sluice_protocol::{QueueAttributes, QueueName, Reader};

use self::format::{
    Counter, Header, KIND_REGISTRY, KIND_SHARD, MEMORY_BYTES_OFFSET, Out, QUEUES_OFFSET, Section,
    SectionRead, SectionReader, SectionWriter, SnapshotError,
};
use crate::engine::mesh::doorbell::{self, Wake};
use crate::engine::registry::RestoredRegistry;
use crate::engine::shard::{LoadClock, ShardLoad};
use crate::engine::{Registry, RegistryConfig, Shard, ShardConfig};
use crate::sync::Arc;

pub use self::files::loaded_path;

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
    let registry = match read_registry(&mut r) {
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

/// What a save wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveReport {
    /// The file.
    pub path: PathBuf,
    /// Its bytes.
    pub bytes: u64,
    /// Queues.
    pub queues: u64,
    /// Messages.
    pub messages: u64,
    /// Time spent sizing the sections (the counting walk).
    pub sizing: std::time::Duration,
    /// Time spent writing them (serializing, checksumming, `pwrite`).
    pub writing: std::time::Duration,
    /// Time spent in the final `fsync`, `rename` and directory `fsync`.
    pub syncing: std::time::Duration,
}

fn write_registry(out: &mut impl Out, state: &RestoredRegistry) {
    out.u64(state.key.0);
    out.u64(state.key.1);
    out.u64(state.run_prefix);
    out.u32(state.next_incarnation);
    // At most PARTITIONS_MAX (2^24) queues.
    out.u32(state.queues.len() as u32);
    let mut buf = BytesMut::new();
    for (name, attrs, inc) in &state.queues {
        out.u32(*inc);
        // Queue names are at most 80 bytes.
        out.u8(name.len() as u8);
        out.put(name.as_bytes());
        buf.clear();
        // A queue's attributes always encode (its dead-letter queue's name
        // is a queue name, 80 bytes at most); were one not to, it would be
        // refused when loaded rather than lost silently now.
        let _ = attrs.encode(&mut buf);
        // An attribute block is a few dozen bytes.
        out.u16(buf.len() as u16);
        out.put(&buf);
    }
}

fn read_registry<R: Read>(r: &mut SectionReader<R>) -> Result<RestoredRegistry, SnapshotError> {
    let key = (r.u64("receipt key")?, r.u64("receipt key")?);
    let run_prefix = r.u64("id prefix")?;
    let next_incarnation = r.u32("next incarnation")?;
    let at = r.offset();
    let count = r.u32("queue count")?;
    // A queue takes at least 8 bytes.
    if u64::from(count) > r.remaining() / 8 {
        return Err(SnapshotError::invalid(
            at,
            "queue count",
            format!("{count} queues cannot fit in {} bytes", r.remaining()),
        ));
    }
    let mut queues = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let inc = r.u32("incarnation")?;
        let at = r.offset();
        let len = usize::from(r.u8("queue name length")?);
        let raw = r.bytes(len, "queue name")?;
        let name = std::str::from_utf8(raw)
            .ok()
            .and_then(|s| QueueName::new(s).ok())
            .ok_or_else(|| {
                SnapshotError::invalid(
                    at,
                    "queue name",
                    "not a valid queue name ([A-Za-z0-9_.-]{1,80})",
                )
            })?;
        let at = r.offset();
        let len = usize::from(r.u16("attributes length")?);
        let block = Bytes::copy_from_slice(r.bytes(len, "queue attributes")?);
        let mut reader = Reader::new(block);
        let attrs = QueueAttributes::decode(&mut reader)
            .and_then(|a| reader.finish().map(|()| a))
            .map_err(|e| SnapshotError::invalid(at + 2, "queue attributes", e.to_string()))?;
        queues.push((name, attrs, inc));
    }
    Ok(RestoredRegistry {
        key,
        run_prefix,
        next_incarnation,
        queues,
    })
}

/// How the sections are sized before they are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sizing {
    /// From each shard's counts ([`Shard::snapshot_len`]): no walk.
    Counts,
    /// By walking every message, as the writer does (the fallback, and
    /// the check of the counts in tests).
    Walk,
}

/// Every section's bytes: (registry, shards).
fn plan(
    state: &RestoredRegistry,
    shards: &mut [Shard],
    now_ns: u64,
    sizing: Sizing,
) -> (u64, Vec<u64>) {
    let mut c = Counter::default();
    write_registry(&mut c, state);
    let reg = c.0;
    if sizing == Sizing::Counts {
        return (reg, shards.iter().map(|s| s.snapshot_len(now_ns)).collect());
    }
    let sizes = std::thread::scope(|s| {
        let handles: Vec<_> = shards
            .iter_mut()
            .map(|shard| {
                s.spawn(move || {
                    let mut c = Counter::default();
                    shard.write_snapshot(&mut c, now_ns);
                    c.0
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    (reg, sizes)
}

fn header_for(
    registry: &Registry,
    state: &RestoredRegistry,
    shards: &[Shard],
    wall_ms: u64,
    reg_len: u64,
    sizes: &[u64],
) -> Header {
    let count = 1 + sizes.len();
    let mut offset = Header::len_for(count) as u64;
    let mut sections = Vec::with_capacity(count);
    for (i, &len) in std::iter::once(&reg_len).chain(sizes).enumerate() {
        sections.push(Section {
            kind: if i == 0 { KIND_REGISTRY } else { KIND_SHARD },
            // At most SHARDS_MAX shards.
            index: i.saturating_sub(1) as u32,
            offset,
            len,
            crc: 0,
        });
        offset += len;
    }
    Header {
        shards: registry.config().shards,
        saved_wall_ms: wall_ms,
        memory_bytes: shards.iter().map(Shard::memory_in_use).sum(),
        messages: shards.iter().map(Shard::message_count).sum(),
        queues: state.queues.len() as u64,
        sections,
    }
}

/// Writes at a position of a file (positioned writes: each shard's thread
/// writes its own section through its own writer), adding what it wrote to
/// `written` for the flusher.
struct At<'f> {
    file: &'f File,
    offset: u64,
    written: Option<&'f AtomicU64>,
}

impl Write for At<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.write_at(buf, self.offset)?;
        self.offset += n as u64;
        if let Some(w) = self.written {
            w.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Saves `registry` and `shards` (at rest: after the shutdown drain) to
/// `path`: a temporary file beside it (mode 0600), every shard writing its
/// section on its own thread, then the header, `fsync`, `rename`, and an
/// `fsync` of the directory. `now_ns` and `wall_ms` are the save's clocks.
///
/// # Errors
/// An i/o error; the target is then untouched (the temporary file is
/// removed).
pub fn save(
    path: &Path,
    registry: &Registry,
    shards: &mut [Shard],
    now_ns: u64,
    wall_ms: u64,
) -> io::Result<SaveReport> {
    let mut direct = true;
    let mut sizing = Sizing::Counts;
    // At most three tries: direct writes refused, then sizes that disagree.
    for _ in 0..3 {
        match save_sized(path, registry, shards, now_ns, wall_ms, sizing, direct) {
            Ok(Ok(report)) => return Ok(report),
            Ok(Err(mismatch)) if sizing == Sizing::Counts => {
                // The counts disagree with the messages (a bug): size by
                // the walk instead rather than lose the snapshot.
                tracing::warn!(%mismatch, "snapshot sections sized again by walking the messages");
                sizing = Sizing::Walk;
            }
            Ok(Err(mismatch)) => return Err(io::Error::other(mismatch)),
            Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(error = %e, "direct writes refused; saving through the page cache");
                direct = false;
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("the snapshot could not be written"))
}

/// [`save`] with the sections sized as `sizing` says; `Ok(Err(..))` when
/// a section's bytes were not the size planned (nothing was renamed).
fn save_sized(
    path: &Path,
    registry: &Registry,
    shards: &mut [Shard],
    now_ns: u64,
    wall_ms: u64,
    how: Sizing,
    direct: bool,
) -> io::Result<Result<SaveReport, String>> {
    let started = Instant::now();
    let state = registry.saved_state();
    let (reg_len, sizes) = plan(&state, shards, now_ns, how);
    let mut header = header_for(registry, &state, shards, wall_ms, reg_len, &sizes);
    let sizing = started.elapsed();
    let mut writing = std::time::Duration::ZERO;
    let tmp = temp_path(path);
    let result = (|| {
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?
        };
        let total = header.sections.last().map_or(0, |s| s.offset + s.len);
        file.set_len(total)?;
        // The same file opened for direct writes (`O_DIRECT`): the shards'
        // whole blocks go through it, the rest through `file`.
        let direct_file = if direct {
            use std::os::unix::fs::OpenOptionsExt;
            Some(
                OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&tmp)?,
            )
        } else {
            None
        };
        let reg = header.sections[0];
        let mut w = SectionWriter::new(At {
            file: &file,
            offset: reg.offset,
            written: None,
        });
        write_registry(&mut w, &state);
        let mut results = vec![w.finish()];
        let file_ref = &file;
        let shard_sections = &header.sections[1..];
        let written_bytes = AtomicU64::new(0);
        let writers_left = AtomicUsize::new(shards.len());
        let (written_ref, left_ref) = (&written_bytes, &writers_left);
        let direct_ref = direct_file.as_ref();
        let fragments = std::sync::Mutex::new(Vec::new());
        let fragments_ref = &fragments;
        let written: Vec<io::Result<(u64, u32)>> = std::thread::scope(|s| {
            // The flusher (buffered writes only): while the shards write,
            // it asks the kernel to write back what they wrote so far, so
            // that the disk works while the shards serialize instead of
            // all at the end.
            if direct_ref.is_none() {
                s.spawn(move || flush_behind(file_ref, written_ref, left_ref));
            }
            let handles: Vec<_> = shards
                .iter_mut()
                .zip(shard_sections)
                .map(|(shard, section)| {
                    let offset = section.offset;
                    s.spawn(move || {
                        let r = match direct_ref {
                            Some(direct) => {
                                let mut w = direct::DirectWriter::new(direct, offset);
                                shard.write_snapshot(&mut w, now_ns);
                                w.finish().map(|(n, crc, f)| {
                                    if let Ok(mut all) = fragments_ref.lock() {
                                        all.extend(f.0);
                                    }
                                    (n, crc)
                                })
                            }
                            None => {
                                let mut w = SectionWriter::new(At {
                                    file: file_ref,
                                    offset,
                                    written: Some(written_ref),
                                });
                                shard.write_snapshot(&mut w, now_ns);
                                w.finish()
                            }
                        };
                        left_ref.fetch_sub(1, Ordering::Release);
                        r
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a saving thread panicked")))
                })
                .collect()
        });
        results.extend(written);
        for (section, r) in header.sections.iter_mut().zip(results) {
            let (len, crc) = r?;
            if len != section.len {
                return Ok(Err(format!(
                    "{}: sized {} bytes, wrote {len}",
                    section.describe(),
                    section.len
                )));
            }
            section.crc = crc;
        }
        // The partial blocks the direct writers left, then the header,
        // through the page cache.
        drop(direct_file);
        let fragments = fragments.into_inner().unwrap_or_default();
        for (at, bytes) in fragments {
            use std::os::unix::fs::FileExt;
            file.write_all_at(&bytes, at)?;
        }
        let bytes = header.encode();
        At {
            file: &file,
            offset: 0,
            written: None,
        }
        .write_all(&bytes)?;
        writing = started.elapsed() - sizing;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        sync_dir(path)?;
        Ok(Ok(total))
    })();
    match result {
        Ok(Err(mismatch)) => {
            let _ = std::fs::remove_file(&tmp);
            Ok(Err(mismatch))
        }
        Ok(Ok(bytes)) => Ok(Ok(SaveReport {
            path: path.to_owned(),
            bytes,
            sizing,
            writing,
            syncing: started.elapsed() - sizing - writing,
            queues: header.queues,
            messages: header.messages,
        })),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Bytes written between two write-backs the flusher asks for.
const FLUSH_BEHIND_BYTES: u64 = 64 << 20;

/// Asks for the write-back of `file` (`fdatasync`) each time the writers
/// have added [`FLUSH_BEHIND_BYTES`], until none is left writing. Errors
/// are left to the final `fsync`, which reports them.
fn flush_behind(file: &File, written: &AtomicU64, writers_left: &AtomicUsize) {
    let mut synced = 0;
    // Ends when the writers do; each turn sleeps a millisecond or flushes.
    while writers_left.load(Ordering::Acquire) > 0 {
        let now = written.load(Ordering::Relaxed);
        if now - synced >= FLUSH_BEHIND_BYTES {
            let _ = file.sync_data();
            synced = now;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// The snapshot as bytes (tests, fuzz seeds): the same sections, written in
/// turn.
///
/// # Panics
/// When the section sizes from the shards' counts disagree with those from
/// walking their messages (what the save relies on; the tests catch it
/// here).
#[must_use]
pub fn to_bytes(registry: &Registry, shards: &mut [Shard], now_ns: u64, wall_ms: u64) -> Vec<u8> {
    let state = registry.saved_state();
    let (reg_len, sizes) = plan(&state, shards, now_ns, Sizing::Walk);
    // The counts the save sizes by must agree with the walk (the tests
    // write every snapshot through here).
    let (_, counted) = plan(&state, shards, now_ns, Sizing::Counts);
    assert_eq!(
        counted, sizes,
        "section sizes from counts and from the walk"
    );
    let mut header = header_for(registry, &state, shards, wall_ms, reg_len, &sizes);
    let mut body = Vec::new();
    let mut w = SectionWriter::new(&mut body);
    write_registry(&mut w, &state);
    let mut crcs = vec![w.finish().map_or(0, |(_, c)| c)];
    for shard in shards.iter_mut() {
        let mut w = SectionWriter::new(&mut body);
        shard.write_snapshot(&mut w, now_ns);
        crcs.push(w.finish().map_or(0, |(_, c)| c));
    }
    for (s, crc) in header.sections.iter_mut().zip(crcs) {
        s.crc = crc;
    }
    let mut out = header.encode();
    out.extend_from_slice(&body);
    out
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

fn sync_dir(path: &Path) -> io::Result<()> {
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

/// Wakes nobody: shards loading or checked off-line are never asleep.
#[derive(Debug)]
struct NoWake;

impl Wake for NoWake {
    fn wake(&self) {}
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

/// What a snapshot holds, as `--check-snapshot` reports it.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// The header.
    pub header: Header,
    /// What loading it gave.
    pub load: ShardLoad,
    /// Bytes of the file.
    pub bytes: u64,
    /// How long the check took.
    pub took: std::time::Duration,
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.load;
        writeln!(
            f,
            "format version {}, written by a broker with {} shard(s) at Unix ms {}",
            format::VERSION,
            self.header.shards,
            self.header.saved_wall_ms
        )?;
        writeln!(
            f,
            "{} bytes; queues: {}; messages: {}",
            self.bytes, self.header.queues, self.header.messages
        )?;
        writeln!(
            f,
            "as of now: visible {}, delayed {}, in flight {}, leases ended since (visible again at start) {}, delays ended since {}",
            l.visible, l.delayed, l.in_flight, l.leases_ended, l.delays_ended
        )?;
        writeln!(
            f,
            "message data: {} bytes; memory needed: {} bytes; dedup entries still open: {}",
            l.data_bytes, self.header.memory_bytes, l.dedup
        )?;
        write!(f, "checked in {:.3} s: it loads", self.took.as_secs_f64())
    }
}

/// Reads a whole snapshot the way a start would (header, registry, every
/// shard's section, checksums) into scratch shards, and reports what it
/// holds. `--check-snapshot` and the fuzz target; nothing is written.
///
/// # Errors
/// The first problem, with its byte offset.
pub fn check(source: Source<'_>, wall_ms: u64) -> Result<CheckReport, SnapshotError> {
    check_within(source, wall_ms, u64::MAX, usize::MAX)
}

/// [`check`] under a memory budget and a shard count limit (the fuzz
/// target keeps both small).
///
/// # Errors
/// As [`check`]; `Shards` when the file has more than `shards_max` shards.
pub fn check_within(
    source: Source<'_>,
    wall_ms: u64,
    memory_max: u64,
    shards_max: usize,
) -> Result<CheckReport, SnapshotError> {
    let started = Instant::now();
    let opened = open(source)?;
    let shards = opened.header.shards;
    if usize::from(shards) > shards_max {
        return Err(SnapshotError::Shards {
            file: shards,
            here: u16::try_from(shards_max).unwrap_or(u16::MAX),
        });
    }
    let registry = Arc::new(opened.registry(RegistryConfig {
        shards,
        seed: 0,
        memory_bytes_max: memory_max,
        queues_max: crate::engine::limits::PARTITIONS_MAX,
        frame_bytes_max: sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT,
    })?);
    opened.check_fit(shards, memory_max, crate::engine::limits::PARTITIONS_MAX)?;
    // Well past any retention: a message's age is never clamped.
    let now_ns = 1 << 60;
    let wakers = (0..shards)
        .map(|_| Box::new(NoWake) as Box<dyn Wake>)
        .collect();
    let mut engines = fresh_shards(&registry, 64, wakers, 0, now_ns, wall_ms);
    let clock = LoadClock {
        now_ns,
        wall_ms,
        saved_wall_ms: opened.header.saved_wall_ms,
    };
    let load = load_shards(source, &opened, &mut engines, clock)?;
    Ok(CheckReport {
        bytes: source.len()?,
        header: opened.header,
        load,
        took: started.elapsed(),
    })
}
