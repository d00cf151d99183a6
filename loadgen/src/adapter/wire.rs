//! A buffered blocking connection for the CRLF text protocols the peers
//! speak (RESP, beanstalkd, NATS): a command line, then optionally a
//! length-prefixed payload followed by CRLF.
//!
//! Writes collect in `wbuf` and go out in one `write_all` on `flush`, which
//! is how a batch becomes one pipelined write. Reads hand out slices of the
//! read buffer, valid until the next read. With a read spin
//! (`--read-spin`), a read polls the socket that long, yielding to ready
//! threads, before it blocks: the same spin the sluice client has.
//!
//! Over TLS ([`LineConn::with_tls`], an `sqss://` target) the bytes go
//! through the session: reads block (no spin), writes are sealed first.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::time::{Duration, Instant};

use rustix::net::RecvFlags;

use super::AdapterError;

/// The longest command line accepted from a peer.
const LINE_BYTES_MAX: usize = 64 * 1024;
/// The largest payload accepted from a peer.
pub(crate) const PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Initial size of the read buffer; it grows for large payloads.
const READ_BUFFER_BYTES: usize = 256 * 1024;

pub(crate) struct LineConn {
    stream: TcpStream,
    peer: &'static str,
    rbuf: Vec<u8>,
    /// Start of unread data in `rbuf`.
    pos: usize,
    /// End of valid data in `rbuf`.
    len: usize,
    /// Bytes to send at the next `flush`.
    pub(crate) wbuf: Vec<u8>,
    /// How long a read polls before it blocks (zero: it blocks at once).
    read_spin: Duration,
    /// The TLS session the bytes go through, if any.
    tls: Option<Box<rustls::ClientConnection>>,
}

impl LineConn {
    pub(crate) fn new(stream: TcpStream, peer: &'static str) -> Self {
        Self {
            stream,
            peer,
            rbuf: vec![0; READ_BUFFER_BYTES],
            pos: 0,
            len: 0,
            wbuf: Vec::with_capacity(64 * 1024),
            read_spin: Duration::ZERO,
            tls: None,
        }
    }

    /// Runs the connection through the TLS session `tls`, its handshake
    /// done here (at most `REPLY_TIMEOUT` a read, as every read).
    pub(crate) fn with_tls(
        mut self,
        mut tls: rustls::ClientConnection,
    ) -> Result<Self, AdapterError> {
        while tls.is_handshaking() {
            if let Err(e) = tls.complete_io(&mut self.stream) {
                return Err(self.protocol(format!("TLS handshake: {e}")));
            }
        }
        self.tls = Some(Box::new(tls));
        Ok(self)
    }

    /// Sets how long each read polls the socket, yielding, before it
    /// blocks (`--read-spin`).
    pub(crate) fn with_read_spin(mut self, spin: Duration) -> Self {
        self.read_spin = spin;
        self
    }

    pub(crate) fn protocol(&self, detail: impl Into<String>) -> AdapterError {
        AdapterError::Protocol {
            peer: self.peer,
            detail: detail.into(),
        }
    }

    fn io(&self, source: std::io::Error) -> AdapterError {
        let source = if matches!(source.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            std::io::Error::new(
                ErrorKind::TimedOut,
                format!("no reply within {:?}", super::REPLY_TIMEOUT),
            )
        } else {
            source
        };
        AdapterError::Io {
            peer: self.peer,
            source,
        }
    }

    /// How long a read waits for the peer before failing with a timeout
    /// ([`is_timeout`]); connections start at `REPLY_TIMEOUT`.
    pub(crate) fn set_read_timeout(&mut self, wait: Duration) -> Result<(), AdapterError> {
        let wait = wait.max(Duration::from_millis(1));
        self.stream
            .set_read_timeout(Some(wait))
            .map_err(|e| self.io(e))
    }

