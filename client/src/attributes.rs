//! Queue attributes on the client's side. They are the protocol's own
//! types, declared once in `sluice_protocol` and re-exported here:
//! [`QueueAttributes`], [`RedrivePolicy`], [`Backoff`], [`QueueStats`] and
//! [`QueueInfo`], with times as [`Millis`] (read them as a [`Duration`]
//! with `.into()` or compare them with one). [`QueueOptions`] builds the
//! protocol's [`AttributeUpdate`] from [`Duration`]s or milliseconds; a
//! value that the protocol's field cannot carry is refused, naming the
//! option, before anything is sent.

use core::fmt;
#[cfg(doc)]
use std::time::Duration;

/// A policy in a [`QueueOptions`]: leave it as it is, set it, or remove
/// it (the protocol's own type, declared once).
pub use sluice_protocol::Setting;
pub use sluice_protocol::{
    AttributeUpdate, Backoff, Millis, QueueAttributes, QueueInfo, QueueKind, QueueStats,
    RedrivePolicy,
};

use crate::error::{Error, Result};

/// Attributes to create a queue with, or to change: a builder of the
/// protocol's [`AttributeUpdate`]. Each attribute left out is kept as it
/// is (on create: its default). The server checks the ranges; the builder
/// refuses only what the protocol's fields cannot carry, and the request
/// that takes the options reports it as
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument), naming the
/// option.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::{Millis, QueueOptions, RedrivePolicy, Setting};
///
/// let options = QueueOptions::new()
///     .visibility_timeout(Duration::from_secs(60))
///     .delay(Millis::new(250))
///     .redrive(RedrivePolicy::new("orders.dlq", 5))
///     .max_depth(100_000);
/// assert_eq!(options.update().visibility_timeout, Some(Millis::new(60_000)));
///
/// // A change that removes the backoff and keeps everything else.
/// let change = QueueOptions::new().clear_backoff();
/// assert_eq!(change.update().backoff, Setting::Clear);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueOptions {
    update: AttributeUpdate,
    /// The first option the protocol could not carry, and why.
    refused: Option<String>,
}

/// `value` as a protocol field, or why not, naming `option`.
fn field<T, U>(value: T, option: &str) -> core::result::Result<U, String>
where
    T: TryInto<U>,
    T::Error: fmt::Display,
{
    value.try_into().map_err(|e| format!("{option}: {e}"))
}

impl QueueOptions {
    /// Nothing set: a create with every default, a change of nothing.
    #[must_use]
    pub fn new() -> QueueOptions {
        QueueOptions::default()
    }

    /// The protocol's update these options make (whatever was refused left
    /// out; [`QueueOptions::to_update`] reports it).
    #[must_use]
    pub fn update(&self) -> &AttributeUpdate {
        &self.update
    }

    /// Sets a field through `f`, or records why `value` was refused.
    fn with<T, U>(
        mut self,
        value: T,
        option: &str,
        f: impl FnOnce(&mut AttributeUpdate, U),
    ) -> QueueOptions
    where
        T: TryInto<U>,
        T::Error: fmt::Display,
    {
        match field(value, option) {
            Ok(v) => {
                f(&mut self.update, v);
                self
            }
            Err(why) => self.refuse(why),
        }
    }

    /// Sets the default lease length (0 ..= 12 h).
    #[must_use]
    pub fn visibility_timeout<T>(self, timeout: T) -> QueueOptions
    where
        T: TryInto<Millis>,
        T::Error: fmt::Display,
    {
        self.with(timeout, "visibility timeout", |u, v| {
            u.visibility_timeout = Some(v);
        })
    }

    /// Sets the default delivery delay (0 ..= 15 min).
    #[must_use]
    pub fn delay<T>(self, delay: T) -> QueueOptions
    where
        T: TryInto<Millis>,
        T::Error: fmt::Display,
    {
        self.with(delay, "delay", |u, v| u.delay = Some(v))
    }

