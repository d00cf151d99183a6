//! Raw protocol connections for the clients that misbehave on purpose
//! (never reading replies, leaving frames unfinished, connecting and going
//! away), which the real client never does.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT;
use sluice_protocol::{FrameDecoder, HelloRequest, QueueName, Request, SendEntry, opcode};

/// Time allowed to connect and to get the HELLO reply.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A frame: `request` encoded with `request_id`.
#[must_use]
pub fn frame(request: &Request, request_id: u32) -> Vec<u8> {
    let mut buf = BytesMut::with_capacity(request.encoded_len());
    // Every request built here has fields that fit their wire widths.
    request
        .encode(request_id, &mut buf)
        .expect("the suite's requests fit the wire format");
    buf.to_vec()
}

/// The HELLO frame (no token).
#[must_use]
pub fn hello_frame() -> Vec<u8> {
    frame(&Request::Hello(HelloRequest::new(Bytes::new())), 1)
}

/// A SEND frame of one message to `queue`.
///
/// # Panics
/// On a queue name that is not valid (the suite's are).
#[must_use]
pub fn send_frame(queue: &str, body: Vec<u8>, request_id: u32) -> Vec<u8> {
    let queue = QueueName::new(queue).expect("a valid queue name");
    let entry = SendEntry::new(body);
    let request =
        sluice_protocol::SendRequest::new(queue, [&entry]).expect("one small entry fits a frame");
    frame(&Request::Send(request), request_id)
}

/// A PEEK frame.
///
/// # Panics
/// On a queue name that is not valid (the suite's are).
#[must_use]
pub fn peek_frame(queue: &str, max_messages: u16, request_id: u32) -> Vec<u8> {
    let queue = QueueName::new(queue).expect("a valid queue name");
    frame(
        &Request::Peek {
            queue,
            max_messages,
        },
        request_id,
    )
}

/// Connects with a time-out and `TCP_NODELAY`.
///
/// # Errors
/// Connecting failed.
pub fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Connects and says HELLO; returns the stream once the HELLO reply came.
///
/// # Errors
/// Connecting, writing or reading failed, or the reply is not a HELLO
/// reply (an error frame such as `TooManyConnections`).
pub fn connect_hello(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut s = connect(addr)?;
    s.write_all(&hello_frame())?;
    let op = read_frame_opcode(&mut s, HANDSHAKE_TIMEOUT)?;
    if op != opcode::HELLO_REPLY {
        return Err(std::io::Error::other(format!(
            "HELLO answered with opcode {op:#04x}"
        )));
    }
    Ok(s)
}

/// Reads one whole frame and returns its opcode.
///
/// # Errors
/// End of stream, a time-out, or a frame that does not decode.
pub fn read_frame_opcode(s: &mut TcpStream, limit: Duration) -> std::io::Result<u8> {
    let deadline = Instant::now() + limit;
    let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT);
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        match decoder.decode(&mut buf) {
            Ok(Some(f)) => return Ok(f.opcode),
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut chunk) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// How a connection ended when we waited for the server to close it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// End of stream or a reset, after this long.
    After(Duration),
    /// Still open when the wait ended.
    StillOpen,
}

/// Reads (and discards) until the server closes the connection or `limit`
/// passes.
#[must_use]
pub fn wait_closed(s: &mut TcpStream, limit: Duration) -> Closed {
    let start = Instant::now();
    let mut chunk = [0u8; 4096];
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Closed::StillOpen;
        }
        if s.set_read_timeout(Some(left)).is_err() {
            return Closed::After(start.elapsed());
        }
        match s.read(&mut chunk) {
            Ok(0) => return Closed::After(start.elapsed()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Closed::After(start.elapsed()),
        }
    }
}

/// Closes with a reset (`SO_LINGER` 0) rather than a FIN.
pub fn close_with_reset(s: TcpStream) {
    let _ = rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO));
    drop(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_their_opcode_and_length() {
        for (f, op) in [
            (hello_frame(), opcode::HELLO),
            (send_frame("q", b"x".to_vec(), 7), opcode::SEND),
            (peek_frame("q", 10, 8), opcode::PEEK),
        ] {
            let len = u32::from_le_bytes([f[0], f[1], f[2], f[3]]) as usize;
            assert_eq!(len + 4, f.len());
            assert_eq!(f[4], op);
        }
    }
}