    /// Sends everything written to `wbuf`.
    pub(crate) fn flush(&mut self) -> Result<(), AdapterError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let result = match self.tls.as_deref_mut() {
            Some(tls) => {
                let mut s = rustls::Stream::new(tls, &mut self.stream);
                s.write_all(&self.wbuf).and_then(|()| s.flush())
            }
            None => self.stream.write_all(&self.wbuf),
        };
        self.wbuf.clear();
        result.map_err(|e| self.io(e))
    }

    /// Reads more bytes, making room for at least `need` unread bytes.
    fn fill(&mut self, need: usize) -> Result<(), AdapterError> {
        if self.pos == self.len {
            self.pos = 0;
            self.len = 0;
        }
        if self.pos > 0 && (self.rbuf.len() - self.len < 4096 || self.rbuf.len() - self.pos < need)
        {
            self.rbuf.copy_within(self.pos..self.len, 0);
            self.len -= self.pos;
            self.pos = 0;
        }
        if self.rbuf.len() - self.pos < need {
            self.rbuf.resize(self.pos + need.max(READ_BUFFER_BYTES), 0);
        }
        if let Some(tls) = self.tls.as_deref_mut() {
            return match read_tls(tls, &mut self.stream, &mut self.rbuf[self.len..]) {
                Ok(0) => Err(AdapterError::Closed { peer: self.peer }),
                Ok(n) => {
                    self.len += n;
                    Ok(())
                }
                Err(e) => Err(self.io(e)),
            };
        }
        if !self.read_spin.is_zero() {
            let until = Instant::now() + self.read_spin;
            loop {
                match rustix::net::recv(
                    &self.stream,
                    &mut self.rbuf[self.len..],
                    RecvFlags::DONTWAIT,
                ) {
                    Ok((0, _)) => return Err(AdapterError::Closed { peer: self.peer }),
                    Ok((n, _)) => {
                        self.len += n;
                        return Ok(());
                    }
                    Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(self.io(e.into())),
                }
                if Instant::now() >= until {
                    break;
                }
                std::thread::yield_now();
            }
        }
        loop {
            match self.stream.read(&mut self.rbuf[self.len..]) {
                Ok(0) => return Err(AdapterError::Closed { peer: self.peer }),
                Ok(n) => {
                    self.len += n;
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    /// Reads exactly `n` bytes (an HTTP body or chunk). Returns where they
    /// sit in the read buffer; read them with [`LineConn::bytes`] before
    /// the next read.
    pub(crate) fn raw(&mut self, n: usize) -> Result<Range<usize>, AdapterError> {
        if n > PAYLOAD_BYTES_MAX {
            return Err(self.protocol(format!("payload of {n} bytes is over the limit")));
        }
        while self.len - self.pos < n {
            self.fill(n)?;
        }
        let start = self.pos;
        self.pos += n;
        Ok(start..start + n)
    }

    /// Reads one line and, when `payload_len` says the line announces one,
    /// its payload and the CRLF after it. Returns where the line and the
    /// payload sit in the read buffer (without the CRLFs; an empty payload
    /// range when there is none); read them with [`LineConn::bytes`] before
    /// the next read.
    pub(crate) fn frame_at(
        &mut self,
        payload_len: impl FnOnce(&[u8]) -> Result<Option<usize>, AdapterError>,
    ) -> Result<(Range<usize>, Range<usize>), AdapterError> {
        let mut scanned = 0;
        let line_len = loop {
            let unread = &self.rbuf[self.pos + scanned..self.len];
            if let Some(i) = unread.iter().position(|&b| b == b'\n') {
                let end = scanned + i;
                if end == 0 || self.rbuf[self.pos + end - 1] != b'\r' {
                    return Err(self.protocol("line not ended by CRLF"));
                }
                break end - 1;
            }
            scanned = self.len - self.pos;
            if scanned > LINE_BYTES_MAX {
                return Err(self.protocol(format!("line longer than {LINE_BYTES_MAX} bytes")));
            }
            self.fill(scanned + 1)?;
        };
        let payload = payload_len(&self.rbuf[self.pos..self.pos + line_len])?;
        if let Some(n) = payload
            && n > PAYLOAD_BYTES_MAX
        {
            return Err(self.protocol(format!("payload of {n} bytes is over the limit")));
        }
        let total = line_len + 2 + payload.map_or(0, |n| n + 2);
        while self.len - self.pos < total {
            self.fill(total)?;
        }
        let start = self.pos;
        // The bytes stay where they are until the next read compacts the buffer.
        self.pos += total;
        let line = start..start + line_len;
        match payload {
            None => Ok((line, start..start)),
            Some(n) => {
                let body = start + line_len + 2..start + line_len + 2 + n;
                if &self.rbuf[body.end..body.end + 2] != b"\r\n" {
                    return Err(self.protocol("payload not followed by CRLF"));
                }
                Ok((line, body))
            }
        }
    }

    /// Bytes of the read buffer at a range [`LineConn::frame_at`] returned.
    pub(crate) fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self.rbuf[range]
    }

    /// [`LineConn::frame_at`], returning the slices.
    pub(crate) fn frame(
        &mut self,
        payload_len: impl FnOnce(&[u8]) -> Result<Option<usize>, AdapterError>,
    ) -> Result<(&[u8], &[u8]), AdapterError> {
        let (line, payload) = self.frame_at(payload_len)?;
        Ok((&self.rbuf[line], &self.rbuf[payload]))
    }

    /// Reads one line without a payload.
    pub(crate) fn line(&mut self) -> Result<&[u8], AdapterError> {
        Ok(self.frame(|_| Ok(None))?.0)
    }
}

/// Whether `e` is a read that waited its whole read timeout (a partly read
/// frame stays buffered, so reading again picks it up).
/// Reads plain bytes of `tls` over `stream` into `buf`: 0 when the peer
/// closed, with or without TLS's close notice.
fn read_tls(
    tls: &mut rustls::ClientConnection,
    stream: &mut TcpStream,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    loop {
        match rustls::Stream::new(tls, stream).read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(0),
            other => return other,
        }
    }
}

pub(crate) fn is_timeout(e: &AdapterError) -> bool {
    matches!(e, AdapterError::Io { source, .. } if source.kind() == ErrorKind::TimedOut)
}

/// Parses an unsigned decimal integer from ASCII.
pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(v)
}

