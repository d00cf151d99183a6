//! A full disk under `--durability always`, for real: the broker's log
//! folder on a small tmpfs, in a mount namespace of its own, filled by a
//! ballast file. A send whose records cannot be written waits, unanswered;
//! meanwhile sends and deletes are refused with `Busy`, saying why, and
//! receives are served; once the ballast goes, the retry writes the
//! records, the waiting send is answered, changes are taken again, and a
//! SIGKILL then loses nothing acknowledged. And a start after a crash on
//! a full disk replays its logs whole and goes on with them when the
//! checkpoint that would cut them cannot be written.
//!
//! Mounting needs root (CI runs as root): elsewhere the test skips, saying
//! so.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use sluice_broker::server::config::IoChoice;
use sluice_protocol::{AttributeUpdate, ErrorCode, Reply, Request, SendEntry, SendRequest};

use crate::server_metrics::http_get;
use crate::server_process::{Process, field, start_args};
use crate::server_snapshot::scratch;
use crate::server_util::name;

/// A tmpfs of `size` at `dir`, mounted in a mount namespace that a
/// sleeping process keeps alive: servers join it with `nsenter`, the test
/// reaches its files through `/proc/PID/root`.
struct Tmpfs {
    holder: Child,
    dir: PathBuf,
}

impl Tmpfs {
    /// `None` when mounting is not allowed here (and this is not CI).
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let script =
            r#"mount -t tmpfs -o "size=$1" sluice-test "$0" && echo mounted && exec sleep 600"#;
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", script])
            .arg(dir)
            .arg(size)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let mut line = String::new();
        let out = holder.stdout.take().expect("piped stdout");
        let _ = BufReader::new(out).read_line(&mut line);
        if line.trim() != "mounted" {
            let _ = holder.kill();
            let _ = holder.wait();
            assert!(
                std::env::var_os("CI").is_none(),
                "CI=true, yet a tmpfs could not be mounted in a mount namespace of its own \
                 (`unshare --mount` as root)"
            );
            eprintln!("skipped: mounting a tmpfs needs root (unshare --mount)");
            return None;
        }
        Some(Tmpfs {
            holder,
            dir: dir.to_owned(),
        })
    }

    /// `name` inside the tmpfs, as this process reaches it.
    fn outside(&self, name: &str) -> PathBuf {
        let inside = self.dir.join(name);
        let rel = inside.strip_prefix("/").expect("an absolute path");
        Path::new(&format!("/proc/{}/root", self.holder.id())).join(rel)
    }

    /// Fills the tmpfs with `ballast` until it is full.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.outside("ballast")).expect("create the ballast");
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
    }

    /// Gives the ballast's room back.
    fn free(&self) {
        std::fs::remove_file(self.outside("ballast")).expect("remove the ballast");
    }

    /// `sluice-server --durability DURABILITY` on one shard, its log in
    /// the tmpfs.
    fn start(&self, durability: &str) -> Process {
        let log = self.dir.join("log");
        let args = start_args(
            IoChoice::Epoll,
            &[
                "--shards",
                "1",
                "--durability",
                durability,
                "--log-dir",
                log.to_str().expect("a UTF-8 path"),
            ],
        );
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        // Metrics on, on a port of their own.
        if let Some(i) = args.iter().position(|a| *a == "--metrics-addr") {
            args[i + 1] = "127.0.0.1:0";
        }
        let script = format!(r#"exec nsenter --target {} --mount "$@""#, self.holder.id());
        Process::spawn(&script, &args)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The value of the metric line starting `name` (labels included).
fn metric(server: &mut Process, name: &str) -> f64 {
    let serving = server.wait_for("sluice is serving");
    let addr: SocketAddr = field(&serving, "metrics=")
        .parse()
        .unwrap_or_else(|e| panic!("metrics address in `{serving}`: {e}"));
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200);
    body.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{body}"))
}

/// A SEND of `bodies` to `queue`, 1 KiB each (a log write needs room).
fn send_request(queue: &str, prefix: &str, n: usize) -> (Request, Vec<Vec<u8>>) {
    let bodies: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut b = format!("{prefix}-{i}-").into_bytes();
            b.resize(1024, b'.');
            b
        })
        .collect();
    let entries: Vec<SendEntry> = bodies
        .iter()
        .map(|b| SendEntry::new(Bytes::copy_from_slice(b)))
        .collect();
    let req = SendRequest::new(name(queue), &entries).expect("a send request");
    (Request::Send(req), bodies)
}

fn all_sent(reply: &Reply) -> bool {
    matches!(reply, Reply::Send { results } if results.iter().all(Result::is_ok))
}

