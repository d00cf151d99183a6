//! The `sluice` binary end to end.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// An in-process server on a free loopback port (`sluice_broker::testing`).
struct TestServer {
    _server: sluice_broker::testing::TestServer,
    addr: std::net::SocketAddr,
}

impl TestServer {
    fn start() -> TestServer {
        TestServer::start_on("127.0.0.1:0", &[])
    }

    fn start_on(listen: &str, extra: &[&str]) -> TestServer {
        let server = sluice_broker::testing::TestServer::builder()
            .arg("--listen", listen)
            .arg("--memory-max", "128MiB")
            .args(extra)
            .start();
        TestServer {
            addr: server.addr(),
            _server: server,
        }
    }

    fn client(&self) -> sluice_client::Client {
        sluice_client::Client::connect(sluice_client::ClientConfig::new(self.addr.to_string()))
            .expect("client connects")
    }
}

struct Cli {
    addr: String,
}

impl Cli {
    fn new(server: &TestServer) -> Cli {
        Cli {
            addr: server.addr.to_string(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("--addr").arg(&self.addr).args(args);
        cmd.env_remove("SLUICE_ADDR")
            .env_remove("SLUICE_TOKEN_FILE");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("sluice runs")
    }

    /// Runs and expects success; returns standard output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "sluice {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).expect("JSON output")
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn queues_messages_and_stats_end_to_end() {
    let server = TestServer::start();
    let cli = Cli::new(&server);

    let out = cli.ok(&["queue", "create", "jobs.dlq"]);
    assert_eq!(out, "created queue jobs.dlq\n");
    cli.ok(&[
        "queue",
        "create",
        "jobs",
        "--visibility-timeout",
        "30s",
        "--delay",
        "0",
        "--retention",
        "1h",
        "--wait",
        "0.25s",
        "--max-message-size",
        "0.0625M",
        "--dead-letter",
        "jobs.dlq",
        "--max-receives",
        "2",
        "--max-depth",
        "1000",
        "--dedup-window",
        "2m",
        "--backoff",
        "100ms:1m",
    ]);
    let show = cli.json(&["queue", "show", "jobs"]);
    assert_eq!(show["name"], "jobs");
    // The same broker as a URL.
    let by_url = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "--addr",
            &format!("sluice://{}", server.addr),
            "--json",
            "queue",
            "show",
            "jobs",
        ])
        .env_remove("SLUICE_ADDR")
        .env_remove("SLUICE_TOKEN_FILE")
        .output()
        .expect("sluice runs");
    assert!(by_url.status.success(), "{}", stderr(&by_url));
    let by_url: Value = serde_json::from_slice(&by_url.stdout).expect("JSON output");
    assert_eq!(by_url["attributes"], show["attributes"]);
    assert_eq!(show["attributes"]["visibility_timeout_ms"], 30_000);
    assert_eq!(show["attributes"]["retention_ms"], 3_600_000);
    assert_eq!(show["attributes"]["receive_wait_ms"], 250);
    assert_eq!(show["attributes"]["max_message_bytes"], 65_536);
    assert_eq!(
        show["attributes"]["redrive"]["dead_letter_queue"],
        "jobs.dlq"
    );
    assert_eq!(show["attributes"]["max_depth"], 1000);
    assert_eq!(show["attributes"]["backoff"]["base_ms"], 100);
    for key in [
        "visible",
        "delayed",
        "in_flight",
        "sent",
        "moved_in",
        "received",
        "deleted",
        "redelivered",
        "released",
        "dead_lettered",
        "redriven",
        "dropped",
        "purged",
        "oldest_age_ms",
    ] {
        assert!(show["stats"][key].is_u64(), "stats.{key}");
    }
    let table = cli.ok(&["queue", "show", "jobs"]);
    assert!(
        table.contains("dead_letter         jobs.dlq after 2 receives"),
        "{table}"
    );

    cli.ok(&[
        "queue",
        "set",
        "jobs",
        "--no-backoff",
        "--no-dead-letter",
        "--wait",
        "0",
    ]);
    let show = cli.json(&["queue", "show", "jobs"]);
    assert_eq!(show["attributes"]["backoff"], Value::Null);
    assert_eq!(show["attributes"]["redrive"], Value::Null);
    let list = cli.ok(&["queue", "list", "jobs"]);
    assert_eq!(list, "NAME\njobs\njobs.dlq\n");
    assert_eq!(cli.json(&["queue", "list"]).as_array().unwrap().len(), 2);

    // Send: one JSON object per line; the body from standard input too.
    let out = cli.ok(&[
        "--json", "send", "jobs", "hello", "--attr", "k=v", "--count", "2",
    ]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["id"].as_str().unwrap().len(), 32);
        assert_eq!(l["duplicate"], false);
    }
    let mut child = cli
        .command(&["send", "jobs", "--dedup-key", "k1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&[0xff, 0xfe])
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("ID"), "a table: {text}");
    let dup = cli.json(&["send", "jobs", "again", "--dedup-key", "k1"]);
    assert_eq!(dup["duplicate"], true);

    // Peek, then receive with JSON.
    let peeked = cli.json(&["peek", "jobs", "--max", "10"]);
    assert_eq!(peeked.as_array().unwrap().len(), 3);
    assert!(peeked[0].get("receipt").is_none());
    let got = cli.json(&["recv", "jobs", "--max", "10", "--wait", "1s"]);
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), 3);
    for m in got {
        assert_eq!(m["receipt"].as_str().unwrap().len(), 52);
        assert_eq!(m["receive_count"], 1);
        assert!(m["delivery"].is_u64() && m["sent_at_ms"].is_u64());
        assert!(m["first_received_at_ms"].is_u64());
        assert!(m["attributes"].is_object());
    }
    let binary = got.iter().find(|m| m.get("body_base64").is_some()).unwrap();
    assert_eq!(binary["body_base64"], "//4=");
    let text = got.iter().find(|m| m["body"] == "hello").unwrap();
    assert_eq!(text["attributes"]["k"], "v");

    // Visibility: release one, it comes back.
    let receipt = text["receipt"].as_str().unwrap();
    assert_eq!(
        cli.ok(&["visibility", "jobs", receipt, "0"]),
        format!("released {receipt}\n")
    );
    let again = cli.json(&["recv", "jobs", "--wait", "1s", "--delete"]);
    assert_eq!(again[0]["receive_count"], 2);

    // Delete a valid, a malformed and a spent receipt (its message was
    // deleted by `recv --delete`): the success on stdout, one line per
    // failure on stderr, exit non-zero.
    let valid = got.iter().find(|m| m["receipt"] != receipt).unwrap()["receipt"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = cli.run(&["delete", "jobs", &valid, "not-a-receipt", receipt]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("deleted {valid}\n")
    );
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("InvalidReceipt: not-a-receipt: "),
        "{err}"
    );
    assert!(lines[1].starts_with(&format!("Gone: {receipt}: ")), "{err}");

    // Purge, stats, redrive, delete.
    let purged = cli.json(&["queue", "purge", "jobs"]);
    assert_eq!(purged["purged"], 1);
    let stats = cli.json(&["stats"]);
    assert_eq!(stats["shards"], 1);
    assert_eq!(stats["counters"]["queues"], 2);
    let redrive = cli.json(&["redrive", "jobs.dlq"]);
    assert_eq!(redrive["moved"], 0);
    assert!(cli.ok(&["stats"]).contains("io_backend"));
    cli.ok(&["queue", "delete", "jobs"]);
}

