//! SQS message attributes at the door: checked as SQS checks them, and
//! stored as one engine attribute pair each: the key is its name; the value
//! is the string itself for DataType `String`, else
//! `"\0" + DataType + "\0" + payload` (a Number's text, a Binary's base64).
//! A String value cannot begin with NUL (SQS refuses that character), so
//! the forms never meet, and a pair sent through the native door reads as a
//! String attribute. The `AWSTraceHeader` system attribute is kept under
//! the reserved key `AWS.TraceHeader` (SQS names cannot begin with `AWS.`),
//! and the body's MD5, as the send computed it, under `AWS.MD5OfBody`
//! ([`MD5_KEY`]), so that a receive need not hash the body again.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sluice_protocol::AttributesRef;
use sluice_protocol::message::SOURCE_ATTRIBUTE;

use super::errors::SqsError;
use super::fifo;
use super::md5::SqsAttribute;
use super::wire::Input;

/// The engine key of the `AWSTraceHeader` system attribute.
pub(crate) const TRACE_KEY: &str = "AWS.TraceHeader";

/// The engine key under which a message sent through the door keeps its
/// body's MD5 (32 lower-case hex digits), for its receives' `MD5OfBody`.
/// Kept only by a message whose body and engine attributes, with it, stay
/// within [`MD5_KEPT_BYTES_MAX`]; any other's receive hashes its body.
pub(crate) const MD5_KEY: &str = "AWS.MD5OfBody";

/// The engine size (body and attributes) within which a message keeps its
/// body's MD5: the smallest `MaximumMessageSize` a queue can have, so the
/// digest never makes a message too large for its queue (the engine counts
/// it in the message's size; SQS does not count system attributes).
pub(crate) const MD5_KEPT_BYTES_MAX: usize = 1024;

/// Whether `c` may appear in a message (SQS's set).
fn allowed_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// Whether every character of `s` may appear in a message: eight bytes at
/// a time while they are ASCII and none is a control byte (all allowed),
/// character by character ([`allowed_char`]) from the first word that is
/// not. Every message body and attribute value is checked.
pub(crate) fn allowed_text(s: &str) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    let bytes = s.as_bytes();
    let mut words = bytes.chunks_exact(8);
    let plain = words.all(|w| {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        let w = u64::from_le_bytes(b);
        // No byte at 0x80 or above, and none below 0x20 (the test for a
        // byte below n, exact for n up to 0x80).
        w & TOPS == 0 && w.wrapping_sub(0x20 * ONES) & !w & TOPS == 0
    }) && words.remainder().iter().all(|&b| (0x20..0x80).contains(&b));
    plain || s.chars().all(allowed_char)
}

pub(crate) fn check_attribute_name(name: &str) -> Result<(), SqsError> {
    let lower = name.to_ascii_lowercase();
    let ok = (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.");
    if ok {
        Ok(())
    } else {
        Err(SqsError::invalid(format!(
            "Message attribute name '{name}' is invalid."
        )))
    }
}

/// One `MessageAttributeValue` object read.
pub(crate) fn attribute(name: &str, v: &Input) -> Result<SqsAttribute, SqsError> {
    let data_type = v.opt_str("DataType")?.ok_or_else(|| {
        SqsError::invalid(format!(
            "The message attribute '{name}' must contain non-empty message attribute type."
        ))
    })?;
    let base = ["String", "Number", "Binary"].into_iter().find(|b| {
        data_type == *b
            || data_type
                .strip_prefix(b)
                .is_some_and(|r| r.starts_with('.') && r.len() > 1)
    });
    let Some(base) = base.filter(|_| data_type.len() <= 256) else {
        return Err(SqsError::invalid(format!(
            "The type of message attribute '{name}' is invalid. You must use only the following supported type prefixes: Binary, Number, String."
        )));
    };
    let empty = || {
        SqsError::invalid(format!(
            "The message attribute '{name}' must contain non-empty message attribute value for message attribute type '{data_type}'."
        ))
    };
    let value = if base == "Binary" {
        let b64 = v.opt_str("BinaryValue")?.ok_or_else(empty)?;
        let bytes = BASE64.decode(b64).map_err(|_| {
            SqsError::serialization(format!("BinaryValue of '{name}' is not base64."))
        })?;
        if bytes.is_empty() {
            return Err(empty());
        }
        bytes
    } else {
        let s = v
            .opt_str("StringValue")?
            .filter(|s| !s.is_empty())
            .ok_or_else(empty)?;
        if !allowed_text(s) {
            return Err(SqsError::new(
                "InvalidMessageContents",
                format!(
                    "The message attribute '{name}' contains characters outside the allowed set."
                ),
            ));
        }
        if base == "Number" && s.trim().parse::<f64>().is_err() {
            return Err(SqsError::invalid(format!(
                "Can't cast the value of message (user) attribute '{name}' to a number."
            )));
        }
        s.as_bytes().to_vec()
    };
    Ok(SqsAttribute {
        name: name.to_owned(),
        data_type: data_type.to_owned(),
        value,
    })
}

/// The engine value of `a` (see the module's documentation).
pub(crate) fn engine_value(a: &SqsAttribute) -> String {
    if a.data_type == "String" {
        String::from_utf8_lossy(&a.value).into_owned()
    } else if a.is_binary() {
        format!("\0{}\0{}", a.data_type, BASE64.encode(&a.value))
    } else {
        format!("\0{}\0{}", a.data_type, String::from_utf8_lossy(&a.value))
    }
}

/// Whether `key` is one of the system keys the door keeps beside a
/// message's SQS attributes (trace header, dedup id, body MD5, dead-letter
/// source), which are not SQS message attributes.
fn is_system_key(key: &[u8]) -> bool {
    // All begin `AWS.` (which SQS names cannot) but the source's.
    if key.starts_with(b"AWS.") {
        [TRACE_KEY, fifo::DEDUP_KEY, MD5_KEY]
            .iter()
            .any(|k| k.as_bytes() == key)
    } else {
        key == SOURCE_ATTRIBUTE.as_bytes()
    }
}

/// What a delivered message's engine attributes hold for the door, read
/// in one pass ([`split`]): the values of the system keys it keeps, as
/// bytes, and the SQS attributes.
#[derive(Debug, Default)]
pub(crate) struct Split<'a> {
    pub trace: Option<&'a [u8]>,
    pub md5: Option<&'a [u8]>,
    pub dedup: Option<&'a [u8]>,
    pub source: Option<&'a [u8]>,
    pub attributes: Vec<SqsAttribute>,
}

