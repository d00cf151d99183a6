//! A request's JSON as the door reads it: a tree whose strings borrow the
//! request's bytes wherever they need no unescaping, and whose objects are
//! their members in the body's order. Reading a send of ten messages into
//! `serde_json::Value` built eleven sorted maps and an owned string per key
//! and value; this builds the same tree without copying, in one pass of
//! its own ([`parse`]): `serde_json`'s borrowing reader checked each string
//! for UTF-8 apart from finding its end, a call per string.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

/// Members an object finds a name among by looking along them; a larger
/// object indexes its names.
const SCAN_MEMBERS_MAX: usize = 16;

/// A JSON value of a request (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json<'a> {
    Null,
    Bool(bool),
    /// A number: `Some` when it is an integer that fits an `i64`.
    Number(Option<i64>, f64),
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Members<'a>),
}

/// An object's members in the body's order, each name once (a name given
/// twice keeps its last value, in its first place, as a JSON object reads).
pub(crate) type Members<'a> = Vec<(Cow<'a, str>, Json<'a>)>;

impl<'a> Json<'a> {
    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// From a `serde_json` value (the query protocol's input, made JSON).
    pub fn from_value(v: Value) -> Json<'static> {
        match v {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(b),
            Value::Number(n) => Json::Number(n.as_i64(), n.as_f64().unwrap_or(0.0)),
            Value::String(s) => Json::Str(Cow::Owned(s)),
            Value::Array(a) => Json::Array(a.into_iter().map(Json::from_value).collect()),
            Value::Object(m) => Json::Object(
                m.into_iter()
                    .map(|(k, v)| (Cow::Owned(k), Json::from_value(v)))
                    .collect(),
            ),
        }
    }

    /// As a `serde_json` value.
    #[cfg(test)]
    pub fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(Some(i), _) => Value::from(*i),
            Json::Number(None, f) => Value::from(*f),
            Json::Str(s) => Value::String(s.to_string()),
            Json::Array(a) => Value::Array(a.iter().map(Json::to_value).collect()),
            Json::Object(m) => Value::Object(members_to_map(m)),
        }
    }
}

/// An object's members as a `serde_json` map.
#[cfg(test)]
pub(crate) fn members_to_map(m: &[(Cow<'_, str>, Json<'_>)]) -> Map<String, Value> {
    m.iter()
        .map(|(k, v)| (k.to_string(), v.to_value()))
        .collect()
}

/// A `serde_json` map as members.
pub(crate) fn members_of_map(m: Map<String, Value>) -> Members<'static> {
    m.into_iter()
        .map(|(k, v)| (Cow::Owned(k), Json::from_value(v)))
        .collect()
}

/// Objects and arrays a request may nest, as `serde_json` allows: deeper
/// input is refused before it can exhaust the stack.
const DEPTH_MAX: usize = 127;

/// Why a body is not JSON, and at which byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JsonError {
    pub what: &'static str,
    pub at: usize,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

/// Reads `body` as one JSON value (RFC 8259), surrounded by whitespace at
/// most. One pass over its bytes after one check that they are UTF-8:
/// strings without escapes borrow the body, found a word at a time.
pub(crate) fn parse(body: &[u8]) -> Result<Json<'_>, JsonError> {
    let text = core::str::from_utf8(body).map_err(|e| JsonError {
        what: "invalid UTF-8",
        at: e.valid_up_to(),
    })?;
    let mut r = Reader { text, at: 0 };
    let v = r.value(0)?;
    r.skip_ws();
    if r.at < text.len() {
        return Err(r.error("trailing characters"));
    }
    Ok(v)
}

struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, what: &'static str) -> JsonError {
        JsonError { what, at: self.at }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `word` (after its first byte, seen already).
    fn word(&mut self, word: &'static str, v: Json<'a>) -> Result<Json<'a>, JsonError> {
        if self.bytes()[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(v)
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json<'a>, JsonError> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b't') => self.word("true", Json::Bool(true)),
            Some(b'f') => self.word("false", Json::Bool(false)),
            Some(b'n') => self.word("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end")),
        }
    }

    /// After `[` or `{`: whether the list ends at once (`close`), else
    /// ready for its first item.
    fn open(&mut self, depth: usize, close: u8) -> Result<bool, JsonError> {
        if depth > DEPTH_MAX {
            return Err(self.error("nested too deep"));
        }
        self.at += 1;
        self.skip_ws();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// After an item of a list: whether it ends (`close`) or goes on (`,`).
    fn next_item(&mut self, close: u8) -> Result<bool, JsonError> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                Ok(false)
            }
            Some(b) if b == close => {
                self.at += 1;
                Ok(true)
            }
            Some(_) => Err(self.error("expected ',' or the list's end")),
            None => Err(self.error("unexpected end")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json<'a>, JsonError> {
        let mut out = Vec::new();
        if !self.open(depth, b']')? {
            loop {
                out.push(self.value(depth)?);
                if self.next_item(b']')? {
                    break;
                }
            }
        }
        Ok(Json::Array(out))
    }

    fn object(&mut self, depth: usize) -> Result<Json<'a>, JsonError> {
        let mut out = Object::default();
        if !self.open(depth, b'}')? {
            loop {
                self.skip_ws();
                if self.peek() != Some(b'"') {
                    return Err(self.error("expected a member name"));
                }
                let name = self.string()?;
                self.skip_ws();
                if self.peek() != Some(b':') {
                    return Err(self.error("expected ':'"));
                }
                self.at += 1;
                let v = self.value(depth)?;
                out.put(name, v);
                if self.next_item(b'}')? {
                    break;
                }
            }
        }
        Ok(Json::Object(out.members))
    }

    /// A string, at its opening quote: borrowed when it has no escape.
    fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        self.at += 1;
        let start = self.at;
        let end = self.special(start);
        match self.bytes().get(end) {
            Some(b'"') => {
                self.at = end + 1;
                Ok(Cow::Borrowed(&self.text[start..end]))
            }
            Some(b'\\') => {
                self.at = end;
                let mut s = String::from(&self.text[start..end]);
                self.unescape(&mut s)?;
                Ok(Cow::Owned(s))
            }
            Some(_) => {
                self.at = end;
                Err(self.error("a control character in a string"))
            }
            None => {
                self.at = end;
                Err(self.error("unexpected end"))
            }
        }
    }

    /// The first byte from `at` on that ends a string's plain run: a
    /// quote, a backslash or a control character (the text's length if
    /// none). Eight bytes a word: bytes at 0x80 and above are UTF-8 the
    /// text was checked for, and plain.
    fn special(&self, mut at: usize) -> usize {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const TOPS: u64 = 0x8080_8080_8080_8080;
        let bytes = self.bytes();
        while let Some(w) = bytes.get(at..at + 8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            let w = u64::from_le_bytes(b);
            // A zero byte of `w ^ c*ONES` is a byte equal to `c`; below
            // 0x20 by the subtraction's borrow (exact for n up to 0x80,
            // its top bit masked by `!w`).
            let zero = |x: u64| x.wrapping_sub(ONES) & !x & TOPS;
            let hits = zero(w ^ (u64::from(b'"') * ONES))
                | zero(w ^ (u64::from(b'\\') * ONES))
                | (w.wrapping_sub(0x20 * ONES) & !w & TOPS);
            if hits != 0 {
                // The lowest flagged byte is exact: a borrow only runs
                // upward, to bytes after it.
                return at + (hits.trailing_zeros() / 8) as usize;
            }
            at += 8;
        }
        bytes[at..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
            .map_or(bytes.len(), |i| at + i)
    }

    /// The rest of a string from its first backslash (at `self.at`), its
    /// text so far in `s`.
    fn unescape(&mut self, s: &mut String) -> Result<(), JsonError> {
        loop {
            let b = self.peek().ok_or_else(|| self.error("unexpected end"))?;
            match b {
                b'"' => {
                    self.at += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.at += 1;
                    let e = self.peek().ok_or_else(|| self.error("unexpected end"))?;
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode()?,
                        _ => {
                            self.at -= 1;
                            return Err(self.error("an invalid escape"));
                        }
                    };
                    s.push(c);
                }
                _ if b < 0x20 => return Err(self.error("a control character in a string")),
                _ => {
                    let end = self.special(self.at);
                    s.push_str(&self.text[self.at..end]);
                    self.at = end;
                }
            }
        }
    }

    /// The character of a `\u` escape (after the `u`), a surrogate pair
    /// read whole.
    fn unicode(&mut self) -> Result<char, JsonError> {
        let high = self.hex4()?;
        let code = match high {
            0xD800..=0xDBFF => {
                if !self.bytes()[self.at..].starts_with(b"\\u") {
                    return Err(self.error("a lone surrogate in an escape"));
                }
                self.at += 2;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(self.error("a lone surrogate in an escape"));
                }
                0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("a lone surrogate in an escape")),
            c => c,
        };
        char::from_u32(code).ok_or_else(|| self.error("an invalid escape"))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .bytes()
            .get(self.at..self.at + 4)
            .ok_or_else(|| self.error("unexpected end"))?;
        let mut n = 0;
        for &d in digits {
            let v = char::from(d)
                .to_digit(16)
                .ok_or_else(|| self.error("an invalid escape"))?;
            n = n * 16 + v;
        }
        self.at += 4;
        Ok(n)
    }

    /// A number, as RFC 8259's grammar has it: an integer that fits an
    /// `i64` is one, any other a float (which must be finite).
    fn number(&mut self) -> Result<Json<'a>, JsonError> {
        let start = self.at;
        let bytes = self.bytes();
        let digits = |from: usize| {
            bytes[from..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .map_or(bytes.len() - from, |n| n)
        };
        let mut at = start + usize::from(bytes[start] == b'-');
        let int = digits(at);
        if int == 0 || (int > 1 && bytes[at] == b'0') {
            self.at = at;
            return Err(self.error("an invalid number"));
        }
        at += int;
        let mut integral = true;
        if bytes.get(at) == Some(&b'.') {
            let frac = digits(at + 1);
            if frac == 0 {
                self.at = at + 1;
                return Err(self.error("an invalid number"));
            }
            at += 1 + frac;
            integral = false;
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            let exp = digits(at);
            if exp == 0 {
                self.at = at;
                return Err(self.error("an invalid number"));
            }
            at += exp;
            integral = false;
        }
        self.at = at;
        let text = &self.text[start..at];
        if integral {
            if let Ok(i) = text.parse::<i64>() {
                // A JSON number's value as a float, for a reply that shows it.
                #[allow(clippy::cast_precision_loss)]
                return Ok(Json::Number(Some(i), i as f64));
            }
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Json::Number(None, f)),
            _ => {
                self.at = start;
                Err(self.error("a number out of range"))
            }
        }
    }
}

