//! Bad input on the SQS door over real sockets: each case gets an HTTP or
//! SQS error or a closed connection, the server never falls over, and the
//! binary port and the door go on serving others.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sluice_broker::server::config::IoChoice;

use crate::server_util::{CredentialsFile, READ_TIMEOUT, TestServer, start};

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to the SQS door");
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s
}

/// Everything the server sends until it closes the connection.
fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        // A reset after the response is a close too.
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading until the close: {e}"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One response (read by its Content-Length), the connection left open.
fn read_response(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("a response head");
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Content-Length");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("the body");
    head + &String::from_utf8_lossy(&body)
}

fn call(action: &str, body: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AmazonSQS.{action}\r\n\
         Content-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Both doors still serve a new client.
fn still_serving(server: &TestServer, sqs: SocketAddr) {
    server.client().ping();
    let mut s = connect(sqs);
    s.write_all(&call("ListQueues", "{}")).unwrap();
    let r = read_response(&mut s);
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
}

fn closing_cases(io: IoChoice) {
    let Some(server) = start(io, &["--sqs-listen", "127.0.0.1:0"]) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door");
    let mut many = b"POST / HTTP/1.1\r\n".to_vec();
    for i in 0..10_000 {
        many.extend_from_slice(format!("X-Header-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage bytes",
            b"\x16\x00garbage\xff\xfe\r\n\r\n".to_vec(),
            "HTTP/1.1 400 ",
        ),
        (
            "a 100 MB Content-Length",
            b"POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n".to_vec(),
            "HTTP/1.1 413 ",
        ),
        ("10,000 headers", many, "HTTP/1.1 431 "),
        (
            "HTTP/2's preface",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
            "HTTP/1.1 ",
        ),
        (
            "a bad chunk",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n".to_vec(),
            "HTTP/1.1 400 ",
        ),
        (
            "a TLS handshake on the plain door",
            b"\x16\x03\x01\x00\x05hello".to_vec(),
            "\x15\x03",
        ),
    ];
    for (what, bytes, expect) in cases {
        let mut s = connect(sqs);
        // The server may answer and close before it has read everything.
        let _ = s.write_all(&bytes);
        let got = read_to_close(&mut s);
        assert!(got.starts_with(expect), "{what}: {got:?}");
        still_serving(&server, sqs);
    }
    // A truncated request, then the client goes away.
    let mut s = connect(sqs);
    s.write_all(&call("ListQueues", "{}")[..20]).unwrap();
    drop(s);
    still_serving(&server, sqs);
}

fn sqs_errors_keep_the_connection(io: IoChoice) {
    let Some(server) = start(io, &["--sqs-listen", "127.0.0.1:0"]) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door");
    let mut s = connect(sqs);
    for (what, bytes, code) in [
        (
            "malformed JSON",
            call("CreateQueue", "{\"QueueName\": "),
            "SerializationException",
        ),
        (
            "a wrong type",
            call("CreateQueue", "{\"QueueName\": 7}"),
            "SerializationException",
        ),
        (
            "an unknown action",
            call("FlyToTheMoon", "{}"),
            "InvalidAction",
        ),
        (
            "no action at all",
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            "InvalidAction",
        ),
        (
            "a missing queue",
            call(
                "SendMessage",
                "{\"QueueUrl\":\"http://x/000000000000/nope\",\"MessageBody\":\"b\"}",
            ),
            "QueueDoesNotExist",
        ),
    ] {
        s.write_all(&bytes).unwrap();
        let r = read_response(&mut s);
        assert!(r.starts_with("HTTP/1.1 400 "), "{what}: {r}");
        assert!(r.contains(code), "{what}: {r}");
        assert!(r.contains("x-amzn-query-error: "), "{what}: {r}");
    }
    // A chunked body is served, on the same connection.
    s.write_all(
        b"POST / HTTP/1.1\r\nX-Amz-Target: AmazonSQS.ListQueues\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n1\r\n}\r\n0\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut s);
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    still_serving(&server, sqs);
}

fn a_byte_a_second_is_cut_off(io: IoChoice) {
    // --frame-timeout bounds an SQS request's arrival too.
    let Some(server) = start(
        io,
        &["--sqs-listen", "127.0.0.1:0", "--frame-timeout", "1s"],
    ) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door");
    let mut s = connect(sqs);
    s.set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap();
    let request = call("ListQueues", "{}");
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut got = Vec::new();
    for &b in request.iter().take(request.len() - 1) {
        if s.write_all(&[b]).is_err() {
            break;
        }
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        assert!(Instant::now() < deadline, "never cut off");
    }
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    got.extend_from_slice(read_to_close(&mut s).as_bytes());
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    still_serving(&server, sqs);
}

/// With `--sqs-credentials`, bad SigV4 headers (garbage, a 10,000-byte
/// credential scope, a scope of the wrong shape, a bad date, signed
/// headers without `host`, no signature) are each answered with SQS's
/// error on a connection that stays open, and the server goes on.
fn bad_signatures_are_answered(io: IoChoice) {
    let credentials = CredentialsFile::new(
        &format!("sigv4-bad-{io:?}"),
        "AKIDBAD secret 111122223333\n",
    );
    let Some(server) = start(
        io,
        &[
            "--sqs-listen",
            "127.0.0.1:0",
            "--sqs-credentials",
            &credentials.path,
        ],
    ) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door is open");
    let zeros = "0".repeat(64);
    let long_scope = format!(
        "AWS4-HMAC-SHA256 Credential={}/20261206/us-east-1/sqs/aws4_request, \
         SignedHeaders=host;x-amz-date, Signature={zeros}",
        "K".repeat(10_000)
    );
    let cases: Vec<(String, &str)> = vec![
        ("garbage".into(), "IncompleteSignature"),
        ("AWS4-HMAC-SHA256".into(), "IncompleteSignature"),
        (long_scope, "InvalidClientTokenId"),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDBAD/x/y, SignedHeaders=host, Signature={zeros}"
            ),
            "IncompleteSignature",
        ),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDBAD/20261206/us-east-1/sqs/aws4_request, SignedHeaders=x-amz-date, Signature={zeros}"
            ),
            "IncompleteSignature",
        ),
    ];
    let mut s = connect(sqs);
    for (auth, code) in &cases {
        let body = "{}";
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AmazonSQS.ListQueues\r\n\
             X-Amz-Date: 2026bad\r\nAuthorization: {auth}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).unwrap();
        let r = read_response(&mut s);
        assert!(r.contains(&format!("#{code}\"")), "{code}: {r:.300}");
    }
    // No signature at all.
    s.write_all(&call("ListQueues", "{}")).unwrap();
    let r = read_response(&mut s);
    assert!(r.starts_with("HTTP/1.1 403 "), "{r:.300}");
    assert!(r.contains("#MissingAuthenticationToken\""), "{r:.300}");
    // Control bytes in the header are no HTTP: 400 and a close.
    let mut raw = connect(sqs);
    raw.write_all(
        b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: \x01\x7f\r\nContent-Length: 0\r\n\r\n",
    )
    .unwrap();
    let r = read_to_close(&mut raw);
    assert!(r.starts_with("HTTP/1.1 400 "), "{r:.300}");
    server.client().ping();
}

