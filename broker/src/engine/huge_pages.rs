//! Asking the kernel to back a large, randomly accessed array with huge
//! pages (2 MiB on x86-64), so that touching an element at random does not
//! also miss the TLB: with ten million timers the wheel's entries span
//! hundreds of megabytes, and on 4 KiB pages nearly every random cancel
//! walks the page tables (nested ones, in a virtual machine) before it
//! reaches the entry.
//!
//! This is one of the few modules of the broker allowed `unsafe`: one
//! `madvise(MADV_HUGEPAGE)` call on memory the caller owns. The advice
//! changes how the kernel backs those pages and nothing else: no memory is
//! read or written, no mapping is added or removed, and it is only advice
//! (with transparent huge pages off, or on a kernel without them, the call
//! fails and nothing changes; the failure is ignored). Only the 2 MiB-aligned
//! part of the range is advised, so no page outside it is affected.

/// Bytes of a huge page on the platforms this targets.
pub const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Advises huge pages for the whole 2 MiB-aligned part of `v`'s buffer
/// (its capacity, not only its length). Does nothing for a buffer smaller
/// than one huge page, and off Linux.
pub fn advise<T>(v: &Vec<T>) {
    let start = v.as_ptr() as usize;
    let bytes = v.capacity().saturating_mul(core::mem::size_of::<T>());
    let lo = start.next_multiple_of(HUGE_PAGE_BYTES);
    let hi = start.saturating_add(bytes) & !(HUGE_PAGE_BYTES - 1);
    if hi <= lo {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: [lo, hi) lies within `v`'s allocation, which the caller
        // owns, and is page-aligned (2 MiB-aligned). MADV_HUGEPAGE neither
        // reads nor writes that memory nor changes its contents or mapping:
        // it only tells the kernel how it may back the pages, so every
        // reference into `v` stays valid. An error (no transparent huge
        // pages) leaves everything as it was, and is ignored.
        let _ = unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_keeps_contents_and_small_buffers_are_left_alone() {
        let small = vec![1u8; 4096];
        advise(&small);
        assert!(small.iter().all(|&b| b == 1));
        let mut big: Vec<u64> = Vec::with_capacity(3 * HUGE_PAGE_BYTES / 8);
        big.extend(0..1000);
        advise(&big);
        big.extend(1000..(3 * HUGE_PAGE_BYTES / 8) as u64);
        assert!(big.iter().enumerate().all(|(i, &v)| v == i as u64));
    }
}