    /// Sets the retention: the age at which an undeleted message is
    /// dropped (60 s ..= 14 days).
    #[must_use]
    pub fn retention<T>(self, retention: T) -> QueueOptions
    where
        T: TryInto<Millis>,
        T::Error: fmt::Display,
    {
        self.with(retention, "retention", |u, v| u.retention = Some(v))
    }

    /// Sets the largest message (body plus attributes), in bytes.
    #[must_use]
    pub fn message_bytes_max<T>(self, bytes: T) -> QueueOptions
    where
        T: TryInto<u32>,
        T::Error: fmt::Display,
    {
        self.with(bytes, "message bytes max", |u, v| {
            u.message_bytes_max = Some(v);
        })
    }

    /// Sets the default long-poll wait (0 ..= 20 s).
    #[must_use]
    pub fn receive_wait<T>(self, wait: T) -> QueueOptions
    where
        T: TryInto<Millis>,
        T::Error: fmt::Display,
    {
        self.with(wait, "receive wait", |u, v| u.receive_wait = Some(v))
    }

    /// Sets the dead-letter policy.
    #[must_use]
    pub fn redrive(mut self, policy: RedrivePolicy) -> QueueOptions {
        self.update.redrive = Setting::Set(policy);
        self
    }

    /// Removes the dead-letter policy.
    #[must_use]
    pub fn clear_redrive(mut self) -> QueueOptions {
        self.update.redrive = Setting::Clear;
        self
    }

    /// Sets the most messages held (visible, delayed and in flight). Once
    /// set it can be changed but not removed.
    #[must_use]
    pub fn max_depth<T>(self, messages: T) -> QueueOptions
    where
        T: TryInto<u64>,
        T::Error: fmt::Display,
    {
        self.with(messages, "max depth", |u, v| u.max_depth = Some(v))
    }

    /// Sets how long an accepted dedup key suppresses repeats (0 ..= 1 h).
    #[must_use]
    pub fn dedup_window<T>(self, window: T) -> QueueOptions
    where
        T: TryInto<Millis>,
        T::Error: fmt::Display,
    {
        self.with(window, "dedup window", |u, v| u.dedup_window = Some(v))
    }

    /// Sets the retry backoff: a message whose lease ends without a delete
    /// becomes visible again after `min(base * 2^(n-1), max)` with jitter,
    /// `n` its receive count.
    #[must_use]
    pub fn backoff<T>(self, base: T, max: T) -> QueueOptions
    where
        T: TryInto<Millis>,
        T::Error: fmt::Display,
    {
        let max = match field(max, "backoff max") {
            Ok(max) => max,
            Err(why) => return self.refuse(why),
        };
        self.with(base, "backoff base", |u, base| {
            u.backoff = Setting::Set(Backoff::new(base, max));
        })
    }

    /// Removes the retry backoff.
    #[must_use]
    pub fn clear_backoff(mut self) -> QueueOptions {
        self.update.backoff = Setting::Clear;
        self
    }

    /// Sets a tag (a server older than protocol version 4 refuses it).
    #[must_use]
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> QueueOptions {
        self.update.tags_mut().set.push((key.into(), value.into()));
        self
    }

    /// Makes the queue a FIFO queue (at creation; a server older than
    /// protocol version 5 refuses it): each message group's messages in
    /// send order, one batch of a group in flight at a time, every send
    /// deduplicated (PROTOCOL.md §8.16). Its sends carry a group
    /// ([`SendEntry::group`](crate::SendEntry::group)) and a dedup key, or
    /// the queue deduplicates by content.
    #[must_use]
    pub fn fifo(mut self) -> QueueOptions {
        self.update.kind = Some(QueueKind::Fifo);
        self
    }

    /// Whether a FIFO queue's send without a dedup key is deduplicated by
    /// the SHA-256 of its body.
    #[must_use]
    pub fn content_based_dedup(mut self, on: bool) -> QueueOptions {
        self.update.content_based_dedup = Some(on);
        self
    }

