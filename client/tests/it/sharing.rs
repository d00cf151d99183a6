//! One blocking client shared by many threads: every reply reaches the
//! thread that asked for it, a disconnect in the middle of a burst fails
//! every waiter with a disconnect-class error and the next request
//! reconnects, and a request's time-out fires while another thread reads.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_client::{Error, MessageId, QueueOptions, ReceiveOptions, Reply, Request};
use sluice_protocol::{QueueName, ReceiveRequest, opcode};

use crate::util::{PATIENCE, Proxy, TestServer, eventually};

const THREADS: usize = 64;
/// Requests each ping or send thread makes.
const ROUNDS: u64 = 100;

fn ping(c: &sluice_client::Client, nonce: u64) -> Result<(), Error> {
    match c.call(&Request::Ping { nonce })? {
        Reply::Pong { nonce: got } => {
            assert_eq!(got, nonce, "a PONG for another caller's PING");
            Ok(())
        }
        other => panic!("a PING answered {other:?}"),
    }
}

#[test]
fn sixty_four_threads_share_one_client_and_every_reply_finds_its_caller() {
    let server = TestServer::start();
    let c = server.client();
    c.create_queue("work", &QueueOptions::new()).unwrap();
    let pollers: Vec<usize> = (0..THREADS).filter(|t| t % 4 == 3).collect();
    for t in &pollers {
        c.create_queue(&format!("poll{t}"), &QueueOptions::new())
            .unwrap();
    }
    let senders = (0..THREADS).filter(|t| t % 4 == 1).count();
    let total = senders as u64 * ROUNDS;
    let sent: Mutex<HashMap<MessageId, Bytes>> = Mutex::new(HashMap::new());
    let received: Mutex<Vec<(MessageId, Bytes)>> = Mutex::new(Vec::new());
    let senders_done = AtomicUsize::new(0);
    let deadline = Instant::now() + PATIENCE;

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let c = c.clone();
            let (sent, received, senders_done) = (&sent, &received, &senders_done);
            s.spawn(move || match t % 4 {
                // Pings with a nonce of their own.
                0 => {
                    for i in 0..ROUNDS {
                        ping(&c, (t as u64) << 32 | i).unwrap();
                    }
                }
                // Sends: each id the server gives back is this body's.
                1 => {
                    for i in 0..ROUNDS {
                        let body = Bytes::from(format!("from {t}, number {i}"));
                        let out = c.send("work", body.clone()).unwrap();
                        let before = sent.lock().unwrap().insert(out.id, body);
                        assert!(before.is_none(), "an id given twice");
                    }
                    senders_done.fetch_add(1, Ordering::SeqCst);
                }
                // Receives and deletes until every message is in.
                2 => loop {
                    if received.lock().unwrap().len() as u64 >= total {
                        break;
                    }
                    assert!(Instant::now() < deadline, "messages missing");
                    let options = ReceiveOptions::new(8).wait(Duration::from_millis(20));
                    for m in c.receive("work", options).unwrap() {
                        c.delete("work", m.receipt).unwrap();
                        received.lock().unwrap().push((m.id, m.body));
                    }
                },
                // A long poll on a queue of its own, answered at the end.
                _ => {
                    let options = ReceiveOptions::new(4).wait(Duration::from_secs(20));
                    let got = c.receive(&format!("poll{t}"), options).unwrap();
                    assert_eq!(got.len(), 1, "the one message of its queue");
                    assert_eq!(got[0].body, format!("for {t}"), "another poller's message");
                    c.delete(&format!("poll{t}"), got[0].receipt).unwrap();
                }
            });
        }
        // The long polls wait through the whole burst; then each gets one.
        eventually("the senders", || {
            (senders_done.load(Ordering::SeqCst) == senders).then_some(())
        });
        for t in &pollers {
            c.send(&format!("poll{t}"), format!("for {t}")).unwrap();
        }
    });

    let sent = sent.into_inner().unwrap();
    let received = received.into_inner().unwrap();
    assert_eq!(sent.len() as u64, total);
    assert_eq!(received.len() as u64, total);
    let mut ids = HashSet::new();
    for (id, body) in &received {
        assert!(ids.insert(*id), "{id} received twice");
        assert_eq!(
            sent.get(id),
            Some(body),
            "the send of {id} was answered to another"
        );
    }
    let stats = c.queue_info("work").unwrap().stats;
    assert_eq!((stats.sent, stats.deleted), (total, total));
}

