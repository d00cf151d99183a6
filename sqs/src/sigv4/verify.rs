//! Checking a request's AWS Signature Version 4 against the secrets of
//! `--sqs-credentials`: the `Authorization` header or a presigned query
//! string, the canonical request over the raw body, the signing key's chain
//! of keyed hashes, the signature compared in constant time, and the date
//! within 15 minutes of the door's clock (a presigned request: until it
//! expires).

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::{Identity, percent_decode};
use crate::hex::hex;
use crate::http::Request;

type HmacSha256 = Hmac<Sha256>;

/// How far a request's date may be from the door's clock.
pub const CLOCK_SKEW_MS: u64 = 15 * 60 * 1000;

/// The longest a presigned request may be valid (SigV4's own bound).
pub const PRESIGNED_EXPIRES_MAX_S: u64 = 7 * 24 * 3600;

/// One access key the door knows.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The access key id.
    pub access_key: String,
    /// Its secret.
    pub secret: String,
    /// The account whose queues it sees.
    pub account: String,
}

impl core::fmt::Debug for Credential {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Credential")
            .field("access_key", &self.access_key)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// The access keys of `--sqs-credentials`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    by_key: HashMap<String, Credential>,
}

impl Credentials {
    /// Reads a credentials file: one key a line, `ACCESS_KEY_ID SECRET
    /// ACCOUNT` separated by whitespace; `#` starts a comment; blank lines
    /// are skipped. The account is 12 digits.
    ///
    /// # Errors
    /// The first bad line, by number, without its secret: a line of other
    /// than three fields, an account other than 12 digits, a key given
    /// twice, or no key at all.
    pub fn parse(text: &str) -> Result<Credentials, String> {
        let mut by_key = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let n = i + 1;
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [access_key, secret, account] = fields[..] else {
                return Err(format!(
                    "line {n}: expected ACCESS_KEY_ID SECRET ACCOUNT, found {} field(s)",
                    fields.len()
                ));
            };
            if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "line {n}: the account is 12 digits, not {account:?}"
                ));
            }
            let credential = Credential {
                access_key: access_key.to_owned(),
                secret: secret.to_owned(),
                account: account.to_owned(),
            };
            if by_key.insert(access_key.to_owned(), credential).is_some() {
                return Err(format!(
                    "line {n}: the access key {access_key} is given twice"
                ));
            }
        }
        if by_key.is_empty() {
            return Err("no access key: a line is ACCESS_KEY_ID SECRET ACCOUNT".to_owned());
        }
        Ok(Credentials { by_key })
    }

    /// The key `access_key`.
    #[must_use]
    pub fn get(&self, access_key: &str) -> Option<&Credential> {
        self.by_key.get(access_key)
    }

    /// How many keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// Why a signature was refused, as SQS names it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    /// Neither an `Authorization` header nor a presigned query.
    #[error("the request is not signed: it needs AWS Signature Version 4")]
    Missing,
    /// The signature's parts cannot be read.
    #[error("the request's signature is malformed: {0}")]
    Malformed(&'static str),
    /// An access key the door does not know.
    #[error("the access key {0} is not one of --sqs-credentials")]
    UnknownKey(String),
    /// The date is too far from the door's clock, or a presigned request
    /// expired.
    #[error("the request's date is outside the 15 minutes allowed, or it has expired")]
    Expired,
    /// The signature is not the one the secret gives.
    #[error("the signature does not match the request and the secret")]
    Mismatch,
}

impl SigError {
    /// SQS's error code for it.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            SigError::Missing => "MissingAuthenticationToken",
            SigError::Malformed(_) => "IncompleteSignature",
            SigError::UnknownKey(_) => "InvalidClientTokenId",
            SigError::Expired => "RequestExpired",
            SigError::Mismatch => "SignatureDoesNotMatch",
        }
    }
}

/// A signature's parts, from the header or the query.
struct Parts {
    scope: String,
    signed_headers: String,
    signature: String,
    date: String,
    /// Seconds a presigned request stays valid; `None` for the header.
    expires_s: Option<u64>,
}

/// Checks `req`'s signature against `creds` at `now_unix_ms`; who signed
/// it, with the account its key names.
///
/// # Errors
/// [`SigError`]: unsigned, malformed, an unknown key, out of date, or a
/// signature that does not match.
pub fn verify(req: &Request, creds: &Credentials, now_unix_ms: u64) -> Result<Identity, SigError> {
    let parts = match req.header("authorization") {
        Some(auth) => header_parts(req, auth)?,
        None => query_parts(req.query())?,
    };
    let mut scope = parts.scope.split('/');
    let (Some(key), Some(day), Some(region), Some(service), Some("aws4_request"), None) = (
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
    ) else {
        return Err(SigError::Malformed(
            "the credential scope is KEY/DATE/REGION/SERVICE/aws4_request",
        ));
    };
    let credential = creds
        .get(key)
        .ok_or_else(|| SigError::UnknownKey(key.chars().take(128).collect()))?;
    let signed_ms =
        parse_amz_date(&parts.date).ok_or(SigError::Malformed("the date is YYYYMMDDTHHMMSSZ"))?;
    if !parts.date.starts_with(day) || day.len() != 8 {
        return Err(SigError::Malformed(
            "the credential scope's date is not the request's",
        ));
    }
    let in_time = match parts.expires_s {
        None => now_unix_ms.abs_diff(signed_ms) <= CLOCK_SKEW_MS,
        Some(expires) => {
            now_unix_ms.saturating_add(CLOCK_SKEW_MS) >= signed_ms
                && now_unix_ms <= signed_ms.saturating_add(expires.saturating_mul(1000))
        }
    };
    if !in_time {
        return Err(SigError::Expired);
    }
    let canonical = canonical_request(req, &parts)?;
    // The scope without its key.
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{day}/{region}/{service}/aws4_request\n{}",
        parts.date,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut mac = signing_key(&credential.secret, day, region, service);
    mac.update(string_to_sign.as_bytes());
    let given =
        unhex(&parts.signature).ok_or(SigError::Malformed("the signature is 64 hex digits"))?;
    // Constant time.
    mac.verify_slice(&given).map_err(|_| SigError::Mismatch)?;
    Ok(Identity {
        access_key: credential.access_key.clone(),
        account: Some(credential.account.clone()),
        region: region.to_owned(),
    })
}

