//! Sync facade of the blocking connection: loom's types under
//! `cfg(sluice_loom)`, std's otherwise, so that the connection's loom model
//! (`conn_loom.rs`) runs the production code of [`super::conn`] itself.
//!
//! Everything the connection's threads share goes through here: its three
//! mutexes, its atomics and [`Parking`], where a thread that waits for its
//! reply sleeps (a futex on Linux; elsewhere, and under loom as the model
//! of the futex, a mutex and a condition variable). A loom model has no
//! clock: there a park has no time-out, and the models set deadlines that
//! never come, so every wake-up a model sees is one the code gave.

use std::sync::PoisonError;
use std::time::Duration;

#[cfg(sluice_loom)]
pub(crate) use loom::{
    sync::{
        Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
};

#[cfg(not(sluice_loom))]
pub(crate) use std::{
    sync::{
        Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
};

#[cfg(not(sluice_loom))]
pub(crate) use crate::poison::lock;

/// Locks `m`, poisoned or not, as [`crate::poison::lock`] does for std's.
#[cfg(sluice_loom)]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The bit a waiter whose request has id `id` sleeps on: 32 bits for any
/// number of waiters, so two waiters may share one and wake each other (each
/// then looks at its entry and parks again).
pub(crate) fn wait_bit(id: u32) -> u32 {
    1 << (id % 32)
}

/// Where the threads of one connection sleep while they wait for replies:
/// one futex word for all of them on Linux, each thread on its bit of the
/// word ([`wait_bit`]), so that one system call wakes every thread whose
/// reply a read brought, and the reader is switched away from once per read
/// rather than once per reply. Elsewhere, and as loom's model of the futex,
/// [`CondvarParking`] keeps the same rules with a mutex and a condition
/// variable.
///
/// The protocol: a thread registers as parked under the connection's state
/// lock and takes a `ticket()` there; after the lock it sleeps in `park()`
/// with that ticket. A waker changes the registration under the same lock,
/// then calls `wake()`, which moves the word on before it wakes. So a
/// thread that has not gone to sleep by then finds the word moved and
/// returns at once: no wake-up is lost. A return says only "look again":
/// the thread checks its entry under the lock.
#[cfg(all(target_os = "linux", not(sluice_loom)))]
pub(crate) type Parking = FutexParking;
/// See the Linux definition: the same rules without a futex.
#[cfg(any(not(target_os = "linux"), sluice_loom))]
pub(crate) type Parking = CondvarParking;

/// [`Parking`] on a futex word (Linux).
#[cfg(all(target_os = "linux", not(sluice_loom)))]
#[derive(Debug)]
pub(crate) struct FutexParking {
    word: std::sync::atomic::AtomicU32,
}

#[cfg(all(target_os = "linux", not(sluice_loom)))]
impl FutexParking {
    pub(crate) fn new() -> FutexParking {
        FutexParking {
            word: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The word's value now: taken under the state lock, after registering.
    pub(crate) fn ticket(&self) -> u32 {
        self.word.load(Ordering::Acquire)
    }

    /// Sleeps on `bit` unless the word moved past `ticket`; returns when a
    /// wake names the bit, the word had moved, a signal came or `timeout`
    /// passed.
    pub(crate) fn park(&self, ticket: u32, bit: u32, timeout: Duration) {
        use rustix::thread::futex;
        let Some(bit) = std::num::NonZeroU32::new(bit) else {
            return;
        };
        // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time.
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let nanos = now.tv_nsec + i64::from(timeout.subsec_nanos());
        let secs = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX / 2);
        let until = futex::Timespec {
            tv_sec: now
                .tv_sec
                .saturating_add(secs)
                .saturating_add(nanos / 1_000_000_000),
            tv_nsec: nanos % 1_000_000_000,
        };
        // Every outcome means "look again": woken, EAGAIN (the word moved),
        // EINTR, ETIMEDOUT.
        let _ = futex::wait_bitset(&self.word, futex::Flags::PRIVATE, ticket, Some(&until), bit);
    }

    /// Moves the word on and wakes every thread sleeping on a bit of `mask`
    /// (nothing when `mask` is 0).
    pub(crate) fn wake(&self, mask: u32) {
        use rustix::thread::futex;
        let Some(mask) = std::num::NonZeroU32::new(mask) else {
            return;
        };
        self.word.fetch_add(1, Ordering::Release);
        let all = u32::try_from(i32::MAX).unwrap_or(u32::MAX);
        // Fails only on a bad address, which a reference is not.
        let _ = futex::wake_bitset(&self.word, futex::Flags::PRIVATE, all, mask);
    }
}

/// [`Parking`] with a mutex and a condition variable, keeping the futex's
/// rules exactly: the word, and a count of wakes per bit; a sleeper on a
/// bit returns when that bit's count moves. It is loom's model of the futex
/// (built from loom's types there) and the parking where there is no futex
/// (every sleeper is notified by every wake and looks at its bit's count).
#[derive(Debug)]
pub(crate) struct CondvarParking {
    state: Mutex<(u32, [u32; 32])>,
    woken: Condvar,
}

#[cfg_attr(
    all(target_os = "linux", not(sluice_loom), not(test)),
    allow(dead_code, reason = "Linux parks on the futex; tested beside it")
)]
impl CondvarParking {
    pub(crate) fn new() -> CondvarParking {
        CondvarParking {
            state: Mutex::new((0, [0; 32])),
            woken: Condvar::new(),
        }
    }

    /// The word's value now: taken under the state lock, after registering.
    pub(crate) fn ticket(&self) -> u32 {
        lock(&self.state).0
    }

    /// Sleeps on `bit` unless the word moved past `ticket`; returns when a
    /// wake names the bit, the word had moved or `timeout` passed (under
    /// loom there is no time-out: the models' deadlines never come).
    pub(crate) fn park(&self, ticket: u32, bit: u32, timeout: Duration) {
        if bit == 0 {
            return;
        }
        let i = bit.trailing_zeros() as usize;
        let mut st = lock(&self.state);
        if st.0 != ticket {
            return;
        }
        let start = st.1[i];
        #[cfg(not(sluice_loom))]
        {
            let until = std::time::Instant::now() + timeout;
            while st.1[i] == start {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return;
                }
                st = self
                    .woken
                    .wait_timeout(st, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        #[cfg(sluice_loom)]
        {
            let _ = timeout;
            while st.1[i] == start {
                st = self.woken.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// Moves the word on and wakes every thread sleeping on a bit of `mask`
    /// (nothing when `mask` is 0).
    pub(crate) fn wake(&self, mask: u32) {
        if mask == 0 {
            return;
        }
        let mut st = lock(&self.state);
        st.0 = st.0.wrapping_add(1);
        for (i, wakes) in st.1.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                *wakes = wakes.wrapping_add(1);
            }
        }
        self.woken.notify_all();
    }
}

/// The same tests for both kinds of parking (on Linux both are built).
#[cfg(all(test, not(sluice_loom)))]
macro_rules! parking_tests {
    ($name:ident, $parking:ty) => {
        mod $name {
            use std::sync::Arc;
            use std::sync::mpsc::channel;

            use super::super::*;

            /// Long enough that a park which returns only at its time-out
            /// fails the test instead (no figure of time is asserted: a
            /// working park returns at once).
            const PATIENCE: Duration = Duration::from_secs(30);

            /// Parks on a thread with `ticket` and `bit`; true when it came
            /// back within [`PATIENCE`], after `then` ran on this thread.
            fn parked_returns(
                parking: &Arc<$parking>,
                ticket: u32,
                bit: u32,
                then: impl FnOnce(),
            ) -> bool {
                let (tx, rx) = channel();
                let p = Arc::clone(parking);
                let sleeper = std::thread::spawn(move || {
                    p.park(ticket, bit, PATIENCE * 4);
                    let _ = tx.send(());
                });
                then();
                let back = rx.recv_timeout(PATIENCE).is_ok();
                sleeper.join().expect("no panic");
                back
            }

            #[test]
            fn a_ticket_taken_before_a_wake_does_not_sleep() {
                let parking = Arc::new(<$parking>::new());
                let ticket = parking.ticket();
                parking.wake(wait_bit(7));
                // The word moved after the ticket: the park returns without
                // a wake.
                assert!(parked_returns(&parking, ticket, wait_bit(3), || {}));
                assert_ne!(parking.ticket(), ticket);
            }

            #[test]
            fn a_wake_that_names_the_bit_wakes_the_sleeper() {
                let parking = Arc::new(<$parking>::new());
                let ticket = parking.ticket();
                let bit = wait_bit(35);
                assert_eq!(bit, wait_bit(3), "ids 32 apart share a bit");
                // Whether the sleeper is asleep yet or not, it comes back:
                // asleep, by the wake; not yet, because the word moved.
                assert!(parked_returns(&parking, ticket, bit, || {
                    std::thread::yield_now();
                    parking.wake(bit | wait_bit(0));
                }));
            }

            #[test]
            fn no_bits_wakes_nobody_and_moves_nothing() {
                let parking = <$parking>::new();
                let ticket = parking.ticket();
                parking.wake(0);
                assert_eq!(parking.ticket(), ticket);
            }

            #[test]
            fn a_park_ends_at_its_time_out() {
                let parking = Arc::new(<$parking>::new());
                let ticket = parking.ticket();
                let (tx, rx) = channel();
                let p = Arc::clone(&parking);
                let sleeper = std::thread::spawn(move || {
                    p.park(ticket, wait_bit(1), Duration::from_millis(1));
                    let _ = tx.send(());
                });
                // Nobody wakes it: only its time-out brings it back.
                assert!(rx.recv_timeout(PATIENCE).is_ok());
                sleeper.join().expect("no panic");
                assert_eq!(parking.ticket(), ticket);
            }
        }
    };
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    #[cfg(target_os = "linux")]
    parking_tests!(futex, FutexParking);
    parking_tests!(condvar, CondvarParking);
}
