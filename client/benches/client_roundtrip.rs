//! Client-side figures against an in-process server on loopback: one
//! request at a time (round trip) and pipelined throughput, for the
//! blocking and the async client.
//!
//! ```sh
//! cargo bench -p sluice-client --bench client_roundtrip
//! ```
//!
//! A plain bench binary (no harness): it prints one line per figure. Each
//! figure is the median of three passes.

use std::time::{Duration, Instant};

use sluice_broker::testing::TestServer;
use sluice_client::{
    AsyncClient, Client, ClientConfig, QueueOptions, ReceiveOptions, Request, SendEntry,
};
use sluice_protocol::{QueueName, SendRequest};

const ROUND_TRIPS: usize = 20_000;
const PIPELINED_REQUESTS: usize = 200_000;
const PASSES: usize = 3;

/// An in-process server: one shard, 1 GiB for messages.
fn server() -> TestServer {
    TestServer::builder().arg("--memory-max", "1GiB").start()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report_latency(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name:<44} p50 {:>7.1} us  p99 {:>7.1} us  p99.9 {:>7.1} us  ({} samples)",
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        percentile(&samples, 0.999).as_secs_f64() * 1e6,
        samples.len()
    );
}

fn median_rate(name: &str, mut pass: impl FnMut() -> f64) {
    let mut rates: Vec<f64> = (0..PASSES).map(|_| pass()).collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "{name:<44} {:>12.0} requests/s (median of {PASSES})",
        rates[PASSES / 2]
    );
}

fn main() {
    let server = server();
    let config = ClientConfig::new(server.addr().to_string());
    let client = Client::connect(config.clone()).expect("client connects");
    client
        .create_queue("bench", &QueueOptions::new())
        .expect("queue");
    println!(
        "server: {} shard, backend {:?}; client and server share this machine",
        1,
        server.handle().backend()
    );

    let body = vec![b'x'; 100];
    blocking_round_trips(&client, &body);
    blocking_pipelined(&client, &body);
    async_figures(&config, &body);
    drop(client);
    drop(server);
}

/// The blocking client, one request at a time: PING, and a 100-byte SEND
/// then RECEIVE and DELETE.
fn blocking_round_trips(client: &Client, body: &[u8]) {
    // Blocking: one PING at a time.
    for _ in 0..1000 {
        client.ping().expect("ping");
    }
    let samples = (0..ROUND_TRIPS)
        .map(|_| {
            let t = Instant::now();
            client.ping().expect("ping");
            t.elapsed()
        })
        .collect();
    report_latency("blocking ping round trip", samples);

    // Blocking: a 100-byte SEND, then RECEIVE and DELETE, one at a time.
    let samples = (0..ROUND_TRIPS / 4)
        .map(|_| {
            let t = Instant::now();
            client.send("bench", body.to_vec()).expect("send");
            let got = client
                .receive("bench", ReceiveOptions::new(1).wait(Duration::ZERO))
                .expect("receive");
            client.delete("bench", got[0].receipt).expect("delete");
            t.elapsed()
        })
        .collect();
    report_latency("blocking send+receive+delete (100 B)", samples);
}

/// The blocking client, pipelined: `call_many` batches, and threads sharing
/// one client.
fn blocking_pipelined(client: &Client, body: &[u8]) {
    // Blocking, pipelined: call_many of 256 single-message SENDs.
    let send = SendRequest::new(
        QueueName::from_static("bench"),
        &[sluice_protocol::SendEntry::new(body.to_vec())],
    )
    .expect("encodable");
    let request = Request::Send(send);
    let requests = vec![request; 256];
    median_rate("blocking call_many, 256 sends per write", || {
        let t = Instant::now();
        for _ in 0..PIPELINED_REQUESTS / 256 {
            for r in client.call_many(&requests).expect("pipelined") {
                r.expect("reply");
            }
        }
        let rate = (PIPELINED_REQUESTS / 256 * 256) as f64 / t.elapsed().as_secs_f64();
        client.purge_queue("bench").expect("purge");
        rate
    });

    // Blocking, 16 threads sharing one client, one send at a time each.
    median_rate("blocking, 16 threads sharing a client", || {
        let per_thread = PIPELINED_REQUESTS / 16 / 4;
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..16 {
                let c = client.clone();
                let body = body.to_vec();
                s.spawn(move || {
                    for _ in 0..per_thread {
                        c.send("bench", body.clone()).expect("send");
                    }
                });
            }
        });
        let rate = (per_thread * 16) as f64 / t.elapsed().as_secs_f64();
        client.purge_queue("bench").expect("purge");
        rate
    });
}

/// The async client: PING round trips, then tasks sharing one client.
fn async_figures(config: &ClientConfig, body: &[u8]) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let c = AsyncClient::connect(config.clone())
            .await
            .expect("connects");
        for _ in 0..1000 {
            c.ping().await.expect("ping");
        }
        let mut samples = Vec::with_capacity(ROUND_TRIPS);
        for _ in 0..ROUND_TRIPS {
            let t = Instant::now();
            c.ping().await.expect("ping");
            samples.push(t.elapsed());
        }
        report_latency("async ping round trip", samples);
    });
    for tasks in [64usize, 256] {
        median_rate(
            &format!("async, {tasks} tasks sharing a client (sends)"),
            || {
                rt.block_on(async {
                    let c = AsyncClient::connect(config.clone())
                        .await
                        .expect("connects");
                    let per_task = PIPELINED_REQUESTS / tasks;
                    let t = Instant::now();
                    let mut handles = Vec::with_capacity(tasks);
                    for _ in 0..tasks {
                        let c = c.clone();
                        let entry = SendEntry::new(body.to_vec());
                        handles.push(tokio::spawn(async move {
                            for _ in 0..per_task {
                                c.send_entry("bench", entry.clone()).await.expect("send");
                            }
                        }));
                    }
                    for h in handles {
                        h.await.expect("task");
                    }
                    let rate = (per_task * tasks) as f64 / t.elapsed().as_secs_f64();
                    c.purge_queue("bench").await.expect("purge");
                    rate
                })
            },
        );
    }
}
