//! The summary after the passes: the medians of each figure against its
//! goal, for each backend, as a Markdown table (BENCHMARKS.md quotes it).

use crate::args::{Args, Io};
use crate::table::Table;

/// A figure of the summary: a median, or none when its `--io` was not run
/// (printed "-"; the precision of the format applies to a number).
#[derive(Clone, Copy)]
struct Fig(Option<f64>);

impl std::fmt::Display for Fig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(v) => std::fmt::Display::fmt(&v, f),
            None => f.write_str("-"),
        }
    }
}

fn goal_rate(got: Fig, goal: f64) -> String {
    let Fig(Some(got)) = got else {
        return "not run".into();
    };
    if got >= goal {
        format!("met ({:.2}x)", got / goal)
    } else {
        format!(
            "short by {:.0} ({:.0}%)",
            goal - got,
            100.0 * (goal - got) / goal
        )
    }
}

fn goal_delta(got: Fig, echo: Fig, allowed: f64) -> String {
    let (Fig(Some(got)), Fig(Some(echo))) = (got, echo) else {
        return "not run".into();
    };
    let d = got - echo;
    if d <= allowed {
        format!("met ({d:+.2} us vs echo)")
    } else {
        format!("short by {:.2} us ({d:+.2} us vs echo)", d - allowed)
    }
}

pub(crate) fn summary(args: &Args, t: &Table) {
    println!("\nmedian of {} pass(es):", args.passes);
    println!("| figure | io_uring | epoll | goal | io_uring vs goal | epoll vs goal |");
    println!("|---|---:|---:|---|---|---|");
    throughput(args, t);
    round_trips(args, t);
    through_clients(args, t);
    shared_clients(args, t);
    tls(args, t);
    shards(args, t);
    ratios(args, t);
}

/// The medians of a figure for io_uring and for epoll (`name` makes its
/// name from the backend's).
fn both(t: &Table, name: &dyn Fn(&str) -> String) -> (Fig, Fig) {
    (Fig(t.median(&name("uring"))), Fig(t.median(&name("epoll"))))
}

/// The pipelined throughput figures: `send` and `e2e`.
fn throughput(args: &Args, t: &Table) {
    if args.runs("send") {
        for &conns in &args.send_conns {
            let (u, e) = both(t, &|io| format!("send {io} {conns} conn"));
            println!(
                "| send alone, {conns} conn, {} x {} B batches, {} in flight | {u:.0} msg/s | \
             {e:.0} msg/s | >= 2,000,000 msg/s | {} | {} |",
                args.batch,
                args.size,
                args.window,
                goal_rate(u, 2e6),
                goal_rate(e, 2e6)
            );
        }
    }
    if args.runs("e2e") {
        let (u, e) = both(t, &|io| format!("e2e {io}"));
        println!(
            "| send + receive + delete, 1 conn | {u:.0} msg/s | {e:.0} msg/s | >= 1,000,000 msg/s \
         | {} | {} |",
            goal_rate(u, 1e6),
            goal_rate(e, 1e6)
        );
    }
}

/// One request at a time next to the echo: `rtt`.
fn round_trips(args: &Args, t: &Table) {
    if args.runs("rtt") {
        let echo50 = Fig(t.median("rtt std::net echo p50"));
        let echo99 = Fig(t.median("rtt std::net echo p99"));
        let echo999 = Fig(t.median("rtt std::net echo p99.9"));
        println!(
            "| std::net echo, {} B | p50 {echo50:.2} / p99 {echo99:.2} / p99.9 {echo999:.2} us | | | | |",
            args.size
        );
        for what in ["PING", "SEND 1"] {
            let (u50, e50) = both(t, &|io| format!("rtt {io} {what} p50"));
            let (u99, e99) = both(t, &|io| format!("rtt {io} {what} p99"));
            let (u999, e999) = both(t, &|io| format!("rtt {io} {what} p99.9"));
            println!(
                "| {what} one at a time, p50 | {u50:.2} us | {e50:.2} us | echo + 10 us | {} | {} |",
                goal_delta(u50, echo50, 10.0),
                goal_delta(e50, echo50, 10.0)
            );
            println!(
                "| {what} one at a time, p99 | {u99:.2} us | {e99:.2} us | echo + 25 us | {} | {} |",
                goal_delta(u99, echo99, 25.0),
                goal_delta(e99, echo99, 25.0)
            );
            println!(
                "| {what} one at a time, p99.9 | {u999:.2} us | {e999:.2} us | (reported) | | |"
            );
        }
    }
}

/// The native clients' PINGs next to the raw PING: `client`.
fn through_clients(args: &Args, t: &Table) {
    if args.runs("client") {
        for (what, name) in [
            ("Client", "Client PING"),
            (
                &*format!("Client, read spin {} us", args.client_spin_us),
                "Client+spin PING",
            ),
            ("AsyncClient", "AsyncClient PING"),
        ] {
            let (r50, re50) = both(t, &|io| format!("rtt {io} PING p50"));
            let (r99, re99) = both(t, &|io| format!("rtt {io} PING p99"));
            let (u50, e50) = both(t, &|io| format!("rtt {io} {name} p50"));
            let (u99, e99) = both(t, &|io| format!("rtt {io} {name} p99"));
            let (u999, e999) = both(t, &|io| format!("rtt {io} {name} p99.9"));
            println!(
                "| PING through {what}, p50 | {u50:.2} us | {e50:.2} us | raw PING + 3 us | {} | {} |",
                goal_delta(u50, r50, 3.0).replace("echo", "raw"),
                goal_delta(e50, re50, 3.0).replace("echo", "raw")
            );
            println!(
                "| PING through {what}, p99 | {u99:.2} us | {e99:.2} us | raw PING + 10 us | {} | {} |",
                goal_delta(u99, r99, 10.0).replace("echo", "raw"),
                goal_delta(e99, re99, 10.0).replace("echo", "raw")
            );
            println!(
                "| PING through {what}, p99.9 | {u999:.2} us | {e999:.2} us | (reported) | | |"
            );
        }
    }
}

