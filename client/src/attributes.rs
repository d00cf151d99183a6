//! Queue attributes on the client's side: [`QueueOptions`] to create a
//! queue or change it, and [`QueueInfo`] (its [`QueueAttributes`] and
//! [`QueueStats`]) to read it back, with times as [`Duration`]s and sizes
//! as `usize`. They become the protocol's millisecond and fixed-width
//! fields when sent; a value that does not fit is refused before anything
//! is sent.

use std::time::Duration;

/// A policy in a [`QueueOptions`]: leave it as it is, set it, or remove
/// it (the protocol's own type, declared once).
pub use sluice_protocol::Setting;
use sluice_protocol::{AttributeUpdate, LabelChanges, Labels, LabelsUpdate};

use crate::error::Result;
use crate::ops::{wire_count, wire_ms};

/// Where a queue's messages go after too many deliveries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RedrivePolicy {
    /// The dead-letter queue; it must exist.
    pub dead_letter_queue: String,
    /// A receive that would make delivery `max_receives + 1` dead-letters
    /// the message instead (1 ..= 1,000).
    pub max_receives: usize,
}

impl RedrivePolicy {
    /// Dead-letters into `dead_letter_queue` after `max_receives`
    /// deliveries.
    #[must_use]
    pub fn new(dead_letter_queue: impl Into<String>, max_receives: usize) -> RedrivePolicy {
        RedrivePolicy {
            dead_letter_queue: dead_letter_queue.into(),
            max_receives,
        }
    }
}

/// Retry backoff: a message whose lease ends without a delete becomes
/// visible again after `min(base * 2^(n-1), max)` with jitter, `n` its
/// receive count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backoff {
    /// The first delay (1 ms ..= 15 min).
    pub base: Duration,
    /// The cap (`base` ..= 12 h).
    pub max: Duration,
}

/// Attributes to create a queue with, or to change: each one that is
/// `None` (or [`Setting::Keep`]) is left as it is (on create: its
/// default). The server checks the ranges; the client refuses only what
/// the protocol's fields cannot carry.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::{Backoff, QueueOptions, RedrivePolicy, Setting};
///
/// let options = QueueOptions::new()
///     .visibility_timeout(Duration::from_secs(60))
///     .redrive(RedrivePolicy::new("orders.dlq", 5))
///     .max_depth(100_000);
/// assert_eq!(options.visibility_timeout, Some(Duration::from_secs(60)));
///
/// // A change that removes the backoff and keeps everything else.
/// let change = QueueOptions::new().clear_backoff();
/// assert_eq!(change.backoff, Setting::<Backoff>::Clear);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueOptions {
    /// Lease length of a receive that does not set one (0 ..= 12 h).
    pub visibility_timeout: Option<Duration>,
    /// Delay of a send that does not set one (0 ..= 15 min).
    pub delay: Option<Duration>,
    /// Age at which an undeleted message is dropped (60 s ..= 14 days).
    pub retention: Option<Duration>,
    /// Largest body plus attributes, in bytes.
    pub message_bytes_max: Option<usize>,
    /// Wait of a receive that does not set one (0 ..= 20 s).
    pub receive_wait: Option<Duration>,
    /// The dead-letter policy.
    pub redrive: Setting<RedrivePolicy>,
    /// Most messages held (visible, delayed and in flight). Once set it can
    /// be changed but not removed.
    pub max_depth: Option<usize>,
    /// How long an accepted dedup key suppresses repeats (0 ..= 1 h).
    pub dedup_window: Option<Duration>,
    /// The retry backoff.
    pub backoff: Setting<Backoff>,
    /// Tags to remove, then tags to set (at most 50 on a queue; keys of 1
    /// to 128 characters, values of at most 256).
    pub tags: LabelsUpdate,
    /// Annotations to remove, then to set: attributes another door (the
    /// SQS door's `Policy`, say) keeps with the queue.
    pub annotations: LabelsUpdate,
}

impl QueueOptions {
    /// Nothing set: a create with every default, a change of nothing.
    #[must_use]
    pub fn new() -> QueueOptions {
        QueueOptions::default()
    }

    /// Sets the default lease length.
    #[must_use]
    pub fn visibility_timeout(mut self, timeout: Duration) -> QueueOptions {
        self.visibility_timeout = Some(timeout);
        self
    }

