//! The binary end to end: flags, outputs, exit codes.

use std::process::Command;

use crate::peers::{self, PeerKind};
use crate::sluice::SluiceServer;

fn loadgen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice-loadgen"))
}

#[test]
fn help_explains_every_flag() {
    let out = loadgen().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--target",
        "--passes",
        "--messages",
        "--duration",
        "--producers",
        "--consumers",
        "--size",
        "--batch",
        "--rate",
        "--visibility-timeout",
        "--fail-ratio",
        "--token-file",
        "--aws-access-key-id",
        "--aws-secret-access-key",
        "--aws-region",
        "--json",
        "--hgrm",
        "--plot",
        "--markdown",
        "--slo",
        "--quiet",
        "throughput",
        "latency",
        "redelivery",
    ] {
        assert!(help.contains(flag), "--help does not mention {flag}");
    }
}

#[test]
fn bad_flags_are_refused_with_a_reason() {
    let out = loadgen()
        .args([
            "throughput",
            "--target",
            "redis://127.0.0.1:1",
            "--slo",
            "p98<1ms",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown statistic"));
    let out = loadgen()
        .args([
            "throughput",
            "--target",
            "redis://127.0.0.1:1",
            "--size",
            "8",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size"));
    // Every flag the run's checks refuse is a usage error: exit 2, as
    // --help says, naming the flag.
    for (flag, value, workload, says) in [
        ("--batch", "0", "throughput", "--batch"),
        ("--messages", "0", "throughput", "--messages"),
        ("--window", "0", "throughput", "--window"),
        ("--producers", "0", "throughput", "--producers"),
        ("--fail-ratio", "2", "redelivery", "--fail-ratio"),
        (
            "--token-file",
            "/nonexistent/sluice-token",
            "throughput",
            "token file",
        ),
        (
            "--aws-access-key-id",
            "AKID",
            "throughput",
            "needs its secret",
        ),
        ("--aws-region", "Mars 1", "throughput", "--aws-region"),
    ] {
        let out = loadgen()
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_REGION")
            .args([workload, "--target", "sluice://127.0.0.1:1", flag, value])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(says), "{flag}: {err}");
    }
    // AWS_DEFAULT_REGION is read when AWS_REGION is not set, as the SDKs do.
    let out = loadgen()
        .env_remove("AWS_REGION")
        .env("AWS_DEFAULT_REGION", "Mars 2")
        .args(["throughput", "--target", "sluice://127.0.0.1:1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("Mars 2"), "{err}");
}

/// The issue's check, small: the binary against a fresh sluice server
/// prints its table and writes JSON with nothing lost.
#[test]
fn throughput_against_sluice_writes_json() {
    let server = SluiceServer::start(&[]);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-sluice-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("out.json");
    let md = dir.join("medians.md");
    let out = loadgen()
        .args([
            "throughput",
            "--target",
            &server.url(),
            "--messages",
            "5000",
            "--quiet",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--markdown")
        .arg(&md)
        .output()
        .unwrap();
    let stdout = crate::exited_ok(&out);
    assert!(
        stdout.contains("SEND"),
        "the configuration is printed: {stdout}"
    );
    assert!(stdout.contains(&server.url()), "the table names the target");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let o = &v.as_array().unwrap()[0];
    assert_eq!(o["sent"], 5000);
    assert_eq!(o["deleted"], 5000);
    assert_eq!(o["lost"], 0);
    assert_eq!(o["duplicates"], 0);
    // Every time in µs, the unit in the key.
    assert!(o["send_to_receive"]["p99_us"].is_u64(), "{o}");
    assert!(o["cycle"]["max_us"].is_u64(), "{o}");
    assert!(o["active_us"].is_u64(), "{o}");
    assert!(o.get("cycle_us").is_none(), "{o}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains(&format!("| `{}` | 1/1 |", server.url())),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn outputs_and_slo_against_redis() {
    let Some(peer) = peers::start(PeerKind::Redis) else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{}", peer.port));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("out.json");
    let plot = dir.join("plot.svg");
    let hgrm = dir.join("hgrm");
    let out = loadgen()
        .args([
            "throughput",
            "--target",
            &peer.url(),
            "--messages",
            "2000",
            "--batch",
            "32",
        ])
        .args(["--passes", "2", "--slo", "max<60s", "--quiet"])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plot)
        .arg("--hgrm")
        .arg(&hgrm)
        .output()
        .unwrap();
    let stdout = crate::exited_ok(&out);
    assert!(
        stdout.contains("XAUTOCLAIM"),
        "the configuration is printed: {stdout}"
    );
    assert!(stdout.contains("median"), "two passes give a median row");

    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2, "one object per target and pass");
    for o in arr {
        assert_eq!(o["sent"], 2000);
        assert_eq!(o["deleted"], 2000);
        assert_eq!(o["lost"], 0);
        assert_eq!(o["duplicates"], 0);
        assert!(o["send_to_receive"]["p99_us"].is_u64());
        assert!(o["cycle"]["max_us"].is_u64());
        assert!(o["active_us"].is_u64());
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert_eq!(
        svg.matches(r#"class="curve""#).count(),
        1,
        "one curve for the one target"
    );
    let files = std::fs::read_dir(&hgrm).unwrap().count();
    assert_eq!(files, 4, "send_to_receive and cycle for each of two passes");

    // An SLO nobody meets: exit 3, naming the violation.
    let out = loadgen()
        .args([
            "throughput",
            "--target",
            &peer.url(),
            "--messages",
            "200",
            "--quiet",
        ])
        .args(["--slo", "max<1us"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SLO violated") && stderr.contains("max<1us"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
