//! `send`, `e2e` and `shards`: the pipelined workloads over raw frames.

use crate::Res;
use crate::args::{Args, Io};
use crate::launch::{ServerProc, target};
use crate::pipeline::{Goal, Rate, Role, Workload, pipe, pipeline};
use crate::raw_client::{Client, create_queue, receive_frame, send_frame};

/// Send alone, pipelined, on `conns` connections.
pub(crate) fn bench_send(args: &Args, io: Io, conns: usize) -> Res<Rate> {
    let server = target(args, io)?;
    let mut pipes = Vec::new();
    for i in 0..conns {
        let mut c = Client::connect(server.addr)?;
        if i == 0 {
            create_queue(&mut c)?;
        }
        let role = Role {
            sends: args.window,
            receives: 0,
        };
        pipes.push(pipe(c, role));
    }
    let w = Workload {
        send: send_frame(args.batch, args.size)?,
        receive: receive_frame(args.batch)?,
        batch: args.batch as u64,
        backlog: u64::MAX,
        goal: Goal::Acked,
        warmup: args.send_messages / 10,
        messages: args.send_messages,
    };
    pipeline(&mut pipes, &w)
}

/// Send + receive + delete on one connection.
pub(crate) fn bench_e2e(args: &Args, io: Io) -> Res<Rate> {
    let server = target(args, io)?;
    let mut c = Client::connect(server.addr)?;
    create_queue(&mut c)?;
    let role = Role {
        sends: args.window,
        receives: args.receives,
    };
    let w = Workload {
        send: send_frame(args.batch, args.size)?,
        receive: receive_frame(args.batch)?,
        batch: args.batch as u64,
        backlog: args.backlog,
        goal: Goal::Deleted,
        warmup: args.e2e_messages / 10,
        messages: args.e2e_messages,
    };
    pipeline(&mut [pipe(c, role)], &w)
}

/// One hot queue, producers and consumers spread over `shards` shards.
pub(crate) fn bench_shards(args: &Args, io: Io, shards: usize) -> Res<Rate> {
    let cpus = if shards == 1 {
        args.server_cpu.to_string()
    } else {
        (0..shards)
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let server = ServerProc::start(args, io, shards, &cpus, &[])?;
    let shards16 = u16::try_from(shards).map_err(|e| e.to_string())?;
    let mut pipes = Vec::new();
    let mut placed = Vec::new();
    for i in 0..args.producers + args.consumers {
        let want = u16::try_from(i % shards).unwrap_or(0) % shards16;
        let mut c = Client::connect_to_shard(server.addr, want)?;
        if i == 0 {
            create_queue(&mut c)?;
        }
        let role = if i < args.producers {
            Role {
                sends: args.window,
                receives: 0,
            }
        } else {
            Role {
                sends: 0,
                receives: args.receives,
            }
        };
        placed.push(c.shard);
        pipes.push(pipe(c, role));
    }
    let w = Workload {
        send: send_frame(args.batch, args.size)?,
        receive: receive_frame(args.batch)?,
        batch: args.batch as u64,
        backlog: args.backlog,
        goal: Goal::Deleted,
        warmup: args.e2e_messages / 10,
        messages: args.e2e_messages,
    };
    let rate = pipeline(&mut pipes, &w)?;
    println!(
        "    ({shards} shard(s): producers on shards {:?}, consumers on {:?})",
        &placed[..args.producers],
        &placed[args.producers..]
    );
    Ok(rate)
}
