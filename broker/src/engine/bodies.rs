//! Where a shard keeps its messages' data (body followed by the attributes'
//! encoding): copied once, when a message is accepted, into a chunk of
//! [`CHUNK_BYTES`] shared by many messages. A message names its data by
//! chunk and offset (and its own length): six bytes, not a `Bytes` view
//! (32) per message.
//!
//! # Chunks and their pieces
//!
//! The chunk being written is a `BytesMut`. A delivery needs a `Bytes` of
//! the message's data, and a chunk is still written while its first
//! messages are delivered, so what has been written is frozen into a
//! *piece* (`BytesMut::split().freeze()`: a view of the same buffer, no
//! copy, no allocation) when a delivery first needs it, and when the chunk
//! is retired. A chunk keeps its pieces, ordered by offset; a delivery
//! slices the piece its message lies in. A chunk delivered from once per
//! batch has a few pieces; one only stored to has one.
//!
//! Neither storing a message nor delivering it allocates: a chunk's buffer
//! is allocated when the chunk starts, and when a chunk's messages are all
//! gone and no view of it is left elsewhere (replies written and dropped),
//! its buffer is reclaimed (`BytesMut::try_reclaim` on the part it kept)
//! into a small pool the next chunk starts from. In steady state, where
//! messages are deleted about as fast as they come, no chunk allocates.
//!
//! A message larger than [`CHUNKED_BYTES_MAX`] gets a chunk of its own (a
//! *solo* chunk: one piece, freed with the message). Empty data takes no
//! chunk at all ([`EMPTY`]).
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

use super::limits::{CHUNK_BYTES, CHUNK_SPARE_MAX, CHUNKED_BYTES_MAX, COMPACT_SLACK_BYTES};

/// The chunk of empty data (which takes none).
pub const EMPTY: u32 = u32::MAX;

#[derive(Debug, Default)]
struct Chunk {
    /// Bytes of the messages stored here that are still held.
    live: u32,
    /// Bytes handed out from this chunk (its capacity once retired).
    used: u32,
    /// Whether it holds one large message and takes no part in compaction.
    solo: bool,
    /// Whether it is in use (not on the free list).
    in_use: bool,
    /// What has been frozen, as `(offset, piece)` by offset.
    pieces: Vec<(u32, Bytes)>,
    /// The rest of the buffer: for the current chunk, written bytes not yet
    /// frozen and the room after them; for a retired one, the empty end of
    /// the buffer, kept so the buffer can be reclaimed.
    rest: BytesMut,
}

impl Chunk {
    /// Where the frozen part ends.
    fn frozen_end(&self) -> u32 {
        // Pieces of one chunk are at most CHUNK_BYTES long in all, or one
        // message (solo): within u32 (see limits.rs).
        self.pieces
            .last()
            .map_or(0, |(start, piece)| start + piece.len() as u32)
    }

    /// Freezes what was written and not frozen yet into a piece.
    fn freeze(&mut self) {
        if !self.rest.is_empty() {
            let start = self.frozen_end();
            let piece = self.rest.split().freeze();
            self.pieces.push((start, piece));
        }
    }
}

