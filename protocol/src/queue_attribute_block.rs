//! The attribute block of `CREATE_QUEUE`, `SET_QUEUE` and the `GET_QUEUE` reply.
//!
//! `u16 present_mask, u16 clear_mask`, then one field per set bit of
//! `present_mask`, in bit order. `clear_mask` may only carry the redrive and
//! backoff bits, and never a bit that is also present. Ranges are not checked
//! here: the broker does that with [`AttributeUpdate::apply_to`].

use bytes::{BufMut, BytesMut};

use crate::codec::{DecodeError, EncodeError, Reader, len_u8};
use crate::labels::LabelsUpdate;
use crate::millis::Millis;
use crate::name::is_valid_name_bytes;
use crate::queue_attributes::{
    AttributeUpdate, Backoff, LabelChanges, QueueAttributes, QueueKind, RedrivePolicy, Setting,
};

/// Bits of the present and clear masks.
pub mod bits {
    /// `visibility_timeout_ms: u32`.
    pub const VISIBILITY_TIMEOUT: u16 = 1 << 0;
    /// `delay_ms: u32`.
    pub const DELAY: u16 = 1 << 1;
    /// `retention_ms: u32`.
    pub const RETENTION: u16 = 1 << 2;
    /// `message_bytes_max: u32`.
    pub const MESSAGE_BYTES_MAX: u16 = 1 << 3;
    /// `receive_wait_ms: u32`.
    pub const RECEIVE_WAIT: u16 = 1 << 4;
    /// `redrive: u8 len + dead-letter queue name, u16 max_receives`.
    pub const REDRIVE: u16 = 1 << 5;
    /// `max_depth: u64`.
    pub const MAX_DEPTH: u16 = 1 << 6;
    /// `dedup_window_ms: u32`.
    pub const DEDUP_WINDOW: u16 = 1 << 7;
    /// `backoff: u32 base_ms, u32 max_ms`.
    pub const BACKOFF: u16 = 1 << 8;
    /// `tags`: a change of labels (see [`crate::labels`]); version 4.
    pub const TAGS: u16 = 1 << 9;
    /// `annotations`: a change of labels; version 4.
    pub const ANNOTATIONS: u16 = 1 << 10;
    /// `kind: u8`, 0 standard or 1 FIFO; version 5.
    pub const KIND: u16 = 1 << 11;
    /// `content_based_dedup: u8`, 0 or 1; version 5.
    pub const CONTENT_BASED_DEDUP: u16 = 1 << 12;
    /// Every defined bit.
    pub const ALL: u16 = (1 << 13) - 1;
    /// Bits `clear_mask` may carry.
    pub const CLEARABLE: u16 = REDRIVE | BACKOFF;
    /// Bits every `GET_QUEUE` reply carries (the others are optional
    /// attributes, absent when unset).
    pub const ALWAYS_PRESENT: u16 =
        VISIBILITY_TIMEOUT | DELAY | RETENTION | MESSAGE_BYTES_MAX | RECEIVE_WAIT | DEDUP_WINDOW;
}

/// Bytes of the two masks.
const MASKS_BYTES: usize = 4;

/// A labels change whose bit is present: it changes something (an empty
/// one is written by leaving the bit out, so each block has one encoding).
fn labels_change(r: &mut Reader, field: &'static str) -> Result<LabelsUpdate, DecodeError> {
    let offset = r.offset();
    let change = LabelsUpdate::decode(r, field)?;
    if change.is_empty() {
        return Err(DecodeError::InvalidValue {
            offset,
            field,
            reason: "a present labels bit carries pairs or keys; an empty change leaves it out",
        });
    }
    Ok(change)
}

fn labels_len(u: &LabelsUpdate) -> usize {
    if u.is_empty() { 0 } else { u.encoded_len() }
}