    /// Removes a tag.
    #[must_use]
    pub fn untag(mut self, key: impl Into<String>) -> QueueOptions {
        self.update.tags_mut().remove.push(key.into());
        self
    }

    /// Records why an option was refused (the first reason is kept).
    fn refuse(mut self, why: String) -> QueueOptions {
        self.refused.get_or_insert(why);
        self
    }

    /// The protocol's attribute update.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument), naming
    /// the option, for the first value the protocol's field could not
    /// carry.
    pub fn to_update(&self) -> Result<AttributeUpdate> {
        match &self.refused {
            Some(why) => Err(Error::InvalidArgument(why.clone())),
            None => Ok(self.update.clone()),
        }
    }
}

impl From<AttributeUpdate> for QueueOptions {
    /// Options that make exactly `update`.
    fn from(update: AttributeUpdate) -> QueueOptions {
        QueueOptions {
            update,
            refused: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{AttributeUpdate, Backoff, Millis, QueueOptions, RedrivePolicy, Setting};
    use crate::error::Error;

    #[test]
    fn options_become_the_protocol_update() {
        let update = QueueOptions::new()
            .visibility_timeout(Duration::from_secs(60))
            .delay(Duration::from_micros(1500))
            .redrive(RedrivePolicy::new("dlq", 4))
            .max_depth(10_usize)
            .clear_backoff()
            .to_update()
            .unwrap();
        assert_eq!(update.visibility_timeout, Some(Millis::new(60_000)));
        assert_eq!(
            update.delay,
            Some(Millis::new(2)),
            "rounded up, never to zero"
        );
        assert_eq!(update.retention, None);
        let redrive = update.redrive.as_set().unwrap();
        assert_eq!(
            (redrive.dead_letter_queue.as_str(), redrive.max_receives),
            ("dlq", 4)
        );
        assert_eq!(update.max_depth, Some(10));
        assert_eq!(update.backoff, Setting::Clear);

        let update = QueueOptions::new()
            .clear_redrive()
            .backoff(Millis::new(100), Millis::new(10_000))
            .tag("team", "payments")
            .untag("old")
            .to_update()
            .unwrap();
        assert!(update.redrive.is_clear());
        assert_eq!(
            update.backoff,
            Setting::Set(Backoff::new(Millis::new(100), Millis::new(10_000)))
        );
        assert_eq!(update.tags().set, [("team".into(), "payments".into())]);
        assert_eq!(update.tags().remove, ["old".to_owned()]);
        assert_eq!(
            QueueOptions::new().to_update().unwrap(),
            AttributeUpdate::default()
        );
        let update = AttributeUpdate {
            receive_wait: Some(Millis::new(5)),
            ..AttributeUpdate::default()
        };
        assert_eq!(
            QueueOptions::from(update.clone()).to_update().unwrap(),
            update
        );
    }

    #[test]
    fn values_the_wire_cannot_carry_are_refused_by_name() {
        let too_long = Duration::from_secs(u64::from(u32::MAX));
        let cases = [
            (QueueOptions::new().retention(too_long), "retention"),
            (
                QueueOptions::new().backoff(Duration::ZERO, too_long),
                "backoff max",
            ),
            (
                QueueOptions::new().backoff(too_long, Duration::ZERO),
                "backoff base",
            ),
            (
                QueueOptions::new().message_bytes_max(u64::from(u32::MAX) + 1),
                "message bytes max",
            ),
            (QueueOptions::new().max_depth(-1), "max depth"),
            (
                // The first refusal is the one reported.
                QueueOptions::new()
                    .dedup_window(too_long)
                    .visibility_timeout(too_long),
                "dedup window",
            ),
        ];
        for (options, name) in cases {
            let err = options.to_update().unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.starts_with(name)),
                "{name}: {err}"
            );
        }
    }
}
