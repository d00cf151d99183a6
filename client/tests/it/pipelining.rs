//! Many requests on one connection: a receive that waits does not hold up
//! the replies behind it.

use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use sluice_client::{QueueOptions, ReceiveOptions, Request};

use crate::util::{PATIENCE, TestServer, runtime};

#[test]
fn blocking_long_poll_does_not_block_other_requests() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("waiting", &QueueOptions::new()).unwrap();
    c.create_queue("busy", &QueueOptions::new()).unwrap();

    let (done_tx, done_rx) = mpsc::channel();
    let poller = c.clone();
    let waiter = std::thread::spawn(move || {
        let got = poller
            .receive(
                "waiting",
                ReceiveOptions::new(1).wait(Duration::from_secs(20)),
            )
            .unwrap();
        done_tx.send(()).unwrap();
        got
    });
    // Many requests from several threads complete while the receive waits.
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    c.send("busy", format!("{t}-{i}")).unwrap();
                    c.ping().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(c.queue_info("busy").unwrap().stats.sent, 200);
    assert!(
        done_rx.try_recv().is_err(),
        "the receive has no message yet, so it is still waiting"
    );
    // Now give it one: the same connection delivers its late reply.
    let sent = c.send("waiting", "at last").unwrap();
    let got = waiter.join().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, sent.id);
}

#[test]
fn blocking_call_many_pipelines_in_one_write() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("q", &QueueOptions::new()).unwrap();
    let requests: Vec<Request> = (0..100u64).map(|nonce| Request::Ping { nonce }).collect();
    let replies = c.call_many(&requests).unwrap();
    assert_eq!(replies.len(), 100);
    for (nonce, reply) in (0..100u64).zip(replies) {
        assert_eq!(reply.unwrap(), sluice_client::Reply::Pong { nonce });
    }
}

#[test]
fn async_long_poll_does_not_block_other_requests() {
    let server = TestServer::start();
    runtime().block_on(async {
        let c = server.async_client().await;
        c.create_queue("waiting", &QueueOptions::new())
            .await
            .unwrap();
        c.create_queue("busy", &QueueOptions::new()).await.unwrap();
        let poller = c.clone();
        let waiter = tokio::spawn(async move {
            poller
                .receive(
                    "waiting",
                    ReceiveOptions::new(1).wait(Duration::from_secs(20)),
                )
                .await
                .unwrap()
        });
        let mut tasks = Vec::new();
        for t in 0..8 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    c.send("busy", format!("{t}-{i}")).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(c.queue_info("busy").await.unwrap().stats.sent, 200);
        assert!(!waiter.is_finished(), "the receive is still waiting");
        let sent = c.send("waiting", "at last").await.unwrap();
        let got = tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got[0].id, sent.id);

        let requests: Vec<Request> = (0..64u64).map(|nonce| Request::Ping { nonce }).collect();
        let replies = c.call_many(&requests).await.unwrap();
        assert!(replies.iter().all(Result::is_ok));
    });
}

/// A request future that is polled once and then left alone (held in a
/// `select!` that waits on something else, say) must not hold up the replies
/// of other tasks: it cannot be trusted to read for them.
#[test]
fn async_an_unpolled_request_does_not_hold_up_others() {
    let server = TestServer::start();
    runtime().block_on(async {
        let c = server.async_client().await;
        c.create_queue("idle", &QueueOptions::new()).await.unwrap();
        let poller = c.clone();
        let mut held = Box::pin(async move {
            poller
                .receive("idle", ReceiveOptions::new(1).wait(Duration::from_secs(20)))
                .await
        });
        // One poll: the receive is sent and, alone, reads for itself.
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(held.as_mut().poll(cx)));
        assert!(first.await.is_pending());
        // It is not polled again while other tasks make requests.
        let other = c.clone();
        let pings = tokio::spawn(async move {
            for _ in 0..50 {
                other.ping().await.unwrap();
            }
        });
        tokio::time::timeout(PATIENCE, pings)
            .await
            .expect("the pings were answered")
            .unwrap();
        // The held receive still gets its message when polled again.
        let sent = c.send("idle", "at last").await.unwrap();
        let got = tokio::time::timeout(PATIENCE, held).await.unwrap().unwrap();
        assert_eq!(got[0].id, sent.id);
    });
}