/// One shard's message data. Plain single-threaded data.
#[derive(Debug)]
pub(crate) struct Bodies {
    /// The chunk being written.
    current: u32,
    chunks: Vec<Chunk>,
    free: Vec<u32>,
    /// Reclaimed buffers of [`CHUNK_BYTES`], for the next chunks.
    spare: Vec<BytesMut>,
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
            current: 0,
            chunks: vec![Chunk {
                in_use: true,
                ..Chunk::default()
            }],
            free: Vec::new(),
            spare: Vec::with_capacity(CHUNK_SPARE_MAX),
            retired_used: 0,
            retired_live: 0,
        }
    }

    /// Copies `head` then `tail` into storage: returns the chunk and the
    /// offset in it. Empty data takes no chunk ([`EMPTY`]).
    pub fn store(&mut self, head: &[u8], tail: &[u8]) -> (u32, u32) {
        let n = head.len() + tail.len();
        if n == 0 {
            // In a chunk, its release would find the chunk's live bytes at
            // 0 whenever the chunk's others were gone, and free the chunk a
            // second time.
            return (EMPTY, 0);
        }
        if n > CHUNKED_BYTES_MAX {
            let mut own = BytesMut::with_capacity(n);
            own.extend_from_slice(head);
            own.extend_from_slice(tail);
            let id = self.new_chunk();
            let c = &mut self.chunks[id as usize];
            c.solo = true;
            // A message is at most a frame (64 MiB at most: limits.rs).
            c.live = n as u32;
            c.used = n as u32;
            c.pieces.push((0, own.freeze()));
            return (id, 0);
        }
        let c = &self.chunks[self.current as usize];
        if c.rest.capacity() - c.rest.len() < n {
            self.roll();
        }
        let c = &mut self.chunks[self.current as usize];
        let offset = c.used;
        c.rest.extend_from_slice(head);
        c.rest.extend_from_slice(tail);
        // Bounded by CHUNKED_BYTES_MAX above.
        c.live += n as u32;
        c.used += n as u32;
        (self.current, offset)
    }

    /// The data of `len` bytes at `offset` in `chunk`, sharing the chunk's
    /// buffer.
    pub fn data(&mut self, chunk: u32, offset: u32, len: usize) -> Bytes {
        if chunk == EMPTY || len == 0 {
            return Bytes::new();
        }
        let c = &mut self.chunks[chunk as usize];
        let start = offset as usize;
        let end = start + len;
        if end > c.frozen_end() as usize {
            c.freeze();
        }
        // Most deliveries come from the piece frozen last.
        let (s, piece) = match c.pieces.last() {
            Some((s, piece)) if *s <= offset => (*s, piece),
            _ => {
                let i = c.pieces.partition_point(|(s, _)| *s <= offset) - 1;
                let (s, piece) = &c.pieces[i];
                (*s, piece)
            }
        };
        let s = s as usize;
        piece.slice(start - s..end - s)
    }

    /// The data of `len` bytes at `offset` in `chunk`, borrowed: nothing is
    /// frozen or shared (the snapshot writer copies it out at once). Empty
    /// when the range is not stored (it always is for a held message).
    pub fn borrow(&self, chunk: u32, offset: u32, len: usize) -> &[u8] {
        if chunk == EMPTY || len == 0 {
            return &[];
        }
        let Some(c) = self.chunks.get(chunk as usize) else {
            return &[];
        };
        let start = offset as usize;
        let end = start + len;
        let frozen_end = c.frozen_end() as usize;
        if start >= frozen_end {
            return c
                .rest
                .get(start - frozen_end..end - frozen_end)
                .unwrap_or_default();
        }
        // A message lies within one piece: pieces are cut between messages.
        let i = c.pieces.partition_point(|(s, _)| *s <= offset);
        let Some((s, piece)) = i.checked_sub(1).and_then(|i| c.pieces.get(i)) else {
            return &[];
        };
        let s = *s as usize;
        piece.get(start - s..end - s).unwrap_or_default()
    }

    /// The length of the data of a solo chunk.
    pub fn solo_len(&self, chunk: u32) -> usize {
        self.chunks[chunk as usize].used as usize
    }

    /// A chunk from the free list, or a new one.
    fn new_chunk(&mut self) -> u32 {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.chunks.push(Chunk::default());
                // A chunk per 64 KiB of live data (or per large message):
                // far fewer than 2^32.
                (self.chunks.len() - 1) as u32
            }
        };
        let c = &mut self.chunks[id as usize];
        c.in_use = true;
        c.solo = false;
        c.live = 0;
        c.used = 0;
        id
    }

    /// Retires the current chunk and starts a new one.
    fn roll(&mut self) {
        let old = self.current;
        let c = &mut self.chunks[old as usize];
        c.freeze();
        if c.live == 0 {
            self.free_chunk(old);
        } else {
            self.retired_used += u64::from(c.used);
            self.retired_live += u64::from(c.live);
        }
        self.current = self.new_chunk();
        let buffer = self
            .spare
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(CHUNK_BYTES));
        self.chunks[self.current as usize].rest = buffer;
    }

    /// Drops a chunk's pieces and keeps its buffer for a next chunk when
    /// nothing else views it any more.
    fn free_chunk(&mut self, id: u32) {
        let c = &mut self.chunks[id as usize];
        c.pieces.clear();
        let mut rest = core::mem::take(&mut c.rest);
        let solo = c.solo;
        c.in_use = false;
        self.free.push(id);
        if !solo && self.spare.len() < CHUNK_SPARE_MAX && rest.try_reclaim(CHUNK_BYTES) {
            rest.clear();
            self.spare.push(rest);
        }
    }

    /// A message of `len` bytes stored in `chunk` is gone.
    pub fn release(&mut self, chunk: u32, len: usize) {
        if chunk == EMPTY || len == 0 {
            return;
        }
        // At most a frame.
        let len = len as u32;
        let c = &mut self.chunks[chunk as usize];
        debug_assert!(c.live >= len);
        c.live -= len;
        if c.solo {
            if c.live == 0 {
                self.free_chunk(chunk);
            }
            return;
        }
        if chunk != self.current {
            self.retired_live -= u64::from(len);
            if c.live == 0 {
                self.retired_used -= u64::from(c.used);
                self.free_chunk(chunk);
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
        if chunk == EMPTY || chunk == self.current {
            return false;
        }
        let c = &self.chunks[chunk as usize];
        !c.solo && u64::from(c.live) * 2 < u64::from(c.used)
    }

    /// Bytes of every held message's data: the live bytes of the chunks in
    /// use.
    pub fn live_total(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.in_use)
            .map(|c| u64::from(c.live))
            .sum()
    }

    /// Live bytes per chunk in use, for the invariants (tests): (chunk, live).
    #[cfg(any(test, feature = "test-util"))]
    pub fn live_bytes(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.in_use)
            .map(|(i, c)| (i as u32, c.live))
    }

    /// Chunks on the free list.
    #[cfg(test)]
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(b: &mut Bodies, data: &[u8]) -> (u32, u32, Bytes) {
        let (c, o) = b.store(data, b"");
        (c, o, b.data(c, o, data.len()))
    }

    #[test]
    fn small_data_shares_chunks_and_large_has_its_own() {
        let mut b = Bodies::new();
        let (c1, o1) = b.store(b"hello", b"!");
        let (c2, o2) = b.store(b"world", b"");
        assert_eq!(&b.data(c1, o1, 6)[..], b"hello!");
        assert_eq!(&b.data(c2, o2, 5)[..], b"world");
        assert_eq!(c1, c2);
        assert_eq!(o2, 6);
        let big = vec![7u8; CHUNKED_BYTES_MAX + 1];
        let (c3, o3) = b.store(&big, b"");
        assert_ne!(c3, c1);
        assert_eq!(b.solo_len(c3), big.len());
        assert_eq!(&b.data(c3, o3, big.len())[..], &big[..]);
        b.release(c3, big.len());
        assert_eq!(b.free_count(), 1, "a solo chunk goes with its message");
    }

    #[test]
    fn an_empty_slice_needs_no_piece() {
        // Found by the model test: an empty body before attributes, first
        // in its chunk, with nothing frozen yet.
        let mut b = Bodies::new();
        let (c, o) = b.store(b"", b"attrs");
        assert!(b.data(c, o, 0).is_empty());
        assert_eq!(&b.data(c, o, 5)[..], b"attrs");
    }

    #[test]
    fn data_stored_after_a_delivery_is_frozen_in_a_later_piece() {
        let mut b = Bodies::new();
        let (c, o, first) = stored(&mut b, b"one");
        let (c2, o2) = b.store(b"two", b"");
        let (c3, o3) = b.store(b"three", b"");
        assert_eq!((c, c2, c3), (c, c, c));
        assert_eq!(&first[..], b"one");
        // Both later messages come from one new piece, either order.
        assert_eq!(&b.data(c3, o3, 5)[..], b"three");
        assert_eq!(&b.data(c2, o2, 3)[..], b"two");
        assert_eq!(&b.data(c, o, 3)[..], b"one");
        assert_eq!(b.chunks[c as usize].pieces.len(), 2);
    }

    #[test]
    fn a_chunk_whose_messages_are_gone_lends_its_buffer_to_the_next() {
        let mut b = Bodies::new();
        let body = [3u8; 1000];
        let mut held = Vec::new();
        let mut buffers = std::collections::HashSet::new();
        // Many chunks' worth, each message delivered then released, the
        // view dropped: every chunk after the first reuses a buffer.
        for _ in 0..(10 * CHUNK_BYTES / body.len()) {
            let (c, o, view) = stored(&mut b, &body);
            buffers.insert(view.as_ptr() as usize - o as usize);
            drop(view);
            held.push((c, o));
            if held.len() > 3 {
                let (c, _) = held.remove(0);
                b.release(c, body.len());
            }
        }
        assert!(
            buffers.len() <= 2,
            "{} buffers for 10 chunks",
            buffers.len()
        );
        // A view still held keeps its buffer from being reused.
        let (c, o, view) = stored(&mut b, &body);
        b.release(c, body.len());
        for (c, _) in held.drain(..) {
            b.release(c, body.len());
        }
        for _ in 0..(2 * CHUNK_BYTES / body.len()) {
            let (c2, o2, _) = stored(&mut b, &body);
            b.release(c2, body.len());
            let _ = o2;
        }
        assert_eq!(&view[..], &body[..], "a held view is never overwritten");
        let _ = o;
    }

    #[test]
    fn empty_data_takes_no_chunk_and_frees_nothing_twice() {
        // Found by the simulation: an empty message stored in a chunk whose
        // other messages were all gone freed that chunk a second time, so
        // it was handed out twice and the retired counters underflowed.
        let mut b = Bodies::new();
        let (c0, _) = b.store(b"", b"");
        assert_eq!(c0, EMPTY);
        assert!(b.data(c0, 0, 0).is_empty());
        let big = [2u8; CHUNKED_BYTES_MAX];
        let mut chunks = Vec::new();
        for _ in 0..(2 * CHUNK_BYTES / CHUNKED_BYTES_MAX) {
            chunks.push(b.store(&big, b"").0);
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
            let (c, o) = b.store(&body, b"");
            if i % 16 == 0 {
                kept.push((c, o));
            } else {
                b.release(c, body.len());
            }
        }
        assert!(b.needs_compaction());
        assert!(kept.iter().any(|&(c, _)| b.is_sparse(c)));
        // Moving the kept ones (what the shard's pass does) clears it.
        for (c, o) in kept {
            if b.is_sparse(c) {
                let data = b.data(c, o, body.len());
                b.store(&data, b"");
                b.release(c, body.len());
            }
        }
        assert!(!b.needs_compaction());
    }
}
