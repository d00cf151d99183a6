//! Sync facade: loom's types under `cfg(sluice_loom)`, std's otherwise, so
//! that the door's shared state is the production type and the loom model
//! at once (as the broker's `sync` module does for the engine).
//!
//! What the door shares between the shards that call it: the request-id
//! counter (an atomic) and the message-move tasks (a mutex: any shard
//! starts, lists and cancels them and takes their steps).

#[cfg(sluice_loom)]
pub(crate) use loom::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};

#[cfg(not(sluice_loom))]
pub(crate) use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};

/// Runs `f` as a loom model (every interleaving) under `cfg(sluice_loom)`,
/// once as a plain test body otherwise.
#[cfg(test)]
pub(crate) fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    #[cfg(sluice_loom)]
    loom::model(f);
    #[cfg(not(sluice_loom))]
    f();
}
