//! `sluice-server`: the broker's binary. Flags, environment and config file
//! become a validated [`Config`]; the server runs until SIGTERM or Ctrl-C,
//! then answers what is in flight and exits 0. A configuration error, a
//! port another process listens on, or a snapshot that cannot be loaded,
//! exits 2 with a message naming the setting or the problem (and its byte
//! offset); another failure to start exits 1.
//!
//! Everything is held in memory. With `--snapshot PATH` a graceful
//! shutdown writes every queue and message to PATH and the next start
//! loads it (then moves it aside); without it, a restart loses everything.
//! `--check-snapshot PATH` reports what a snapshot holds and exits 0 when
//! it would load, 2 when not.

// The loom build (`--cfg sluice_loom`) leaves the server out of the library;
// the binary then builds as a stub that refuses to run, so that
// `cargo test -p sluice-broker` compiles every target under loom.
#![cfg_attr(sluice_loom, allow(unused))]

#[cfg(sluice_loom)]
fn main() {
    eprintln!("sluice-server: this build has --cfg sluice_loom (for loom models only)");
    std::process::exit(2);
}

#[cfg(not(sluice_loom))]
use std::io::IsTerminal;
#[cfg(not(sluice_loom))]
use std::process::ExitCode;

#[cfg(not(sluice_loom))]
use clap::Parser;
#[cfg(not(sluice_loom))]
use sluice_broker::server::config::{Config, RawArgs};
#[cfg(not(sluice_loom))]
use sluice_broker::server::signals::CaughtSignals;
#[cfg(not(sluice_loom))]
use sluice_broker::server::{Server, StartError};

#[global_allocator]
static GLOBAL: sluice_broker::allocator::Allocator = sluice_broker::allocator::Allocator;

#[cfg(not(sluice_loom))]
fn main() -> ExitCode {
    // Parse errors, --help and --version exit here (2 for an error).
    let raw = RawArgs::parse();
    let check = raw.check_snapshot.clone();
    let config = match Config::from_args(raw) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice-server: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &check {
        return check_snapshot(path, &config);
    }
    // The filter was checked when the configuration was validated.
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(&config.log_filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A log line that cannot be written (the reader of a piped stderr went
    // away) is dropped: tracing-subscriber would otherwise report it with
    // `eprintln!`, which panics on that same broken stderr and takes down
    // whichever thread logged, the signal thread included.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .init();
    tracing::info!(
        "sluice-server {} starting with this configuration:\n{config}",
        env!("CARGO_PKG_VERSION")
    );
    // Caught before the server starts: a SIGTERM while it starts is held
    // and shuts it down once it runs, instead of killing the process.
    let caught = match CaughtSignals::register() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot watch signals: {e}");
            eprintln!("sluice-server: cannot watch signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let server = match Server::start(config) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start: {e}");
            eprintln!("sluice-server: cannot start: {e}");
            // A snapshot that cannot be loaded is a problem with an input,
            // as a bad setting is.
            return match e {
                StartError::Snapshot { .. }
                | StartError::SnapshotUnwritable { .. }
                | StartError::SnapshotLocked { .. }
                | StartError::Log { .. }
                | StartError::LogLocked { .. }
                | StartError::PortTaken { .. } => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            };
        }
    };
    let signals = match caught.start(server.shutdown_trigger()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot watch signals: {e}");
            server.shutdown();
            let _ = server.join();
            return ExitCode::FAILURE;
        }
    };
    let result = server.join();
    signals.close();
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("stopped on an error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--check-snapshot PATH`: reads the whole file as a start with the same
/// flags would (`--shards`, `--memory-max`, `--queues-max` included),
/// reports what it holds; 0 when it loads, 2 when not.
#[cfg(not(sluice_loom))]
fn check_snapshot(path: &std::path::Path, config: &Config) -> ExitCode {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    match sluice_broker::server::check_snapshot(path, config, wall) {
        Ok(report) => {
            println!("{}: {report}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice-server: snapshot {}: {e}", path.display());
            ExitCode::from(2)
        }
    }
}
