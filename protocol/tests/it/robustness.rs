//! Hostile input: arbitrary bytes, truncated frames, mutated vectors and
//! oversized declared lengths. The decoders must never panic, must re-encode
//! whatever they accept byte for byte (checked by the fuzz harness), and
//! must not allocate beyond what the received bytes warrant.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_protocol::Millis;
use sluice_protocol::frame::FRAME_OVERHEAD_BYTES;
use sluice_protocol::fuzz_harness::{check_payload, decode_all};
use sluice_protocol::limits::{FRAME_BYTES_MAX_DEFAULT, FRAME_BYTES_MAX_LIMIT};
use sluice_protocol::{ErrorCode, FrameDecoder, FrameError, Reply, Request, opcode};

use crate::alloc::measure;
use crate::vectors;

/// Decoded values are bigger in memory than on the wire (a 2-byte queue name
/// becomes a 32-byte handle, a 10-byte send entry a 112-byte struct): this
/// is the most any decoder may allocate per payload byte, plus
/// [`ALLOC_SLACK_BYTES`].
const ALLOC_BYTES_PER_PAYLOAD_BYTE: usize = 16;
const ALLOC_SLACK_BYTES: usize = 256;

fn all_opcodes() -> impl Strategy<Value = u8> {
    prop_oneof![
        proptest::sample::select(opcode::REQUESTS.to_vec()),
        proptest::sample::select(opcode::REPLIES.to_vec()),
        any::<u8>(),
    ]
}

fn vector_bytes() -> Vec<Vec<u8>> {
    vectors::all().iter().map(|v| v.dump.bytes()).collect()
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: prop::sample::Index, bit: u8 },
    Set { at: prop::sample::Index, byte: u8 },
    Insert { at: prop::sample::Index, byte: u8 },
    Delete { at: prop::sample::Index },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0..8u8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<prop::sample::Index>(), any::<u8>())
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (any::<prop::sample::Index>(), any::<u8>())
            .prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        any::<prop::sample::Index>().prop_map(|at| Mutation::Delete { at }),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let len = bytes.len();
    match m {
        Mutation::Flip { at, bit } => bytes[at.index(len)] ^= 1 << bit,
        Mutation::Set { at, byte } => bytes[at.index(len)] = *byte,
        Mutation::Insert { at, byte } => bytes.insert(at.index(bytes.len() + 1), *byte),
        Mutation::Delete { at } => {
            bytes.remove(at.index(bytes.len()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Arbitrary bytes through the frame decoder (whole and byte by byte) and
    /// through every payload decoder.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1024)) {
        decode_all(&data);
    }

    /// Arbitrary payloads for any opcode: no panic, round trip when accepted,
    /// and allocation bounded by the payload's size.
    #[test]
    fn arbitrary_payloads_allocate_in_proportion(op in all_opcodes(), data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let payload = Bytes::from(data);
        check_payload(op, 7, &payload);
        let bound = ALLOC_BYTES_PER_PAYLOAD_BYTE * payload.len() + ALLOC_SLACK_BYTES;
        let (_, bytes, _) = measure(|| Request::decode(op, 0, payload.clone()));
        prop_assert!(bytes <= bound, "request {op:#04x}: {bytes} bytes for a {}-byte payload", payload.len());
        let (_, bytes, _) = measure(|| Reply::decode(op, payload.clone()));
        prop_assert!(bytes <= bound, "reply {op:#04x}: {bytes} bytes for a {}-byte payload", payload.len());
    }

    /// Valid frames with bytes flipped, overwritten, inserted or deleted.
    #[test]
    fn mutated_vectors_never_panic(
        which in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(mutation(), 1..5),
    ) {
        let all = vector_bytes();
        let mut bytes = all[which.index(all.len())].clone();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        decode_all(&bytes);
    }

    /// A declared size above the limit is refused from the prefix alone:
    /// nothing consumed, nothing reserved, nothing allocated.
    #[test]
    fn oversized_declared_lengths_are_refused_without_allocating(
        limit in prop_oneof![Just(4096u32), Just(FRAME_BYTES_MAX_DEFAULT), Just(FRAME_BYTES_MAX_LIMIT), 10..FRAME_BYTES_MAX_LIMIT],
        excess in prop_oneof![1..16u64, 1..=u64::from(u32::MAX)],
        tail in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let declared = u64::from(limit) - 4 + excess;
        prop_assume!(declared <= u64::from(u32::MAX));
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(&u32::try_from(declared).unwrap().to_le_bytes());
        buf.extend_from_slice(&tail);
        let (len, cap) = (buf.len(), buf.capacity());
        let mut decoder = FrameDecoder::new(limit);
        let (result, bytes, calls) = measure(|| decoder.decode(&mut buf));
        prop_assert_eq!(result, Err(FrameError::FrameTooLarge { declared_bytes: declared + 4, max_bytes: limit }));
        prop_assert_eq!((buf.len(), buf.capacity()), (len, cap));
        prop_assert_eq!((bytes, calls), (0, 0));
    }
}

#[test]
fn every_prefix_of_a_valid_frame_needs_more_and_every_payload_prefix_is_an_error() {
    for v in vectors::all() {
        let bytes = v.dump.bytes();
        for cut in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..cut]);
            let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT);
            assert_eq!(
                decoder.decode(&mut buf),
                Ok(None),
                "{} cut at {cut}",
                v.name
            );
            assert_eq!(buf.len(), cut, "{}: a partial frame consumed bytes", v.name);
        }
        let (op, flags) = (bytes[4], bytes[5]);
        let payload = Bytes::copy_from_slice(&bytes[FRAME_OVERHEAD_BYTES..]);
        for cut in 0..payload.len() {
            let prefix = payload.slice(..cut);
            let decoded = match &v.message {
                vectors::Message::Request(_) => Request::decode(op, flags, prefix).err(),
                vectors::Message::Reply(_) => Reply::decode(op, prefix).err(),
            };
            let err = decoded.unwrap_or_else(|| panic!("{}: payload cut at {cut} decoded", v.name));
            assert!(
                matches!(err.code(), ErrorCode::Malformed),
                "{}: payload cut at {cut} gave {err}",
                v.name
            );
        }
    }
}

