//! The MD5 digests SQS replies with and the SDKs check: of a body, and of
//! message (or message system) attributes by SQS's algorithm: the
//! attributes sorted by name, each as `u32` BE length and name, `u32` BE
//! length and data type, a transport byte (1 for String and Number, 2 for
//! Binary), and `u32` BE length and value bytes.

use md5::{Digest, Md5};

use crate::hex::{HexText, hex};

/// One SQS message attribute: name, data type and value bytes (a Binary
/// value decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SqsAttribute {
    /// The attribute's name.
    pub name: String,
    /// `String`, `Number` or `Binary`, with any custom suffix.
    pub data_type: String,
    /// The value's bytes.
    pub value: Vec<u8>,
}

impl SqsAttribute {
    /// Whether its data type is a Binary one.
    pub fn is_binary(&self) -> bool {
        self.data_type.starts_with("Binary")
    }
}

/// Lower-case hex MD5 of `bytes`.
pub(crate) fn md5_hex(bytes: &[u8]) -> HexText<32> {
    HexText::of(&Md5::digest(bytes))
}

fn put(h: &mut Md5, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    h.update(len.to_be_bytes());
    h.update(bytes);
}

/// SQS's MD5 of `attrs`; `None` when there are none.
pub(crate) fn md5_attributes(attrs: &[SqsAttribute]) -> Option<String> {
    if attrs.is_empty() {
        return None;
    }
    let mut sorted: Vec<&SqsAttribute> = attrs.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut h = Md5::new();
    for a in sorted {
        put(&mut h, a.name.as_bytes());
        put(&mut h, a.data_type.as_bytes());
        h.update([if a.is_binary() { 2 } else { 1 }]);
        put(&mut h, &a.value);
    }
    Some(hex(&h.finalize()))
}
