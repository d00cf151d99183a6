//! Authentication, on both backends: with a token configured every
//! connection must present it (loopback too); a non-loopback listen address
//! without a token is refused at start unless `--insecure`.

use std::path::PathBuf;

use sluice_broker::server::config::{Config, Host, IoChoice, RawArgs};
use sluice_broker::server::{Server, StartError};
use sluice_broker::testing;
use sluice_protocol::ErrorCode;

use crate::both_backends;
use crate::server_util::{Client, config, start};

both_backends!(
    a_token_is_required_on_every_connection,
    non_loopback_without_a_token_is_refused
);

/// A token file unique to this test run, removed on drop.
struct TokenFile(PathBuf);

impl TokenFile {
    fn new(tag: &str, token: &str) -> TokenFile {
        let path =
            std::env::temp_dir().join(format!("sluice-test-token-{}-{tag}", std::process::id()));
        std::fs::write(&path, format!("{token}\n")).unwrap();
        TokenFile(path)
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn a_token_is_required_on_every_connection(io: IoChoice) {
    let token = TokenFile::new(&format!("{io}"), "s3cret-token");
    let path = token.0.to_string_lossy().into_owned();
    let Some(server) = testing::TestServer::builder()
        .io(io)
        .args(&["--token-file", &path])
        .start_or_skip()
    else {
        return;
    };
    let addr = server.addr();
    for bad in [&b""[..], b"wrong", b"s3cret-toke", b"s3cret-token\n"] {
        let mut c = Client::connect(addr);
        let e = c.hello(bad).expect_err("refused");
        assert_eq!(e.code, ErrorCode::Unauthorized, "{}", e.message);
        assert!(c.read_until_closed().is_empty(), "closed after the ERROR");
    }
    let mut c = Client::connect(addr);
    c.hello(b"s3cret-token").expect("the right token");
    c.ping();
    let stats = c.server_stats();
    let expected = if io == IoChoice::Uring {
        "io_uring"
    } else {
        "epoll"
    };
    assert_eq!(stats.io_backend, expected);
    assert!(stats.counter("connections_closed_bad_input").unwrap_or(0) >= 4);
    drop(server);
}

fn non_loopback_without_a_token_is_refused(io: IoChoice) {
    let io_flag = io.to_string();
    let host = Host {
        cores: 2,
        memory: None,
    };
    let args = |extra: &[&str]| {
        let mut argv = vec!["sluice-server", "--listen", "0.0.0.0:0", "--io", &io_flag];
        argv.extend_from_slice(extra);
        RawArgs::try_parse_from_env(argv, |_| None).unwrap()
    };
    let err = Config::from_args_on(args(&[]), &host).expect_err("refused");
    assert!(err.to_string().contains("without an auth token"), "{err}");
    assert!(Config::from_args_on(args(&["--insecure"]), &host).is_ok());
    // A configuration built by hand is checked again at start, before
    // anything is bound.
    let mut cfg = config(io, &[]);
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    assert!(matches!(
        Server::start(cfg),
        Err(StartError::InsecureListen(_))
    ));
    // The loopback server of the same configuration starts.
    if let Some(server) = start(io, &[]) {
        server.client().ping();
    }
}

both_backends!(connections_that_never_say_hello_cannot_keep_a_client_out);

/// Connections that connect and say nothing take at most
/// `--max-connections-before-hello` of `--max-connections`; one more closes
/// the one that waited longest, so a client that says HELLO gets in even
/// while they keep coming.
fn connections_that_never_say_hello_cannot_keep_a_client_out(io: IoChoice) {
    let Some(server) = start(
        io,
        &[
            "--max-connections",
            "8",
            "--max-connections-before-hello",
            "3",
        ],
    ) else {
        return;
    };
    let addr = server.handle().local_addr();
    let mut watcher = Client::connect(addr);
    watcher.hello(b"").expect("HELLO");
    // Twice the connection limit of silent connections, one after another
    // (a round trip on another connection after each lets the server take
    // it in, and finish closing the one it made room with).
    let mut silent: Vec<Client> = (0..16)
        .map(|_| {
            let s = Client::connect(addr);
            watcher.ping();
            s
        })
        .collect();
    let mut c = Client::connect(addr);
    c.hello(b"").expect("a client that says HELLO gets in");
    c.ping();
    // The oldest silent ones were closed to make room, without a reply.
    for (i, s) in silent.iter_mut().take(14).enumerate() {
        assert!(s.read_until_closed().is_empty(), "silent connection {i}");
    }
    let stats = watcher.server_stats();
    assert!(
        stats.counter("connections_before_hello_evicted") >= Some(14),
        "{stats:?}"
    );
    assert!(
        stats.counter("connections_before_hello") <= Some(3),
        "{stats:?}"
    );
    // The newest still wait, and may still say HELLO.
    let last = silent.last_mut().unwrap();
    last.hello(b"")
        .expect("a waiting connection that says HELLO is served");
    last.ping();
    drop(server);
}

#[test]
fn a_failed_hello_is_logged_with_the_peer_and_a_short_token_is_warned_about() {
    use crate::server_process::{Process, start_args};
    let token = TokenFile::new("short", "abc");
    let path = token.0.to_string_lossy().into_owned();
    let args = start_args(IoChoice::Epoll, &["--shards", "1", "--token-file", &path]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut p = Process::spawn(r#"exec "$@""#, &args);
    p.wait_for("the auth token (--token-file) is only 3 bytes");
    let addr = p.listen_addr();
    let mut c = Client::connect(addr);
    let e = c.hello(b"guess").expect_err("refused");
    assert_eq!(e.code, ErrorCode::Unauthorized);
    let line = p.wait_for("HELLO refused: wrong or missing auth token");
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains("peer=127.0.0.1:"), "{line}");
    p.stop();
}
