use super::*;
use proptest::prelude::*;

const POST: &[u8] = b"POST / HTTP/1.1\r\nHost: 127.0.0.1:9324\r\nX-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 2\r\n\r\n{}";

fn request(buf: &[u8]) -> (Request, usize) {
    match parse(buf, &HttpLimits::default()) {
        Ok(Parsed::Request(r, n)) => (r, n),
        other => panic!("not a request: {other:?}"),
    }
}

#[test]
fn a_post_with_a_body_is_read_with_lowercased_headers() {
    let (r, n) = request(POST);
    assert_eq!(n, POST.len());
    assert_eq!(r.method(), "POST");
    assert_eq!(r.path(), "/");
    assert_eq!(r.query(), "");
    assert_eq!(r.header("x-amz-target"), Some("AmazonSQS.ListQueues"));
    assert_eq!(r.header("host"), Some("127.0.0.1:9324"));
    assert_eq!(&r.body[..], b"{}");
    assert!(r.keep_alive);
}

#[test]
fn header_values_are_utf_8_trimmed_and_bounded_in_number() {
    let text = "GET / HTTP/1.1\r\nX-Name:  café  \r\nX-Empty:\r\nX-Last: 1\r\n\r\n";
    let (r, _) = request(text.as_bytes());
    assert_eq!(r.header("x-name"), Some("café"));
    assert_eq!(r.header("x-empty"), Some(""));
    assert_eq!(r.header("x-last"), Some("1"));
    let bad = b"GET / HTTP/1.1\r\nX-Name: \xff\xfe\r\n\r\n";
    assert_eq!(
        parse(bad, &HttpLimits::default()),
        Err(HttpError::Malformed("a header value that is not UTF-8"))
    );
    // Over the limit, the stack's room or the heap's, too many is too many.
    for max in [3, 150] {
        let limits = HttpLimits {
            headers_max: max,
            ..HttpLimits::default()
        };
        let mut many = String::from("GET / HTTP/1.1\r\n");
        for i in 0..max {
            many.push_str(&format!("X-{i}: {i}\r\n"));
        }
        let fits = format!("{many}\r\n");
        match parse(fits.as_bytes(), &limits) {
            Ok(Parsed::Request(r, _)) => assert_eq!(r.headers().count(), max),
            other => panic!("{other:?}"),
        }
        let over = format!("{many}X-Over: 1\r\n\r\n");
        assert_eq!(
            parse(over.as_bytes(), &limits),
            Err(HttpError::HeadTooLarge)
        );
    }
}

#[test]
fn pipelined_requests_are_read_one_at_a_time() {
    let mut two = POST.to_vec();
    two.extend_from_slice(b"GET /000000000000/q?Action=X HTTP/1.1\r\nConnection: close\r\n\r\n");
    let (_, n) = request(&two);
    let (second, m) = request(&two[n..]);
    assert_eq!(n + m, two.len());
    assert_eq!(second.path(), "/000000000000/q");
    assert_eq!(second.query(), "Action=X");
    assert!(!second.keep_alive);
}

#[test]
fn every_prefix_of_a_request_is_incomplete() {
    for cut in 0..POST.len() {
        assert_eq!(
            parse(&POST[..cut], &HttpLimits::default()),
            Ok(Parsed::Incomplete {
                expect_continue: false
            }),
            "cut at {cut}"
        );
    }
}

