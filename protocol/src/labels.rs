//! A queue's labels: string pairs kept with its attributes and never
//! interpreted by the engine. A queue has two sets: its **tags** (the
//! user's own, as SQS's `TagQueue` sets them) and its **annotations**
//! (attributes another door keeps with the queue, such as the SQS door's
//! `Policy` and `RedriveAllowPolicy`). Both are sorted by key, keys
//! distinct.
//!
//! On the wire (bits 9 and 10 of the attribute block, protocol version 4) a
//! change is `u16 set_count, set_count × (u16 key_len, key, u16 value_len,
//! value), u16 remove_count, remove_count × (u16 key_len, key)`; a queue's
//! full set is the same with no removals.

use bytes::{BufMut, BytesMut};

use crate::codec::{DecodeError, EncodeError, Reader, len_u16};
use crate::error::{ErrorCode, WireError};

/// Bounds of one set of labels, checked when a change is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelLimits {
    /// The set's name in errors (`tags`, `annotations`).
    pub what: &'static str,
    /// Most pairs.
    pub count_max: usize,
    /// Longest key, in characters (a key has at least one).
    pub key_chars_max: usize,
    /// Longest value, in characters.
    pub value_chars_max: usize,
    /// Most bytes of keys and values together.
    pub bytes_max: usize,
}

/// A queue's tags: 50 pairs, keys of 1 to 128 characters, values of at most
/// 256 (SQS's bounds).
pub const TAG_LIMITS: LabelLimits = LabelLimits {
    what: "tags",
    count_max: 50,
    key_chars_max: 128,
    value_chars_max: 256,
    bytes_max: 50 * (128 + 256) * 4,
};

/// A queue's annotations: 16 pairs, keys of 1 to 128 characters, values of
/// at most 20,480 characters, 64 KiB in all.
pub const ANNOTATION_LIMITS: LabelLimits = LabelLimits {
    what: "annotations",
    count_max: 16,
    key_chars_max: 128,
    value_chars_max: 20_480,
    bytes_max: 64 * 1024,
};

/// String pairs sorted by key, keys distinct.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Labels {
    pairs: Vec<(String, String)>,
}

impl Labels {
    /// No pairs.
    #[must_use]
    pub fn new() -> Labels {
        Labels::default()
    }

    /// The value under `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| self.pairs[i].1.as_str())
    }

    /// The pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of pairs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Sets `key` to `value`, replacing what it held.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        match self.find(&key) {
            Ok(i) => self.pairs[i].1 = value.into(),
            Err(i) => self.pairs.insert(i, (key, value.into())),
        }
    }

    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        match self.find(key) {
            Ok(i) => {
                self.pairs.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Bytes of its keys and values.
    #[must_use]
    pub fn text_bytes(&self) -> usize {
        self.pairs.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.pairs.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// Bytes on the wire (as a change with no removals).
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        4 + self
            .pairs
            .iter()
            .map(|(k, v)| 4 + k.len() + v.len())
            .sum::<usize>()
    }

    /// Writes the set as a change that sets every pair and removes none.
    ///
    /// # Errors
    /// `TooLong` for more than 65,535 pairs or a key or value over 65,535
    /// bytes; `buf` is then unchanged.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        encode_change(self.iter(), core::iter::empty(), buf)
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Labels {
        let mut out = Labels::new();
        for (k, v) in iter {
            out.insert(k, v);
        }
        out
    }
}

/// A change to a set of labels: `remove` is applied first, then `set`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelsUpdate {
    /// Pairs to set (a key given twice takes its last value).
    pub set: Vec<(String, String)>,
    /// Keys to remove (a key not there is no error).
    pub remove: Vec<String>,
}

impl LabelsUpdate {
    /// Whether it changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }

    /// A change that sets every pair of `labels`.
    #[must_use]
    pub fn set_all(labels: &Labels) -> LabelsUpdate {
        LabelsUpdate {
            set: labels
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            remove: Vec::new(),
        }
    }