#[test]
fn a_disconnect_mid_burst_fails_every_waiter_and_the_next_request_reconnects() {
    let server = TestServer::start();
    let proxy = Proxy::start(server.addr);
    let c = proxy.client(server.client_config());
    c.create_queue("idle", &QueueOptions::new()).unwrap();
    let cut = AtomicBool::new(false);
    let polls_before = proxy.frames(opcode::RECEIVE);

    std::thread::scope(|s| {
        let mut pingers = Vec::new();
        for t in 0..THREADS / 2 {
            let (c, cut) = (c.clone(), &cut);
            pingers.push(s.spawn(move || {
                // Every result, until a request made after the cut succeeds.
                let mut results = Vec::new();
                for i in 0.. {
                    let after_cut = cut.load(Ordering::SeqCst);
                    let r = ping(&c, (t as u64) << 32 | i);
                    let ok = r.is_ok();
                    results.push(r);
                    if after_cut && ok {
                        break;
                    }
                }
                results
            }));
        }
        let mut pollers = Vec::new();
        for _ in 0..THREADS / 2 {
            let c = c.clone();
            pollers.push(s.spawn(move || {
                c.receive("idle", ReceiveOptions::new(1).wait(Duration::from_secs(20)))
            }));
        }
        // Every long poll has reached the server: cut the connection.
        eventually("the long polls", || {
            (proxy.frames(opcode::RECEIVE) - polls_before == THREADS / 2).then_some(())
        });
        proxy.cut();
        cut.store(true, Ordering::SeqCst);

        for p in pollers {
            let err = p.join().unwrap().expect_err("its connection was cut");
            assert!(err.is_disconnect(), "a waiting poll failed with {err}");
        }
        for p in pingers {
            let results = p.join().unwrap();
            for (i, r) in results.iter().enumerate() {
                if let Err(err) = r {
                    assert!(err.is_disconnect(), "a ping failed with {err}");
                    // The next request reconnects.
                    assert!(
                        results.get(i + 1).is_some_and(Result::is_ok),
                        "the request after a disconnect failed too: {results:?}"
                    );
                }
            }
        }
    });
    // The client works on its new connection, long polls included.
    c.send("idle", "after").unwrap();
    let got = c
        .receive("idle", ReceiveOptions::new(1).wait(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(got[0].body, "after");
}

#[test]
fn a_request_times_out_while_another_thread_reads() {
    let server = TestServer::start();
    let proxy = Proxy::start(server.addr);
    let config = server
        .client_config()
        .with_request_timeout(Duration::from_millis(300));
    let c = proxy.client(config);
    c.create_queue("idle", &QueueOptions::new()).unwrap();
    c.create_queue("held", &QueueOptions::new()).unwrap();
    let polls_before = proxy.frames(opcode::RECEIVE);
    std::thread::scope(|s| {
        // A long poll (its time-out is the request time-out plus its wait):
        // the only request in flight, so its thread reads.
        let poller = {
            let c = c.clone();
            s.spawn(move || c.receive("idle", ReceiveOptions::new(1).wait(Duration::from_secs(20))))
        };
        eventually("the long poll", || {
            (proxy.frames(opcode::RECEIVE) > polls_before).then_some(())
        });
        // A raw receive that waits 10 s (on another queue, so it cannot take
        // the poller's message) with only the 300 ms request time-out: it
        // fails while the poller is still reading.
        let raw = Request::Receive(ReceiveRequest {
            queue: QueueName::from_static("held"),
            max_messages: 1,
            visibility_timeout_ms: None,
            wait_ms: Some(10_000),
            bind_leases: false,
            with_source: false,
        });
        let err = c.call(&raw).expect_err("no reply within 300 ms");
        assert!(matches!(err, Error::Timeout(_)), "{err}");
        assert!(!poller.is_finished(), "the poll still waits");
        // The poller, still reading, gets the message sent now.
        c.send("idle", "late").unwrap();
        let got = poller.join().unwrap().unwrap();
        assert_eq!(got[0].body, "late");
    });
}
