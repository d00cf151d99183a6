//! A `sluice-server` child process: started on a free loopback port with
//! its log captured, measured through `/proc` (descriptors, RSS), stopped
//! with SIGTERM (or killed when dropped).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

use super::ChaosError;

/// How long a server may take to log that it serves.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Log lines kept for the report (a run logs a few dozen; a broken one
/// could log without end).
const LOG_LINES_MAX: usize = 100_000;

/// How to start the server.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// The `sluice-server` binary.
    pub binary: PathBuf,
    /// `--shards`.
    pub shards: u16,
    /// `--cpus` (`none`, `auto` or a list).
    pub cpus: String,
    /// Further flags; one the suite also sets replaces the suite's.
    pub extra: Vec<String>,
}

impl ServerSpec {
    /// The `sluice-server` beside this executable (how cargo lays out a
    /// workspace's binaries).
    #[must_use]
    pub fn default_binary() -> PathBuf {
        let here = std::env::current_exe().unwrap_or_default();
        here.parent()
            .map_or_else(|| PathBuf::from("sluice-server"), Path::to_path_buf)
            .join("sluice-server")
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    args: Vec<String>,
}

impl ServerProcess {
    /// Starts the server with `flags` (pairs of flag and value, such as
    /// `--memory-max 8MiB`) added to the spec's, and waits until it serves.
    ///
    /// # Errors
    /// The binary cannot be run, or the server exits or stays silent
    /// before it serves.
    pub fn start(spec: &ServerSpec, flags: &[&str]) -> Result<ServerProcess, ChaosError> {
        let shards = spec.shards.to_string();
        let mut pairs: Vec<(&str, &str)> = vec![
            ("--listen", "127.0.0.1:0"),
            ("--metrics-addr", "off"),
            ("--sqs-listen", "off"),
            ("--log", "info"),
            ("--shards", &shards),
            ("--cpus", &spec.cpus),
        ];
        pairs.extend(
            flags
                .chunks(2)
                .map(|kv| (kv[0], kv.get(1).copied().unwrap_or(""))),
        );
        // A flag given in `extra` replaces the suite's own (the server
        // refuses a flag given twice).
        let overridden: Vec<&str> = spec
            .extra
            .iter()
            .filter_map(|a| a.strip_prefix("--"))
            .map(|a| a.split('=').next().unwrap_or(a))
            .collect();
        let mut args: Vec<String> = Vec::new();
        for (flag, value) in pairs {
            if !overridden.contains(&flag.trim_start_matches("--")) {
                args.extend([flag.to_owned(), value.to_owned()]);
            }
        }
        args.extend(spec.extra.iter().cloned());
        let mut child = Command::new(&spec.binary)
            .args(&args)
            .env_remove("SLUICE_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ChaosError::Setup(format!("cannot run {}: {e}", spec.binary.display())))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| ChaosError::Setup("no stderr pipe".into()))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
        let sink = Arc::clone(&log);
        std::thread::Builder::new()
            .name("chaos-server-log".into())
            .spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("sluice is serving") {
                        if let Some(addr) = field(&line, "listen=").and_then(|a| a.parse().ok()) {
                            let _ = tx.send(addr);
                        }
                    }
                    let mut log = sink.lock().unwrap_or_else(PoisonError::into_inner);
                    if log.len() < LOG_LINES_MAX {
                        log.push(line);
                    }
                }
            })
            .map_err(|e| ChaosError::Setup(format!("log thread: {e}")))?;
        let addr = match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                let log = log
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .join("\n");
                return Err(ChaosError::Setup(format!(
                    "{} {} did not start serving within {START_TIMEOUT:?} ({status:?}); its log:\n{log}",
                    spec.binary.display(),
                    args.join(" ")
                )));
            }
        };
        Ok(ServerProcess {
            child,
            addr,
            log,
            args,
        })
    }

    /// The client address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address as the client takes it.
    #[must_use]
    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    /// The flags it was started with.
    #[must_use]
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Its process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Open file descriptors, counted in `/proc/PID/fd`.
    #[must_use]
    pub fn fds(&self) -> Option<u64> {
        proc_fds(self.pid())
    }

    /// Resident and peak resident memory, bytes.
    #[must_use]
    pub fn memory(&self) -> Option<ProcMemory> {
        proc_memory(self.pid())
    }

    /// Log lines so far.
    #[must_use]
    pub fn log(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Log lines at WARN or ERROR level so far.
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        self.log().into_iter().filter(|l| is_warning(l)).collect()
    }

    /// Sends SIGTERM.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn sigterm(&self) -> Result<(), ChaosError> {
        let pid = i32::try_from(self.pid())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| ChaosError::Setup("bad server pid".into()))?;
        kill_process(pid, Signal::TERM)
            .map_err(|e| ChaosError::Setup(format!("SIGTERM to the server: {e}")))
    }

    /// Waits up to `limit` for the process to exit: its status and how
    /// long it took, or `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some((status, start.elapsed()));
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the server with SIGKILL (no drain, no shutdown) and waits for
    /// it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server with SIGTERM and waits for it (killing it after
    /// `limit`): its exit status, `None` when it had to be killed.
    pub fn stop(mut self, limit: Duration) -> Option<ExitStatus> {
        if self.sigterm().is_err() {
            return None;
        }
        self.wait_exit(limit).map(|(s, _)| s)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Whether a log line (tracing's plain format) is at WARN or ERROR level.
#[must_use]
pub fn is_warning(line: &str) -> bool {
    // `2026-12-01T20:12:11.045022Z  WARN target: message`: the level is the
    // second word.
    matches!(line.split_whitespace().nth(1), Some("WARN" | "ERROR"))
}

/// The value of `name` (e.g. `listen=`) in a tracing log line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(name)? + name.len();
    line[start..].split_whitespace().next()
}

/// Open descriptors of a process.
#[must_use]
pub fn proc_fds(pid: u32) -> Option<u64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(dir.count() as u64)
}

