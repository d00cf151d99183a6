//! HTTP/1.1 for the SQS door, sans-IO: [`parse`] reads one request from the
//! front of a buffer (head through `httparse`, body by `Content-Length` or
//! chunked), within [`HttpLimits`]; [`write_response`] and friends append a
//! response to a caller-owned buffer.

use bytes::{Bytes, BytesMut};

/// What one request may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Request line and headers, in bytes.
    pub head_bytes_max: usize,
    /// Headers.
    pub headers_max: usize,
    /// Body, in bytes (after chunked decoding).
    pub body_bytes_max: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            head_bytes_max: 16 * 1024,
            headers_max: 100,
            body_bytes_max: 4 * 1024 * 1024,
        }
    }
}

/// One parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The target's path, percent-encoded as sent (`/000000000000/q`).
    pub path: String,
    /// The target's query string without the `?`, as sent ("" if none).
    pub query: String,
    /// Headers in order, names lowercased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body (chunked bodies decoded).
    pub body: Bytes,
    /// Whether the connection stays open after the response (HTTP/1.1
    /// without `Connection: close`, or HTTP/1.0 with keep-alive).
    pub keep_alive: bool,
}

impl Request {
    /// The first header named `name` (lowercase).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What [`parse`] found at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole request yet. `expect_continue`: the head is complete and
    /// asked for `100 Continue` before sending its body.
    Incomplete {
        /// The head is in and carries `Expect: 100-continue`.
        expect_continue: bool,
    },
    /// A request, and the bytes it took from the front of the buffer.
    Request(Request, usize),
}

/// Why a request cannot be read; the connection is answered with
/// [`HttpError::status`] and closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Not HTTP/1.x, or a bad head, length or chunk.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    /// Head over [`HttpLimits::head_bytes_max`] or
    /// [`HttpLimits::headers_max`].
    #[error("request head too large")]
    HeadTooLarge,
    /// Body over [`HttpLimits::body_bytes_max`].
    #[error("request body too large")]
    BodyTooLarge,
    /// A body with neither `Content-Length` nor chunked encoding.
    #[error("length required")]
    LengthRequired,
    /// An HTTP version other than 1.0 and 1.1.
    #[error("HTTP version not supported")]
    Version,
}

impl HttpError {
    /// The response status: 400, 431, 413, 411 or 505.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Malformed(_) => 400,
            HttpError::HeadTooLarge => 431,
            HttpError::BodyTooLarge => 413,
            HttpError::LengthRequired => 411,
            HttpError::Version => 505,
        }
    }
}

/// Headers a head may have before their room comes from the heap.
const HEADERS_ON_STACK: usize = 100;

