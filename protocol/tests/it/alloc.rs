//! A global allocator that counts, per thread, what the code under test
//! allocates, so tests can show that decoding never allocates more than the
//! bytes it was given warrant.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

thread_local! {
    static BYTES: Cell<usize> = const { Cell::new(0) };
    static CALLS: Cell<usize> = const { Cell::new(0) };
}

fn record(bytes: usize) {
    // `try_with` because the allocator also runs while a thread is torn down.
    let _ = BYTES.try_with(|c| c.set(c.get().saturating_add(bytes)));
    let _ = CALLS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; counting touches only thread-local cells and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size.saturating_sub(layout.size()));
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// What `f` allocated on this thread: its result, bytes and calls.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    let (b0, c0) = (BYTES.with(Cell::get), CALLS.with(Cell::get));
    let r = f();
    let (b1, c1) = (BYTES.with(Cell::get), CALLS.with(Cell::get));
    (r, b1 - b0, c1 - c0)
}

#[test]
fn the_counter_sees_allocations() {
    let (v, bytes, calls) = measure(|| vec![0u8; 100]);
    assert_eq!(v.len(), 100);
    assert!(bytes >= 100 && calls >= 1, "{bytes} bytes, {calls} calls");
}
