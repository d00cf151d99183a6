use std::path::Path;

use clap::{CommandFactory, Parser};

use super::{Args, Cli, Io};

const EXE: &str = "/b/server_bench";

fn parse(line: &str) -> Result<Args, String> {
    let cli = Cli::try_parse_from(line.split_whitespace()).map_err(|e| e.to_string())?;
    cli.resolve(Path::new(EXE))
}

#[test]
fn the_command_line_is_well_formed() {
    Cli::command().debug_assert();
}

/// The command lines BENCHMARKS.md, benches/HISTORY.md and this binary's own
/// docs quote, with their shell variables written out: every one still
/// parses.
#[test]
fn quoted_commands_parse() {
    let quoted = [
        "server_bench",
        "server_bench --quick",
        "server_bench --only send,e2e,rtt,client,shared,shards,tls",
        "server_bench --only client",
        "server_bench --only shared",
        "server_bench --only e2e,shards",
        "server_bench --only rtt,client",
        "server_bench --only rtt,client --passes 3",
        "server_bench --only send,e2e,rtt",
        "server_bench --only send,e2e,rtt,shards",
        "server_bench --only tls",
        "server_bench --server /b/sluice-server --only rtt,client",
        "server_bench --server /b/sluice-server --only rtt,client --passes 3",
        "server_bench --server /b/sluice-server --only tls",
        "server_bench --server /srv/sluice-server --passes 1 --only e2e,shards",
        "server_bench --server sluice-server --only rtt,client",
        "server_bench --server target/release/sluice-server --only shared --io uring --passes 1 \
         --client-requests 600000",
        "server_bench --server ./sluice-server-a5dae22 --passes 1 --only e2e,shards",
        "server_bench --server ./sluice-server-a5dae22 --passes 1 --only send,e2e,rtt,shards",
        "server_bench --connect 127.0.0.1:7000 --only client",
        "server_bench --connect 127.0.0.1:7000 --only send --send-conns 1",
        "server_bench --connect 127.0.0.1:7000 --io epoll --passes 1 --only e2e --e2e-messages \
         1000000",
        "server_bench --connect 127.0.0.1:7000 --passes 1 --only send --send-conns 1 \
         --send-messages 2000000",
    ];
    for line in quoted {
        if let Err(e) = parse(line) {
            panic!("`{line}` no longer parses: {e}");
        }
    }
}

#[test]
fn defaults_are_those_of_before() {
    let a = parse("server_bench").unwrap();
    assert_eq!(a.server, Path::new("/b/sluice-server"));
    assert_eq!(a.passes, 3);
    assert_eq!(a.batch, 64);
    assert_eq!(a.size, 100);
    assert_eq!(a.window, 16);
    assert_eq!(a.receives, 4);
    assert_eq!(a.backlog, 64 * 64);
    assert_eq!(a.send_messages, 3_000_000);
    assert_eq!(a.e2e_messages, 2_000_000);
    assert_eq!(a.send_conns, [1, 2]);
    assert_eq!(a.rounds, 50_000);
    assert_eq!(a.warmup_rounds, 5_000);
    assert_eq!(a.client_threads, 16);
    assert_eq!(a.client_requests, 1_000_000);
    assert_eq!(a.client_spin_us, 50);
    assert_eq!(a.producers, 2);
    assert_eq!(a.consumers, 2);
    assert_eq!(a.server_cpu, 0);
    assert_eq!(a.client_cpu, 1);
    assert_eq!(a.only, ["send", "e2e", "rtt", "client", "shards"]);
    assert_eq!(a.ios, [Io::Uring, Io::Epoll]);
    assert_eq!(a.connect, None);
    assert!(a.runs("client") && a.runs_shared() && !a.runs("tls"));
}

#[test]
fn quick_lowers_the_counts_and_explicit_counts_win() {
    let a = parse("server_bench --quick").unwrap();
    assert_eq!(
        (
            a.passes,
            a.send_messages,
            a.e2e_messages,
            a.rounds,
            a.warmup_rounds,
            a.client_requests
        ),
        (1, 200_000, 100_000, 2_000, 200, 100_000)
    );
    let a = parse("server_bench --quick --passes 2 --rounds 10").unwrap();
    assert_eq!((a.passes, a.rounds, a.warmup_rounds), (2, 10, 200));
}

#[test]
fn counts_take_digit_separators_and_the_last_flag_wins() {
    let a = parse("server_bench --send-messages 1_500_000 --send-conns 1,4 --batch 8 --batch 32")
        .unwrap();
    assert_eq!(a.send_messages, 1_500_000);
    assert_eq!(a.send_conns, [1, 4]);
    assert_eq!(a.batch, 32);
    let a = parse("server_bench --only tls --only shared --io epoll").unwrap();
    assert_eq!(a.only, ["shared"]);
    assert_eq!(a.ios, [Io::Epoll]);
}

#[test]
fn connect_runs_one_pass_labelled_by_the_first_io() {
    let a = parse("server_bench --connect 127.0.0.1:7000 --only e2e --passes 3 --io epoll,uring")
        .unwrap();
    assert_eq!(a.connect, Some("127.0.0.1:7000".parse().unwrap()));
    assert_eq!((a.passes, a.ios.as_slice()), (1, &[Io::Epoll][..]));
    // Whether a server binary is there does not matter then.
    a.check_server().unwrap();
}

#[test]
fn bad_command_lines_are_refused() {
    for line in [
        "server_bench --batch 0",
        "server_bench --batch 1025",
        "server_bench --passes 0",
        "server_bench --send-conns 1,0",
        "server_bench --client-threads 8 --client-requests 7",
        "server_bench --only everything",
        "server_bench --io kqueue",
        "server_bench --size -1",
        "server_bench --window",
        "server_bench --frobnicate 1",
        "server_bench --connect localhost",
        "server_bench --connect 127.0.0.1:7000 --only shards",
        "server_bench --connect 127.0.0.1:7000 --only e2e,tls",
    ] {
        assert!(parse(line).is_err(), "`{line}` was accepted");
    }
}

#[test]
fn a_missing_server_binary_is_named() {
    let a = parse("server_bench --server /nonexistent/sluice-server").unwrap();
    let why = a.check_server().unwrap_err();
    assert!(why.contains("/nonexistent/sluice-server"), "{why}");
}