fn header_parts(req: &Request, auth: &str) -> Result<Parts, SigError> {
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or(SigError::Malformed("the algorithm is AWS4-HMAC-SHA256"))?;
    let (mut scope, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',').map(str::trim) {
        if let Some(v) = part.strip_prefix("Credential=") {
            scope = Some(v.to_owned());
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v.to_owned());
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v.to_owned());
        }
    }
    let date = req
        .header("x-amz-date")
        .ok_or(SigError::Malformed("an X-Amz-Date header is needed"))?;
    Ok(Parts {
        scope: scope.ok_or(SigError::Malformed("no Credential"))?,
        signed_headers: signed.ok_or(SigError::Malformed("no SignedHeaders"))?,
        signature: signature.ok_or(SigError::Malformed("no Signature"))?,
        date: date.to_owned(),
        expires_s: None,
    })
}

fn query_parts(query: &str) -> Result<Parts, SigError> {
    let get = |name: &str| {
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| percent_decode(v))
        })
    };
    if get("X-Amz-Signature").is_none() && get("X-Amz-Credential").is_none() {
        return Err(SigError::Missing);
    }
    if get("X-Amz-Algorithm").as_deref() != Some("AWS4-HMAC-SHA256") {
        return Err(SigError::Malformed("X-Amz-Algorithm is AWS4-HMAC-SHA256"));
    }
    let expires = get("X-Amz-Expires")
        .and_then(|e| e.parse::<u64>().ok())
        .filter(|&e| e <= PRESIGNED_EXPIRES_MAX_S)
        .ok_or(SigError::Malformed("X-Amz-Expires is 0 to 604800 seconds"))?;
    Ok(Parts {
        scope: get("X-Amz-Credential").ok_or(SigError::Malformed("no X-Amz-Credential"))?,
        signed_headers: get("X-Amz-SignedHeaders")
            .ok_or(SigError::Malformed("no X-Amz-SignedHeaders"))?,
        signature: get("X-Amz-Signature").ok_or(SigError::Malformed("no X-Amz-Signature"))?,
        date: get("X-Amz-Date").ok_or(SigError::Malformed("no X-Amz-Date"))?,
        expires_s: Some(expires),
    })
}

/// SigV4's canonical request of `req`.
fn canonical_request(req: &Request, parts: &Parts) -> Result<String, SigError> {
    let names: Vec<&str> = parts.signed_headers.split(';').collect();
    if !names.contains(&"host") || names.windows(2).any(|w| w[0] >= w[1]) {
        return Err(SigError::Malformed(
            "SignedHeaders are lowercase, sorted, and include host",
        ));
    }
    let mut headers = String::new();
    for name in &names {
        let values: Vec<String> = req
            .headers()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        if values.is_empty() {
            return Err(SigError::Mismatch);
        }
        headers.push_str(name);
        headers.push(':');
        headers.push_str(&values.join(","));
        headers.push('\n');
    }
    Ok(format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method(),
        canonical_uri(req.path()),
        canonical_query(req.query(), parts.expires_s.is_some()),
        headers,
        parts.signed_headers,
        hex(&Sha256::digest(&req.body))
    ))
}

/// The path with its dot segments removed, each byte but the unreserved
/// ones and `/` percent-encoded (a `%` of the path's own escapes too), as
/// the AWS SDKs sign it.
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut normalized = segments.join("/");
    if !normalized.starts_with('/') {
        normalized.insert(0, '/');
    }
    if (path.ends_with("/.") || path.ends_with("/..")) && !normalized.ends_with('/') {
        normalized.push('/');
    }
    encode(&normalized, true)
}

/// The query's pairs decoded and encoded again as SigV4 asks, sorted by
/// key then value; a presigned request's own signature left out.
fn canonical_query(query: &str, presigned: bool) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                encode(&percent_decode(k), false),
                encode(&percent_decode(v), false),
            )
        })
        .filter(|(k, _)| !(presigned && k == "X-Amz-Signature"))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes every byte but `A-Za-z0-9-._~` (and `/` when `path`).
fn encode(s: &str, path: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (path && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The signing key's chain: `AWS4` + secret, then the day, the region, the
/// service and `aws4_request`; a MAC keyed with the last.
fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> HmacSha256 {
    let step = |key: &[u8], data: &str| -> Vec<u8> {
        // HMAC takes a key of any length.
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(data.as_bytes());
        mac.finalize().into_bytes().to_vec()
    };
    let k = step(format!("AWS4{secret}").as_bytes(), day);
    let k = step(&k, region);
    let k = step(&k, service);
    let k = step(&k, "aws4_request");
    HmacSha256::new_from_slice(&k).expect("HMAC takes any key length")
}

/// `YYYYMMDDTHHMMSSZ` as Unix ms.
fn parse_amz_date(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: core::ops::Range<usize>| -> Option<u64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(((days * 86_400) + hour * 3600 + minute * 60 + second) * 1000)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 64 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests;
