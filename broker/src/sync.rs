//! Sync facade: loom's types under `cfg(sluice_loom)`, std's otherwise, so the
//! same code is the production type and the loom model.
//!
//! Everything that crosses a thread boundary in the broker takes its
//! atomics, `Arc`s, mutexes, channels, threads, cells and cache padding from
//! here, never from `std` directly: the engine's shard rings, doorbells,
//! queue registry, per-queue counters and memory budget, and the server's
//! shared counters, snapshots, shutdown flag and threads. Built normally this
//! module is a thin re-export of `std`; built with `RUSTFLAGS="--cfg
//! sluice_loom"` it re-exports loom's instrumented twins, and loom then
//! explores every interleaving of a model built from the very same
//! production code. (The io layer and the server are left out of the loom
//! build, so under loom only the engine's share is modelled. Two things stay
//! outside by nature: the io_uring buffer ring's tail, an atomic shared with
//! the kernel rather than another thread (`io/buf_ring.rs`), and the
//! process-wide clock origin, a `OnceLock` set once (`server/clock.rs`).)
//!
//! [`Mutex`] is one type in both builds with one API: `lock()` returns the
//! guard, poisoning ignored (the broker's critical sections leave their data
//! consistent at every panic point; see the callers).
//!
//! `model(f)` (test builds only) runs a test body: under loom as `loom::model(f)` (all
//! interleavings), otherwise once, as an ordinary unit test. Constants that
//! size concurrent structures in tests shrink under loom (see
//! [`crate::engine::mesh::ring::LINK_CAPACITY_DEFAULT`]) so that a model reaches
//! wrap-around within a handful of operations.

#[cfg(sluice_loom)]
#[allow(
    unused_imports,
    reason = "the facade offers the whole set; not every build uses all"
)]
pub(crate) use loom::{
    cell::UnsafeCell,
    hint::spin_loop,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
        mpsc,
    },
    thread,
};

#[cfg(not(sluice_loom))]
#[allow(
    unused_imports,
    reason = "the facade offers the whole set; not every build uses all"
)]
pub(crate) use std::{
    hint::spin_loop,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
        mpsc,
    },
    thread,
};

/// Pads and aligns a value to a cache line, so atomics that different cores
/// write do not share one (layout only: the same type in both builds).
pub(crate) use crossbeam_utils::CachePadded;

#[cfg(not(sluice_loom))]
pub(crate) use self::std_cell::UnsafeCell;

#[cfg(sluice_loom)]
use loom::sync as mutex_impl;
#[cfg(not(sluice_loom))]
use std::sync as mutex_impl;

/// A mutual-exclusion lock: loom's under `cfg(sluice_loom)` (so a model
/// explores every order in which threads take it), std's otherwise.
///
/// Unlike `std::sync::Mutex`, [`Mutex::lock`] returns the guard directly: a
/// panic while the lock is held leaves the protected data as consistent as
/// the holder left it, and the broker's users of this type keep it
/// consistent at every point where they can panic, so poisoning carries no
/// information here.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(mutex_impl::Mutex<T>);

/// The guard of a [`Mutex`]: the lock is held until it is dropped.
pub(crate) type MutexGuard<'a, T> = mutex_impl::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub(crate) fn new(value: T) -> Self {
        Self(mutex_impl::Mutex::new(value))
    }

    /// Blocks until the lock is free, then takes it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the lock if it is free now; `None` if another thread holds it.
    /// (The server's; the loom build leaves the server out.)
    #[cfg(not(sluice_loom))]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(mutex_impl::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(mutex_impl::TryLockError::WouldBlock) => None,
        }
    }
}

/// Runs `f` as a loom model (every interleaving, under `cfg(sluice_loom)`) or
/// once as a plain test body.
#[cfg(all(test, sluice_loom))]
pub(crate) fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    loom::model(f);
}

/// Runs `f` as a loom model (every interleaving, under `cfg(sluice_loom)`) or
/// once as a plain test body.
#[cfg(all(test, not(sluice_loom)))]
pub(crate) fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    f();
}

#[cfg(not(sluice_loom))]
mod std_cell {
    /// `std::cell::UnsafeCell` behind loom's closure API, so code written
    /// against the facade compiles unchanged in both builds.
    ///
    /// The closures receive raw pointers; dereferencing them is the caller's
    /// `unsafe`, justified where it happens. Under loom the same calls are
    /// checked: loom panics on a read that races a write.
    #[derive(Debug, Default)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        /// Wraps `value`.
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        /// Calls `f` with a shared raw pointer to the value.
        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Calls `f` with a mutable raw pointer to the value.
        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}
