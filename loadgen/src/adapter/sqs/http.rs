//! One HTTP/1.1 keep-alive connection to an SQS endpoint: signed `POST /`
//! requests of the JSON protocol out, status and body back, in order
//! (several requests may be written before their responses are read:
//! pipelining, for a window above 1).
//!
//! A response's body comes with a `Content-Length` or in chunks; a server
//! that closes the connection after a response (`Connection: close`, or
//! HTTP/1.0 without keep-alive) gets a new connection for the next request,
//! when nothing else was sent on the old one. An `sqss://` target's
//! connections are HTTPS: TLS with the configuration given, the target's
//! host the name its certificate must carry.

use std::time::Duration;

use super::super::wire::{LineConn, parse_u64, push_u64, text};
use super::super::{AdapterError, TargetUrl};
use super::sign::{CONTENT_TYPE, Signer, SqsCredentials, amz_date_now};

const PEER: &str = "sqs";

/// Longest response header section read.
const HEADERS_MAX: usize = 100;

fn protocol(detail: impl Into<String>) -> AdapterError {
    AdapterError::Protocol {
        peer: PEER,
        detail: detail.into(),
    }
}

/// A response: its status and body.
pub(crate) struct Response {
    pub status: u16,
    /// Whether the server closes the connection after it.
    pub closes: bool,
}

pub(crate) struct HttpConn {
    url: TargetUrl,
    read_spin: Duration,
    conn: Option<LineConn>,
    /// The `Host` header (`HOST:PORT`).
    host: String,
    signer: Signer,
    /// Requests written whose responses are not read yet.
    pending: usize,
    /// TLS, for HTTPS.
    tls: Option<sluice_client::tls::TlsConfig>,
}

impl HttpConn {
    /// A connection to `url`'s endpoint, signing with `creds`; HTTPS with
    /// `tls`.
    pub(crate) fn connect(
        url: &TargetUrl,
        creds: SqsCredentials,
        read_spin: Duration,
        tls: Option<sluice_client::tls::TlsConfig>,
    ) -> Result<HttpConn, AdapterError> {
        let mut c = HttpConn {
            url: url.clone(),
            read_spin,
            conn: None,
            host: url.addrs().swap_remove(0),
            signer: Signer::new(creds),
            pending: 0,
            tls,
        };
        c.reconnect()?;
        Ok(c)
    }

    fn reconnect(&mut self) -> Result<&mut LineConn, AdapterError> {
        let stream = self.url.tcp(PEER)?;
        let mut conn = LineConn::new(stream, PEER).with_read_spin(self.read_spin);
        if let Some(tls) = &self.tls {
            let name = rustls::pki_types::ServerName::try_from(self.url.host.clone())
                .map_err(|e| protocol(format!("TLS: {}: {e}", self.url.host)))?;
            let session = rustls::ClientConnection::new(tls.rustls(), name)
                .map_err(|e| protocol(format!("TLS: {e}")))?;
            conn = conn.with_tls(session)?;
        }
        Ok(self.conn.insert(conn))
    }

    /// Writes a signed request of `action` (`SendMessageBatch`) with the
    /// JSON `body`, without waiting for its response.
    pub(crate) fn send(&mut self, action: &str, body: &[u8]) -> Result<(), AdapterError> {
        let target = format!("AmazonSQS.{action}");
        let date = amz_date_now();
        let auth = self.signer.authorization(&self.host, &target, &date, body);
        if self.conn.is_none() {
            if self.pending > 0 {
                return Err(AdapterError::Unsupported(
                    "sqs: the server closes its connections after each response, so requests \
                     cannot be pipelined on them: use --window 1"
                        .into(),
                ));
            }
            self.reconnect()?;
        }
        let (Some(conn), host) = (self.conn.as_mut(), &self.host) else {
            return Err(AdapterError::Closed { peer: PEER });
        };
        let w = &mut conn.wbuf;
        w.extend_from_slice(b"POST / HTTP/1.1\r\nHost: ");
        w.extend_from_slice(host.as_bytes());
        w.extend_from_slice(b"\r\nContent-Type: ");
        w.extend_from_slice(CONTENT_TYPE.as_bytes());
        w.extend_from_slice(b"\r\nX-Amz-Target: ");
        w.extend_from_slice(target.as_bytes());
        w.extend_from_slice(b"\r\nX-Amz-Date: ");
        w.extend_from_slice(date.as_bytes());
        w.extend_from_slice(b"\r\nAuthorization: ");
        w.extend_from_slice(auth.as_bytes());
        w.extend_from_slice(b"\r\nContent-Length: ");
        push_u64(w, body.len() as u64);
        w.extend_from_slice(b"\r\n\r\n");
        w.extend_from_slice(body);
        conn.flush()?;
        self.pending += 1;
        Ok(())
    }

