//! One queue, two doors: a queue created over the SQS door is listed, sent
//! to and received from by the `sluice` CLI and the native client, and a
//! queue made by the CLI is served over SQS. The SQS side speaks the AWS
//! JSON protocol by hand here (boto3 and the aws CLI drive the door in
//! broker/tests/it/server_sqs_clients.rs).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

struct Server {
    _server: sluice_broker::testing::TestServer,
    addr: SocketAddr,
    sqs: SocketAddr,
}

impl Server {
    fn start() -> Server {
        let server = sluice_broker::testing::TestServer::builder()
            .arg("--sqs-listen", "127.0.0.1:0")
            .arg("--shards", "2")
            .arg("--memory-max", "128MiB")
            .start();
        Server {
            addr: server.addr(),
            sqs: server.handle().sqs_addr().expect("the SQS door is open"),
            _server: server,
        }
    }

    /// An SQS call over its own connection: the status and the JSON reply.
    fn sqs(&self, action: &str, input: &Value) -> (u16, Value) {
        let body = input.to_string();
        let mut stream = TcpStream::connect(self.sqs).expect("connect to the SQS door");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let request = format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nX-Amz-Target: AmazonSQS.{action}\r\n\
             Content-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            self.sqs,
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response[9..12].parse().expect("a status");
        let (_, json) = response.split_once("\r\n\r\n").expect("a head and a body");
        (status, serde_json::from_str(json).expect("a JSON body"))
    }

    fn sqs_ok(&self, action: &str, input: &Value) -> Value {
        let (status, reply) = self.sqs(action, input);
        assert_eq!(status, 200, "{action}: {reply}");
        reply
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("--addr")
            .arg(self.addr.to_string())
            .args(args)
            .env_remove("SLUICE_ADDR")
            .env_remove("SLUICE_TOKEN_FILE")
            .output()
            .expect("sluice runs");
        assert!(
            out.status.success(),
            "sluice {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    }

    fn client(&self) -> sluice_client::Client {
        sluice_client::Client::connect(sluice_client::ClientConfig::new(self.addr.to_string()))
            .expect("client connects")
    }
}

#[test]
fn a_queue_created_over_sqs_is_served_by_the_cli_and_the_native_client() {
    let server = Server::start();
    let url = server.sqs_ok(
        "CreateQueue",
        &json!({"QueueName": "orders", "Attributes": {"VisibilityTimeout": "5"},
                "tags": {"team": "payments"}}),
    )["QueueUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(url, format!("http://{}/000000000000/orders", server.sqs));

    // The CLI lists it, with the visibility timeout SQS gave it.
    assert!(server.cli(&["queue", "list"]).contains("orders"));
    let show: Value =
        serde_json::from_str(&server.cli(&["--json", "queue", "show", "orders"])).expect("JSON");
    assert_eq!(show["name"], "orders");
    assert_eq!(show["attributes"]["visibility_timeout_ms"], 5000, "{show}");
    // Its SQS tags are the queue's tags; the CLI's are SQS's.
    assert_eq!(
        show["attributes"]["tags"],
        json!({"team": "payments"}),
        "{show}"
    );
    server.cli(&[
        "queue", "set", "orders", "--tag", "env=dev", "--untag", "team",
    ]);
    let tags = server.sqs_ok("ListQueueTags", &json!({"QueueUrl": url}));
    assert_eq!(tags, json!({"Tags": {"env": "dev"}}));
    assert!(server.cli(&["queue", "show", "orders"]).contains("tag env"));

    // Sent over SQS, received by the CLI.
    server.sqs_ok(
        "SendMessage",
        &json!({"QueueUrl": url, "MessageBody": "from sqs"}),
    );
    let got: Value = serde_json::from_str(
        &server.cli(&["--json", "recv", "orders", "--wait", "2s", "--delete"]),
    )
    .expect("JSON");
    assert_eq!(got[0]["body"], "from sqs");

    // Sent by the CLI, received over SQS; sent by the native client too.
    server.cli(&["send", "orders", "from the cli"]);
    server
        .client()
        .send("orders", "from the client")
        .expect("send");
    let mut bodies = Vec::new();
    for _ in 0..10 {
        let reply = server.sqs_ok(
            "ReceiveMessage",
            &json!({"QueueUrl": url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1}),
        );
        for m in reply["Messages"].as_array().into_iter().flatten() {
            bodies.push(m["Body"].as_str().unwrap().to_owned());
            let handle = m["ReceiptHandle"].clone();
            server.sqs_ok(
                "DeleteMessage",
                &json!({"QueueUrl": url, "ReceiptHandle": handle}),
            );
        }
        if bodies.len() == 2 {
            break;
        }
    }
    bodies.sort();
    assert_eq!(bodies, ["from the cli", "from the client"]);
    let stats = server.sqs_ok(
        "GetQueueAttributes",
        &json!({"QueueUrl": url, "AttributeNames": ["All"]}),
    );
    assert_eq!(stats["Attributes"]["ApproximateNumberOfMessages"], "0");
    assert_eq!(
        stats["Attributes"]["ApproximateNumberOfMessagesNotVisible"],
        "0"
    );
}

#[test]
fn a_queue_created_by_the_cli_is_served_over_sqs() {
    let server = Server::start();
    server.cli(&["queue", "create", "jobs", "--visibility-timeout", "30s"]);
    server.client().send("jobs", "native").expect("send");
    let url = server.sqs_ok("GetQueueUrl", &json!({"QueueName": "jobs"}))["QueueUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    let listed = server.sqs_ok("ListQueues", &json!({}));
    assert_eq!(listed["QueueUrls"], json!([url]));
    let attrs = server.sqs_ok(
        "GetQueueAttributes",
        &json!({"QueueUrl": url, "AttributeNames": ["VisibilityTimeout", "ApproximateNumberOfMessages"]}),
    );
    assert_eq!(attrs["Attributes"]["VisibilityTimeout"], "30");
    assert_eq!(attrs["Attributes"]["ApproximateNumberOfMessages"], "1");
    let got = server.sqs_ok(
        "ReceiveMessage",
        &json!({"QueueUrl": url, "WaitTimeSeconds": 2, "AttributeNames": ["ApproximateReceiveCount"]}),
    );
    assert_eq!(got["Messages"][0]["Body"], "native");
    assert_eq!(
        got["Messages"][0]["Attributes"]["ApproximateReceiveCount"],
        "1"
    );
    // The CLI sees the lease SQS took.
    let show: Value =
        serde_json::from_str(&server.cli(&["--json", "queue", "show", "jobs"])).expect("JSON");
    assert_eq!(show["stats"]["in_flight"], 1, "{show}");
    assert_eq!(show["stats"]["visible"], 0, "{show}");
    // Deleted over the door the queue is gone for the CLI too.
    server.sqs_ok("DeleteQueue", &json!({"QueueUrl": url}));
    assert!(!server.cli(&["queue", "list"]).contains("jobs"));
    let (status, error) = server.sqs("GetQueueUrl", &json!({"QueueName": "jobs"}));
    assert_eq!(status, 400);
    assert_eq!(error["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
}
