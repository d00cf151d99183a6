//! Listing queues page by page: with a 4 KiB frame limit a page holds a
//! couple of hundred names, so 1,000 queues take several pages; the
//! iterator, the stream and `list_queues` all see every queue once, in
//! order.

use sluice_client::QueueOptions;

use crate::util::TestServer;

fn names() -> Vec<String> {
    (0..1000).map(|i| format!("page-test-{i:04}")).collect()
}

fn server_with_queues() -> TestServer {
    let server = TestServer::start_on("127.0.0.1:0", &["--frame-bytes-max", "4KiB"]);
    let client = server.client();
    for name in names() {
        client
            .create_queue(&name, &QueueOptions::default())
            .expect("create");
    }
    server
}

#[cfg(feature = "blocking")]
#[test]
fn the_iterator_walks_every_page() {
    let server = server_with_queues();
    let client = server.client();
    let listed: Vec<String> = client
        .queue_names("page-test-")
        .collect::<Result<_, _>>()
        .expect("list");
    assert_eq!(listed, names());
    assert_eq!(client.list_queues("").expect("list"), names());
    assert_eq!(client.list_queues("page-test-09").expect("list").len(), 100);
    assert!(client.list_queues("nothing").expect("list").is_empty());
}

#[cfg(feature = "async")]
#[test]
fn the_stream_walks_every_page() {
    let server = server_with_queues();
    crate::util::runtime().block_on(async {
        let client = sluice_client::AsyncClient::connect(server.client_config())
            .await
            .expect("connect");
        let mut stream = client.queue_names("");
        let mut listed = Vec::new();
        while let Some(name) = stream.next().await {
            listed.push(name.expect("a page"));
        }
        assert_eq!(listed, names());
        assert_eq!(
            client
                .list_queues("page-test-01")
                .await
                .expect("list")
                .len(),
            100
        );
    });
}
