//! Queue attributes and per-queue statistics. Their defaults and ranges are
//! in [`crate::limits`], re-exported here.

use crate::error::{ErrorCode, WireError};
use crate::labels::{ANNOTATION_LIMITS, Labels, LabelsUpdate, TAG_LIMITS};
use crate::limits::FRAME_RESERVED_BYTES;
use crate::millis::Millis;

pub use crate::limits::{
    BACKOFF_BASE_MS_MAX, BACKOFF_BASE_MS_MIN, BACKOFF_MAX_MS_MAX, DEDUP_WINDOW_MS_DEFAULT,
    DEDUP_WINDOW_MS_MAX, DELAY_MS_MAX, MAX_DEPTH_MAX, MAX_RECEIVES_MAX, MESSAGE_BYTES_MAX_DEFAULT,
    RECEIVE_WAIT_MS_MAX, RETENTION_MS_DEFAULT, RETENTION_MS_MAX, RETENTION_MS_MIN,
    VISIBILITY_TIMEOUT_MS_DEFAULT, VISIBILITY_TIMEOUT_MS_MAX,
};

/// Where a queue's messages go after too many deliveries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RedrivePolicy {
    /// Name of the dead-letter queue; it must exist.
    pub dead_letter_queue: String,
    /// A receive that would make delivery `max_receives + 1` dead-letters the
    /// message instead (1 ..= 1000).
    pub max_receives: u16,
}

impl RedrivePolicy {
    /// Dead-letters into `dead_letter_queue` after `max_receives`
    /// deliveries.
    #[must_use]
    pub fn new(dead_letter_queue: impl Into<String>, max_receives: u16) -> RedrivePolicy {
        RedrivePolicy {
            dead_letter_queue: dead_letter_queue.into(),
            max_receives,
        }
    }
}

/// Exponential retry backoff after a release or an expired lease:
/// `min(base * 2^(n-1), max)` with jitter, n the receive count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backoff {
    /// Base delay, 1 ms ..= 15 min.
    pub base: Millis,
    /// Cap, base ..= 12 h.
    pub max: Millis,
}

impl Backoff {
    /// A backoff from `base` up to `max`.
    #[must_use]
    pub fn new(base: Millis, max: Millis) -> Backoff {
        Backoff { base, max }
    }
}

/// A queue's kind, set when it is created and fixed from then on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// Messages in no particular order; a message's group id, if any, only
    /// takes turns with the other groups (a fair queue).
    #[default]
    Standard,
    /// Every message has a group id; a group's messages are delivered in
    /// send order, and none while an earlier one of the group is in flight.
    /// Every send is deduplicated (a dedup key, or the body's SHA-256 with
    /// content-based deduplication), and per-message delays are refused.
    Fifo,
}

impl QueueKind {
    /// Its wire value (attribute bit 11).
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            QueueKind::Standard => 0,
            QueueKind::Fifo => 1,
        }
    }

    /// The kind of a wire value.
    #[must_use]
    pub fn from_code(code: u8) -> Option<QueueKind> {
        match code {
            0 => Some(QueueKind::Standard),
            1 => Some(QueueKind::Fifo),
            _ => None,
        }
    }
}

/// A queue's complete attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueAttributes {
    /// Lease length of a receive that does not override it (0 ..= 12 h).
    pub visibility_timeout: Millis,
    /// Delay of a send that does not set one (0 ..= 15 min).
    pub delay: Millis,
    /// Age since the original send at which an undeleted message is dropped
    /// (60 s ..= 14 days).
    pub retention: Millis,
    /// Largest body plus attributes (1 ..= frame limit - 256 B).
    pub message_bytes_max: u32,
    /// Wait of a receive that does not set one (0 ..= 20 s).
    pub receive_wait: Millis,
    /// Dead-letter policy, if any.
    pub redrive: Option<RedrivePolicy>,
    /// Largest number of messages held (visible + delayed + in flight);
    /// `None` is unbounded.
    pub max_depth: Option<u64>,
    /// How long an accepted dedup key suppresses repeats (0 ..= 1 h).
    pub dedup_window: Millis,
    /// Retry backoff, if any.
    pub backoff: Option<Backoff>,
    /// The user's tags (see [`crate::labels`]).
    pub tags: Labels,
    /// Attributes another door keeps with the queue, uninterpreted here.
    pub annotations: Labels,
    /// Standard or FIFO; fixed at creation.
    pub kind: QueueKind,
    /// A send without a dedup key is deduplicated by the SHA-256 of its body
    /// (FIFO queues only).
    pub content_based_dedup: bool,
}

