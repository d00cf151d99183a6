//! TEMPORARY: the atomics the engine takes from `crate::sync` once the
//! `wheel` branch's facade lands. Deleted at the merge.

pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
