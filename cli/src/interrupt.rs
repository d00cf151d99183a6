//! Ctrl-C and SIGTERM for the commands that run until told to stop (`tail`,
//! `ping`): the first signal asks them to finish what they are doing and
//! end with status 0; a second one ends the process at once with status 130.
//!
//! The signal handlers only set a flag (signal-hook), which the commands
//! read between requests; a request in progress is not cut short.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