impl Default for QueueAttributes {
    fn default() -> Self {
        QueueAttributes {
            visibility_timeout: Millis::new(VISIBILITY_TIMEOUT_MS_DEFAULT),
            delay: Millis::ZERO,
            retention: Millis::new(RETENTION_MS_DEFAULT),
            message_bytes_max: MESSAGE_BYTES_MAX_DEFAULT,
            receive_wait: Millis::ZERO,
            redrive: None,
            max_depth: None,
            dedup_window: Millis::new(DEDUP_WINDOW_MS_DEFAULT),
            backoff: None,
            tags: Labels::new(),
            annotations: Labels::new(),
            kind: QueueKind::Standard,
            content_based_dedup: false,
        }
    }
}

/// A policy in an [`AttributeUpdate`] (and in the client's options): leave
/// it as it is, set it, or remove it. One value, so that "remove the
/// policy and set one" cannot be written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Setting<T> {
    /// Leave it as it is (on create: the default, none).
    #[default]
    Keep,
    /// Set it.
    Set(T),
    /// Remove it (SET only; a CREATE has nothing to remove).
    Clear,
}

impl<T> Setting<T> {
    /// The value it sets, if it sets one.
    #[must_use]
    pub fn as_set(&self) -> Option<&T> {
        match self {
            Setting::Set(v) => Some(v),
            Setting::Keep | Setting::Clear => None,
        }
    }

    /// Whether it leaves the policy as it is.
    #[must_use]
    pub fn is_keep(&self) -> bool {
        matches!(self, Setting::Keep)
    }

    /// Whether it removes the policy.
    #[must_use]
    pub fn is_clear(&self) -> bool {
        matches!(self, Setting::Clear)
    }

    /// The same setting with its value mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Setting<U> {
        match self {
            Setting::Keep => Setting::Keep,
            Setting::Set(v) => Setting::Set(f(v)),
            Setting::Clear => Setting::Clear,
        }
    }
}

impl<T> From<Option<T>> for Setting<T> {
    /// `Some` sets, `None` keeps.
    fn from(v: Option<T>) -> Setting<T> {
        v.map_or(Setting::Keep, Setting::Set)
    }
}

/// A partial set of attributes, as CREATE and SET carry them: `None` (and
/// [`Setting::Keep`]) leaves an attribute at its default (CREATE) or
/// unchanged (SET); [`Setting::Clear`] removes the redrive or backoff policy
/// (SET only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AttributeUpdate {
    /// See [`QueueAttributes::visibility_timeout`].
    pub visibility_timeout: Option<Millis>,
    /// See [`QueueAttributes::delay`].
    pub delay: Option<Millis>,
    /// See [`QueueAttributes::retention`].
    pub retention: Option<Millis>,
    /// See [`QueueAttributes::message_bytes_max`].
    pub message_bytes_max: Option<u32>,
    /// See [`QueueAttributes::receive_wait`].
    pub receive_wait: Option<Millis>,
    /// See [`QueueAttributes::redrive`].
    pub redrive: Setting<RedrivePolicy>,
    /// See [`QueueAttributes::max_depth`].
    pub max_depth: Option<u64>,
    /// See [`QueueAttributes::dedup_window`].
    pub dedup_window: Option<Millis>,
    /// See [`QueueAttributes::backoff`].
    pub backoff: Setting<Backoff>,
    /// Changes of the tags and annotations, if any: boxed, so that the
    /// requests that carry an update stay small.
    pub labels: Option<Box<LabelChanges>>,
    /// See [`QueueAttributes::kind`]: CREATE only (a SET that names another
    /// kind than the queue's is refused).
    pub kind: Option<QueueKind>,
    /// See [`QueueAttributes::content_based_dedup`].
    pub content_based_dedup: Option<bool>,
}

/// Changes of a queue's tags and annotations (see [`crate::labels`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelChanges {
    /// Tags to remove and to set (see [`QueueAttributes::tags`]).
    pub tags: LabelsUpdate,
    /// Annotations to remove and to set.
    pub annotations: LabelsUpdate,
}

