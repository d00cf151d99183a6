//! The registry's log: every queue create, change and delete, recorded and
//! synced before the registry makes it (`Registry::set_journal`), and
//! replayed at start onto the registry the checkpoint holds.
//!
//! One file (`registry.log`, a log file as [`super::file`] describes), one
//! commit a change, each synced at once whatever the durability mode: a
//! queue change is rare, and a message's put in a shard's log can then
//! never reach the disk before its queue's record.
//!
//! A record, inside a commit's payload:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | kind: 1 the queue as created or changed, 2 deleted |
//! | 4 | incarnation, `u32` LE |
//! | 1 + n | name length, name |
//! | 4 + m | (kind 1) attribute block's length, `u32` LE, and the block (the protocol's encoding) |
//! | 16 | (kind 1) created and last changed, Unix ms, `u64` LE each |

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use sluice_protocol::{QueueAttributes, QueueName, QueueTimes, Reader};

use super::file::{Commit, LogFile, OpenError, Recovered};
use crate::engine::Registry;
use crate::engine::registry::{QueueChange, RegistryJournal};

/// A record's kind: the queue as created or changed.
const KIND_PUT: u8 = 1;
/// A record's kind: the queue deleted.
const KIND_DELETED: u8 = 2;

/// The registry's log file, recording each change before it is made.
#[derive(Debug)]
pub struct RegistryLog {
    file: LogFile,
    buf: Vec<u8>,
}

impl RegistryLog {
    /// Opens (or creates) the registry's log at `path`, with what it holds.
    ///
    /// # Errors
    /// As [`LogFile::open`].
    pub fn open(path: &Path) -> Result<(RegistryLog, Recovered), OpenError> {
        let (file, recovered) = LogFile::open(path, 1)?;
        Ok((
            RegistryLog {
                file,
                buf: Vec::new(),
            },
            recovered,
        ))
    }
}

impl RegistryJournal for RegistryLog {
    fn record(&mut self, change: QueueChange<'_>) -> Result<(), String> {
        self.buf.clear();
        encode(change, &mut self.buf)?;
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.file
            .append(wall_ms, &self.buf)
            .and_then(|_| self.file.sync())
            .map_err(|e| format!("registry log: {e}"))
    }
}

/// Appends `change`'s record to `out`.
///
/// # Errors
/// Attributes that do not encode (they always do: a dead-letter queue's
/// name is a queue name).
pub fn encode(change: QueueChange<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    let (kind, name, incarnation) = match change {
        QueueChange::Put {
            name, incarnation, ..
        } => (KIND_PUT, name, incarnation),
        QueueChange::Deleted { name, incarnation } => (KIND_DELETED, name, incarnation),
    };
    out.push(kind);
    out.extend_from_slice(&incarnation.to_le_bytes());
    // Queue names are at most 80 bytes.
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    if let QueueChange::Put {
        attributes, times, ..
    } = change
    {
        let mut block = BytesMut::new();
        attributes
            .encode(&mut block)
            .map_err(|e| format!("queue {name}: {e}"))?;
        // An attribute block is at most a few hundred KiB.
        out.extend_from_slice(&(block.len() as u32).to_le_bytes());
        out.extend_from_slice(&block);
        out.extend_from_slice(&times.created_ms.to_le_bytes());
        out.extend_from_slice(&times.modified_ms.to_le_bytes());
    }
    Ok(())
}

/// A record that cannot be replayed: where (the byte offset in the file)
/// and why.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("registry log: byte {offset}: {why}")]
pub struct ReplayError {
    /// The byte offset of the bad field in the file.
    pub offset: u64,
    /// What is wrong with it.
    pub why: String,
}

