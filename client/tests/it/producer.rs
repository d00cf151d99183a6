//! The batching producers: every caller gets its own message's result.

use std::collections::HashSet;
use std::time::Duration;

use sluice_client::producer::{BlockingProducer, Producer, ProducerConfig};
use sluice_client::{Error, QueueOptions, SendEntry};

use crate::util::{TestServer, runtime};

#[test]
fn async_producer_batches_and_answers_each_caller() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("events", &QueueOptions::new().message_bytes_max(100))
        .unwrap();
    runtime().block_on(async {
        let producer = Producer::start(
            server.async_client().await,
            ProducerConfig::new("events")
                .linger(Duration::from_millis(5))
                .batch_max(64),
        );
        let mut tasks = Vec::new();
        for i in 0..300 {
            let p = producer.clone();
            tasks.push(tokio::spawn(async move {
                // Every 100th message is too large for the queue.
                let body = if i % 100 == 7 {
                    vec![b'x'; 200]
                } else {
                    format!("e{i}").into_bytes()
                };
                p.send(SendEntry::new(body)).await
            }));
        }
        let mut ids = HashSet::new();
        let mut too_large = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(outcome) => assert!(ids.insert(outcome.id), "ids are distinct"),
                Err(Error::MessageTooLarge(_)) => too_large += 1,
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!((ids.len(), too_large), (297, 3));
        producer.close().await;
    });
    assert_eq!(c.queue_info("events").unwrap().stats.sent, 297);
}

#[test]
fn blocking_producer_answers_each_thread() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("bevents", &QueueOptions::new()).unwrap();
    let producer = BlockingProducer::start(
        server.client(),
        ProducerConfig::new("bevents").linger(Duration::from_millis(2)),
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let p = producer.clone();
            std::thread::spawn(move || {
                (0..50)
                    .map(|i| p.send(SendEntry::new(format!("{t}-{i}"))).unwrap().id)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let ids: HashSet<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(ids.len(), 200);
    assert_eq!(c.queue_info("bevents").unwrap().stats.sent, 200);
    // A queue that does not exist fails every caller of the batch.
    let missing = BlockingProducer::start(server.client(), ProducerConfig::new("missing"));
    assert!(matches!(
        missing.send(SendEntry::new("x")),
        Err(Error::QueueNotFound(_))
    ));
}