static NO_CHANGE: LabelsUpdate = LabelsUpdate {
    set: Vec::new(),
    remove: Vec::new(),
};

impl AttributeUpdate {
    /// The change of the tags (empty when none).
    #[must_use]
    pub fn tags(&self) -> &LabelsUpdate {
        self.labels.as_ref().map_or(&NO_CHANGE, |l| &l.tags)
    }

    /// The change of the annotations (empty when none).
    #[must_use]
    pub fn annotations(&self) -> &LabelsUpdate {
        self.labels.as_ref().map_or(&NO_CHANGE, |l| &l.annotations)
    }

    /// The change of the tags, to fill in.
    pub fn tags_mut(&mut self) -> &mut LabelsUpdate {
        &mut self.labels.get_or_insert_with(Box::default).tags
    }

    /// The change of the annotations, to fill in.
    pub fn annotations_mut(&mut self) -> &mut LabelsUpdate {
        &mut self.labels.get_or_insert_with(Box::default).annotations
    }
}

fn range_error(attribute: &str, value: u64, min: u64, max: u64) -> WireError {
    WireError::new(
        ErrorCode::InvalidArgument,
        format!("{attribute}: {value} is outside {min} ..= {max}"),
    )
}

fn check(attribute: &str, value: u64, min: u64, max: u64) -> Result<(), WireError> {
    if value < min || value > max {
        Err(range_error(attribute, value, min, max))
    } else {
        Ok(())
    }
}

impl AttributeUpdate {
    /// Applies the update to `attrs`, checking every range. `frame_bytes_max`
    /// bounds the max message size. On error `attrs` is unchanged. Whether a
    /// named dead-letter queue exists is the broker's to check.
    ///
    /// # Errors
    /// `InvalidArgument`, naming the attribute, when a value is out of
    /// range.
    pub fn apply_to(
        &self,
        attrs: &QueueAttributes,
        frame_bytes_max: u32,
    ) -> Result<QueueAttributes, WireError> {
        let mut out = attrs.clone();
        if let Some(v) = self.visibility_timeout {
            check(
                "visibility_timeout_ms",
                v.into(),
                0,
                VISIBILITY_TIMEOUT_MS_MAX.into(),
            )?;
            out.visibility_timeout = v;
        }
        if let Some(v) = self.delay {
            check("delay_ms", v.into(), 0, DELAY_MS_MAX.into())?;
            out.delay = v;
        }
        if let Some(v) = self.retention {
            check(
                "retention_ms",
                v.into(),
                RETENTION_MS_MIN.into(),
                RETENTION_MS_MAX.into(),
            )?;
            out.retention = v;
        }
        if let Some(v) = self.message_bytes_max {
            let max = frame_bytes_max.saturating_sub(FRAME_RESERVED_BYTES);
            check("message_bytes_max", v.into(), 1, max.into())?;
            out.message_bytes_max = v;
        }
        if let Some(v) = self.receive_wait {
            check("receive_wait_ms", v.into(), 0, RECEIVE_WAIT_MS_MAX.into())?;
            out.receive_wait = v;
        }
        if let Some(r) = self.redrive.as_set() {
            check(
                "max_receives",
                r.max_receives.into(),
                1,
                MAX_RECEIVES_MAX.into(),
            )?;
            if !crate::is_valid_queue_name(&r.dead_letter_queue) {
                return Err(WireError::new(
                    ErrorCode::InvalidArgument,
                    "dead_letter_queue: not a valid queue name (1 to 80 of [A-Za-z0-9_.-], at most one {tag})",
                ));
            }
            out.redrive = Some(r.clone());
        }
        if self.redrive.is_clear() {
            out.redrive = None;
        }
        if let Some(v) = self.max_depth {
            check("max_depth", v, 1, MAX_DEPTH_MAX)?;
            out.max_depth = Some(v);
        }
        if let Some(v) = self.dedup_window {
            check("dedup_window_ms", v.into(), 0, DEDUP_WINDOW_MS_MAX.into())?;
            out.dedup_window = v;
        }
        if let Some(&b) = self.backoff.as_set() {
            check(
                "backoff_base_ms",
                b.base.into(),
                BACKOFF_BASE_MS_MIN.into(),
                BACKOFF_BASE_MS_MAX.into(),
            )?;
            check(
                "backoff_max_ms",
                b.max.into(),
                b.base.into(),
                BACKOFF_MAX_MS_MAX.into(),
            )?;
            out.backoff = Some(b);
        }
        if self.backoff.is_clear() {
            out.backoff = None;
        }
        if !self.tags().is_empty() {
            out.tags = self.tags().apply_to(&attrs.tags, &TAG_LIMITS)?;
        }
        if !self.annotations().is_empty() {
            out.annotations = self
                .annotations()
                .apply_to(&attrs.annotations, &ANNOTATION_LIMITS)?;
        }
        if let Some(k) = self.kind {
            out.kind = k;
        }
        if let Some(c) = self.content_based_dedup {
            out.content_based_dedup = c;
        }
        if out.content_based_dedup && out.kind != QueueKind::Fifo {
            return Err(WireError::new(
                ErrorCode::InvalidArgument,
                "content_based_dedup: only a FIFO queue deduplicates by content",
            ));
        }
        Ok(out)
    }
}