/// The ERROR a request-level refusal is: `Busy`, naming the full disk.
fn busy_for_the_disk(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e) if e.code == ErrorCode::Busy
        && e.message.contains("No space left on device"))
}

#[test]
fn always_refuses_changes_on_a_full_disk_serves_receives_and_loses_nothing() {
    full_disk("always");
}

/// The same under `batch`, where the send taken before the write failed
/// is answered at once (its records are synced once written, within the
/// interval of the recovery).
#[test]
fn batch_refuses_changes_on_a_full_disk_serves_receives_and_loses_nothing() {
    full_disk("batch");
}

fn full_disk(durability: &str) {
    let dir = scratch(&format!("wal-full-disk-{durability}"));
    let Some(fs) = Tmpfs::mount(&dir, "8m") else {
        return;
    };
    let mut server = fs.start(durability);
    let mut a = server.client();
    let mut b = server.client();
    a.create("work", AttributeUpdate::default());
    let (first, mut kept) = send_request("work", "before", 20);
    assert!(all_sent(&a.call(first)));

    // The disk fills up: a's send is taken, its records are not written
    // (under always its reply waits for them).
    fs.fill();
    let (waiting, bodies) = send_request("work", "waiting", 50);
    let waiting_id = a.send(&waiting);
    kept.extend(bodies);
    server.wait_for("the write-ahead log cannot be written");
    let (refused, _) = send_request("work", "refused", 5);
    let reply = b.call(refused);
    assert!(busy_for_the_disk(&reply), "{reply:?}");
    // Receives go on: every message is in memory, a's too.
    let got = b.receive("work", 100, Some(60_000), 0);
    assert_eq!(got.len(), 70, "every message received");
    let receipts: Vec<_> = got.iter().take(10).map(|m| m.receipt).collect();
    let delete = Request::Delete(sluice_protocol::DeleteRequest {
        queue: name("work"),
        receipts: receipts.clone(),
    });
    let reply = b.call(delete);
    assert!(busy_for_the_disk(&reply), "{reply:?}");
    assert_eq!(metric(&mut server, "sluice_log_failing{"), 1.0);
    assert!(metric(&mut server, "sluice_log_failures_total{") >= 1.0);

    // Room again: the retry writes the records, a's send is answered, and
    // changes are taken again.
    fs.free();
    assert!(
        all_sent(&a.wait(waiting_id)),
        "the waiting send is answered"
    );
    server.wait_for("the write-ahead log is written again");
    assert_eq!(metric(&mut server, "sluice_log_failing{"), 0.0);
    assert!(b.delete("work", &receipts).iter().all(Result::is_ok));
    let deleted: Vec<Vec<u8>> = got.iter().take(10).map(|m| m.body.to_vec()).collect();
    let (after, bodies) = send_request("work", "after", 5);
    assert!(all_sent(&b.call(after)));
    kept.extend(bodies);
    kept.retain(|body| !deleted.contains(body));
    kept.sort();
    // A crash loses nothing that was acknowledged (under batch: once the
    // turn's end has written it, and the interval of 100 ms synced it).
    if durability == "batch" {
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    server.kill9();
    let mut server = fs.start(durability);
    let mut c = server.client();
    let mut left = BTreeMap::new();
    loop {
        let got = c.receive("work", 100, Some(60_000), 0);
        if got.is_empty() {
            break;
        }
        for m in got {
            assert!(
                left.insert(m.body.to_vec(), ()).is_none(),
                "twice: {:?}",
                m.body
            );
        }
    }
    assert_eq!(left.into_keys().collect::<Vec<_>>(), kept);
    server.kill9();
}

/// A start after a crash, on a full disk: the replay is whole, the
/// checkpoint that would cut the log cannot be written, and the broker goes
/// on with the logs it replayed; the next start, with room again, writes
/// its checkpoint.
#[test]
fn a_start_on_a_full_disk_keeps_the_logs_it_replayed() {
    let dir = scratch("wal-full-start");
    let Some(fs) = Tmpfs::mount(&dir, "8m") else {
        return;
    };
    let mut server = fs.start("always");
    let mut c = server.client();
    c.create("work", AttributeUpdate::default());
    let (sent, _) = send_request("work", "kept", 200);
    assert!(all_sent(&c.call(sent)));
    drop(c);
    server.kill9();

    fs.fill();
    let mut server = fs.start("always");
    server.wait_for("could not be written as a checkpoint");
    assert_eq!(server.client().stats("work").visible, 200);
    server.kill9();

    fs.free();
    let mut server = fs.start("always");
    server.wait_for("the replayed state is the new checkpoint");
    assert_eq!(server.client().stats("work").visible, 200);
    server.kill9();
}
