//! Starting and stopping peer brokers for the tests.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a peer may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Fresh ports tried when a peer fails to start (another process took the port).
const START_ATTEMPTS: usize = 5;

/// The peer brokers the tests run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerKind {
    Redis,
    Beanstalkd,
    Nats,
    /// moto's SQS server, from the virtualenv `.ci/run` makes
    /// (`target/venv-moto`, `benches/moto-requirements.txt`).
    Moto,
}

impl PeerKind {
    fn binary(self) -> &'static str {
        match self {
            PeerKind::Redis => "redis-server",
            PeerKind::Beanstalkd => "beanstalkd",
            PeerKind::Nats => "nats-server",
            PeerKind::Moto => "moto_server",
        }
    }

    /// How to install it.
    fn install(self) -> &'static str {
        match self {
            PeerKind::Redis => "apt-get install -y redis-server",
            PeerKind::Beanstalkd => "apt-get install -y beanstalkd",
            PeerKind::Nats => "apt-get install -y nats-server",
            PeerKind::Moto => {
                "python3 -m venv target/venv-moto && \
                 target/venv-moto/bin/pip install -r benches/moto-requirements.txt"
            }
        }
    }

    fn scheme(self) -> &'static str {
        match self {
            PeerKind::Redis => "redis",
            PeerKind::Beanstalkd => "beanstalkd",
            PeerKind::Nats => "nats",
            PeerKind::Moto => "sqs",
        }
    }

    /// Where the binary is: moto's in the workspace's virtualenv, the
    /// others on the path.
    fn find(self) -> Option<PathBuf> {
        match self {
            PeerKind::Moto => {
                let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/venv-moto/bin");
                Some(venv.join(self.binary())).filter(|p| p.is_file())
            }
            _ => find_binary(self.binary()),
        }
    }
}

/// A running peer, stopped (by process id) and its directory removed on drop.
pub struct Peer {
    child: Child,
    dir: PathBuf,
    pub kind: PeerKind,
    pub port: u16,
}

impl Peer {
    /// `scheme://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.kind.scheme(), self.port)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

/// Whether the process `pid` itself listens on loopback `port`.
///
/// A connect that succeeds is not enough: while a peer starts, another
/// test's peer may already hold the same port (the one this peer then fails
/// to bind), or the connect may pick `port` as its own source port and
/// connect to itself, holding the port so that the peer cannot bind it.
/// Either way the test would go on with a server that is not its own. So
/// the check finds the listening sockets on `port` in `/proc/net/tcp` and
/// looks for one of them among the process's open files; elsewhere than
/// Linux, it falls back to a connect.
fn listening(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return TcpStream::connect(("127.0.0.1", port)).is_ok();
    };
    let inodes = listen_inodes(&table, port);
    if inodes.is_empty() {
        return false;
    }
    let Some(targets) = sluice_loadgen::chaos::server::proc_fd_targets(pid) else {
        return false;
    };
    targets.iter().any(|target| {
        target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
            .is_some_and(|inode| inodes.iter().any(|i| i == inode))
    })
}

/// The inodes of the sockets listening on `port`, from `/proc/net/tcp`'s
/// text (local address `IP:PORT` in hex, state `0A` is LISTEN).
fn listen_inodes(table: &str, port: u16) -> Vec<String> {
    let want = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            (local.ends_with(&want) && *state == "0A").then(|| (*inode).to_owned())
        })
        .collect()
}

#[test]
fn listen_inodes_picks_the_listener_on_the_port() {
    let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:B0E7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0
   1: 0100007F:B0E7 0100007F:B0E7 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0
   2: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0
   3: short line
";
    // 0xB0E7 = 45287: the listener, not the self-connected socket on it.
    assert_eq!(listen_inodes(table, 45287), vec!["4242".to_owned()]);
    assert_eq!(listen_inodes(table, 80), vec!["4444".to_owned()]);
    assert!(listen_inodes(table, 81).is_empty());
    assert!(listen_inodes("", 80).is_empty());
}

#[test]
fn a_listener_of_this_process_is_found_and_a_bare_port_is_not() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("local address").port();
    assert!(listening(std::process::id(), port));
    drop(listener);
    assert!(!listening(std::process::id(), port));
}

fn command(kind: PeerKind, binary: &Path, port: u16, dir: &Path, extra: &[&str]) -> Command {
    let port = port.to_string();
    let mut c = Command::new(binary);
    match kind {
        PeerKind::Redis => {
            c.args([
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--dir".as_ref(), dir.as_os_str()]);
        }
        PeerKind::Beanstalkd => {
            c.args(["-l", "127.0.0.1", "-p", &port]);
        }
        PeerKind::Nats => {
            c.args(["-js", "-a", "127.0.0.1", "-p", &port, "-sd"])
                .arg(dir);
        }
        PeerKind::Moto => {
            c.args(["-H", "127.0.0.1", "-p", &port]).current_dir(dir);
        }
    }
    c.args(extra);
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Starts a peer, or returns `None` (saying why) when its binary is missing
/// and `CI` is not `true`.
pub fn start(kind: PeerKind) -> Option<Peer> {
    start_with(kind, &[])
}

/// [`start`] with extra command-line arguments for the peer.
pub fn start_with(kind: PeerKind, extra: &[&str]) -> Option<Peer> {
    let Some(binary) = kind.find() else {
        let reason = format!(
            "{} not found: install it with `{}`",
            kind.binary(),
            kind.install()
        );
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true and {reason}");
        }
        eprintln!("skipping: {reason}");
        return None;
    };
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("peers")
            .join(format!("{}-{}-{port}", kind.binary(), std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the peer's directory");
        let child = command(kind, &binary, port, &dir, extra)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let mut peer = Peer {
            child,
            dir,
            kind,
            port,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = peer.child.try_wait() {
                break; // It exited (the port was taken): try another.
            }
            if listening(peer.child.id(), port) {
                return Some(peer);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(peer);
    }
    panic!("{} did not start on a free loopback port", kind.binary());
}
