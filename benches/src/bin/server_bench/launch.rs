//! The server under test: a `sluice-server` child process on a free
//! loopback port, pinned with `taskset`, or the one `--connect` names.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::args::{Args, Io};
use crate::{Res, START_TIMEOUT, err};

/// A `sluice-server` child process, killed (by its pid) when dropped.
pub(crate) struct ServerProc {
    child: Child,
    pub(crate) addr: SocketAddr,
}

/// The server to drive: a child started here, or the one `--connect` names.
pub(crate) struct Target {
    _child: Option<ServerProc>,
    pub(crate) addr: SocketAddr,
}

pub(crate) fn target(args: &Args, io: Io) -> Res<Target> {
    if let Some(addr) = args.connect {
        return Ok(Target { _child: None, addr });
    }
    let child = ServerProc::start(args, io, 1, &args.server_cpu.to_string(), &[])?;
    Ok(Target {
        addr: child.addr,
        _child: Some(child),
    })
}

impl ServerProc {
    pub(crate) fn start(
        args: &Args,
        io: Io,
        shards: usize,
        cpus: &str,
        extra: &[String],
    ) -> Res<ServerProc> {
        // Port 0 would leave us guessing the port: take a free one first.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(err("picking a free port"))?
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let child = Command::new("taskset")
            .arg("-c")
            .arg(cpus)
            .arg(&args.server)
            .args(["--shards", &shards.to_string(), "--io", io.flag()])
            .args(["--listen", &addr.to_string()])
            .args([
                "--metrics-addr",
                "off",
                "--sqs-listen",
                "off",
                "--log",
                "warn",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(err("starting taskset sluice-server"))?;
        // taskset execs the server: the child's pid is the server's.
        let mut server = ServerProc { child, addr };
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("sluice-server exited at start: {status}"));
            }
            if TcpStream::connect(addr).is_ok() {
                return Ok(server);
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(format!("sluice-server did not listen on {addr} in time"));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        // `Child::kill` sends SIGKILL to this child's pid only.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