/// Makes the changes the records of `commits` hold, in order, on
/// `registry` (the checkpoint's, or a new one), before its journal is set
/// (`Registry::apply_logged`).
///
/// # Errors
/// A record cut short, not a record, or a change that cannot have been
/// made, with its offset.
pub fn replay(commits: &[Commit<'_>], registry: &Registry) -> Result<(), ReplayError> {
    for c in commits {
        let mut r = Cursor {
            bytes: c.records,
            at: 0,
            base: c.records_at,
        };
        while r.at < r.bytes.len() {
            apply(&mut r, registry)?;
        }
    }
    Ok(())
}

/// Reads one record from `r` and makes its change on `registry`.
fn apply(r: &mut Cursor<'_>, registry: &Registry) -> Result<(), ReplayError> {
    let kind_at = r.offset();
    let kind = r.u8("record kind")?;
    let incarnation = r.u32("incarnation")?;
    let name_at = r.offset();
    let len = usize::from(r.u8("queue name length")?);
    let name = std::str::from_utf8(r.take(len, "queue name")?)
        .ok()
        .and_then(|s| QueueName::new(s).ok())
        .ok_or_else(|| r.error(name_at, "not a valid queue name ([A-Za-z0-9_.-]{1,80})"))?;
    let change = match kind {
        KIND_PUT => {
            let at = r.offset();
            let len = r.u32("attributes length")? as usize;
            let block = Bytes::copy_from_slice(r.take(len, "queue attributes")?);
            let mut reader = Reader::new(block);
            let attributes = QueueAttributes::decode(&mut reader)
                .and_then(|a| reader.finish().map(|()| a))
                .map_err(|e| r.error(at + 4, &e.to_string()))?;
            let times = QueueTimes {
                created_ms: r.u64("created_ms")?,
                modified_ms: r.u64("modified_ms")?,
            };
            return registry
                .apply_logged(QueueChange::Put {
                    name: &name,
                    attributes: &attributes,
                    incarnation,
                    times,
                })
                .map_err(|why| r.error(kind_at, &why));
        }
        KIND_DELETED => QueueChange::Deleted {
            name: &name,
            incarnation,
        },
        other => return Err(r.error(kind_at, &format!("unknown record kind {other}"))),
    };
    registry
        .apply_logged(change)
        .map_err(|why| r.error(kind_at, &why))
}

/// A commit's records being read, with the file offset they start at.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    fn error(&self, offset: u64, why: &str) -> ReplayError {
        ReplayError {
            offset,
            why: why.to_owned(),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ReplayError> {
        let bytes: &'a [u8] = self.bytes;
        match bytes.get(self.at..self.at.saturating_add(n)) {
            Some(s) if n <= bytes.len() => {
                self.at += n;
                Ok(s)
            }
            _ => Err(self.error(self.offset(), &format!("{what}: record cut short"))),
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, ReplayError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, ReplayError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self, what: &str) -> Result<u64, ReplayError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::RegistryConfig;
    use crate::engine::registry::RestoredRegistry;
    use sluice_protocol::{AttributeUpdate, Millis, RedrivePolicy, Setting};

    fn q(name: &'static str) -> QueueName {
        QueueName::from_static(name)
    }

    fn fresh(name: &str) -> (Registry, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("sluice-wal-reg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("registry.log");
        let (log, rec) = RegistryLog::open(&path).unwrap();
        assert!(rec.created);
        let r = Registry::new(RegistryConfig::default());
        r.set_journal(Box::new(log));
        (r, path)
    }

    fn replayed(path: &Path) -> Registry {
        let (_, rec) = RegistryLog::open(path).unwrap();
        let r = Registry::new(RegistryConfig::default());
        replay(&rec.commits(), &r).unwrap();
        r
    }

    fn names(s: &RestoredRegistry) -> Vec<(String, u32)> {
        let mut v: Vec<_> = s
            .queues
            .iter()
            .map(|(n, _, i, _)| (n.to_string(), *i))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn creates_changes_and_deletes_replay_to_the_same_registry() {
        let (r, path) = fresh("replay");
        r.create(&q("dlq"), &AttributeUpdate::default(), 5).unwrap();
        let redrive = AttributeUpdate {
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receives: 4,
            }),
            ..Default::default()
        };
        r.create(&q("work"), &redrive, 6).unwrap();
        r.create(&q("gone"), &AttributeUpdate::default(), 7)
            .unwrap();
        let longer = AttributeUpdate {
            visibility_timeout: Some(Millis::new(45_000)),
            ..Default::default()
        };
        r.set(&q("work"), &longer, 8).unwrap();
        r.delete(&q("gone")).unwrap();
        // Deleted and created again: a new incarnation.
        r.create(&q("gone"), &AttributeUpdate::default(), 9)
            .unwrap();
        // Refused changes are not recorded.
        assert!(r.delete(&q("dlq")).is_err());
        assert!(r.set(&q("missing"), &longer, 10).is_err());

        let again = replayed(&path);
        let (state, saved) = (again.saved_state(), r.saved_state());
        assert_eq!(names(&state), names(&saved));
        assert_eq!(state.next_incarnation, saved.next_incarnation);
        for name in ["dlq", "work", "gone"] {
            let (a, b) = (again.get(name).unwrap(), r.get(name).unwrap());
            assert_eq!(a.attributes, b.attributes, "{name}");
            assert_eq!(a.times, b.times, "{name}");
        }
        assert_eq!(
            again.get("work").unwrap().attributes.visibility_timeout,
            Millis::new(45_000)
        );
    }

    #[test]
    fn a_change_the_log_cannot_record_is_not_made() {
        #[derive(Debug)]
        struct Full;
        impl RegistryJournal for Full {
            fn record(&mut self, _: QueueChange<'_>) -> Result<(), String> {
                Err("no space left on device".into())
            }
        }
        let r = Registry::new(RegistryConfig::default());
        r.create(&q("a"), &AttributeUpdate::default(), 1).unwrap();
        let epoch = r.epoch();
        r.set_journal(Box::new(Full));
        let e = r
            .create(&q("b"), &AttributeUpdate::default(), 2)
            .unwrap_err();
        assert_eq!(e.code(), sluice_protocol::ErrorCode::Busy);
        assert!(e.to_string().contains("no space left"), "{e}");
        assert!(r.get("b").is_none());
        let longer = AttributeUpdate {
            visibility_timeout: Some(Millis::new(45_000)),
            ..Default::default()
        };
        assert!(r.set(&q("a"), &longer, 3).is_err());
        assert!(r.delete(&q("a")).is_err());
        let a = r.get("a").unwrap();
        assert_ne!(a.attributes.visibility_timeout, Millis::new(45_000));
        assert_eq!(r.epoch(), epoch);
        // The next create gets the incarnation the refused one would have.
        assert_eq!(r.saved_state().next_incarnation, 2);
    }

    #[test]
    fn every_cut_and_flipped_byte_is_refused_with_an_offset_or_replays_whole() {
        let mut records = Vec::new();
        let attrs = QueueAttributes::default();
        let times = QueueTimes {
            created_ms: 1,
            modified_ms: 2,
        };
        let name = q("orders");
        encode(
            QueueChange::Put {
                name: &name,
                attributes: &attrs,
                incarnation: 3,
                times,
            },
            &mut records,
        )
        .unwrap();
        encode(
            QueueChange::Deleted {
                name: &name,
                incarnation: 3,
            },
            &mut records,
        )
        .unwrap();
        let run = |bytes: &[u8]| {
            let c = Commit {
                seq: 1,
                offset: 16,
                wall_ms: 0,
                records: bytes,
                records_at: 36,
            };
            let r = Registry::new(RegistryConfig::default());
            replay(&[c], &r).map(|()| r.saved_state())
        };
        let whole = run(&records).unwrap();
        assert!(whole.queues.is_empty());
        assert_eq!(whole.next_incarnation, 4);
        // The put alone: the queue, as incarnation 3.
        let put_len = records.len() - (1 + 4 + 1 + name.len());
        let put = run(&records[..put_len]).unwrap();
        assert_eq!(names(&put), [("orders".to_owned(), 3)]);
        for cut in 1..records.len() {
            if let Err(e) = run(&records[..cut]) {
                assert!(e.offset >= 36 && e.offset <= 36 + cut as u64, "{e}");
            }
        }
        for at in 0..records.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = records.clone();
                b[at] ^= flip;
                if let Ok(state) = run(&b) {
                    // What replays is a registry that saves and loads again.
                    Registry::restored(RegistryConfig::default(), state).unwrap();
                }
            }
        }
    }
}