/// Inputs the fuzzer found, each a bug once; `decode_all` panics on any
/// that decodes but does not re-encode byte for byte.
#[test]
fn the_fuzzers_finds_stay_fixed() {
    // A CREATE_QUEUE whose tags bit carried an empty change: it decoded,
    // and encoded without the bit.
    let finds: [&[u8]; 1] = [&[1, 46, 0, 4, 0, 0, 0, 0, 0, 0]];
    for data in finds {
        decode_all(data);
        let e = Request::decode(opcode::CREATE_QUEUE, 0, Bytes::copy_from_slice(data)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Malformed, "{e}");
    }
    // A GET_QUEUE reply whose tags came out of key order (and with a key
    // twice): it decoded into the sorted map, which encodes otherwise.
    let get_queue_reply: &[u8] = &[
        6, 111, 114, 100, 101, 114, 115, 255, 6, 0, 0, 0, 40, 0, 2, 1, 0, 0, 6, 0, 0, 0, 255, 255,
        255, 255, 247, 255, 255, 0, 0, 10, 111, 114, 100, 101, 114, 115, 46, 100, 108, 113, 5, 0,
        224, 147, 4, 7, 101, 1, 1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0,
        0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 209, 209, 209, 209, 1, 0, 0, 0, 1, 0, 144, 0, 42, 0, 0, 0, 3, 0, 0,
        0, 7, 0, 0, 0, 0, 0, 0, 13, 0, 37, 0, 0, 0, 240, 34, 0, 11, 0, 0, 0, 6, 111, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 18, 0, 0, 0, 0, 0, 0, 0, 39, 12, 0, 61, 0, 0, 0, 4, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 251, 0, 0, 0, 0, 0, 0, 0, 0, 194, 0, 0, 0,
    ];
    decode_all(get_queue_reply);
}

#[test]
fn lengths_below_the_header_lose_the_framing() {
    for len in 0..6u32 {
        let mut buf = BytesMut::from(&len.to_le_bytes()[..]);
        let err = FrameDecoder::default().decode(&mut buf).unwrap_err();
        assert_eq!(err, FrameError::LengthTooSmall { len });
        assert!(err.closes_connection());
    }
}

