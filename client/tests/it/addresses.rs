//! Where a client connects: the address in either form wherever one is
//! taken, a clear error for one that is not an address, and for a port that
//! answers in HTTP (the broker's metrics endpoint) rather than sluice.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use sluice_client::sharded::ShardedClient;
use sluice_client::{Client, ClientConfig, Error};

use crate::util::{PATIENCE, TestServer};

#[test]
fn every_constructor_takes_the_url_form() {
    let server = TestServer::start();
    let url = format!("sluice://{}", server.addr);
    let c = Client::connect(ClientConfig::new(url.clone())).expect("new takes a URL");
    assert_eq!(c.config().addr(), server.addr.to_string());
    c.ping().unwrap();
    let c = Client::connect(ClientConfig::default().with_addr(format!("{url}/")))
        .expect("with_addr takes a URL");
    c.ping().unwrap();
    let other = TestServer::start();
    let both = ShardedClient::connect(ClientConfig::new(format!("{url}, sluice://{}", other.addr)))
        .expect("the sharded client takes URLs");
    let addrs: Vec<&str> = both.addrs().collect();
    assert_eq!(
        addrs,
        [server.addr.to_string(), other.addr.to_string()],
        "as HOST:PORT, so they hash as every other client's"
    );
    assert_eq!(both.ping().iter().filter(|(_, r)| r.is_ok()).count(), 2);
    #[cfg(feature = "async")]
    crate::util::runtime().block_on(async {
        let c = sluice_client::AsyncClient::connect(ClientConfig::new(url.clone()))
            .await
            .expect("the async client takes a URL");
        c.ping().await.unwrap();
    });
}

#[test]
fn what_is_not_an_address_is_an_invalid_argument_not_a_dns_error() {
    for bad in ["redis://127.0.0.1:6379", "127.0.0.1", "sluice://h:port"] {
        let err = Client::connect(ClientConfig::new(bad)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err}");
        let shown = err.to_string();
        assert!(
            shown.contains(bad) && shown.contains("expected HOST:PORT or sluice://HOST:PORT"),
            "{bad}: {shown}"
        );
        assert!(!err.is_retryable(), "{bad}: {shown}");
        let err = ShardedClient::connect(ClientConfig::new(bad)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err}");
    }
    // A list is for the sharded clients: the single one says so.
    let err = Client::connect(ClientConfig::new("127.0.0.1:1,127.0.0.1:2")).unwrap_err();
    assert!(err.to_string().contains("several brokers"), "{err}");
}

fn assert_http_error(err: &Error, addr: SocketAddr) {
    let shown = err.to_string();
    assert!(matches!(err, Error::Protocol(_)), "{shown}");
    assert!(!shown.contains("bytes"), "not a frame length: {shown}");
    assert!(
        shown.contains(&format!("{addr} answered in HTTP"))
            && shown.contains("this is an HTTP server (the metrics port?)")
            && shown.contains("(default 127.0.0.1:7171)"),
        "{shown}"
    );
    assert!(!err.is_retryable(), "{shown}");
}

#[test]
fn the_metrics_port_is_named_as_an_http_server() {
    let server = TestServer::start_on("127.0.0.1:0", &["--metrics-addr", "127.0.0.1:0"]);
    let metrics = server.metrics_addr().expect("metrics on");
    // The metrics endpoint answers a HELLO (no request head) when its read
    // deadline passes: a connect time-out beyond it lets the answer come.
    let config = ClientConfig::new(metrics.to_string()).with_connect_timeout(PATIENCE);
    let err = Client::connect(config.clone()).unwrap_err();
    assert_http_error(&err, metrics);
    #[cfg(feature = "async")]
    crate::util::runtime().block_on(async {
        let err = sluice_client::AsyncClient::connect(config)
            .await
            .unwrap_err();
        assert_http_error(&err, metrics);
    });
}

/// A one-connection-at-a-time HTTP server that answers whatever it reads
/// with a 400, as most HTTP servers answer a HELLO; it serves `answers`
/// connections.
fn http_400_server(answers: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(answers) {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 64];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    addr
}

#[test]
fn any_http_answer_to_hello_is_named() {
    let addr = http_400_server(2);
    let err = Client::connect(ClientConfig::new(addr.to_string())).unwrap_err();
    assert_http_error(&err, addr);
    assert!(
        err.to_string().contains("\"HTTP/1.1 400 Bad Request\""),
        "{err}"
    );
    #[cfg(feature = "async")]
    crate::util::runtime().block_on(async {
        let err = sluice_client::AsyncClient::connect(ClientConfig::new(addr.to_string()))
            .await
            .unwrap_err();
        assert_http_error(&err, addr);
    });
}

/// A server that accepts (the kernel does, into the backlog) and never
/// answers, as one stopped with SIGSTOP: the connect says it timed out and
/// after how long, not "Resource temporarily unavailable".
#[test]
fn a_server_that_never_answers_hello_times_out_saying_so() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let config = ClientConfig::new(addr.to_string())
        .with_connect_timeout(std::time::Duration::from_millis(200));
    let err = Client::connect(config.clone()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("timed out after 200ms") && !text.contains("temporarily unavailable"),
        "{text}"
    );
    #[cfg(feature = "async")]
    crate::util::runtime().block_on(async {
        let err = sluice_client::AsyncClient::connect(config)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("timed out after 200ms"), "{err}");
    });
    drop(silent);
}
