//! `client` and `shared`: threads sharing one blocking `Client`, tasks
//! sharing one `AsyncClient`, and the two floors under any client shared
//! on one core (park/unpark between two threads, `sched_yield` round
//! robin). Requests answered per second and client CPU per request.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use sluice_client::ClientConfig;
use sluice_protocol::{Reply, Request};

use crate::args::{Args, Io};
use crate::launch::target;
use crate::{Res, err};

/// CPU time this process has used so far, user and system, all threads.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes a `rusage` through the pointer, which points
    // to one (zeroed, so initialised either way); RUSAGE_SELF is valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: zeroed above and filled by a successful `getrusage`.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A client figure: requests answered per second, and the client's CPU
/// time per request (this process, every thread: what one core would
/// reach if the client had it to itself is 1 / that).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReqRate {
    pub(crate) per_s: f64,
    pub(crate) cpu_us: f64,
}

/// `--client-threads` threads share one blocking `Client`, each sending
/// PINGs one at a time (a tenth of them first, as warm-up); PINGs answered
/// per second. The threads inherit the driver's CPU.
pub(crate) fn bench_client_threads(args: &Args, io: Io, spin: Duration) -> Res<ReqRate> {
    let server = target(args, io)?;
    let config = ClientConfig::new(server.addr.to_string()).with_read_spin(spin);
    let client = sluice_client::Client::connect(config).map_err(|e| format!("Client: {e}"))?;
    let threads = args.client_threads;
    let per_thread = args.client_requests / threads as u64;
    let warm = per_thread / 10;
    let start = std::sync::Barrier::new(threads + 1);
    let timed = std::sync::Barrier::new(threads + 1);
    let elapsed = thread::scope(|s| -> Res<(Duration, Duration)> {
        let mut workers = Vec::with_capacity(threads);
        for t in 0..threads {
            let (c, start, timed) = (client.clone(), &start, &timed);
            workers.push(s.spawn(move || -> Res<()> {
                let ping = |i: u64| -> Res<()> {
                    let nonce = (t as u64) << 40 | i;
                    match c.call(&Request::Ping { nonce }) {
                        Ok(Reply::Pong { nonce: got }) if got == nonce => Ok(()),
                        other => Err(format!("PING {nonce} answered {other:?}")),
                    }
                };
                start.wait();
                let warmed = (0..warm).try_for_each(ping);
                timed.wait();
                warmed?;
                (warm..per_thread).try_for_each(ping)
            }));
        }
        start.wait();
        timed.wait();
        let (t0, cpu0) = (Instant::now(), cpu_time());
        for w in workers {
            w.join()
                .map_err(|_| "a client thread panicked".to_string())??;
        }
        Ok((t0.elapsed(), cpu_time() - cpu0))
    })?;
    let n = (per_thread - warm) as f64 * threads as f64;
    Ok(ReqRate {
        per_s: n / elapsed.0.as_secs_f64(),
        cpu_us: elapsed.1.as_secs_f64() * 1e6 / n,
    })
}

/// The floor under any blocking client shared by threads on one core: two
/// threads on the driver's CPU hand a token back and forth with
/// park/unpark, as a reply handed from the thread that read it to the
/// thread that waits for it is. Hand-offs per second (each is one wake-up
/// and one switch), no network at all.
pub(crate) fn bench_handoff_floor(args: &Args) -> Res<ReqRate> {
    use std::sync::atomic::AtomicU64;
    let n = args.client_requests;
    let turn = Arc::new(AtomicU64::new(0));
    let (t0, cpu0) = (Instant::now(), cpu_time());
    thread::scope(|s| {
        let main = thread::current();
        let other = {
            let turn = Arc::clone(&turn);
            s.spawn(move || {
                for i in 0..n {
                    // Wait for the odd turn, then pass the token back.
                    while turn.load(Ordering::Acquire) != 2 * i + 1 {
                        thread::park();
                    }
                    turn.store(2 * i + 2, Ordering::Release);
                    main.unpark();
                }
            })
        };
        for i in 0..n {
            turn.store(2 * i + 1, Ordering::Release);
            other.thread().unpark();
            while turn.load(Ordering::Acquire) != 2 * i + 2 {
                thread::park();
            }
        }
    });
    let hand_offs = 2.0 * n as f64;
    Ok(ReqRate {
        per_s: hand_offs / t0.elapsed().as_secs_f64(),
        cpu_us: (cpu_time() - cpu0).as_secs_f64() * 1e6 / hand_offs,
    })
}

/// The cheapest switch from one thread to another on the driver's CPU:
/// `--client-threads` threads pass a token round robin, each waiting for
/// its turn with `sched_yield` (no futex, no network). Every request of a
/// blocking client shared by that many threads on one core needs at least
/// one such switch, into the thread that waits for it. Hand-offs per second.
pub(crate) fn bench_yield_floor(args: &Args) -> Res<ReqRate> {
    use std::sync::atomic::AtomicU64;
    let threads = args.client_threads as u64;
    let n = args.client_requests;
    let turn = AtomicU64::new(0);
    let (t0, cpu0) = (Instant::now(), cpu_time());
    thread::scope(|s| {
        for me in 0..threads {
            let turn = &turn;
            s.spawn(move || {
                let mut i = me;
                while i < n {
                    while turn.load(Ordering::Acquire) != i {
                        thread::yield_now();
                    }
                    turn.store(i + 1, Ordering::Release);
                    i += threads;
                }
            });
        }
    });
    Ok(ReqRate {
        per_s: n as f64 / t0.elapsed().as_secs_f64(),
        cpu_us: (cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64,
    })
}

/// As many tasks as `--client-threads` share one `AsyncClient` on a
/// current-thread runtime, each sending PINGs one at a time; PINGs answered
/// per second.
pub(crate) fn bench_client_tasks(args: &Args, io: Io) -> Res<ReqRate> {
    let server = target(args, io)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err("tokio runtime"))?;
    let tasks = args.client_threads;
    let per_task = args.client_requests / tasks as u64;
    let warm = per_task / 10;
    rt.block_on(async {
        let client =
            sluice_client::AsyncClient::connect(ClientConfig::new(server.addr.to_string()))
                .await
                .map_err(|e| format!("AsyncClient: {e}"))?;
        let run = |from: u64, to: u64| {
            let handles: Vec<_> = (0..tasks)
                .map(|t| {
                    let c = client.clone();
                    tokio::spawn(async move {
                        for i in from..to {
                            let nonce = (t as u64) << 40 | i;
                            match c.call(&Request::Ping { nonce }).await {
                                Ok(Reply::Pong { nonce: got }) if got == nonce => {}
                                other => return Err(format!("PING {nonce} answered {other:?}")),
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            async move {
                for h in handles {
                    h.await.map_err(|e| format!("a client task: {e}"))??;
                }
                Ok::<(), String>(())
            }
        };
        run(0, warm).await?;
        let (t0, cpu0) = (Instant::now(), cpu_time());
        run(warm, per_task).await?;
        let n = (per_task - warm) as f64 * tasks as f64;
        Ok(ReqRate {
            per_s: n / t0.elapsed().as_secs_f64(),
            cpu_us: (cpu_time() - cpu0).as_secs_f64() * 1e6 / n,
        })
    })
}