/// What each open descriptor of a process is (`socket:[INODE]`,
/// `pipe:[INODE]`, `anon_inode:[io_uring]`, a path; empty when it closed
/// while being read). `None` when the process's descriptors cannot be
/// listed.
#[must_use]
pub fn proc_fd_targets(pid: u32) -> Option<Vec<String>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        dir.flatten()
            .map(|entry| {
                std::fs::read_link(entry.path())
                    .map(|t| t.display().to_string())
                    .unwrap_or_default()
            })
            .collect(),
    )
}

/// What a process's descriptors are, by kind (`socket`, `pipe`,
/// `anon_inode:[io_uring]`, a path), with counts: for reports on leaks.
#[must_use]
pub fn proc_fd_kinds(pid: u32) -> String {
    let Some(targets) = proc_fd_targets(pid) else {
        return "unknown".into();
    };
    let mut kinds = std::collections::BTreeMap::<String, u32>::new();
    for target in targets {
        let kind = target.split(":[").next().unwrap_or("").to_owned();
        let kind = if kind.starts_with("anon_inode") {
            target
        } else {
            kind
        };
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
        .iter()
        .map(|(k, n)| format!("{k} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Memory of a process, from `/proc/PID/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcMemory {
    /// `VmRSS`, bytes.
    pub rss_bytes: u64,
    /// `VmHWM` (peak RSS), bytes.
    pub peak_bytes: u64,
}

/// Memory of a process.
#[must_use]
pub fn proc_memory(pid: u32) -> Option<ProcMemory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].split_whitespace().next()?.parse().ok()
    };
    Some(ProcMemory {
        rss_bytes: kib("VmRSS:")? * 1024,
        peak_bytes: kib("VmHWM:")? * 1024,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_found_by_level() {
        assert!(is_warning(
            "2026-12-01T20:12:11.045022Z  WARN sluice_broker::server: out of descriptors"
        ));
        assert!(is_warning("2026-12-01T20:12:11Z ERROR x: y"));
        assert!(!is_warning(
            "2026-12-01T20:12:11Z  INFO sluice_broker::server: WARN in a message"
        ));
        assert!(!is_warning("queues_max = 10000"));
    }

    #[test]
    fn this_process_is_measured() {
        let me = std::process::id();
        assert!(proc_fds(me).is_some_and(|n| n >= 3));
        let m = proc_memory(me).expect("own status");
        assert!(m.rss_bytes > 0 && m.peak_bytes >= m.rss_bytes);
    }

    #[test]
    fn the_listen_field_is_read() {
        let line = "INFO x: sluice is serving listen=127.0.0.1:3 metrics=off";
        assert_eq!(field(line, "listen="), Some("127.0.0.1:3"));
        assert_eq!(field(line, "nope="), None);
    }
}
