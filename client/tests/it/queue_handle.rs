//! The queue handles (`client.queue(name)`), the async message stream and
//! the client-side checks of `Duration`s and counts.

use std::time::Duration;

use sluice_client::{
    Error, QueueOptions, ReceiveOptions, RedrivePolicy, SendEntry, sharded::ShardedClient,
};

use crate::util::TestServer;
#[cfg(feature = "async")]
use crate::util::runtime;

fn now(max: usize) -> ReceiveOptions {
    ReceiveOptions::new(max).wait(Duration::ZERO)
}

#[test]
fn every_queue_operation_through_a_blocking_handle() {
    let server = TestServer::start();
    let client = server.client();
    let dlq = client.queue("jobs.dlq");
    let jobs = client.queue("jobs");
    assert_eq!(jobs.name(), "jobs");
    assert!(dlq.create(&QueueOptions::new()).unwrap());
    let options = QueueOptions::new()
        .visibility_timeout(Duration::from_secs(45))
        .redrive(RedrivePolicy::new("jobs.dlq", 5))
        .backoff(Duration::from_millis(10), Duration::from_secs(1))
        .max_depth(1000);
    assert!(jobs.create(&options).unwrap(), "created");
    assert!(!jobs.create(&options).unwrap(), "the same attributes again");
    let a = jobs.attributes().unwrap();
    assert_eq!(a.visibility_timeout, Duration::from_secs(45));
    assert_eq!(a.redrive, Some(RedrivePolicy::new("jobs.dlq", 5)));
    assert_eq!(a.max_depth, Some(1000));
    assert_eq!(
        a.backoff.map(|b| Duration::from(b.max)),
        Some(Duration::from_secs(1))
    );

    // Clearing a policy leaves the others as they are.
    jobs.update(&QueueOptions::new().clear_backoff()).unwrap();
    let a = jobs.attributes().unwrap();
    assert_eq!((a.backoff, a.redrive.is_some()), (None, true));

    let first = jobs.send("one").unwrap();
    let batch = jobs
        .send_batch(&[SendEntry::new("two"), SendEntry::new("three")])
        .unwrap();
    assert!(batch.iter().all(Result::is_ok));
    let delayed = jobs
        .send_entry(SendEntry::new("later").delay(Duration::from_secs(600)))
        .unwrap();
    let stats = jobs.stats().unwrap();
    assert_eq!((stats.visible, stats.delayed, stats.sent), (3, 1, 4));

    assert_eq!(jobs.peek(10).unwrap().len(), 3);
    let got = jobs.receive(now(2)).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].id, first.id);
    // Extend one lease, release the other.
    jobs.change_visibility(got[0].receipt, Duration::from_secs(120))
        .unwrap();
    let released = jobs
        .change_visibility_batch(&[(got[1].receipt, Duration::ZERO)])
        .unwrap();
    assert!(released[0].is_ok());
    jobs.delete(got[0].receipt).unwrap();
    let again = jobs.delete(got[0].receipt).unwrap_err();
    assert!(again.is_lease_lost(), "{again}");

    // The released message and the third come now.
    let rest = jobs.receive(now(10)).unwrap();
    assert_eq!(rest.len(), 2);
    let deleted = jobs
        .delete_batch(&rest.iter().map(|m| m.receipt).collect::<Vec<_>>())
        .unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");

    assert_eq!(jobs.purge().unwrap(), 1, "the delayed one");
    assert_ne!(delayed.id, first.id);
    let info = jobs.info().unwrap();
    assert_eq!(info.queue.as_str(), "jobs");
    assert_eq!(info.stats.depth(), 0);
    assert!(info.stats.identity_holds(), "{:?}", info.stats);

    assert_eq!(dlq.redrive(10).unwrap().moved, 0, "nothing dead-lettered");
    jobs.delete_queue().unwrap();
    dlq.delete_queue().unwrap();
    assert!(matches!(jobs.stats(), Err(Error::QueueNotFound(_))));
}

#[test]
fn pipelined_requests_through_a_handle() {
    let server = TestServer::start();
    let client = server.client();
    let q = client.queue(String::from("pipelined"));
    q.create(&QueueOptions::new()).unwrap();
    let sends: Vec<_> = (0..4)
        .map(|i| {
            q.start_send_batch(&[SendEntry::new(format!("m{i}"))])
                .unwrap()
        })
        .collect();
    for s in sends {
        assert!(s.wait().unwrap()[0].is_ok());
    }
    let bare = q.start_send_bodies(&[b"m4", b"m5"]).unwrap();
    assert!(q.send_bodies(&[b"m6"]).unwrap()[0].is_ok());
    assert!(bare.wait().unwrap().iter().all(Result::is_ok));
    let view = sluice_client::SendEntryRef {
        body: b"m7",
        ..Default::default()
    };
    let viewed = q.start_send_views(&[view]).unwrap();
    assert!(q.send_views(&[view]).unwrap()[0].is_ok());
    assert!(viewed.wait().unwrap()[0].is_ok());
    let got = q.start_receive(now(8)).unwrap().wait().unwrap();
    assert_eq!(got.len(), 8);
    let last = q.start_receive_batch(now(10)).unwrap().wait().unwrap();
    assert_eq!(last.len(), 1);
    assert!(q.receive_batch(now(10)).unwrap().is_empty());
    let got: Vec<_> = got.into_iter().chain(last.to_messages()).collect();
    assert_eq!(got.len(), 9);
    let receipts: Vec<_> = got.iter().map(|m| m.receipt).collect();
    let deleted = q.start_delete_batch(&receipts).unwrap().wait().unwrap();
    assert!(deleted.iter().all(Result::is_ok));
    assert_eq!(q.stats().unwrap().depth(), 0);
}

