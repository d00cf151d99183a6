//! Queue administration: create, set, delete, list, get, purge, limits,
//! incarnations.

use crate::engine_util::*;
use sluice_broker::engine::{Cluster, Op, OpResult, RegistryConfig};
use sluice_protocol::Millis;
use sluice_protocol::Setting;
use sluice_protocol::{AttributeUpdate, Backoff, ErrorCode, LabelsUpdate, RedrivePolicy};

fn dlq_update(dlq: &str, max_receives: u16) -> AttributeUpdate {
    AttributeUpdate {
        redrive: Setting::Set(RedrivePolicy {
            dead_letter_queue: dlq.into(),
            max_receives,
        }),
        ..Default::default()
    }
}

#[test]
fn create_is_idempotent_and_refuses_other_attributes() {
    for shards in [1, 2] {
        let mut c = cluster(shards);
        let inc = create(&mut c, "q", AttributeUpdate::default());
        let again = call(
            &mut c,
            shards as usize - 1,
            Op::CreateQueue(QueueAttributesRequest {
                queue: qn("q"),
                attributes: AttributeUpdate::default(),
            }),
        );
        assert_eq!(
            again,
            OpResult::QueueCreated {
                incarnation: inc,
                created: false
            }
        );
        let other = AttributeUpdate {
            visibility_timeout: Some(Millis::new(5)),
            ..Default::default()
        };
        let r = call(
            &mut c,
            0,
            Op::CreateQueue(QueueAttributesRequest {
                queue: qn("q"),
                attributes: other,
            }),
        );
        assert_eq!(error_code(r), ErrorCode::QueueExists);
        // A bad name never reaches the engine: operations name queues by
        // `QueueName`, which only holds valid names (the decoder refuses
        // the others).
        for bad in ["", "has space", &"x".repeat(81)] {
            assert!(sluice_protocol::QueueName::new(bad).is_err(), "{bad:?}");
        }
        let r = call(
            &mut c,
            0,
            Op::CreateQueue(QueueAttributesRequest {
                queue: qn("r"),
                attributes: AttributeUpdate {
                    delay: Some(Millis::new(15 * 60 * 1000 + 1)),
                    ..Default::default()
                },
            }),
        );
        match r {
            OpResult::Error(e) => {
                assert_eq!(e.code(), ErrorCode::InvalidArgument);
                assert!(e.to_string().contains("delay_ms"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn set_changes_and_removes_policies() {
    let mut c = cluster(2);
    create(&mut c, "dlq", AttributeUpdate::default());
    create(&mut c, "q", AttributeUpdate::default());
    let set = |c: &mut Cluster, update| {
        call(
            c,
            1,
            Op::SetQueue(QueueAttributesRequest {
                queue: qn("q"),
                attributes: update,
            }),
        )
    };
    let mut u = dlq_update("dlq", 3);
    u.backoff = Setting::Set(Backoff {
        base: Millis::new(10),
        max: Millis::new(100),
    });
    u.visibility_timeout = Some(Millis::new(1000));
    assert_eq!(set(&mut c, u), OpResult::QueueUpdated);
    let i = info(&mut c, 0, "q");
    assert_eq!(i.attributes.visibility_timeout.get(), 1000);
    assert_eq!(i.attributes.redrive.as_ref().unwrap().max_receives, 3);
    assert!(i.attributes.backoff.is_some());
    let clear = AttributeUpdate {
        redrive: Setting::Clear,
        backoff: Setting::Clear,
        ..Default::default()
    };
    assert_eq!(set(&mut c, clear), OpResult::QueueUpdated);
    let i = info(&mut c, 1, "q");
    assert!(i.attributes.redrive.is_none() && i.attributes.backoff.is_none());
    assert_eq!(i.attributes.visibility_timeout.get(), 1000);
    let r = call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("nope"),
            attributes: AttributeUpdate::default(),
        }),
    );
    assert_eq!(error_code(r), ErrorCode::QueueNotFound);
}

fn tags(set: &[(&str, &str)], remove: &[&str]) -> LabelsUpdate {
    LabelsUpdate {
        set: set
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        remove: remove.iter().map(|k| (*k).to_owned()).collect(),
    }
}

#[test]
fn tags_and_annotations_are_kept_changed_and_bounded() {
    let mut c = cluster(2);
    let mut first = AttributeUpdate::default();
    *first.tags_mut() = tags(&[("team", "payments"), ("env", "dev")], &[]);
    *first.annotations_mut() = tags(&[("Policy", "{}")], &[]);
    create(&mut c, "q", first);
    let i = info(&mut c, 1, "q");
    let kept: Vec<_> = i.attributes.tags.iter().collect();
    assert_eq!(kept, vec![("env", "dev"), ("team", "payments")]);
    assert_eq!(i.attributes.annotations.get("Policy"), Some("{}"));
    // A create of the queue with other labels (or none) neither fails nor
    // changes them.
    let again = call(
        &mut c,
        1,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: AttributeUpdate::default(),
        }),
    );
    assert!(matches!(
        again,
        OpResult::QueueCreated { created: false, .. }
    ));
    assert_eq!(info(&mut c, 0, "q").attributes.tags.len(), 2);
    let mut change = AttributeUpdate::default();
    *change.tags_mut() = tags(&[("owner", "ana")], &["env", "absent"]);
    let r = call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: change,
        }),
    );
    assert_eq!(r, OpResult::QueueUpdated);
    let i = info(&mut c, 1, "q");
    let kept: Vec<_> = i.attributes.tags.iter().collect();
    assert_eq!(kept, vec![("owner", "ana"), ("team", "payments")]);
    assert_eq!(i.attributes.annotations.get("Policy"), Some("{}"));
    let mut too_many = AttributeUpdate::default();
    too_many.tags_mut().set = (0..49).map(|n| (format!("k{n}"), String::new())).collect();
    let r = call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: too_many,
        }),
    );
    match r {
        OpResult::Error(e) => {
            assert_eq!(e.code(), ErrorCode::InvalidArgument);
            assert!(e.to_string().contains("tags: 51 pairs"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(info(&mut c, 0, "q").attributes.tags.len(), 2);
}

#[test]
fn a_queue_knows_when_it_was_created_and_last_changed() {
    let mut c = cluster(2);
    let created = c.wall_ms();
    create(&mut c, "q", AttributeUpdate::default());
    let t = info(&mut c, 1, "q").times.expect("times");
    assert_eq!((t.created_ms, t.modified_ms), (created, created));
    c.advance_ms(5_000);
    // A create of the queue as it is changes nothing.
    create(&mut c, "q", AttributeUpdate::default());
    assert_eq!(info(&mut c, 0, "q").times, Some(t));
    let r = call(
        &mut c,
        1,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("q"),
            attributes: AttributeUpdate {
                delay: Some(Millis::new(10)),
                ..Default::default()
            },
        }),
    );
    assert_eq!(r, OpResult::QueueUpdated);
    let after = info(&mut c, 0, "q").times.expect("times");
    assert_eq!(after.created_ms, created);
    assert_eq!(after.modified_ms, created + 5_000);
}

#[test]
fn dead_letter_queue_must_exist_not_be_itself_nor_cycle() {
    let mut c = cluster(1);
    let r = call(
        &mut c,
        0,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn("a"),
            attributes: dlq_update("missing", 2),
        }),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
    let r = call(
        &mut c,
        0,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn("a"),
            attributes: dlq_update("a", 2),
        }),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
    create(&mut c, "a", AttributeUpdate::default());
    create(&mut c, "b", dlq_update("a", 2));
    create(&mut c, "c", dlq_update("b", 2));
    let r = call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("a"),
            attributes: dlq_update("c", 2),
        }),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
    let r = call(
        &mut c,
        0,
        Op::SetQueue(QueueAttributesRequest {
            queue: qn("a"),
            attributes: dlq_update("a", 2),
        }),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
}

