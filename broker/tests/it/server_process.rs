//! The `sluice-server` binary as an operator starts it: under `taskset`
//! (its shards stay inside the CPUs it was given) and under a lowered
//! `ulimit -n` (it warns at start and, out of descriptors, refuses new
//! connections with an error while the open ones go on), and under a
//! seccomp filter that blocks io_uring as containers' default profiles do
//! (it falls back to epoll, with a WARN line and
//! `sluice_io_backend_fallback 1`). Each needs a process of its own: CPU
//! affinity, the open-files limit and seccomp filters are per process. And
//! the binary as configured: decimal, `us` and `M` values and a
//! `sluice://` listen address are taken, a bad config file value is refused
//! with its key, line and column.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sluice_broker::server::config::IoChoice;
use sluice_protocol::{ErrorCode, ServerStatsReply};

use crate::both_backends;
use crate::server_util::Client;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_sluice-server");
/// Far above what any step here needs.
const PATIENCE: Duration = Duration::from_secs(30);

/// A `sluice-server` child process with its log lines.
pub(crate) struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Process {
    /// Runs `sh -c SCRIPT` where `"$@"` is the server and `args`.
    pub(crate) fn spawn(script: &str, args: &[&str]) -> Process {
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).arg("sh").arg(BIN).args(args);
        Process::start(command)
    }

    /// Starts `command`, its standard error read line by line.
    fn start(mut command: Command) -> Process {
        let mut child = command
            .env_remove("SLUICE_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice-server");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Process {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Waits for a log line containing `needle`; returns it.
    pub(crate) fn wait_for(&mut self, needle: &str) -> String {
        if let Some(l) = self.log.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.log.push(line.clone());
                    if hit {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no log line with `{needle}` within {PATIENCE:?}; the log:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    /// A client connected to the server, past its HELLO.
    pub(crate) fn client(&mut self) -> Client {
        let mut c = Client::connect(self.listen_addr());
        c.hello(b"").expect("HELLO");
        c
    }

    /// The client address from the "serving" line.
    pub(crate) fn listen_addr(&mut self) -> SocketAddr {
        let line = self.wait_for("sluice is serving");
        field(&line, "listen=")
            .parse()
            .unwrap_or_else(|e| panic!("listen address in `{line}`: {e}"))
    }

    /// Sends SIGTERM and waits for a clean exit.
    /// The server's pid (the shell `exec`s it).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends the server with SIGKILL: no drain, no snapshot.
    pub(crate) fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit: its status.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the server") {
                return status;
            }
            assert!(Instant::now() < deadline, "sluice-server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn stop(mut self) {
        let status = self.terminate();
        assert!(status.success(), "sluice-server exited with {status}");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `name` (e.g. `listen=`) in a tracing log line.
pub(crate) fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let start = line
        .find(name)
        .unwrap_or_else(|| panic!("no `{name}` in `{line}`"))
        + name.len();
    line[start..].split_whitespace().next().unwrap_or("")
}

fn counter(stats: &ServerStatsReply, name: &str) -> u64 {
    stats
        .counters
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no counter {name} in {stats:?}"))
        .value
}

/// The CPUs a thread of `pid` named `comm` may run on, as the kernel lists
/// them (`Cpus_allowed_list`, e.g. `1` or `0-1`).
fn thread_cpus(pid: u32, comm: &str) -> Option<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if name.trim() != comm {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).ok()?;
        return status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_owned());
    }
    None
}

