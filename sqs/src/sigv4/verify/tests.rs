//! The check against AWS's published SigV4 test suite (credentials
//! `AKIDEXAMPLE`, 2015-08-30 12:36:00 UTC, region `us-east-1`, service
//! `service`), and against requests tampered with one way at a time.

use bytes::Bytes;

use crate::http::RequestParts;

use super::*;

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const DATE: &str = "20150830T123600Z";
/// 2015-08-30 12:36:00 UTC.
const NOW_MS: u64 = 1_440_938_160_000;
const SCOPE: &str = "AKIDEXAMPLE/20150830/us-east-1/service/aws4_request";

fn creds() -> Credentials {
    Credentials::parse(&format!(
        "# the suite's key\nAKIDEXAMPLE {SECRET} 123456789012\n\nOTHER other-secret 000000000000 # another\n"
    ))
    .unwrap()
}

fn request(
    method: &str,
    path: &str,
    query: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> RequestParts {
    let mut headers = vec![
        ("host".to_owned(), "example.amazonaws.com".to_owned()),
        ("x-amz-date".to_owned(), DATE.to_owned()),
    ];
    for (n, v) in extra {
        headers.push(((*n).to_owned(), (*v).to_owned()));
    }
    RequestParts {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        headers,
        body: Bytes::from(body.to_owned()),
        keep_alive: true,
    }
}

fn signed(mut req: RequestParts, signed_headers: &str, signature: &str) -> RequestParts {
    req.headers.push((
        "authorization".to_owned(),
        format!("AWS4-HMAC-SHA256 Credential={SCOPE}, SignedHeaders={signed_headers}, Signature={signature}"),
    ));
    req
}

/// The suite's requests and the signatures AWS published for them.
fn suite() -> Vec<(&'static str, RequestParts)> {
    vec![
        (
            "get-vanilla",
            signed(
                request("GET", "/", "", &[], ""),
                "host;x-amz-date",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            ),
        ),
        (
            "post-vanilla",
            signed(
                request("POST", "/", "", &[], ""),
                "host;x-amz-date",
                "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
            ),
        ),
        (
            "get-vanilla-query-order-key-case",
            signed(
                request("GET", "/", "Param2=value2&Param1=value1", &[], ""),
                "host;x-amz-date",
                "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
            ),
        ),
        (
            "post-x-www-form-urlencoded",
            signed(
                request(
                    "POST",
                    "/",
                    "",
                    &[("content-type", "application/x-www-form-urlencoded")],
                    "Param1=value1",
                ),
                "content-type;host;x-amz-date",
                "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
            ),
        ),
    ]
}

#[test]
fn the_published_test_suite_verifies() {
    for (name, req) in suite() {
        let id = verify(&Request::from(req.clone()), &creds(), NOW_MS)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(id.access_key, "AKIDEXAMPLE", "{name}");
        assert_eq!(id.account.as_deref(), Some("123456789012"), "{name}");
        assert_eq!(id.region, "us-east-1");
        // Within 15 minutes either way, and not beyond.
        assert!(
            verify(
                &Request::from(req.clone()),
                &creds(),
                NOW_MS + CLOCK_SKEW_MS
            )
            .is_ok()
        );
        assert!(
            verify(
                &Request::from(req.clone()),
                &creds(),
                NOW_MS - CLOCK_SKEW_MS
            )
            .is_ok()
        );
        assert_eq!(
            verify(
                &Request::from(req.clone()),
                &creds(),
                NOW_MS + CLOCK_SKEW_MS + 1
            ),
            Err(SigError::Expired)
        );
        assert_eq!(
            verify(
                &Request::from(req.clone()),
                &creds(),
                NOW_MS - CLOCK_SKEW_MS - 1
            ),
            Err(SigError::Expired)
        );
    }
}

#[test]
fn any_change_to_a_signed_request_is_refused() {
    let base = || suite().remove(3).1;
    let mut body = base();
    body.body = Bytes::from_static(b"Param1=value2");
    let mut method = base();
    method.method = "PUT".into();
    let mut path = base();
    path.path = "/000000000000/q".into();
    let mut query = base();
    query.query = "Action=PurgeQueue".into();
    let mut header = base();
    header.headers[2].1 = "application/json".into();
    let mut secret = base();
    let wrong = Credentials::parse(&format!("AKIDEXAMPLE not-the-{SECRET} 123456789012")).unwrap();
    for (what, req) in [
        ("body", body),
        ("method", method),
        ("path", path),
        ("query", query),
        ("header", header),
    ] {
        assert_eq!(
            verify(&Request::from(req.clone()), &creds(), NOW_MS),
            Err(SigError::Mismatch),
            "{what}"
        );
    }
    assert_eq!(
        verify(&Request::from(secret.clone()), &wrong, NOW_MS),
        Err(SigError::Mismatch)
    );
    // A signed header the request lacks.
    secret.headers.remove(2);
    assert_eq!(
        verify(&Request::from(secret.clone()), &creds(), NOW_MS),
        Err(SigError::Mismatch)
    );
}

#[test]
fn bad_signatures_get_their_errors() {
    let unsigned = request("POST", "/", "", &[], "");
    assert_eq!(
        verify(&Request::from(unsigned.clone()), &creds(), NOW_MS),
        Err(SigError::Missing)
    );
    let auth = |a: &str| {
        let mut r = request("POST", "/", "", &[], "");
        r.headers.push(("authorization".into(), a.into()));
        verify(&Request::from(r.clone()), &creds(), NOW_MS)
    };
    let long_scope = format!(
        "AWS4-HMAC-SHA256 Credential={}/20150830/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature={}",
        "K".repeat(10_000),
        "0".repeat(64)
    );
    let cases: Vec<(String, &str)> = vec![
        ("garbage".into(), "IncompleteSignature"),
        ("AWS4-HMAC-SHA256 ".into(), "IncompleteSignature"),
        (
            "AWS4-HMAC-SHA256 Credential=, SignedHeaders=, Signature=".into(),
            "IncompleteSignature",
        ),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential={SCOPE}, SignedHeaders=host;x-amz-date, Signature=zz"
            ),
            "IncompleteSignature",
        ),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential={SCOPE}, SignedHeaders=x-amz-date;host, Signature={}",
                "0".repeat(64)
            ),
            "IncompleteSignature",
        ),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential={SCOPE}, SignedHeaders=x-amz-date, Signature={}",
                "0".repeat(64)
            ),
            "IncompleteSignature",
        ),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150831/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature={}",
                "0".repeat(64)
            ),
            "IncompleteSignature",
        ),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential=NOBODY/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature={}",
                "0".repeat(64)
            ),
            "InvalidClientTokenId",
        ),
        (long_scope, "InvalidClientTokenId"),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential={SCOPE}, SignedHeaders=host;x-amz-date, Signature={}",
                "0".repeat(64)
            ),
            "SignatureDoesNotMatch",
        ),
    ];
    for (a, code) in cases {
        let e = auth(&a).unwrap_err();
        assert_eq!(e.code(), code, "{a:.80}: {e}");
    }
    let mut no_date = request("GET", "/", "", &[], "");
    no_date.headers.retain(|(n, _)| n != "x-amz-date");
    let no_date = signed(no_date, "host", &"0".repeat(64));
    assert_eq!(
        verify(&Request::from(no_date.clone()), &creds(), NOW_MS)
            .unwrap_err()
            .code(),
        "IncompleteSignature"
    );
}

