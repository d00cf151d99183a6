//! Opening a connection: TCP, then TLS when configured, then the HELLO,
//! all within the connect time-out; then the heartbeat thread when the
//! session has a time-out.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{self, Connection};
use crate::config::ClientConfig;
use crate::error::{Error, Result};
use crate::hello::Handshake;
use crate::tls::TlsSession;
use sluice_protocol::HelloReply;

/// Bytes read at a time during the HELLO.
const HELLO_CHUNK_BYTES: usize = 4 * 1024;

fn connect_error(addr: &str, err: std::io::Error) -> Error {
    Error::Connect {
        addr: addr.to_owned(),
        source: Arc::new(err),
    }
}

/// Connects and says HELLO.
pub(super) fn open(config: &ClientConfig) -> Result<Arc<Connection>> {
    let addr = config.connect_addr()?;
    let deadline = Instant::now() + config.connect_timeout();
    let addrs = addr.to_socket_addrs().map_err(|e| connect_error(addr, e))?;
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    let mut stream = None;
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&a, left.max(Duration::from_millis(1))) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(Error::connect_timed_out(
                    addr,
                    config.connect_timeout(),
                    "connecting",
                ));
            }
            Err(e) => last = e,
        }
    }
    let mut stream = stream.ok_or_else(|| connect_error(addr, last))?;
    stream
        .set_nodelay(true)
        .map_err(|e| connect_error(addr, e))?;

    // TLS first, when configured: the handshake, bounded by the connect
    // time-out.
    let left = deadline.saturating_duration_since(Instant::now());
    let tls = match config.tls_session(addr)? {
        None => None,
        Some(session) => {
            let bounded = |s: &TcpStream, t| {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            };
            bounded(&stream, left.max(Duration::from_millis(1)))
                .map_err(|e| connect_error(addr, e))?;
            session.handshake(&mut stream)?;
            Some(session)
        }
    };

    // HELLO, synchronously, before anything else can use the socket.
    let (mut handshake, frame) =
        Handshake::start(addr, config.token(), config.session_timeout_ms())?;
    let mut sealed = Vec::new();
    let frame: &[u8] = match &tls {
        Some(session) => {
            session.seal(&frame, &mut sealed)?;
            &sealed
        }
        None => &frame,
    };
    stream
        .write_all(frame)
        .map_err(|e| connect_error(addr, e))?;
    let timeout = config.connect_timeout();
    let hello = read_hello(
        &mut stream,
        tls.as_ref(),
        &mut handshake,
        deadline,
        addr,
        timeout,
    )?;
    let (decoder, buf) = handshake.finish(&hello);
    stream
        .set_write_timeout(Some(conn::WRITE_STALL))
        .map_err(|e| connect_error(addr, e))?;
    let heartbeat = config
        .heartbeat_interval()
        .map(|interval| (interval, std::sync::mpsc::channel::<()>()));
    let stop = heartbeat.as_ref().map(|(_, (tx, _))| tx.clone());
    let conn = Connection::new(stream, tls, hello, decoder, buf, config.read_spin(), stop)
        .map_err(|e| connect_error(addr, e))?;
    let conn = Arc::new(conn);
    if let Some((interval, (tx, rx))) = heartbeat {
        drop(tx);
        let weak = Arc::downgrade(&conn);
        let timeout = config.request_timeout();
        std::thread::Builder::new()
            .name("sluice-heartbeat".into())
            .spawn(move || conn::heartbeat(&weak, &rx, interval, timeout))
            .map_err(|e| connect_error(addr, e))?;
    }
    Ok(conn)
}

/// Reads the HELLO reply (through TLS when `tls`) until `deadline`.
fn read_hello(
    stream: &mut TcpStream,
    tls: Option<&TlsSession>,
    handshake: &mut Handshake,
    deadline: Instant,
    addr: &str,
    timeout: Duration,
) -> Result<HelloReply> {
    let mut chunk = vec![0u8; HELLO_CHUNK_BYTES];
    loop {
        if let Some(hello) = handshake.poll()? {
            return Ok(hello);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::connect_timed_out(
                addr,
                timeout,
                "waiting for the HELLO reply",
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| connect_error(addr, e))?;
        let eof = || {
            let e = std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection during HELLO",
            );
            connect_error(addr, e)
        };
        match stream.read(&mut chunk) {
            Ok(0) => return Err(eof()),
            Ok(n) => match tls {
                None => handshake.buffer().extend_from_slice(&chunk[..n]),
                // A refused client certificate shows here (TLS 1.3 sends
                // the alert after the client's side of the handshake).
                Some(session) => match session.open(&chunk[..n], handshake.buffer()) {
                    Ok(false) => {}
                    // The server's last words (a refusal) may come with its
                    // close_notify.
                    Ok(true) => match handshake.poll()? {
                        Some(hello) => return Ok(hello),
                        None => return Err(eof()),
                    },
                    Err(e @ Error::Tls { .. }) => return Err(e),
                    Err(e) => {
                        return Err(connect_error(addr, std::io::Error::other(e.to_string())));
                    }
                },
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Error::connect_timed_out(
                    addr,
                    timeout,
                    "waiting for the HELLO reply",
                ));
            }
            Err(e) => return Err(connect_error(addr, e)),
        }
    }
}
