//! Every request and reply, with arbitrary values, survives encode, framing
//! and decode unchanged, and `encoded_len` is exact.

use bytes::BytesMut;
use proptest::prelude::*;
use sluice_protocol::limits::FRAME_BYTES_MAX_LIMIT;
use sluice_protocol::{
    FrameDecoder, MessageAttributes, QueueName, ReceivedBatch, ReceivedMessage, Reply, Request,
    SendRequest,
};

use crate::strategies::{attributes, received_message, reply, request, send_entry};

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
        prop_assert_eq!(frame.flags, req.flags());
        prop_assert_eq!(frame.request_id, request_id);
        let back = Request::decode(frame.opcode, frame.flags, frame.payload).unwrap();
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

    /// The borrowed views of a decoded batch show exactly the entries it was
    /// built from (the validator and the iterator agree).
    #[test]
    fn batch_views_show_what_was_sent(
        entries in proptest::collection::vec(send_entry(), 1..12),
        messages in proptest::collection::vec(received_message(), 0..12),
    ) {
        let req = Request::Send(SendRequest::new(QueueName::from_static("q"), &entries).unwrap());
        let mut buf = BytesMut::new();
        req.encode(1, &mut buf).unwrap();
        let frame = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT).decode(&mut buf).unwrap().unwrap();
        let Ok(Request::Send(send)) = Request::decode(frame.opcode, frame.flags, frame.payload) else {
            return Err(TestCaseError::fail("not a SEND"));
        };
        prop_assert_eq!(send.entries.iter().len(), entries.len());
        for (view, entry) in send.entries.iter().zip(&entries) {
            prop_assert_eq!(view, entry.as_view());
        }
        prop_assert_eq!(send.entries.to_entries(), entries);

        let rep = Reply::Receive {
            messages: ReceivedBatch::from_messages(messages.iter().map(ReceivedMessage::as_view)).unwrap(),
        };
        rep.encode(2, &mut buf).unwrap();
        let frame = FrameDecoder::new(FRAME_BYTES_MAX_LIMIT).decode(&mut buf).unwrap().unwrap();
        let Ok(Reply::Receive { messages: got }) = Reply::decode(frame.opcode, frame.payload) else {
            return Err(TestCaseError::fail("not a RECEIVE reply"));
        };
        for (view, m) in got.iter().zip(&messages) {
            prop_assert_eq!(view, m.as_view());
            prop_assert_eq!(view.attributes.iter().collect::<Vec<_>>(), m.attributes.iter().collect::<Vec<_>>());
        }
        prop_assert_eq!(got.to_messages(), messages);
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
            got.push(Request::decode(f.opcode, f.flags, f.payload).unwrap());
        }
        buf.extend_from_slice(&wire[cut..]);
        while let Some(f) = decoder.decode(&mut buf).unwrap() {
            got.push(Request::decode(f.opcode, f.flags, f.payload).unwrap());
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, reqs);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Attributes as a store kept them read as the checked ones do: every
    /// pair, as text and as bytes, and every key's first value.
    #[test]
    fn stored_attributes_read_as_checked_ones(attrs in attributes()) {
        let stored = MessageAttributes::from_stored(attrs.count(), attrs.wire_bytes().clone());
        prop_assert_eq!(&stored, &attrs);
        let view = stored.as_view();
        let text: Vec<(&str, &str)> = view.iter().collect();
        let bytes: Vec<(&[u8], &[u8])> = view.byte_pairs().collect();
        prop_assert_eq!(text.len(), attrs.len());
        for (&(k, v), &(kb, vb)) in text.iter().zip(&bytes) {
            prop_assert_eq!((k.as_bytes(), v.as_bytes()), (kb, vb));
            let first = text.iter().find(|(k2, _)| *k2 == k).map(|&(_, v)| v);
            prop_assert_eq!(view.get(k), first);
            prop_assert_eq!(view.get_bytes(k), first.map(str::as_bytes));
        }
        prop_assert_eq!(view.get("\u{0}absent"), None);
    }
}
