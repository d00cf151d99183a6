//! A message as the engine stores it: a 40-byte record per held message,
//! and side tables for what only some messages need.
//!
//! # The record
//!
//! What every held message needs, and nothing else (`StoredMessage`, 40
//! bytes; 44 with its slab slot's generation):
//!
//! | field | bytes | what |
//! |---|---:|---|
//! | `chunk`, `offset` | 4 + 2 | where its data lies (`bodies.rs`): body, then the attributes' wire form |
//! | `len` | 2 | the data's length (a solo chunk's data is as long as the chunk) |
//! | `bits` | 2 | the attributes' length (13 bits) and three flags: in the ready FIFO, in the age FIFO, solo chunk |
//! | `seq` | 6 | per-shard sequence number (48 bits): with the run prefix and the shard, the message id |
//! | `sent_at_ms` | 6 | wall-clock send time, Unix ms (48 bits: until the year 10889) |
//! | `sent_ms` | 6 | monotonic send time, ms rounded up (48 bits), from which retention counts |
//! | `retention_ms` | 4 | retention from `sent_ms`: the drop deadline as a 32-bit offset |
//! | `partition` | 3 | local index of its queue's partition |
//! | `state` | 1 | visible, delayed or in flight |
//! | `ext` | 4 | index of its `Ext` entry, or none |
//!
//! A message never delivered, never delayed and never moved (the common
//! held message) has nothing else: no timer (its retention is its
//! partition's age FIFO), and no ready-FIFO entry (the partition serves it
//! from its age FIFO, see `partition.rs`).
//!
//! # Side tables
//!
//! - `Ext` (32 bytes), from a message's first delivery, delay or move
//!   until it leaves: its counters (receive count, delivery number,
//!   first-received time as an offset from sent-at), the queue it was
//!   dead-lettered from, its one wheel timer, and its lease.
//! - `Lease` (24 bytes), while it is in flight or delayed: the end of the
//!   lease or delay, when the lease began (for the metrics), the check of
//!   the receipt it was delivered under (a receipt of the current delivery is
//!   known good without a second MAC; once the lease entry is gone, a late
//!   receipt takes the full check), and the lease group whose timer ends it
//!   (the messages of one receive share a deadline, and one timer:
//!   `shard/lease_groups.rs`).
//!
//! The data goes on the wire as it is stored: a delivery hands out a `Bytes`
//! slice of the chunk, and the attributes are their wire form, so a receive
//! copies nothing and converts nothing.

use sluice_protocol::MessageAttributes;
use sluice_protocol::limits::MESSAGE_ATTRIBUTES_BYTES_MAX;

use super::slab::Paged;
use super::wheel::TimerId;

/// Where a message stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageState {
    /// Receivable now.
    Visible,
    /// Waiting out a delivery delay or a retry backoff.
    Delayed,
    /// Leased.
    InFlight,
}

/// A `u64` below 2^48 in six bytes (times in ms, sequence numbers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct U48([u16; 3]);

impl U48 {
    /// The largest value it holds.
    pub const MAX: u64 = (1 << 48) - 1;

    /// `v`, saturated at [`U48::MAX`].
    pub fn new(v: u64) -> U48 {
        let v = v.min(Self::MAX);
        // Each cast keeps 16 bits of v by design.
        U48([v as u16, (v >> 16) as u16, (v >> 32) as u16])
    }

    pub fn get(self) -> u64 {
        u64::from(self.0[0]) | u64::from(self.0[1]) << 16 | u64::from(self.0[2]) << 32
    }
}

/// A partition index below 2^24 in three bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct U24([u8; 3]);

impl U24 {
    /// The largest value it holds.
    pub const MAX: u32 = (1 << 24) - 1;

    pub fn new(v: u32) -> U24 {
        debug_assert!(v <= Self::MAX);
        let [a, b, c, _] = v.to_le_bytes();
        U24([a, b, c])
    }

