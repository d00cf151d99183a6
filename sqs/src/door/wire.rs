//! The AWS JSON 1.0 body of a request, read member by member with SQS's
//! errors: a member of the wrong JSON type is a `SerializationException`,
//! a required one absent a `MissingParameter`. `null` is absent.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::errors::SqsError;

/// A request's JSON object, or one within it (a batch entry, borrowed
/// from its request's, not copied).
#[derive(Debug)]
pub(crate) struct Input<'a> {
    map: Cow<'a, Map<String, Value>>,
}

fn wrong_type(member: &str, want: &str) -> SqsError {
    SqsError::serialization(format!("Member {member} must be {want}."))
}

impl<'a> Input<'a> {
    /// The body: an object (an empty body is `{}`).
    pub fn parse(body: &[u8]) -> Result<Input<'static>, SqsError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Input {
                map: Cow::Owned(Map::new()),
            });
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(Input {
                map: Cow::Owned(map),
            }),
            Ok(_) => Err(SqsError::serialization(
                "The request body must be a JSON object.",
            )),
            Err(e) => Err(SqsError::serialization(format!(
                "The request body is not valid JSON: {e}"
            ))),
        }
    }

    /// An input of these members (the query protocol's, made JSON).
    pub fn from_map(map: Map<String, Value>) -> Input<'static> {
        Input {
            map: Cow::Owned(map),
        }
    }

    /// The members as one JSON object.
    #[cfg(test)]
    pub fn to_value(&self) -> Value {
        Value::Object(self.map.clone().into_owned())
    }

    /// An object read as an input (a batch entry).
    pub fn from_value(member: &str, v: &'a Value) -> Result<Input<'a>, SqsError> {
        match v {
            Value::Object(map) => Ok(Input {
                map: Cow::Borrowed(map),
            }),
            _ => Err(wrong_type(member, "an object")),
        }
    }

    fn get(&self, member: &str) -> Option<&Value> {
        self.map.get(member).filter(|v| !v.is_null())
    }

    /// An optional string member.
    pub fn opt_str(&self, member: &str) -> Result<Option<&str>, SqsError> {
        match self.get(member) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(wrong_type(member, "a string")),
        }
    }

    /// A required string member.
    pub fn str(&self, member: &str) -> Result<&str, SqsError> {
        self.opt_str(member)?
            .ok_or_else(|| SqsError::missing(member))
    }

    /// An optional integer member.
    pub fn opt_int(&self, member: &str) -> Result<Option<i64>, SqsError> {
        match self.get(member) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .map(Some)
                .ok_or_else(|| wrong_type(member, "an integer")),
            Some(_) => Err(wrong_type(member, "an integer")),
        }
    }

    /// An optional integer member within `min ..= max` (else
    /// `InvalidParameterValue` naming it).
    pub fn opt_int_in(&self, member: &str, min: i64, max: i64) -> Result<Option<u32>, SqsError> {
        match self.opt_int(member)? {
            None => Ok(None),
            Some(v) if (min..=max).contains(&v) => Ok(u32::try_from(v).ok()),
            Some(v) => Err(SqsError::invalid(format!(
                "Value {v} for parameter {member} is invalid. Reason: must be between {min} and {max}."
            ))),
        }
    }

    /// An optional list member (empty when absent).
    pub fn list(&self, member: &str) -> Result<&[Value], SqsError> {
        match self.get(member) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(wrong_type(member, "a list")),
        }
    }

    /// An optional list of strings (empty when absent).
    pub fn str_list(&self, member: &str) -> Result<Vec<&str>, SqsError> {
        self.list(member)?
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| wrong_type(member, "a list of strings"))
            })
            .collect()
    }

    /// An optional map of strings to strings, in the body's order.
    pub fn str_map(&self, member: &str) -> Result<Vec<(&str, &str)>, SqsError> {
        match self.get(member) {
            None => Ok(Vec::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|v| (k.as_str(), v))
                        .ok_or_else(|| wrong_type(member, "a map of strings"))
                })
                .collect(),
            Some(_) => Err(wrong_type(member, "a map of strings")),
        }
    }

    /// An optional map of strings to objects.
    pub fn obj_map(&self, member: &str) -> Result<Vec<(&str, Input<'_>)>, SqsError> {
        match self.get(member) {
            None => Ok(Vec::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| Ok((k.as_str(), Input::from_value(member, v)?)))
                .collect(),
            Some(_) => Err(wrong_type(member, "a map of objects")),
        }
    }
}