/// Reads one request from the front of `buf`.
///
/// # Errors
/// [`HttpError`] when what is there cannot become a request within
/// `limits` (the caller answers and closes).
pub fn parse(buf: &[u8], limits: &HttpLimits) -> Result<Parsed, HttpError> {
    // Room for the headers on the stack up to the default limit.
    let mut stack = [httparse::EMPTY_HEADER; HEADERS_ON_STACK];
    let mut heap = Vec::new();
    let storage: &mut [httparse::Header<'_>] = if limits.headers_max <= HEADERS_ON_STACK {
        &mut stack[..limits.headers_max]
    } else {
        heap.resize(limits.headers_max, httparse::EMPTY_HEADER);
        &mut heap
    };
    let mut req = httparse::Request::new(storage);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.head_bytes_max {
                return Err(HttpError::HeadTooLarge);
            }
            return Ok(Parsed::Incomplete {
                expect_continue: false,
            });
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadTooLarge),
        Err(httparse::Error::Version) => return Err(HttpError::Version),
        Err(_) => return Err(HttpError::Malformed("bad request head")),
    };
    if head_len > limits.head_bytes_max {
        return Err(HttpError::HeadTooLarge);
    }
    let version = req.version.unwrap_or(1);
    let method = req.method.unwrap_or("").to_owned();
    let target = req.path.unwrap_or("/");
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (target.to_owned(), String::new()),
    };
    // The head checked as UTF-8 once (httparse lets bytes above 0x7f
    // through in values), each value then a slice of it.
    let head = core::str::from_utf8(&buf[..head_len])
        .map_err(|_| HttpError::Malformed("a header value that is not UTF-8"))?;
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        // The value lies within the head: its offset from the buffer's
        // start (addresses compared, nothing read through them).
        let at = (h.value.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
        let value = head
            .get(at..at + h.value.len())
            .ok_or(HttpError::Malformed("a header value that is not UTF-8"))?;
        headers.push((h.name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let connection = find("connection").map(str::to_ascii_lowercase);
    let keep_alive = match version {
        0 => connection
            .as_deref()
            .is_some_and(|c| c.contains("keep-alive")),
        _ => !connection.as_deref().is_some_and(|c| c.contains("close")),
    };
    let expect_continue = find("expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
    let chunked = match find("transfer-encoding") {
        None => false,
        Some(te) if te.eq_ignore_ascii_case("chunked") => true,
        Some(te) if te.eq_ignore_ascii_case("identity") => false,
        Some(_) => return Err(HttpError::Malformed("an unsupported Transfer-Encoding")),
    };
    let content_length = content_length(&headers)?;
    if chunked && content_length.is_some() {
        return Err(HttpError::Malformed(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    let rest = &buf[head_len..];
    let (body, body_len) = if chunked {
        match dechunk(rest, limits.body_bytes_max)? {
            Some((body, used)) => (body, used),
            None => return Ok(Parsed::Incomplete { expect_continue }),
        }
    } else {
        let len = content_length.unwrap_or(0);
        if len > limits.body_bytes_max as u64 {
            return Err(HttpError::BodyTooLarge);
        }
        // Fits in usize: at most body_bytes_max.
        let len = usize::try_from(len).map_err(|_| HttpError::BodyTooLarge)?;
        if rest.len() < len {
            return Ok(Parsed::Incomplete { expect_continue });
        }
        (Bytes::copy_from_slice(&rest[..len]), len)
    };
    Ok(Parsed::Request(
        Request {
            method,
            path,
            query,
            headers,
            body,
            keep_alive,
        },
        head_len + body_len,
    ))
}

/// The `Content-Length`, if any; several that differ, or one that is not
/// a number, are malformed.
fn content_length(headers: &[(String, String)]) -> Result<Option<u64>, HttpError> {
    let mut found = None;
    for (_, v) in headers.iter().filter(|(n, _)| n == "content-length") {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(HttpError::Malformed(
                "a Content-Length that is not a number",
            ));
        }
        let n: u64 = v.parse().map_err(|_| HttpError::BodyTooLarge)?;
        if found.is_some_and(|f| f != n) {
            return Err(HttpError::Malformed("two different Content-Lengths"));
        }
        found = Some(n);
    }
    Ok(found)
}

/// Decodes a chunked body from the front of `buf`: the body and the bytes
/// it took, or `None` when it is not all there yet.
fn dechunk(buf: &[u8], max: usize) -> Result<Option<(Bytes, usize)>, HttpError> {
    let mut body = BytesMut::new();
    let mut at = 0;
    loop {
        let Some(line_end) = find_crlf(&buf[at..]) else {
            if buf.len() - at > 1024 {
                return Err(HttpError::Malformed("a chunk size line over 1 KiB"));
            }
            return Ok(None);
        };
        let line = &buf[at..at + line_end];
        let size_text = line.split(|&b| b == b';').next().unwrap_or(&[]);
        let size_text = core::str::from_utf8(size_text)
            .map_err(|_| HttpError::Malformed("a bad chunk size"))?
            .trim();
        if size_text.is_empty() || size_text.len() > 16 {
            return Err(HttpError::Malformed("a bad chunk size"));
        }
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError::Malformed("a bad chunk size"))?;
        at += line_end + 2;
        if size == 0 {
            // Trailers, each ending in CRLF, then an empty line.
            loop {
                let Some(end) = find_crlf(&buf[at..]) else {
                    if buf.len() - at > 8 * 1024 {
                        return Err(HttpError::HeadTooLarge);
                    }
                    return Ok(None);
                };
                at += end + 2;
                if end == 0 {
                    return Ok(Some((body.freeze(), at)));
                }
            }
        }
        if body.len().saturating_add(size) > max {
            return Err(HttpError::BodyTooLarge);
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[at..at + size]);
        if &buf[at + size..at + size + 2] != b"\r\n" {
            return Err(HttpError::Malformed("a chunk not ended by CRLF"));
        }
        at += size + 2;
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// The reason phrase of `status`.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// Appends a response to `out`: status line, `Content-Length`, `headers`,
/// `Connection: close` when `close`, and `body`.
pub fn write_response(
    out: &mut BytesMut,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    close: bool,
) {
    // Straight into `out`, without a formatter: every response comes here.
    let fields: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    out.reserve(96 + fields + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.extend_from_slice(b" ");
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\nContent-Length: ");
    push_decimal(out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // A digit: below 10.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `HTTP/1.1 100 Continue` to `out`.
pub fn write_continue(out: &mut BytesMut) {
    out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
}

/// Appends the response to a request that could not be read (`e`), with
/// `Connection: close`.
pub fn write_error(out: &mut BytesMut, e: &HttpError) {
    let body = format!("{e}\n");
    write_response(
        out,
        e.status(),
        &[("Content-Type", "text/plain; charset=utf-8")],
        body.as_bytes(),
        true,
    );
}

#[cfg(test)]
mod tests;