    pub fn get(self) -> u32 {
        u32::from_le_bytes([self.0[0], self.0[1], self.0[2], 0])
    }
}

/// "No entry" in an index field.
pub(crate) const NONE: u32 = u32::MAX;

const ATTRS_LEN_BITS: u32 = 13;
const ATTRS_LEN_MASK: u16 = (1 << ATTRS_LEN_BITS) - 1;
const IN_READY: u16 = 1 << 13;
const IN_AGE_FIFO: u16 = 1 << 14;
const SOLO: u16 = 1 << 15;

/// The attributes' wire form fits the record's 13 bits: content plus a
/// 2-byte length per key and value, for at most 16 pairs.
const _: () = assert!(MESSAGE_ATTRIBUTES_BYTES_MAX + 16 * 4 <= ATTRS_LEN_MASK as usize);

/// One stored message; see the [module docs](self). Only its owner shard
/// touches it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StoredMessage {
    pub chunk: u32,
    /// Index of its [`Ext`] entry, or [`NONE`].
    pub ext: u32,
    pub retention_ms: u32,
    pub offset: u16,
    /// Data bytes (body and attributes); 0 for a solo chunk's data.
    pub len: u16,
    bits: u16,
    pub seq: U48,
    pub sent_at_ms: U48,
    /// Monotonic ms of the original send, rounded up.
    pub sent_ms: U48,
    partition: U24,
    pub state: MessageState,
}

/// What the record holds when a message is stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewMessage {
    pub chunk: u32,
    pub offset: u32,
    pub data_len: usize,
    pub solo: bool,
    pub attrs_len: usize,
    pub seq: u64,
    pub sent_at_ms: u64,
    pub sent_ms: u64,
    pub retention_ms: u32,
    pub partition: u32,
    pub state: MessageState,
    pub in_age_fifo: bool,
}

impl StoredMessage {
    pub fn new(n: NewMessage) -> StoredMessage {
        debug_assert!(n.attrs_len <= usize::from(ATTRS_LEN_MASK));
        let mut bits = n.attrs_len as u16 & ATTRS_LEN_MASK;
        if n.in_age_fifo {
            bits |= IN_AGE_FIFO;
        }
        if n.solo {
            bits |= SOLO;
        }
        StoredMessage {
            chunk: n.chunk,
            ext: NONE,
            retention_ms: n.retention_ms,
            // Offsets lie within a chunk (64 KiB, limits.rs); chunked data
            // is at most CHUNKED_BYTES_MAX long, solo data is not recorded.
            offset: n.offset as u16,
            len: if n.solo { 0 } else { n.data_len as u16 },
            bits,
            seq: U48::new(n.seq),
            sent_at_ms: U48::new(n.sent_at_ms),
            sent_ms: U48::new(n.sent_ms),
            partition: U24::new(n.partition),
            state: n.state,
        }
    }

    pub fn partition(&self) -> u32 {
        self.partition.get()
    }

    pub fn set_partition(&mut self, p: u32) {
        self.partition = U24::new(p);
    }

    /// Bytes of the attributes' wire form, after the body.
    pub fn attrs_len(&self) -> usize {
        usize::from(self.bits & ATTRS_LEN_MASK)
    }

    pub fn in_ready(&self) -> bool {
        self.bits & IN_READY != 0
    }

    pub fn set_in_ready(&mut self, on: bool) {
        self.set_bit(IN_READY, on);
    }

    /// Whether it sits in its partition's age FIFO (otherwise in the
    /// `moved` index, with a retention timer of its own).
    pub fn in_age_fifo(&self) -> bool {
        self.bits & IN_AGE_FIFO != 0
    }

    pub fn set_in_age_fifo(&mut self, on: bool) {
        self.set_bit(IN_AGE_FIFO, on);
    }

    /// Whether its data has a chunk of its own.
    pub fn solo(&self) -> bool {
        self.bits & SOLO != 0
    }

    fn set_bit(&mut self, bit: u16, on: bool) {
        if on {
            self.bits |= bit;
        } else {
            self.bits &= !bit;
        }
    }

