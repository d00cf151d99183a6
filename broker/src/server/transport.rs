//! What lies between the io driver's bytes and a connection's [`Session`]:
//! plain text, or TLS. The io layer stays protocol-agnostic (bytes in and
//! out) and the session socket-free (plain protocol bytes in and out); a
//! [`Transport`] turns one into the other, without a socket either.
//!
//! - **Plain.** Bytes pass through untouched, with one look at the first
//!   two: a TLS handshake record (`0x16 0x03`, a length no sluice frame can
//!   start with: it would declare at least 66 KiB before HELLO) means a TLS
//!   client on a plain-text port. It is logged, answered with a plain-text
//!   TLS `handshake_failure` alert (so the client reports a TLS failure
//!   rather than a reset) and closed.
//! - **TLS.** rustls is sans-IO: ciphertext goes in ([`Transport::on_data`]),
//!   plaintext comes out for the session and handshake records come out
//!   for the driver; each reply the session writes is encrypted on the way
//!   out ([`Transport::seal`]). A first byte that cannot begin a TLS
//!   handshake means a plain-text client on a TLS port: it is answered in
//!   plain text with the protocol's ERROR frame (`Unauthorized`, saying the
//!   port speaks TLS), which a sluice client shows as its connect error,
//!   and closed. Any other TLS failure (bad certificate, an untrusted or
//!   missing client certificate, garbage) gets rustls's alert and a close.
//!   A connection refused at the connection limit is refused inside TLS:
//!   the session's ERROR frame is sealed before the handshake is done and
//!   rustls keeps it until then ([`Transport::awaits_handshake`]), so the
//!   shard loop finishes the handshake before it closes and the client
//!   reads `TooManyConnections` as on a plain port. Only the refusal a
//!   driver sends out of file descriptors, with no connection to run a
//!   handshake on, is a plain-text TLS `internal_error` alert
//!   ([`TLS_INTERNAL_ERROR_ALERT`]).
//!
//! Either way the line logged says what happened and to whom, and only
//! that connection is touched. Nothing a peer sends can panic here: every
//! rustls error is a value.
//!
//! [`Session`]: super::session::Session

use std::io::{self, Read, Write};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rustls::{ServerConfig, ServerConnection};
use sluice_protocol::{ErrorCode, Reply};

/// The first byte of a TLS record that carries a handshake message.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// The major version byte of every TLS record since SSL 3.0.
const TLS_RECORD_MAJOR: u8 = 0x03;
/// A TLS 1.2-framed fatal `handshake_failure` alert, sent in plain text to
/// a TLS client on a plain-text port.
const TLS_HANDSHAKE_FAILURE_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28];
/// A TLS 1.2-framed fatal `internal_error` alert: what a TLS port sends a
/// connection it refuses out of file descriptors, before any handshake.
pub const TLS_INTERNAL_ERROR_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50];
/// Plaintext read out of rustls at a time.
const PLAINTEXT_CHUNK_BYTES: usize = 16 * 1024;

/// Why a connection was refused by its transport; each is a label of
/// `sluice_transport_refused_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A TLS handshake on a plain-text port.
    TlsOnPlainPort = 0,
    /// Plain text on a TLS port.
    PlainOnTlsPort = 1,
    /// The TLS handshake or a record failed (certificates, garbage).
    TlsFailed = 2,
}

/// Label values of the refusals, by discriminant.
pub const REFUSAL_NAMES: [&str; 3] = ["tls_on_plain_port", "plain_on_tls_port", "tls_failed"];

/// What [`Transport::on_data`] hands back.
#[derive(Debug)]
pub enum Inbound<'a> {
    /// Plain bytes for the session, borrowed from the driver's buffer.
    Passed(&'a [u8]),
    /// TLS records were read: the plaintext for the session is in the
    /// caller's buffer (possibly none).
    Decrypted {
        /// Handshake records to send back.
        reply: Option<Bytes>,
        /// The handshake that held sealed bytes (a refusal) ended in this
        /// read: a close that waited for it may go now.
        handshake_ended: bool,
    },
    /// Refuse the connection: send `reply` (if any), then close.
    Refuse {
        /// Why.
        why: Refusal,
        /// What to log.
        detail: String,
        /// Bytes to send before closing.
        reply: Option<Bytes>,
    },
}

