//! Where a shard keeps its messages' data (body followed by the attributes'
//! encoding): copied once, when a message is accepted, into a chunk of
//! [`CHUNK_BYTES`] shared by many messages.
//!
//! # Why chunks
//!
//! Each message holds a `Bytes` view of its part of a chunk, and a delivery
//! hands out a slice of that view. The chunk is a shared `bytes` buffer from
//! its first message on, so neither storing a message nor delivering it
//! allocates (a chunk costs two allocations per [`CHUNK_BYTES`]: the buffer
//! and its reference count), and no message pays the allocator's rounding.
//! One allocation per message, promoted to a shared buffer (a second
//! allocation) on its first delivery, is what this replaced. A message
//! larger than [`CHUNKED_BYTES_MAX`] gets a buffer of its own, as before.
//!
//! # Memory stays bounded: compaction
//!
//! A chunk's buffer is freed when the last view of it is dropped, so one
//! long-lived message (say, in a dead-letter queue) pins its whole chunk.
//! [`Bodies`] counts the live bytes of each chunk; once the chunks no longer
//! filled (retired) hold more dead bytes than live ones, plus
//! [`COMPACT_SLACK_BYTES`], the shard copies the messages of every retired
//! chunk less than half live into the current chunk
//! ([`Bodies::needs_compaction`], [`Bodies::is_sparse`]), which frees those
//! chunks. After a pass the retired chunks are each at least half live, so
//! the memory of a shard's chunks is at most twice its messages' data plus
//! [`COMPACT_SLACK_BYTES`] and one chunk (views held by replies not yet
//! written aside: they are bounded by the server's unsent-reply limits). A
//! pass walks every slot of the shard, and runs only after at least as many
//! bytes died as stay live, so its cost per byte freed is bounded.

use bytes::{Bytes, BytesMut};

use super::limits::{CHUNK_BYTES, CHUNKED_BYTES_MAX, COMPACT_SLACK_BYTES};

/// The chunk of a message that has a buffer of its own.
pub const OWN_BUFFER: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, Default)]
struct Chunk {
    /// Bytes of the messages stored here that are still held.
    live: u32,
    /// Bytes handed out from this chunk (its capacity once retired).
    used: u32,
}

/// One shard's message data. Plain single-threaded data.
#[derive(Debug)]
pub(crate) struct Bodies {
    /// The part of the current chunk not handed out yet.
    current: BytesMut,
    current_id: u32,
    chunks: Vec<Chunk>,
    free: Vec<u32>,
    /// Bytes handed out from retired chunks that hold live messages.
    retired_used: u64,
    /// Live bytes of retired chunks.
    retired_live: u64,
}

impl Default for Bodies {
    fn default() -> Self {
        Bodies::new()
    }
}

impl Bodies {
    pub fn new() -> Bodies {
        Bodies {
            current: BytesMut::new(),
            current_id: 0,
            chunks: vec![Chunk::default()],
            free: Vec::new(),
            retired_used: 0,
            retired_live: 0,
        }
    }

    /// Copies `head` then `tail` into storage: the data and its chunk.
    /// Empty data takes no chunk (it is [`OWN_BUFFER`], with no buffer).
    pub fn store(&mut self, head: &[u8], tail: &[u8]) -> (Bytes, u32) {
        let n = head.len() + tail.len();
        if n == 0 {
            // In a chunk, its release would find the chunk's live bytes at
            // 0 whenever the chunk's others were gone, and free the chunk a
            // second time.
            return (Bytes::new(), OWN_BUFFER);
        }
        if n > CHUNKED_BYTES_MAX {
            let mut own = BytesMut::with_capacity(n);
            own.extend_from_slice(head);
            own.extend_from_slice(tail);
            return (own.freeze(), OWN_BUFFER);
        }
        if self.current.capacity() - self.current.len() < n {
            self.roll();
        }
        self.current.extend_from_slice(head);
        self.current.extend_from_slice(tail);
        // Bounded by CHUNKED_BYTES_MAX above.
        let c = &mut self.chunks[self.current_id as usize];
        c.live += n as u32;
        c.used += n as u32;
        (self.current.split().freeze(), self.current_id)
    }