/// A queue's counters: its gauges (visible, delayed, in flight), what came
/// in and what left it, and the oldest message's age. The identity
/// `sent + moved_in = visible + delayed + in_flight + deleted +
/// dead_lettered + redriven + dropped + purged` holds whenever no request is
/// in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueStats {
    /// Messages that can be received now.
    pub visible: u64,
    /// Messages waiting out a delay or a backoff.
    pub delayed: u64,
    /// Messages under a lease.
    pub in_flight: u64,
    /// Sends accepted (duplicates excluded).
    pub sent: u64,
    /// Messages that arrived from another queue (dead-lettered into it or
    /// redriven back into it).
    pub moved_in: u64,
    /// Deliveries.
    pub received: u64,
    /// Deletes.
    pub deleted: u64,
    /// Leases that expired.
    pub redelivered: u64,
    /// Leases released (visibility set to 0).
    pub released: u64,
    /// Messages moved out to the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages moved out by a redrive.
    pub redriven: u64,
    /// Messages dropped by retention.
    pub dropped: u64,
    /// Messages removed by a purge.
    pub purged: u64,
    /// Age of the oldest message held (since its original send), in ms; 0
    /// when the queue is empty.
    pub oldest_age_ms: u64,
}

impl QueueStats {
    /// Messages held: visible, delayed and in flight.
    #[must_use]
    pub fn depth(&self) -> u64 {
        self.visible
            .saturating_add(self.delayed)
            .saturating_add(self.in_flight)
    }

    /// Age of the oldest message held (zero when the queue is empty).
    #[must_use]
    pub fn oldest_age(&self) -> core::time::Duration {
        core::time::Duration::from_millis(self.oldest_age_ms)
    }

    /// Whether the accounting identity holds: every message that entered
    /// the queue (`sent + moved_in`) is held (visible, delayed, in flight)
    /// or left it (deleted, dead-lettered, redriven, dropped, purged).
    #[must_use]
    pub fn identity_holds(&self) -> bool {
        let lhs = u128::from(self.sent) + u128::from(self.moved_in);
        let rhs = [
            self.visible,
            self.delayed,
            self.in_flight,
            self.deleted,
            self.dead_lettered,
            self.redriven,
            self.dropped,
            self.purged,
        ]
        .iter()
        .map(|&v| u128::from(v))
        .sum::<u128>();
        lhs == rhs
    }

