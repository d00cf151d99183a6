//! SIGTERM and SIGINT (Ctrl-C) to a graceful shutdown, on a dedicated
//! thread through `signal-hook` (no unsafe here, and no work in a signal
//! handler: the crate's handler only writes to a pipe this thread reads).
//!
//! The first signal starts the shutdown; a second one, while the server is
//! still answering what is in flight, exits the process at once (status 130,
//! as shells report an interrupt), for an operator who will not wait.

use crate::sync::thread::{self, JoinHandle};
use std::io;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

use super::ShutdownTrigger;

/// The signal thread; [`close`](Self::close) ends it.
#[derive(Debug)]
pub struct SignalThread {
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

/// Exit status after a second signal.
pub const SECOND_SIGNAL_EXIT_CODE: i32 = 130;

/// SIGTERM and SIGINT caught and held until a server is there to shut down.
///
/// Register before the server starts: a signal that arrives while it starts
/// (after it logged that it serves, say) is then held, not fatal, and starts
/// the shutdown as soon as [`start`](Self::start) runs.
#[derive(Debug)]
pub struct CaughtSignals {
    signals: Signals,
}

impl CaughtSignals {
    /// Installs the handlers: from now on SIGTERM and SIGINT no longer end
    /// the process, they are held for [`start`](Self::start).
    pub fn register() -> io::Result<CaughtSignals> {
        Ok(CaughtSignals {
            signals: Signals::new([SIGTERM, SIGINT])?,
        })
    }

    /// Watches them on a thread named `sluice-signals` (those held since
    /// [`register`](Self::register) first): the first starts `trigger`'s
    /// shutdown, the second exits the process.
    pub fn start(self, trigger: ShutdownTrigger) -> io::Result<SignalThread> {
        SignalThread::spawn(self.signals, trigger)
    }
}

impl SignalThread {
    /// Watches SIGTERM and SIGINT on a thread named `sluice-signals`: the
    /// first starts `trigger`'s shutdown, the second exits the process.
    /// (A binary registers with [`CaughtSignals`] before the server starts.)
    pub fn start(trigger: ShutdownTrigger) -> io::Result<SignalThread> {
        CaughtSignals::register()?.start(trigger)
    }

    fn spawn(mut signals: Signals, trigger: ShutdownTrigger) -> io::Result<SignalThread> {
        let handle = signals.handle();
        let thread = thread::Builder::new()
            .name("sluice-signals".to_owned())
            .spawn(move || {
                let mut seen = 0;
                for signal in signals.forever() {
                    let name = if signal == SIGTERM {
                        "SIGTERM"
                    } else {
                        "SIGINT"
                    };
                    seen += 1;
                    if seen == 1 {
                        tracing::info!(
                            signal = name,
                            "shutting down: answering what is in flight (again to exit at once)"
                        );
                        trigger.shutdown();
                    } else {
                        tracing::warn!(signal = name, "second signal: exiting now");
                        std::process::exit(SECOND_SIGNAL_EXIT_CODE);
                    }
                }
            })?;
        Ok(SignalThread {
            handle,
            thread: Some(thread),
        })
    }

    /// Stops watching and ends the thread.
    pub fn close(mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