/// A presigned request: the signature over the query without itself.
#[test]
fn a_presigned_query_verifies_until_it_expires() {
    let query_without = format!(
        "Action=ListQueues&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={}&X-Amz-Date={DATE}&X-Amz-Expires=300&X-Amz-SignedHeaders=host",
        SCOPE.replace('/', "%2F")
    );
    let mut req = request("GET", "/", &query_without, &[], "");
    req.headers.retain(|(n, _)| n != "x-amz-date");
    let parts = Parts {
        scope: SCOPE.to_owned(),
        signed_headers: "host".to_owned(),
        signature: String::new(),
        date: DATE.to_owned(),
        expires_s: Some(300),
    };
    let canonical = canonical_request(&Request::from(req.clone()), &parts).unwrap();
    assert!(canonical.starts_with("GET\n/\nAction=ListQueues&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20150830%2F"), "{canonical}");
    let sts = format!(
        "AWS4-HMAC-SHA256\n{DATE}\n20150830/us-east-1/service/aws4_request\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut mac = signing_key(SECRET, "20150830", "us-east-1", "service");
    mac.update(sts.as_bytes());
    let signature = hex(&mac.finalize().into_bytes());
    req.query = format!("{query_without}&X-Amz-Signature={signature}");
    assert!(verify(&Request::from(req.clone()), &creds(), NOW_MS).is_ok());
    assert!(verify(&Request::from(req.clone()), &creds(), NOW_MS + 300_000).is_ok());
    assert_eq!(
        verify(&Request::from(req.clone()), &creds(), NOW_MS + 300_001),
        Err(SigError::Expired)
    );
    req.query = req.query.replace("ListQueues", "PurgeQueue");
    assert_eq!(
        verify(&Request::from(req.clone()), &creds(), NOW_MS),
        Err(SigError::Mismatch)
    );
    req.query = req
        .query
        .replace("X-Amz-Expires=300", "X-Amz-Expires=604801");
    assert_eq!(
        verify(&Request::from(req.clone()), &creds(), NOW_MS)
            .unwrap_err()
            .code(),
        "IncompleteSignature"
    );
}

#[test]
fn paths_dates_and_files() {
    assert_eq!(canonical_uri("/ሴ"), "/%E1%88%B4");
    assert_eq!(canonical_uri("/a/./b/../c"), "/a/c");
    assert_eq!(canonical_uri("/a%20b"), "/a%2520b");
    assert_eq!(canonical_uri("/-._~AZaz09"), "/-._~AZaz09");
    assert_eq!(parse_amz_date(DATE), Some(NOW_MS));
    assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
    for bad in [
        "2015083T123600Z",
        "20151330T123600Z",
        "20150830T123600",
        "2015-8-30T12:36:00Z",
        "20150830X123600Z",
        "20150830T246000Z",
    ] {
        assert_eq!(parse_amz_date(bad), None, "{bad}");
    }
    for (text, err) in [
        ("", "no access key"),
        ("K S", "line 1"),
        ("K S 12345", "12 digits"),
        ("# c\nK S 123456789012\nK T 123456789012", "line 3"),
    ] {
        let e = Credentials::parse(text).unwrap_err();
        assert!(e.contains(err), "{text:?}: {e}");
        assert!(!e.contains(" S ") && !e.contains(" T "), "no secret in {e}");
    }
    let c = creds();
    assert_eq!(c.len(), 2);
    assert!(!format!("{:?}", c.get("AKIDEXAMPLE").unwrap()).contains(SECRET));
}