/// One connection's transport. See the module docs.
#[derive(Debug)]
pub enum Transport {
    /// Plain text; `seen` counts the first bytes looked at (up to 2).
    Plain {
        /// The first bytes, while fewer than two arrived.
        head: [u8; 2],
        /// How many of `head` arrived.
        seen: u8,
    },
    /// TLS.
    Tls(Box<Tls>),
}

/// A TLS connection's state.
pub struct Tls {
    conn: ServerConnection,
    /// Ciphertext to hand to the driver.
    outgoing: Vec<u8>,
    /// Whether the first byte was looked at.
    sniffed: bool,
    /// Whether plaintext was sealed during the handshake (a refusal), which
    /// rustls sends once the handshake is done.
    sealed_early: bool,
}

impl core::fmt::Debug for Tls {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tls")
            .field("handshaking", &self.conn.is_handshaking())
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// A plain-text transport (a TLS handshake on it is refused).
    pub fn plain() -> Transport {
        Transport::Plain {
            head: [0; 2],
            seen: 0,
        }
    }

    /// A new connection's transport: TLS with `tls`, plain text without.
    ///
    /// # Errors
    /// When rustls cannot start a connection with `tls` (it only fails for
    /// a configuration it cannot use at all).
    pub fn new(tls: Option<&Arc<ServerConfig>>) -> Result<Transport, rustls::Error> {
        Ok(match tls {
            None => Transport::plain(),
            Some(config) => {
                let mut conn = ServerConnection::new(Arc::clone(config))?;
                // Every encrypted byte is taken out at once after each
                // write, so rustls's own send buffer never fills.
                conn.set_buffer_limit(None);
                Transport::Tls(Box::new(Tls {
                    conn,
                    outgoing: Vec::new(),
                    sniffed: false,
                    sealed_early: false,
                }))
            }
        })
    }

    /// Whether this is a TLS connection.
    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }

    /// Whether bytes sealed before the handshake finished still wait for
    /// it: closing now would drop them (a refusal the client would never
    /// read), so the close waits for the handshake.
    pub fn awaits_handshake(&self) -> bool {
        matches!(self, Transport::Tls(tls) if tls.sealed_early && tls.conn.is_handshaking())
    }

    /// Bytes arrived from the peer: what the loop does with them, in one
    /// value. Over TLS the plaintext is appended to `plaintext` (a buffer
    /// the caller lends, so that connections keep none of their own).
    pub fn on_data<'a>(&mut self, bytes: &'a [u8], plaintext: &mut Vec<u8>) -> Inbound<'a> {
        match self {
            Transport::Plain { head, seen } => {
                if *seen < 2 {
                    for &b in bytes.iter().take(usize::from(2 - *seen)) {
                        head[usize::from(*seen)] = b;
                        *seen += 1;
                    }
                    let looks_tls = head[0] == TLS_HANDSHAKE_RECORD
                        && (*seen < 2 || head[1] == TLS_RECORD_MAJOR);
                    if looks_tls && *seen == 2 {
                        return Inbound::Refuse {
                            why: Refusal::TlsOnPlainPort,
                            detail: "a TLS handshake arrived on a plain-text port: the client \
                                     uses TLS and this server was started without --tls-cert"
                                .to_owned(),
                            reply: Some(Bytes::from_static(&TLS_HANDSHAKE_FAILURE_ALERT)),
                        };
                    }
                }
                Inbound::Passed(bytes)
            }
            Transport::Tls(tls) => tls.on_data(bytes, plaintext),
        }
    }

    /// The bytes to send for `plain`, which the session wrote: the same
    /// bytes, or their TLS records.
    pub fn seal(&mut self, plain: Bytes) -> Bytes {
        match self {
            Transport::Plain { .. } => plain,
            Transport::Tls(tls) => {
                // With no buffer limit, a write takes everything: rustls
                // encrypts at once after the handshake and keeps the bytes
                // until then.
                tls.sealed_early |= tls.conn.is_handshaking() && !plain.is_empty();
                let _ = tls.conn.writer().write_all(&plain);
                tls.take_outgoing().unwrap_or_default()
            }
        }
    }

    /// A TLS connection about to close: its `close_notify` alert, to send
    /// after the last reply.
    pub fn close_notify(&mut self) -> Option<Bytes> {
        match self {
            Transport::Plain { .. } => None,
            Transport::Tls(tls) => {
                if tls.conn.is_handshaking() {
                    return None;
                }
                tls.conn.send_close_notify();
                tls.take_outgoing()
            }
        }
    }
}

