//! Saving: every shard's section sized, then written on its own thread
//! into a temporary file (positioned writes, whole blocks around the page
//! cache where the file system allows), then the header, `fsync`,
//! `rename` and an `fsync` of the directory.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::format::{Counter, Header, KIND_REGISTRY, KIND_SHARD, Section, SectionWriter};
use super::registry_section::write_registry;
use super::{direct, sync_dir, temp_path};
use crate::engine::registry::RestoredRegistry;
use crate::engine::{Registry, Shard};

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
        version: super::format::VERSION,
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
        let total = header.sections.last().map_or(0, |s| s.offset + s.len);
        let (file, direct_file) = create_files(&tmp, total, direct)?;
        let (results, fragments) = write_sections(
            &file,
            direct_file.as_ref(),
            &header.sections,
            &state,
            shards,
            now_ns,
        );
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

/// Creates the temporary file `tmp` (mode 0600) at its full length
/// `total`, and opens it a second time for direct writes (`O_DIRECT`) when
/// `direct`: the shards' whole blocks go through that one, the rest
/// through the first.
fn create_files(tmp: &Path, total: u64, direct: bool) -> io::Result<(File, Option<File>)> {
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(tmp)?
    };
    file.set_len(total)?;
    let direct_file = if direct {
        use std::os::unix::fs::OpenOptionsExt;
        Some(
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(tmp)?,
        )
    } else {
        None
    };
    Ok((file, direct_file))
}

/// A section's bytes and CRC, as its writer finished it.
type Finished = io::Result<(u64, u32)>;

/// Writes the registry section, then every shard's section on its own
/// thread (through `direct_file` when there is one), at the offsets of
/// `sections`. Returns each section's (bytes, CRC) in order, and the
/// partial blocks the direct writers left for the page cache.
fn write_sections(
    file: &File,
    direct_file: Option<&File>,
    sections: &[Section],
    state: &RestoredRegistry,
    shards: &mut [Shard],
    now_ns: u64,
) -> (Vec<Finished>, Vec<(u64, Vec<u8>)>) {
    let reg = sections[0];
    let mut w = SectionWriter::new(At {
        file,
        offset: reg.offset,
        written: None,
    });
    write_registry(&mut w, state);
    let mut results = vec![w.finish()];
    let file_ref = file;
    let shard_sections = &sections[1..];
    let written_bytes = AtomicU64::new(0);
    let writers_left = AtomicUsize::new(shards.len());
    let (written_ref, left_ref) = (&written_bytes, &writers_left);
    let direct_ref = direct_file;
    let fragments = std::sync::Mutex::new(Vec::new());
    let fragments_ref = &fragments;
    let written: Vec<Finished> = std::thread::scope(|s| {
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
    (results, fragments.into_inner().unwrap_or_default())
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