/// A message's engine attributes as the door reads them (see [`Split`]):
/// a system key's value is not read as text, nor an SQS attribute's
/// unless it is one.
pub(crate) fn split(attributes: AttributesRef<'_>) -> Split<'_> {
    let mut out = Split::default();
    for (k, v) in attributes.byte_pairs() {
        if !is_system_key(k) {
            let text = |b| core::str::from_utf8(b).ok();
            if let Some((k, v)) = text(k).zip(text(v)) {
                out.attributes.extend(from_engine(k, v));
            }
            continue;
        }
        let slot = if k == TRACE_KEY.as_bytes() {
            &mut out.trace
        } else if k == MD5_KEY.as_bytes() {
            &mut out.md5
        } else if k == fifo::DEDUP_KEY.as_bytes() {
            &mut out.dedup
        } else {
            &mut out.source
        };
        // The first of a key, as `get` finds it.
        slot.get_or_insert(v);
    }
    out
}

/// The SQS attribute that an engine pair other than a system key
/// ([`is_system_key`]) stores; `None` for a Binary one whose payload is
/// not base64.
fn from_engine(key: &str, value: &str) -> Option<SqsAttribute> {
    let plain = || SqsAttribute {
        name: key.to_owned(),
        data_type: "String".to_owned(),
        value: value.as_bytes().to_vec(),
    };
    let Some(rest) = value.strip_prefix('\0') else {
        return Some(plain());
    };
    let Some((data_type, payload)) = rest.split_once('\0') else {
        return Some(plain());
    };
    let value = if data_type.starts_with("Binary") {
        BASE64.decode(payload).ok()?
    } else {
        payload.as_bytes().to_vec()
    };
    Some(SqsAttribute {
        name: key.to_owned(),
        data_type: data_type.to_owned(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{allowed_char, allowed_text};

    #[test]
    fn text_is_checked_as_its_characters_are() {
        // Every ASCII byte and a few others, at every place of every
        // length up to 20, among allowed ASCII.
        let odd = [
            '\u{7f}', '\u{80}', 'é', '\u{D7FF}', '\u{E000}', '\u{FFFE}', '\u{FFFF}', '😀',
        ];
        let chars = (0u8..0x80).map(char::from).chain(odd);
        for c in chars {
            for len in 1..=20 {
                for at in 0..len {
                    let mut s: Vec<char> = vec!['a'; len];
                    s[at] = c;
                    let s: String = s.into_iter().collect();
                    assert_eq!(allowed_text(&s), s.chars().all(allowed_char), "{s:?}");
                }
            }
        }
        assert!(allowed_text(""));
    }

    proptest! {
        #[test]
        fn any_text_is_checked_as_its_characters_are(s in any::<String>()) {
            prop_assert_eq!(allowed_text(&s), s.chars().all(allowed_char));
        }
    }
}