/// Appends the decimal form of `v`.
pub(crate) fn push_u64(buf: &mut Vec<u8>, v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = v;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// The last space-separated token of a line, parsed as a length.
pub(crate) fn last_len(line: &[u8]) -> Option<usize> {
    let token = line.rsplit(|&b| b == b' ').find(|t| !t.is_empty())?;
    usize::try_from(parse_u64(token)?).ok()
}

/// Lossy text of a line, for error messages.
pub(crate) fn text(line: &[u8]) -> String {
    let shown = &line[..line.len().min(200)];
    String::from_utf8_lossy(shown).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connection whose peer has already written `bytes` in small pieces.
    fn fed(bytes: &'static [u8]) -> (LineConn, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            for chunk in bytes.chunks(3) {
                s.write_all(chunk).unwrap();
                s.flush().unwrap();
            }
        });
        let stream = TcpStream::connect(addr).unwrap();
        (LineConn::new(stream, "test"), writer)
    }

    #[test]
    fn frames_split_across_reads() {
        let (mut c, w) = fed(b"+OK\r\n$5\r\nhello\r\nRESERVED 7 3\r\nabc\r\n$0\r\n\r\n");
        assert_eq!(c.line().unwrap(), b"+OK");
        let (line, payload) = c
            .frame(|l| Ok(l.strip_prefix(b"$").and_then(parse_u64).map(|n| n as usize)))
            .unwrap();
        assert_eq!((line, payload), (&b"$5"[..], &b"hello"[..]));
        let (line, payload) = c.frame(|l| Ok(last_len(l))).unwrap();
        assert_eq!((line, payload), (&b"RESERVED 7 3"[..], &b"abc"[..]));
        let (_, payload) = c.frame(|_| Ok(Some(0))).unwrap();
        assert!(payload.is_empty());
        assert!(matches!(c.line(), Err(AdapterError::Closed { .. })));
        w.join().unwrap();
    }

    /// Frames read with a read spin, from a peer that writes part of them,
    /// pauses well past the spin (so the read falls back to blocking), then
    /// writes the rest and closes.
    #[test]
    fn a_spinning_read_gets_the_same_frames_and_the_close() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"+OK\r\n$5\r\nhel").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(b"lo\r\n-ERR x\r\n").unwrap();
        });
        let stream = TcpStream::connect(addr).unwrap();
        let mut c = LineConn::new(stream, "test").with_read_spin(Duration::from_millis(1));
        assert_eq!(c.line().unwrap(), b"+OK");
        let (line, payload) = c
            .frame(|l| Ok(l.strip_prefix(b"$").and_then(parse_u64).map(|n| n as usize)))
            .unwrap();
        assert_eq!((line, payload), (&b"$5"[..], &b"hello"[..]));
        assert_eq!(c.line().unwrap(), b"-ERR x");
        writer.join().unwrap();
        assert!(matches!(c.line(), Err(AdapterError::Closed { .. })));
        // Bad input is refused the same way while spinning.
        let (c, w) = fed(b"bare\n");
        let mut c = c.with_read_spin(Duration::from_millis(1));
        assert!(matches!(c.line(), Err(AdapterError::Protocol { .. })));
        w.join().unwrap();
    }

    #[test]
    fn malformed_frames_are_errors() {
        let (mut c, w) = fed(b"bare\n");
        assert!(matches!(c.line(), Err(AdapterError::Protocol { .. })));
        w.join().unwrap();
        let (mut c, w) = fed(b"$3\r\nabcd\r\n");
        assert!(matches!(
            c.frame(|_| Ok(Some(3))),
            Err(AdapterError::Protocol { .. })
        ));
        w.join().unwrap();
    }

    #[test]
    fn integers() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"1a"), None);
        let mut b = Vec::new();
        push_u64(&mut b, 0);
        b.push(b' ');
        push_u64(&mut b, 1234567890);
        assert_eq!(b, b"0 1234567890");
        assert_eq!(last_len(b"MSG a 1  24"), Some(24));
        assert_eq!(last_len(b"MSG"), None);
    }
}
