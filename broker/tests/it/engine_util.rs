//! Helpers for the engine tests: one call per operation, each followed by
//! the invariants check.

use bytes::Bytes;
use sluice_broker::engine::{Cluster, EntryError, Op, OpResult, RegistryConfig};
use sluice_protocol::{
    AttributeUpdate, ErrorCode, MessageAttributes, MessageId, PeekedMessage, QueueInfo, QueueName,
    QueueStats, Receipt, ReceivedMessage, SendEntry, SendOutcome, SendRequest, VisibilityChange,
};

pub use sluice_protocol::{
    ChangeVisibilityRequest, DeleteRequest, QueueAttributesRequest, ReceiveRequest,
};

/// A queue name written in a test.
pub fn qn(name: &str) -> QueueName {
    QueueName::new(name).expect("a valid queue name")
}

/// A SEND of `entries` to `queue`.
pub fn send_op(queue: &str, entries: &[SendEntry]) -> Op {
    Op::Send(SendRequest::new(qn(queue), entries).expect("a batch that encodes"))
}

pub fn cluster(shards: u16) -> Cluster {
    Cluster::new(cluster_config(shards))
}

fn cluster_config(shards: u16) -> RegistryConfig {
    RegistryConfig {
        shards,
        seed: 42,
        ..Default::default()
    }
}

/// `c` shut down and started again from its snapshot as [`cluster`] starts
/// one, on `shards` shards, 5 s into the new process's monotonic clock and
/// at `c`'s wall time.
pub fn restarted(c: &mut Cluster, shards: u16) -> Cluster {
    c.shutdown();
    let file = c.snapshot();
    let (d, _) = Cluster::from_snapshot(&file, cluster_config(shards), 5_000_000_000, c.wall_ms())
        .expect("the snapshot loads");
    d
}

pub fn check(c: &mut Cluster) {
    if let Err(e) = c.check_invariants() {
        panic!("invariant broken: {e}");
    }
}

pub fn call(c: &mut Cluster, shard: usize, op: Op) -> OpResult {
    let r = c.call(shard, op);
    check(c);
    r
}

pub fn create(c: &mut Cluster, name: &str, attributes: AttributeUpdate) -> u32 {
    match call(
        c,
        0,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn(name),
            attributes,
        }),
    ) {
        OpResult::QueueCreated { incarnation, .. } => incarnation,
        other => panic!("create {name}: {other:?}"),
    }
}

pub fn entry(body: &str) -> SendEntry {
    SendEntry::new(Bytes::copy_from_slice(body.as_bytes()))
}

pub fn send_entries(
    c: &mut Cluster,
    shard: usize,
    queue: &str,
    entries: Vec<SendEntry>,
) -> Vec<Result<SendOutcome, EntryError>> {
    match call(c, shard, send_op(queue, &entries)) {
        OpResult::Sent(r) => r,
        other => panic!("send: {other:?}"),
    }
}

pub fn send(c: &mut Cluster, shard: usize, queue: &str, body: &str) -> MessageId {
    let r = send_entries(c, shard, queue, vec![entry(body)]);
    r[0].as_ref().expect("send accepted").id
}

pub fn receive_vis(
    c: &mut Cluster,
    shard: usize,
    queue: &str,
    max: u32,
    vis: Option<u32>,
) -> Vec<ReceivedMessage> {
    match call(
        c,
        shard,
        Op::Receive(ReceiveRequest {
            queue: qn(queue),
            max_messages: u16::try_from(max).expect("max fits the wire's u16"),
            visibility_timeout_ms: vis,
            wait_ms: Some(0),
            bind_leases: false,
            with_source: false,
        }),
    ) {
        OpResult::Received(m) => m,
        other => panic!("receive: {other:?}"),
    }
}

pub fn receive(c: &mut Cluster, shard: usize, queue: &str, max: u32) -> Vec<ReceivedMessage> {
    receive_vis(c, shard, queue, max, None)
}

pub fn delete(
    c: &mut Cluster,
    shard: usize,
    queue: &str,
    receipts: Vec<Receipt>,
) -> Vec<Result<(), EntryError>> {
    match call(
        c,
        shard,
        Op::Delete(DeleteRequest {
            queue: qn(queue),
            receipts,
        }),
    ) {
        OpResult::Deleted(r) => r,
        other => panic!("delete: {other:?}"),
    }
}

pub fn delete_one(c: &mut Cluster, shard: usize, queue: &str, r: Receipt) -> Result<(), ErrorCode> {
    delete(c, shard, queue, vec![r])[0].map_err(EntryError::code)
}

pub fn change_vis(
    c: &mut Cluster,
    shard: usize,
    queue: &str,
    receipt: Receipt,
    timeout_ms: u32,
) -> Result<(), ErrorCode> {
    match call(
        c,
        shard,
        Op::ChangeVisibility(ChangeVisibilityRequest {
            queue: qn(queue),
            entries: vec![VisibilityChange {
                receipt,
                visibility_timeout_ms: timeout_ms,
            }],
        }),
    ) {
        OpResult::VisibilityChanged(r) => r[0].map_err(EntryError::code),
        other => panic!("change visibility: {other:?}"),
    }
}

pub fn info(c: &mut Cluster, shard: usize, queue: &str) -> QueueInfo {
    match call(c, shard, Op::GetQueue { queue: qn(queue) }) {
        OpResult::Queue(i) => *i,
        other => panic!("get {queue}: {other:?}"),
    }
}

pub fn stats(c: &mut Cluster, queue: &str) -> QueueStats {
    let s = info(c, 0, queue).stats;
    assert!(s.identity_holds(), "{s:?}");
    s
}

pub fn peek(c: &mut Cluster, shard: usize, queue: &str, max: u32) -> Vec<PeekedMessage> {
    match call(
        c,
        shard,
        Op::Peek {
            queue: qn(queue),
            max_messages: u16::try_from(max).expect("max fits the wire's u16"),
        },
    ) {
        OpResult::Peeked(m) => m,
        other => panic!("peek: {other:?}"),
    }
}

pub fn redrive(c: &mut Cluster, shard: usize, queue: &str, max: u32) -> (u64, u64) {
    match call(
        c,
        shard,
        Op::Redrive {
            queue: qn(queue),
            max_messages: max,
            to: None,
        },
    ) {
        OpResult::Redriven { moved, stayed } => (moved, stayed),
        other => panic!("redrive: {other:?}"),
    }
}

pub fn error_code(r: OpResult) -> ErrorCode {
    match r {
        OpResult::Error(e) => e.code(),
        other => panic!("expected an error, got {other:?}"),
    }
}

pub fn attrs(pairs: &[(&str, &str)]) -> MessageAttributes {
    MessageAttributes::from_pairs(pairs.iter().copied()).unwrap()
}