fn form(body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Bad query-protocol requests get SQS's XML `ErrorResponse`, on a
/// connection that goes on serving.
fn query_protocol_errors_are_xml(io: IoChoice) {
    let Some(server) = start(io, &["--sqs-listen", "127.0.0.1:0"]) else {
        return;
    };
    let sqs = server.handle().sqs_addr().expect("the SQS door");
    let mut s = connect(sqs);
    let gap = "Action=GetQueueAttributes&Version=2012-11-05&QueueUrl=http%3A%2F%2Fx%2F000000000000%2Fq\
               &AttributeName.1=All&AttributeName.3=QueueArn";
    for (what, bytes, code) in [
        (
            "malformed form encoding",
            form(b"Action=ListQueues&Version=2012-11-05&QueueNamePrefix=%g1"),
            "MalformedQueryString",
        ),
        (
            "escapes that are no UTF-8",
            form(b"Action=ListQueues&Version=2012-11-05&QueueNamePrefix=%ff"),
            "MalformedQueryString",
        ),
        (
            "bytes that are no UTF-8",
            form(b"Action=ListQueues&Version=2012-11-05&QueueNamePrefix=\xff\xfe"),
            "MalformedQueryString",
        ),
        (
            "an unknown Version",
            form(b"Action=ListQueues&Version=2008-01-01"),
            "NoSuchVersion",
        ),
        ("no Version", form(b"Action=ListQueues"), "MissingParameter"),
        ("no Action", form(b"Version=2012-11-05"), "MissingAction"),
        (
            "an unknown action",
            form(b"Action=FlyToTheMoon&Version=2012-11-05"),
            "InvalidAction",
        ),
        (
            "a numbered list with a gap",
            form(gap.as_bytes()),
            "InvalidParameterValue",
        ),
        (
            "a missing queue, by GET",
            b"GET /?Action=GetQueueUrl&Version=2012-11-05&QueueName=nope HTTP/1.1\r\nHost: x\r\n\r\n"
                .to_vec(),
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
    ] {
        s.write_all(&bytes).unwrap();
        let r = read_response(&mut s);
        assert!(r.starts_with("HTTP/1.1 400 "), "{what}: {r}");
        assert!(r.contains("Content-Type: text/xml\r\n"), "{what}: {r}");
        assert!(
            r.contains("<ErrorResponse") && r.contains(&format!("<Code>{code}</Code>")),
            "{what}: {r}"
        );
    }
    s.write_all(&form(b"Action=ListQueues&Version=2012-11-05"))
        .unwrap();
    let r = read_response(&mut s);
    assert!(
        r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("<ListQueuesResponse"),
        "{r}"
    );
    still_serving(&server, sqs);
}

crate::both_backends!(
    closing_cases,
    sqs_errors_keep_the_connection,
    query_protocol_errors_are_xml,
    a_byte_a_second_is_cut_off,
    bad_signatures_are_answered
);
