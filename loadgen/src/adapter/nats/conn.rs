//! The NATS core text protocol under the adapter: a connection with one
//! wildcard inbox subscription, its frames and messages, and the JetStream
//! API's JSON request/reply.

use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::{INBOX_SID, PEER};
use crate::adapter::wire::{self, LineConn, last_len, push_u64, text};
use crate::adapter::{AdapterError, TargetUrl};

/// Where a message's line and payload sit in the read buffer.
pub(super) type FrameAt = (Range<usize>, Range<usize>);

/// One message from the server.
pub(super) struct Msg<'a> {
    pub(super) subject: &'a [u8],
    pub(super) reply: Option<&'a [u8]>,
    /// The status code of an `HMSG` whose headers start `NATS/1.0 <code>`.
    pub(super) status: Option<u16>,
    pub(super) payload: &'a [u8],
}

/// A NATS core connection with one wildcard inbox subscription.
pub(super) struct NatsConn {
    pub(super) conn: LineConn,
    pub(super) inbox: String,
    pub(super) next_reply: u64,
    pub(super) max_payload: usize,
    /// The server's version and whether JetStream is on, from INFO.
    pub(super) server: String,
}

fn unique_token() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos)
}

impl NatsConn {
    pub(super) fn connect(url: &TargetUrl, token: Option<&str>) -> Result<NatsConn, AdapterError> {
        let mut conn = LineConn::new(url.tcp(PEER)?, PEER);
        let info = String::from_utf8_lossy(conn.line()?).into_owned();
        let info_json = info.strip_prefix("INFO ").ok_or_else(|| {
            conn.protocol(format!("expected INFO, got {:?}", text(info.as_bytes())))
        })?;
        let info: Value = serde_json::from_str(info_json)
            .map_err(|e| conn.protocol(format!("INFO is not JSON: {e}")))?;
        let max_payload = info["max_payload"].as_u64().unwrap_or(1 << 20) as usize;
        let server = format!(
            "NATS {} (JetStream {})",
            info["version"].as_str().unwrap_or("?"),
            if info["jetstream"].as_bool() == Some(true) {
                "on"
            } else {
                "off"
            }
        );
        if info["headers"].as_bool() != Some(true) {
            return Err(AdapterError::Unsupported(
                "nats: the server does not support headers, which JetStream pulls need".into(),
            ));
        }
        let mut connect = json!({
            "verbose": false, "pedantic": false, "headers": true, "no_responders": true,
            "protocol": 1, "name": "sluice-loadgen", "lang": "rust", "version": env!("CARGO_PKG_VERSION"),
        });
        if let Some(t) = token {
            connect["auth_token"] = Value::String(t.to_owned());
        }
        let inbox = format!("_INBOX.{}", unique_token());
        let mut c = NatsConn {
            conn,
            inbox,
            next_reply: 0,
            max_payload,
            server,
        };
        let w = &mut c.conn.wbuf;
        w.extend_from_slice(b"CONNECT ");
        w.extend_from_slice(connect.to_string().as_bytes());
        w.extend_from_slice(b"\r\nSUB ");
        w.extend_from_slice(c.inbox.as_bytes());
        w.extend_from_slice(b".* ");
        w.extend_from_slice(INBOX_SID);
        w.extend_from_slice(b"\r\nPING\r\n");
        c.conn.flush()?;
        // The PONG says CONNECT and SUB were accepted (errors come first).
        while c.next_frame()?.is_some() {}
        Ok(c)
    }