/// This test process's CPUs, from its own status.
fn own_cpus() -> Vec<usize> {
    sluice_broker::io::allowed_cpus().expect("sched_getaffinity")
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Skips (outside CI) or fails (in CI) when `tool` is missing.
fn require(tool: &str) -> bool {
    if have(tool) {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "`{tool}` is missing and CI=true: install it (util-linux)"
    );
    eprintln!("skipped: `{tool}` is not installed");
    false
}

pub(crate) fn start_args(io: IoChoice, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--metrics-addr",
        "off",
        "--sqs-listen",
        "off",
        "--memory-max",
        "64MiB",
        "--log",
        "info",
        "--io",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(io.to_string());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn shard_cpus_follow_the_affinity_mask(io: IoChoice) {
    if !require("taskset") {
        return;
    }
    let cpus = own_cpus();
    // The last CPU we may use: on a machine with two or more, not CPU 0, so
    // a shard pinned to "CPU 0" (its index) would be caught.
    let cpu = *cpus.last().expect("at least one CPU");
    let cases: [(&[&str], String); 3] = [
        // auto: shard 0 on the first (only) CPU of the mask.
        (&["--shards", "1"], cpu.to_string()),
        // none: left to the scheduler, inside the mask.
        (&["--shards", "1", "--cpus", "none"], cpu.to_string()),
        // an explicit list inside the mask.
        (&["--cpus", &cpu.to_string()], cpu.to_string()),
    ];
    for (extra, want) in cases {
        let args = start_args(io, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut p = Process::spawn(&format!("exec taskset -c {cpu} \"$@\""), &args);
        let addr = p.listen_addr();
        let got = thread_cpus(p.child.id(), "sluice-shard-0");
        assert_eq!(got.as_deref(), Some(want.as_str()), "{extra:?}");
        let mut c = Client::connect(addr);
        c.hello(b"").expect("HELLO");
        c.ping();
        drop(c);
        p.stop();
    }
    // Two CPUs given, two shards: one on each, in order.
    if cpus.len() >= 2 {
        let (a, b) = (cpus[cpus.len() - 2], cpus[cpus.len() - 1]);
        let args = start_args(io, &["--shards", "2"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut p = Process::spawn(&format!("exec taskset -c {a},{b} \"$@\""), &args);
        p.listen_addr();
        let pid = p.child.id();
        assert_eq!(thread_cpus(pid, "sluice-shard-0"), Some(a.to_string()));
        assert_eq!(thread_cpus(pid, "sluice-shard-1"), Some(b.to_string()));
        p.stop();
    }
}

fn a_cpu_outside_the_mask_is_refused_at_start(io: IoChoice) {
    if !require("taskset") {
        return;
    }
    let cpus = own_cpus();
    if cpus.len() < 2 {
        eprintln!("skipped: this process may use one CPU only");
        return;
    }
    let (inside, outside) = (cpus[0], cpus[1]);
    let args = start_args(io, &["--cpus", &outside.to_string()]);
    let out = Command::new("taskset")
        .args(["-c", &inside.to_string(), BIN])
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice-server");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "--cpus names CPU {outside}, which this process may not run on"
        )),
        "{err}"
    );
}

fn out_of_descriptors_refuses_new_connections_and_keeps_the_open_ones(io: IoChoice) {
    // `ulimit -n 64` lowers the hard limit too, so the server cannot raise
    // it: it warns, then runs out after some 40 connections.
    let args = start_args(io, &["--shards", "1"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut p = Process::spawn("ulimit -n 64 && exec \"$@\"", &args);
    let addr = p.listen_addr();
    let warning = p.wait_for("open-files limit (64) is below what --max-connections 10000 needs");
    assert!(warning.contains("WARN"), "{warning}");

    let mut first = Client::connect(addr);
    first.hello(b"").expect("HELLO");
    let mut open = Vec::new();
    let mut refused = None;
    for attempt in 0..200 {
        let mut c = Client::connect(addr);
        match c.hello(b"") {
            Ok(_) => open.push(c),
            Err(e) => {
                refused = Some((attempt, e));
                break;
            }
        }
    }
    let (attempt, error) = refused.expect("some connection refused under ulimit -n 64");
    assert!(attempt >= 10, "refused after only {attempt} connections");
    // The refusal comes from the reserve descriptor: an error frame, or (if
    // the close overtook it) the connection ending at once: never a hang.
    assert!(
        matches!(
            error.code,
            ErrorCode::TooManyConnections | ErrorCode::Internal
        ),
        "{error:?}"
    );
    let line = p.wait_for("cannot accept connections: out of file descriptors");
    assert!(line.contains("WARN"), "{line}");

    // The open connections go on, and the refusal was counted.
    first.ping();
    for c in &mut open {
        c.ping();
    }
    let stats = first.server_stats();
    assert!(counter(&stats, "accept_failures") >= 1, "{stats:?}");
    assert!(counter(&stats, "connections_refused") >= 1, "{stats:?}");

    // Descriptors freed: new connections are accepted again.
    open.truncate(open.len().saturating_sub(5));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut c = Client::connect(addr);
        if c.hello(b"").is_ok() {
            c.ping();
            break;
        }
        assert!(Instant::now() < deadline, "no connection accepted again");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(open);
    drop(first);
    p.stop();
}

/// On a TLS port the refusal out of descriptors, sent before any
/// handshake, is a TLS `internal_error` alert a TLS client can read, never
/// a plain-text ERROR frame (a corrupt record to it).
fn out_of_descriptors_on_a_tls_port_refuses_with_a_tls_alert(io: IoChoice) {
    const ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50];
    let pki = sluice_broker::testing::TestPki::generate();
    let mut extra: Vec<String> = pki.server_args();
    extra.extend(["--shards", "1", "--hello-timeout", "60s"].map(String::from));
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let args = start_args(io, &extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut p = Process::spawn("ulimit -n 64 && exec \"$@\"", &args);
    let addr = p.listen_addr();
    // More connections than descriptors, none sending anything: the
    // server holds what it can, and sheds the rest.
    let conns: Vec<std::net::TcpStream> = (0..100)
        .map(|_| {
            let s = std::net::TcpStream::connect_timeout(&addr, PATIENCE).expect("connect");
            s.set_read_timeout(Some(PATIENCE)).expect("a read time-out");
            s
        })
        .collect();
    p.wait_for("cannot accept connections: out of file descriptors");
    // Each ends its side: a held one closes with nothing to say (no
    // handshake began), a shed one has its alert waiting. The last ones
    // first: they are the ones still waiting to be accepted, which the
    // server, out of descriptors, sheds; a held one closed first would
    // free a descriptor, and the next would be taken instead of shed (a
    // loaded machine, slow to get to the shedding, failed this test so).
    let mut alerts = 0;
    for mut s in conns.into_iter().rev() {
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut got);
        assert!(got.is_empty() || got == ALERT, "a TLS port sent {got:02x?}");
        alerts += usize::from(got == ALERT);
    }
    assert!(alerts >= 1, "no connection was shed with the alert");
    p.stop();
}

/// A server whose log reader went away (`sluice-server 2>&1 | head`, a log
/// shipper that died) still shuts down on SIGTERM: writing a log line to
/// the broken pipe must not take the signal thread (or a shard) down.
fn sigterm_stops_the_server_after_its_log_reader_is_gone(io: IoChoice) {
    let args = start_args(io, &["--shards", "2"]);
    let mut child = Command::new(BIN)
        .args(&args)
        .env_remove("SLUICE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice-server");
    let mut log = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut line = String::new();
    let addr: SocketAddr = loop {
        line.clear();
        let n = log.read_line(&mut line).expect("read the log");
        assert!(n > 0, "the server exited before serving");
        if line.contains("sluice is serving") {
            break field(&line, "listen=").parse().expect("listen address");
        }
    };
    // Close the read end of the log pipe: every later log line fails to
    // be written.
    drop(log);
    let mut c = Client::connect(addr);
    c.hello(b"").expect("HELLO");
    c.ping();
    drop(c);
    let pid = child.id().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the server") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice-server ignored SIGTERM once its log pipe was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "sluice-server exited with {status}");
}

/// A seccomp filter, installed in the child before it runs the server,
/// that fails `io_uring_setup` with `EPERM` and allows every other call:
/// what container runtimes' default profiles do to io_uring.
fn deny_io_uring(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let nr = u32::try_from(libc::SYS_io_uring_setup).expect("a syscall number");
    let filter = [
        // A = seccomp_data.nr (offset 0).
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // io_uring_setup: the next instruction; else skip it.
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    // SAFETY: the closure runs in the forked child before exec and only
    // makes two prctl calls (async-signal-safe system calls); the filter it
    // points to was built before the fork and is moved into the closure,
    // so it lives in the child's copy of memory while the kernel copies it.
    unsafe {
        command.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &raw const prog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Where io_uring is blocked (as by a container's default seccomp
/// profile), `--io auto` falls back to epoll and says so in a WARN line
/// and in `/metrics`; `--io uring` refuses to start.
#[test]
fn a_blocked_io_uring_falls_back_to_epoll_loudly() {
    let mut command = Command::new(BIN);
    command.args([
        "--listen",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
        "--sqs-listen",
        "off",
        "--shards",
        "1",
        "--memory-max",
        "64MiB",
        "--io",
        "auto",
    ]);
    deny_io_uring(&mut command);
    let mut server = Process::start(command);
    let warning = server.wait_for("IO_URING UNAVAILABLE");
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("Operation not permitted"), "{warning}");
    assert!(warning.contains("sluice_io_backend_fallback"), "{warning}");
    let serving = server.wait_for("sluice is serving");
    assert!(serving.contains("backend=epoll"), "{serving}");
    let metrics: SocketAddr = field(&serving, "metrics=")
        .parse()
        .unwrap_or_else(|e| panic!("metrics address in `{serving}`: {e}"));
    let text = http_get(metrics, "/metrics");
    for line in [
        "sluice_io_backend_fallback 1\n",
        "sluice_io_backend{backend=\"epoll\"} 1\n",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    let mut c = Client::connect(server.listen_addr());
    c.hello(b"").expect("HELLO");
    assert_eq!(c.server_stats().io_backend, "epoll");
    drop(c);
    server.stop();

    // Asked for io_uring outright: no fallback, a refusal to start.
    let mut command = Command::new(BIN);
    command.args([
        "--listen",
        "127.0.0.1:0",
        "--metrics-addr",
        "off",
        "--sqs-listen",
        "off",
        "--memory-max",
        "64MiB",
        "--io",
        "uring",
    ]);
    deny_io_uring(&mut command);
    let out = command
        .env_remove("SLUICE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run sluice-server");
    assert!(!out.status.success(), "started without io_uring");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("io_uring"), "{stderr}");
}

/// A GET over a fresh connection: the body of a 200 reply.
fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to metrics");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("the response");
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    text
}

both_backends!(
    sigterm_stops_the_server_after_its_log_reader_is_gone,
    shard_cpus_follow_the_affinity_mask,
    a_cpu_outside_the_mask_is_refused_at_start,
    out_of_descriptors_refuses_new_connections_and_keeps_the_open_ones,
    out_of_descriptors_on_a_tls_port_refuses_with_a_tls_alert,
);

/// The shared grammar end to end: a URL for `--listen`, a decimal duration,
/// microseconds and a decimal binary size are taken, and the logged
/// effective configuration shows what they were read as.
#[test]
fn the_binary_takes_decimal_and_short_forms() {
    let mut server = Process::spawn(
        "exec \"$@\"",
        &[
            "--listen",
            "sluice://127.0.0.1:0",
            "--metrics-addr",
            "off",
            "--sqs-listen",
            "off",
            "--shards",
            "1",
            "--memory-max",
            "0.0625GiB",
            "--hello-timeout",
            "1.5s",
            "--idle-spin",
            "250us",
            "--unsent-bytes-max",
            "1.5M",
            "--io",
            "epoll",
        ],
    );
    server.wait_for("hello_timeout = \"1s500ms\"");
    server.wait_for("idle_spin = \"250us\"");
    server.wait_for("unsent_bytes_max = \"1536KiB\"");
    server.wait_for("memory_max = \"64MiB\"");
    let addr = server.listen_addr();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    server.stop();
}

/// A config file with a bad value stops the binary before it starts, with
/// exit status 2 and the key, line and column on standard error.
#[test]
fn a_bad_config_file_value_is_refused_with_its_position() {
    let path = std::env::temp_dir().join(format!("sluice-bad-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "# the broker\nlisten = \"127.0.0.1:0\"\nhello_timeout = \"10 parsecs\"\n",
    )
    .expect("write the config file");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .env_remove("SLUICE_CONFIG")
        .output()
        .expect("run sluice-server");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 3, column 17: bad value for `hello_timeout`")
            && stderr.contains("parsecs"),
        "{stderr}"
    );
}