    /// Reads the response to the oldest request sent and not yet answered,
    /// its body into `body` (cleared first).
    pub(crate) fn receive(&mut self, body: &mut Vec<u8>) -> Result<Response, AdapterError> {
        let conn = self
            .conn
            .as_mut()
            .ok_or(AdapterError::Closed { peer: PEER })?;
        body.clear();
        let response = read_response(conn, body);
        self.pending = self.pending.saturating_sub(1);
        let response = response?;
        if response.closes {
            self.conn = None;
        }
        Ok(response)
    }
}

/// Reads one response from `conn`: the status line, the headers, and the
/// body into `body`.
fn read_response(conn: &mut LineConn, body: &mut Vec<u8>) -> Result<Response, AdapterError> {
    let status_line = conn.line()?;
    let (version, status) = parse_status(status_line)
        .ok_or_else(|| protocol(format!("bad status line {:?}", text(status_line))))?;
    let mut length = None;
    let mut chunked = false;
    let mut closes = version == "HTTP/1.0";
    let mut headers = 0;
    loop {
        let line = conn.line()?;
        if line.is_empty() {
            break;
        }
        headers += 1;
        if headers > HEADERS_MAX {
            return Err(protocol(format!(
                "more than {HEADERS_MAX} response headers"
            )));
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(protocol(format!("bad header line {:?}", text(line))));
        };
        let name = line[..colon].to_ascii_lowercase();
        let value = line[colon + 1..].trim_ascii();
        match &name[..] {
            b"content-length" => {
                length =
                    Some(parse_u64(value).ok_or_else(|| {
                        protocol(format!("bad Content-Length {:?}", text(value)))
                    })?);
            }
            b"transfer-encoding" => chunked = value.eq_ignore_ascii_case(b"chunked"),
            b"connection" if value.eq_ignore_ascii_case(b"close") => closes = true,
            b"connection" if value.eq_ignore_ascii_case(b"keep-alive") => closes = false,
            _ => {}
        }
    }
    if chunked {
        read_chunks(conn, body)?;
    } else if let Some(n) = length {
        let n = usize::try_from(n).map_err(|_| protocol("a body too large"))?;
        let at = conn.raw(n)?;
        body.extend_from_slice(conn.bytes(at));
    } else {
        return Err(protocol(
            "a response without Content-Length or chunks (a body to the connection's end is not \
             read)",
        ));
    }
    Ok(Response { status, closes })
}

/// A chunked body: chunks of a hex size line, the bytes and CRLF, until a
/// chunk of 0 and the (ignored) trailers.
fn read_chunks(conn: &mut LineConn, body: &mut Vec<u8>) -> Result<(), AdapterError> {
    loop {
        let line = conn.line()?;
        let digits = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| usize::from_str_radix(d.trim(), 16).ok())
            .ok_or_else(|| protocol(format!("bad chunk size {:?}", text(line))))?;
        if size == 0 {
            while !conn.line()?.is_empty() {}
            return Ok(());
        }
        if body.len() + size > super::super::wire::PAYLOAD_BYTES_MAX {
            return Err(protocol("a chunked body over the limit"));
        }
        let at = conn.raw(size)?;
        body.extend_from_slice(conn.bytes(at));
        if !conn.line()?.is_empty() {
            return Err(protocol("a chunk not followed by CRLF"));
        }
    }
}

