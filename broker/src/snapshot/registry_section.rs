//! The registry section: the receipt key, the id prefix, the next
//! incarnation and every queue with its attributes.

use std::io::Read;

use bytes::{Bytes, BytesMut};
use sluice_protocol::{QueueAttributes, QueueName, QueueTimes, Reader};

use super::format::{Out, SectionRead, SectionReader, SnapshotError};
use crate::engine::registry::RestoredRegistry;

pub(super) fn write_registry(out: &mut impl Out, state: &RestoredRegistry) {
    out.u64(state.key.0);
    out.u64(state.key.1);
    out.u64(state.run_prefix);
    out.u32(state.next_incarnation);
    // At most PARTITIONS_MAX (2^24) queues.
    out.u32(state.queues.len() as u32);
    let mut buf = BytesMut::new();
    for (name, attrs, inc, times) in &state.queues {
        out.u32(*inc);
        // Queue names are at most 80 bytes.
        out.u8(name.len() as u8);
        out.put(name.as_bytes());
        buf.clear();
        // A queue's attributes always encode (its dead-letter queue's name
        // is a queue name, 80 bytes at most); were one not to, it would be
        // refused when loaded rather than lost silently now.
        let _ = attrs.encode(&mut buf);
        // An attribute block is a few dozen bytes, its labels at most a few
        // hundred KiB.
        out.u32(buf.len() as u32);
        out.put(&buf);
        out.u64(times.created_ms);
        out.u64(times.modified_ms);
    }
}

/// Reads the registry section of a file of format `version` (1: a queue's
/// attribute block has a `u16` length and no times follow it; 2: a `u32`
/// one, then the queue's created and modified times, Unix ms).
pub(super) fn read_registry<R: Read>(
    r: &mut SectionReader<R>,
    version: u32,
) -> Result<RestoredRegistry, SnapshotError> {
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
        let len = if version == 1 {
            u64::from(r.u16("attributes length")?)
        } else {
            u64::from(r.u32("attributes length")?)
        };
        if len > r.remaining() {
            return Err(SnapshotError::invalid(
                at,
                "attributes length",
                format!("{len} bytes, more than the {} left", r.remaining()),
            ));
        }
        // At most the section's remaining bytes, checked above.
        let len = len as usize;
        let block = Bytes::copy_from_slice(r.bytes(len, "queue attributes")?);
        let mut reader = Reader::new(block);
        let attrs = QueueAttributes::decode(&mut reader)
            .and_then(|a| reader.finish().map(|()| a))
            .map_err(|e| {
                let skip = if version == 1 { 2 } else { 4 };
                SnapshotError::invalid(at + skip, "queue attributes", e.to_string())
            })?;
        // Version 1 kept no times: 0, unknown.
        let times = if version == 1 {
            QueueTimes::default()
        } else {
            QueueTimes {
                created_ms: r.u64("created_ms")?,
                modified_ms: r.u64("modified_ms")?,
            }
        };
        queues.push((name, attrs, inc, times));
    }
    Ok(RestoredRegistry {
        key,
        run_prefix,
        next_incarnation,
        queues,
    })
}