    /// Adds another partition's counters (the server sums shards). The oldest
    /// age is the maximum of both.
    pub fn merge(&mut self, other: &QueueStats) {
        self.visible += other.visible;
        self.delayed += other.delayed;
        self.in_flight += other.in_flight;
        self.sent += other.sent;
        self.moved_in += other.moved_in;
        self.received += other.received;
        self.deleted += other.deleted;
        self.redelivered += other.redelivered;
        self.released += other.released;
        self.dead_lettered += other.dead_lettered;
        self.redriven += other.redriven;
        self.dropped += other.dropped;
        self.purged += other.purged;
        self.oldest_age_ms = self.oldest_age_ms.max(other.oldest_age_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_design() {
        let a = QueueAttributes::default();
        assert_eq!(a.visibility_timeout.get(), 30_000);
        assert_eq!(a.retention.get(), 4 * 86_400_000);
        assert_eq!(a.message_bytes_max, 262_144);
        assert_eq!(a.dedup_window.get(), 300_000);
        assert!(a.redrive.is_none() && a.backoff.is_none() && a.max_depth.is_none());
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "a table of cases, one per attribute")]
    fn out_of_range_names_the_attribute_and_changes_nothing() {
        let a = QueueAttributes::default();
        let cases: Vec<(AttributeUpdate, &str)> = vec![
            (
                AttributeUpdate {
                    visibility_timeout: Some(Millis::new(VISIBILITY_TIMEOUT_MS_MAX + 1)),
                    ..Default::default()
                },
                "visibility_timeout_ms",
            ),
            (
                AttributeUpdate {
                    delay: Some(Millis::new(DELAY_MS_MAX + 1)),
                    ..Default::default()
                },
                "delay_ms",
            ),
            (
                AttributeUpdate {
                    retention: Some(Millis::new(59_999)),
                    ..Default::default()
                },
                "retention_ms",
            ),
            (
                AttributeUpdate {
                    message_bytes_max: Some(0),
                    ..Default::default()
                },
                "message_bytes_max",
            ),
            (
                AttributeUpdate {
                    message_bytes_max: Some(1024 * 1024 - 255),
                    ..Default::default()
                },
                "message_bytes_max",
            ),
            (
                AttributeUpdate {
                    receive_wait: Some(Millis::new(20_001)),
                    ..Default::default()
                },
                "receive_wait_ms",
            ),
            (
                AttributeUpdate {
                    max_depth: Some(0),
                    ..Default::default()
                },
                "max_depth",
            ),
            (
                AttributeUpdate {
                    max_depth: Some(MAX_DEPTH_MAX + 1),
                    ..Default::default()
                },
                "max_depth",
            ),
            (
                AttributeUpdate {
                    dedup_window: Some(Millis::new(3_600_001)),
                    ..Default::default()
                },
                "dedup_window_ms",
            ),
            (
                AttributeUpdate {
                    redrive: Setting::Set(RedrivePolicy {
                        dead_letter_queue: "dlq".into(),
                        max_receives: 0,
                    }),
                    ..Default::default()
                },
                "max_receives",
            ),
            (
                AttributeUpdate {
                    redrive: Setting::Set(RedrivePolicy {
                        dead_letter_queue: "bad name".into(),
                        max_receives: 3,
                    }),
                    ..Default::default()
                },
                "dead_letter_queue",
            ),
            (
                AttributeUpdate {
                    backoff: Setting::Set(Backoff {
                        base: Millis::ZERO,
                        max: Millis::new(10),
                    }),
                    ..Default::default()
                },
                "backoff_base_ms",
            ),
            (
                AttributeUpdate {
                    backoff: Setting::Set(Backoff {
                        base: Millis::new(100),
                        max: Millis::new(10),
                    }),
                    ..Default::default()
                },
                "backoff_max_ms",
            ),
        ];
        for (update, name) in cases {
            let err = update.apply_to(&a, 1024 * 1024).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument);
            assert!(err.message.starts_with(name), "{name}: {}", err.message);
        }
    }

    #[test]
    fn set_and_clear_policies() {
        let a = AttributeUpdate {
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receives: 3,
            }),
            backoff: Setting::Set(Backoff {
                base: Millis::new(10),
                max: Millis::new(1000),
            }),
            ..Default::default()
        }
        .apply_to(&QueueAttributes::default(), 1 << 20)
        .unwrap();
        assert_eq!(a.redrive.as_ref().unwrap().max_receives, 3);
        let b = AttributeUpdate {
            redrive: Setting::Clear,
            backoff: Setting::Clear,
            ..Default::default()
        }
        .apply_to(&a, 1 << 20)
        .unwrap();
        assert!(b.redrive.is_none() && b.backoff.is_none());
        assert_eq!(b.visibility_timeout, a.visibility_timeout);
    }

    #[test]
    fn identity_counts_every_term() {
        let mut s = QueueStats {
            sent: 5,
            moved_in: 1,
            visible: 2,
            deleted: 3,
            ..Default::default()
        };
        assert!(!s.identity_holds());
        s.purged = 1;
        assert!(s.identity_holds());
    }
}