/// An object's members as they are read: a name given again replaces its
/// value in its first place. A large object (a client may send one of any
/// size) finds its names through a table, so reading it stays linear; a
/// small one (every object SQS's actions take) by a look along it.
#[derive(Default)]
struct Object<'a> {
    members: Members<'a>,
    index: Option<HashMap<Cow<'a, str>, usize>>,
}

impl<'a> Object<'a> {
    fn put(&mut self, name: Cow<'a, str>, v: Json<'a>) {
        let out = &mut self.members;
        if self.index.is_none() && out.len() >= SCAN_MEMBERS_MAX {
            let names = out.iter().enumerate().map(|(i, (n, _))| (n.clone(), i));
            self.index = Some(names.collect());
        }
        let at = match &mut self.index {
            Some(index) => match index.get(&name) {
                Some(&i) => Some(i),
                None => {
                    index.insert(name.clone(), out.len());
                    None
                }
            },
            None => out.iter().position(|(n, _)| *n == name),
        };
        match at {
            Some(i) => out[i].1 = v,
            None => out.push((name, v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn read(text: &str) -> Json<'_> {
        parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        let text =
            r#"{"a":"plain","b\u0041":"esc\"aped","n":[1,-2,3.5,18446744073709551615,null,true]}"#;
        let Json::Object(m) = read(text) else {
            panic!("an object")
        };
        assert!(matches!(
            m[0],
            (Cow::Borrowed("a"), Json::Str(Cow::Borrowed("plain")))
        ));
        assert!(
            matches!(&m[1], (Cow::Owned(k), Json::Str(Cow::Owned(v))) if k == "bA" && v == "esc\"aped")
        );
        let Json::Array(n) = &m[2].1 else {
            panic!("an array")
        };
        assert_eq!(n[0], Json::Number(Some(1), 1.0));
        assert_eq!(n[1], Json::Number(Some(-2), -2.0));
        assert_eq!(n[2], Json::Number(None, 3.5));
        assert!(matches!(n[3], Json::Number(None, _)));
        assert_eq!(n[4], Json::Null);
    }

    #[test]
    fn a_name_given_twice_keeps_its_last_value_in_its_first_place() {
        let Json::Object(m) = read(r#"{"x":1,"y":2,"x":3}"#) else {
            panic!("an object")
        };
        assert_eq!(m.len(), 2);
        assert_eq!((&*m[0].0, &m[0].1), ("x", &Json::Number(Some(3), 3.0)));
        // The same in an object large enough to index its names, given
        // twice before the index is made and after.
        let mut text = String::from("{");
        for i in 0..100 {
            text.push_str(&format!("\"k{i}\":{i},"));
        }
        text.push_str(r#""k3":-3,"k90":-90,"k99":-99}"#);
        let Json::Object(m) = read(&text) else {
            panic!("an object")
        };
        assert_eq!(m.len(), 100);
        for (i, (name, v)) in m.iter().enumerate() {
            let want = if [3, 90, 99].contains(&i) {
                -(i as i64)
            } else {
                i as i64
            };
            assert_eq!(name.as_ref(), format!("k{i}"));
            assert_eq!(v, &Json::Number(Some(want), want as f64));
        }
    }

    #[test]
    fn strings_end_where_their_quote_is_at_any_place_in_a_word() {
        // The closing quote, an escape and a control character at every
        // offset from a word's start, behind bytes of every width.
        for pad in ["", "a", "é", "€", "𝄞"] {
            for n in 0..20 {
                let run: String = pad.repeat(n);
                let text = format!("[\"{run}\", \"{run}\\n{run}\"]");
                let Json::Array(v) = read(&text) else {
                    panic!("an array")
                };
                assert_eq!(v[0], Json::Str(Cow::Borrowed(run.as_str())));
                assert_eq!(v[1], Json::Str(Cow::Owned(format!("{run}\n{run}"))));
                let raw = format!("[\"{run}\u{1}{run}\"]");
                let e = parse(raw.as_bytes()).unwrap_err();
                assert_eq!(
                    (e.what, e.at),
                    ("a control character in a string", 2 + run.len()),
                    "{raw:?}"
                );
            }
        }
    }

    #[test]
    fn escapes_read_as_json_has_them() {
        let Json::Str(s) = read(r#""\"\\\/\b\f\n\r\t\u00e9\ud834\udd1e""#) else {
            panic!("a string")
        };
        assert_eq!(s, "\"\\/\u{8}\u{c}\n\r\té𝄞");
        for bad in [
            r#""\ud834""#,
            r#""\ud834\u0041""#,
            r#""\udd1e""#,
            r#""\x""#,
            r#""\u12""#,
            r#""\u12g4""#,
            r#""abc"#,
            r#""\"#,
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_follow_the_grammar() {
        assert_eq!(
            read("9223372036854775807"),
            Json::Number(Some(i64::MAX), i64::MAX as f64)
        );
        assert_eq!(
            read("-9223372036854775808"),
            Json::Number(Some(i64::MIN), i64::MIN as f64)
        );
        assert_eq!(
            read("9223372036854775808"),
            Json::Number(None, 9.223_372_036_854_776e18)
        );
        assert_eq!(read("-1.5E+2"), Json::Number(None, -150.0));
        assert_eq!(read("1e-400"), Json::Number(None, 0.0));
        for bad in [
            "01", "-", "1.", ".5", "1e", "1e+", "+1", "1e400", "-1e400", "0x10", "1.2.3",
        ] {
            let e = parse(bad.as_bytes()).unwrap_err();
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}: {e}");
        }
    }

    #[test]
    fn nesting_is_bounded_as_serde_json_bounds_it() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(nest(DEPTH_MAX).as_bytes()).is_ok());
        assert!(serde_json::from_str::<Value>(&nest(DEPTH_MAX)).is_ok());
        let e = parse(nest(DEPTH_MAX + 1).as_bytes()).unwrap_err();
        assert_eq!((e.what, e.at), ("nested too deep", DEPTH_MAX));
        assert!(serde_json::from_str::<Value>(&nest(DEPTH_MAX + 1)).is_err());
        // Far deeper input is refused at the bound, not by the stack.
        let deep = format!("{}1", "{\"a\":[".repeat(500_000));
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn what_is_not_json_is_refused_with_its_place() {
        let e = parse(b"{\"a\":1} x").unwrap_err();
        assert_eq!((e.what, e.at), ("trailing characters", 8));
        assert_eq!(e.to_string(), "trailing characters at byte 8");
        let e = parse(b"[\"\xff\"]").unwrap_err();
        assert_eq!((e.what, e.at), ("invalid UTF-8", 2));
        for bad in [
            "",
            " ",
            "{",
            "{\"a\"}",
            "{\"a\" 1}",
            "{a:1}",
            "[1,]",
            "{\"a\":1,}",
            "[1 2]",
            "tru",
            "nulls",
            "\"a\"\"b\"",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert_eq!(
            read(" \t\r\n[ true , false,null ] \n"),
            Json::Array(vec![Json::Bool(true), Json::Bool(false), Json::Null])
        );
    }

    /// Pieces of JSON and of almost-JSON.
    const TOKENS: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        " ",
        "\n",
        "\"a\"",
        "\"\\u0041\"",
        "\"\\ud800\"",
        "\"\\ud83d\\ude00\"",
        "\"\\q\"",
        "\"é\"",
        "\"\u{1}\"",
        "\"",
        "\\",
        "1",
        "-0",
        "-",
        "0",
        "01",
        "1.5e3",
        "1.",
        "e5",
        "true",
        "false",
        "null",
        "nul",
        "x",
        "\"a\":",
        "12345678901234567890",
    ];

    proptest! {
        #[test]
        fn any_json_reads_as_serde_json_reads_it(v in any::<(String, i64, Vec<String>, bool)>()) {
            let value = json!({ "s": v.0, "i": v.1, "l": v.2, "b": v.3, "o": { "k": v.0 } });
            let text = value.to_string();
            let back = read(&text).to_value();
            prop_assert_eq!(&back, &value);
            prop_assert_eq!(Json::from_value(value.clone()).to_value(), value);
        }

        #[test]
        fn any_text_is_refused_exactly_when_serde_json_refuses_it(
            tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..24)
        ) {
            let text = tokens.concat();
            let ours = parse(text.as_bytes());
            let theirs = serde_json::from_str::<Value>(&text);
            prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "{:?}: {:?}", text, ours);
            // "-0" is a float to serde_json, and 0 here: both mean 0; an
            // integer past i64 is a u64 to it, and a float here.
            if let (Ok(a), Ok(b)) = (ours, theirs) {
                if !text.contains("-0") && !text.contains("12345678901234567890") {
                    prop_assert_eq!(a.to_value(), b, "{:?}", text);
                }
            }
        }
    }
}
