//! Codec throughput: a SEND of 64 messages of 100 bytes and a RECEIVE reply
//! of 64 such messages, the batch shape of the broker's throughput figures
//! (BENCHMARKS.md). Throughput is in
//! messages (64 per iteration); BENCHMARKS.md derives bytes/s from the frame
//! sizes printed at start.
//!
//! - `send/encode`: the client's path, from 64 owned entries to a frame
//!   (building the batch, then writing the frame).
//! - `send/decode`: `Request::decode` of the payload, then walking every
//!   entry and touching its body, as a broker does before copying it.
//! - `send/frame_and_decode`: the same, plus cutting the frame out of a
//!   receive buffer with `FrameDecoder`.
//! - `receive_reply/write`: the broker's path, `ReceiveReplyWriter` straight
//!   from stored messages into the output buffer.
//! - `receive_reply/encode`: from 64 owned messages to a frame via
//!   `ReceivedBatch`.
//! - `receive_reply/decode`: the client's path, decode and walk every message.

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_protocol::frame::FRAME_OVERHEAD_BYTES;
use sluice_protocol::limits::FRAME_BYTES_MAX_DEFAULT;
use sluice_protocol::{
    FrameDecoder, MessageAttributes, MessageId, QueueName, Receipt, ReceiveReplyWriter,
    ReceivedBatch, ReceivedMessage, Reply, Request, SendEntry, SendRequest,
};

const MESSAGES: u16 = 64;
const BODY_BYTES: usize = 100;

fn send_entries() -> Vec<SendEntry> {
    let body = Bytes::from(vec![0x5a; BODY_BYTES]);
    (0..MESSAGES)
        .map(|_| SendEntry::new(body.clone()))
        .collect()
}

fn send_request(queue: &QueueName, entries: &[SendEntry]) -> Request {
    Request::Send(SendRequest::new(queue.clone(), entries).expect("bench SEND builds"))
}

fn received_messages() -> Vec<ReceivedMessage> {
    let body = Bytes::from(vec![0xa5; BODY_BYTES]);
    (0..MESSAGES)
        .map(|i| ReceivedMessage {
            id: MessageId(0x0193_0000_0000_0000_0000_0000_0000_0000 + u128::from(i)),
            receipt: Receipt {
                incarnation: 1,
                shard: 0,
                slot: u32::from(i),
                generation: 1,
                delivery: u64::from(i) + 1,
                check: 0xdead_beef,
            },
            receive_count: 1,
            sent_at_ms: 1_735_689_600_000,
            first_received_delta_ms: 3,
            attributes: MessageAttributes::new(),
            body: body.clone(),
            group: None,
        })
        .collect()
}

fn receive_reply(messages: &[ReceivedMessage]) -> Reply {
    Reply::Receive {
        messages: ReceivedBatch::from_messages(messages.iter().map(ReceivedMessage::as_view))
            .expect("bench RECEIVE reply builds"),
    }
}

/// A decoded SEND, walked as a broker would: every body touched.
fn consume_request(request: &Request) -> usize {
    match request {
        Request::Send(send) => send
            .entries
            .iter()
            .map(|e| usize::from(black_box(e.body.first().copied().unwrap_or(0))))
            .sum(),
        _ => 0,
    }
}

fn consume_reply(reply: &Reply) -> usize {
    match reply {
        Reply::Receive { messages } => messages
            .iter()
            .map(|m| usize::from(black_box(m.body.first().copied().unwrap_or(0))))
            .sum(),
        _ => 0,
    }
}

fn benches(c: &mut Criterion) {
    let queue = QueueName::from_static("bench");
    let entries = send_entries();
    let send = send_request(&queue, &entries);
    let mut send_wire = BytesMut::new();
    send.encode(1, &mut send_wire).expect("bench SEND encodes");
    let send_wire = send_wire.freeze();
    let stored = received_messages();
    let reply = receive_reply(&stored);
    let mut reply_wire = BytesMut::new();
    reply
        .encode(1, &mut reply_wire)
        .expect("bench RECEIVE reply encodes");
    let reply_wire = reply_wire.freeze();
    eprintln!(
        "frame bytes: SEND of {MESSAGES} x {BODY_BYTES} B = {}, RECEIVE reply of {MESSAGES} x {BODY_BYTES} B = {}",
        send_wire.len(),
        reply_wire.len()
    );
    let send_payload = send_wire.slice(FRAME_OVERHEAD_BYTES..);
    let reply_payload = reply_wire.slice(FRAME_OVERHEAD_BYTES..);
    // Check once that the inputs decode, so the loops measure the real path.
    assert_eq!(
        Request::decode(send.opcode(), 0, send_payload.clone()).as_ref(),
        Ok(&send)
    );
    assert_eq!(
        Reply::decode(reply.opcode(), reply_payload.clone()).as_ref(),
        Ok(&reply)
    );

    let mut g = c.benchmark_group("protocol_codec");
    g.throughput(Throughput::Elements(u64::from(MESSAGES)));
    g.warm_up_time(Duration::from_secs(2));
    g.measurement_time(Duration::from_secs(5));

    let mut out = BytesMut::with_capacity(reply_wire.len() * 2);
    g.bench_function("send_64x100/encode", |b| {
        b.iter(|| {
            out.clear();
            send_request(&queue, black_box(&entries))
                .encode(1, &mut out)
                .expect("encodes");
            black_box(out.len())
        });
    });
    g.bench_function("send_64x100/decode", |b| {
        b.iter(|| {
            let request = Request::decode(send.opcode(), 0, black_box(&send_payload).clone());
            request.map(|r| consume_request(&r))
        });
    });
    let mut rx = BytesMut::with_capacity(send_wire.len() * 2);
    let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT);
    g.bench_function("send_64x100/frame_and_decode", |b| {
        b.iter(|| {
            rx.extend_from_slice(black_box(&send_wire));
            match decoder.decode(&mut rx) {
                Ok(Some(frame)) => Request::decode(frame.opcode, frame.flags, frame.payload)
                    .map(|r| consume_request(&r)),
                _ => Ok(0),
            }
        });
    });

    g.bench_function("receive_reply_64x100/write", |b| {
        b.iter(|| {
            out.clear();
            let mut writer = ReceiveReplyWriter::begin(&mut out, 1, FRAME_BYTES_MAX_DEFAULT);
            for m in black_box(&stored) {
                writer.push(&mut out, &m.as_view());
            }
            writer.finish(&mut out);
            black_box(out.len())
        });
    });
    g.bench_function("receive_reply_64x100/encode", |b| {
        b.iter(|| {
            out.clear();
            receive_reply(black_box(&stored))
                .encode(1, &mut out)
                .expect("encodes");
            black_box(out.len())
        });
    });
    g.bench_function("receive_reply_64x100/decode", |b| {
        b.iter(|| {
            let decoded = Reply::decode(reply.opcode(), black_box(&reply_payload).clone());
            decoded.map(|r| consume_reply(&r))
        });
    });
    g.finish();
}

criterion_group!(protocol_codec, benches);
criterion_main!(protocol_codec);
