//! Every request and reply, with arbitrary values, survives encode, framing
//! and decode unchanged, and `encoded_len` is exact.

use bytes::BytesMut;
use proptest::prelude::*;
use sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT;
use sluice_protocol::{FrameDecoder, Reply, Request};

use crate::strategies::{reply, request};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn requests_round_trip(req in request(), request_id in any::<u32>()) {
        let mut buf = BytesMut::new();
        req.encode(request_id, &mut buf).unwrap();
        prop_assert_eq!(buf.len(), req.encoded_len());
        let frame = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT).decode(&mut buf).unwrap().unwrap();
        prop_assert!(buf.is_empty());
        prop_assert_eq!(frame.opcode, req.opcode());
        prop_assert_eq!(frame.flags, 0);
        prop_assert_eq!(frame.request_id, request_id);
        let back = Request::decode(frame.opcode, frame.payload).unwrap();
        prop_assert_eq!(back, req);
    }

    #[test]
    fn replies_round_trip(rep in reply(), request_id in any::<u32>()) {
        let mut buf = BytesMut::new();
        rep.encode(request_id, &mut buf).unwrap();
        prop_assert_eq!(buf.len(), rep.encoded_len());
        let frame = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT).decode(&mut buf).unwrap().unwrap();
        prop_assert!(buf.is_empty());
        prop_assert_eq!(frame.opcode, rep.opcode());
        prop_assert_eq!(frame.request_id, request_id);
        let back = Reply::decode(frame.opcode, frame.payload).unwrap();
        prop_assert_eq!(back, rep);
    }

    /// Several frames back to back in one buffer come out in order, however
    /// the stream is cut into reads.
    #[test]
    fn streams_of_frames_split_anywhere(reqs in proptest::collection::vec(request(), 1..8), cut in any::<prop::sample::Index>()) {
        let mut wire = BytesMut::new();
        for (i, r) in reqs.iter().enumerate() {
            r.encode(u32::try_from(i).unwrap(), &mut wire).unwrap();
        }
        let cut = cut.index(wire.len() + 1);
        let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT);
        let mut buf = BytesMut::from(&wire[..cut]);
        let mut got = Vec::new();
        while let Some(f) = decoder.decode(&mut buf).unwrap() {
            got.push(Request::decode(f.opcode, f.payload).unwrap());
        }
        buf.extend_from_slice(&wire[cut..]);
        while let Some(f) = decoder.decode(&mut buf).unwrap() {
            got.push(Request::decode(f.opcode, f.payload).unwrap());
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, reqs);
    }
}
