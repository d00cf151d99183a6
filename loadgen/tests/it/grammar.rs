//! One grammar: the same strings given to `sluice-server` (its flags, its
//! environment and its config file), to the `sluice` command and to this
//! load generator come out as the same values, and the same strings are
//! refused by all three with the same reason. Then one run of this binary
//! that takes the decimal, `us` and `M` forms end to end.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sluice_broker::server::config::{RawArgs, Settings};
use sluice_loadgen::adapter::TargetUrl;
use sluice_loadgen::flags;

use crate::sluice::SluiceServer;

const DURATIONS: &[(&str, Duration)] = &[
    ("0", Duration::ZERO),
    ("250us", Duration::from_micros(250)),
    ("250µs", Duration::from_micros(250)),
    ("0.25ms", Duration::from_micros(250)),
    ("1.5s", Duration::from_millis(1500)),
    ("10s", Duration::from_secs(10)),
    ("2m", Duration::from_secs(120)),
    ("1h30m", Duration::from_secs(5400)),
    ("1h 30m", Duration::from_secs(5400)),
    ("1.5h", Duration::from_secs(5400)),
    ("1m30.5s", Duration::from_millis(90_500)),
    ("4d", Duration::from_secs(4 * 86_400)),
    ("1.5ns", Duration::from_nanos(2)),
    ("7ns", Duration::from_nanos(7)),
];

const BAD_DURATIONS: &[&str] = &[
    "10",
    "1.5",
    ".5s",
    "10 parsecs",
    "3w",
    "10S",
    "-1s",
    "1m30",
    "",
];

const SIZES: &[(&str, u64)] = &[
    ("0", 0),
    ("100", 100),
    ("17B", 17),
    ("4k", 4 << 10),
    ("512KiB", 512 << 10),
    ("1M", 1 << 20),
    ("1MiB", 1 << 20),
    ("1.5MiB", 3 << 19),
    ("0.5K", 512),
    ("64 MiB", 64 << 20),
    ("2G", 2 << 30),
];

const BAD_SIZES: &[&str] = &[
    "2KB",
    "1MB",
    "0.5B",
    "1.1KiB",
    "1PiB",
    "12 parsecs",
    "-1",
    "",
];

/// The server's flag parser, with no environment (`--flag=value`, so that
/// `-1s` is a value and not a flag).
fn server_flag(flag: &str, value: &str) -> Result<Settings, String> {
    RawArgs::try_parse_from_env(
        ["sluice-server".to_owned(), format!("{flag}={value}")],
        |_| None,
    )
    .map(|raw| raw.settings)
    .map_err(|e| e.to_string())
}

/// The server's environment, with no flags.
fn server_env(var: &str, value: &str) -> Result<Settings, String> {
    RawArgs::try_parse_from_env(["sluice-server"], |name| {
        (name == var).then(|| value.to_owned())
    })
    .map(|raw| raw.settings)
    .map_err(|e| e.to_string())
}