    /// A fresh reply subject under the inbox.
    pub(super) fn reply_subject(&mut self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.inbox.as_bytes());
        out.push(b'.');
        push_u64(out, self.next_reply);
        self.next_reply += 1;
    }

    pub(super) fn publish(&mut self, subject: &[u8], reply: &[u8], payload: &[u8]) {
        let w = &mut self.conn.wbuf;
        w.extend_from_slice(b"PUB ");
        w.extend_from_slice(subject);
        w.push(b' ');
        if !reply.is_empty() {
            w.extend_from_slice(reply);
            w.push(b' ');
        }
        push_u64(w, payload.len() as u64);
        w.extend_from_slice(b"\r\n");
        w.extend_from_slice(payload);
        w.extend_from_slice(b"\r\n");
    }

    /// Reads until a message (its line and payload ranges) or a PONG
    /// (`None`), answering the server's PINGs and skipping INFO and +OK.
    pub(super) fn next_frame(&mut self) -> Result<Option<FrameAt>, AdapterError> {
        loop {
            let (line, payload) = self.conn.frame_at(|l| {
                Ok(if l.starts_with(b"MSG ") || l.starts_with(b"HMSG ") {
                    last_len(l)
                } else {
                    None
                })
            })?;
            let l = self.conn.bytes(line.clone());
            if l.starts_with(b"MSG ") || l.starts_with(b"HMSG ") {
                return Ok(Some((line, payload)));
            }
            if l == b"PING" {
                self.conn.wbuf.extend_from_slice(b"PONG\r\n");
                self.conn.flush()?;
            } else if l == b"PONG" {
                return Ok(None);
            } else if let Some(err) = l.strip_prefix(b"-ERR") {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: text(err).trim().to_owned(),
                });
            } else if !(l.starts_with(b"INFO ") || l == b"+OK") {
                return Err(self.conn.protocol(format!("unexpected line {:?}", text(l))));
            }
        }
    }

    /// Reads until a message arrives (a PONG nobody asked for is skipped).
    pub(super) fn next_msg(&mut self) -> Result<Msg<'_>, AdapterError> {
        let (line, payload) = loop {
            if let Some(frame) = self.next_frame()? {
                break frame;
            }
        };
        parse_msg(self.conn.bytes(line), self.conn.bytes(payload))
    }

    /// A JetStream API call: request, wait for its reply, fail on an error.
    pub(super) fn api(&mut self, subject: &str, body: &Value) -> Result<Value, AdapterError> {
        let mut reply = Vec::new();
        self.reply_subject(&mut reply);
        self.publish(subject.as_bytes(), &reply, body.to_string().as_bytes());
        self.conn.flush()?;
        loop {
            let m = self.next_msg()?;
            if m.subject != reply.as_slice() {
                continue;
            }
            if m.status == Some(503) {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: format!("no responders for {subject}: is JetStream enabled (-js)?"),
                });
            }
            let v: Value =
                serde_json::from_slice(m.payload).map_err(|e| AdapterError::Protocol {
                    peer: PEER,
                    detail: format!("{subject} reply is not JSON: {e}"),
                })?;
            if let Some(err) = v.get("error") {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: format!("{subject}: {err}"),
                });
            }
            return Ok(v);
        }
    }
}

/// The number of a reply subject under the connection's `inbox`.
pub(super) fn reply_number(inbox: &[u8], subject: &[u8]) -> Option<u64> {
    let rest = subject.strip_prefix(inbox)?;
    wire::parse_u64(rest.strip_prefix(b".")?)
}

/// Parses `MSG <subject> <sid> [reply] <bytes>` or
/// `HMSG <subject> <sid> [reply] <header bytes> <total bytes>`.
pub(super) fn parse_msg<'a>(line: &'a [u8], payload: &'a [u8]) -> Result<Msg<'a>, AdapterError> {
    let bad = || AdapterError::Protocol {
        peer: PEER,
        detail: format!("bad message line {:?}", text(line)),
    };
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let verb = tokens.next().ok_or_else(bad)?;
    let tokens: Vec<&[u8]> = tokens.collect();
    let headers = verb == b"HMSG";
    let sizes = if headers { 2 } else { 1 };
    if tokens.len() < 2 + sizes || tokens.len() > 3 + sizes {
        return Err(bad());
    }
    let subject = tokens[0];
    let reply = (tokens.len() == 3 + sizes).then(|| tokens[2]);
    if !headers {
        return Ok(Msg {
            subject,
            reply,
            status: None,
            payload,
        });
    }
    let header_len = last_len(tokens[tokens.len() - 2]).ok_or_else(bad)?;
    if header_len > payload.len() {
        return Err(bad());
    }
    let (head, body) = payload.split_at(header_len);
    // "NATS/1.0 408 Request Timeout\r\n..." or "NATS/1.0\r\n..."
    let status = head
        .strip_prefix(b"NATS/1.0 ")
        .and_then(|r| r.get(..3))
        .and_then(|code| std::str::from_utf8(code).ok()?.parse::<u16>().ok());
    Ok(Msg {
        subject,
        reply,
        status,
        payload: body,
    })
}
