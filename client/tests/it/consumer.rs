//! The consumers against a real server: lease extension, max processing,
//! crashes and graceful stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice_client::consumer::{
    BlockingConsumer, Consumer, ConsumerConfig, Delivery, LeaseLost, OnFailure,
};
use sluice_client::{Client, QueueOptions, ReceiveOptions};
use tokio::sync::mpsc;

use crate::util::{PATIENCE, TestServer, eventually, runtime};

fn receive_now(c: &Client, queue: &str) -> Vec<sluice_client::ReceivedMessage> {
    c.receive(queue, ReceiveOptions::new(10).wait(Duration::ZERO))
        .unwrap()
}

/// A handler slower than the lease keeps its message: nobody else receives
/// it while it runs, and it is deleted when the handler succeeds.
#[test]
fn async_consumer_extends_a_slow_handlers_lease() {
    let server = TestServer::start();
    let other = server.client();
    other.create_queue("slow", &QueueOptions::new()).unwrap();
    let sent = other.send("slow", "take your time").unwrap();
    runtime().block_on(async {
        let client = server.async_client().await;
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let (finish_tx, finish) = tokio::sync::watch::channel(false);
        let config = ConsumerConfig::new("slow")
            .concurrency(1)
            .visibility_timeout(Duration::from_millis(1500));
        let consumer = Consumer::start(client, config, move |d: Delivery| {
            let started_tx = started_tx.clone();
            let mut finish = finish.clone();
            async move {
                started_tx.send(d.message.id).unwrap();
                let _ = finish.wait_for(|f| *f).await;
                if d.lease.is_lost() {
                    return Err("lease lost");
                }
                Ok(())
            }
        });
        assert_eq!(started.recv().await, Some(sent.id));
        // Several lease lengths pass while another client keeps trying.
        let watcher = other.clone();
        let seen = tokio::task::spawn_blocking(move || {
            let mut seen = 0;
            for _ in 0..8 {
                std::thread::sleep(Duration::from_millis(500));
                seen += receive_now(&watcher, "slow").len();
            }
            seen
        })
        .await
        .unwrap();
        assert_eq!(seen, 0, "the lease was kept: nobody else got the message");
        finish_tx.send(true).unwrap();
        let stats = eventually_async(|| {
            let s = consumer.stats();
            (s.deleted == 1).then_some(s)
        })
        .await;
        assert!(stats.extended >= 1, "{stats:?}");
        assert_eq!(stats.lost, 0, "{stats:?}");
        let final_stats = consumer.stop(PATIENCE).await;
        assert_eq!(final_stats.succeeded, 1);
    });
    let info = other.queue_info("slow").unwrap();
    assert_eq!(info.stats.deleted, 1);
    assert_eq!(info.stats.redelivered, 0);
}

/// Past max_processing the consumer stops extending: the handler is told
/// and the message is redelivered.
#[test]
fn async_consumer_stops_extending_at_max_processing() {
    let server = TestServer::start();
    let other = server.client();
    other.create_queue("poison", &QueueOptions::new()).unwrap();
    let sent = other.send("poison", "never finishes").unwrap();
    runtime().block_on(async {
        let client = server.async_client().await;
        let (lost_tx, mut lost) = mpsc::unbounded_channel();
        let config = ConsumerConfig::new("poison")
            .concurrency(1)
            .visibility_timeout(Duration::from_millis(600))
            .max_processing(Duration::from_millis(1500));
        let consumer = Consumer::start(client, config, move |d: Delivery| {
            let lost_tx = lost_tx.clone();
            async move {
                let why = d.lease.lost().await;
                lost_tx.send(why).unwrap();
                // Hang on, as a stuck handler would, until stopped.
                std::future::pending::<()>().await;
                Ok::<(), String>(())
            }
        });
        let why = tokio::time::timeout(PATIENCE, lost.recv()).await.unwrap();
        assert_eq!(why, Some(LeaseLost::MaxProcessing));
        // Another consumer gets it again.
        let watcher = other.clone();
        let again = tokio::task::spawn_blocking(move || {
            eventually("the redelivery", || {
                receive_now(&watcher, "poison").into_iter().next()
            })
        })
        .await
        .unwrap();
        assert_eq!(again.id, sent.id);
        assert_eq!(again.receive_count, 2);
        let stats = consumer.stop(Duration::from_millis(100)).await;
        assert!(stats.extended >= 1, "{stats:?}");
        assert_eq!(stats.succeeded, 0);
    });
}