    /// `labels` with the change applied, checked against `limits`.
    ///
    /// # Errors
    /// `InvalidArgument`, starting with `limits.what`, for an empty or long
    /// key, a long value, or a result with too many pairs or bytes.
    pub fn apply_to(&self, labels: &Labels, limits: &LabelLimits) -> Result<Labels, WireError> {
        let what = limits.what;
        let bad = |reason: String| {
            WireError::new(ErrorCode::InvalidArgument, format!("{what}: {reason}"))
        };
        let mut out = labels.clone();
        for key in &self.remove {
            out.remove(key);
        }
        for (key, value) in &self.set {
            let chars = key.chars().count();
            if chars == 0 || chars > limits.key_chars_max {
                return Err(bad(format!(
                    "a key has 1 to {} characters, not {chars}",
                    limits.key_chars_max
                )));
            }
            let chars = value.chars().count();
            if chars > limits.value_chars_max {
                return Err(bad(format!(
                    "the value of {key:?} has {chars} characters, more than {}",
                    limits.value_chars_max
                )));
            }
            out.insert(key.clone(), value.clone());
        }
        if out.len() > limits.count_max {
            return Err(bad(format!(
                "{} pairs, more than {}",
                out.len(),
                limits.count_max
            )));
        }
        if out.text_bytes() > limits.bytes_max {
            return Err(bad(format!(
                "{} bytes of keys and values, more than {}",
                out.text_bytes(),
                limits.bytes_max
            )));
        }
        Ok(out)
    }

    /// Bytes on the wire.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        4 + self
            .set
            .iter()
            .map(|(k, v)| 4 + k.len() + v.len())
            .sum::<usize>()
            + self.remove.iter().map(|k| 2 + k.len()).sum::<usize>()
    }

    /// Writes the change.
    ///
    /// # Errors
    /// `TooLong` for more than 65,535 pairs or keys, or a key or value over
    /// 65,535 bytes; `buf` is then unchanged.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        encode_change(
            self.set.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            self.remove.iter().map(String::as_str),
            buf,
        )
    }

    /// Reads a change.
    ///
    /// # Errors
    /// `Truncated`, or `InvalidUtf8` for a key or value that is not UTF-8.
    pub fn decode(r: &mut Reader, field: &'static str) -> Result<LabelsUpdate, DecodeError> {
        let count = r.u16(field)?;
        let mut set = Vec::with_capacity(usize::from(count).min(r.remaining() / 4));
        for _ in 0..count {
            let len = r.u16(field)?;
            let key = r.string(len.into(), field)?;
            let len = r.u16(field)?;
            let value = r.string(len.into(), field)?;
            set.push((key, value));
        }
        let count = r.u16(field)?;
        let mut remove = Vec::with_capacity(usize::from(count).min(r.remaining() / 2));
        for _ in 0..count {
            let len = r.u16(field)?;
            remove.push(r.string(len.into(), field)?);
        }
        Ok(LabelsUpdate { set, remove })
    }
}

fn encode_change<'a>(
    set: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    remove: impl Iterator<Item = &'a str> + Clone,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let start = buf.len();
    let written = write_change(set, remove, buf);
    if written.is_err() {
        buf.truncate(start);
    }
    written
}

