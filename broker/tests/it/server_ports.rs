//! One broker per port: a second `sluice-server` whose binary, SQS or
//! metrics port another process listens on is refused with exit 2 naming
//! the port (`SO_REUSEPORT` would otherwise let it join the first broker's
//! port and take half its connections), while one broker's own shards
//! still share its port.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_broker::server::config::IoChoice;

use crate::server_process::BIN;
use crate::server_util::{Client, start};

fn a_second_broker_on_a_taken_port_is_refused(io: IoChoice) {
    let Some(first) = start(
        io,
        &[
            "--shards",
            "2",
            "--metrics-addr",
            "127.0.0.1:0",
            "--sqs-listen",
            "127.0.0.1:0",
        ],
    ) else {
        return;
    };
    let handle = first.handle();
    let ports = [
        ("--listen", handle.local_addr()),
        ("--sqs-listen", handle.sqs_addr().expect("the SQS door")),
        ("--metrics-addr", handle.metrics_addr().expect("metrics on")),
    ];
    for (flag, addr) in ports {
        let mut args = vec![
            ("--listen", "127.0.0.1:0".to_owned()),
            ("--sqs-listen", "off".to_owned()),
            ("--metrics-addr", "off".to_owned()),
        ];
        for (f, value) in &mut args {
            if *f == flag {
                *value = addr.to_string();
            }
        }
        let out = Command::new(BIN)
            .args(args.iter().flat_map(|(f, v)| [*f, v.as_str()]))
            .args(["--io", &io.to_string(), "--memory-max", "64MiB"])
            .env_remove("SLUICE_CONFIG")
            .stdin(Stdio::null())
            .output()
            .expect("run sluice-server");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {addr}: {err}");
        assert!(
            err.contains(&format!(
                "cannot listen on {addr} ({flag}): another process listens there"
            )),
            "{flag}: {err}"
        );
    }
    // The first broker keeps every connection.
    for _ in 0..20 {
        first.client().ping();
    }
}

/// `sluice_shard_connections{shard="N"}` from a scrape.
fn shard_connections(metrics: SocketAddr) -> HashMap<String, u64> {
    let mut s = TcpStream::connect(metrics).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("sluice_shard_connections{shard=\""))
        .filter_map(|l| {
            let (shard, rest) = l.split_once("\"} ")?;
            Some((shard.to_owned(), rest.trim().parse().ok()?))
        })
        .collect()
}

fn connections_spread_over_the_shards(io: IoChoice) {
    let Some(server) = start(io, &["--shards", "2", "--metrics-addr", "127.0.0.1:0"]) else {
        return;
    };
    let metrics = server.handle().metrics_addr().expect("metrics on");
    let clients: Vec<Client> = (0..100).map(|_| server.client()).collect();
    let by_shard = shard_connections(metrics);
    println!("accepted connections per shard, 2 shards, 100 connections: {by_shard:?}");
    assert_eq!(by_shard.values().sum::<u64>(), 100, "{by_shard:?}");
    // The kernel's hash of 100 connections' ports puts all of them on one
    // shard with a chance of 2^-99.
    assert!(by_shard.values().all(|&n| n > 0), "{by_shard:?}");
    drop(clients);
}

crate::both_backends!(
    a_second_broker_on_a_taken_port_is_refused,
    connections_spread_over_the_shards
);
