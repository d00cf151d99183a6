//! The HELLO handshake without a socket, one for both clients: the blocking
//! client drives it with `std::net`, the async one with tokio, and neither
//! repeats the protocol's part (the frame to write, cutting the reply out of
//! what was read, checking it, raising the frame limit after it).
//!
//! ```text
//! let (mut handshake, hello_frame) = Handshake::start(addr, token, session_timeout_ms)?;
//! write hello_frame;
//! loop {
//!     read into handshake.buffer();
//!     if let Some(reply) = handshake.poll()? { break }
//! }
//! let (decoder, leftover) = handshake.finish(&reply);
//! ```

use bytes::{Bytes, BytesMut};
use sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT;
use sluice_protocol::{FrameDecoder, HelloReply, Reply};

use crate::error::{Error, Result};
use crate::limits::ADDR_DEFAULT;
use crate::ops::{self, Operation};

/// The request id of the HELLO, the first frame of every connection.
pub(crate) const HELLO_REQUEST_ID: u32 = 1;

/// How an HTTP answer starts (`HTTP/1.1 400 Bad Request`). Read as a
/// frame's little-endian length it is 1,347,703,884 bytes, far above any
/// frame limit, so no sluice reply starts with it.
const HTTP_ANSWER: &[u8] = b"HTTP";

/// The most of an HTTP status line an error quotes.
const STATUS_LINE_QUOTED_MAX: usize = 80;

/// A HELLO sent and its reply awaited.
#[derive(Debug)]
pub(crate) struct Handshake {
    /// The address connected to, for the errors.
    addr: String,
    decoder: FrameDecoder,
    buf: BytesMut,
}

impl Handshake {
    /// Starts a handshake with the server at `addr`, presenting `token`
    /// (empty: none) and asking for `session_timeout_ms` (0: none); returns
    /// it and the HELLO frame to write before anything else.
    ///
    /// # Errors
    /// `InvalidArgument` when the token does not fit a HELLO.
    pub(crate) fn start(
        addr: &str,
        token: Bytes,
        session_timeout_ms: u32,
    ) -> Result<(Handshake, BytesMut)> {
        let mut frame = BytesMut::new();
        ops::Hello(token, session_timeout_ms)
            .request()?
            .encode(HELLO_REQUEST_ID, &mut frame)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let handshake = Handshake {
            addr: addr.to_owned(),
            // Any reply the protocol allows, until the server says its limit.
            decoder: FrameDecoder::new(FRAME_BYTES_MAX_LIMIT),
            buf: BytesMut::new(),
        };
        Ok((handshake, frame))
    }

    /// Where bytes read from the connection go.
    pub(crate) fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The server's HELLO reply once it has arrived whole; `None` while
    /// more bytes are needed.
    ///
    /// # Errors
    /// `Protocol` for framing or a reply that does not decode, or another
    /// reply than HELLO's, and for an HTTP answer (the metrics port, or
    /// another HTTP server) with a message that says so; the server's ERROR
    /// (`Unauthorized`, `UnsupportedVersion`, ...) as its error.
    pub(crate) fn poll(&mut self) -> Result<Option<HelloReply>> {
        if self.buf.starts_with(HTTP_ANSWER) {
            return Err(self.http_answer());
        }
        let frame = match self.decoder.decode(&mut self.buf) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(None),
            Err(e) => return Err(Error::Protocol(format!("HELLO reply: {e}"))),
        };
        let reply = Reply::decode(frame.opcode, frame.payload)
            .map_err(|e| Error::Protocol(format!("HELLO reply: {e}")))?;
        ops::parse::<ops::Hello>(Ok(reply)).map(Some)
    }

    /// The error for a server that answered the HELLO in HTTP, quoting its
    /// status line as far as it has arrived.
    fn http_answer(&self) -> Error {
        let line = self.buf[..]
            .split(|&b| b == b'\r' || b == b'\n')
            .next()
            .unwrap_or_default();
        let quoted: String = String::from_utf8_lossy(line)
            .chars()
            .filter(|c| !c.is_control())
            .take(STATUS_LINE_QUOTED_MAX)
            .collect();
        Error::Protocol(format!(
            "{addr} answered in HTTP ({quoted:?}): this is an HTTP server (the metrics port?): \
             sluice listens on the address of the server's --listen (default {ADDR_DEFAULT}), \
             not on its --metrics-addr",
            addr = self.addr,
        ))
    }

    /// The decoder for the rest of the connection (its limit the server's)
    /// and the bytes read past the HELLO reply, which belong to it.
    pub(crate) fn finish(mut self, hello: &HelloReply) -> (FrameDecoder, BytesMut) {
        self.decoder
            .set_frame_bytes_max(hello.limits.frame_bytes_max);
        (self.decoder, self.buf)
    }
}

