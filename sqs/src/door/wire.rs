//! The AWS JSON 1.0 body of a request, read member by member with SQS's
//! errors: a member of the wrong JSON type is a `SerializationException`,
//! a required one absent a `MissingParameter`. `null` is absent.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::errors::SqsError;
use super::json_in::{Json, Members, members_of_map};

/// A request's JSON object, or one within it (a batch entry, borrowed
/// from its request's, not copied): its members, their strings borrowing
/// the request's bytes (`json_in.rs`).
#[derive(Debug)]
pub(crate) struct Input<'a> {
    members: Held<'a>,
}

/// An input's members: its own (a request's), or a request's member's.
#[derive(Debug)]
enum Held<'a> {
    Own(Members<'a>),
    Borrowed(&'a [(Cow<'a, str>, Json<'a>)]),
}

impl<'a> Held<'a> {
    fn members(&self) -> &[(Cow<'a, str>, Json<'a>)] {
        match self {
            Held::Own(m) => m,
            Held::Borrowed(m) => m,
        }
    }
}

fn wrong_type(member: &str, want: &str) -> SqsError {
    SqsError::serialization(format!("Member {member} must be {want}."))
}

impl<'a> Input<'a> {
    /// The body: an object (an empty body is `{}`).
    pub fn parse(body: &'a [u8]) -> Result<Input<'a>, SqsError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Input {
                members: Held::Own(Members::new()),
            });
        }
        match super::json_in::parse(body) {
            Ok(Json::Object(members)) => Ok(Input {
                members: Held::Own(members),
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
            members: Held::Own(members_of_map(map)),
        }
    }

    /// The members as one JSON object.
    #[cfg(test)]
    pub fn to_value(&self) -> Value {
        Value::Object(super::json_in::members_to_map(self.members.members()))
    }

    /// An object read as an input (a batch entry).
    pub fn from_value(member: &str, v: &'a Json<'a>) -> Result<Input<'a>, SqsError> {
        match v {
            Json::Object(members) => Ok(Input {
                members: Held::Borrowed(members),
            }),
            _ => Err(wrong_type(member, "an object")),
        }
    }

    fn get(&self, member: &str) -> Option<&Json<'a>> {
        self.members
            .members()
            .iter()
            .find(|(name, _)| name == member)
            .map(|(_, v)| v)
            .filter(|v| **v != Json::Null)
    }

    /// An optional string member.
    pub fn opt_str(&self, member: &str) -> Result<Option<&str>, SqsError> {
        match self.get(member) {
            None => Ok(None),
            Some(Json::Str(s)) => Ok(Some(s)),
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
            Some(Json::Number(Some(n), _)) => Ok(Some(*n)),
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
    pub fn list(&self, member: &str) -> Result<&[Json<'a>], SqsError> {
        match self.get(member) {
            None => Ok(&[]),
            Some(Json::Array(a)) => Ok(a),
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
            Some(Json::Object(m)) => m
                .iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|v| (&**k, v))
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
            Some(Json::Object(m)) => m
                .iter()
                .map(|(k, v)| Ok((&**k, Input::from_value(member, v)?)))
                .collect(),
            Some(_) => Err(wrong_type(member, "a map of objects")),
        }
    }
}
