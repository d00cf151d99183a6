//! Pipelined workloads over raw connections: each connection keeps its
//! SENDs and RECEIVEs in flight, every received batch is DELETEd at once,
//! and the run counts messages (acknowledged or deleted) per second after
//! a warm-up.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

use bytes::Bytes;
use sluice_protocol::{DeleteRequest, QueueName, Reply, Request, opcode};

use crate::raw_client::{Client, decode, queue_name};
use crate::{READ_TIMEOUT, Res};

/// What one connection keeps in flight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Role {
    pub(crate) sends: usize,
    pub(crate) receives: usize,
}

pub(crate) struct Pipe {
    pub(crate) client: Client,
    pub(crate) role: Role,
    pub(crate) sends: usize,
    pub(crate) receives: usize,
    pub(crate) deletes: usize,
}

/// Counted over every connection of a run.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Counts {
    /// Messages in SEND frames written.
    pub(crate) issued: u64,
    /// Messages the server accepted.
    pub(crate) acked: u64,
    /// Entries the server refused.
    pub(crate) refused: u64,
    /// Messages received.
    pub(crate) received: u64,
    /// RECEIVE replies.
    pub(crate) receive_replies: u64,
    /// Messages deleted.
    pub(crate) deleted: u64,
    /// Read calls.
    pub(crate) reads: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Goal {
    /// Count messages the server accepted.
    Acked,
    /// Count messages deleted.
    Deleted,
}

pub(crate) struct Workload {
    pub(crate) send: Bytes,
    pub(crate) receive: Bytes,
    pub(crate) batch: u64,
    /// Most messages sent and not yet deleted (`u64::MAX`: no limit).
    pub(crate) backlog: u64,
    pub(crate) goal: Goal,
    pub(crate) warmup: u64,
    pub(crate) messages: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rate {
    pub(crate) msgs_per_s: f64,
    /// Mean messages per RECEIVE reply (0 when nothing was received).
    pub(crate) per_receive: f64,
    /// Bytes-arrival reads per 64 messages counted.
    pub(crate) reads_per_batch: f64,
}

pub(crate) fn pipeline(pipes: &mut [Pipe], w: &Workload) -> Res<Rate> {
    let queue = queue_name();
    let mut n = Counts::default();
    let mut started: Option<(Instant, Counts)> = None;
    let mut fds: Vec<libc::pollfd> = pipes
        .iter()
        .map(|p| libc::pollfd {
            fd: p.client.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        top_up(pipes, w, &mut n)?;
        if !wait_replies(pipes, &mut fds, &n)? {
            continue;
        }
        for (p, fd) in pipes.iter_mut().zip(fds.iter_mut()) {
            if fd.revents == 0 {
                continue;
            }
            fd.revents = 0;
            n.reads += 1;
            take_replies(p, &mut n, &queue)?;
        }
        if n.refused > 0 {
            return Err(format!("the server refused {} entries", n.refused));
        }
        if let Some(rate) = measure(w, &n, &mut started) {
            return Ok(rate);
        }
    }
}

/// Writes what each connection is short of: SENDs up to its role (while the
/// backlog allows), RECEIVEs up to its role.
fn top_up(pipes: &mut [Pipe], w: &Workload, n: &mut Counts) -> Res<()> {
    for p in pipes.iter_mut() {
        while p.sends < p.role.sends && n.issued.saturating_sub(n.deleted) < w.backlog {
            p.client.wbuf.extend_from_slice(&w.send);
            p.sends += 1;
            n.issued += w.batch;
        }
        while p.receives < p.role.receives {
            p.client.wbuf.extend_from_slice(&w.receive);
            p.receives += 1;
        }
        p.client.flush()?;
    }
    Ok(())
}

/// Reads on the connections that have bytes waiting (one blocking read
/// when there is one connection, `poll` otherwise), marking them in `fds`.
/// False when `poll` was interrupted and nothing was read.
fn wait_replies(pipes: &mut [Pipe], fds: &mut [libc::pollfd], n: &Counts) -> Res<bool> {
    if pipes.len() == 1 {
        pipes[0].client.fill()?;
        fds[0].revents = libc::POLLIN;
        return Ok(true);
    }
    let nfds = libc::nfds_t::try_from(fds.len()).map_err(|e| e.to_string())?;
    let timeout_ms = i32::try_from(READ_TIMEOUT.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `fds` is a live, exclusively borrowed array of `nfds`
    // pollfd structs for the duration of the call.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout_ms) };
    if ready < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(format!("poll: {e}"));
    }
    if ready == 0 {
        return Err(format!("no reply for {READ_TIMEOUT:?}: {n:?}"));
    }
    for (p, fd) in pipes.iter_mut().zip(fds.iter()) {
        if fd.revents != 0 {
            p.client.fill()?;
        }
    }
    Ok(true)
}

/// Handles every whole reply already read on one connection: counts SEND
/// and DELETE results, and queues a DELETE for every received batch.
fn take_replies(p: &mut Pipe, n: &mut Counts, queue: &QueueName) -> Res<()> {
    while let Some(f) = p.client.frame()? {
        match f.opcode {
            opcode::SEND_REPLY => {
                let Reply::Send { results } = decode(f)? else {
                    return Err("SEND_REPLY decoded as another reply".into());
                };
                let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
                n.acked += ok;
                n.refused += results.len() as u64 - ok;
                p.sends -= 1;
            }
            opcode::RECEIVE_REPLY => {
                let Reply::Receive { messages } = decode(f)? else {
                    return Err("RECEIVE_REPLY decoded as another reply".into());
                };
                p.receives -= 1;
                n.receive_replies += 1;
                if messages.is_empty() {
                    continue;
                }
                n.received += messages.len() as u64;
                let receipts = messages.iter().map(|m| m.receipt).collect();
                p.client.queue(&Request::Delete(DeleteRequest {
                    queue: queue.clone(),
                    receipts,
                }))?;
                p.deletes += 1;
            }
            opcode::DELETE_REPLY => {
                let Reply::Delete { results } = decode(f)? else {
                    return Err("DELETE_REPLY decoded as another reply".into());
                };
                n.deleted += results.iter().filter(|r| r.is_ok()).count() as u64;
                p.deletes -= 1;
            }
            _ => {
                decode(f)?;
                return Err("unexpected reply".into());
            }
        }
    }
    Ok(())
}

/// Starts the clock once the warm-up is done; the rate once `w.messages`
/// more are counted.
fn measure(w: &Workload, n: &Counts, started: &mut Option<(Instant, Counts)>) -> Option<Rate> {
    let done = match w.goal {
        Goal::Acked => n.acked,
        Goal::Deleted => n.deleted,
    };
    match *started {
        None if done >= w.warmup => *started = Some((Instant::now(), *n)),
        Some((t0, base)) => {
            let base_done = match w.goal {
                Goal::Acked => base.acked,
                Goal::Deleted => base.deleted,
            };
            let counted = done - base_done;
            if counted >= w.messages {
                let secs = t0.elapsed().as_secs_f64();
                let receives = n.receive_replies - base.receive_replies;
                return Some(Rate {
                    msgs_per_s: counted as f64 / secs,
                    per_receive: if receives == 0 {
                        0.0
                    } else {
                        (n.received - base.received) as f64 / receives as f64
                    },
                    reads_per_batch: (n.reads - base.reads) as f64 * 64.0 / counted as f64,
                });
            }
        }
        None => {}
    }
    None
}

pub(crate) fn pipe(client: Client, role: Role) -> Pipe {
    Pipe {
        client,
        role,
        sends: 0,
        receives: 0,
        deletes: 0,
    }
}
