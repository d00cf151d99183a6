//! Sync facade of the blocking connection: loom's types under
//! `cfg(sluice_loom)`, std's otherwise, so that the connection's loom model
//! (`conn_loom.rs`) runs the production code of [`super::conn`] itself.
//!
//! Everything the connection's threads share goes through here: its three
//! mutexes, its atomics and the parking of a thread that waits for its
//! reply. A loom model has no clock: there [`park_timeout`] is a plain
//! park, and the models set deadlines that never come, so every wake-up a
//! model sees is one the code gave.

use std::sync::PoisonError;
use std::time::Duration;

#[cfg(sluice_loom)]
pub(crate) use loom::{
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, Thread},
};

#[cfg(not(sluice_loom))]
pub(crate) use std::{
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, Thread},
};

/// Locks `m`. Every critical section of the connection leaves its data
/// consistent, so a panic in another thread does not make it unusable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Parks the calling thread until it is unparked or `timeout` passes (under
/// loom: until it is unparked).
pub(crate) fn park_timeout(timeout: Duration) {
    #[cfg(not(sluice_loom))]
    thread::park_timeout(timeout);
    #[cfg(sluice_loom)]
    {
        let _ = timeout;
        thread::park();
    }
}
