//! A provided buffer ring (`IORING_REGISTER_PBUF_RING`): the receive buffers
//! multishot receives pick from.
//!
//! # Ground rules
//!
//! - Two allocations, made once: the ring of `entries` descriptors
//!   (`struct io_uring_buf`, page aligned as the kernel wants) and the
//!   buffers (`entries * buf_bytes`). Both are freed only by `Drop`, which
//!   the driver lets run only once no receive is in flight (or never: it
//!   leaks them if it cannot make sure).
//! - A buffer is the kernel's from the moment its descriptor is published
//!   (the tail store) until a completion names its id; then it is ours until
//!   [`BufRing::recycle`] publishes it again. [`BufRing::get`] lends a buffer
//!   only in between, so no reference ever covers memory the kernel may be
//!   writing; the buffer area as a whole is only ever held as a raw pointer.
//! - The tail is a `u16` that overlays `resv` of the first descriptor. We
//!   write descriptors field by field through raw pointers (never a whole
//!   `io_uring_buf`, never a reference), so the tail is only ever touched by
//!   its atomic `Release` store, which pairs with the kernel's acquire load.
//! - Recycling writes the descriptor at `tail & mask`. The ring never holds
//!   more than `entries` buffers, and we hold the one being recycled, so at
//!   most `entries - 1` are published: the slot at the tail is one the
//!   kernel has already consumed (outside `[head, tail)`) and does not read.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use super::sys;

/// `struct io_uring_buf` from the kernel's uapi.
#[repr(C)]
struct RawBuf {
    addr: u64,
    len: u32,
    bid: u16,
    /// In the first descriptor: the ring's tail.
    resv: u16,
}

const _: () = assert!(std::mem::size_of::<RawBuf>() == 16);

/// A provided buffer ring and its buffers.
#[derive(Debug)]
pub(crate) struct BufRing {
    ring: NonNull<RawBuf>,
    ring_layout: Layout,
    bufs: NonNull<u8>,
    bufs_layout: Layout,
    entries: u16,
    buf_bytes: u32,
    /// Our copy of the tail (the next slot to publish).
    tail: u16,
}

impl BufRing {
    /// Allocates `entries` (a power of two) buffers of `buf_bytes` each and
    /// publishes all of them.
    pub(crate) fn new(entries: u16, buf_bytes: u32) -> io::Result<Self> {
        if !entries.is_power_of_two() || entries > 1 << 15 || buf_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer ring size must be a power of two up to 32768, buffers non-empty",
            ));
        }
        let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "buffer ring too large");
        let ring_layout =
            Layout::from_size_align(usize::from(entries) * 16, sys::page_size().max(16))
                .map_err(|_| too_big())?;
        let bufs_size = usize::from(entries)
            .checked_mul(buf_bytes as usize)
            .ok_or_else(too_big)?;
        let bufs_layout = Layout::from_size_align(bufs_size, 64).map_err(|_| too_big())?;
        // SAFETY: both layouts have a non-zero size (entries >= 1, buf_bytes
        // >= 1).
        let ring = NonNull::new(unsafe { alloc::alloc_zeroed(ring_layout) }.cast::<RawBuf>());
        let Some(ring) = ring else {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        };
        // SAFETY: as above.
        let Some(bufs) = NonNull::new(unsafe { alloc::alloc(bufs_layout) }) else {
            // SAFETY: allocated just above with this layout.
            unsafe { alloc::dealloc(ring.as_ptr().cast(), ring_layout) };
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        };
        let mut this = Self {
            ring,
            ring_layout,
            bufs,
            bufs_layout,
            entries,
            buf_bytes,
            tail: 0,
        };
        for bid in 0..entries {
            this.write_descriptor(bid);
        }
        this.publish();
        Ok(this)
    }

    /// The ring's address and entry count, for registration.
    pub(crate) fn ring_addr(&self) -> u64 {
        self.ring.as_ptr() as u64
    }

    pub(crate) fn entries(&self) -> u16 {
        self.entries
    }

    /// Lends buffer `bid`'s first `len` bytes; `None` if the kernel named a
    /// buffer or length that cannot be ours.
    ///
    /// # Safety
    ///
    /// A completion must have handed buffer `bid` to us, and it must not have
    /// been recycled since: the kernel does not write it while we hold it.
    pub(crate) unsafe fn get(&self, bid: u16, len: usize) -> Option<&[u8]> {
        if bid >= self.entries || len > self.buf_bytes as usize {
            return None;
        }
        let offset = usize::from(bid) * self.buf_bytes as usize;
        // SAFETY: `offset + len` lies within the buffer area (bid < entries,
        // len <= buf_bytes); the caller guarantees the kernel has handed this
        // buffer to us and does not write it until we recycle it, which
        // needs `&mut self` and so cannot happen while the slice lives.
        Some(unsafe { std::slice::from_raw_parts(self.bufs.as_ptr().add(offset), len) })
    }

    /// Gives buffer `bid` back to the kernel.
    pub(crate) fn recycle(&mut self, bid: u16) {
        if bid >= self.entries {
            return;
        }
        self.write_descriptor(bid);
        self.publish();
    }

    /// Writes the descriptor of buffer `bid` at our tail and advances it.
    fn write_descriptor(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (self.entries - 1));
        let addr = self.bufs.as_ptr() as u64 + u64::from(bid) * u64::from(self.buf_bytes);
        // SAFETY: `slot < entries`, so the descriptor lies in the ring
        // allocation. The kernel does not read this slot (ground rules: at
        // most entries - 1 buffers are published while we write it). We
        // write only addr, len and bid through raw pointers, never `resv`,
        // which in slot 0 is the tail the kernel reads.
        unsafe {
            let desc = self.ring.as_ptr().add(slot);
            (&raw mut (*desc).addr).write(addr);
            (&raw mut (*desc).len).write(self.buf_bytes);
            (&raw mut (*desc).bid).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the descriptors written so far.
    fn publish(&self) {
        // SAFETY: the tail overlays `resv` of descriptor 0, inside the ring
        // allocation and aligned for u16. The kernel reads it concurrently,
        // so it is only accessed atomically; the Release store makes the
        // descriptor writes before it visible to the kernel's acquire load.
        let tail = unsafe { AtomicU16::from_ptr(&raw mut (*self.ring.as_ptr()).resv) };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both were allocated in `new` with these layouts. The driver
        // drops a BufRing only when no receive is in flight (ground rules).
        unsafe {
            alloc::dealloc(self.ring.as_ptr().cast(), self.ring_layout);
            alloc::dealloc(self.bufs.as_ptr(), self.bufs_layout);
        }
    }
}