#[test]
fn errors_are_named_on_stderr() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    let out = cli.run(&["queue", "show", "missing"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with("QueueNotFound: "),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());

    cli.ok(&["queue", "create", "q", "--visibility-timeout", "1s"]);
    let out = cli.run(&["queue", "create", "q", "--visibility-timeout", "2s"]);
    assert!(
        stderr(&out).starts_with("QueueExists: "),
        "{}",
        stderr(&out)
    );
    let out = cli.run(&["queue", "create", "bad", "--visibility-timeout", "13h"]);
    assert!(
        stderr(&out).starts_with("InvalidArgument: "),
        "{}",
        stderr(&out)
    );

    // A partly failed send batch: small entries pass, the error is named.
    cli.ok(&["queue", "set", "q", "--max-message-size", "4"]);
    let out = cli.run(&["send", "q", "too long"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with("MessageTooLarge: q: "),
        "{}",
        stderr(&out)
    );

    // No server: a Connect error.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--addr", "127.0.0.1:1", "stats"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("Connect: "), "{}", stderr(&out));

    // Usage errors are clap's (exit 2): a bad duration names the problem.
    let out = cli.run(&["recv", "q", "--wait", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no unit"), "{}", stderr(&out));
    // The broker counts whole milliseconds: a remainder is refused, not dropped.
    let out = cli.run(&["queue", "create", "q2", "--delay", "1500us"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a whole number of milliseconds"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn every_subcommand_has_help() {
    let commands: &[&[&str]] = &[
        &[],
        &["queue"],
        &["queue", "create"],
        &["queue", "set"],
        &["queue", "list"],
        &["queue", "show"],
        &["queue", "purge"],
        &["queue", "delete"],
        &["send"],
        &["recv"],
        &["peek"],
        &["delete"],
        &["visibility"],
        &["redrive"],
        &["stats"],
    ];
    for c in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(*c)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{c:?} --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: sluice"), "{c:?}: {text}");
    }
}

#[test]
fn several_brokers_and_tls() {
    let servers = [
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    ];
    let cli = Cli {
        addr: servers
            .iter()
            .map(|s| s.addr.to_string())
            .collect::<Vec<_>>()
            .join(","),
    };
    for i in 0..12 {
        cli.ok(&["queue", "create", &format!("{{t{i}}}.dlq")]);
        cli.ok(&[
            "queue",
            "create",
            &format!("{{t{i}}}"),
            "--dead-letter",
            &format!("{{t{i}}}.dlq"),
            "--max-receives",
            "2",
        ]);
        cli.ok(&["send", &format!("{{t{i}}}"), "hello"]);
    }
    // Listing merges the brokers; every broker holds some of them.
    let names = cli.json(&["queue", "list"]);
    assert_eq!(names.as_array().map(Vec::len), Some(24), "{names}");
    for s in &servers {
        assert!(!s.client().list_queues("").unwrap().is_empty());
    }
    let stats = cli.json(&["stats"]);
    assert_eq!(
        stats.as_object().map(serde_json::Map::len),
        Some(3),
        "{stats}"
    );
    let shown = cli.json(&["queue", "show", "{t3}"]);
    assert_eq!(shown["stats"]["visible"], 1, "{shown}");

    // TLS with --tls-ca; a CA that did not sign the server's certificate is
    // refused.
    let pki = sluice_broker::testing::TestPki::generate();
    let tls = TestServer::start_on(
        "127.0.0.1:0",
        &pki.server_args()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let cli = Cli::new(&tls);
    let ca = pki.ca_pem();
    let ca = ca.to_str().unwrap();
    cli.ok(&["--tls-ca", ca, "queue", "create", "secure"]);
    cli.ok(&[
        "--tls-ca",
        ca,
        "--tls-server-name",
        "localhost",
        "send",
        "secure",
        "x",
    ]);
    let other = pki.other_ca_pem();
    let out = cli.run(&["--tls-ca", other.to_str().unwrap(), "stats"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));
    let out = cli.run(&["stats"]);
    assert!(stderr(&out).contains("TLS"), "{}", stderr(&out));
}

#[test]
fn recv_bind_gives_back_what_it_did_not_delete_and_advance_clock_needs_a_manual_clock() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    cli.ok(&["queue", "create", "jobs"]);
    cli.ok(&["send", "jobs", "keep me"]);
    // A 10-minute lease, bound: released as soon as `sluice` exits.
    let got = cli.json(&["recv", "jobs", "--bind", "--visibility-timeout", "10m"]);
    assert_eq!(got.as_array().map(Vec::len), Some(1), "{got}");
    let again = cli.json(&["recv", "jobs", "--wait", "5s", "--delete"]);
    assert_eq!(again[0]["receive_count"], 2, "{again}");

    let out = cli.run(&["advance-clock", "30s"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with("Unsupported: "),
        "{}",
        stderr(&out)
    );

    let manual = TestServer::start_on("127.0.0.1:0", &["--clock", "manual"]);
    let cli = Cli::new(&manual);
    let moved = cli.json(&["advance-clock", "1m30s"]);
    assert_eq!(moved["elapsed_ms"], 90_000, "{moved}");
    let out = cli.ok(&["advance-clock", "0"]);
    assert!(out.starts_with("the clock stands 90s after"), "{out}");
}