impl AttributeUpdate {
    fn present_mask(&self) -> u16 {
        let mut m = 0;
        let mut set = |present: bool, bit: u16| {
            if present {
                m |= bit;
            }
        };
        set(self.visibility_timeout.is_some(), bits::VISIBILITY_TIMEOUT);
        set(self.delay.is_some(), bits::DELAY);
        set(self.retention.is_some(), bits::RETENTION);
        set(self.message_bytes_max.is_some(), bits::MESSAGE_BYTES_MAX);
        set(self.receive_wait.is_some(), bits::RECEIVE_WAIT);
        set(self.redrive.as_set().is_some(), bits::REDRIVE);
        set(self.max_depth.is_some(), bits::MAX_DEPTH);
        set(self.dedup_window.is_some(), bits::DEDUP_WINDOW);
        set(self.backoff.as_set().is_some(), bits::BACKOFF);
        set(!self.tags().is_empty(), bits::TAGS);
        set(!self.annotations().is_empty(), bits::ANNOTATIONS);
        set(self.kind.is_some(), bits::KIND);
        set(
            self.content_based_dedup.is_some(),
            bits::CONTENT_BASED_DEDUP,
        );
        m
    }

    fn clear_mask(&self) -> u16 {
        (if self.redrive.is_clear() {
            bits::REDRIVE
        } else {
            0
        }) | (if self.backoff.is_clear() {
            bits::BACKOFF
        } else {
            0
        })
    }

