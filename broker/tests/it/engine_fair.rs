//! Fair standard queues on the engine: a standard queue whose messages
//! carry group ids serves the groups in turn, one message each, so that a
//! group with a large backlog does not delay the others; no order and no
//! lock; messages without a group take their turn as one more group.

use crate::engine_util::*;
use sluice_protocol::{AttributeUpdate, MessageGroupId, Millis, SendEntry};

fn grouped(group: &str, body: &str) -> SendEntry {
    entry(body).group(MessageGroupId::new(group).unwrap())
}

fn bodies(got: &[sluice_protocol::ReceivedMessage]) -> Vec<String> {
    got.iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect()
}

fn prefix(b: &str) -> &str {
    b.split(':').next().unwrap()
}

#[test]
fn a_noisy_group_does_not_delay_the_quiet_ones() {
    let mut c = cluster(1);
    create(&mut c, "q", AttributeUpdate::default());
    // A backlog of 1,000 from one tenant, then three quiet ones.
    let noisy: Vec<SendEntry> = (0..1000)
        .map(|i| grouped("noisy", &format!("noisy:{i}")))
        .collect();
    for r in send_entries(&mut c, 0, "q", noisy) {
        assert!(r.is_ok());
    }
    for t in ["a", "b", "c"] {
        send_entries(
            &mut c,
            0,
            "q",
            vec![grouped(t, &format!("{t}:0")), grouped(t, &format!("{t}:1"))],
        );
    }
    // Each receive of four takes one message of each group.
    for _ in 0..2 {
        let got = bodies(&receive(&mut c, 0, "q", 4));
        let mut groups: Vec<&str> = got.iter().map(|b| prefix(b)).collect();
        groups.sort_unstable();
        assert_eq!(groups, ["a", "b", "c", "noisy"], "{got:?}");
    }
    // The quiet ones are done; the noisy one goes on, several in flight at
    // once (no lock).
    let got = bodies(&receive(&mut c, 0, "q", 10));
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|b| prefix(b) == "noisy"), "{got:?}");
    let s = stats(&mut c, "q");
    assert_eq!((s.in_flight, s.visible), (18, 988));
}

#[test]
fn messages_without_a_group_take_their_turn_too() {
    let mut c = cluster(1);
    create(&mut c, "q", AttributeUpdate::default());
    // Before any group: a plain queue; the first group makes it fair, and
    // what was there takes its turn as one group.
    for i in 0..5 {
        send(&mut c, 0, "q", &format!("plain:{i}"));
    }
    send_entries(
        &mut c,
        0,
        "q",
        vec![grouped("g", "g:0"), grouped("g", "g:1")],
    );
    send(&mut c, 0, "q", "plain:5");
    let got = bodies(&receive(&mut c, 0, "q", 4));
    let groups: Vec<&str> = got.iter().map(|b| prefix(b)).collect();
    assert_eq!(groups, ["plain", "g", "plain", "g"], "{got:?}");
    let got = bodies(&receive(&mut c, 0, "q", 10));
    assert_eq!(got, ["plain:2", "plain:3", "plain:4", "plain:5"]);
    assert!(receive(&mut c, 0, "q", 10).is_empty());
}

#[test]
fn a_delayed_message_holds_nothing_back_and_comes_when_due() {
    let mut c = cluster(1);
    create(&mut c, "q", AttributeUpdate::default());
    send_entries(
        &mut c,
        0,
        "q",
        vec![
            grouped("g", "g:late").delay(Millis::new(500)),
            grouped("g", "g:now"),
        ],
    );
    assert_eq!(bodies(&receive(&mut c, 0, "q", 10)), ["g:now"]);
    assert!(receive(&mut c, 0, "q", 10).is_empty());
    c.advance_ms(500);
    assert_eq!(bodies(&receive(&mut c, 0, "q", 10)), ["g:late"]);
    // A lease that ends puts the message back in its group's turn.
    c.advance_ms(30_000);
    let again = receive(&mut c, 0, "q", 10);
    assert_eq!(again.len(), 2);
    assert!(
        again
            .iter()
            .all(|m| m.group.as_ref().unwrap().as_str() == "g")
    );
}

#[test]
fn a_fair_queue_over_several_shards_and_a_snapshot_keeps_its_groups() {
    let mut c = cluster(2);
    create(&mut c, "q", AttributeUpdate::default());
    for shard in 0..2 {
        let noisy: Vec<SendEntry> = (0..50)
            .map(|i| grouped("noisy", &format!("noisy:{shard}:{i}")))
            .collect();
        send_entries(&mut c, shard, "q", noisy);
        send_entries(
            &mut c,
            shard,
            "q",
            vec![grouped("quiet", &format!("quiet:{shard}"))],
        );
    }
    let mut d = restarted(&mut c, 2);
    check(&mut d);
    // Each shard serves its groups in turn: a quiet message comes within
    // the first two of each shard.
    let got = bodies(&receive(&mut d, 0, "q", 2));
    assert!(got.iter().any(|b| prefix(b) == "quiet"), "{got:?}");
    let got = bodies(&receive(&mut d, 1, "q", 2));
    assert!(got.iter().any(|b| prefix(b) == "quiet"), "{got:?}");
    assert_eq!(stats(&mut d, "q").visible, 98);
}