#[test]
fn values_the_wire_cannot_carry_are_refused_before_sending() {
    let server = TestServer::start();
    let client = server.client();
    let too_long = Duration::from_secs(u64::from(u32::MAX));
    let err = client
        .create_queue("never", &QueueOptions::new().retention(too_long))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("retention")),
        "{err}"
    );
    assert!(
        client.list_queues("").unwrap().is_empty(),
        "nothing was created"
    );

    let q = client.queue("q");
    q.create(&QueueOptions::new()).unwrap();
    let err = q.receive(ReceiveOptions::new(70_000)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("max messages")),
        "{err}"
    );
    let err = q
        .send_entry(SendEntry::new("x").delay(too_long))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("delay")),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(q.stats().unwrap().sent, 0);
    // A delay the field carries but the broker does not take fails its
    // entry alone; the rest of the batch is sent.
    let results = client
        .send_batch(
            "q",
            &[
                SendEntry::new("late").delay(Duration::from_secs(20 * 60)),
                SendEntry::new("on time"),
            ],
        )
        .unwrap();
    assert!(
        matches!(&results[0], Err(Error::InvalidArgument(_))),
        "{results:?}"
    );
    assert!(results[1].is_ok(), "{results:?}");
    assert_eq!(q.stats().unwrap().sent, 1);
    // The server's own range checks still apply.
    let err = q
        .update(&QueueOptions::new().redrive(RedrivePolicy::new("missing.dlq", 3)))
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
}

#[test]
fn a_sharded_client_hands_out_the_handle_of_the_queue_s_broker() {
    let servers = [TestServer::start(), TestServer::start()];
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    let sharded =
        ShardedClient::connect(servers[0].client_config().with_addr(addrs.join(","))).unwrap();
    for name in ["a", "b", "c", "d"] {
        let q = sharded.queue(name);
        q.create(&QueueOptions::new()).unwrap();
        q.send("x").unwrap();
        assert_eq!(sharded.queue_info(name).unwrap().stats.visible, 1);
        assert_eq!(q.client().config().addr(), sharded.addr_of(name));
    }
}

#[cfg(feature = "async")]
#[test]
fn the_message_stream_receives_in_batches_until_the_queue_goes() {
    let server = TestServer::start();
    let rt = runtime();
    rt.block_on(async {
        let client = server.async_client().await;
        let events = client.queue("events");
        events.create(&QueueOptions::new()).await.unwrap();
        let entries: Vec<SendEntry> = (0..10).map(|i| SendEntry::new(format!("e{i}"))).collect();
        events.send_batch(&entries).await.unwrap();

        // Batches of 3: four receives for ten messages, in order.
        let mut stream = events.messages(ReceiveOptions::new(3).wait(Duration::from_millis(50)));
        for i in 0..10 {
            let m = stream.next().await.unwrap().unwrap();
            assert_eq!(m.body, format!("e{i}"));
            events.delete(m.receipt).await.unwrap();
        }
        assert_eq!(events.stats().await.unwrap().received, 10);

        // A message sent while the stream long-polls on an empty queue
        // comes through the same stream.
        let sender = events.clone();
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            sender.send("late").await.unwrap();
        });
        let m = stream.next().await.unwrap().unwrap();
        assert_eq!(m.body, "late");
        late.await.unwrap();

        // Deleting the queue ends the stream: the error, then nothing.
        events.delete_queue().await.unwrap();
        let err = stream.next().await.unwrap().unwrap_err();
        assert!(matches!(err, Error::QueueNotFound(_)), "{err}");
        assert!(stream.next().await.is_none());
    });
}

#[cfg(feature = "async")]
#[test]
fn a_stream_whose_options_the_wire_cannot_carry_ends_at_once() {
    let server = TestServer::start();
    let rt = runtime();
    rt.block_on(async {
        let client = server.async_client().await;
        let q = client.queue("q");
        q.create(&QueueOptions::new()).await.unwrap();
        let mut stream = q.messages(ReceiveOptions::new(100_000));
        let err = stream.next().await.unwrap().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(stream.next().await.is_none());
    });
}
