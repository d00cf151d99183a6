//! AWS Signature Version 4 for the SQS target's requests, as an AWS SDK
//! signs them: written from AWS's description of the scheme, not shared
//! with the door's checker (`sluice-sqs`), so each one checks the other.
//!
//! Every request is a `POST /` of the JSON protocol, signed over its
//! `content-type`, `host`, `x-amz-date` and `x-amz-target` headers and the
//! SHA-256 of its body. The signing key (four HMACs from the secret) is
//! made once a day; a request costs two SHA-256 passes and one HMAC.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The headers every request signs, in SigV4's order (sorted).
pub(crate) const SIGNED_HEADERS: &str = "content-type;host;x-amz-date;x-amz-target";

/// The content type of the JSON protocol.
pub(crate) const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// An access key, its secret and the region requests are signed for.
#[derive(Clone, PartialEq, Eq)]
pub struct SqsCredentials {
    /// The access key id.
    pub access_key: String,
    /// Its secret.
    pub secret: String,
    /// The region (`us-east-1` unless told).
    pub region: String,
}

impl std::fmt::Debug for SqsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsCredentials")
            .field("access_key", &self.access_key)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// Signs requests with one key: the day's signing key kept.
pub(crate) struct Signer {
    creds: SqsCredentials,
    /// The day (`YYYYMMDD`) and its signing key.
    day_key: Option<(String, Vec<u8>)>,
}

impl Signer {
    pub(crate) fn new(creds: SqsCredentials) -> Signer {
        Signer {
            creds,
            day_key: None,
        }
    }

    /// The `Authorization` header's value for a `POST /` to `host` of
    /// action `target` (`AmazonSQS.SendMessageBatch`) with `body`, dated
    /// `amz_date` (`YYYYMMDDTHHMMSSZ`).
    pub(crate) fn authorization(
        &mut self,
        host: &str,
        target: &str,
        amz_date: &str,
        body: &[u8],
    ) -> String {
        let day = &amz_date[..8];
        let canonical = format!(
            "POST\n/\n\ncontent-type:{CONTENT_TYPE}\nhost:{host}\nx-amz-date:{amz_date}\n\
             x-amz-target:{target}\n\n{SIGNED_HEADERS}\n{}",
            hex(&Sha256::digest(body))
        );
        let scope = format!("{day}/{}/sqs/aws4_request", self.creds.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let key = self.key(day);
        let signature = hex(&hmac(key, to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={SIGNED_HEADERS}, \
             Signature={signature}",
            self.creds.access_key
        )
    }

    /// The signing key of `day`: HMACs of the day, the region, the service
    /// and `aws4_request`, from `AWS4` and the secret.
    fn key(&mut self, day: &str) -> &[u8] {
        if self.day_key.as_ref().is_none_or(|(d, _)| d != day) {
            let k = hmac(
                format!("AWS4{}", self.creds.secret).as_bytes(),
                day.as_bytes(),
            );
            let k = hmac(&k, self.creds.region.as_bytes());
            let k = hmac(&k, b"sqs");
            let k = hmac(&k, b"aws4_request");
            self.day_key = Some((day.to_owned(), k));
        }
        self.day_key.as_ref().map_or(&[], |(_, k)| k)
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail.
    let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Now as SigV4's `YYYYMMDDTHHMMSSZ` (UTC).
pub(crate) fn amz_date_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    amz_date(secs)
}

/// Unix time `secs` as `YYYYMMDDTHHMMSSZ` (UTC).
pub(crate) fn amz_date(secs: u64) -> String {
    let days = secs / 86_400;
    let rest = secs % 86_400;
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(secret: &str) -> SqsCredentials {
        SqsCredentials {
            access_key: "AKIDEXAMPLE".into(),
            secret: secret.into(),
            region: "us-east-1".into(),
        }
    }

    #[test]
    fn dates_are_utc_in_sigv4_form() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        // 2015-08-30 12:36:00, AWS's own example date.
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
        // A leap day, and the last second of a year.
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
        assert_eq!(amz_date(1_798_761_599), "20261231T235959Z");
        assert_eq!(amz_date_now().len(), 16);
    }

    #[test]
    fn the_signing_key_is_aws_documented_chain() {
        // AWS's documented example: secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY,
        // 20120215, us-east-1, iam.
        let k = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", b"20120215");
        let k = hmac(&k, b"us-east-1");
        let k = hmac(&k, b"iam");
        let k = hmac(&k, b"aws4_request");
        assert_eq!(
            hex(&k),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    #[test]
    fn signatures_depend_on_the_secret_the_body_and_the_day_key() {
        let mut a = Signer::new(creds("s1"));
        let mut b = Signer::new(creds("s2"));
        let date = "20261207T001000Z";
        let t = "AmazonSQS.SendMessageBatch";
        let sig = a.authorization("h:1", t, date, b"{}");
        assert!(sig.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/sqs/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature="
        ));
        assert_eq!(sig, a.authorization("h:1", t, date, b"{}"));
        assert_ne!(sig, b.authorization("h:1", t, date, b"{}"));
        assert_ne!(sig, a.authorization("h:1", t, date, b"{ }"));
        assert_ne!(sig, a.authorization("h:2", t, date, b"{}"));
        // A new day, a new key.
        let next = a.authorization("h:1", t, "20261208T001000Z", b"{}");
        assert!(next.contains("/20261208/"));
        assert_eq!(
            a.day_key.as_ref().map(|(d, _)| d.as_str()),
            Some("20261208")
        );
    }
}
