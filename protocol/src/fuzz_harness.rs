//! Harnesses for the fuzz targets in `protocol/fuzz` (and the property tests):
//! always compiled, so the fuzz crate's targets are one line each and the
//! harness is built and tested with the library.
//!
//! A harness feeds arbitrary bytes to the decoders and panics (through
//! `assert!`) only when a property breaks: a decoder panicking on its own, a
//! decoded value that does not re-encode to the bytes it came from, or an
//! `encoded_len` that disagrees with the encoder.

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::{FRAME_OVERHEAD_BYTES, Frame, FrameDecoder, flags, opcode};
use crate::limits::FRAME_BYTES_MAX_DEFAULT;
use crate::message::{ReceivedBatch, ReceivedMessage, SendBatch};
use crate::reply::Reply;
use crate::request::Request;

/// Runs everything on `data`:
///
/// 1. the frame decoder over `data` as a byte stream, whole and then one
///    byte at a time, which must yield the same frames and the same error;
/// 2. every frame (opcode, flags, payload) through [`Request::decode`] or
///    [`Reply::decode`] (by its opcode), re-encoding what decodes and
///    checking the bytes match the frame (a reply's flags written as 0);
/// 3. `data` as a payload of every request and reply opcode, with flags 0
///    and with every flag a request defines, with the same round-trip
///    check.
///
/// # Panics
/// When a property above breaks: that is the finding.
pub fn decode_all(data: &[u8]) {
    let (frames, error) = frames_whole(data);
    let (frames_bytewise, error_bytewise) = frames_bytewise(data);
    assert_eq!(
        frames, frames_bytewise,
        "framing depends on how bytes arrive"
    );
    assert_eq!(
        error, error_bytewise,
        "framing error depends on how bytes arrive"
    );
    for frame in &frames {
        check_frame(frame.opcode, frame.flags, frame.request_id, &frame.payload);
    }
    let payload = Bytes::copy_from_slice(data);
    for op in opcode::REQUESTS.iter().chain(opcode::REPLIES.iter()) {
        check_payload(*op, 0, &payload);
        let defined = flags::defined(*op);
        if defined != 0 {
            check_frame(*op, defined, 0, &payload);
        }
    }
}

/// [`check_frame`] with flags 0.
///
/// # Panics
/// When the round trip or `encoded_len` is wrong.
pub fn check_payload(op: u8, request_id: u32, payload: &Bytes) {
    check_frame(op, 0, request_id, payload);
}

/// Decodes a frame of opcode `op` with header `frame_flags` and `payload`
/// and, if it decodes, checks that it re-encodes to exactly the frame it
/// came from (a reply with flags 0: replies define none).
///
/// # Panics
/// When the round trip or `encoded_len` is wrong.
pub fn check_frame(op: u8, frame_flags: u8, request_id: u32, payload: &Bytes) {
    let framed = |f: u8| {
        let mut expected = BytesMut::new();
        let frame = Frame {
            opcode: op,
            flags: f,
            request_id,
            payload: payload.clone(),
        };
        frame.encode(&mut expected).ok().map(|()| expected)
    };
    let Some(expected) = framed(frame_flags) else {
        return;
    };
    let mut out = BytesMut::new();
    if let Ok(request) = Request::decode(op, frame_flags, payload.clone()) {
        assert_eq!(request.opcode(), op);
        assert!(
            request.encode(request_id, &mut out).is_ok(),
            "decoded request does not encode"
        );
        assert_eq!(
            out.len(),
            request.encoded_len(),
            "encoded_len of {request:?}"
        );
        assert_eq!(out, expected, "request round trip of {request:?}");
        let again = Request::decode(
            op,
            request.flags(),
            out.split_off(FRAME_OVERHEAD_BYTES).freeze(),
        );
        assert_eq!(again.as_ref(), Ok(&request));
        if let Request::Send(send) = &request {
            // The borrowed views must see exactly what the validator accepted.
            let entries = send.entries.to_entries();
            assert_eq!(entries.len(), send.entries.len());
            assert_eq!(
                SendBatch::from_entries(&entries).as_ref(),
                Ok(&send.entries)
            );
        }
    }
    out.clear();
    let Some(expected) = framed(0) else {
        return;
    };
    if let Ok(reply) = Reply::decode(op, payload.clone()) {
        assert_eq!(reply.opcode(), op);
        assert!(
            reply.encode(request_id, &mut out).is_ok(),
            "decoded reply does not encode"
        );
        assert_eq!(out.len(), reply.encoded_len(), "encoded_len of {reply:?}");
        assert_eq!(out, expected, "reply round trip of {reply:?}");
        let again = Reply::decode(op, out.split_off(FRAME_OVERHEAD_BYTES).freeze());
        assert_eq!(again.as_ref(), Ok(&reply));
        if let Reply::Receive { messages } = &reply {
            let owned = messages.to_messages();
            assert_eq!(owned.len(), messages.len());
            let rebuilt = ReceivedBatch::from_messages(owned.iter().map(ReceivedMessage::as_view));
            assert_eq!(rebuilt.as_ref(), Ok(messages));
        }
    }
}

type Framed = (Vec<Frame>, Option<crate::frame::FrameError>);

fn frames_whole(data: &[u8]) -> Framed {
    let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT);
    let mut buf = BytesMut::from(data);
    let mut frames = Vec::new();
    loop {
        let before = buf.len();
        match decoder.decode(&mut buf) {
            Ok(Some(f)) => {
                assert_eq!(
                    before - buf.len(),
                    f.encoded_len(),
                    "frame consumed the wrong number of bytes"
                );
                frames.push(f);
            }
            Ok(None) => return (frames, None),
            Err(e) => {
                assert_eq!(buf.len(), before, "a framing error consumed bytes");
                return (frames, Some(e));
            }
        }
    }
}

fn frames_bytewise(data: &[u8]) -> Framed {
    let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for &b in data {
        buf.put_u8(b);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_valid_and_invalid_input() {
        let mut buf = BytesMut::new();
        Request::Ping { nonce: 5 }.encode(1, &mut buf).unwrap();
        Reply::Pong { nonce: 5 }.encode(1, &mut buf).unwrap();
        buf.put_slice(&[3, 0, 0, 0]);
        decode_all(&buf);
        decode_all(&[]);
        decode_all(&[0xff; 64]);
    }
}
