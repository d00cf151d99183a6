//! The files beside `--snapshot PATH`, over real processes: the lock that
//! keeps a second broker off the path, what a start says when the file is
//! missing, the `.loaded-` files it keeps, and the shard count a start
//! (and `--check-snapshot`) takes from the file when `--shards` is not
//! given.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use sluice_broker::server::config::IoChoice;

use crate::server_process::{BIN, Process, start_args};
use crate::server_snapshot::{scratch, snapshot_of};
use crate::server_util::Client;

fn spawn(extra: &[&str]) -> Process {
    let args = start_args(IoChoice::Epoll, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Process::spawn(r#"exec "$@""#, &args)
}

/// Runs the server to its end (a start that is refused).
fn run(extra: &[&str]) -> Output {
    Command::new(BIN)
        .args(start_args(IoChoice::Epoll, extra))
        .env_remove("SLUICE_CONFIG")
        .env_remove("SLUICE_SHARDS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("run sluice-server")
}

fn check(path: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--check-snapshot")
        .arg(path)
        .args(extra)
        .env_remove("SLUICE_CONFIG")
        .env_remove("SLUICE_SHARDS")
        .output()
        .expect("run sluice-server --check-snapshot")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The cores a default start runs a shard on.
fn cores() -> u16 {
    let n = sluice_broker::io::allowed_cpus().map_or(1, |c| c.len());
    u16::try_from(n).unwrap_or(u16::MAX).clamp(1, 64)
}

#[test]
fn a_second_broker_on_the_same_snapshot_path_refuses_to_start_naming_the_first() {
    let dir = scratch("lock");
    let path = dir.join("shared.snapshot");
    let p = path.to_str().unwrap();
    let mut a = spawn(&["--shards", "1", "--snapshot", p]);
    let addr = a.listen_addr();
    let b = run(&["--shards", "1", "--snapshot", p]);
    let err = stderr(&b);
    assert_eq!(b.status.code(), Some(2), "{err}");
    assert!(
        err.contains("locked by another sluice-server")
            && err.contains(&format!("pid {}", a.pid())),
        "{err}"
    );
    // A's messages are what the path holds after A stops.
    let mut c = Client::connect(addr);
    c.hello(b"").expect("HELLO");
    c.create("mine", sluice_protocol::AttributeUpdate::default());
    drop(c);
    a.stop();
    let out = check(&path, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("queues: 1"));
    // The lock went with A: the next broker on the path starts.
    let mut again = spawn(&["--shards", "1", "--snapshot", p]);
    again.listen_addr();
    again.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_snapshot_gives_the_answer_the_start_gives_for_shards_and_memory() {
    let dir = scratch("check-shards");
    let path = dir.join("two.snapshot");
    std::fs::write(&path, snapshot_of(2)).unwrap();
    let out = check(&path, &["--shards", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("start it with --shards 2"),
        "{}",
        stderr(&out)
    );
    let start = run(&["--shards", "1", "--snapshot", path.to_str().unwrap()]);
    assert_eq!(start.status.code(), Some(2));
    assert!(stderr(&start).contains("start it with --shards 2"));

    let out = check(&path, &["--shards", "2", "--memory-max", "1KiB"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--memory-max"), "{}", stderr(&out));

    for extra in [&["--shards", "2"][..], &[]] {
        let out = check(&path, extra);
        assert!(out.status.success(), "{extra:?}: {}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("messages: 40"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_shards_a_start_takes_the_snapshots_shard_count() {
    let dir = scratch("file-shards");
    let path = dir.join("more.snapshot");
    // One more shard than this machine's default, as after a CPU limit
    // was lowered.
    let shards = cores() + 1;
    std::fs::write(&path, snapshot_of(shards)).unwrap();
    let p = path.to_str().unwrap();
    let given = cores().to_string();
    let refused = run(&["--shards", &given, "--snapshot", p]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains(&format!("start it with --shards {shards}")));

    let mut server = spawn(&["--snapshot", p]);
    let line = server.wait_for("starting with the snapshot's");
    assert!(
        line.contains(&format!("snapshot's {shards} shards")),
        "{line}"
    );
    let addr = server.listen_addr();
    let mut c = Client::connect(addr);
    let hello = c.hello(b"").expect("HELLO");
    assert_eq!(hello.shards, shards);
    // Every shard's section was loaded into a shard of its own.
    let loaded = server.wait_for("snapshot loaded");
    assert_eq!(
        crate::server_process::field(&loaded, "messages="),
        (20 * u32::from(shards)).to_string(),
        "{loaded}"
    );
    drop(c);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_start_after_a_crash_says_the_snapshot_is_missing_and_old_loaded_files_are_pruned() {
    let dir = scratch("missing");
    let path = dir.join("s.snapshot");
    let p = path.to_str().unwrap();
    // The first start on the path: nothing to say but that.
    let mut first = spawn(&["--shards", "2", "--snapshot", p]);
    first.wait_for("not found (the first start with this path), starting empty");
    first.listen_addr();
    first.stop();
    // Older loaded files, as earlier restarts leave them.
    for ms in [1_000_u64, 2_000, 3_000, 4_000] {
        std::fs::write(sluice_broker::snapshot::loaded_path(&path, ms), b"old").unwrap();
    }
    // The graceful stop wrote a file: the next start loads it, moves it
    // aside, and keeps the newest three loaded files (its own and two).
    let mut loaded = spawn(&["--shards", "2", "--snapshot", p, "--snapshot-keep", "3"]);
    loaded.wait_for("removed older loaded snapshots");
    loaded.listen_addr();
    let files = sluice_broker::snapshot::files::loaded_files(&path).unwrap();
    assert_eq!(files.len(), 3, "{files:?}");
    assert_eq!(
        files[..2],
        [3_000_u64, 4_000].map(|ms| sluice_broker::snapshot::loaded_path(&path, ms))
    );
    // A crash writes nothing: the next start says why it is empty.
    loaded.kill9();
    let mut after = spawn(&["--shards", "2", "--snapshot", p]);
    let line = after.wait_for("not found: the last stop was not graceful");
    assert!(line.contains(&files[2].display().to_string()), "{line}");
    after.listen_addr();
    after.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A snapshot folder removed and made again while a broker runs lets a
/// second broker lock the path; the first then refuses to write over the
/// second's file and exits non-zero saying so.
#[test]
fn a_recreated_snapshot_folder_makes_the_save_refuse() {
    let dir = scratch("recreated");
    let path = dir.join("s.snapshot");
    let p = path.to_str().unwrap();
    let mut first = spawn(&["--shards", "1", "--snapshot", p]);
    let addr = first.listen_addr();
    let mut c = Client::connect(addr);
    c.hello(b"").expect("HELLO");
    c.create("first", sluice_protocol::AttributeUpdate::default());
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let mut second = spawn(&["--shards", "1", "--snapshot", p]);
    let addr = second.listen_addr();
    let mut c = Client::connect(addr);
    c.hello(b"").expect("HELLO");
    c.create("second", sluice_protocol::AttributeUpdate::default());
    drop(c);
    let status = first.terminate();
    assert!(!status.success(), "the first broker exited {status}");
    let line = first.wait_for("no longer the file this broker locked");
    assert!(line.contains("no snapshot written"), "{line}");
    assert!(!path.exists(), "the first broker wrote the path");
    second.stop();
    let out = check(&path, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("queues: 1"), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}