/// `HTTP/1.1 200 OK` as its version and status.
fn parse_status(line: &[u8]) -> Option<(&str, u16)> {
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    let status = parts
        .next()?
        .parse()
        .ok()
        .filter(|s| (100..600).contains(s))?;
    Some((version, status))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    fn creds() -> SqsCredentials {
        SqsCredentials {
            access_key: "AKID".into(),
            secret: "s".into(),
            region: "us-east-1".into(),
        }
    }

    /// A server that reads one request, answers each of `replies` in
    /// turn (one per request), and returns what it read.
    fn serve(replies: Vec<&'static [u8]>) -> (TargetUrl, std::thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = TargetUrl::parse(&format!("sqs://127.0.0.1:{port}")).unwrap();
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            for reply in replies {
                // One request: its headers end, then its body.
                loop {
                    let n = s.read(&mut buf).unwrap();
                    seen.extend_from_slice(&buf[..n]);
                    if n == 0 || seen.windows(2).rev().take(1).any(|w| w == b"{}") {
                        break;
                    }
                }
                s.write_all(reply).unwrap();
                if reply.starts_with(b"HTTP/1.0") {
                    let (next, _) = listener.accept().unwrap();
                    s = next;
                }
            }
            seen
        });
        (url, t)
    }

    #[test]
    fn a_request_is_signed_and_its_response_read_whole_or_chunked() {
        let (url, server) = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
            b"HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\n{\"b\r\n2\r\n\":\r\n1\r\n2\r\n1\r\n}\r\n0\r\nTrailer: t\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ]);
        let mut c = HttpConn::connect(&url, creds(), Duration::ZERO, None).unwrap();
        let mut body = Vec::new();
        c.send("ListQueues", b"{}").unwrap();
        let r = c.receive(&mut body).unwrap();
        assert_eq!(
            (r.status, r.closes, &body[..]),
            (200, false, &b"{\"a\":1}"[..])
        );
        c.send("ListQueues", b"{}").unwrap();
        let r = c.receive(&mut body).unwrap();
        assert_eq!((r.status, &body[..]), (400, &b"{\"b\":2}"[..]));
        // HTTP/1.0: the connection closes, and the next request opens another.
        c.send("ListQueues", b"{}").unwrap();
        assert!(c.receive(&mut body).unwrap().closes);
        c.send("ListQueues", b"{}").unwrap();
        assert_eq!(c.receive(&mut body).unwrap().status, 200);
        assert!(body.is_empty());
        let seen = String::from_utf8(server.join().unwrap()).unwrap();
        assert!(
            seen.starts_with("POST / HTTP/1.1\r\nHost: 127.0.0.1:"),
            "{seen}"
        );
        for header in [
            "Content-Type: application/x-amz-json-1.0\r\n",
            "X-Amz-Target: AmazonSQS.ListQueues\r\n",
            "Authorization: AWS4-HMAC-SHA256 Credential=AKID/",
            "Content-Length: 2\r\n\r\n{}",
        ] {
            assert!(seen.contains(header), "{header} in {seen}");
        }
    }

    #[test]
    fn bad_responses_are_protocol_errors() {
        for bad in [
            &b"SMTP 220 hello\r\n\r\n"[..],
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n",
        ] {
            let (url, server) = serve(vec![bad]);
            let mut c = HttpConn::connect(&url, creds(), Duration::ZERO, None).unwrap();
            let mut body = Vec::new();
            c.send("ListQueues", b"{}").unwrap();
            let err = c.receive(&mut body);
            assert!(
                matches!(err, Err(AdapterError::Protocol { .. })),
                "{:?}: {:?}",
                text(bad),
                err.map(|r| r.status)
            );
            drop(c);
            server.join().unwrap();
        }
    }
}