    /// Moves the data: new chunk and offset (compaction; never solo).
    pub fn relocate(&mut self, chunk: u32, offset: u32) {
        self.chunk = chunk;
        // Within a chunk (64 KiB).
        self.offset = offset as u16;
    }

    /// Monotonic ns of the original send (rounded up to a ms).
    pub fn sent_ns(&self) -> u64 {
        self.sent_ms.get() * NS_PER_MS
    }

    /// When retention drops it (monotonic ns).
    pub fn retain_until_ns(&self) -> u64 {
        (self.sent_ms.get() + u64::from(self.retention_ms)) * NS_PER_MS
    }

    /// Whether it has never been delivered, delayed or moved: visible, with
    /// nothing in the side tables.
    pub fn is_plain(&self) -> bool {
        self.ext == NONE
    }
}

const NS_PER_MS: u64 = 1_000_000;

/// The monotonic ms a send at `now_ns` is recorded at: rounded up, so
/// deadlines computed from it (whole ms later) round up to the same tick
/// as from `now_ns` itself and nothing is dropped early.
pub(crate) fn sent_ms(now_ns: u64) -> u64 {
    now_ns.div_ceil(NS_PER_MS)
}

/// The attribute pairs in `wire` (the validated wire form: `u16` length,
/// key, `u16` length, value, per pair).
pub(crate) fn attribute_count(wire: &[u8]) -> u8 {
    let mut count = 0u8;
    let mut rest = wire;
    for _ in 0..2 * usize::from(u8::MAX) {
        let Some((len, tail)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = usize::from(u16::from_le_bytes(*len));
        rest = tail.get(len..).unwrap_or_default();
        count = count.wrapping_add(1);
    }
    count / 2
}

/// The attributes from their wire form, sharing `raw`. They were checked
/// when the message was accepted (a send, or a snapshot's load), so they
/// are not checked again at each delivery.
pub(crate) fn attributes(raw: bytes::Bytes) -> MessageAttributes {
    if raw.is_empty() {
        return MessageAttributes::new();
    }
    MessageAttributes::from_stored(attribute_count(&raw), raw)
}

/// What a message delivered, delayed or moved carries beyond its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ext {
    pub delivery: u64,
    pub receive_count: u32,
    /// Ms from sent-at to the first delivery (the wire's field); meaningful
    /// once `delivery > 0`.
    pub first_received_delta_ms: u32,
    /// Incarnation of the queue it was dead-lettered from; 0 when none.
    pub source: u32,
    /// Index of its [`Lease`] entry, or [`NONE`].
    pub lease: u32,
    /// Its one timer (lease or delay end, or its own retention), or
    /// [`TimerId::NONE`].
    pub timer: TimerId,
}

impl Default for Ext {
    fn default() -> Self {
        Ext {
            delivery: 0,
            receive_count: 0,
            first_received_delta_ms: 0,
            source: 0,
            lease: NONE,
            timer: TimerId::NONE,
        }
    }
}

/// What a message in flight or delayed carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    /// End of the lease (in flight) or of the delay (delayed).
    pub due_ns: u64,
    /// When the current lease began (monotonic ns), for the lease metrics.
    pub leased_ns: u64,
    /// The check of the receipt of the current delivery (0 when delayed
    /// before any): a receipt that matches the delivery field for field and
    /// carries this check is the one signed.
    pub check: u32,
    /// The lease group whose one timer ends this lease (the receive batch
    /// it was leased in), or [`NONE`] when the message's own timer does.
    pub group: u32,
}

impl Default for Lease {
    fn default() -> Self {
        Lease {
            due_ns: 0,
            leased_ns: 0,
            check: 0,
            group: NONE,
        }
    }
}

/// A side table: entries reused through a free list, each owned by one
/// message that knows its index. Paged like the slab, so it grows without
/// moving.
#[derive(Debug)]
pub(crate) struct Table<T> {
    entries: Paged<T>,
    free: Vec<u32>,
}

