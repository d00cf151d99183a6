//! Every operation of the async client against a real server.

use std::time::Duration;

use sluice_client::{Error, QueueOptions, ReceiveOptions, RedrivePolicy, SendEntry};

use crate::util::{TestServer, runtime};

#[test]
fn every_operation() {
    let server = TestServer::start();
    runtime().block_on(async {
        let c = server.async_client().await;
        assert!(c.server_info().is_some());
        c.ping().await.unwrap();

        assert!(c.create_queue("a.dlq", &QueueOptions::new()).await.unwrap());
        let attrs = QueueOptions::new().redrive(RedrivePolicy {
            dead_letter_queue: "a.dlq".into(),
            max_receives: 1,
        });
        assert!(c.create_queue("a", &attrs).await.unwrap());
        assert!(!c.create_queue("a", &attrs).await.unwrap());
        let mut names = c.list_queues("a").await.unwrap();
        names.sort();
        assert_eq!(names, ["a", "a.dlq"]);
        c.set_queue(
            "a",
            &QueueOptions::new().visibility_timeout(Duration::from_millis(60_000)),
        )
        .await
        .unwrap();
        assert_eq!(
            c.queue_info("a")
                .await
                .unwrap()
                .attributes
                .visibility_timeout,
            Duration::from_secs(60)
        );

        let one = c.send("a", "one").await.unwrap();
        let two = c.send_entry("a", SendEntry::new("two")).await.unwrap();
        let batch = c
            .send_batch("a", &[SendEntry::new("three"), SendEntry::new("four")])
            .await
            .unwrap();
        assert!(batch.iter().all(Result::is_ok));
        assert_eq!(c.peek("a", 10).await.unwrap().len(), 4);

        let got = c
            .receive("a", ReceiveOptions::new(10).wait(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(got.len(), 4);
        let by_id = |id| got.iter().find(|m| m.id == id).unwrap();
        c.delete("a", by_id(one.id).receipt).await.unwrap();
        assert!(matches!(
            c.delete("a", by_id(one.id).receipt).await,
            Err(Error::Gone(_))
        ));
        c.change_visibility("a", by_id(two.id).receipt, Duration::from_secs(30))
            .await
            .unwrap();
        let rest: Vec<_> = got
            .iter()
            .filter(|m| m.id != one.id && m.id != two.id)
            .collect();
        let results = c
            .change_visibility_batch(
                "a",
                &rest
                    .iter()
                    .map(|m| (m.receipt, Duration::ZERO))
                    .collect::<Vec<_>>(),
            )
            .await
            .unwrap();
        assert!(results.iter().all(Result::is_ok));
        // Released after one receive with max receives 1: the next receive
        // dead-letters them.
        let none = c
            .receive("a", ReceiveOptions::new(10).wait(Duration::ZERO))
            .await
            .unwrap();
        assert!(none.is_empty());
        assert_eq!(c.peek("a.dlq", 10).await.unwrap().len(), 2);
        let r = c.redrive("a.dlq", 1).await.unwrap();
        assert_eq!(r.moved, 1);
        let results = c.delete_batch("a", &[by_id(two.id).receipt]).await.unwrap();
        assert!(results[0].is_ok());
        assert_eq!(c.purge_queue("a").await.unwrap(), 1);
        assert_eq!(c.purge_queue("a.dlq").await.unwrap(), 1);
        let stats = c.server_stats().await.unwrap();
        assert_eq!(stats.counter("queues"), Some(2));
        c.set_queue("a", &QueueOptions::new().clear_redrive())
            .await
            .unwrap();
        c.delete_queue("a.dlq").await.unwrap();
        c.delete_queue("a").await.unwrap();
        assert!(matches!(
            c.queue_info("a").await,
            Err(Error::QueueNotFound(_))
        ));
    });
}

#[test]
fn bare_bodies_are_sent_borrowed() {
    let server = TestServer::start();
    runtime().block_on(async {
        let c = server.async_client().await;
        c.create_queue("bodies", &QueueOptions::new())
            .await
            .unwrap();
        let buffer = b"onetwo".to_vec();
        let results = c
            .send_bodies("bodies", &[&buffer[..3], &buffer[3..]])
            .await
            .unwrap();
        assert!(results.iter().all(Result::is_ok));
        let mut got: Vec<_> = c
            .receive("bodies", ReceiveOptions::new(10).wait(Duration::ZERO))
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.body)
            .collect();
        got.sort();
        assert_eq!(got, ["one", "two"]);
        assert!(matches!(
            c.send_bodies("missing", &[b"x"]).await,
            Err(Error::QueueNotFound(_))
        ));
        assert!(matches!(
            c.send_bodies("bodies", &[]).await,
            Err(Error::InvalidArgument(_))
        ));
        // Entries as borrowed views: a dedup key drops the second send.
        let view = sluice_client::SendEntryRef {
            body: &buffer[..3],
            dedup_key: Some(&buffer[3..]),
            ..Default::default()
        };
        let sent = c.send_views("bodies", &[view, view]).await.unwrap();
        let (first, second) = (sent[0].as_ref().unwrap(), sent[1].as_ref().unwrap());
        assert_eq!((second.duplicate, second.id), (true, first.id));
        assert!(!first.duplicate);
        // Received as views of the reply.
        let batch = c
            .receive_batch("bodies", ReceiveOptions::new(10).wait(Duration::ZERO))
            .await
            .unwrap();
        let bodies: Vec<&[u8]> = batch.iter().map(|m| m.body).collect();
        assert_eq!(bodies, [&b"one"[..]]);
        assert_eq!(batch.iter().next().unwrap().id, first.id);
    });
}
