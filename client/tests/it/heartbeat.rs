//! The session timeout from the client's side: both clients keep their
//! connection (and the leases bound to it) through idleness and long
//! polls with their own PINGs, and `advance_clock` reaches the server's
//! manual clock, or is refused by a real one.

use std::time::Duration;

use sluice_client::{Error, QueueOptions, ReceiveOptions};

use crate::util::{TestServer, runtime};

/// The session timeout these clients ask for: five of them pass in each
/// idle stretch below.
const SESSION: Duration = Duration::from_millis(200);

fn counter(stats: &sluice_client::ServerStatsReply, name: &str) -> u64 {
    stats
        .counters
        .iter()
        .find(|c| c.name == name)
        .map_or(0, |c| c.value)
}

#[test]
fn a_blocking_client_that_idles_or_long_polls_keeps_its_connection_and_leases() {
    let server = TestServer::start();
    let client =
        sluice_client::Client::connect(server.client_config().with_session_timeout(SESSION))
            .expect("connects");
    assert_eq!(client.config().session_timeout(), Some(SESSION));
    client.create_queue("q", &QueueOptions::new()).unwrap();
    client.send("q", "x").unwrap();
    let held = client
        .receive(
            "q",
            ReceiveOptions::new(1)
                .visibility_timeout(Duration::from_secs(600))
                .bind_leases(true),
        )
        .unwrap();
    assert_eq!(held.len(), 1);
    // Idle for five timeouts, then long-poll for five more.
    std::thread::sleep(SESSION * 5);
    let polled = client
        .receive("q", ReceiveOptions::new(1).wait(SESSION * 5))
        .unwrap();
    assert!(polled.is_empty());
    // The lease is still this connection's: the delete succeeds.
    client.delete("q", held[0].receipt).unwrap();
    let stats = client.server_stats().unwrap();
    assert_eq!(counter(&stats, "connections_timed_out"), 0);
    assert_eq!(
        counter(&stats, "connections_accepted"),
        1,
        "never reconnected"
    );
    assert_eq!(counter(&stats, "leases_abandoned"), 0);
}

#[test]
fn an_async_client_that_idles_or_long_polls_keeps_its_connection_and_leases() {
    let server = TestServer::start();
    runtime().block_on(async {
        let client = sluice_client::AsyncClient::connect(
            server.client_config().with_session_timeout(SESSION),
        )
        .await
        .expect("connects");
        client
            .create_queue("q", &QueueOptions::new())
            .await
            .unwrap();
        client.send("q", "x").await.unwrap();
        let held = client
            .receive(
                "q",
                ReceiveOptions::new(1)
                    .visibility_timeout(Duration::from_secs(600))
                    .bind_leases(true),
            )
            .await
            .unwrap();
        assert_eq!(held.len(), 1);
        tokio::time::sleep(SESSION * 5).await;
        let polled = client
            .receive("q", ReceiveOptions::new(1).wait(SESSION * 5))
            .await
            .unwrap();
        assert!(polled.is_empty());
        client.delete("q", held[0].receipt).await.unwrap();
        let stats = client.server_stats().await.unwrap();
        assert_eq!(counter(&stats, "connections_timed_out"), 0);
        assert_eq!(
            counter(&stats, "connections_accepted"),
            1,
            "never reconnected"
        );
    });
}

#[test]
fn a_dropped_client_with_a_heartbeat_goes_away_and_its_bound_leases_come_back() {
    let server = TestServer::start();
    let watcher = server.client();
    watcher.create_queue("q", &QueueOptions::new()).unwrap();
    let sent = watcher.send("q", "x").unwrap();
    let client =
        sluice_client::Client::connect(server.client_config().with_session_timeout(SESSION))
            .expect("connects");
    let held = client
        .receive(
            "q",
            ReceiveOptions::new(1)
                .visibility_timeout(Duration::from_secs(600))
                .bind_leases(true),
        )
        .unwrap();
    assert_eq!(held[0].id, sent.id);
    // Dropping the client closes its connection (its heartbeat thread ends
    // with it rather than keeping it open).
    drop(client);
    let back = crate::util::eventually("the message back", || {
        watcher
            .receive("q", ReceiveOptions::new(1).wait(Duration::from_secs(1)))
            .unwrap()
            .pop()
    });
    assert_eq!((back.id, back.receive_count), (sent.id, 2));
}

#[test]
fn advance_clock_is_refused_by_a_real_clock_and_moves_a_manual_one() {
    let server = TestServer::start();
    let client = server.client();
    let err = client.advance_clock(Duration::from_secs(30)).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("--clock manual"), "{err}");

    let manual = TestServer::start_on("127.0.0.1:0", &["--clock", "manual"]);
    let client = manual.client();
    let first = client.advance_clock(Duration::from_secs(30)).unwrap();
    let second = client.advance_clock(Duration::from_millis(1500)).unwrap();
    assert_eq!(first.elapsed, Duration::from_secs(30));
    assert_eq!(second.elapsed, Duration::from_millis(31_500));
    assert_eq!(
        second.wall.duration_since(first.wall).unwrap(),
        Duration::from_millis(1_500)
    );
    let huge = client.advance_clock(Duration::from_secs(400 * 86_400));
    assert!(matches!(huge, Err(Error::InvalidArgument(_))), "{huge:?}");
    runtime().block_on(async {
        let client = manual.async_client().await;
        let r = client.advance_clock(Duration::ZERO).await.unwrap();
        assert_eq!(r.elapsed, Duration::from_millis(31_500));
    });
}