impl<T: Copy + Default> Default for Table<T> {
    fn default() -> Self {
        Table {
            entries: Paged::default(),
            free: Vec::new(),
        }
    }
}

impl<T: Copy + Default> Table<T> {
    /// Stores `value`; its index. `None` when the table holds 2^32 - 1.
    pub fn insert(&mut self, value: T) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            *self.get_mut(i) = value;
            return Some(i);
        }
        let i = u32::try_from(self.entries.len())
            .ok()
            .filter(|&i| i != NONE)?;
        self.entries.push(value);
        Some(i)
    }

    /// Entry `i`, which its owner holds.
    pub fn get(&self, i: u32) -> &T {
        self.entries
            .get(i as usize)
            .expect("an index its owner holds")
    }

    /// Entry `i`, mutably.
    pub fn get_mut(&mut self, i: u32) -> &mut T {
        self.entries
            .get_mut(i as usize)
            .expect("an index its owner holds")
    }

    /// Frees entry `i` (its owner forgets the index; the next insert
    /// overwrites it).
    pub fn remove(&mut self, i: u32) {
        self.free.push(i);
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;
    use crate::engine::slab::Slab;

    #[test]
    fn the_record_is_40_bytes_and_its_slot_44() {
        assert_eq!(size_of::<StoredMessage>(), 40);
        assert_eq!(size_of::<Option<StoredMessage>>(), 40, "state is the niche");
        assert_eq!(Slab::<StoredMessage>::slot_bytes(), 44);
        assert_eq!(size_of::<Ext>(), 32);
        assert_eq!(size_of::<Lease>(), 24);
    }

    #[test]
    fn narrow_integers_round_trip() {
        for v in [0, 1, 0xffff, 0x1_0000, 1_700_000_000_000, U48::MAX] {
            assert_eq!(U48::new(v).get(), v);
        }
        assert_eq!(U48::new(u64::MAX).get(), U48::MAX);
        for v in [0, 1, 0xff_ffff, 70_000] {
            assert_eq!(U24::new(v).get(), v);
        }
    }

    #[test]
    fn flags_and_lengths_share_their_bits() {
        let mut m = StoredMessage::new(NewMessage {
            chunk: 3,
            offset: 65_000,
            data_len: 8192,
            solo: false,
            attrs_len: 4160,
            seq: 1 << 40,
            sent_at_ms: 1_700_000_000_123,
            sent_ms: 5,
            retention_ms: 60_000,
            partition: 77_777,
            state: MessageState::Visible,
            in_age_fifo: true,
        });
        assert!(m.in_age_fifo() && !m.in_ready() && !m.solo());
        m.set_in_ready(true);
        m.set_in_age_fifo(false);
        assert!(!m.in_age_fifo() && m.in_ready());
        assert_eq!((m.attrs_len(), m.len, m.offset), (4160, 8192, 65_000));
        assert_eq!(m.partition(), 77_777);
        assert_eq!(m.seq.get(), 1 << 40);
        assert_eq!(m.retain_until_ns(), 60_005 * NS_PER_MS);
        assert_eq!(sent_ms(1), 1);
        assert_eq!(sent_ms(NS_PER_MS), 1);
        assert_eq!(sent_ms(NS_PER_MS + 1), 2);
    }

    #[test]
    fn stored_data_splits_back() {
        let a = MessageAttributes::from_pairs([("trace", "abc"), ("", "empty key")]).unwrap();
        let mut bodies = crate::engine::bodies::Bodies::new();
        let wire = a.wire_bytes();
        let (chunk, offset) = bodies.store(b"hello", wire);
        let data = bodies.data(chunk, offset, 5 + wire.len());
        assert_eq!(&data[..5], b"hello");
        assert_eq!(attribute_count(wire), 2);
        assert_eq!(attributes(data.slice(5..)), a);
        assert_eq!(attributes(data.slice(5..5)), MessageAttributes::new());
    }
}
