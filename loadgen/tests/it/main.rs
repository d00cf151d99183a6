//! Integration tests: each adapter against its real server, started here on a
//! free loopback port with persistence off (sluice in-process, the peers as
//! their own binaries), the binary end to end, and the fault suite
//! (`sluice-chaos`) against a `sluice-server` process.
//!
//! A missing peer binary skips its tests with a printed reason, except when
//! `CI=true`, where it fails them.

mod chaos;
mod cli;
mod grammar;
mod nats;
mod peers;
mod sluice;
mod sqs;
mod workloads;

/// The standard output of a run that must have exited 0; otherwise fails
/// with both streams.
fn exited_ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