    /// Bytes of the attribute block on the wire.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        let u32s = [
            self.visibility_timeout.is_some(),
            self.delay.is_some(),
            self.retention.is_some(),
            self.message_bytes_max.is_some(),
            self.receive_wait.is_some(),
            self.dedup_window.is_some(),
        ]
        .iter()
        .filter(|&&present| present)
        .count();
        MASKS_BYTES
            + 4 * u32s
            + self
                .redrive
                .as_set()
                .map_or(0, |r| 1 + r.dead_letter_queue.len() + 2)
            + self.max_depth.map_or(0, |_| 8)
            + self.backoff.as_set().map_or(0, |_| 8)
            + labels_len(self.tags())
            + labels_len(self.annotations())
            + usize::from(self.kind.is_some())
            + usize::from(self.content_based_dedup.is_some())
    }

    /// Writes the attribute block. An update that both sets and clears a
    /// policy is written as it is, and decoders reject it as malformed.
    ///
    /// # Errors
    /// `TooLong` when a dead-letter queue name has more than 255 bytes, or
    /// labels do not fit their `u16` counts and lengths; `buf` is then
    /// unchanged.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let dlq_len = match self.redrive.as_set() {
            Some(r) => len_u8(r.dead_letter_queue.len(), "redrive.dead_letter_queue")?,
            None => 0,
        };
        let start = buf.len();
        buf.reserve(self.encoded_len());
        buf.put_u16_le(self.present_mask());
        buf.put_u16_le(self.clear_mask());
        let put = |buf: &mut BytesMut, v: Option<u32>| {
            if let Some(v) = v {
                buf.put_u32_le(v);
            }
        };
        put(buf, self.visibility_timeout.map(Millis::get));
        put(buf, self.delay.map(Millis::get));
        put(buf, self.retention.map(Millis::get));
        put(buf, self.message_bytes_max);
        put(buf, self.receive_wait.map(Millis::get));
        if let Some(r) = self.redrive.as_set() {
            buf.put_u8(dlq_len);
            buf.put_slice(r.dead_letter_queue.as_bytes());
            buf.put_u16_le(r.max_receives);
        }
        if let Some(d) = self.max_depth {
            buf.put_u64_le(d);
        }
        put(buf, self.dedup_window.map(Millis::get));
        if let Some(b) = self.backoff.as_set() {
            buf.put_u32_le(b.base.get());
            buf.put_u32_le(b.max.get());
        }
        for labels in [self.tags(), self.annotations()] {
            if !labels.is_empty() {
                if let Err(e) = labels.encode(buf) {
                    buf.truncate(start);
                    return Err(e);
                }
            }
        }
        if let Some(k) = self.kind {
            buf.put_u8(k.code());
        }
        if let Some(c) = self.content_based_dedup {
            buf.put_u8(u8::from(c));
        }
        Ok(())
    }

    /// Reads an attribute block.
    ///
    /// # Errors
    /// `InvalidValue` for an undefined bit, a clear bit other than redrive
    /// and backoff, or a bit both present and cleared; `InvalidQueueName` for
    /// a bad dead-letter queue name; `Truncated`.
    pub fn decode(r: &mut Reader) -> Result<AttributeUpdate, DecodeError> {
        let present_offset = r.offset();
        let present = r.u16("present_mask")?;
        let clear_offset = r.offset();
        let clear = r.u16("clear_mask")?;
        if present & !bits::ALL != 0 {
            return Err(DecodeError::InvalidValue {
                offset: present_offset,
                field: "present_mask",
                reason: "undefined attribute bit",
            });
        }
        if clear & !bits::CLEARABLE != 0 {
            return Err(DecodeError::InvalidValue {
                offset: clear_offset,
                field: "clear_mask",
                reason: "only redrive (bit 5) and backoff (bit 8) can be cleared",
            });
        }
        if clear & present != 0 {
            return Err(DecodeError::InvalidValue {
                offset: clear_offset,
                field: "clear_mask",
                reason: "an attribute is both present and cleared",
            });
        }
        let mut u32_if = |bit: u16, field: &'static str| -> Result<Option<u32>, DecodeError> {
            if present & bit == 0 {
                Ok(None)
            } else {
                r.u32(field).map(Some)
            }
        };
        let mut out = AttributeUpdate {
            visibility_timeout: u32_if(bits::VISIBILITY_TIMEOUT, "visibility_timeout_ms")?
                .map(Millis::new),
            delay: u32_if(bits::DELAY, "delay_ms")?.map(Millis::new),
            retention: u32_if(bits::RETENTION, "retention_ms")?.map(Millis::new),
            message_bytes_max: u32_if(bits::MESSAGE_BYTES_MAX, "message_bytes_max")?,
            receive_wait: u32_if(bits::RECEIVE_WAIT, "receive_wait_ms")?.map(Millis::new),
            redrive: if clear & bits::REDRIVE != 0 {
                Setting::Clear
            } else {
                Setting::Keep
            },
            backoff: if clear & bits::BACKOFF != 0 {
                Setting::Clear
            } else {
                Setting::Keep
            },
            ..AttributeUpdate::default()
        };
        if present & bits::REDRIVE != 0 {
            let field = "redrive.dead_letter_queue";
            let len = r.u8(field)?;
            let offset = r.offset();
            let name = r.bytes(len.into(), field)?;
            // A valid name is ASCII, so the conversion cannot fail.
            let dead_letter_queue = match core::str::from_utf8(&name) {
                Ok(s) if is_valid_name_bytes(&name) => s.to_owned(),
                _ => return Err(DecodeError::InvalidQueueName { offset, field }),
            };
            out.redrive = Setting::Set(RedrivePolicy {
                dead_letter_queue,
                max_receives: r.u16("redrive.max_receives")?,
            });
        }
        if present & bits::MAX_DEPTH != 0 {
            out.max_depth = Some(r.u64("max_depth")?);
        }
        if present & bits::DEDUP_WINDOW != 0 {
            out.dedup_window = Some(Millis::new(r.u32("dedup_window_ms")?));
        }
        if present & bits::BACKOFF != 0 {
            out.backoff = Setting::Set(Backoff {
                base: Millis::new(r.u32("backoff.base_ms")?),
                max: Millis::new(r.u32("backoff.max_ms")?),
            });
        }
        if present & bits::TAGS != 0 {
            *out.tags_mut() = labels_change(r, "tags")?;
        }
        if present & bits::ANNOTATIONS != 0 {
            *out.annotations_mut() = labels_change(r, "annotations")?;
        }
        decode_kind(r, present, &mut out)?;
        Ok(out)
    }
}

