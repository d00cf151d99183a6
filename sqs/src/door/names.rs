//! Namespaces, queue names, URLs and ARNs.
//!
//! A request's namespace is its account and region. The door's default
//! namespace (the configured account and region) maps the SQS queue `N` to
//! the engine queue `N`, so a queue is the same queue through either door;
//! any other namespace maps it to `{account}.{region}.{N}` (SQS names have
//! no `.`, so the two never meet).

use sluice_protocol::QueueName;
use sluice_protocol::limits::QUEUE_NAME_BYTES_MAX;

use super::errors::SqsError;

/// An account and region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Namespace {
    /// 12 digits.
    pub account: String,
    /// `us-east-1`.
    pub region: String,
    /// Whether it is the door's default.
    pub default: bool,
}

/// Whether `name` is an SQS standard queue name: 1 to 80 of
/// `[A-Za-z0-9_-]`.
pub(crate) fn is_sqs_name(name: &str) -> bool {
    (1..=80).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `name` is an SQS FIFO queue name: a standard name and the
/// `.fifo` suffix, 80 characters in all.
pub(crate) fn is_fifo_name(name: &str) -> bool {
    name.len() <= 80 && name.strip_suffix(".fifo").is_some_and(is_sqs_name)
}

/// Whether `name` is an SQS queue name, standard or FIFO.
pub(crate) fn is_queue_name(name: &str) -> bool {
    is_sqs_name(name) || is_fifo_name(name)
}

/// Checks an SQS queue name, standard or FIFO.
pub(crate) fn check_sqs_name(name: &str) -> Result<(), SqsError> {
    if is_queue_name(name) {
        Ok(())
    } else {
        Err(SqsError::invalid(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ))
    }
}

impl Namespace {
    /// The namespace of `account` and `region` for a door whose default is
    /// `default_account` and `default_region`.
    pub fn new(account: &str, region: &str, default_account: &str, default_region: &str) -> Self {
        Namespace {
            account: account.to_owned(),
            region: region.to_owned(),
            default: account == default_account && region == default_region,
        }
    }

    /// The prefix of this namespace's engine names.
    pub fn engine_prefix(&self) -> String {
        if self.default {
            String::new()
        } else {
            format!("{}.{}.", self.account, self.region)
        }
    }

    /// The engine queue of the SQS queue `name` (checked).
    pub fn engine_name(&self, name: &str) -> Result<QueueName, SqsError> {
        check_sqs_name(name)?;
        engine_queue(&self.account, &self.region, self.default, name)
    }

    /// The SQS name of the engine queue `engine`, if it is in this
    /// namespace.
    pub fn sqs_name<'a>(&self, engine: &'a str) -> Option<&'a str> {
        let rest = engine.strip_prefix(&self.engine_prefix())?;
        is_queue_name(rest).then_some(rest)
    }

    /// The URL of the queue `name`.
    /// The URL of the queue `name` at `origin` (`http://HOST` or
    /// `https://HOST`).
    pub fn url(&self, origin: &str, name: &str) -> String {
        format!("{origin}/{}/{name}", self.account)
    }

    /// The ARN of the queue `name`.
    pub fn arn(&self, name: &str) -> String {
        format!("arn:aws:sqs:{}:{}:{name}", self.region, self.account)
    }
}

/// The engine queue of the SQS queue `name` (checked by the caller) of
/// `account` in `region`, the door's default namespace when `default` (see
/// the module docs): what every message action looks up, so built without
/// a formatter or a namespace of its own.
pub(crate) fn engine_queue(
    account: &str,
    region: &str,
    default: bool,
    name: &str,
) -> Result<QueueName, SqsError> {
    let full = if default {
        None
    } else {
        let mut full = String::with_capacity(account.len() + region.len() + name.len() + 2);
        for part in [account, ".", region, ".", name] {
            full.push_str(part);
        }
        Some(full)
    };
    let engine = full.as_deref().unwrap_or(name);
    if engine.len() > QUEUE_NAME_BYTES_MAX {
        return Err(SqsError::invalid(format!(
            "Queue name {name} is too long for account {account} in region {region}: sluice's queue name {engine} would exceed {QUEUE_NAME_BYTES_MAX} bytes."
        )));
    }
    QueueName::new(engine).map_err(|_| SqsError::invalid(format!("Invalid queue name {name}.")))
}

/// The account and queue name of a queue URL (`http://host/account/name`,
/// or its path alone): the host is not looked at. Every message action
/// reads one, so in a pass or two over its bytes, without searchers.
pub(crate) fn parse_url(url: &str) -> Result<(&str, &str), SqsError> {
    let b = url.as_bytes();
    let first = |from: usize, hit: fn(u8) -> bool| {
        b[from..]
            .iter()
            .position(|&c| hit(c))
            .map_or(b.len(), |i| from + i)
    };
    let path_start = match b.windows(3).position(|w| w == b"://") {
        Some(i) => first(i + 3, |c| c == b'/'),
        None => 0,
    };
    let path_end = first(path_start, |c| c == b'?' || c == b'#');
    // The bytes found are ASCII: the slices fall on characters.
    let path = url[path_start..path_end].trim_matches('/');
    match path.split_once('/') {
        Some((account, name)) if !account.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((account, name))
        }
        _ => Err(SqsError::new(
            "InvalidAddress",
            format!("The address {url} is not valid for this endpoint."),
        )),
    }
}

/// The (region, account, name) of a queue ARN.
pub(crate) fn parse_arn(arn: &str) -> Option<(&str, &str, &str)> {
    let rest = arn.strip_prefix("arn:")?;
    let mut parts = rest.splitn(5, ':');
    let _partition = parts.next()?;
    if parts.next()? != "sqs" {
        return None;
    }
    let region = parts.next()?;
    let account = parts.next()?;
    let name = parts.next()?;
    (!region.is_empty() && !account.is_empty() && !name.is_empty())
        .then_some((region, account, name))
}

/// The ARN of the engine queue `engine` (a dead-letter queue), read back
/// from its name: `{account}.{region}.{N}`, or `N` in the default
/// namespace.
pub(crate) fn arn_of_engine(engine: &str, default: &Namespace) -> String {
    let mut parts = engine.splitn(3, '.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(account), Some(region), Some(name)) => {
            format!("arn:aws:sqs:{region}:{account}:{name}")
        }
        _ => default.arn(engine),
    }
}
