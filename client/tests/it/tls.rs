//! TLS between the clients and the server, on both io backends: the
//! handshake and every operation, a client that does not trust the
//! server's certificate, client certificates (`--tls-client-ca`), plain
//! text against a TLS port and TLS against a plain port, garbage. The
//! certificates are made at run time (`TestPki`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use sluice_broker::server::config::IoChoice;
use sluice_broker::testing::{SelfSigned, TestPki, TestServer};
use sluice_client::tls::TlsConfig;
use sluice_client::{
    AsyncClient, Client, ClientConfig, Error, QueueOptions, ReceiveOptions, RedrivePolicy,
    SendEntry,
};

use crate::util::runtime;

/// The server on `io` with `args`, or `None` (with a SKIPPED line, a
/// failure on CI) where io_uring is missing.
fn server(io: IoChoice, args: &[String]) -> Option<TestServer> {
    TestServer::builder().io(io).args(args).start_or_skip()
}

fn config(server: &TestServer) -> ClientConfig {
    ClientConfig::new(server.addr().to_string())
        .with_connect_timeout(Duration::from_secs(10))
        .with_request_timeout(Duration::from_secs(30))
        .with_reconnect_delays(Duration::from_millis(10), Duration::from_millis(100))
}

fn trusting(pki: &TestPki) -> TlsConfig {
    TlsConfig::with_ca_file(pki.ca_pem()).unwrap()
}

fn counter(client: &Client, name: &str) -> u64 {
    let stats = client.server_stats().unwrap();
    stats
        .counters
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .value
}

/// Every operation, written once for both clients (`$($aw)*` is `.await`
/// for the async one).
macro_rules! every_operation {
    ($c:expr, $($aw:tt)*) => {{
        let c = $c;
        c.ping() $($aw)* .unwrap();
        assert!(c.create_queue("t.dlq", &QueueOptions::new()) $($aw)* .unwrap());
        let policy = RedrivePolicy::new("t.dlq", 1);
        let redrive = QueueOptions::new().redrive(policy.clone());
        assert!(c.create_queue("t", &QueueOptions::new()) $($aw)* .unwrap());
        c.set_queue("t", &redrive) $($aw)* .unwrap();
        assert_eq!(c.queue_info("t") $($aw)* .unwrap().attributes.redrive, Some(policy));
        let mut names = c.list_queues("t") $($aw)* .unwrap();
        names.sort();
        assert_eq!(names, ["t", "t.dlq"]);
        // A body larger than a TLS record (16 KiB), and a batch.
        let big = vec![7u8; 100 * 1024];
        c.send("t", big.clone()) $($aw)* .unwrap();
        let batch: Vec<SendEntry> = (0..64).map(|i| SendEntry::new(format!("m{i}"))).collect();
        assert!(c.send_batch("t", &batch) $($aw)* .unwrap().iter().all(Result::is_ok));
        let got = c.receive("t", ReceiveOptions::new(100)) $($aw)* .unwrap();
        assert_eq!(got.len(), 65);
        assert!(got.iter().any(|m| m.body[..] == big[..]));
        c.change_visibility("t", got[0].receipt, Duration::from_secs(60)) $($aw)* .unwrap();
        let changes: Vec<_> = got[1..3].iter().map(|m| (m.receipt, Duration::from_secs(60))).collect();
        assert!(c.change_visibility_batch("t", &changes) $($aw)* .unwrap().iter().all(Result::is_ok));
        c.delete("t", got[0].receipt) $($aw)* .unwrap();
        let receipts: Vec<_> = got[1..].iter().map(|m| m.receipt).collect();
        assert!(c.delete_batch("t", &receipts) $($aw)* .unwrap().iter().all(Result::is_ok));
        // Dead-letter one message, peek it, redrive it back, purge.
        c.send("t", "poison") $($aw)* .unwrap();
        let got = c.receive("t", ReceiveOptions::new(1).visibility_timeout(Duration::ZERO)) $($aw)* .unwrap();
        assert_eq!(got.len(), 1);
        let none = c.receive("t", ReceiveOptions::new(1).wait(Duration::from_millis(100))) $($aw)* .unwrap();
        assert!(none.is_empty());
        assert_eq!(c.peek("t.dlq", 10) $($aw)* .unwrap().len(), 1);
        assert_eq!(c.redrive("t.dlq", 10) $($aw)* .unwrap().moved, 1);
        assert_eq!(c.purge_queue("t") $($aw)* .unwrap(), 1);
        assert!(c.server_stats() $($aw)* .unwrap().server_version.starts_with("sluice"));
        c.set_queue("t", &QueueOptions::new().clear_redrive()) $($aw)* .unwrap();
        c.delete_queue("t.dlq") $($aw)* .unwrap();
        c.delete_queue("t") $($aw)* .unwrap();
    }};
}

