//! The broker's global allocator: mimalloc, entered by its plain functions
//! (`mi_malloc`, `mi_zalloc`, `mi_realloc`) whenever the layout's alignment
//! is one every mimalloc block has anyway, and by its aligned ones only
//! for the rare layout that asks for more.
//!
//! The `mimalloc` crate's `MiMalloc` calls the aligned functions for every
//! allocation. Those take a slower road than the plain ones: some 20
//! instructions more for a small block, and a generic path for any block
//! over 1 KiB (the door's requests and replies, a batch's wire form). The
//! broker allocates a dozen times per message on its SQS door, so that
//! road cost it about 300 instructions a message (BENCHMARKS.md).
//!
//! This is one of the few modules of the broker allowed `unsafe`: a
//! `GlobalAlloc` is an unsafe trait, and each of its functions forwards to
//! mimalloc's C functions with the caller's own guarantees.

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every block from mimalloc's plain functions has, when
/// the block is at least that large (`MI_MAX_ALIGN_SIZE`, that of
/// `max_align_t`: 16 bytes on the 64-bit targets the broker runs on); a
/// smaller block is aligned to the largest power of two it holds. The
/// same rule the standard library's system allocator applies to `malloc`.
const PLAIN_ALIGN: usize = 16;

/// Whether a block of `size` bytes from the plain functions is aligned to
/// `align`.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// mimalloc, entered by its plain functions where the alignment allows
/// (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default)]
pub struct Allocator;

// SAFETY: every function forwards to mimalloc, which returns blocks of at
// least the size asked for, or null when it has no memory, as `GlobalAlloc`
// requires. The plain functions are used only where `plain` holds, that
// is where their blocks are known to be aligned as the layout asks (see
// `PLAIN_ALIGN`); otherwise the aligned functions get the alignment.
// `mi_free` and `mi_realloc*` take any block from either family.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            // SAFETY: a call into mimalloc with a size; no precondition.
            unsafe { mi::mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: as above; the alignment is a power of two (`Layout`).
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            // SAFETY: a call into mimalloc with a size; no precondition.
            unsafe { mi::mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: as above; the alignment is a power of two (`Layout`).
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a block this allocator returned (the
        // `GlobalAlloc` contract), which mimalloc's functions made.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            // SAFETY: `ptr` is a block this allocator returned (the
            // `GlobalAlloc` contract); mimalloc keeps its contents up to
            // the smaller size, and the new block is aligned as `plain`
            // says.
            unsafe { mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast() }
        } else {
            // SAFETY: as above, with the alignment asked of the new block.
            unsafe { mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_as_their_layouts_ask() {
        let a = Allocator;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1, 3, 8, 15, 16, 17, 100, 1024, 1025, 5000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero size; each block is freed below with
                // its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "alloc {size} at {align}");
                    p.write_bytes(0xa5, size);
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "alloc_zeroed {size} at {align}");
                    assert!(core::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    let grown = a.realloc(p, layout, size * 3);
                    assert_eq!(grown as usize % align, 0, "realloc {size} at {align}");
                    assert!(
                        core::slice::from_raw_parts(grown, size)
                            .iter()
                            .all(|&b| b == 0xa5)
                    );
                    a.dealloc(grown, Layout::from_size_align(size * 3, align).unwrap());
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