    /// Retires the current chunk and starts a new one.
    fn roll(&mut self) {
        let old = self.current_id;
        let c = self.chunks[old as usize];
        if c.live == 0 {
            self.free.push(old);
        } else {
            self.retired_used += u64::from(c.used);
            self.retired_live += u64::from(c.live);
        }
        self.current_id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.chunks.push(Chunk::default());
                // A chunk per 64 KiB of live data: far fewer than 2^32.
                (self.chunks.len() - 1) as u32
            }
        };
        self.chunks[self.current_id as usize] = Chunk::default();
        self.current = BytesMut::with_capacity(CHUNK_BYTES);
    }

    /// A message of `len` bytes stored in `chunk` is gone.
    pub fn release(&mut self, chunk: u32, len: usize) {
        if chunk == OWN_BUFFER || len == 0 {
            return;
        }
        // At most CHUNKED_BYTES_MAX.
        let len = len as u32;
        let c = &mut self.chunks[chunk as usize];
        debug_assert!(c.live >= len);
        c.live -= len;
        if chunk != self.current_id {
            self.retired_live -= u64::from(len);
            if c.live == 0 {
                self.retired_used -= u64::from(c.used);
                self.free.push(chunk);
            }
        }
    }

    /// Whether retired chunks hold more dead bytes than live ones, plus the
    /// slack: time for a pass over the messages.
    pub fn needs_compaction(&self) -> bool {
        self.retired_used - self.retired_live > self.retired_live + COMPACT_SLACK_BYTES
    }

    /// Whether a message stored in `chunk` should move: a retired chunk less
    /// than half live.
    pub fn is_sparse(&self, chunk: u32) -> bool {
        if chunk == OWN_BUFFER || chunk == self.current_id {
            return false;
        }
        let c = self.chunks[chunk as usize];
        u64::from(c.live) * 2 < u64::from(c.used)
    }

    /// Live bytes per chunk in use, for the invariants: (chunk, live).
    pub fn live_bytes(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let free: std::collections::HashSet<u32> = self.free.iter().copied().collect();
        self.chunks
            .iter()
            .enumerate()
            .filter(move |(i, _)| !free.contains(&(*i as u32)))
            .map(|(i, c)| (i as u32, c.live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_data_shares_chunks_and_large_has_its_own() {
        let mut b = Bodies::new();
        let (d1, c1) = b.store(b"hello", b"!");
        let (d2, c2) = b.store(b"world", b"");
        assert_eq!(&d1[..], b"hello!");
        assert_eq!(&d2[..], b"world");
        assert_eq!(c1, c2);
        let big = vec![7u8; CHUNKED_BYTES_MAX + 1];
        let (d3, c3) = b.store(&big, b"");
        assert_eq!(c3, OWN_BUFFER);
        assert_eq!(d3.len(), big.len());
    }

    #[test]
    fn empty_data_takes_no_chunk_and_frees_nothing_twice() {
        // Found by the simulation: an empty message stored in a chunk whose
        // other messages were all gone freed that chunk a second time, so
        // it was handed out twice and the retired counters underflowed.
        let mut b = Bodies::new();
        let (empty, c0) = b.store(b"", b"");
        assert!(empty.is_empty());
        assert_eq!(c0, OWN_BUFFER);
        let big = [2u8; CHUNKED_BYTES_MAX];
        let mut chunks = Vec::new();
        for _ in 0..(2 * CHUNK_BYTES / CHUNKED_BYTES_MAX) {
            chunks.push(b.store(&big, b"").1);
        }
        for &c in &chunks {
            b.release(c, big.len());
        }
        b.release(c0, 0);
        let ids: Vec<u32> = b.free.clone();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(ids.len(), unique.len(), "a chunk freed twice: {ids:?}");
        assert!(!b.needs_compaction());
    }

    #[test]
    fn sparse_retired_chunks_ask_for_compaction() {
        let mut b = Bodies::new();
        let body = [1u8; 1000];
        // Fill well past the slack, keeping one message in 16.
        let mut kept = Vec::new();
        for i in 0..20_000 {
            let (_, c) = b.store(&body, b"");
            if i % 16 == 0 {
                kept.push(c);
            } else {
                b.release(c, body.len());
            }
        }
        assert!(b.needs_compaction());
        assert!(kept.iter().any(|&c| b.is_sparse(c)));
        // Moving the kept ones (what the shard's pass does) clears it.
        for c in kept {
            if b.is_sparse(c) {
                b.store(&body, b"");
                b.release(c, body.len());
            }
        }
        assert!(!b.needs_compaction());
    }
}