#[test]
fn delete_refused_while_used_as_dead_letter_queue_naming_the_user() {
    let mut c = cluster(2);
    create(&mut c, "dlq", AttributeUpdate::default());
    create(&mut c, "src", dlq_update("dlq", 2));
    match call(&mut c, 1, Op::DeleteQueue { queue: qn("dlq") }) {
        OpResult::Error(e) => {
            assert_eq!(e.code(), ErrorCode::InvalidArgument);
            assert!(e.to_string().contains("src"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        call(&mut c, 1, Op::DeleteQueue { queue: qn("src") }),
        OpResult::QueueDeleted
    );
    assert_eq!(
        call(&mut c, 0, Op::DeleteQueue { queue: qn("dlq") }),
        OpResult::QueueDeleted
    );
    let r = call(&mut c, 0, Op::DeleteQueue { queue: qn("dlq") });
    assert_eq!(error_code(r), ErrorCode::QueueNotFound);
}

#[test]
fn delete_drops_messages_on_every_shard_and_old_receipts_are_invalid() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(&mut c, "q", AttributeUpdate::default());
        for s in 0..shards as usize {
            send(&mut c, s, "q", "a");
            send(&mut c, s, "q", "b");
        }
        let got = receive(&mut c, 0, "q", 1);
        let receipt = got[0].receipt;
        assert_eq!(
            call(&mut c, 0, Op::DeleteQueue { queue: qn("q") }),
            OpResult::QueueDeleted
        );
        assert!(c.messages().is_empty());
        for s in 0..shards as usize {
            assert_eq!(c.shard(s).memory_in_use(), 0);
        }
        let r = call(&mut c, 0, send_op("q", &[entry("x")]));
        assert_eq!(error_code(r), ErrorCode::QueueNotFound);
        // Same name again: a new incarnation, the old receipt is invalid.
        let inc2 = create(&mut c, "q", AttributeUpdate::default());
        assert_ne!(inc2, receipt.incarnation);
        assert_eq!(
            delete_one(&mut c, 0, "q", receipt),
            Err(ErrorCode::InvalidReceipt)
        );
        assert_eq!(stats(&mut c, "q").sent, 0);
    }
}

#[test]
fn list_by_prefix_sorted() {
    let mut c = cluster(2);
    for n in ["orders.eu", "orders.us", "billing", "orders-dlq"] {
        create(&mut c, n, AttributeUpdate::default());
    }
    assert_eq!(
        call(
            &mut c,
            1,
            Op::ListQueues {
                prefix: "orders".into(),
                after: None,
            }
        ),
        OpResult::Queues(vec![qn("orders-dlq"), qn("orders.eu"), qn("orders.us")])
    );
    // In pages: after a name, and the next page after the last one.
    assert_eq!(
        call(
            &mut c,
            1,
            Op::ListQueues {
                prefix: "orders".into(),
                after: Some("orders-dlq".into()),
            }
        ),
        OpResult::QueuesPage {
            names: vec![qn("orders.eu"), qn("orders.us")],
            more: false,
        }
    );
    assert_eq!(
        call(
            &mut c,
            0,
            Op::ListQueues {
                prefix: "orders".into(),
                after: Some(String::new()),
            }
        ),
        OpResult::QueuesPage {
            names: vec![qn("orders-dlq"), qn("orders.eu"), qn("orders.us")],
            more: false,
        }
    );
    match call(
        &mut c,
        0,
        Op::ListQueues {
            prefix: String::new(),
            after: None,
        },
    ) {
        OpResult::Queues(v) => assert_eq!(v.len(), 4),
        other => panic!("{other:?}"),
    }
}

#[test]
fn queue_count_is_limited() {
    let mut c = Cluster::new(RegistryConfig {
        shards: 2,
        queues_max: 3,
        ..Default::default()
    });
    for n in ["a", "b", "c"] {
        create(&mut c, n, AttributeUpdate::default());
    }
    let r = call(
        &mut c,
        1,
        Op::CreateQueue(QueueAttributesRequest {
            queue: qn("d"),
            attributes: AttributeUpdate::default(),
        }),
    );
    assert_eq!(error_code(r), ErrorCode::InvalidArgument);
    assert_eq!(
        RegistryConfig::default().queues_max,
        10_000,
        "10,000 queues by default"
    );
}

#[test]
fn get_sums_stats_over_shards_with_oldest_age() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    send(&mut c, 0, "q", "a");
    c.advance_ms(1500);
    send(&mut c, 1, "q", "b");
    c.advance_ms(500);
    let s = stats(&mut c, "q");
    assert_eq!(s.sent, 2);
    assert_eq!(s.visible, 2);
    assert_eq!(s.oldest_age_ms, 2000);
    let i = info(&mut c, 1, "q");
    assert_eq!(i.queue, "q");
    assert_eq!(i.stats, s);
    let r = call(&mut c, 0, Op::GetQueue { queue: qn("nope") });
    assert_eq!(error_code(r), ErrorCode::QueueNotFound);
    assert_eq!(stats(&mut c, "q").oldest_age_ms, 2000);
    let got = receive(&mut c, 0, "q", 10);
    let receipts = got.iter().map(|m| m.receipt).collect();
    assert!(delete(&mut c, 0, "q", receipts).iter().all(Result::is_ok));
    assert_eq!(stats(&mut c, "q").oldest_age_ms, 0);
}

#[test]
fn purge_removes_every_state_and_receipts_then_give_gone() {
    for shards in [1u16, 2] {
        let mut c = cluster(shards);
        create(&mut c, "q", AttributeUpdate::default());
        send(&mut c, 0, "q", "visible");
        send(&mut c, shards as usize - 1, "q", "in flight");
        let mut delayed = entry("delayed");
        delayed.delay = Some(Millis::new(60_000));
        send_entries(&mut c, 0, "q", vec![delayed]);
        let got = receive(&mut c, 0, "q", 1);
        assert_eq!(got.len(), 1);
        assert_eq!(
            call(&mut c, 0, Op::PurgeQueue { queue: qn("q") }),
            OpResult::Purged { messages: 3 }
        );
        let s = stats(&mut c, "q");
        assert_eq!((s.purged, s.visible, s.delayed, s.in_flight), (3, 0, 0, 0));
        assert_eq!(
            delete_one(&mut c, 0, "q", got[0].receipt),
            Err(ErrorCode::Gone)
        );
        assert!(receive(&mut c, 0, "q", 10).is_empty());
        let r = call(&mut c, 0, Op::PurgeQueue { queue: qn("nope") });
        assert_eq!(error_code(r), ErrorCode::QueueNotFound);
    }
}
