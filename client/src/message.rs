//! [`SendEntry`]: one message to send, with its delay as a [`Duration`].

use std::time::Duration;

use bytes::Bytes;
use sluice_protocol::{MessageAttributes, SendEntryRef};

use crate::error::Result;
use crate::fields::wire_ms;

/// One message to send: a body and, optionally, a delivery delay, a dedup
/// key and attributes.
///
/// ```
/// use std::time::Duration;
/// use sluice_client::SendEntry;
///
/// let entry = SendEntry::new("order 42")
///     .delay(Duration::from_secs(5))
///     .dedup_key("order-42");
/// assert_eq!(entry.delay, Some(Duration::from_secs(5)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendEntry {
    /// The body.
    pub body: Bytes,
    /// How long the message stays invisible after the send (at most
    /// 15 min); `None` uses the queue's delay.
    pub delay: Option<Duration>,
    /// A dedup key (1 to 128 bytes): a send with a key the queue accepted
    /// within its dedup window enqueues nothing and returns the first
    /// message's id. `None` (or empty) for no deduplication.
    pub dedup_key: Option<Bytes>,
    /// The message's attributes.
    pub attributes: MessageAttributes,
}

impl SendEntry {
    /// An entry with just a body.
    #[must_use]
    pub fn new(body: impl Into<Bytes>) -> SendEntry {
        SendEntry {
            body: body.into(),
            ..SendEntry::default()
        }
    }

    /// Sets the delivery delay.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> SendEntry {
        self.delay = Some(delay);
        self
    }

    /// Sets the dedup key.
    #[must_use]
    pub fn dedup_key(mut self, key: impl Into<Bytes>) -> SendEntry {
        self.dedup_key = Some(key.into());
        self
    }

    /// Sets the attributes.
    #[must_use]
    pub fn attributes(mut self, attributes: MessageAttributes) -> SendEntry {
        self.attributes = attributes;
        self
    }

    /// The entry as the protocol encodes it.
    ///
    /// # Errors
    /// `InvalidArgument` for a delay the protocol's field cannot carry.
    pub(crate) fn wire(&self) -> Result<SendEntryRef<'_>> {
        Ok(SendEntryRef {
            body: &self.body,
            delay_ms: self.delay.map(|d| wire_ms(d, "delay")).transpose()?,
            dedup_key: self.dedup_key.as_deref().filter(|k| !k.is_empty()),
            attributes: self.attributes.as_view(),
        })
    }

    /// Bytes on the wire.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        // The delay field has the same size whatever its value.
        SendEntryRef {
            body: &self.body,
            delay_ms: self.delay.map(|_| 0),
            dedup_key: self.dedup_key.as_deref().filter(|k| !k.is_empty()),
            attributes: self.attributes.as_view(),
        }
        .encoded_len()
    }
}

impl From<Bytes> for SendEntry {
    fn from(body: Bytes) -> SendEntry {
        SendEntry::new(body)
    }
}

impl From<&'static str> for SendEntry {
    fn from(body: &'static str) -> SendEntry {
        SendEntry::new(body)
    }
}

impl From<Vec<u8>> for SendEntry {
    fn from(body: Vec<u8>) -> SendEntry {
        SendEntry::new(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn the_wire_form_carries_the_delay_in_milliseconds() {
        let entry = SendEntry::new("x")
            .delay(Duration::from_micros(2500))
            .dedup_key("");
        let wire = entry.wire().unwrap();
        assert_eq!(wire.delay_ms, Some(3), "rounded up");
        assert_eq!(wire.dedup_key, None, "an empty key is no key");
        assert_eq!(entry.encoded_len(), wire.encoded_len());
        let plain = SendEntry::new("x");
        assert_eq!(plain.wire().unwrap().delay_ms, None);

        let err = SendEntry::new("x")
            .delay(Duration::from_secs(u64::MAX))
            .wire()
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("delay")),
            "{err}"
        );
    }
}
