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
    assert_eq!(
        list,
        "NAME      VISIBLE  IN_FLIGHT  DELAYED  OLDEST_AGE\n\
         jobs      0        0          0        -\n\
         jobs.dlq  0        0          0        -\n"
    );
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

    // Visibility: a timeout the broker cannot count (a sub-millisecond
    // remainder) is a usage error, and nothing is sent: all three stay
    // leased.
    let receipt = text["receipt"].as_str().unwrap();
    let out = cli.run(&["visibility", "jobs", receipt, "1500us"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a whole number of milliseconds"));
    std::thread::sleep(std::time::Duration::from_millis(50));
    let show = cli.json(&["queue", "show", "jobs"]);
    assert_eq!(show["stats"]["in_flight"], 3, "{show}");

    // Visibility: release one, it comes back.
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
    // No queue names jobs.dlq any more: redrive is refused.
    let out = cli.run(&["redrive", "jobs.dlq"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("InvalidArgument: jobs.dlq is no queue's dead-letter queue"),
        "{}",
        stderr(&out)
    );
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
    // It names what differs, as the grammar writes it.
    assert_eq!(
        stderr(&out),
        "QueueExists: queue q exists with other attributes: \
         visibility_timeout 1s (this create: 2s)\n"
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
    // Listing merges the brokers; each broker holds the queues whose {tag}
    // hashes to it (the ports are random, so which ones varies).
    let names = cli.json(&["queue", "list"]);
    assert_eq!(names.as_array().map(Vec::len), Some(24), "{names}");
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    for (i, s) in servers.iter().enumerate() {
        let mut held = s.client().list_queues("").unwrap();
        held.sort();
        let mut expected: Vec<String> = (0..12)
            .filter(|t| sluice_client::sharded::rendezvous(&addrs, &format!("t{t}")) == i)
            .flat_map(|t| [format!("{{t{t}}}"), format!("{{t{t}}}.dlq")])
            .collect();
        expected.sort();
        assert_eq!(held, expected, "broker {i}");
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

/// How long a test waits for a spawned `sluice` before it gives up: a bound
/// on the test, never a measurement.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// The lines a spawned `sluice` writes, as they come (read on a thread, so
/// the test can wait for them with a bound).
fn lines_of(stream: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits, within [`PATIENCE`], for a spawned `sluice` to end.
fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    for _ in 0..PATIENCE.as_millis() / 10 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap();
    panic!("sluice did not end");
}

fn signal(child: &std::process::Child, signal: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_child(child), signal).unwrap();
}

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("SLUICE_ADDR")
        .env_remove("SLUICE_TOKEN_FILE")
        .output()
        .expect("sluice runs")
}

/// The one JSON error object a failure under `--json` prints on stderr.
fn json_error(out: &Output) -> Value {
    let err = stderr(out);
    let mut lines = err.lines();
    let v: Value = serde_json::from_str(lines.next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {err}"));
    assert!(v["error"]["kind"].is_string(), "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
    assert!(v["error"]["retryable"].is_boolean(), "{v}");
    v
}

#[test]
fn completions_and_man_pages_come_from_the_definition() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = sluice(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["send", "tail", "ping", "queue"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    let out = sluice(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));

    let out = sluice(&["man"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = String::from_utf8(out.stdout).unwrap();
    // roff: after the apostrophe preamble (.ie/.el), the title comes first.
    let first = page
        .lines()
        .find(|l| !l.starts_with(".ie ") && !l.starts_with(".el "))
        .unwrap();
    assert!(first.starts_with(".TH sluice 1"), "{first}");
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH OPTIONS",
        ".SH SUBCOMMANDS",
        ".SH \"EXIT STATUS\"",
        ".SH ERRORS",
    ] {
        assert!(page.lines().any(|l| l == section), "no {section}");
    }
    for sub in [
        "send",
        "recv",
        "tail",
        "ping",
        "completions",
        "man",
        "queue",
    ] {
        assert!(page.contains(&format!("sluice\\-{sub}(1)")), "{sub}");
    }
    // No text line can be taken for a request.
    let mut in_preamble = true;
    for line in page.lines() {
        in_preamble &= line.starts_with(".ie ") || line.starts_with(".el ");
        assert!(in_preamble || !line.starts_with('\''), "{line}");
    }

    // The directory is made, parents too.
    let top = std::env::temp_dir().join(format!("sluice-man-{}", std::process::id()));
    let dir = top.join("share/man/man1");
    assert!(!top.exists(), "{}", top.display());
    let out = sluice(&["man", "--out-dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    for file in ["sluice.1", "sluice-tail.1", "sluice-queue-create.1"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.contains(".TH sluice"), "{file}");
    }
    assert!(!dir.join("sluice-help.1").exists());
    // Under a file, no directory can be made (whoever runs the test).
    let file = top.join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = sluice(&["man", "--out-dir", file.join("man1").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("writing man pages to"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&top).unwrap();
}

#[test]
fn help_lists_the_exit_statuses_and_usage_errors_exit_2() {
    let out = sluice(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let statuses = help
        .split("Exit status:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no exit statuses: {help}"));
    for code in ["0", "1", "2", "130"] {
        assert!(
            statuses
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "{code}: {statuses}"
        );
    }
    assert!(help.contains("\"retryable\""), "{help}");
    for sub in ["tail", "ping", "completions", "man"] {
        let out = sluice(&[sub, "--help"]);
        assert!(out.status.success(), "{sub} --help");
    }

    // Usage errors: clap's text, or under --json a JSON object; exit 2.
    let out = sluice(&["stats", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--bogus"), "{}", stderr(&out));
    let out = sluice(&["--json", "stats", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let v = json_error(&out);
    assert_eq!(v["error"]["kind"], "Usage");
    assert!(v["error"]["message"].as_str().unwrap().contains("--bogus"));
    let out = sluice(&["--json", "queue"]);
    assert_eq!(out.status.code(), Some(2));
    let v = json_error(&out);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("subcommand"),
        "{v}"
    );
    let out = sluice(&["--json", "--token-file", "/nonexistent/token", "stats"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_error(&out)["error"]["kind"], "Usage");
    let out = sluice(&["--tls-ca", "/nonexistent/ca.pem", "stats"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("sluice: InvalidArgument: TLS"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn failures_under_json_are_json_objects_on_stderr() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    let out = cli.run(&["--json", "queue", "show", "missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let v = json_error(&out);
    assert_eq!(v["error"]["kind"], "QueueNotFound", "{v}");
    assert_eq!(v["error"]["retryable"], false, "{v}");
    assert!(!v["error"]["message"].as_str().unwrap().is_empty());

    // A failed entry names its subject; the rest of the batch succeeds.
    cli.ok(&["queue", "create", "q"]);
    cli.ok(&["send", "q", "x"]);
    let got = cli.json(&["recv", "q", "--wait", "1s"]);
    let receipt = got[0]["receipt"].as_str().unwrap();
    let out = cli.run(&["--json", "delete", "q", receipt, "not-a-receipt"]);
    assert_eq!(out.status.code(), Some(1));
    let deleted: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(deleted["deleted"], true);
    let v = json_error(&out);
    assert_eq!(v["error"]["kind"], "InvalidReceipt", "{v}");
    assert_eq!(v["error"]["subject"], "not-a-receipt", "{v}");

    // No server: Connect, which may succeed later.
    let out = sluice(&["--addr", "127.0.0.1:1", "--json", "stats"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_error(&out);
    assert_eq!(v["error"]["kind"], "Connect", "{v}");
    assert_eq!(v["error"]["retryable"], true, "{v}");
}

#[test]
fn ping_reports_every_sample() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    let out = cli.ok(&["ping", "--count", "3", "--interval", "0"]);
    let samples: Vec<&str> = out.lines().filter(|l| l.contains(" seq=")).collect();
    assert_eq!(samples.len(), 3, "{out}");
    for (i, line) in samples.iter().enumerate() {
        assert!(
            line.starts_with(&format!("{}  seq={}  rtt=", server.addr, i + 1)),
            "{line}"
        );
        assert!(line.ends_with("us"), "{line}");
    }
    let table: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("BROKER"))
        .collect();
    assert_eq!(table.len(), 2, "{out}");
    for column in [
        "SENT", "LOST", "MIN_US", "AVG_US", "P50_US", "P99_US", "MAX_US",
    ] {
        assert!(table[0].contains(column), "{column}: {out}");
    }
    let row: Vec<&str> = table[1].split_whitespace().collect();
    assert_eq!(
        row[..3],
        [server.addr.to_string().as_str(), "3", "0"],
        "{out}"
    );
    assert!(row[3..].iter().all(|v| v.parse::<u64>().is_ok()), "{out}");

    let v = cli.json(&["ping", "--count", "3", "--interval", "1ms"]);
    assert_eq!(v["broker"], server.addr.to_string());
    assert_eq!(v["sent"], 3);
    assert_eq!(v["received"], 3);
    assert_eq!(v["lost"], 0);
    let us = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert!(us("min_us") <= us("p50_us") && us("p50_us") <= us("p99_us"));
    assert!(us("p99_us") <= us("max_us") && us("min_us") <= us("avg_us"));
    assert!(us("avg_us") <= us("max_us"));

    // Several brokers: each pinged in turn, one object per address.
    let other = TestServer::start();
    let both = Cli {
        addr: format!("{},{}", server.addr, other.addr),
    };
    let v = both.json(&["ping", "--count", "2", "--interval", "0"]);
    let by_broker = v.as_object().unwrap();
    assert_eq!(by_broker.len(), 2, "{v}");
    for s in [&server, &other] {
        let r = &v[s.addr.to_string()];
        assert_eq!(
            (r["sent"].as_u64(), r["received"].as_u64()),
            (Some(2), Some(2)),
            "{v}"
        );
    }

    // A broker of several that does not answer: exit 1, the failure on
    // stderr naming it, its pings counted as lost.
    let half = Cli {
        addr: format!("{},127.0.0.1:1", server.addr),
    };
    let out = half.run(&["--json", "ping", "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_error(&out);
    assert_eq!(v["error"]["broker"], "127.0.0.1:1", "{v}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["127.0.0.1:1"]["lost"], 1, "{summary}");
    assert_eq!(summary["127.0.0.1:1"]["min_us"], Value::Null, "{summary}");
    assert_eq!(summary[server.addr.to_string()]["lost"], 0, "{summary}");
}

#[test]
fn tail_prints_and_deletes_up_to_max() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    cli.ok(&["queue", "create", "q"]);
    for body in ["one", "two", "three"] {
        cli.ok(&["send", "q", body, "--attr", "k=v"]);
    }
    let out = cli.ok(&["tail", "q", "--max", "3"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (line, body) in lines.iter().zip(["one", "two", "three"]) {
        assert!(line.ends_with(&format!("  [k=v]  {body}")), "{line}");
        // An RFC 3339 sent-at first: 2026-12-02T02:12:21.123Z.
        let at = line.split_whitespace().next().unwrap();
        assert_eq!((at.len(), &at[10..11], &at[23..]), (24, "T", "Z"), "{at}");
    }
    let show = cli.json(&["queue", "show", "q"]);
    assert_eq!(show["stats"]["visible"], 0, "{show}");
    assert_eq!(show["stats"]["in_flight"], 0, "{show}");
    assert_eq!(show["stats"]["deleted"], 3, "{show}");

    // JSON: one object per line; --batch 1 takes them one receive at a time.
    cli.ok(&["send", "q", "four"]);
    cli.ok(&["send", "q", "five"]);
    let out = cli.ok(&["--json", "tail", "q", "--max", "2", "--batch", "1"]);
    let got: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 2, "{out}");
    assert_eq!(got[0]["body"], "four");
    assert_eq!(got[1]["body"], "five");
    assert!(got[0]["sent_at"].as_str().unwrap().ends_with('Z'));
    assert!(got[0]["sent_at_ms"].is_u64());

    // --no-delete leaves the message, and its bound lease ends with tail.
    cli.ok(&["send", "q", "six"]);
    let out = cli.ok(&["tail", "q", "--max", "1", "--no-delete"]);
    assert!(out.ends_with("six\n"), "{out}");
    let again = cli.json(&["recv", "q", "--wait", "5s", "--delete"]);
    assert_eq!(again[0]["body"], "six", "{again}");
    assert_eq!(again[0]["receive_count"], 2, "{again}");

    let out = cli.run(&["tail", "q", "--max", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = cli.run(&["tail", "missing", "--max", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("QueueNotFound: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn tail_ends_on_sigint_having_deleted_exactly_what_it_printed() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    cli.ok(&["queue", "create", "q"]);
    cli.ok(&["send", "q", "m1"]);
    cli.ok(&["send", "q", "m2"]);
    let mut child = cli
        .command(&["--json", "tail", "q", "--batch", "1", "--wait", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    let body = |line: String| {
        let v: Value = serde_json::from_str(&line).unwrap();
        v["body"].as_str().unwrap().to_owned()
    };
    let mut printed: Vec<String> = Vec::new();
    for _ in 0..2 {
        let line = lines
            .recv_timeout(PATIENCE)
            .expect("tail prints what is on the queue");
        printed.push(body(line));
    }
    assert_eq!(printed, ["m1", "m2"]);

    signal(&child, rustix::process::Signal::INT);
    // Sent after the interrupt: tail's last receive may or may not get it,
    // and must delete it exactly when it printed it.
    cli.ok(&["send", "q", "m3"]);

    let status = wait_bounded(&mut child);
    // The reader thread ends with the pipe, which ended with tail.
    printed.extend(lines.iter().map(body));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");

    let m3_printed = match printed.as_slice() {
        [_, _] => false,
        [_, _, third] if third == "m3" => true,
        other => panic!("tail printed {other:?}"),
    };
    let show = cli.json(&["queue", "show", "q"]);
    let left =
        show["stats"]["visible"].as_u64().unwrap() + show["stats"]["in_flight"].as_u64().unwrap();
    assert_eq!(show["stats"]["deleted"], printed.len(), "{show}");
    assert_eq!(left, 3 - printed.len() as u64, "{show}");
    if !m3_printed {
        // Not printed, so not deleted: m3 is there for the next consumer.
        let rest = cli.json(&["recv", "q", "--max", "10", "--wait", "5s"]);
        assert_eq!(rest.as_array().map(Vec::len), Some(1), "{rest}");
        assert_eq!(rest[0]["body"], "m3", "{rest}");
    }
}

#[test]
fn tail_deletes_nothing_it_could_not_write() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    cli.ok(&["queue", "create", "q"]);
    for body in ["a", "b", "c"] {
        cli.ok(&["send", "q", body]);
    }
    // A pipe whose reader has exited: every write to it fails.
    let mut reader = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
    let closed = reader.stdin.take().unwrap();
    assert!(reader.wait().unwrap().success());
    let out = cli
        .command(&["tail", "q", "--max", "3"])
        .stdout(Stdio::from(closed))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let show = cli.json(&["queue", "show", "q"]);
    assert_eq!(show["stats"]["deleted"], 0, "{show}");
    // Its leases ended with it: all three come back.
    let got = cli.json(&["recv", "q", "--max", "10", "--wait", "5s"]);
    assert_eq!(got.as_array().map(Vec::len), Some(3), "{got}");
}

#[test]
fn tail_reports_and_retries_a_broker_it_cannot_reach() {
    let server = TestServer::start();
    let addrs = [server.addr.to_string(), "127.0.0.1:1".to_owned()];
    let queue = (0..1000)
        .map(|i| format!("q{i}"))
        .find(|q| sluice_client::sharded::rendezvous(&addrs, q) == 1)
        .expect("some name lands on the second broker");
    let cli = Cli {
        addr: addrs.join(","),
    };
    let mut child = cli
        .command(&["--json", "tail", &queue])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let errors = lines_of(child.stderr.take().unwrap());
    // Two reports: it tried again after the first.
    for _ in 0..2 {
        let line = errors.recv_timeout(PATIENCE).expect("an error line");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"]["kind"], "Connect", "{v}");
        assert_eq!(v["error"]["retryable"], true, "{v}");
    }
    signal(&child, rustix::process::Signal::TERM);
    assert_eq!(wait_bounded(&mut child).code(), Some(1), "a request failed");
}

#[test]
fn durations_the_broker_cannot_count_and_waits_beyond_20s_are_usage_errors() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    cli.ok(&["queue", "create", "q"]);
    // A sub-millisecond remainder: refused before anything is sent, the
    // value quoted as typed, exit 2, everywhere a duration goes to the broker.
    let cases: &[&[&str]] = &[
        &["send", "q", "x", "--delay", "1500us"],
        &["recv", "q", "--visibility-timeout", "1500us"],
        &["tail", "q", "--max", "1", "--visibility-timeout", "1500us"],
        &["queue", "set", "q", "--backoff", "1ms:1500us"],
    ];
    for args in cases {
        let out = cli.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("`1500us` is not a whole number of milliseconds"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let show = cli.json(&["queue", "show", "q"]);
    assert_eq!(show["stats"]["visible"], 0, "nothing was sent: {show}");

    // A wait beyond the protocol's 20s: a usage error naming the range.
    for args in [
        &["recv", "q", "--wait", "30s"][..],
        &["tail", "q", "--wait", "30s"][..],
    ] {
        let out = cli.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("`30s` is longer than a receive may wait: the range is 0 .. 20s"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = cli.run(&["--json", "recv", "q", "--wait", "30s"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_error(&out)["error"]["kind"], "Usage");
}

#[test]
fn queue_show_writes_durations_and_sizes_in_the_units_grammar() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    cli.ok(&["queue", "create", "q", "--max-message-size", "0.5MiB"]);
    let table = cli.ok(&["queue", "show", "q"]);
    for row in [
        "visibility_timeout  30s\n",
        "delay               0s\n",
        "retention           4d\n",
        "max_message_size    512KiB\n",
        "receive_wait        0s\n",
        "dedup_window        5m\n",
        "backoff             off\n",
        "oldest_age     0s\n",
    ] {
        assert!(table.contains(row), "{row:?} in\n{table}");
    }
    assert!(!table.contains("bytes"), "{table}");
}

#[test]
fn an_http_server_on_the_port_is_named_as_one() {
    // Answers whatever it reads with a 400, as an HTTP server answers a HELLO.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            let Ok(mut stream) = stream else { return };
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 64]);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let cli = Cli {
        addr: addr.to_string(),
    };
    let out = cli.run(&["stats"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("this is an HTTP server (the metrics port?)")
            && err.contains("default 127.0.0.1:7171"),
        "{err}"
    );
    assert!(!err.contains("1347703884"), "{err}");
    let out = cli.run(&["--json", "stats"]);
    let v = json_error(&out);
    assert_eq!(v["error"]["kind"], "Protocol", "{v}");
    assert_eq!(v["error"]["retryable"], false, "{v}");
}

#[test]
fn dead_letter_queues_show_their_sources_and_only_they_redrive() {
    use sluice_client::{QueueOptions, ReceiveOptions, RedrivePolicy};
    let server = TestServer::start();
    let cli = Cli::new(&server);
    let c = server.client();
    c.create_queue("jobs.dlq", &QueueOptions::new()).unwrap();
    c.create_queue(
        "jobs",
        &QueueOptions::new().redrive(RedrivePolicy::new("jobs.dlq", 1)),
    )
    .unwrap();
    c.create_queue("other", &QueueOptions::new()).unwrap();
    c.send("jobs", "poison").unwrap();
    c.send("other", "fine").unwrap();
    // Received once and released: the next receive dead-letters it.
    let now = || ReceiveOptions::new(1).wait(std::time::Duration::ZERO);
    let got = c.receive("jobs", now()).unwrap();
    c.change_visibility("jobs", got[0].receipt, std::time::Duration::ZERO)
        .unwrap();
    for _ in 0..100 {
        if c.queue_info("jobs.dlq").unwrap().stats.visible == 1 {
            break;
        }
        assert!(c.receive("jobs", now()).unwrap().is_empty());
    }
    assert_eq!(c.queue_info("jobs.dlq").unwrap().stats.visible, 1);

    // peek on the dead-letter queue names the source; elsewhere no column.
    let table = cli.ok(&["peek", "jobs.dlq"]);
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("ID  "), "{table}");
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[1], "SOURCE", "{table}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[1], "jobs", "{table}");
    let peeked = cli.json(&["peek", "jobs.dlq"]);
    assert_eq!(
        peeked[0]["source_queues"],
        serde_json::json!(["jobs"]),
        "{peeked}"
    );
    assert_eq!(peeked[0]["body"], "poison", "{peeked}");
    assert!(!cli.ok(&["peek", "other"]).contains("SOURCE"));
    assert!(
        cli.json(&["peek", "other"])[0]
            .get("source_queues")
            .is_none()
    );

    // queue list: the depths and the oldest message's age.
    let list = cli.json(&["queue", "list"]);
    let row = |name: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {list}"))
            .clone()
    };
    assert_eq!(row("jobs.dlq")["visible"], 1, "{list}");
    assert_eq!(row("jobs")["visible"], 0, "{list}");
    assert_eq!(row("other")["visible"], 1, "{list}");
    for key in ["in_flight", "delayed", "oldest_age_ms"] {
        assert!(row("other")[key].is_u64(), "{key}: {list}");
    }
    let table = cli.ok(&["queue", "list"]);
    let other = table.lines().find(|l| l.starts_with("other ")).unwrap();
    let cells: Vec<&str> = other.split_whitespace().collect();
    assert_eq!(cells[..4], ["other", "1", "0", "0"], "{table}");
    assert_ne!(cells[4], "-", "an age: {table}");

    // Redrive: refused on a queue no queue names, done on the DLQ.
    for not_a_dlq in ["other", "jobs"] {
        let out = cli.run(&["redrive", not_a_dlq]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("is no queue's dead-letter queue"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(c.queue_info("other").unwrap().stats.visible, 1, "untouched");
    let out = cli.run(&["redrive", "missing"]);
    assert!(
        stderr(&out).starts_with("QueueNotFound: "),
        "{}",
        stderr(&out)
    );
    let moved = cli.json(&["redrive", "jobs.dlq"]);
    assert_eq!(moved["moved"], 1, "{moved}");
    assert_eq!(c.queue_info("jobs").unwrap().stats.visible, 1);
    // --to: every message to one queue, even one sent straight to the DLQ.
    c.send("jobs.dlq", "by hand").unwrap();
    let out = cli.run(&["redrive", "jobs.dlq", "--to", "jobs.dlq"]);
    assert!(
        stderr(&out).starts_with("InvalidArgument: "),
        "{}",
        stderr(&out)
    );
    let moved = cli.json(&["redrive", "jobs.dlq", "--to", "other"]);
    assert_eq!(moved["moved"], 1, "{moved}");
    assert_eq!(c.queue_info("other").unwrap().stats.visible, 2);
}

#[test]
fn help_groups_the_connection_flags_shows_defaults_once_and_offers_json_where_it_means_something() {
    let help = |args: &[&str]| {
        let out = sluice(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let connection = [
        "--addr",
        "--token-file",
        "--tls-ca",
        "--tls-server-name",
        "--tls-client-cert",
        "--tls-client-key",
    ];
    for args in [&["--help"][..], &["send", "--help"], &["redrive", "-h"]] {
        let text = help(args);
        let (options, grouped) = text
            .split_once("\nConnection:\n")
            .unwrap_or_else(|| panic!("{args:?}: no Connection heading:\n{text}"));
        for flag in connection {
            assert!(
                !options.contains(flag),
                "{args:?}: {flag} among the options"
            );
            assert!(
                grouped.contains(flag),
                "{args:?}: {flag} not under Connection"
            );
        }
        assert!(options.contains("--json"), "{args:?}: {text}");
    }
    let subcommands: &[&[&str]] = &[
        &["queue", "create"],
        &["queue", "set"],
        &["queue", "list"],
        &["queue", "show"],
        &["send"],
        &["recv"],
        &["peek"],
        &["delete"],
        &["visibility"],
        &["redrive"],
        &["stats"],
        &["advance-clock"],
        &["tail"],
        &["ping"],
    ];
    for sub in subcommands {
        let text = help(&[sub, &["--help"][..]].concat());
        // A default shows once, clap's way, and never as a sentinel.
        assert!(!text.contains("(default"), "{sub:?}:\n{text}");
        assert!(!text.contains("4294967295"), "{sub:?}:\n{text}");
        for option in text.split("\n      --") {
            assert!(
                option.matches("[default:").count() <= 1,
                "{sub:?}: {option}"
            );
        }
    }
    assert!(help(&["redrive", "--help"]).contains("[default: all]"));
    // Nothing to connect to and nothing structured to print: neither --json
    // nor the connection flags are offered.
    for sub in ["completions", "man"] {
        let text = help(&[sub, "--help"]);
        assert!(!text.contains("--json"), "{sub}:\n{text}");
        for flag in connection {
            assert!(!text.contains(flag), "{sub}: {flag}:\n{text}");
        }
    }
}

#[test]
fn tail_stops_at_once_on_ctrl_c_in_a_long_poll_that_would_never_end() {
    // On a manual clock a long poll ends only when the clock moves, which
    // nothing here does: only stopping at once ends this tail.
    let server = TestServer::start_on("127.0.0.1:0", &["--clock", "manual"]);
    let cli = Cli::new(&server);
    cli.ok(&["queue", "create", "q"]);
    let mut child = cli
        .command(&["tail", "q", "--wait", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its receive has reached the broker: tail is in its long poll, with
    // its Ctrl-C handler installed.
    let c = server.client();
    let receives = || {
        let stats = c.server_stats().unwrap();
        stats
            .counters
            .iter()
            .find(|k| k.name == "requests_receive")
            .map_or(0, |k| k.value)
    };
    for _ in 0..PATIENCE.as_millis() / 10 {
        if receives() > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(receives() > 0, "tail never sent its receive");
    signal(&child, rustix::process::Signal::INT);
    let status = wait_bounded(&mut child);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// Counts of zero are usage errors in the CLI's words (exit 2, naming the
/// flag and its range), not an empty success or a wire detail.
#[test]
fn zero_counts_are_usage_errors() {
    let cli = Cli {
        addr: "127.0.0.1:1".to_owned(),
    };
    for (args, flag) in [
        (&["send", "q", "x", "--count", "0"][..], "--count"),
        (&["recv", "q", "--max", "0"], "--max"),
        (&["recv", "q", "--max", "1025"], "--max"),
        (&["peek", "q", "--max", "0"], "--max"),
        (&["redrive", "q", "--max", "0"], "--max"),
    ] {
        let out = cli.run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(flag) && err.contains("is not in 1.."),
            "{args:?}: {err}"
        );
        assert!(!err.contains("at byte"), "{args:?}: {err}");
    }
}

/// A broker that accepts and never answers (stopped with SIGSTOP, say):
/// the CLI says the connect timed out and after how long.
#[test]
fn a_silent_broker_is_a_connect_time_out() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cli = Cli {
        addr: silent.local_addr().unwrap().to_string(),
    };
    let out = cli.run(&["stats"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    // The client's default connect time-out.
    assert!(err.contains("timed out after 5s"), "{err}");
    assert!(!err.contains("temporarily unavailable"), "{err}");
    drop(silent);
}

/// 14,000 queues of 74-character names are more than one reply frame
/// holds: the client walks the pages and the CLI prints every queue.
#[test]
fn fourteen_thousand_long_names_are_all_listed() {
    let server = TestServer::start_on("127.0.0.1:0", &["--queues-max", "20000"]);
    let client = server.client();
    let name = |i: usize| format!("{i:05}-{}", "q".repeat(68));
    for i in 0..14_000 {
        client
            .create_queue(&name(i), &sluice_client::QueueOptions::default())
            .expect("create");
    }
    let listed = client.list_queues("").expect("list");
    assert_eq!(listed.len(), 14_000);
    assert_eq!(listed.first(), Some(&name(0)));
    assert_eq!(listed.last(), Some(&name(13_999)));
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
    let cli = Cli::new(&server);
    let out = cli.ok(&["queue", "list"]);
    let long = "q".repeat(68);
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.ends_with(&long))
        .collect();
    assert_eq!(names.len(), 14_000, "{}", &out[..out.len().min(300)]);
    assert_eq!(names.last().copied(), Some(name(13_999).as_str()));
    // A prefix pages too.
    assert_eq!(client.list_queues("0").expect("list").len(), 10_000);
}

/// A PEEK whose messages do not all fit one reply says so (protocol
/// version 3): the client's `peek_checked` and the CLI, on standard error.
#[test]
fn a_peek_cut_at_the_frame_limit_says_so() {
    let server = TestServer::start_on("127.0.0.1:0", &["--frame-bytes-max", "4KiB"]);
    let client = server.client();
    client
        .create_queue("big", &sluice_client::QueueOptions::default())
        .expect("create");
    for _ in 0..10 {
        client.send("big", vec![b'x'; 1000]).expect("send");
    }
    let all = client.peek_checked("big", 10).expect("peek");
    assert!(
        all.cut && all.messages.len() < 10,
        "{} shown",
        all.messages.len()
    );
    let two = client.peek_checked("big", 2).expect("peek");
    assert!(!two.cut && two.messages.len() == 2);
    let cli = Cli::new(&server);
    let out = cli.run(&["peek", "big", "--max", "10"]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("did not fit one reply"),
        "{}",
        stderr(&out)
    );
    let out = cli.run(&["peek", "big", "--max", "2"]);
    assert!(!stderr(&out).contains("did not fit"), "{}", stderr(&out));
}

#[test]
fn a_fifo_queue_from_the_command_line_keeps_each_group_in_order() {
    let server = TestServer::start();
    let cli = Cli::new(&server);
    cli.ok(&[
        "queue",
        "create",
        "ledger",
        "--fifo",
        "--content-based-dedup",
    ]);
    let table = cli.ok(&["queue", "show", "ledger"]);
    assert!(
        table.contains("kind                fifo, deduplicated by content\n"),
        "{table}"
    );
    let shown = cli.json(&["queue", "show", "ledger"]);
    assert_eq!(shown["attributes"]["fifo"], true);
    for (group, body) in [("a", "a1"), ("b", "b1"), ("a", "a2")] {
        cli.ok(&["send", "ledger", body, "--group", group]);
    }
    // The same body again: deduplicated by content; an own id wins.
    let dup = cli.json(&["send", "ledger", "a1", "--group", "a"]);
    assert_eq!(dup["duplicate"], true);
    let own = cli.json(&[
        "send",
        "ledger",
        "a1",
        "--group",
        "a",
        "--dedup-id",
        "again",
    ]);
    assert_eq!(own["duplicate"], false);
    let got = cli.json(&["recv", "ledger", "--max", "10"]);
    let got: Vec<(String, String)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["group"].as_str().unwrap().to_owned(),
                m["body"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let a: Vec<&str> = got
        .iter()
        .filter(|(g, _)| g == "a")
        .map(|(_, b)| b.as_str())
        .collect();
    assert_eq!(a, ["a1", "a2", "a1"]);
    assert_eq!(got.len(), 4);
    // A send without a group, and a bad group, are refused by name.
    let out = cli.run(&["send", "ledger", "x"]);
    assert!(!out.status.success());
    let out = cli.run(&["send", "ledger", "x", "--group", "has space"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--group"), "{}", stderr(&out));
    // The kind is set at creation only.
    let out = cli.run(&["queue", "set", "ledger", "--no-content-based-dedup"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = cli.json(&["queue", "show", "ledger"]);
    assert_eq!(shown["attributes"]["content_based_dedup"], false);
}