/// Clients shared by threads and tasks, and the floors: `client`, `shared`.
fn shared_clients(args: &Args, t: &Table) {
    if args.runs_shared() {
        let (u, e) = both(t, &|io| format!("client {io} threads"));
        let (uc, ec) = both(t, &|io| format!("client {io} threads cpu"));
        println!(
            "| {} threads sharing one Client, PING | {u:.0} req/s ({uc:.2} us CPU/req) | {e:.0} \
         req/s ({ec:.2} us CPU/req) | >= 500,000 req/s | {} | {} |",
            args.client_threads,
            goal_rate(u, 5e5),
            goal_rate(e, 5e5)
        );
        let (u, e) = both(t, &|io| format!("client {io} threads+spin"));
        let (uc, ec) = both(t, &|io| format!("client {io} threads+spin cpu"));
        println!(
            "| the same, read spin {} us | {u:.0} req/s ({uc:.2} us CPU/req) | {e:.0} req/s ({ec:.2} \
         us CPU/req) | >= 500,000 req/s | {} | {} |",
            args.client_spin_us,
            goal_rate(u, 5e5),
            goal_rate(e, 5e5)
        );
        let floor = t.median("thread hand-off floor").unwrap_or(f64::NAN);
        let floor_cpu = t.median("thread hand-off floor cpu").unwrap_or(f64::NAN);
        println!(
            "| reference: two threads on the client's CPU handing a token back and forth (park/unpark) \
         | {floor:.0} hand-offs/s ({floor_cpu:.2} us CPU each) | | | | |"
        );
        let floor = t.median("thread yield floor").unwrap_or(f64::NAN);
        let floor_cpu = t.median("thread yield floor cpu").unwrap_or(f64::NAN);
        println!(
            "| reference: {} threads on the client's CPU passing a token round robin (sched_yield) \
         | {floor:.0} hand-offs/s ({floor_cpu:.2} us CPU each) | | | | |",
            args.client_threads
        );
        let (u, e) = both(t, &|io| format!("client {io} tasks"));
        let (uc, ec) = both(t, &|io| format!("client {io} tasks cpu"));
        println!(
            "| {} tasks sharing one AsyncClient, PING | {u:.0} req/s ({uc:.2} us CPU/req) | {e:.0} \
         req/s ({ec:.2} us CPU/req) | reported | | |",
            args.client_threads
        );
    }
}

/// TLS next to plain text: its own table.
fn tls(args: &Args, t: &Table) {
    if args.runs("tls") {
        println!(
            "\nTLS next to plain text (native blocking client; median of {} pass(es)):",
            args.passes
        );
        println!("| figure | io | plain | TLS | TLS / plain |");
        println!("|---|---|---:|---:|---:|");
        for &io in &args.ios {
            let io = io.flag();
            let pair = |name: &dyn Fn(&str) -> String| {
                (
                    t.median(&name("plain")).unwrap_or(f64::NAN),
                    t.median(&name("TLS")).unwrap_or(f64::NAN),
                )
            };
            let (p, s) = pair(&|k| format!("client e2e {io} {k}"));
            println!(
                "| send + receive + delete, msg/s | {io} | {p:.0} | {s:.0} | {:.2} |",
                s / p
            );
            for q in ["p50", "p99"] {
                let (p, s) = pair(&|k| format!("PING {io} {k} {q}"));
                println!("| PING {q}, us | {io} | {p:.1} | {s:.1} | {:.2} |", s / p);
            }
        }
    }
}

/// The hot queue over 1 and 2 shards.
fn shards(args: &Args, t: &Table) {
    if args.runs("shards") {
        for shards in [1, 2] {
            let (u, e) = both(t, &|io| format!("hot queue {io} {shards} shard"));
            println!(
                "| one hot queue, {shards} shard(s), {}P/{}C conns | {u:.0} msg/s | {e:.0} msg/s \
             | reported | | |",
                args.producers, args.consumers
            );
        }
    }
}

/// epoll against io_uring, where both ran.
fn ratios(args: &Args, t: &Table) {
    if args.ios.contains(&Io::Uring) && args.ios.contains(&Io::Epoll) {
        println!("\nepoll / io_uring (goal: within 20%):");
        for (name, _) in &t.rows {
            if let Some(rest) = name
                .strip_prefix("send uring ")
                .map(|r| format!("send epoll {r}"))
            {
                report_ratio(t, name, &rest);
            }
            if name == "e2e uring" {
                report_ratio(t, name, "e2e epoll");
            }
        }
    }
}

fn report_ratio(t: &Table, uring: &str, epoll: &str) {
    if let (Some(u), Some(e)) = (t.median(uring), t.median(epoll)) {
        println!("  {epoll:<28} {:.2}x of {uring}", e / u);
    }
}
