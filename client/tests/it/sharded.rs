//! The sharded client against three (then four) in-process brokers.

use std::collections::BTreeSet;
use std::time::Duration;

use sluice_client::sharded::{AsyncShardedClient, ShardedClient};
use sluice_client::{Client, ClientConfig, Error, QueueOptions, ReceiveOptions, RedrivePolicy};

use crate::util::{TestServer, runtime};

fn config(servers: &[&TestServer]) -> ClientConfig {
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    servers[0]
        .client_config()
        .with_addr(addrs.join(","))
        .with_reconnect_delays(Duration::from_millis(10), Duration::from_millis(50))
}

fn names(client: &Client) -> BTreeSet<String> {
    client.list_queues("").unwrap().into_iter().collect()
}

fn with_dlq(dlq: &str) -> QueueOptions {
    QueueOptions::new().redrive(RedrivePolicy::new(dlq, 1))
}

#[test]
fn a_thousand_queues_spread_evenly_and_a_fourth_broker_takes_only_its_share() {
    let servers = [
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    ];
    let refs: Vec<&TestServer> = servers.iter().collect();
    let client = ShardedClient::connect(config(&refs)).unwrap();
    let queues: Vec<String> = (0..1000).map(|i| format!("load-{i}")).collect();
    for q in &queues {
        assert!(client.create_queue(q, &QueueOptions::new()).unwrap());
    }
    // Each broker holds the queues the client placed there, and about a third.
    let held: Vec<BTreeSet<String>> = servers.iter().map(|s| names(&s.client())).collect();
    for (i, set) in held.iter().enumerate() {
        assert!(
            (267..=400).contains(&set.len()),
            "broker {i} holds {} of 1000",
            set.len()
        );
        for q in set {
            assert_eq!(client.broker_of(q), i);
        }
    }
    assert_eq!(held.iter().map(BTreeSet::len).sum::<usize>(), 1000);
    let listed = client.list_queues("load-").unwrap();
    assert!(listed.failed.is_empty());
    assert_eq!(listed.value.len(), 1000);

    // A fourth broker: only queues that now hash to it move; about a quarter.
    let fourth = TestServer::start();
    let refs4: Vec<&TestServer> = servers.iter().chain([&fourth]).collect();
    let client4 = ShardedClient::connect(config(&refs4)).unwrap();
    let mut moved = 0;
    for q in &queues {
        let (before, after) = (client.broker_of(q), client4.broker_of(q));
        if before != after {
            assert_eq!(after, 3, "{q} moved from broker {before} to {after}");
            moved += 1;
        }
        // Created anew exactly where it moved to; found where it stayed.
        let created = client4.create_queue(q, &QueueOptions::new()).unwrap();
        assert_eq!(created, before != after, "{q}");
    }
    assert!((188..=312).contains(&moved), "{moved} of 1000 moved");
    assert_eq!(names(&fourth.client()).len(), moved);
}

#[test]
fn tagged_queues_share_a_broker_and_a_split_dead_letter_queue_is_refused() {
    let servers = [
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    ];
    let refs: Vec<&TestServer> = servers.iter().collect();
    let client = ShardedClient::connect(config(&refs)).unwrap();
    for tag in ["orders", "payments", "mail", "audit", "x"] {
        let (q, dlq) = (format!("{{{tag}}}"), format!("{{{tag}}}.dlq"));
        client.create_queue(&dlq, &QueueOptions::new()).unwrap();
        client.create_queue(&q, &with_dlq(&dlq)).unwrap();
        let home = client.broker_of(&q);
        assert_eq!(home, client.broker_of(&dlq));
        let on_home = names(&servers[home].client());
        assert!(
            on_home.contains(&q) && on_home.contains(&dlq),
            "{on_home:?}"
        );
        // Dead-lettering works, on that broker.
        client.send(&q, "poison").unwrap();
        let opts = ReceiveOptions::new(1).visibility_timeout(Duration::ZERO);
        assert_eq!(client.receive(&q, opts).unwrap().len(), 1);
        let got = client
            .receive(&q, ReceiveOptions::new(1).wait(Duration::from_millis(200)))
            .unwrap();
        assert!(got.is_empty());
        assert_eq!(client.peek(&dlq, 10).unwrap().len(), 1);
    }
    // Untagged names on two brokers: refused, saying to use a tag.
    let (a, b) = (0..)
        .map(|i| (format!("plain{i}"), format!("plain{i}.dlq")))
        .find(|(a, b)| client.broker_of(a) != client.broker_of(b))
        .unwrap();
    client.create_queue(&b, &QueueOptions::new()).unwrap();
    let err = client.create_queue(&a, &with_dlq(&b)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("tag")),
        "{err}"
    );
    assert!(client.queue_info(&a).is_err());
}

#[test]
fn a_stopped_broker_fails_only_its_own_queues_with_a_connect_error() {
    let mut servers = [
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    ];
    let refs: Vec<&TestServer> = servers.iter().collect();
    let client = ShardedClient::connect(config(&refs)).unwrap();
    let queues: Vec<String> = (0..60).map(|i| format!("s{i}")).collect();
    for q in &queues {
        client.create_queue(q, &QueueOptions::new()).unwrap();
        client.send(q, "before").unwrap();
    }
    let down = client.broker_of(&queues[0]);
    servers[down].stop();
    let (mut failed, mut worked) = (0, 0);
    for q in &queues {
        let r = client.send(q, "after");
        if client.broker_of(q) == down {
            let err = r.unwrap_err();
            assert!(matches!(err, Error::Connect { .. }), "{q}: {err}");
            failed += 1;
        } else {
            r.unwrap();
            assert_eq!(client.queue_info(q).unwrap().stats.visible, 2);
            worked += 1;
        }
    }
    assert!(failed > 0 && worked > 0);
    // Listing and stats report the broker that is down, and merge the rest.
    let listed = client.list_queues("s").unwrap();
    assert_eq!(listed.failed.len(), 1);
    assert_eq!(listed.failed[0].addr, servers[down].addr.to_string());
    assert_eq!(listed.value.len(), worked);
    let stats = client.server_stats().unwrap();
    assert_eq!((stats.value.len(), stats.failed.len()), (2, 1));
    let infos = client.queue_stats("s").unwrap();
    assert_eq!(infos.value.len(), worked);
}

#[test]
fn the_async_sharded_client_places_queues_as_the_blocking_one() {
    let servers = [
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    ];
    let refs: Vec<&TestServer> = servers.iter().collect();
    let blocking = ShardedClient::connect(config(&refs)).unwrap();
    runtime().block_on(async {
        let client = AsyncShardedClient::connect(config(&refs)).await.unwrap();
        for i in 0..30 {
            let q = format!("a{i}");
            assert_eq!(client.broker_of(&q), blocking.broker_of(&q));
            client.create_queue(&q, &QueueOptions::new()).await.unwrap();
            client.send(&q, "x").await.unwrap();
            let got = client.receive(&q, ReceiveOptions::new(1)).await.unwrap();
            client.delete(&q, got[0].receipt).await.unwrap();
        }
        let listed = client.list_queues("a").await.unwrap();
        assert_eq!(listed.value.len(), 30);
        assert!(client.ping().await.iter().all(|(_, r)| r.is_ok()));
    });
    for i in 0..30 {
        let q = format!("a{i}");
        let home = blocking.broker_of(&q);
        assert!(names(&servers[home].client()).contains(&q));
    }
}