fn both_backends(mut f: impl FnMut(IoChoice)) {
    for io in [IoChoice::Uring, IoChoice::Epoll] {
        f(io);
    }
}

#[test]
fn every_operation_over_tls_with_both_clients() {
    let pki = TestPki::generate();
    both_backends(|io| {
        let Some(server) = server(io, &pki.server_args()) else {
            return;
        };
        let blocking = Client::connect(config(&server).with_tls(trusting(&pki))).unwrap();
        every_operation!(&blocking,);
        runtime().block_on(async {
            let c = AsyncClient::connect(config(&server).with_tls(trusting(&pki)))
                .await
                .unwrap();
            every_operation!(&c, .await);
        });
        // By name too: the certificate carries `localhost`.
        let named = config(&server)
            .with_addr(format!("localhost:{}", server.addr().port()))
            .with_tls(trusting(&pki));
        Client::connect(named).unwrap().ping().unwrap();
    });
}

#[test]
fn a_client_that_does_not_trust_the_certificate_is_refused() {
    let pki = TestPki::generate();
    both_backends(|io| {
        let Some(server) = server(io, &pki.server_args()) else {
            return;
        };
        // A refused certificate does not become acceptable by itself: not
        // retryable, and the message says what to do.
        let stranger = TlsConfig::with_ca_file(pki.other_ca_pem()).unwrap();
        let err = Client::connect(config(&server).with_tls(stranger.clone())).unwrap_err();
        assert!(matches!(err, Error::Tls { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("not signed by a CA this client trusts"),
            "{err}"
        );
        assert!(!err.is_retryable(), "{err}");
        // The name must match too.
        let wrong_name = trusting(&pki).server_name("elsewhere.example");
        let err = Client::connect(config(&server).with_tls(wrong_name)).unwrap_err();
        assert!(matches!(err, Error::Tls { .. }), "{err}");
        assert!(err.to_string().contains("elsewhere.example"), "{err}");
        runtime().block_on(async {
            let err = AsyncClient::connect(config(&server).with_tls(stranger))
                .await
                .unwrap_err();
            assert!(matches!(err, Error::Tls { .. }), "{err}");
            assert!(!err.is_retryable(), "{err}");
        });
        // The server goes on.
        Client::connect(config(&server).with_tls(trusting(&pki)))
            .unwrap()
            .ping()
            .unwrap();
    });
}

#[test]
fn a_self_signed_ca_certificate_is_accepted_only_by_a_client_trusting_exactly_it() {
    let pki = TestPki::generate();
    // What `openssl req -x509` makes by default: CA:TRUE.
    let (cert, key) = pki.self_signed("usual", SelfSigned::Ca);
    let (other_ca, _) = pki.self_signed("another", SelfSigned::Ca);
    let (expired, expired_key) = pki.self_signed("expired", SelfSigned::ExpiredCa);
    let args = |cert: &std::path::Path, key: &std::path::Path| {
        vec![
            "--tls-cert".to_owned(),
            cert.display().to_string(),
            "--tls-key".to_owned(),
            key.display().to_string(),
        ]
    };
    both_backends(|io| {
        let Some(server) = server(io, &args(&cert, &key)) else {
            return;
        };
        // Given exactly the server's certificate: accepted, both clients.
        let exact = TlsConfig::with_ca_file(&cert).unwrap();
        Client::connect(config(&server).with_tls(exact.clone()))
            .unwrap()
            .ping()
            .unwrap();
        runtime().block_on(async {
            let c = AsyncClient::connect(config(&server).with_tls(exact.clone()))
                .await
                .unwrap();
            c.ping().await.unwrap();
        });
        // Its name is still checked.
        let err = Client::connect(config(&server).with_tls(exact.server_name("elsewhere.example")))
            .unwrap_err();
        assert!(matches!(err, Error::Tls { .. }), "{err}");
        // Any other trust: the error names the problem and the fix.
        for ca in [other_ca.as_path(), pki.ca_pem().as_path()] {
            let tls = TlsConfig::with_ca_file(ca).unwrap();
            let err = Client::connect(config(&server).with_tls(tls)).unwrap_err();
            assert!(
                matches!(&err, Error::Tls { message, .. }
                    if message.contains("CA:TRUE")
                        && message.contains("-addext basicConstraints=critical,CA:FALSE")),
                "{err}"
            );
            assert!(!err.is_retryable(), "{err}");
        }
        // An expired one stays refused, even trusted exactly.
        let Some(old) = self::server(io, &args(&expired, &expired_key)) else {
            return;
        };
        let tls = TlsConfig::with_ca_file(&expired).unwrap();
        let err = Client::connect(config(&old).with_tls(tls)).unwrap_err();
        assert!(matches!(err, Error::Tls { .. }), "{err}");
        assert!(err.to_string().contains("expired"), "{err}");
    });
}

#[test]
fn a_proper_self_signed_certificate_is_its_own_ca() {
    let pki = TestPki::generate();
    let (cert, key) = pki.self_signed("proper", SelfSigned::Leaf);
    let args = [
        "--tls-cert".to_owned(),
        cert.display().to_string(),
        "--tls-key".to_owned(),
        key.display().to_string(),
    ];
    both_backends(|io| {
        let Some(server) = server(io, &args) else {
            return;
        };
        let tls = TlsConfig::with_ca_file(&cert).unwrap();
        Client::connect(config(&server).with_tls(tls))
            .unwrap()
            .ping()
            .unwrap();
    });
}

#[test]
fn client_certificates_are_required_with_a_client_ca() {
    let pki = TestPki::generate();
    let (cert, key) = pki.client_cert_and_key();
    let (stranger_cert, stranger_key) = pki.stranger_cert_and_key();
    both_backends(|io| {
        let Some(server) = server(io, &pki.server_args_with_client_ca()) else {
            return;
        };
        let with_cert = TlsConfig::with_client_cert(pki.ca_pem(), &cert, &key).unwrap();
        let c = Client::connect(config(&server).with_tls(with_cert.clone())).unwrap();
        c.create_queue("mtls", &QueueOptions::new()).unwrap();
        c.send("mtls", "x").unwrap();
        runtime().block_on(async {
            let c = AsyncClient::connect(config(&server).with_tls(with_cert))
                .await
                .unwrap();
            assert_eq!(
                c.receive("mtls", ReceiveOptions::new(1))
                    .await
                    .unwrap()
                    .len(),
                1
            );
        });
        // No certificate, or one from another CA: refused at connect.
        for tls in [
            trusting(&pki),
            TlsConfig::with_client_cert(pki.ca_pem(), &stranger_cert, &stranger_key).unwrap(),
        ] {
            let err = Client::connect(config(&server).with_tls(tls)).unwrap_err();
            assert!(matches!(err, Error::Tls { .. }), "{err}");
            assert!(err.to_string().contains("--tls-client-cert"), "{err}");
            assert!(!err.is_retryable(), "{err}");
        }
        assert_eq!(counter(&c, "connections_refused_tls_failed"), 2);
        c.ping().unwrap();
    });
}

#[test]
fn plain_text_on_a_tls_port_and_tls_on_a_plain_port_are_closed_and_disturb_no_one() {
    let pki = TestPki::generate();
    both_backends(|io| {
        let Some(tls_server) = server(io, &pki.server_args()) else {
            return;
        };
        let Some(plain_server) = server(io, &[]) else {
            return;
        };
        let tls_client = Client::connect(config(&tls_server).with_tls(trusting(&pki))).unwrap();
        let plain_client = Client::connect(config(&plain_server)).unwrap();
        tls_client.create_queue("q", &QueueOptions::new()).unwrap();
        plain_client
            .create_queue("q", &QueueOptions::new())
            .unwrap();

        // A plain client on the TLS port: the server says why, in plain text.
        let err = Client::connect(config(&tls_server)).unwrap_err();
        assert!(
            matches!(&err, Error::Unauthorized(m) if m.contains("TLS")),
            "{err}"
        );
        // A TLS client on the plain port: told so, not retried.
        let err = Client::connect(config(&plain_server).with_tls(trusting(&pki))).unwrap_err();
        assert!(
            matches!(&err, Error::Tls { message, .. } if message.contains("is it a plain port?")),
            "{err}"
        );
        assert!(!err.is_retryable(), "{err}");
        runtime().block_on(async {
            let err = AsyncClient::connect(config(&plain_server).with_tls(trusting(&pki)))
                .await
                .unwrap_err();
            assert!(
                matches!(&err, Error::Tls { message, .. } if message.contains("is it a plain port?")),
                "{err}"
            );
        });

        // The connections already open go on, on both.
        tls_client.send("q", "still here").unwrap();
        plain_client.send("q", "still here").unwrap();
        assert_eq!(
            counter(&tls_client, "connections_refused_plain_on_tls_port"),
            1
        );
        assert_eq!(
            counter(&plain_client, "connections_refused_tls_on_plain_port"),
            2
        );
        assert_eq!(tls_client.queue_info("q").unwrap().stats.visible, 1);
    });
}

#[test]
fn the_connection_limit_is_reported_inside_tls() {
    let pki = TestPki::generate();
    // One shard: the driver refuses the second connection; two shards: a
    // connection on the other shard is refused by the shared count. Either
    // way the refusal comes after the handshake, inside TLS.
    for shards in ["1", "2"] {
        both_backends(|io| {
            let mut args = pki.server_args();
            args.extend(["--max-connections", "1", "--shards", shards].map(String::from));
            let Some(server) = server(io, &args) else {
                return;
            };
            let held = Client::connect(config(&server).with_tls(trusting(&pki))).unwrap();
            held.ping().unwrap();
            for _ in 0..4 {
                let err = Client::connect(config(&server).with_tls(trusting(&pki))).unwrap_err();
                assert!(
                    matches!(&err, Error::TooManyConnections(m) if m.contains("maximum of 1")),
                    "{shards} shard(s), {io:?}: {err}"
                );
                assert!(err.is_retryable(), "{err}");
            }
            runtime().block_on(async {
                let err = AsyncClient::connect(config(&server).with_tls(trusting(&pki)))
                    .await
                    .unwrap_err();
                assert!(matches!(err, Error::TooManyConnections(_)), "{io:?}: {err}");
            });
            held.ping().unwrap();
            assert!(counter(&held, "connections_refused") >= 5);
        });
    }
}

#[test]
fn garbage_on_a_tls_port_closes_only_that_connection() {
    let pki = TestPki::generate();
    both_backends(|io| {
        let Some(server) = server(io, &pki.server_args()) else {
            return;
        };
        let c = Client::connect(config(&server).with_tls(trusting(&pki))).unwrap();
        // A fixed pseudo-random sequence (xorshift), so a failure replays.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..100 {
            let len = 1 + (next() % 600) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Half of them look like a TLS record at first.
            if i % 2 == 0 {
                bytes.splice(0..0, [0x16, 0x03, 0x03, (len >> 8) as u8, len as u8]);
            }
            let mut s = TcpStream::connect(server.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            // The server answers (an alert or an error frame) and closes.
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        c.send_batch("g", &[SendEntry::new("x")]).unwrap_err();
        c.create_queue("g", &QueueOptions::new()).unwrap();
        c.send("g", "after the garbage").unwrap();
        assert_eq!(c.queue_info("g").unwrap().stats.visible, 1);
    });
}