#[test]
fn framing_allocates_at_most_a_shared_header_per_buffer() {
    let mut wire = BytesMut::new();
    for v in vector_bytes() {
        wire.extend_from_slice(&v);
    }
    let frames = vectors::all().len();
    let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT);
    let (decoded, bytes, calls) = measure(|| {
        let mut n = 0;
        while let Ok(Some(_frame)) = decoder.decode(&mut wire) {
            n += 1;
        }
        n
    });
    assert_eq!(decoded, frames);
    // `bytes` turns the buffer into a shared one on the first split: one
    // small allocation, whatever the number or size of frames.
    assert!(
        calls <= 1 && bytes <= 64,
        "{calls} allocations, {bytes} bytes"
    );
}

#[test]
fn a_full_batch_decodes_and_one_more_entry_is_batch_too_large() {
    use sluice_protocol::{DeleteRequest, QueueName, Receipt};
    let full = Request::Delete(DeleteRequest {
        queue: QueueName::from_static("q"),
        receipts: vec![Receipt::default(); 1024],
    });
    let mut buf = BytesMut::new();
    full.encode(1, &mut buf).unwrap();
    let payload = buf.split_off(FRAME_OVERHEAD_BYTES).freeze();
    assert_eq!(Request::decode(opcode::DELETE, 0, payload), Ok(full));

    let over = Request::Delete(DeleteRequest {
        queue: QueueName::from_static("q"),
        receipts: vec![Receipt::default(); 1025],
    });
    let mut buf = BytesMut::new();
    over.encode(1, &mut buf).unwrap();
    let payload = buf.split_off(FRAME_OVERHEAD_BYTES).freeze();
    let err = Request::decode(opcode::DELETE, 0, payload).unwrap_err();
    assert_eq!(err.code(), ErrorCode::BatchTooLarge);
    assert_eq!(err.to_wire_error().code, ErrorCode::BatchTooLarge);
}

/// The broker's goal is one allocation per message (its body) and none per
/// request beyond that: decoding a SEND or a RECEIVE reply cut from
/// a receive buffer, and walking its entries, allocates nothing at all.
#[test]
fn hot_batches_decode_and_iterate_without_allocating() {
    use sluice_protocol::{
        MessageAttributes, MessageId, QueueName, Receipt, ReceivedBatch, ReceivedMessage,
        SendEntry, SendRequest,
    };
    let entries: Vec<SendEntry> = (0..64u8)
        .map(|i| SendEntry {
            body: Bytes::from(vec![i; 100]),
            delay: Some(Millis::new(u32::from(i))),
            dedup_key: (i % 2 == 0).then(|| Bytes::from(vec![i; 8])),
            attributes: MessageAttributes::from_pairs([("k", "v")]).unwrap(),
            group: (i % 3 == 0).then(|| sluice_protocol::MessageGroupId::new("g-1").unwrap()),
        })
        .collect();
    let messages: Vec<ReceivedMessage> = (0..64u8)
        .map(|i| ReceivedMessage {
            id: MessageId(i.into()),
            receipt: Receipt::default(),
            receive_count: 1,
            sent_at_ms: 1,
            first_received_delta_ms: 2,
            attributes: MessageAttributes::from_pairs([("k", "v")]).unwrap(),
            body: Bytes::from(vec![i; 100]),
            group: None,
        })
        .collect();
    let mut wire = BytesMut::new();
    Request::Send(SendRequest::new(QueueName::from_static("q"), &entries).unwrap())
        .encode(1, &mut wire)
        .unwrap();
    Reply::Receive {
        messages: ReceivedBatch::from_messages(messages.iter().map(ReceivedMessage::as_view))
            .unwrap(),
    }
    .encode(1, &mut wire)
    .unwrap();
    let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT);
    let send = decoder.decode(&mut wire).unwrap().unwrap();
    let receive = decoder.decode(&mut wire).unwrap().unwrap();

    let (walked, bytes, calls) = measure(|| {
        let Ok(Request::Send(send)) = Request::decode(send.opcode, send.flags, send.payload) else {
            return 0;
        };
        let Ok(Reply::Receive { messages }) = Reply::decode(receive.opcode, receive.payload) else {
            return 0;
        };
        let mut n = 0;
        for e in &send.entries {
            n += usize::from(e.body.len() == 100 && e.attributes.get("k") == Some("v"));
        }
        for m in &messages {
            n += usize::from(m.body.len() == 100 && m.attributes.len() == 1);
        }
        n
    });
    assert_eq!(walked, 128);
    assert_eq!((bytes, calls), (0, 0), "decoding allocated");
}
