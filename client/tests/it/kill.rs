//! A consumer process killed with SIGKILL while it holds 1,000 leases of
//! 30 s, bound to its connection (the consumers' default): another consumer
//! receives all 1,000 long before 30 s could pass.
//!
//! The consumer is this very test binary, run again as a child on the one
//! test that is its body (`child_consumer_holding_bound_leases`, ignored in
//! ordinary runs). The test bounds its wait at 20 s, below the 30 s leases,
//! so the messages can only have come back because the connection's close
//! released them; how fast is measured by `benches/src/bin/release_on_close.rs`
//! (BENCHMARKS.md), never asserted here.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_client::consumer::{Consumer, ConsumerConfig, Delivery};
use sluice_client::{ClientConfig, QueueOptions, ReceiveOptions, SendEntry};

use crate::util::{TestServer, runtime};

const MESSAGES: usize = 1_000;
const LEASE: Duration = Duration::from_secs(30);
/// How long the survivor may take: below the lease, so the lease running
/// out cannot explain a message coming back.
const PATIENCE: Duration = Duration::from_secs(20);
/// The child's address variable; the child test does nothing without it.
const CHILD_ADDR: &str = "SLUICE_KILL_TEST_ADDR";
const CHILD_TEST: &str = "kill::child_consumer_holding_bound_leases";

#[test]
fn a_consumer_killed_holding_bound_leases_gives_every_message_back_at_once() {
    let server = TestServer::start_on("127.0.0.1:0", &["--shards", "2"]);
    let admin = server.client();
    admin.create_queue("work", &QueueOptions::new()).unwrap();
    let mut sent = BTreeSet::new();
    for chunk in 0..MESSAGES / 100 {
        let entries: Vec<SendEntry> = (0..100)
            .map(|i| SendEntry::new(Bytes::from(format!("job {chunk}-{i}"))))
            .collect();
        for r in admin.send_batch("work", &entries).unwrap() {
            sent.insert(r.unwrap().id);
        }
    }

    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            CHILD_TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ADDR, server.addr.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the consumer process");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let started = Instant::now();
    loop {
        let line = lines
            .next()
            .expect("the consumer says it holds its messages")
            .expect("read the consumer's output");
        // libtest may have printed the test's name on the same line.
        if let Some(at) = line.find("HOLDING ") {
            assert_eq!(&line[at..], format!("HOLDING {MESSAGES}"));
            break;
        }
        assert!(started.elapsed() < PATIENCE, "the consumer took too long");
    }
    let s = admin.queue_info("work").unwrap().stats;
    assert_eq!((s.in_flight, s.visible), (MESSAGES as u64, 0), "{s:?}");

    // SIGKILL: no goodbye from the consumer, the kernel closes its socket.
    child.kill().expect("SIGKILL the consumer");
    let status = child.wait().expect("reap the consumer");
    assert!(!status.success());

    let survivor = server.client();
    let mut got = BTreeSet::new();
    let killed = Instant::now();
    while got.len() < MESSAGES {
        assert!(
            killed.elapsed() < PATIENCE,
            "{} of {MESSAGES} came back within {PATIENCE:?} of the kill (leases of {LEASE:?})",
            got.len()
        );
        let batch = survivor
            .receive(
                "work",
                ReceiveOptions::new(1024)
                    .visibility_timeout(Duration::from_secs(600))
                    .wait(Duration::from_secs(1)),
            )
            .unwrap();
        for m in batch {
            assert_eq!(m.receive_count, 2, "delivered to the killed consumer first");
            got.insert(m.id);
        }
    }
    assert_eq!(got, sent);
    let stats = admin.server_stats().unwrap();
    let abandoned = stats
        .counters
        .iter()
        .find(|c| c.name == "leases_abandoned")
        .map(|c| c.value);
    assert_eq!(abandoned, Some(MESSAGES as u64));
    let s = admin.queue_info("work").unwrap().stats;
    assert_eq!((s.released, s.redelivered), (MESSAGES as u64, 0), "{s:?}");
}

/// The consumer process: an ordinary `Consumer` (binding its leases, as by
/// default) whose handlers never finish; it says when it holds every
/// message, then waits to be killed.
#[test]
#[ignore = "the body of the consumer process the kill test starts"]
fn child_consumer_holding_bound_leases() {
    let Ok(addr) = std::env::var(CHILD_ADDR) else {
        return;
    };
    runtime().block_on(async move {
        let client = sluice_client::AsyncClient::connect(ClientConfig::new(addr))
            .await
            .expect("the consumer connects");
        let held = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&held);
        let config = ConsumerConfig::new("work")
            .concurrency(MESSAGES)
            .visibility_timeout(LEASE);
        assert!(config.binds_leases());
        let _consumer = Consumer::start(client, config, move |_: Delivery| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<(), String>>().await
            }
        });
        while held.load(Ordering::SeqCst) < MESSAGES {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("HOLDING {}", held.load(Ordering::SeqCst));
        std::future::pending::<()>().await;
    });
}
