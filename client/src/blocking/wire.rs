//! What the blocking connection needs of its socket, as a trait: a TCP
//! stream in production, an in-memory pipe in the connection's loom model
//! (`conn_loom.rs`), so the model runs the connection's own code.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use rustix::net::RecvFlags;

/// A connected byte stream shared by the threads of one connection. Every
/// method takes `&self`: one thread may read while another writes.
pub(crate) trait Wire: Send + Sync + 'static {
    /// Reads what has arrived, blocking until something does, the stream
    /// ends (`Ok(0)`) or the read time-out passes (`WouldBlock` or
    /// `TimedOut`).
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Reads what has arrived without blocking (`WouldBlock`: nothing).
    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes some of `buf`, blocking at most the write time-out set when
    /// the connection opened (`WouldBlock` or `TimedOut` then).
    fn write(&self, buf: &[u8]) -> io::Result<usize>;
    /// Bounds the next blocking reads (`None`: no bound).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Ends both directions: a thread blocked in a read or a write returns.
    fn shutdown(&self);
}

impl Wire for TcpStream {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&mut &*self).read(buf)
    }

    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        match rustix::net::recv(self, buf, RecvFlags::DONTWAIT) {
            Ok((n, _)) => Ok(n),
            Err(e) => Err(e.into()),
        }
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        (&mut &*self).write(buf)
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }

    fn shutdown(&self) {
        // Fails only when the socket is already shut or gone: either way
        // nothing more will block on it.
        let _ = TcpStream::shutdown(self, Shutdown::Both);
    }
}
