//! One shard's log file: a head, then frames ([`super::frame`]), each the
//! records of one commit after the wall-clock time of that commit.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic, `SWLH` |
//! | 4..8 | format version, `u32` LE (1) |
//! | 8..16 | the first frame's sequence number, `u64` LE |
//! | 16.. | frames; each payload is the commit's wall-clock Unix ms (`u64` LE), the highest sequence number synced when it was written (`u64` LE; 0: none), then its records |
//!
//! Opening a file reads it back first ([`LogFile::open`]): its commits in
//! order, a torn end cut off (and reported), corruption refused with its
//! byte offset and the file left as it is. Appends then go after the last
//! good frame; a sync makes them durable (`fdatasync`).
//!
//! The file is read whole into memory to be scanned; a streaming scan is
//! left for when a log can be larger than the memory a start can spare.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::frame::{self, Corrupt, End, FRAME_PAYLOAD_MAX, frame_head};

/// A log file's first four bytes.
pub const FILE_MAGIC: [u8; 4] = *b"SWLH";

/// The version of the format this build writes and reads (2: a commit
/// says how far the log was synced when it was written).
pub const FILE_VERSION: u32 = 2;

/// Bytes of a log file's head.
pub const FILE_HEAD_BYTES: usize = 16;

/// Bytes of a commit's payload before its records: its wall-clock time
/// and how far the log was synced.
const COMMIT_HEAD_BYTES: usize = 16;

/// The largest records one commit holds.
pub const COMMIT_RECORDS_MAX: usize = FRAME_PAYLOAD_MAX - COMMIT_HEAD_BYTES;

/// Why a log file cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// It could not be read, created or cut.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        source: io::Error,
    },
    /// Its head is not a log file's of this version.
    #[error("{path}: not a sluice log file of version {FILE_VERSION}: {why}")]
    Head {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A frame before its end is bad: the file is left as it is.
    #[error("{path}: {source}")]
    Corrupt {
        /// The file.
        path: String,
        /// Where and why.
        source: Corrupt,
    },
    /// A frame too short to hold a commit's time.
    #[error("{path}: the frame at byte {offset} is too short to be a commit")]
    Commit {
        /// The file.
        path: String,
        /// Where it starts.
        offset: u64,
    },
}

/// One commit read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit<'a> {
    /// Its frame's sequence number.
    pub seq: u64,
    /// Where its frame starts in the file.
    pub offset: u64,
    /// When it was committed (wall-clock Unix ms).
    pub wall_ms: u64,
    /// Its records, and where they start in the file.
    pub records: &'a [u8],
    /// The file offset of `records`' first byte.
    pub records_at: u64,
}

/// Where one commit lies in the file's bytes, as the open's scan found it.
#[derive(Clone, Copy, Debug)]
struct Span {
    seq: u64,
    /// Where its frame starts.
    offset: u64,
    wall_ms: u64,
    /// Where its records start and end (file offsets, and indexes of the
    /// bytes read).
    records_at: usize,
    records_end: usize,
}

/// What opening a file found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The file's bytes, which [`Recovered::commits`] reads.
    bytes: Vec<u8>,
    /// Its commits, as the open's scan found them (not scanned again).
    spans: Vec<Span>,
    /// A torn end that was cut off: where it started and why it was bad.
    pub torn: Option<(u64, &'static str)>,
    /// Whether the file was made new.
    pub created: bool,
}

impl Recovered {
    /// The commits, in order.
    #[must_use]
    pub fn commits(&self) -> Vec<Commit<'_>> {
        self.spans
            .iter()
            .map(|s| Commit {
                seq: s.seq,
                offset: s.offset,
                wall_ms: s.wall_ms,
                records: &self.bytes[s.records_at..s.records_end],
                records_at: s.records_at as u64,
            })
            .collect()
    }
}

/// A log file open for appending.
#[derive(Debug)]
pub struct LogFile {
    file: File,
    /// Where the next frame goes.
    end: u64,
    next_seq: u64,
    /// The highest sequence number known synced (0: none).
    synced_seq: u64,
}

