//! Telling the CPU that a cache line will be read soon, so that a batch
//! can start the memory reads of all its entries before it works on the
//! first: a send of 64 messages with dedup keys looks each key up in a
//! table far larger than the cache, and waiting for each miss in turn is
//! most of what such a send costs.
//!
//! This is one of the few modules of the broker allowed `unsafe`: one
//! prefetch instruction. A prefetch is a hint: it changes what the cache
//! holds and nothing the program can see, never faults, whatever the
//! address, and may be dropped by the CPU. Off x86-64 it does nothing.

/// Hints that the cache line holding `*value` will be read soon.
#[inline(always)]
pub fn read_soon<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads no memory the program sees and cannot fault
    // (the address here is even a live reference's); the intrinsic needs
    // SSE, which every x86-64 CPU has: it is in the target's baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            core::ptr::from_ref(value).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Lines of a byte string [`bytes_soon`] hints at most: a small message's
/// body whole, a larger one's start (the rest streams behind it).
const BYTES_LINES_MAX: usize = 4;

/// Hints that the bytes of `b` will be read soon: the cache lines of its
/// first 256 bytes.
#[inline(always)]
pub fn bytes_soon(b: &[u8]) {
    for at in (0..b.len()).step_by(64).take(BYTES_LINES_MAX) {
        read_soon(&b[at]);
    }
    // The last line, when the string ends in one the steps passed over.
    if let Some(last) = b.last() {
        read_soon(last);
    }
}
