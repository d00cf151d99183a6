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

/// One parsed request. Its head is kept as one string (header names
/// lowercased in it), and the method, target and headers as spans of it:
/// two allocations a request, whatever its headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    head: String,
    method: Span,
    path: Span,
    query: Span,
    /// Each header's name and value, in order.
    headers: Vec<(Span, Span)>,
    /// The body (chunked bodies decoded).
    pub body: Bytes,
    /// Whether the connection stays open after the response (HTTP/1.1
    /// without `Connection: close`, or HTTP/1.0 with keep-alive).
    pub keep_alive: bool,
}

/// Where a part of a request's head lies in it: start and end.
type Span = (u32, u32);

impl Request {
    fn text(&self, (start, end): Span) -> &str {
        self.head
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }

    /// `GET`, `POST`, ...
    #[must_use]
    pub fn method(&self) -> &str {
        self.text(self.method)
    }

    /// The target's path, percent-encoded as sent (`/000000000000/q`).
    #[must_use]
    pub fn path(&self) -> &str {
        self.text(self.path)
    }

    /// The target's query string without the `?`, as sent ("" if none).
    #[must_use]
    pub fn query(&self) -> &str {
        self.text(self.query)
    }

    /// The headers in order, names lowercased, values trimmed.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.headers
            .iter()
            .map(|&(n, v)| (self.text(n), self.text(v)))
    }

    /// The first header named `name` (lowercase).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        // Lengths first: most names differ in theirs.
        let &(_, value) = self.headers.iter().find(|&&((start, end), _)| {
            (end - start) as usize == name.len() && self.text((start, end)) == name
        })?;
        Some(self.text(value))
    }
}

/// A request's parts, owned: what a caller that builds a request (and a
/// test that changes one) holds; [`Request::from`] makes the request, as
/// [`parse`] would have read it (header names lowercased, values trimmed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestParts {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The target's path.
    pub path: String,
    /// The target's query string without the `?`.
    pub query: String,
    /// Headers in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
}

impl From<RequestParts> for Request {
    fn from(parts: RequestParts) -> Request {
        let mut head = String::new();
        let mut put = |text: &str| {
            let start = span_at(head.len());
            head.push_str(text);
            (start, span_at(head.len()))
        };
        let method = put(&parts.method);
        let path = put(&parts.path);
        let query = put(&parts.query);
        let headers = parts
            .headers
            .iter()
            .map(|(n, v)| (put(&n.to_ascii_lowercase()), put(v.trim())))
            .collect();
        Request {
            head,
            method,
            path,
            query,
            headers,
            body: parts.body,
            keep_alive: parts.keep_alive,
        }
    }
}