    /// Sets the default delivery delay.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> QueueOptions {
        self.delay = Some(delay);
        self
    }

    /// Sets the retention.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> QueueOptions {
        self.retention = Some(retention);
        self
    }

    /// Sets the largest message, in bytes.
    #[must_use]
    pub fn message_bytes_max(mut self, bytes: usize) -> QueueOptions {
        self.message_bytes_max = Some(bytes);
        self
    }

    /// Sets the default long-poll wait.
    #[must_use]
    pub fn receive_wait(mut self, wait: Duration) -> QueueOptions {
        self.receive_wait = Some(wait);
        self
    }

    /// Sets the dead-letter policy.
    #[must_use]
    pub fn redrive(mut self, policy: RedrivePolicy) -> QueueOptions {
        self.redrive = Setting::Set(policy);
        self
    }

    /// Removes the dead-letter policy.
    #[must_use]
    pub fn clear_redrive(mut self) -> QueueOptions {
        self.redrive = Setting::Clear;
        self
    }

    /// Sets the most messages held.
    #[must_use]
    pub fn max_depth(mut self, messages: usize) -> QueueOptions {
        self.max_depth = Some(messages);
        self
    }

    /// Sets the dedup window.
    #[must_use]
    pub fn dedup_window(mut self, window: Duration) -> QueueOptions {
        self.dedup_window = Some(window);
        self
    }

    /// Sets the retry backoff.
    #[must_use]
    pub fn backoff(mut self, base: Duration, max: Duration) -> QueueOptions {
        self.backoff = Setting::Set(Backoff { base, max });
        self
    }

    /// Removes the retry backoff.
    #[must_use]
    pub fn clear_backoff(mut self) -> QueueOptions {
        self.backoff = Setting::Clear;
        self
    }

    /// Sets a tag (a server older than protocol version 4 refuses it).
    #[must_use]
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> QueueOptions {
        self.tags.set.push((key.into(), value.into()));
        self
    }

    /// Removes a tag.
    #[must_use]
    pub fn untag(mut self, key: impl Into<String>) -> QueueOptions {
        self.tags.remove.push(key.into());
        self
    }

    /// The protocol's attribute update.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument), naming
    /// the attribute, for a value the protocol's field cannot carry.
    pub(crate) fn to_update(&self) -> Result<AttributeUpdate> {
        let ms = |d: Option<Duration>, what: &str| d.map(|d| wire_ms(d, what)).transpose();
        let redrive = match &self.redrive {
            Setting::Keep => Setting::Keep,
            Setting::Clear => Setting::Clear,
            Setting::Set(r) => Setting::Set(sluice_protocol::RedrivePolicy {
                dead_letter_queue: r.dead_letter_queue.clone(),
                max_receives: wire_count(r.max_receives, "redrive max receives")?,
            }),
        };
        let backoff = match self.backoff {
            Setting::Keep => Setting::Keep,
            Setting::Clear => Setting::Clear,
            Setting::Set(b) => Setting::Set(sluice_protocol::Backoff {
                base_ms: wire_ms(b.base, "backoff base")?,
                max_ms: wire_ms(b.max, "backoff max")?,
            }),
        };
        let message_bytes_max = self
            .message_bytes_max
            .map(|n| wire_count(n, "message bytes max"))
            .transpose()?;
        Ok(AttributeUpdate {
            visibility_timeout_ms: ms(self.visibility_timeout, "visibility timeout")?,
            delay_ms: ms(self.delay, "delay")?,
            retention_ms: ms(self.retention, "retention")?,
            message_bytes_max,
            receive_wait_ms: ms(self.receive_wait, "receive wait")?,
            redrive,
            max_depth: self.max_depth.map(|n| u64::try_from(n).unwrap_or(u64::MAX)),
            dedup_window_ms: ms(self.dedup_window, "dedup window")?,
            backoff,
            labels: if self.tags.is_empty() && self.annotations.is_empty() {
                None
            } else {
                Some(Box::new(LabelChanges {
                    tags: self.tags.clone(),
                    annotations: self.annotations.clone(),
                }))
            },
        })
    }
}

fn from_ms(ms: u32) -> Duration {
    Duration::from_millis(u64::from(ms))
}

fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A queue's complete attributes, as the server reports them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueAttributes {
    /// Lease length of a receive that does not set one.
    pub visibility_timeout: Duration,
    /// Delay of a send that does not set one.
    pub delay: Duration,
    /// Age since the original send at which an undeleted message is
    /// dropped.
    pub retention: Duration,
    /// Largest body plus attributes, in bytes.
    pub message_bytes_max: usize,
    /// Wait of a receive that does not set one.
    pub receive_wait: Duration,
    /// The dead-letter policy, if any.
    pub redrive: Option<RedrivePolicy>,
    /// Most messages held; `None` is unbounded.
    pub max_depth: Option<usize>,
    /// How long an accepted dedup key suppresses repeats.
    pub dedup_window: Duration,
    /// The retry backoff, if any.
    pub backoff: Option<Backoff>,
    /// The queue's tags (empty from a server older than protocol version 4).
    pub tags: Labels,
    /// Attributes another door keeps with the queue.
    pub annotations: Labels,
}

