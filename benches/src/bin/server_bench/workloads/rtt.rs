//! `rtt`: one request at a time on one connection to each server of the
//! pass and to a std::net echo, taking turns request by request; with
//! `client`, the native clients' PINGs join the turns.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use sluice_client::ClientConfig;
use sluice_protocol::{Reply, Request, opcode};

use super::echo::Echo;
use crate::args::Args;
use crate::launch::target;
use crate::raw_client::{Client, create_queue, decode, send_frame};
use crate::{READ_TIMEOUT, Res, err};

pub(crate) fn new_histogram() -> Res<Histogram<u64>> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())
}

/// One request at a time on one connection, to one of the servers.
enum Probe {
    /// A request frame to a sluice server, and the reply opcode it expects.
    Sluice {
        client: Client,
        frame: Bytes,
        reply_op: u8,
    },
    /// `--size` bytes to the std::net echo server.
    Echo {
        stream: TcpStream,
        msg: Vec<u8>,
        back: Vec<u8>,
    },
    /// A PING through the blocking native client.
    Blocking(sluice_client::Client),
    /// A PING through the async native client, on its own current-thread
    /// runtime.
    Async(tokio::runtime::Runtime, sluice_client::AsyncClient),
}

impl Probe {
    /// One round trip, in ns.
    fn round_trip(&mut self) -> Res<u64> {
        let start = Instant::now();
        match self {
            Probe::Sluice {
                client,
                frame,
                reply_op,
            } => {
                client.stream.write_all(frame).map_err(err("write"))?;
                let f = client.read_frame()?;
                if f.opcode != *reply_op {
                    return decode(f).and(Err("unexpected reply".into()));
                }
            }
            Probe::Echo { stream, msg, back } => {
                stream.write_all(msg).map_err(err("echo write"))?;
                stream.read_exact(back).map_err(err("echo read"))?;
            }
            Probe::Blocking(c) => {
                c.ping().map_err(|e| format!("Client ping: {e}"))?;
            }
            Probe::Async(rt, c) => {
                rt.block_on(c.ping())
                    .map_err(|e| format!("AsyncClient ping: {e}"))?;
            }
        }
        Ok(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Round trips to every server of the pass, interleaved request by request
/// (PING and SEND of one message to each sluice server, `--size` bytes to the
/// echo server) so that the machine's noise falls on all of them alike.
/// Returns the name and latency of each probe.
pub(crate) fn bench_rtt(args: &Args) -> Res<Vec<(String, Latency)>> {
    let mut servers = Vec::new();
    let mut probes: Vec<(String, Probe)> = Vec::new();
    for &io in &args.ios {
        let server = target(args, io)?;
        let mut c = Client::connect(server.addr)?;
        create_queue(&mut c)?;
        let mut ping = BytesMut::new();
        Request::Ping { nonce: 7 }
            .encode(1, &mut ping)
            .map_err(|e| e.to_string())?;
        probes.push((
            format!("rtt {} PING", io.flag()),
            Probe::Sluice {
                client: c,
                frame: ping.freeze(),
                reply_op: opcode::PONG,
            },
        ));
        probes.push((
            format!("rtt {} SEND 1", io.flag()),
            Probe::Sluice {
                client: Client::connect(server.addr)?,
                frame: send_frame(1, args.size)?,
                reply_op: opcode::SEND_REPLY,
            },
        ));
        if args.runs("client") {
            let config = ClientConfig::new(server.addr.to_string());
            let connect = |config: ClientConfig| {
                sluice_client::Client::connect(config).map_err(|e| format!("Client: {e}"))
            };
            probes.push((
                format!("rtt {} Client PING", io.flag()),
                Probe::Blocking(connect(config.clone())?),
            ));
            let spin = Duration::from_micros(args.client_spin_us);
            probes.push((
                format!("rtt {} Client+spin PING", io.flag()),
                Probe::Blocking(connect(config.clone().with_read_spin(spin))?),
            ));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(err("tokio runtime"))?;
            let c = rt
                .block_on(sluice_client::AsyncClient::connect(config))
                .map_err(|e| format!("AsyncClient: {e}"))?;
            probes.push((
                format!("rtt {} AsyncClient PING", io.flag()),
                Probe::Async(rt, c),
            ));
        }
        servers.push(server);
    }
    let echo = Echo::start(args.server_cpu)?;
    let stream = TcpStream::connect(echo.addr).map_err(err("echo connect"))?;
    stream.set_nodelay(true).map_err(err("nodelay"))?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(err("read timeout"))?;
    probes.push((
        "rtt std::net echo".into(),
        Probe::Echo {
            stream,
            msg: vec![0x5a; args.size],
            back: vec![0; args.size],
        },
    ));
    let mut hists = probes
        .iter()
        .map(|_| new_histogram())
        .collect::<Res<Vec<_>>>()?;
    let n = probes.len();
    for round in 0..args.warmup_rounds + args.rounds {
        // Who goes first rotates, so no server always follows another.
        let first = usize::try_from(round).unwrap_or(0) % n;
        for k in 0..n {
            let i = (first + k) % n;
            let ns = probes[i].1.round_trip()?;
            if round >= args.warmup_rounds {
                hists[i].saturating_record(ns.max(1));
            }
        }
    }
    // The last SEND's reply, decoded in full: an accepted message.
    for (_, probe) in &mut probes {
        if let Probe::Sluice {
            client,
            frame,
            reply_op: opcode::SEND_REPLY,
        } = probe
        {
            client.stream.write_all(frame).map_err(err("write"))?;
            match decode(client.read_frame()?)? {
                Reply::Send { results } if results.len() == 1 && results[0].is_ok() => {}
                other => return Err(format!("SEND answered {other:?}")),
            }
        }
        if let Probe::Echo { msg, back, .. } = probe {
            if msg != back {
                return Err("the echo returned different bytes".into());
            }
        }
    }
    let figures = probes
        .iter()
        .zip(&hists)
        .map(|((name, _), h)| (name.clone(), Latency::of(h)))
        .collect();
    // The echo thread ends once its connection is closed.
    drop(probes);
    drop(echo);
    drop(servers);
    Ok(figures)
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Latency {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
}

impl Latency {
    pub(crate) fn of(h: &Histogram<u64>) -> Latency {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Latency {
            p50: us(0.50),
            p99: us(0.99),
            p999: us(0.999),
        }
    }
}
