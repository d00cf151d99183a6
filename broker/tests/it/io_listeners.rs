//! A driver with several listeners: each connection's accept names the
//! listener it came through, each listener has its own address, and
//! stopping accepting closes them all. Each test body runs once per backend,
//! on the test thread (a driver is polled where it was opened).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_broker::io::{
    BackendChoice, Driver, DriverConfig, Event, LISTENERS_MAX, ListenerConfig, ListenerId,
    OpenError, open,
};

const DEADLINE: Duration = Duration::from_secs(30);

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn three_listeners() -> DriverConfig {
    let more = |reply: &[u8]| ListenerConfig {
        addr: localhost(),
        shed_reply: Arc::from(reply),
    };
    DriverConfig {
        recv_buffer_count: 8,
        ring_entries: 64,
        more_listeners: vec![more(b"one"), more(b"two")],
        ..DriverConfig::new(localhost())
    }
}

/// The driver, or `None` (with a skip line) where io_uring is unavailable
/// outside CI.
fn driver(choice: BackendChoice, config: &DriverConfig) -> Option<Box<dyn Driver>> {
    match open(config, choice) {
        Ok(opened) => Some(opened.driver),
        Err(OpenError::UringUnavailable(why)) if choice == BackendChoice::IoUring => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "io_uring is required under CI=true: {why}"
            );
            eprintln!("SKIP: io_uring unavailable here ({why})");
            None
        }
        Err(e) => panic!("open: {e}"),
    }
}

/// Polls until a connection is accepted; answers it with its listener's
/// number and returns that listener.
fn accept_one(driver: &mut dyn Driver) -> ListenerId {
    let deadline = Instant::now() + DEADLINE;
    let mut got = None;
    while got.is_none() {
        assert!(Instant::now() < deadline, "no accept in time");
        driver
            .poll(Some(Duration::from_millis(20)), &mut |io, event| {
                if let Event::Accepted { conn, listener, .. } = event {
                    io.send(conn, Bytes::from(vec![listener.0]));
                    got = Some(listener);
                }
            })
            .unwrap();
    }
    got.unwrap()
}

fn each_listener_names_its_connections(choice: BackendChoice) {
    let config = three_listeners();
    let Some(mut driver) = driver(choice, &config) else {
        return;
    };
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|i| driver.listener_addr(ListenerId(i)).expect("a listener"))
        .collect();
    assert_eq!(driver.local_addr(), addrs[0]);
    assert_eq!(driver.listener_addr(ListenerId(3)), None);
    let ports: std::collections::HashSet<u16> = addrs.iter().map(SocketAddr::port).collect();
    assert_eq!(ports.len(), 3, "three listeners, three ports: {addrs:?}");
    // Connect to the last first, so that order cannot pass for identity.
    for i in [2u8, 0, 1] {
        let mut client = TcpStream::connect(addrs[usize::from(i)]).unwrap();
        client.set_read_timeout(Some(DEADLINE)).unwrap();
        assert_eq!(accept_one(driver.as_mut()), ListenerId(i));
        // Flushed by the next polls.
        let deadline = Instant::now() + DEADLINE;
        let mut byte = [0u8; 1];
        client.set_nonblocking(true).unwrap();
        loop {
            driver
                .poll(Some(Duration::from_millis(10)), &mut |_, _| {})
                .unwrap();
            match client.read(&mut byte) {
                Ok(1) => break,
                Ok(_) => panic!("closed before the reply"),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
            assert!(Instant::now() < deadline, "no reply in time");
        }
        assert_eq!(byte[0], i, "the connection to listener {i}");
        client.write_all(b"x").unwrap();
    }
    // Stopping accepting but for listener 2 closes the others; then every
    // listener.
    driver.stop_accepting_except(Some(ListenerId(2)));
    for _ in 0..5 {
        driver
            .poll(Some(Duration::from_millis(10)), &mut |_, _| {})
            .unwrap();
    }
    for addr in &addrs[..2] {
        assert!(
            TcpStream::connect(addr).is_err(),
            "{addr} still accepts after stop_accepting_except"
        );
    }
    let _kept = TcpStream::connect(addrs[2]).expect("listener 2 accepts");
    assert_eq!(accept_one(driver.as_mut()), ListenerId(2));
    driver.stop_accepting();
    for _ in 0..5 {
        driver
            .poll(Some(Duration::from_millis(10)), &mut |_, _| {})
            .unwrap();
    }
    for addr in &addrs {
        assert!(
            TcpStream::connect(addr).is_err(),
            "{addr} still accepts after stop_accepting"
        );
    }
}

fn a_listener_that_cannot_bind_fails_the_open(choice: BackendChoice) {
    let taken = std::net::TcpListener::bind(localhost()).unwrap();
    let config = DriverConfig {
        reuse_port: false,
        more_listeners: vec![ListenerConfig {
            addr: taken.local_addr().unwrap(),
            shed_reply: Arc::from(&b""[..]),
        }],
        ..DriverConfig::new(localhost())
    };
    match open(&config, choice) {
        Err(OpenError::Listen { addr, .. }) => assert_eq!(addr, taken.local_addr().unwrap()),
        Err(OpenError::UringUnavailable(why)) if choice == BackendChoice::IoUring => {
            eprintln!("SKIP: io_uring unavailable here ({why})");
        }
        other => panic!("expected a listen error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn at_most_listeners_max_listeners() {
    let config = DriverConfig {
        more_listeners: vec![
            ListenerConfig {
                addr: localhost(),
                shed_reply: Arc::from(&b""[..]),
            };
            LISTENERS_MAX
        ],
        ..DriverConfig::new(localhost())
    };
    assert!(matches!(
        open(&config, BackendChoice::Epoll),
        Err(OpenError::InvalidConfig(_))
    ));
}

macro_rules! both_backends {
    ($($body:ident),* $(,)?) => {
        $(
            mod $body {
                use super::BackendChoice;

                #[test]
                fn io_uring() {
                    super::$body(BackendChoice::IoUring);
                }

                #[test]
                fn epoll() {
                    super::$body(BackendChoice::Epoll);
                }
            }
        )*
    };
}

both_backends!(
    each_listener_names_its_connections,
    a_listener_that_cannot_bind_fails_the_open,
);