#[test]
fn http_1_0_closes_unless_it_asks_for_keep_alive() {
    let (r, _) = request(b"GET / HTTP/1.0\r\n\r\n");
    assert!(!r.keep_alive);
    let (r, _) = request(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert!(r.keep_alive);
}

#[test]
fn a_chunked_body_is_decoded_and_may_come_in_pieces() {
    let full = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: y\r\n\r\n";
    let (r, n) = request(full);
    assert_eq!(n, full.len());
    assert_eq!(&r.body[..], b"Wikipedia");
    let head_len = full.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    for cut in head_len..full.len() {
        assert!(
            matches!(
                parse(&full[..cut], &HttpLimits::default()),
                Ok(Parsed::Incomplete { .. })
            ),
            "cut at {cut}"
        );
    }
}

#[test]
fn bad_chunks_are_malformed() {
    for body in [
        &b"zz\r\nab\r\n0\r\n\r\n"[..],
        b"2\r\nabXY0\r\n\r\n",
        b"\r\n",
        b"11111111111111111\r\n",
    ] {
        let mut buf = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        buf.extend_from_slice(body);
        assert!(
            matches!(
                parse(&buf, &HttpLimits::default()),
                Err(HttpError::Malformed(_))
            ),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn a_chunked_body_over_the_limit_is_refused_before_it_arrives() {
    let limits = HttpLimits {
        body_bytes_max: 10,
        ..HttpLimits::default()
    };
    let buf = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFF\r\nab";
    assert_eq!(parse(buf, &limits), Err(HttpError::BodyTooLarge));
}

#[test]
fn a_huge_content_length_is_refused_from_the_head_alone() {
    let buf = b"POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n";
    assert_eq!(
        parse(buf, &HttpLimits::default()),
        Err(HttpError::BodyTooLarge)
    );
    let buf = b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n";
    assert_eq!(
        parse(buf, &HttpLimits::default()),
        Err(HttpError::BodyTooLarge)
    );
    assert_eq!(HttpError::BodyTooLarge.status(), 413);
}

#[test]
fn bad_lengths_and_encodings_are_malformed() {
    for head in [
        &b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    ] {
        assert!(
            matches!(
                parse(head, &HttpLimits::default()),
                Err(HttpError::Malformed(_))
            ),
            "{:?}",
            String::from_utf8_lossy(head)
        );
    }
}

#[test]
fn too_many_or_too_large_headers_are_431() {
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..10_000 {
        many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let e = parse(&many, &HttpLimits::default()).unwrap_err();
    assert_eq!(e, HttpError::HeadTooLarge);
    assert_eq!(e.status(), 431);
    // A head that never ends is cut at the limit, not buffered forever.
    let mut endless = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
    endless.resize(20_000, b'a');
    assert_eq!(
        parse(&endless, &HttpLimits::default()),
        Err(HttpError::HeadTooLarge)
    );
}

#[test]
fn garbage_and_other_versions_are_refused() {
    assert!(matches!(
        parse(b"\x00\x01\x02\x03\r\n\r\n", &HttpLimits::default()),
        Err(HttpError::Malformed(_))
    ));
    assert!(parse(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", &HttpLimits::default()).is_err());
}

#[test]
fn expect_continue_is_reported_while_the_body_is_awaited() {
    let buf = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    assert_eq!(
        parse(buf, &HttpLimits::default()),
        Ok(Parsed::Incomplete {
            expect_continue: true
        })
    );
    let mut out = BytesMut::new();
    write_continue(&mut out);
    assert_eq!(&out[..], b"HTTP/1.1 100 Continue\r\n\r\n");
}

#[test]
fn responses_carry_length_headers_and_close() {
    let mut out = BytesMut::new();
    write_response(&mut out, 200, &[("X-A", "1")], b"body", false);
    assert_eq!(
        &out[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-A: 1\r\n\r\nbody"
    );
    out.clear();
    write_error(&mut out, &HttpError::LengthRequired);
    let text = String::from_utf8(out.to_vec()).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 411 Length Required\r\n"),
        "{text}"
    );
    assert!(text.contains("Connection: close\r\n"), "{text}");
    // Lengths of every number of digits, as the formatter writes them.
    for len in [0usize, 9, 10, 99, 100, 12_345, 1_048_576] {
        out.clear();
        write_response::<&str, &str>(&mut out, 404, &[], &vec![b'x'; len], false);
        let head = format!("HTTP/1.1 404 Not Found\r\nContent-Length: {len}\r\n\r\n");
        assert_eq!(&out[..head.len()], head.as_bytes());
        assert_eq!(out.len(), head.len() + len);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn any_bytes_parse_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&bytes, &HttpLimits::default());
    }

    #[test]
    fn any_bytes_after_a_head_parse_without_panicking(
        chunked in any::<bool>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut buf = if chunked {
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()
        } else {
            b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n".to_vec()
        };
        buf.extend_from_slice(&bytes);
        if let Ok(Parsed::Request(_, n)) = parse(&buf, &HttpLimits::default()) {
            prop_assert!(n <= buf.len());
        }
    }
}