/// A consumer that dies mid-handler (no delete, no release): the message
/// comes back to the next consumer when the lease ends.
#[test]
fn async_consumer_crash_means_redelivery() {
    let server = TestServer::start();
    let other = server.client();
    other.create_queue("crash", &QueueOptions::new()).unwrap();
    let sent = other.send("crash", "half done").unwrap();
    runtime().block_on(async {
        // Unbound: the lease outlives the crashed consumer's connection and
        // runs out (a bound one would be released as the connection closes:
        // kill.rs).
        let config = ConsumerConfig::new("crash")
            .concurrency(1)
            .visibility_timeout(Duration::from_millis(500))
            .bind_leases(false);
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let first = Consumer::start(
            server.async_client().await,
            config.clone(),
            move |d: Delivery| {
                let started_tx = started_tx.clone();
                async move {
                    started_tx.send(d.message.receive_count).unwrap();
                    std::future::pending::<()>().await;
                    Ok::<(), String>(())
                }
            },
        );
        assert_eq!(started.recv().await, Some(1));
        first.abort();

        let (got_tx, mut got) = mpsc::unbounded_channel();
        let second = Consumer::start(server.async_client().await, config, move |d: Delivery| {
            let got_tx = got_tx.clone();
            async move {
                got_tx
                    .send((d.message.id, d.message.receive_count))
                    .unwrap();
                Ok::<(), String>(())
            }
        });
        let (id, count) = tokio::time::timeout(PATIENCE, got.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(id, sent.id);
        assert_eq!(count, 2);
        let stats = second.stop(PATIENCE).await;
        assert_eq!(stats.deleted, 1);
    });
    assert_eq!(other.queue_info("crash").unwrap().stats.redelivered, 1);
}

/// A handler that fails (here: panics) has its message released at once
/// and handled again.
#[test]
fn async_consumer_releases_failed_messages() {
    let server = TestServer::start();
    let other = server.client();
    other.create_queue("flaky", &QueueOptions::new()).unwrap();
    other.send("flaky", "fails once").unwrap();
    runtime().block_on(async {
        let failed_once = Arc::new(AtomicBool::new(false));
        let (done_tx, mut done) = mpsc::unbounded_channel();
        let config = ConsumerConfig::new("flaky")
            .concurrency(2)
            .visibility_timeout(Duration::from_secs(60))
            .on_failure(OnFailure::Release);
        let consumer = Consumer::start(server.async_client().await, config, move |d: Delivery| {
            let failed_once = Arc::clone(&failed_once);
            let done_tx = done_tx.clone();
            async move {
                if !failed_once.swap(true, Ordering::SeqCst) {
                    panic!("first attempt crashes");
                }
                done_tx.send(d.message.receive_count).unwrap();
                Ok::<(), String>(())
            }
        });
        let count = tokio::time::timeout(PATIENCE, done.recv()).await.unwrap();
        assert_eq!(count, Some(2), "released, not left for 60 s");
        let stats = consumer.stop(PATIENCE).await;
        assert_eq!(
            (stats.failed, stats.released, stats.deleted),
            (1, 1, 1),
            "{stats:?}"
        );
    });
}

/// A graceful stop whose grace runs out releases what the consumer holds.
#[test]
fn async_consumer_stop_releases_what_it_holds() {
    let server = TestServer::start();
    let other = server.client();
    other.create_queue("held", &QueueOptions::new()).unwrap();
    let sent = other.send("held", "in progress").unwrap();
    runtime().block_on(async {
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let config = ConsumerConfig::new("held")
            .concurrency(1)
            .visibility_timeout(Duration::from_secs(60));
        let consumer = Consumer::start(server.async_client().await, config, move |_d: Delivery| {
            let started_tx = started_tx.clone();
            async move {
                started_tx.send(()).unwrap();
                std::future::pending::<()>().await;
                Ok::<(), String>(())
            }
        });
        started.recv().await.unwrap();
        let stats = consumer.stop(Duration::from_millis(200)).await;
        assert_eq!(stats.released, 1, "{stats:?}");
    });
    // Released, so visible at once rather than after 60 s.
    let got = receive_now(&other, "held");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, sent.id);
}

/// The blocking consumer keeps a slow handler's lease too, and deletes on
/// success.
#[test]
fn blocking_consumer_extends_and_deletes() {
    let server = TestServer::start();
    let other = server.client();
    other.create_queue("bslow", &QueueOptions::new()).unwrap();
    for i in 0..3 {
        other.send("bslow", format!("m{i}")).unwrap();
    }
    let config = ConsumerConfig::new("bslow")
        .concurrency(3)
        .visibility_timeout(Duration::from_millis(1000))
        .poll_wait(Duration::from_millis(200));
    let lost_seen = Arc::new(AtomicBool::new(false));
    let lost_flag = Arc::clone(&lost_seen);
    let consumer = BlockingConsumer::start(server.client(), config, move |d: Delivery| {
        // Outlive two leases, polling the token as a careful handler does.
        for _ in 0..25 {
            std::thread::sleep(Duration::from_millis(100));
            if d.lease.is_lost() {
                lost_flag.store(true, Ordering::SeqCst);
                return Err("lost");
            }
        }
        Ok(())
    });
    let stats = eventually("three deletes", || {
        let s = consumer.stats();
        (s.deleted + s.failed >= 3).then_some(s)
    });
    assert_eq!(stats.deleted, 3, "{stats:?}");
    assert!(stats.extended >= 3, "{stats:?}");
    assert!(!lost_seen.load(Ordering::SeqCst));
    consumer.stop(PATIENCE);
    let info = other.queue_info("bslow").unwrap();
    assert_eq!((info.stats.deleted, info.stats.redelivered), (3, 0));
}

async fn eventually_async<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