impl Tls {
    fn on_data<'a>(&mut self, mut bytes: &'a [u8], plaintext: &mut Vec<u8>) -> Inbound<'a> {
        let awaited = self.sealed_early && self.conn.is_handshaking();
        if !self.sniffed && !bytes.is_empty() {
            self.sniffed = true;
            if bytes[0] != TLS_HANDSHAKE_RECORD
                || bytes.get(1).is_some_and(|&b| b != TLS_RECORD_MAJOR)
            {
                return Inbound::Refuse {
                    why: Refusal::PlainOnTlsPort,
                    detail: "plain text arrived on a TLS port: the client must connect with \
                             TLS (a CA to trust and the server's name)"
                        .to_owned(),
                    reply: Some(plain_text_refusal()),
                };
            }
        }
        while !bytes.is_empty() {
            let read = match self.conn.read_tls(&mut bytes) {
                Ok(n) => n,
                Err(e) => return self.failed(&e.to_string()),
            };
            if let Err(e) = self.conn.process_new_packets() {
                // rustls queued the alert that tells the peer why.
                return self.failed(&e.to_string());
            }
            if let Err(e) = self.read_plaintext(plaintext) {
                return self.failed(&e.to_string());
            }
            if read == 0 {
                break;
            }
        }
        Inbound::Decrypted {
            reply: self.take_outgoing(),
            handshake_ended: awaited && !self.conn.is_handshaking(),
        }
    }

    fn read_plaintext(&mut self, plaintext: &mut Vec<u8>) -> io::Result<()> {
        let mut chunk = [0u8; PLAINTEXT_CHUNK_BYTES];
        loop {
            match self.conn.reader().read(&mut chunk) {
                // The peer's close_notify: the driver reports its end of
                // stream next.
                Ok(0) => return Ok(()),
                Ok(n) => plaintext.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    fn failed(&mut self, why: &str) -> Inbound<'static> {
        let handshaking = self.conn.is_handshaking();
        Inbound::Refuse {
            why: Refusal::TlsFailed,
            detail: if handshaking {
                format!("TLS handshake failed: {why}")
            } else {
                format!("TLS failed: {why}")
            },
            reply: self.take_outgoing(),
        }
    }

    fn take_outgoing(&mut self) -> Option<Bytes> {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut self.outgoing).is_err() {
                break;
            }
        }
        if self.outgoing.is_empty() {
            return None;
        }
        Some(Bytes::from(core::mem::take(&mut self.outgoing)))
    }
}

/// The ERROR frame a plain-text client gets from a TLS port.
fn plain_text_refusal() -> Bytes {
    let reply = Reply::error(
        ErrorCode::Unauthorized,
        "this port speaks TLS: connect with TLS (the sluice client's tls_ca and server name, \
         the CLI's --tls-ca)",
    );
    let mut buf = BytesMut::with_capacity(reply.encoded_len());
    // A fixed message: its encoding cannot fail; an empty buffer is only a
    // close without the explanation.
    let _ = reply.encode(0, &mut buf);
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_port_passes_bytes_and_refuses_a_tls_handshake() {
        let mut plain = Vec::new();
        let mut t = Transport::new(None).unwrap();
        assert!(matches!(
            t.on_data(b"\x16", &mut plain),
            Inbound::Passed(b"\x16")
        ));
        assert!(matches!(
            t.on_data(b"\x03\x01\x02\x00", &mut plain),
            Inbound::Refuse {
                why: Refusal::TlsOnPlainPort,
                ..
            }
        ));
        // A sluice frame (a small little-endian length) passes, and after
        // the first two bytes nothing is looked at.
        let mut t = Transport::new(None).unwrap();
        assert!(matches!(
            t.on_data(b"\x16\x00\x00\x00", &mut plain),
            Inbound::Passed(_)
        ));
        assert!(matches!(
            t.on_data(b"\x16\x03", &mut plain),
            Inbound::Passed(_)
        ));
        assert!(plain.is_empty(), "plain text is passed, not copied");
        assert_eq!(t.seal(Bytes::from_static(b"x")), Bytes::from_static(b"x"));
        assert!(t.close_notify().is_none());
    }
}