/// Bits 11 and 12 (version 5): the kind and the content-based dedup flag,
/// one byte each, 0 or 1.
fn decode_kind(r: &mut Reader, present: u16, out: &mut AttributeUpdate) -> Result<(), DecodeError> {
    if present & bits::KIND != 0 {
        let offset = r.offset();
        out.kind = Some(
            QueueKind::from_code(r.u8("kind")?).ok_or(DecodeError::InvalidValue {
                offset,
                field: "kind",
                reason: "a queue's kind is 0 (standard) or 1 (FIFO)",
            })?,
        );
    }
    if present & bits::CONTENT_BASED_DEDUP != 0 {
        let offset = r.offset();
        out.content_based_dedup = Some(match r.u8("content_based_dedup")? {
            0 => false,
            1 => true,
            _ => {
                return Err(DecodeError::InvalidValue {
                    offset,
                    field: "content_based_dedup",
                    reason: "a flag is 0 or 1",
                });
            }
        });
    }
    Ok(())
}

impl From<&QueueAttributes> for AttributeUpdate {
    /// An update that sets every attribute to `attrs`' value (and leaves the
    /// optional ones that are unset absent).
    fn from(attrs: &QueueAttributes) -> AttributeUpdate {
        AttributeUpdate {
            visibility_timeout: Some(attrs.visibility_timeout),
            delay: Some(attrs.delay),
            retention: Some(attrs.retention),
            message_bytes_max: Some(attrs.message_bytes_max),
            receive_wait: Some(attrs.receive_wait),
            redrive: attrs.redrive.clone().into(),
            max_depth: attrs.max_depth,
            dedup_window: Some(attrs.dedup_window),
            backoff: attrs.backoff.into(),
            labels: if attrs.tags.is_empty() && attrs.annotations.is_empty() {
                None
            } else {
                Some(Box::new(LabelChanges {
                    tags: LabelsUpdate::set_all(&attrs.tags),
                    annotations: LabelsUpdate::set_all(&attrs.annotations),
                }))
            },
            // Absent when standard and not set: a standard queue's block
            // is the one versions before 5 know.
            kind: (attrs.kind != QueueKind::Standard).then_some(attrs.kind),
            content_based_dedup: attrs.content_based_dedup.then_some(true),
        }
    }
}

