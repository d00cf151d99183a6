//! `sluice-chaos` end to end: two faults in their quick form against a
//! `sluice-server` process of this build, and the suite failing, by name,
//! when the server breaks one of its checks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CHAOS: &str = env!("CARGO_BIN_EXE_sluice-chaos");

/// The `sluice-server` of this build, beside `sluice-chaos` in the same
/// profile directory; built first (cargo does nothing when it is fresh),
/// since a test of this package alone does not build the broker's binary.
fn server() -> PathBuf {
    let dir = Path::new(CHAOS).parent().expect("a profile directory");
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "sluice-broker",
            "--bin",
            "sluice-server",
        ])
        .args(["--profile", &profile])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build --bin sluice-server failed");
    let server = dir.join("sluice-server");
    assert!(server.is_file(), "no {}", server.display());
    server
}

fn chaos(args: &[&str]) -> Output {
    let out = Command::new(CHAOS)
        .args(args)
        .output()
        .expect("run sluice-chaos");
    eprintln!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn help_names_the_faults_and_the_flags() {
    let out = chaos(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--server", "--quick", "--json", "--only", "soak"] {
        assert!(help.contains(flag), "--help does not mention {flag}");
    }
    let out = chaos(&["--list"]);
    let list = String::from_utf8_lossy(&out.stdout);
    for fault in [
        "consumer-kill",
        "churn",
        "silent-clients",
        "partial-frames",
        "idle-10k",
        "memory-pressure",
        "sigterm",
    ] {
        assert!(list.contains(fault), "--list does not name {fault}");
    }
    let out = chaos(&["--only", "no-such-fault", "--server", CHAOS]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no fault named `no-such-fault`"));
}

#[test]
fn killed_consumers_and_memory_pressure_lose_nothing() {
    let server = server();
    let json = std::env::temp_dir().join(format!("sluice-chaos-it-{}.json", std::process::id()));
    let out = chaos(&[
        "--quick",
        "--only",
        "consumer-kill,memory-pressure",
        "--server",
        server.to_str().expect("a UTF-8 path"),
        "--json",
        json.to_str().expect("a UTF-8 path"),
    ]);
    assert!(out.status.success(), "sluice-chaos reported violations");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON report"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    assert_eq!(doc["passed"], true);
    let faults = doc["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), 2);
    for f in faults {
        let m = &f["messages"];
        assert!(m["sent"].as_u64().unwrap_or(0) > 0, "{f}");
        assert_eq!(f["lost_checked"], true, "{f}");
        assert_eq!(m["lost"], 0, "{f}");
        assert_eq!(f["identity_mismatches"], 0, "{f}");
        assert_eq!(f["fds_before"], f["fds_after"], "{f}");
        assert!(f["violations"].as_array().is_some_and(Vec::is_empty), "{f}");
    }
}

#[test]
fn a_broken_expectation_fails_the_suite_by_name() {
    // With 1 MiB for messages the killed-consumers fault's producer gets
    // Busy, which that fault does not allow: the suite must say so and
    // exit 1.
    let server = server();
    let out = chaos(&[
        "--quick",
        "--only",
        "consumer-kill",
        "--server",
        server.to_str().expect("a UTF-8 path"),
        "--server-arg=--memory-max=1MiB",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("consumer-kill [FAIL]"), "{stdout}");
    assert!(stdout.contains("VIOLATION: producer:"), "{stdout}");
    assert!(stdout.contains("Busy"), "{stdout}");
}
