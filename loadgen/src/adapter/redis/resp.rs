//! Hand-written RESP2 under the Redis adapter: reply headers, commands,
//! stream entries and stream ids.

use super::PEER;
use crate::adapter::wire::{LineConn, parse_u64, push_u64, text};
use crate::adapter::{AdapterError, Receipt, TargetUrl};

/// A RESP reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Head {
    Simple,
    Int(i64),
    /// A bulk string whose bytes are returned alongside.
    Bulk,
    Nil,
    Array(usize),
}

/// A RESP connection.
pub(super) struct Resp {
    pub(super) conn: LineConn,
}

impl Resp {
    pub(super) fn connect(url: &TargetUrl, token: Option<&str>) -> Result<Resp, AdapterError> {
        let mut r = Resp {
            conn: LineConn::new(url.tcp(PEER)?, PEER),
        };
        if let Some(token) = token {
            r.command(&[b"AUTH", token.as_bytes()]);
            r.conn.flush()?;
            r.expect_simple()?;
        }
        Ok(r)
    }

    /// Appends one command to the write buffer.
    pub(super) fn command(&mut self, args: &[&[u8]]) {
        let w = &mut self.conn.wbuf;
        w.push(b'*');
        push_u64(w, args.len() as u64);
        w.extend_from_slice(b"\r\n");
        for a in args {
            push_bulk(w, a);
        }
    }

    /// Reads one reply header; a bulk string's bytes come with it. Error
    /// replies become [`AdapterError::Server`].
    pub(super) fn read(&mut self) -> Result<(Head, &[u8]), AdapterError> {
        let (line, payload) = self.conn.frame(|line| match line.first() {
            Some(b'$') if line.get(1) != Some(&b'-') => parse_u64(&line[1..])
                .map(|n| Some(n as usize))
                .ok_or_else(|| AdapterError::Protocol {
                    peer: PEER,
                    detail: format!("bad bulk length in {:?}", text(line)),
                }),
            _ => Ok(None),
        })?;
        let bad = || AdapterError::Protocol {
            peer: PEER,
            detail: format!("bad reply line {:?}", text(line)),
        };
        let head = match line.first() {
            Some(b'+') => Head::Simple,
            Some(b'-') => {
                return Err(AdapterError::Server {
                    peer: PEER,
                    message: text(&line[1..]),
                });
            }
            Some(b':') => {
                let (neg, digits) = match line.get(1) {
                    Some(b'-') => (true, &line[2..]),
                    _ => (false, &line[1..]),
                };
                let v = parse_u64(digits)
                    .and_then(|v| i64::try_from(v).ok())
                    .ok_or_else(bad)?;
                Head::Int(if neg { -v } else { v })
            }
            Some(b'$') if line.get(1) == Some(&b'-') => Head::Nil,
            Some(b'$') => Head::Bulk,
            Some(b'*') if line.get(1) == Some(&b'-') => Head::Nil,
            Some(b'*') => Head::Array(
                parse_u64(&line[1..])
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(bad)?,
            ),
            _ => return Err(bad()),
        };
        Ok((head, payload))
    }

    pub(super) fn expect_simple(&mut self) -> Result<(), AdapterError> {
        match self.read()?.0 {
            Head::Simple => Ok(()),
            other => Err(self.conn.protocol(format!("expected +OK, got {other:?}"))),
        }
    }

    pub(super) fn expect_int(&mut self) -> Result<i64, AdapterError> {
        match self.read()?.0 {
            Head::Int(v) => Ok(v),
            other => Err(self
                .conn
                .protocol(format!("expected an integer, got {other:?}"))),
        }
    }

    pub(super) fn expect_array(&mut self) -> Result<Option<usize>, AdapterError> {
        match self.read()?.0 {
            Head::Array(n) => Ok(Some(n)),
            Head::Nil => Ok(None),
            other => Err(self
                .conn
                .protocol(format!("expected an array, got {other:?}"))),
        }
    }

    pub(super) fn expect_bulk(&mut self) -> Result<&[u8], AdapterError> {
        match self.read()? {
            (Head::Bulk, bytes) => Ok(bytes),
            (other, _) => Err(AdapterError::Protocol {
                peer: PEER,
                detail: format!("expected a bulk string, got {other:?}"),
            }),
        }
    }

    /// Reads and discards one whole reply.
    pub(super) fn skip(&mut self) -> Result<(), AdapterError> {
        let mut left = 1usize;
        while left > 0 {
            left -= 1;
            if let Head::Array(n) = self.read()?.0 {
                left += n;
            }
        }
        Ok(())
    }

    /// Sends one command and reads its bulk reply as text (for set-up).
    pub(super) fn call_text(&mut self, args: &[&[u8]]) -> Result<String, AdapterError> {
        self.command(args);
        self.conn.flush()?;
        Ok(String::from_utf8_lossy(self.expect_bulk()?).into_owned())
    }

    /// Reads `n` stream entries (`[id, [field, value, ...]]`) and hands each
    /// `d` field to `on_message`.
    pub(super) fn read_entries(
        &mut self,
        n: usize,
        on_message: &mut dyn FnMut(&[u8], Receipt),
    ) -> Result<usize, AdapterError> {
        let mut delivered = 0;
        for _ in 0..n {
            if self.expect_array()? != Some(2) {
                return Err(self.conn.protocol("stream entry is not [id, fields]"));
            }
            let id = parse_id(self.expect_bulk()?).ok_or_else(|| AdapterError::Protocol {
                peer: PEER,
                detail: "bad stream entry id".into(),
            })?;
            let fields = self.expect_array()?.unwrap_or(0);
            if fields % 2 != 0 {
                return Err(self.conn.protocol("odd number of fields in a stream entry"));
            }
            let mut seen = false;
            for _ in 0..fields / 2 {
                let is_body = self.expect_bulk()? == b"d";
                let value = self.expect_bulk()?;
                if is_body && !seen {
                    seen = true;
                    on_message(value, Receipt::Ids(id.0, id.1));
                }
            }
            if seen {
                delivered += 1;
            }
        }
        Ok(delivered)
    }
}

pub(super) fn push_bulk(w: &mut Vec<u8>, a: &[u8]) {
    w.push(b'$');
    push_u64(w, a.len() as u64);
    w.extend_from_slice(b"\r\n");
    w.extend_from_slice(a);
    w.extend_from_slice(b"\r\n");
}

/// Parses a stream id `ms-seq`.
pub(super) fn parse_id(id: &[u8]) -> Option<(u64, u64)> {
    let dash = id.iter().position(|&b| b == b'-')?;
    Some((parse_u64(&id[..dash])?, parse_u64(&id[dash + 1..])?))
}

/// Appends a stream id `ms-seq` as a bulk string.
pub(super) fn push_id_bulk(w: &mut Vec<u8>, (ms, seq): (u64, u64)) {
    let mut id = Vec::with_capacity(41);
    push_u64(&mut id, ms);
    id.push(b'-');
    push_u64(&mut id, seq);
    push_bulk(w, &id);
}