#[cfg(test)]
mod tests {
    use sluice_protocol::limits::PROTOCOL_VERSION;
    use sluice_protocol::{ErrorCode, ServerLimits};

    use super::*;

    fn hello_reply(frame_bytes_max: u32) -> HelloReply {
        HelloReply {
            version: PROTOCOL_VERSION,
            server_version: "sluice test".into(),
            shard: 0,
            shards: 1,
            limits: ServerLimits {
                frame_bytes_max,
                batch_entries_max: 1024,
                requests_in_flight_max: 1024,
                receive_wait_ms_max: 20_000,
            },
        }
    }

    fn wire(reply: &Reply) -> BytesMut {
        let mut b = BytesMut::new();
        reply.encode(HELLO_REQUEST_ID, &mut b).unwrap();
        b
    }

    #[test]
    fn the_hello_frame_carries_the_token_and_the_session_timeout() {
        let (_, mut frame) = Handshake::start("h:1", Bytes::from_static(b"tok"), 1_500).unwrap();
        let f = FrameDecoder::new(4096).decode(&mut frame).unwrap().unwrap();
        assert_eq!(f.request_id, HELLO_REQUEST_ID);
        let sluice_protocol::Request::Hello(h) =
            sluice_protocol::Request::decode(f.opcode, f.flags, f.payload).unwrap()
        else {
            panic!("not a HELLO")
        };
        assert_eq!(
            (h.version, &h.token[..], h.session_timeout_ms),
            (PROTOCOL_VERSION, &b"tok"[..], 1_500)
        );
    }

    #[test]
    fn the_reply_may_arrive_in_pieces_and_what_follows_it_is_kept() {
        let (mut h, _) = Handshake::start("h:1", Bytes::new(), 0).unwrap();
        let reply = Reply::Hello(hello_reply(64 * 1024));
        let mut bytes = wire(&reply);
        bytes.extend_from_slice(&wire(&Reply::Pong { nonce: 9 }));
        let (first, rest) = bytes.split_at(5);
        h.buffer().extend_from_slice(first);
        assert!(h.poll().unwrap().is_none());
        h.buffer().extend_from_slice(rest);
        let got = h.poll().unwrap().expect("the reply");
        assert_eq!(Reply::Hello(got.clone()), reply);
        let (mut decoder, mut leftover) = h.finish(&got);
        assert_eq!(decoder.frame_bytes_max(), 64 * 1024);
        let pong = decoder.decode(&mut leftover).unwrap().expect("the PONG");
        assert_eq!(
            Reply::decode(pong.opcode, pong.payload).unwrap(),
            Reply::Pong { nonce: 9 }
        );
    }

    #[test]
    fn an_error_reply_is_the_server_s_error() {
        let (mut h, _) = Handshake::start("h:1", Bytes::new(), 0).unwrap();
        let refused = Reply::error(ErrorCode::Unauthorized, "wrong auth token");
        h.buffer().extend_from_slice(&wire(&refused));
        let e = h.poll().unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::Unauthorized));
        let (mut h, _) = Handshake::start("h:1", Bytes::new(), 0).unwrap();
        h.buffer()
            .extend_from_slice(&wire(&Reply::Pong { nonce: 1 }));
        assert!(matches!(h.poll(), Err(Error::Protocol(_))));
        let (mut h, _) = Handshake::start("h:1", Bytes::new(), 0).unwrap();
        h.buffer().extend_from_slice(&[3, 0, 0, 0]);
        assert!(matches!(h.poll(), Err(Error::Protocol(_))));
    }

    #[test]
    fn an_http_answer_is_named_as_one() {
        for answer in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP",
        ] {
            let (mut h, _) = Handshake::start("127.0.0.1:7172", Bytes::new(), 0).unwrap();
            h.buffer().extend_from_slice(answer);
            let e = h.poll().unwrap_err();
            assert!(matches!(e, Error::Protocol(_)), "{e}");
            let shown = e.to_string();
            assert!(!shown.contains("1347703884"), "{shown}");
            assert!(
                shown.contains("127.0.0.1:7172 answered in HTTP")
                    && shown.contains("this is an HTTP server (the metrics port?)")
                    && shown.contains("default 127.0.0.1:7171"),
                "{shown}"
            );
            assert!(!e.is_retryable(), "{shown}");
        }
        let (mut h, _) = Handshake::start("h:1", Bytes::new(), 0).unwrap();
        h.buffer()
            .extend_from_slice(b"HTTP/1.1 400 Bad Request\r\n");
        assert!(
            h.poll()
                .unwrap_err()
                .to_string()
                .contains("(\"HTTP/1.1 400 Bad Request\")")
        );
    }
}
