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

/// Hints that the bytes of `b` will be read soon: the lines of its first,
/// middle and last bytes, which are all of the lines of a string of up to
/// 129 bytes wherever it starts (a small message's body), and the start of
/// a longer one (the rest streams behind it).
#[inline(always)]
pub fn bytes_soon(b: &[u8]) {
    if let (Some(first), Some(last)) = (b.first(), b.last()) {
        read_soon(first);
        read_soon(&b[b.len() / 2]);
        read_soon(last);
    }
}