impl Default for QueueAttributes {
    /// The attributes of a queue created with no options.
    fn default() -> Self {
        QueueAttributes::from(sluice_protocol::QueueAttributes::default())
    }
}

impl From<sluice_protocol::QueueAttributes> for QueueAttributes {
    fn from(a: sluice_protocol::QueueAttributes) -> Self {
        QueueAttributes {
            visibility_timeout: from_ms(a.visibility_timeout_ms),
            delay: from_ms(a.delay_ms),
            retention: from_ms(a.retention_ms),
            message_bytes_max: count(a.message_bytes_max.into()),
            receive_wait: from_ms(a.receive_wait_ms),
            redrive: a.redrive.map(|r| RedrivePolicy {
                dead_letter_queue: r.dead_letter_queue,
                max_receives: r.max_receives.into(),
            }),
            max_depth: a.max_depth.map(count),
            dedup_window: from_ms(a.dedup_window_ms),
            backoff: a.backoff.map(|b| Backoff {
                base: from_ms(b.base_ms),
                max: from_ms(b.max_ms),
            }),
            tags: a.tags,
            annotations: a.annotations,
        }
    }
}

/// A queue's counters, summed over the server's shards: the protocol's own
/// type (declared once), with [`QueueStats::depth`] and
/// [`QueueStats::oldest_age`].
pub use sluice_protocol::QueueStats;

/// A queue's name, attributes and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue.
    pub name: String,
    /// Every attribute.
    pub attributes: QueueAttributes,
    /// Its counters, summed over the server's shards.
    pub stats: QueueStats,
}

impl From<sluice_protocol::QueueInfo> for QueueInfo {
    fn from(info: sluice_protocol::QueueInfo) -> Self {
        QueueInfo {
            name: info.queue.as_str().to_owned(),
            attributes: info.attributes.into(),
            stats: info.stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn options_become_the_protocol_update() {
        let update = QueueOptions::new()
            .visibility_timeout(Duration::from_secs(60))
            .delay(Duration::from_micros(1500))
            .redrive(RedrivePolicy::new("dlq", 4))
            .max_depth(10)
            .clear_backoff()
            .to_update()
            .unwrap();
        assert_eq!(update.visibility_timeout_ms, Some(60_000));
        assert_eq!(update.delay_ms, Some(2), "rounded up, never to zero");
        assert_eq!(update.retention_ms, None);
        let redrive = update.redrive.as_set().unwrap();
        assert_eq!(
            (redrive.dead_letter_queue.as_str(), redrive.max_receives),
            ("dlq", 4)
        );
        assert_eq!(update.max_depth, Some(10));
        assert_eq!(update.backoff, Setting::Clear);

        let update = QueueOptions::new()
            .clear_redrive()
            .backoff(Duration::from_millis(100), Duration::from_secs(10))
            .to_update()
            .unwrap();
        assert!(update.redrive.is_clear());
        assert_eq!(
            update.backoff,
            Setting::Set(sluice_protocol::Backoff {
                base_ms: 100,
                max_ms: 10_000
            })
        );
        assert_eq!(
            QueueOptions::new().to_update().unwrap(),
            AttributeUpdate::default()
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
                QueueOptions::new().redrive(RedrivePolicy::new("d", 70_000)),
                "max receives",
            ),
            (
                QueueOptions::new().message_bytes_max(u32::MAX as usize + 1),
                "message bytes max",
            ),
        ];
        for (options, name) in cases {
            let err = options.to_update().unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.contains(name)),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn attributes_and_stats_read_as_durations_and_counts() {
        let a = QueueAttributes::from(sluice_protocol::QueueAttributes {
            backoff: Some(sluice_protocol::Backoff {
                base_ms: 5,
                max_ms: 50,
            }),
            ..sluice_protocol::QueueAttributes::default()
        });
        assert_eq!(a.visibility_timeout, Duration::from_secs(30));
        assert_eq!(
            a.backoff,
            Some(Backoff {
                base: Duration::from_millis(5),
                max: Duration::from_millis(50)
            })
        );
        let s = QueueStats {
            visible: 2,
            delayed: 3,
            in_flight: 4,
            oldest_age_ms: 1500,
            ..QueueStats::default()
        };
        assert_eq!(s.depth(), 9);
        assert!(!s.identity_holds(), "nine held, none sent");
        let s = QueueStats {
            sent: 10,
            deleted: 1,
            ..s
        };
        assert!(s.identity_holds());
        assert_eq!(s.oldest_age(), Duration::from_millis(1500));
    }
}