impl QueueAttributes {
    /// Bytes of the attribute block that carries every attribute (as in a
    /// `GET_QUEUE` reply).
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        AttributeUpdate::from(self).encoded_len()
    }

    /// Writes the attribute block with every attribute present; redrive, max
    /// depth and backoff are absent when unset.
    ///
    /// # Errors
    /// `TooLong` when the dead-letter queue name has more than 255 bytes.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        AttributeUpdate::from(self).encode(buf)
    }

    /// Reads an attribute block that must carry every attribute (redrive, max
    /// depth and backoff may be absent: unset) and clear nothing.
    ///
    /// # Errors
    /// As [`AttributeUpdate::decode`], and `InvalidValue` when an attribute
    /// is missing or something is cleared.
    pub fn decode(r: &mut Reader) -> Result<QueueAttributes, DecodeError> {
        let offset = r.offset();
        let u = AttributeUpdate::decode(r)?;
        let missing = DecodeError::InvalidValue {
            offset,
            field: "present_mask",
            reason: "a queue's attribute block carries every attribute and clears none",
        };
        if u.redrive.is_clear()
            || u.backoff.is_clear()
            || !u.tags().remove.is_empty()
            || !u.annotations().remove.is_empty()
        {
            return Err(missing);
        }
        if u.kind == Some(QueueKind::Standard) || u.content_based_dedup == Some(false) {
            return Err(DecodeError::InvalidValue {
                offset,
                field: "kind",
                reason: "a queue's block leaves out a standard kind and a content-based \
                         dedup that is off, so that each queue has one encoding",
            });
        }
        let labels = u.labels.map(|l| *l).unwrap_or_default();
        // A queue's labels are a map: one encoding each, in key order with
        // every key once, so that a block decodes to what re-encodes to it.
        let in_order = |pairs: &[(String, String)]| pairs.windows(2).all(|w| w[0].0 < w[1].0);
        if !in_order(&labels.tags.set) || !in_order(&labels.annotations.set) {
            return Err(DecodeError::InvalidValue {
                offset,
                field: "tags",
                reason: "a queue's tags and annotations come in key order, each key once",
            });
        }
        match (
            u.visibility_timeout,
            u.delay,
            u.retention,
            u.message_bytes_max,
            u.receive_wait,
            u.dedup_window,
        ) {
            (Some(vt), Some(d), Some(ret), Some(mbm), Some(rw), Some(dw)) => Ok(QueueAttributes {
                visibility_timeout: vt,
                delay: d,
                retention: ret,
                message_bytes_max: mbm,
                receive_wait: rw,
                redrive: u.redrive.as_set().cloned(),
                max_depth: u.max_depth,
                dedup_window: dw,
                backoff: u.backoff.as_set().copied(),
                tags: labels.tags.set.into_iter().collect(),
                annotations: labels.annotations.set.into_iter().collect(),
                kind: u.kind.unwrap_or_default(),
                content_based_dedup: u.content_based_dedup.unwrap_or(false),
            }),
            _ => Err(missing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn decode(bytes: &[u8]) -> Result<AttributeUpdate, DecodeError> {
        let mut r = Reader::new(Bytes::copy_from_slice(bytes));
        let u = AttributeUpdate::decode(&mut r)?;
        r.finish()?;
        Ok(u)
    }

    #[test]
    fn fields_follow_bit_order() {
        let u = AttributeUpdate {
            delay: Some(Millis::new(0x0102_0304)),
            backoff: Setting::Set(Backoff::new(Millis::new(5), Millis::new(6))),
            redrive: Setting::Set(RedrivePolicy {
                dead_letter_queue: "d".into(),
                max_receives: 3,
            }),
            ..AttributeUpdate::default()
        };
        let mut buf = BytesMut::new();
        u.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), u.encoded_len());
        assert_eq!(
            &buf[..],
            &[
                0x22, 0x01, 0, 0, // masks: bits 1, 5, 8
                4, 3, 2, 1, // delay
                1, b'd', 3, 0, // redrive
                5, 0, 0, 0, 6, 0, 0, 0, // backoff
            ]
        );
        assert_eq!(decode(&buf), Ok(u));
    }

    #[test]
    fn masks_are_strict() {
        assert!(matches!(
            decode(&[0, 0x20, 0, 0]),
            Err(DecodeError::InvalidValue {
                field: "present_mask",
                ..
            })
        ));
        assert!(matches!(
            decode(&[0, 0, 1, 0]),
            Err(DecodeError::InvalidValue {
                field: "clear_mask",
                ..
            })
        ));
        let both = [0x20, 0, 0x20, 0, 1, b'd', 1, 0];
        assert!(matches!(
            decode(&both),
            Err(DecodeError::InvalidValue {
                field: "clear_mask",
                ..
            })
        ));
        let cleared = decode(&[0, 0, 0x20, 0x01]).unwrap();
        assert!(cleared.redrive.is_clear() && cleared.backoff.is_clear());
        assert!(matches!(
            decode(&[0x20, 0, 0, 0, 1, b' ', 1, 0]),
            Err(DecodeError::InvalidQueueName { offset: 5, .. })
        ));
    }

    #[test]
    fn kind_and_content_dedup_are_one_byte_each_and_strict() {
        let fifo = decode(&[0, 0x18, 0, 0, 1, 1]).unwrap();
        assert_eq!(fifo.kind, Some(QueueKind::Fifo));
        assert_eq!(fifo.content_based_dedup, Some(true));
        assert!(matches!(
            decode(&[0, 0x08, 0, 0, 2]),
            Err(DecodeError::InvalidValue {
                offset: 4,
                field: "kind",
                ..
            })
        ));
        assert!(matches!(
            decode(&[0, 0x10, 0, 0, 7]),
            Err(DecodeError::InvalidValue {
                field: "content_based_dedup",
                ..
            })
        ));
        // A queue's block has one encoding: a standard kind is left out.
        let mut buf = BytesMut::new();
        QueueAttributes::default().encode(&mut buf).unwrap();
        let mask = u16::from_le_bytes([buf[0], buf[1]]);
        assert_eq!(mask & (bits::KIND | bits::CONTENT_BASED_DEDUP), 0);
        let mut with_standard = buf.to_vec();
        with_standard[1] |= 0x08;
        with_standard.push(0);
        let mut r = Reader::new(Bytes::from(with_standard));
        assert!(matches!(
            QueueAttributes::decode(&mut r),
            Err(DecodeError::InvalidValue { field: "kind", .. })
        ));
        let fifo = QueueAttributes {
            kind: QueueKind::Fifo,
            content_based_dedup: true,
            ..QueueAttributes::default()
        };
        let mut buf = BytesMut::new();
        fifo.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), fifo.encoded_len());
        let mut r = Reader::new(buf.freeze());
        assert_eq!(QueueAttributes::decode(&mut r), Ok(fifo));
    }

    #[test]
    fn queue_attributes_need_every_attribute() {
        let a = QueueAttributes {
            max_depth: Some(10),
            ..QueueAttributes::default()
        };
        let mut buf = BytesMut::new();
        a.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), a.encoded_len());
        let mut r = Reader::new(buf.freeze());
        assert_eq!(QueueAttributes::decode(&mut r), Ok(a));
        let partial = AttributeUpdate {
            delay: Some(Millis::new(1)),
            ..AttributeUpdate::default()
        };
        let mut buf = BytesMut::new();
        partial.encode(&mut buf).unwrap();
        assert!(QueueAttributes::decode(&mut Reader::new(buf.freeze())).is_err());
    }

    #[test]
    fn a_queues_labels_come_in_key_order_each_key_once() {
        for pairs in [[("b", "1"), ("a", "2")], [("a", "1"), ("a", "2")]] {
            let mut u = AttributeUpdate::from(&QueueAttributes::default());
            u.tags_mut().set = pairs.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec();
            let mut buf = BytesMut::new();
            u.encode(&mut buf).unwrap();
            let err = QueueAttributes::decode(&mut Reader::new(buf.freeze())).unwrap_err();
            assert!(
                matches!(err, DecodeError::InvalidValue { field: "tags", .. }),
                "{pairs:?}: {err:?}"
            );
        }
    }

    #[test]
    fn labels_follow_backoff_and_a_full_block_removes_nothing() {
        let mut a = QueueAttributes::default();
        a.tags.insert("team", "payments");
        a.annotations.insert("Policy", "{}");
        let mut buf = BytesMut::new();
        a.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), a.encoded_len());
        let mut r = Reader::new(buf.clone().freeze());
        assert_eq!(QueueAttributes::decode(&mut r), Ok(a.clone()));
        let update = decode(&buf).unwrap();
        assert_eq!(
            update.tags().set,
            vec![("team".to_owned(), "payments".to_owned())]
        );
        // The block ends with the annotations: u16 1, "Policy", "{}", u16 0.
        assert!(buf.ends_with(b"\x01\x00\x06\x00Policy\x02\x00{}\x00\x00"));
        let mut untag = AttributeUpdate::default();
        untag.tags_mut().remove.push("team".into());
        let mut buf = BytesMut::new();
        untag.encode(&mut buf).unwrap();
        assert_eq!(&buf[..4], &[0, 0x02, 0, 0]);
        assert_eq!(decode(&buf), Ok(untag));
        assert!(QueueAttributes::decode(&mut Reader::new(buf.freeze())).is_err());
    }
}