fn write_change<'a>(
    set: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    remove: impl Iterator<Item = &'a str> + Clone,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let text = |buf: &mut BytesMut, s: &str, field| -> Result<(), EncodeError> {
        buf.put_u16_le(len_u16(s.len(), field)?);
        buf.put_slice(s.as_bytes());
        Ok(())
    };
    buf.put_u16_le(len_u16(set.clone().count(), "labels")?);
    for (k, v) in set {
        text(buf, k, "label key")?;
        text(buf, v, "label value")?;
    }
    buf.put_u16_le(len_u16(remove.clone().count(), "labels")?);
    for k in remove {
        text(buf, k, "label key")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn sorted_and_distinct() {
        let l: Labels = pairs(&[("b", "1"), ("a", "2"), ("b", "3")])
            .into_iter()
            .collect();
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![("a", "2"), ("b", "3")]);
        assert_eq!(l.get("b"), Some("3"));
        assert_eq!(l.get("c"), None);
    }

    #[test]
    fn change_removes_then_sets() {
        let l: Labels = pairs(&[("a", "1"), ("b", "2")]).into_iter().collect();
        let u = LabelsUpdate {
            set: pairs(&[("c", "3"), ("b", "9")]),
            remove: vec!["a".into(), "b".into(), "zz".into()],
        };
        let out = u.apply_to(&l, &TAG_LIMITS).unwrap();
        assert_eq!(out.iter().collect::<Vec<_>>(), vec![("b", "9"), ("c", "3")]);
    }

    #[test]
    fn limits_name_the_set() {
        let empty = Labels::new();
        let cases = [
            pairs(&[("", "v")]),
            pairs(&[(&"k".repeat(129), "v")]),
            pairs(&[("k", &"é".repeat(257))]),
        ];
        for set in cases {
            let err = LabelsUpdate {
                set,
                remove: vec![],
            }
            .apply_to(&empty, &TAG_LIMITS)
            .unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument);
            assert!(err.message.starts_with("tags: "), "{}", err.message);
        }
        // 128 characters of two bytes each are within the bound.
        let ok = LabelsUpdate {
            set: pairs(&[(&"é".repeat(128), &"é".repeat(256))]),
            remove: vec![],
        };
        assert!(ok.apply_to(&empty, &TAG_LIMITS).is_ok());
        let many = LabelsUpdate {
            set: (0..51).map(|i| (format!("k{i}"), String::new())).collect(),
            remove: vec![],
        };
        let err = many.apply_to(&empty, &TAG_LIMITS).unwrap_err();
        assert!(err.message.contains("51 pairs"), "{}", err.message);
        let big = LabelsUpdate {
            set: (0..4)
                .map(|i| (format!("k{i}"), "x".repeat(20_000)))
                .collect(),
            remove: vec![],
        };
        let err = big.apply_to(&empty, &ANNOTATION_LIMITS).unwrap_err();
        assert!(
            err.message.starts_with("annotations: 80008 bytes"),
            "{}",
            err.message
        );
    }

    #[test]
    fn wire_round_trip_and_truncation() {
        let u = LabelsUpdate {
            set: pairs(&[("k", "vé")]),
            remove: vec!["gone".into()],
        };
        let mut buf = BytesMut::new();
        u.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), u.encoded_len());
        assert_eq!(
            &buf[..],
            b"\x01\x00\x01\x00k\x03\x00v\xc3\xa9\x01\x00\x04\x00gone"
        );
        let bytes = buf.freeze();
        let mut r = Reader::new(bytes.clone());
        assert_eq!(LabelsUpdate::decode(&mut r, "tags"), Ok(u));
        assert!(r.is_empty());
        for cut in 0..bytes.len() {
            let mut r = Reader::new(bytes.slice(..cut));
            assert!(matches!(
                LabelsUpdate::decode(&mut r, "tags"),
                Err(DecodeError::Truncated { .. })
            ));
        }
        let mut r = Reader::new(Bytes::from_static(b"\x01\x00\x01\x00\xff\x00\x00\x00\x00"));
        assert!(matches!(
            LabelsUpdate::decode(&mut r, "tags"),
            Err(DecodeError::InvalidUtf8 { .. })
        ));
        let l: Labels = pairs(&[("a", "1")]).into_iter().collect();
        let mut buf = BytesMut::new();
        l.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), l.encoded_len());
        let back = LabelsUpdate::decode(&mut Reader::new(buf.freeze()), "tags").unwrap();
        assert_eq!(back, LabelsUpdate::set_all(&l));
    }
}
