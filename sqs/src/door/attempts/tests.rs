//! Tests of the remembered receives, and a loom model of two shards
//! sharing them.

use serde_json::json;
use sluice_protocol::{QueueName, Receipt};

use super::{
    ATTEMPT_BYTES_MAX, ATTEMPT_WINDOW_MS, Attempts, Remembered, SharedAttempts, check_attempt_id,
};
use crate::sync::{Arc, model};

#[cfg(sluice_loom)]
use loom::thread::spawn;
#[cfg(not(sluice_loom))]
use std::thread::spawn;

fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

fn receipt(slot: u32) -> Receipt {
    Receipt {
        slot,
        delivery: 1,
        ..Receipt::default()
    }
}

fn remembered(slots: &[u32]) -> Remembered {
    Remembered {
        receipts: slots.iter().map(|&s| receipt(s)).collect(),
        visibility_ms: 30_000,
        reply: json!({ "Messages": slots }),
    }
}

#[test]
fn attempt_ids_are_letters_digits_and_punctuation() {
    for ok in [
        "a",
        "retry-1",
        "x!#$%&'()*+,./:;<=>?@[]^_`{|}~",
        &"z".repeat(128),
    ] {
        assert!(check_attempt_id(ok).is_ok(), "{ok:?}");
    }
    for bad in ["", "a b", "é", "tab\t", &"z".repeat(129)] {
        let e = check_attempt_id(bad).unwrap_err();
        assert_eq!(e.name, "InvalidParameterValue", "{bad:?}");
    }
}

#[test]
fn a_receive_is_found_within_its_window_only() {
    let mut a = Attempts::default();
    a.remember(q("ledger.fifo"), "r1".into(), 1_000, remembered(&[1, 2]));
    assert_eq!(
        a.find(&q("ledger.fifo"), "r1", 1_000),
        Some(remembered(&[1, 2]))
    );
    assert_eq!(
        a.find(&q("ledger.fifo"), "r1", 1_000 + ATTEMPT_WINDOW_MS - 1),
        Some(remembered(&[1, 2]))
    );
    // Another id, another queue: not this receive.
    assert_eq!(a.find(&q("ledger.fifo"), "r2", 1_000), None);
    assert_eq!(a.find(&q("other.fifo"), "r1", 1_000), None);
    assert_eq!(
        a.find(&q("ledger.fifo"), "r1", 1_000 + ATTEMPT_WINDOW_MS),
        None
    );
    assert_eq!(a.len(), 0);
}

#[test]
fn a_new_receive_under_an_id_replaces_the_old_and_an_empty_one_forgets_it() {
    let mut a = Attempts::default();
    a.remember(q("l.fifo"), "r".into(), 0, remembered(&[1]));
    a.remember(q("l.fifo"), "r".into(), 10, remembered(&[2, 3]));
    assert_eq!(a.find(&q("l.fifo"), "r", 20), Some(remembered(&[2, 3])));
    // The old receipt no longer names it.
    a.changed(&receipt(1));
    assert_eq!(a.len(), 1);
    // The first remembering's window ends, not the second's.
    assert!(a.find(&q("l.fifo"), "r", ATTEMPT_WINDOW_MS + 5).is_some());
    a.remember(q("l.fifo"), "r".into(), 30, remembered(&[]));
    assert_eq!(a.find(&q("l.fifo"), "r", 30), None);
}

#[test]
fn a_change_to_one_of_its_messages_forgets_a_receive() {
    let mut a = Attempts::default();
    a.remember(q("l.fifo"), "r1".into(), 0, remembered(&[1, 2]));
    a.remember(q("l.fifo"), "r2".into(), 0, remembered(&[3]));
    a.changed(&receipt(2));
    assert_eq!(a.find(&q("l.fifo"), "r1", 1), None);
    assert!(a.find(&q("l.fifo"), "r2", 1).is_some());
    // A receipt of another delivery of the message is not this receive's.
    a.changed(&Receipt {
        delivery: 2,
        ..receipt(3)
    });
    assert!(a.find(&q("l.fifo"), "r2", 1).is_some());
}

#[test]
fn the_oldest_receives_go_first_past_the_byte_bound() {
    let mut a = Attempts::default();
    let body = "x".repeat(1 << 20);
    let n = ATTEMPT_BYTES_MAX / (1 << 20) + 8;
    for i in 0..n {
        let r = Remembered {
            reply: json!({ "Messages": [body] }),
            ..remembered(&[u32::try_from(i).unwrap()])
        };
        a.remember(q("l.fifo"), format!("r{i}"), 0, r);
    }
    assert!(a.bytes <= ATTEMPT_BYTES_MAX, "{}", a.bytes);
    assert!(a.len() < n);
    assert_eq!(a.find(&q("l.fifo"), "r0", 1), None);
    assert!(a.find(&q("l.fifo"), &format!("r{}", n - 1), 1).is_some());
}

#[test]
fn replacing_one_id_again_and_again_keeps_the_order_short() {
    let mut a = Attempts::default();
    for i in 0..10_000u32 {
        a.remember(q("l.fifo"), "same".into(), u64::from(i), remembered(&[i]));
    }
    assert_eq!(a.len(), 1);
    assert!(a.order.len() <= 2 * a.len() + 65, "{}", a.order.len());
    assert_eq!(a.by_receipt.len(), 1);
}

#[test]
fn loom_a_change_racing_a_remembering_leaves_no_receipt_behind() {
    model(|| {
        let shared = Arc::new(SharedAttempts::default());
        let other = Arc::clone(&shared);
        let t = spawn(move || {
            other.with(|a| a.remember(q("l.fifo"), "r".into(), 0, remembered(&[1, 2])));
        });
        shared.changed([receipt(1)]);
        t.join().unwrap();
        shared.with(|a| {
            // Either the change came first (the receive stands) or after
            // (it is forgotten, with every receipt that named it).
            match a.find(&q("l.fifo"), "r", 1) {
                Some(r) => assert_eq!(r, remembered(&[1, 2])),
                None => assert!(a.by_receipt.is_empty()),
            }
            assert_eq!(a.len(), a.map.len());
        });
        // The count readable without the lock matches.
        shared.changed([receipt(2)]);
        shared.with(|a| assert_eq!(a.len(), 0));
    });
}
