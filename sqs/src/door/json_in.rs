//! A request's JSON as the door reads it: a tree whose strings borrow the
//! request's bytes wherever they need no unescaping, and whose objects are
//! their members in the body's order. Reading a send of ten messages into
//! `serde_json::Value` built eleven sorted maps and an owned string per key
//! and value; this builds the same tree without copying.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
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

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json<'de>, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Json<'de>, E> {
        // A JSON number's value as a float, for a reply that shows it.
        #[allow(clippy::cast_precision_loss)]
        Ok(Json::Number(Some(n), n as f64))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Json<'de>, E> {
        #[allow(clippy::cast_precision_loss)]
        Ok(Json::Number(i64::try_from(n).ok(), n as f64))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json<'de>, E> {
        Ok(Json::Number(None, n))
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Json::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut out: Members<'de> = Vec::new();
        // A large object (a client may send one of any size) finds its
        // names through a table, so reading it stays linear; a small one
        // (every object SQS's actions take) by a look along it.
        let mut index: Option<HashMap<Cow<'de, str>, usize>> = None;
        while let Some(Key(k)) = map.next_key()? {
            let v = map.next_value()?;
            if index.is_none() && out.len() >= SCAN_MEMBERS_MAX {
                let names = out
                    .iter()
                    .enumerate()
                    .map(|(i, (name, _))| (name.clone(), i));
                index = Some(names.collect());
            }
            let at = match &mut index {
                Some(index) => match index.get(&k) {
                    Some(&i) => Some(i),
                    None => {
                        index.insert(k.clone(), out.len());
                        None
                    }
                },
                None => out.iter().position(|(name, _)| *name == k),
            };
            match at {
                Some(i) => out[i].1 = v,
                None => out.push((k, v)),
            }
        }
        Ok(Json::Object(out))
    }
}

/// A member's name, borrowed where it needs no unescaping.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn read(text: &str) -> Json<'_> {
        serde_json::from_str(text).unwrap()
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

    proptest! {
        #[test]
        fn any_json_reads_as_serde_json_reads_it(v in any::<(String, i64, Vec<String>, bool)>()) {
            let value = json!({ "s": v.0, "i": v.1, "l": v.2, "b": v.3, "o": { "k": v.0 } });
            let text = value.to_string();
            let back = read(&text).to_value();
            prop_assert_eq!(&back, &value);
            prop_assert_eq!(Json::from_value(value.clone()).to_value(), value);
        }
    }
}
