//! Ctrl-C and SIGTERM for the commands that run until told to stop (`tail`,
//! `ping`): the first signal asks them to finish what they are doing and
//! end with status 0; a second one ends the process at once with status 130.
//!
//! The signal handlers only set a flag (signal-hook), which the commands
//! read between requests, or while they wait for one that runs on another
//! thread ([`Interrupt::wait_for`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};

use crate::Failure;
use crate::report::EXIT_INTERRUPTED;

/// How often [`Interrupt::sleep`] looks at the flag.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The flag the handlers set.
#[derive(Debug)]
pub struct Interrupt {
    requested: Arc<AtomicBool>,
}

impl Interrupt {
    /// Installs the handlers for SIGINT and SIGTERM.
    pub fn install() -> Result<Interrupt, Failure> {
        let requested = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            // The shutdown is registered first, so it only fires when an
            // earlier signal has already set the flag: the second signal.
            signal_hook::flag::register_conditional_shutdown(
                signal,
                i32::from(EXIT_INTERRUPTED),
                Arc::clone(&requested),
            )
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&requested)))
            .map_err(|e| {
                Failure::Client(sluice_client::Error::Io(Arc::new(std::io::Error::new(
                    e.kind(),
                    format!("installing the Ctrl-C handler: {e}"),
                ))))
            })?;
        }
        Ok(Interrupt { requested })
    }

    /// Whether a signal asked the command to stop.
    pub fn requested(&self) -> bool {
        // The flag carries no data with it: Relaxed is enough.
        self.requested.load(Ordering::Relaxed)
    }

    /// Waits for what `pending` will carry, unless a signal arrives first:
    /// then `None`, and whatever the sender was doing is abandoned.
    ///
    /// # Panics
    /// When the sender is dropped without sending: its thread panicked.
    pub fn wait_for<T>(&self, pending: &Receiver<T>) -> Option<T> {
        loop {
            match pending.recv_timeout(POLL_INTERVAL) {
                Ok(value) => return Some(value),
                Err(RecvTimeoutError::Timeout) if self.requested() => return None,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the helper thread ended without replying")
                }
            }
        }
    }

    /// Sleeps for `pause`, or less when a signal arrives; returns whether
    /// one did.
    pub fn sleep(&self, pause: Duration) -> bool {
        let until = Instant::now() + pause;
        loop {
            if self.requested() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            std::thread::sleep((until - now).min(POLL_INTERVAL));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn a_signal_ends_waits_and_sleeps() {
        let interrupt = Interrupt {
            requested: Arc::new(AtomicBool::new(false)),
        };
        let (tx, rx) = mpsc::channel();
        tx.send(7).unwrap();
        assert_eq!(interrupt.wait_for(&rx), Some(7));
        assert!(!interrupt.sleep(Duration::ZERO));

        // What the handler does; the sender is still there, silent.
        interrupt.requested.store(true, Ordering::SeqCst);
        assert!(interrupt.requested());
        assert_eq!(interrupt.wait_for(&rx), None);
        assert!(interrupt.sleep(Duration::from_secs(3_600)));
        drop(tx);
    }
}