/// `n` as a span's end: a head is at most `head_bytes_max`, far below 4 GiB.
fn span_at(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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
    // The head checked as UTF-8 once (httparse lets bytes above 0x7f
    // through in values), each part then a span of it: its offset from the
    // buffer's start (addresses compared, nothing read through them).
    let head = core::str::from_utf8(&buf[..head_len])
        .map_err(|_| HttpError::Malformed("a header value that is not UTF-8"))?;
    let offset = |part: &[u8]| (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
    let span = |part: &[u8]| -> Result<Span, HttpError> {
        let at = offset(part);
        match head.get(at..at + part.len()) {
            Some(_) => Ok((span_at(at), span_at(at + part.len()))),
            None => Err(HttpError::Malformed("a header value that is not UTF-8")),
        }
    };
    // Each header's spans, and the ones that shape the body and the
    // connection, in one pass (names matched by length first).
    let mut headers = Vec::with_capacity(req.headers.len());
    let (mut connection, mut expect, mut encoding) = (None, None, None);
    let mut content_length = None;
    for h in req.headers.iter() {
        let (start, end) = span(h.value)?;
        let value = head[start as usize..end as usize].trim();
        headers.push((span(h.name.as_bytes())?, span(value.as_bytes())?));
        let is = |name: &str| h.name.len() == name.len() && h.name.eq_ignore_ascii_case(name);
        if is("content-length") {
            content_length = Some(content_length_of(value, content_length)?);
        } else if is("connection") {
            connection = connection.or(Some(value));
        } else if is("expect") {
            expect = expect.or(Some(value));
        } else if is("transfer-encoding") {
            encoding = encoding.or(Some(value));
        }
    }
    let keep_alive = match version {
        0 => connection.is_some_and(|c| contains_ignore_case(c, "keep-alive")),
        _ => !connection.is_some_and(|c| contains_ignore_case(c, "close")),
    };
    let expect_continue = expect.is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
    let chunked = match encoding {
        None => false,
        Some(te) if te.eq_ignore_ascii_case("chunked") => true,
        Some(te) if te.eq_ignore_ascii_case("identity") => false,
        Some(_) => return Err(HttpError::Malformed("an unsupported Transfer-Encoding")),
    };
    if chunked && content_length.is_some() {
        return Err(HttpError::Malformed(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    let length = if chunked {
        None
    } else {
        Some(content_length.unwrap_or(0))
    };
    let Some((body, body_len)) = read_body(&buf[head_len..], length, limits)? else {
        return Ok(Parsed::Incomplete { expect_continue });
    };
    // Only a whole request is kept: its head copied once, names lowercased.
    let method = span(req.method.unwrap_or("").as_bytes())?;
    let target = req.path.unwrap_or("");
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (span(p.as_bytes())?, span(q.as_bytes())?),
        None => {
            let path = span(target.as_bytes())?;
            (path, (path.1, path.1))
        }
    };
    let mut head = head.to_owned();
    for &((s, e), _) in &headers {
        head[s as usize..e as usize].make_ascii_lowercase();
    }
    Ok(Parsed::Request(
        Request {
            head,
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

/// The body at the front of `rest`, `length` bytes long or chunked
/// (`None`), and the bytes it took; `None` when it is not all there yet.
fn read_body(
    rest: &[u8],
    length: Option<u64>,
    limits: &HttpLimits,
) -> Result<Option<(Bytes, usize)>, HttpError> {
    let Some(len) = length else {
        return dechunk(rest, limits.body_bytes_max);
    };
    if len > limits.body_bytes_max as u64 {
        return Err(HttpError::BodyTooLarge);
    }
    // Fits in usize: at most body_bytes_max.
    let len = usize::try_from(len).map_err(|_| HttpError::BodyTooLarge)?;
    if rest.len() < len {
        return Ok(None);
    }
    Ok(Some((Bytes::copy_from_slice(&rest[..len]), len)))
}

/// Whether `text` contains `word`, ASCII case ignored.
fn contains_ignore_case(text: &str, word: &str) -> bool {
    text.as_bytes()
        .windows(word.len())
        .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
}

/// A `Content-Length` header's value as a number, given the one found
/// before (if any): one that is not a number, or differs from the one
/// before, is malformed.
fn content_length_of(value: &str, before: Option<u64>) -> Result<u64, HttpError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::Malformed(
            "a Content-Length that is not a number",
        ));
    }
    let n: u64 = value.parse().map_err(|_| HttpError::BodyTooLarge)?;
    if before.is_some_and(|f| f != n) {
        return Err(HttpError::Malformed("two different Content-Lengths"));
    }
    Ok(n)
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
pub fn write_response<N: AsRef<str>, V: AsRef<str>>(
    out: &mut BytesMut,
    status: u16,
    headers: &[(N, V)],
    body: &[u8],
    close: bool,
) {
    // Straight into `out`, without a formatter: every response comes here.
    let fields: usize = headers
        .iter()
        .map(|(n, v)| n.as_ref().len() + v.as_ref().len() + 4)
        .sum();
    out.reserve(96 + fields + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.extend_from_slice(b" ");
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\nContent-Length: ");
    push_decimal(out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_ref().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_ref().as_bytes());
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
