//! Queue creates at scale: creates `--queues` queues one after another on a
//! running broker (start it with `--shards 1` so that every create and
//! every PING meet on one shard) and prints the time per thousand creates
//! at the start and at the end, and the round trip of a PING sent every
//! millisecond on another connection meanwhile (p50, p99, max); then lists
//! them, and deletes the first and the last thousand (with the rest held),
//! timing each thousand.
//!
//! ```sh
//! sluice-server --shards 1 --queues-max 100000 --listen 127.0.0.1:7401 --sqs-listen off --metrics-addr off &
//! cargo run --release -p sluice-benches --bin queue_creates -- --connect 127.0.0.1:7401 --queues 100000
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sluice_client::{Client, ClientConfig, QueueOptions};

/// Creates timed together.
const CHUNK: usize = 1000;

struct Args {
    connect: String,
    queues: usize,
    name_bytes: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        connect: String::new(),
        queues: 100_000,
        name_bytes: 32,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--connect" => a.connect = value()?,
            "--queues" => a.queues = value()?.parse().map_err(|e| format!("--queues: {e}"))?,
            "--name-bytes" => {
                a.name_bytes = value()?.parse().map_err(|e| format!("--name-bytes: {e}"))?;
            }
            "--help" | "-h" => {
                return Err(
                    "usage: queue_creates --connect HOST:PORT [--queues N] [--name-bytes B]".into(),
                );
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.connect.is_empty() {
        return Err("--connect HOST:PORT is required".into());
    }
    if !(8..=200).contains(&a.name_bytes) || a.queues < 2 * CHUNK {
        return Err("--name-bytes must be 8..=200 and --queues at least 2000".into());
    }
    Ok(a)
}

fn main() {
    let a = args().unwrap_or_else(|e| {
        eprintln!("queue_creates: {e}");
        std::process::exit(2);
    });
    let connect = |what: &str| {
        Client::connect(ClientConfig::new(a.connect.clone())).unwrap_or_else(|e| {
            eprintln!("queue_creates: {what}: {e}");
            std::process::exit(1);
        })
    };
    let creator = connect("connect");
    let pinger = connect("connect the pinger");
    let done = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&done);
    let pings = std::thread::spawn(move || {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            if pinger.ping().is_ok() {
                let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                let _ = h.record(us.max(1));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        h
    });
    let options = QueueOptions::default();
    let started = Instant::now();
    let mut chunks = Vec::new();
    let mut chunk_start = Instant::now();
    for i in 0..a.queues {
        let name = format!("{i:0width$}", width = a.name_bytes);
        if let Err(e) = creator.create_queue(&name, &options) {
            eprintln!("queue_creates: create {i}: {e}");
            std::process::exit(1);
        }
        if (i + 1) % CHUNK == 0 {
            chunks.push(chunk_start.elapsed());
            chunk_start = Instant::now();
        }
    }
    let total = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let h = pings.join().expect("the pinger");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let first = chunks.first().copied().unwrap_or_default();
    let last = chunks.last().copied().unwrap_or_default();
    let mut sorted = chunks.clone();
    sorted.sort();
    println!(
        "{} creates of {}-byte names in {:.2} s; per thousand: first {:.1} ms, last {:.1} ms (last/first {:.2}), median {:.1} ms, slowest {:.1} ms",
        a.queues,
        a.name_bytes,
        total.as_secs_f64(),
        ms(first),
        ms(last),
        ms(last) / ms(first).max(1e-9),
        ms(sorted[sorted.len() / 2]),
        ms(sorted[sorted.len() - 1]),
    );
    let at: Vec<String> = [1usize, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
        .iter()
        .filter(|&&k| k <= chunks.len())
        .map(|&k| format!("{}k {:.1}", k, ms(chunks[k - 1])))
        .collect();
    println!("ms per thousand, at: {}", at.join(", "));
    println!(
        "PING during the creates ({} pings): p50 {} us, p99 {} us, max {} us",
        h.len(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.max()
    );
    let listed = Instant::now();
    let listing = creator.list_queues("");
    let list_ms = ms(listed.elapsed());
    let delete = |range: std::ops::Range<usize>| {
        let t = Instant::now();
        for i in range {
            let name = format!("{i:0width$}", width = a.name_bytes);
            if let Err(e) = creator.delete_queue(&name) {
                eprintln!("queue_creates: delete {i}: {e}");
                std::process::exit(1);
            }
        }
        ms(t.elapsed())
    };
    let last = delete(a.queues - CHUNK..a.queues);
    let first = delete(0..CHUNK);
    println!(
        "deletes per thousand: the last thousand {last:.1} ms (with {} queues held), the first {first:.1} ms",
        a.queues - CHUNK
    );
    match listing {
        Ok(names) => println!(
            "list_queues(\"\"): {} names in {list_ms:.1} ms",
            names.len()
        ),
        Err(e) => println!("list_queues(\"\"): {e}"),
    }
}
