//! Reconnecting after the server restarts on the same port.

use std::time::Duration;

use sluice_client::{Error, QueueOptions, ReceiveOptions};

use crate::util::{TestServer, eventually, runtime};

fn is_expected_outage(e: &Error) -> bool {
    e.is_disconnect() || matches!(e, Error::Timeout(_))
}

#[test]
fn blocking_client_reconnects_after_a_restart() {
    let mut server = TestServer::start();
    let addr = server.addr;
    let c = server.client();
    c.create_queue("q", &QueueOptions::new()).unwrap();
    // A receive waiting when the server goes away: the shutdown answers it
    // (an empty batch) or the connection drops under it.
    let poller = c.clone();
    let waiting = std::thread::spawn(move || {
        poller.receive("q", ReceiveOptions::new(1).wait(Duration::from_secs(20)))
    });
    std::thread::sleep(Duration::from_millis(100));
    server.stop();
    match waiting.join().unwrap() {
        Ok(messages) => assert!(messages.is_empty()),
        Err(e) => assert!(is_expected_outage(&e), "{e}"),
    }
    // While it is down, requests fail with a disconnect-class error.
    let err = c.ping().expect_err("no server");
    assert!(is_expected_outage(&err), "{err}");

    let server = TestServer::start_on(&addr.to_string(), &[]);
    assert_eq!(server.addr, addr);
    eventually("a reconnect", || c.ping().ok());
    // A new server: a new, empty broker.
    assert!(matches!(c.queue_info("q"), Err(Error::QueueNotFound(_))));
    assert!(c.create_queue("q", &QueueOptions::new()).unwrap());
}

#[test]
fn async_client_reconnects_after_a_restart() {
    let mut server = TestServer::start();
    let addr = server.addr;
    let rt = runtime();
    let c = rt.block_on(server.async_client());
    rt.block_on(c.create_queue("q", &QueueOptions::new()))
        .unwrap();
    server.stop();
    let err = rt.block_on(c.ping()).expect_err("no server");
    assert!(is_expected_outage(&err), "{err}");
    let _server = TestServer::start_on(&addr.to_string(), &[]);
    eventually("a reconnect", || rt.block_on(c.ping()).ok());
    assert!(c.server_info().is_some());
    assert!(
        rt.block_on(c.create_queue("q", &QueueOptions::new()))
            .unwrap()
    );
}
