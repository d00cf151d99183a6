//! Who signed a request: read from its AWS Signature Version 4 credential
//! scope without checking the signature ([`identity`]; the door accepts any
//! signature then, as local SQS servers do, and uses the signer's account
//! and region as the request's namespace), or checked against the secrets
//! of `--sqs-credentials` ([`verify`], in `sigv4/verify.rs`).

mod verify;

pub use verify::{CLOCK_SKEW_MS, Credential, Credentials, SigError, verify};

use crate::http::Request;

/// Who a request says it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The access key id of the credential scope.
    pub access_key: String,
    /// The account the key names: the key itself when it is 12 digits;
    /// `None` otherwise.
    pub account: Option<String>,
    /// The region of the credential scope ("" when it names none).
    pub region: String,
}

/// Who signed `req`, read from its `Authorization` header
/// (`AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/sqs/aws4_request, ...`)
/// or presigned query (`X-Amz-Credential=...`), without checking the
/// signature. `None` when neither names a credential.
#[must_use]
pub fn identity(req: &Request) -> Option<Identity> {
    let scope: std::borrow::Cow<'_, str> = req
        .header("authorization")
        .and_then(|auth| {
            let rest = auth.strip_prefix("AWS4-HMAC-SHA256")?;
            // The credential comes first as the SDKs sign; anywhere else
            // it is looked for among the parts.
            let first = rest.trim_start().strip_prefix("Credential=").map(|v| {
                let end = v.bytes().position(|c| c == b',').unwrap_or(v.len());
                v[..end].trim_end()
            });
            first
                .or_else(|| {
                    rest.split(',')
                        .map(str::trim)
                        .find_map(|part| part.strip_prefix("Credential="))
                })
                .map(std::borrow::Cow::Borrowed)
        })
        .or_else(|| {
            req.query().split('&').find_map(|pair| {
                let value = pair.strip_prefix("X-Amz-Credential=")?;
                Some(std::borrow::Cow::Owned(percent_decode(value)))
            })
        })?;
    // KEY/DATE/REGION/...: the slashes by a look along the bytes.
    let b = scope.as_bytes();
    let slash = |from: usize| {
        b.get(from..)
            .and_then(|rest| rest.iter().position(|&c| c == b'/'))
            .map_or(b.len(), |i| from + i)
    };
    let key_end = slash(0);
    let date_end = slash(key_end + 1);
    let access_key = Some(&scope[..key_end])
        .filter(|k| !k.is_empty())?
        .to_owned();
    let region = scope
        .get(date_end + 1..slash(date_end + 1))
        .unwrap_or("")
        .to_owned();
    let account = (access_key.len() == 12 && access_key.bytes().all(|b| b.is_ascii_digit()))
        .then(|| access_key.clone());
    Some(Identity {
        access_key,
        account,
        region,
    })
}

/// `%2F` and friends decoded; a bad escape is kept as it is.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                // Two hex digits: at most 255.
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn req(auth: Option<&str>, query: &str) -> Request {
        crate::http::RequestParts {
            method: "POST".into(),
            path: "/".into(),
            query: query.into(),
            headers: auth
                .map(|a| vec![("authorization".to_owned(), a.to_owned())])
                .unwrap_or_default(),
            body: Bytes::new(),
            keep_alive: true,
        }
        .into()
    }

    #[test]
    fn the_credential_scope_names_key_account_and_region() {
        let id = identity(&req(
            Some("AWS4-HMAC-SHA256 Credential=123456789012/20261205/eu-west-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc"),
            "",
        ))
        .unwrap();
        assert_eq!(id.access_key, "123456789012");
        assert_eq!(id.account.as_deref(), Some("123456789012"));
        assert_eq!(id.region, "eu-west-1");
        let id = identity(&req(
            Some("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261205/us-east-1/sqs/aws4_request,SignedHeaders=host,Signature=abc"),
            "",
        ))
        .unwrap();
        assert_eq!(id.access_key, "AKIDEXAMPLE");
        assert_eq!(id.account, None);
        // The credential after the other parts, or with spaces around it,
        // reads the same.
        for auth in [
            "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=abc, Credential=AKIDEXAMPLE/20261205/us-east-1/sqs/aws4_request",
            "AWS4-HMAC-SHA256   Credential=AKIDEXAMPLE/20261205/us-east-1/sqs/aws4_request  , Signature=abc",
        ] {
            let other = identity(&req(Some(auth), "")).unwrap();
            assert_eq!(
                (other.access_key.as_str(), other.region.as_str()),
                ("AKIDEXAMPLE", "us-east-1"),
                "{auth}"
            );
        }
    }

    #[test]
    fn a_presigned_query_names_the_credential() {
        let id = identity(&req(
            None,
            "Action=ListQueues&X-Amz-Credential=111122223333%2F20261205%2Fap-south-1%2Fsqs%2Faws4_request&X-Amz-Signature=ab",
        ))
        .unwrap();
        assert_eq!(id.account.as_deref(), Some("111122223333"));
        assert_eq!(id.region, "ap-south-1");
    }

    #[test]
    fn no_or_bad_authorization_names_nobody() {
        assert_eq!(identity(&req(None, "")), None);
        assert_eq!(identity(&req(Some("Basic abc"), "")), None);
        assert_eq!(
            identity(&req(Some("AWS4-HMAC-SHA256 Credential="), "")),
            None
        );
        assert_eq!(identity(&req(Some("AWS4-HMAC-SHA256"), "")), None);
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