impl LogFile {
    /// Opens the log at `path`, made new (starting at sequence number
    /// `first_seq`) when there is none: reads it back, cuts a torn end off,
    /// and readies it for appends after its last good frame.
    ///
    /// # Errors
    /// It cannot be read or made; its head is not a log's; a frame before
    /// its end is bad (corruption: the file is left untouched); a frame
    /// too short to be a commit.
    pub fn open(path: &Path, first_seq: u64) -> Result<(LogFile, Recovered), OpenError> {
        let name = path.display().to_string();
        let io = |source| OpenError::Io {
            path: name.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let mut rec = Recovered::default();
        if bytes.is_empty() {
            let mut head = Vec::with_capacity(FILE_HEAD_BYTES);
            head.extend_from_slice(&FILE_MAGIC);
            head.extend_from_slice(&FILE_VERSION.to_le_bytes());
            head.extend_from_slice(&first_seq.to_le_bytes());
            file.write_all(&head).map_err(io)?;
            file.sync_data().map_err(io)?;
            // The file's name is in its folder's data: synced too, or a
            // crash could keep the commits and lose the file.
            sync_folder(path).map_err(io)?;
            bytes = head;
            rec.created = true;
        }
        let first = read_head(&bytes).map_err(|why| OpenError::Head {
            path: name.clone(),
            why,
        })?;
        let body = &bytes[FILE_HEAD_BYTES..];
        let synced_of = |payload: &[u8]| {
            payload
                .get(8..16)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        };
        let scan = frame::scan_synced(body, FILE_HEAD_BYTES as u64, first, &synced_of).map_err(
            |source| OpenError::Corrupt {
                path: name.clone(),
                source,
            },
        )?;
        let mut spans = Vec::with_capacity(scan.frames.len());
        for f in &scan.frames {
            let Some((head, records)) = f.payload.split_first_chunk::<COMMIT_HEAD_BYTES>() else {
                return Err(OpenError::Commit {
                    path: name,
                    offset: f.offset,
                });
            };
            // An offset within the bytes read, so within usize.
            let records_at = f.offset as usize + frame::FRAME_HEAD_BYTES + COMMIT_HEAD_BYTES;
            spans.push(Span {
                seq: f.seq,
                offset: f.offset,
                wall_ms: u64::from_le_bytes(head[..8].try_into().unwrap_or_default()),
                records_at,
                records_end: records_at + records.len(),
            });
        }
        let next_seq = scan.next_seq(first);
        let end = match scan.end {
            End::Clean => bytes.len() as u64,
            End::Torn { offset, why } => {
                rec.torn = Some((offset, why));
                offset
            }
        };
        if rec.torn.is_some() {
            file.set_len(end).map_err(io)?;
            bytes.truncate(end as usize);
        }
        // What was read back may be a crashed writer's, still in the page
        // cache: durable from here, so that later commits may say so.
        file.sync_data().map_err(io)?;
        file.seek(SeekFrom::Start(end)).map_err(io)?;
        rec.bytes = bytes;
        rec.spans = spans;
        let log = LogFile {
            file,
            end,
            next_seq,
            // What was read back is on disk (the torn end's cut synced).
            synced_seq: next_seq.saturating_sub(1),
        };
        Ok((log, rec))
    }

    /// The sequence number the next commit gets.
    #[must_use]
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The file's length: where the next commit goes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.end
    }

    /// Whether it holds no commit yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.end == FILE_HEAD_BYTES as u64
    }

    /// Appends a commit of `records`, at wall-clock time `wall_ms`, and
    /// returns its sequence number; durable once [`LogFile::sync`] returns.
    ///
    /// # Errors
    /// The write failed (a full disk: `ENOSPC`). The file's end is put back
    /// where it was, so a later append does not leave a gap.
    ///
    /// # Panics
    /// When `records` are more than [`COMMIT_RECORDS_MAX`]: the writer cuts
    /// commits below it.
    pub fn append(&mut self, wall_ms: u64, records: &[u8]) -> io::Result<u64> {
        assert!(
            records.len() <= COMMIT_RECORDS_MAX,
            "a commit past the limit"
        );
        let mut commit = [0u8; COMMIT_HEAD_BYTES];
        commit[..8].copy_from_slice(&wall_ms.to_le_bytes());
        commit[8..].copy_from_slice(&self.synced_seq.to_le_bytes());
        let head = frame_head(self.next_seq, &[&commit, records]);
        // The records go out as they are, beside the two heads: no copy.
        if let Err(e) = write_parts(&mut self.file, &[&head, &commit, records]) {
            // Whatever part went is cut, so the next frame follows the
            // last whole one.
            let _ = self.file.set_len(self.end);
            let _ = self.file.seek(SeekFrom::Start(self.end));
            return Err(e);
        }
        self.end += (head.len() + commit.len() + records.len()) as u64;
        let seq = self.next_seq;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Another handle on the file, for a thread that syncs it
    /// (`fdatasync` through any handle makes the file's data durable).
    ///
    /// # Errors
    /// The handle could not be made.
    pub fn sync_handle(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// Makes every commit appended so far durable (`fdatasync`).
    ///
    /// # Errors
    /// The sync failed: what was appended since the last sync may not be
    /// on disk.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        self.mark_synced(self.next_seq.saturating_sub(1));
        Ok(())
    }

    /// Commits up to `seq` are durable (a sync through another handle, as
    /// a syncer thread's, covered them): later commits say so.
    pub fn mark_synced(&mut self, seq: u64) {
        self.synced_seq = self.synced_seq.max(seq);
    }

    /// The sequence number of the last commit appended (0: none yet).
    #[must_use]
    pub fn last_seq(&self) -> u64 {
        self.next_seq.saturating_sub(1)
    }
}

/// Writes `parts` one after the other at the file's position, with as few
/// calls as the kernel allows (`writev`).
fn write_parts(file: &mut File, parts: &[&[u8]]) -> io::Result<()> {
    let mut skip = 0usize;
    let total: usize = parts.iter().map(|p| p.len()).sum();
    while skip < total {
        let mut left = skip;
        let slices: Vec<IoSlice<'_>> = parts
            .iter()
            .filter_map(|p| {
                if left >= p.len() {
                    left -= p.len();
                    None
                } else {
                    let s = IoSlice::new(&p[left..]);
                    left = 0;
                    Some(s)
                }
            })
            .collect();
        match file.write_vectored(&slices) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => skip += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Syncs the folder that holds `path` (`.` for a bare file name), so that
/// a file just made there survives a crash.
fn sync_folder(path: &Path) -> io::Result<()> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(folder)?.sync_all()
}

/// The first sequence number a file's head names, or why it is not a
/// head.
fn read_head(bytes: &[u8]) -> Result<u64, String> {
    let Some(head) = bytes.first_chunk::<FILE_HEAD_BYTES>() else {
        return Err(format!(
            "{} bytes, shorter than a head of {FILE_HEAD_BYTES}",
            bytes.len()
        ));
    };
    if head[..4] != FILE_MAGIC {
        return Err("no log magic".into());
    }
    let version = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if version != FILE_VERSION {
        return Err(format!("version {version}"));
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&head[8..16]);
    Ok(u64::from_le_bytes(seq))
}

#[cfg(test)]
mod tests;