/// The server's config file, one key.
fn server_file(key: &str, value: &str) -> Result<Settings, String> {
    let text = format!("{key} = {}\n", toml_string(value));
    Settings::from_toml(&text, Path::new("grammar.toml")).map_err(|e| e.to_string())
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[test]
fn durations_read_the_same_everywhere() {
    for &(input, want) in DURATIONS {
        let server = [
            server_flag("--hello-timeout", input).map(|s| s.hello_timeout),
            server_env("SLUICE_HELLO_TIMEOUT", input).map(|s| s.hello_timeout),
            server_file("hello_timeout", input).map(|s| s.hello_timeout),
        ];
        for got in server {
            assert_eq!(got, Ok(Some(want)), "sluice-server, {input:?}");
        }
        assert_eq!(
            sluice_cli::units::parse_duration(input),
            Ok(want),
            "sluice, {input:?}"
        );
        assert_eq!(
            flags::parse_duration(input),
            Ok(want),
            "sluice-loadgen, {input:?}"
        );
    }
}

#[test]
fn sizes_read_the_same_everywhere() {
    for &(input, want) in SIZES {
        let server = [
            server_flag("--memory-max", input).map(|s| s.memory_max),
            server_env("SLUICE_MEMORY_MAX", input).map(|s| s.memory_max),
            server_file("memory_max", input).map(|s| s.memory_max),
        ];
        for got in server {
            assert_eq!(got, Ok(Some(want)), "sluice-server, {input:?}");
        }
        assert_eq!(
            sluice_cli::units::parse_bytes(input),
            Ok(want),
            "sluice, {input:?}"
        );
        assert_eq!(
            flags::parse_size(input).map(|n| n as u64),
            Ok(want),
            "sluice-loadgen, {input:?}"
        );
    }
}

#[test]
fn the_same_strings_are_refused_everywhere_for_the_same_reason() {
    for &input in BAD_DURATIONS {
        let cli = sluice_cli::units::parse_duration(input).expect_err(input);
        let loadgen = flags::parse_duration(input).expect_err(input);
        assert_eq!(cli, loadgen, "{input:?}");
        for server in [
            server_flag("--hello-timeout", input).map(drop),
            server_env("SLUICE_HELLO_TIMEOUT", input).map(drop),
            server_file("hello_timeout", input).map(drop),
        ] {
            let server = server.expect_err(input);
            assert!(server.contains(&cli), "{input:?}: {server} vs {cli}");
        }
    }
    for &input in BAD_SIZES {
        let cli = sluice_cli::units::parse_bytes(input).expect_err(input);
        let loadgen = flags::parse_size(input).expect_err(input);
        assert_eq!(cli, loadgen, "{input:?}");
        for server in [
            server_flag("--memory-max", input).map(drop),
            server_env("SLUICE_MEMORY_MAX", input).map(drop),
            server_file("memory_max", input).map(drop),
        ] {
            let server = server.expect_err(input);
            assert!(server.contains(&cli), "{input:?}: {server} vs {cli}");
        }
    }
}

#[test]
fn addresses_read_the_same_everywhere() {
    for input in [
        "127.0.0.1:7000",
        "sluice://127.0.0.1:7000",
        "sluice://127.0.0.1:7000/",
    ] {
        let server = server_flag("--listen", input).map(|s| s.listen.map(|a| a.to_string()));
        assert_eq!(
            server,
            Ok(Some("127.0.0.1:7000".to_owned())),
            "sluice-server, {input}"
        );
        assert_eq!(
            sluice_cli::units::parse_addrs(input).as_deref(),
            Ok("127.0.0.1:7000"),
            "sluice, {input}"
        );
        let target = TargetUrl::parse(input).map(|t| t.addrs());
        assert_eq!(
            target,
            Ok(vec!["127.0.0.1:7000".to_owned()]),
            "sluice-loadgen, {input}"
        );
    }
    for bad in ["127.0.0.1", "redis-less:", "http://127.0.0.1:7000"] {
        assert!(
            server_flag("--listen", bad).is_err(),
            "sluice-server, {bad}"
        );
        assert!(
            sluice_cli::units::parse_addrs(bad).is_err(),
            "sluice, {bad}"
        );
        assert!(TargetUrl::parse(bad).is_err(), "sluice-loadgen, {bad}");
    }
}

/// The token file is `--token-file` / `SLUICE_TOKEN_FILE` on the server as
/// on this tool (the `sluice` command's end-to-end tests set the same
/// variable).
#[test]
fn the_token_file_has_one_name() {
    use clap::CommandFactory;
    let server = RawArgs::command();
    let arg = server
        .get_arguments()
        .find(|a| a.get_long() == Some("token-file"))
        .expect("sluice-server --token-file");
    assert_eq!(
        arg.get_env().and_then(|e| e.to_str()),
        Some("SLUICE_TOKEN_FILE")
    );

    let out = Command::new(env!("CARGO_BIN_EXE_sluice-loadgen"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--token-file"), "{help}");
    assert!(help.contains("SLUICE_TOKEN_FILE"), "{help}");
    assert!(!help.contains("SLUICE_LOADGEN_TOKEN_FILE"), "{help}");
}

/// The binary end to end: a bare `HOST:PORT` target, a token from
/// `SLUICE_TOKEN_FILE`, and a decimal size, a decimal duration and `us`,
/// against a server given `1.5s` and `1M` the same way.
#[test]
fn the_binary_takes_the_shared_forms_end_to_end() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let server = SluiceServer::start(&[
        "--token-file",
        token.to_str().unwrap(),
        "--hello-timeout",
        "1.5s",
        "--frame-bytes-max",
        "1M",
    ]);
    let bare = server.url().trim_start_matches("sluice://").to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-loadgen"))
        .args([
            "throughput",
            "--target",
            &bare,
            "--messages",
            "2k",
            "--size",
            "1.5KiB",
            "--visibility-timeout",
            "2.5s",
            "--read-spin",
            "250us",
            "--quiet",
        ])
        .env("SLUICE_TOKEN_FILE", &token)
        .output()
        .unwrap();
    let stdout = crate::exited_ok(&out);
    assert!(
        stdout.contains("2000 messages, 1536 B bodies"),
        "the printed configuration: {stdout}"
    );
    assert!(stdout.contains("visibility timeout 2s500ms"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
