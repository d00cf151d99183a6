//! `tls`: the same broker without and with TLS (a CA and a server
//! certificate made at start), through the native blocking client: PING
//! round trips taking turns, then end to end on two connections.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_broker::testing::TestPki;
use sluice_client::ClientConfig;
use sluice_client::tls::TlsConfig;

use super::rtt::{Latency, new_histogram};
use crate::args::{Args, Io};
use crate::launch::ServerProc;
use crate::{QUEUE, RECEIVE_WAIT_MS, Res};

/// A server without TLS or with it, and a blocking native client on it.
fn tls_client(addr: SocketAddr, pki: Option<&TestPki>) -> Res<sluice_client::Client> {
    let mut config = ClientConfig::new(addr.to_string());
    if let Some(pki) = pki {
        let tls = TlsConfig::with_ca_file(pki.ca_pem()).map_err(|e| format!("TLS CA: {e}"))?;
        config = config.with_tls(tls);
    }
    sluice_client::Client::connect(config).map_err(|e| format!("Client on {addr}: {e}"))
}

fn tls_server(args: &Args, io: Io, pki: Option<&TestPki>) -> Res<ServerProc> {
    let extra = pki.map(TestPki::server_args).unwrap_or_default();
    ServerProc::start(args, io, 1, &args.server_cpu.to_string(), &extra)
}

/// PING round trips through the blocking client to a plain and a TLS
/// server at once, taking turns request by request: (plain, TLS).
pub(crate) fn bench_tls_ping(args: &Args, io: Io, pki: &TestPki) -> Res<(Latency, Latency)> {
    let plain = tls_server(args, io, None)?;
    let tls = tls_server(args, io, Some(pki))?;
    let clients = [
        tls_client(plain.addr, None)?,
        tls_client(tls.addr, Some(pki))?,
    ];
    let mut hists = [new_histogram()?, new_histogram()?];
    for round in 0..args.warmup_rounds + args.rounds {
        for (c, h) in clients.iter().zip(&mut hists) {
            let rtt = c.ping().map_err(|e| format!("PING: {e}"))?;
            if round >= args.warmup_rounds {
                h.record(u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX).max(1))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok((Latency::of(&hists[0]), Latency::of(&hists[1])))
}

/// End to end through the blocking client on two connections: a producer
/// with `--window` SENDs in flight, a consumer receiving and deleting each
/// batch, at most `--backlog` messages sent and not deleted. Messages
/// deleted per second, from the first send to the last delete.
pub(crate) fn bench_tls_e2e(args: &Args, io: Io, pki: Option<&TestPki>) -> Res<f64> {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;

    let server = tls_server(args, io, pki)?;
    let producer = tls_client(server.addr, pki)?;
    let consumer = tls_client(server.addr, pki)?;
    producer
        .create_queue(QUEUE, &sluice_client::QueueOptions::new())
        .map_err(|e| format!("create: {e}"))?;
    let total = args.e2e_messages.max(args.batch as u64);
    let batches = total.div_ceil(args.batch as u64);
    let total = batches * args.batch as u64;
    let entries: Vec<sluice_client::SendEntry> = (0..args.batch)
        .map(|_| sluice_client::SendEntry::new(Bytes::from(vec![b'x'; args.size])))
        .collect();
    let deleted = AtomicU64::new(0);
    let started = Instant::now();
    thread::scope(|s| -> Res<()> {
        let deleted = &deleted;
        let consumer = s.spawn(move || -> Res<()> {
            let options = sluice_client::ReceiveOptions::new(args.batch)
                .wait(Duration::from_millis(u64::from(RECEIVE_WAIT_MS)));
            let mut idle = 0;
            while deleted.load(Ordering::Acquire) < total {
                let got = consumer
                    .receive(QUEUE, options)
                    .map_err(|e| format!("receive: {e}"))?;
                if got.is_empty() {
                    idle += 1;
                    if idle > 30 {
                        return Err("no message for 30 long polls".into());
                    }
                    continue;
                }
                idle = 0;
                let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
                for r in consumer
                    .delete_batch(QUEUE, &receipts)
                    .map_err(|e| format!("delete: {e}"))?
                {
                    r.map_err(|e| format!("delete entry: {e}"))?;
                }
                deleted.fetch_add(receipts.len() as u64, Ordering::AcqRel);
            }
            Ok(())
        });
        let mut in_flight = VecDeque::new();
        let mut sent = 0u64;
        let wait_one = |q: &mut VecDeque<sluice_client::PendingReply<_>>| -> Res<()> {
            if let Some(p) = q.pop_front() {
                let results: Vec<sluice_client::Result<_>> =
                    p.wait().map_err(|e| format!("send: {e}"))?;
                for r in results {
                    r.map_err(|e| format!("send entry: {e}"))?;
                }
            }
            Ok(())
        };
        for _ in 0..batches {
            while in_flight.len() >= args.window {
                wait_one(&mut in_flight)?;
            }
            // Bounded backlog: wait for the consumer (bounded by its own
            // 30 idle long polls, after which it fails and ends).
            while sent.saturating_sub(deleted.load(Ordering::Acquire)) > args.backlog
                && !consumer.is_finished()
            {
                if in_flight.is_empty() {
                    thread::yield_now();
                } else {
                    wait_one(&mut in_flight)?;
                }
            }
            in_flight.push_back(
                producer
                    .start_send_batch(QUEUE, &entries)
                    .map_err(|e| format!("send: {e}"))?,
            );
            sent += args.batch as u64;
        }
        while !in_flight.is_empty() {
            wait_one(&mut in_flight)?;
        }
        consumer
            .join()
            .map_err(|_| "the consumer thread panicked".to_string())?
    })?;
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
