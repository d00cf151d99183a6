//! Locks that ignore poisoning. Every critical section in this crate leaves
//! its data consistent (it stores whole values, or leaves rustls's state as
//! rustls left it), so a panic in another thread while it held a lock does
//! not make the data unusable, and a client keeps working after a caller's
//! panic.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, poisoned or not.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `l` to read, poisoned or not.
#[cfg(feature = "blocking")]
pub(crate) fn read<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `l` to write, poisoned or not.
#[cfg(feature = "blocking")]
pub(crate) fn write<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_still_taken() {
        let m = Arc::new(Mutex::new(1));
        let m2 = Arc::clone(&m);
        let panicked = std::thread::spawn(move || {
            let mut g = m2.lock().unwrap();
            *g = 2;
            panic!("poison the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 2);
    }
}
