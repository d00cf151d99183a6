//! SQS's query protocol, read side: `Action=...&Version=2012-11-05`,
//! form-encoded in a POST body or a GET's query string, with its numbered
//! lists (`Attribute.1.Name`, `MessageAttribute.1.Value.StringValue`,
//! `SendMessageBatchRequestEntry.1.Id`, ...), turned into the JSON
//! protocol's members so that every action reads one input whichever
//! protocol carried it.

use serde_json::{Map, Value, json};

use super::errors::SqsError;
use super::wire::Input;

/// The only version of the query API.
pub(crate) const VERSION: &str = "2012-11-05";

/// Members that are numbers in the JSON protocol.
const NUMBERS: &[&str] = &[
    "DelaySeconds",
    "MaxNumberOfMessages",
    "WaitTimeSeconds",
    "VisibilityTimeout",
    "MaxResults",
    "MaxNumberOfMessagesPerSecond",
];

/// `application/x-www-form-urlencoded` pairs, `+` a space.
///
/// # Errors
/// `MalformedQueryString` for a `%` not followed by two hex digits, or
/// escapes that decode to no UTF-8.
pub(crate) fn form_pairs(text: &str) -> Result<Vec<(String, String)>, SqsError> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Ok((form_decode(k)?, form_decode(v)?))
        })
        .collect()
}

fn form_decode(s: &str) -> Result<String, SqsError> {
    let malformed = || {
        SqsError::new(
            "MalformedQueryString",
            format!(
                "The form encoding of {s:?} is malformed: every % takes two hex digits, and the bytes they give must be UTF-8."
            ),
        )
    };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = |j: usize| {
                    bytes
                        .get(j)
                        .and_then(|&b| char::from(b).to_digit(16))
                        .ok_or_else(malformed)
                };
                let (h, l) = (hex(i + 1)?, hex(i + 2)?);
                // Two hex digits: at most 255.
                out.push(u8::try_from(h * 16 + l).map_err(|_| malformed())?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| malformed())
}

fn invalid(message: String) -> SqsError {
    SqsError::new("InvalidParameterValue", message)
}

/// The action's name and the input of a query-protocol request: the
/// parameters of its query string and, for a form post, of its body.
///
/// # Errors
/// As [`input`]; a body that is not UTF-8 is `MalformedQueryString`.
pub(crate) fn read(req: &crate::http::Request) -> Result<(String, Input<'static>), SqsError> {
    let mut pairs = form_pairs(req.query())?;
    if !req.body.is_empty() {
        let body = core::str::from_utf8(&req.body).map_err(|_| {
            SqsError::new(
                "MalformedQueryString",
                "The request body is not UTF-8 form encoding.",
            )
        })?;
        pairs.extend(form_pairs(body)?);
    }
    input(&pairs)
}

/// The action and the input the pairs describe.
///
/// # Errors
/// `MissingAction` without an `Action`, `NoSuchVersion` for a `Version`
/// other than 2012-11-05 (one is required), `InvalidParameterValue` for a
/// numbered list with a gap or an index that is not a positive number,
/// or a parameter given twice.
pub(crate) fn input(pairs: &[(String, String)]) -> Result<(String, Input<'static>), SqsError> {
    let mut flat: Map<String, Value> = Map::new();
    for (k, v) in pairs {
        if flat.insert(k.clone(), Value::String(v.clone())).is_some() {
            return Err(invalid(format!("The parameter {k} is given twice.")));
        }
    }
    let action = match flat.remove("Action") {
        Some(Value::String(a)) if !a.is_empty() => a,
        _ => {
            return Err(SqsError::new(
                "MissingAction",
                "The request must contain the parameter Action.",
            ));
        }
    };
    match flat.remove("Version") {
        Some(Value::String(v)) if v == VERSION => {}
        Some(Value::String(v)) => {
            return Err(SqsError::new(
                "NoSuchVersion",
                format!("The version {v} is not a version of the SQS query API ({VERSION})."),
            ));
        }
        _ => {
            return Err(SqsError::new(
                "MissingParameter",
                "The request must contain the parameter Version.",
            ));
        }
    }
    // The presigned request's own parameters are no members.
    flat.retain(|k, _| !k.starts_with("X-Amz-") && k != "AWSAccessKeyId");
    let map = members(&action, flat)?;
    Ok((action, Input::from_map(map)))
}

/// The JSON members of a flat set of query parameters.
fn members(action: &str, mut flat: Map<String, Value>) -> Result<Map<String, Value>, SqsError> {
    let mut out = Map::new();
    if let Some(v) = named_map(&mut flat, "Attribute", "Name", "Value")? {
        out.insert("Attributes".into(), v);
    }
    if let Some(v) = named_map(&mut flat, "Tag", "Key", "Value")? {
        let member = if action == "CreateQueue" {
            "tags"
        } else {
            "Tags"
        };
        out.insert(member.into(), v);
    }
    for (prefix, member) in [
        ("AttributeName", "AttributeNames"),
        ("MessageAttributeName", "MessageAttributeNames"),
        ("MessageSystemAttributeName", "MessageSystemAttributeNames"),
        ("TagKey", "TagKeys"),
        ("AWSAccountId", "AWSAccountIds"),
        ("ActionName", "Actions"),
    ] {
        if let Some(list) = numbered(&mut flat, prefix)? {
            let values: Vec<Value> = list.into_iter().map(|(_, v)| v).collect();
            out.insert(member.into(), Value::Array(values));
        }
    }
    for (prefix, member) in [
        ("MessageAttribute", "MessageAttributes"),
        ("MessageSystemAttribute", "MessageSystemAttributes"),
    ] {
        if let Some(v) = typed_values(&mut flat, prefix)? {
            out.insert(member.into(), v);
        }
    }
    for prefix in [
        "SendMessageBatchRequestEntry",
        "DeleteMessageBatchRequestEntry",
        "ChangeMessageVisibilityBatchRequestEntry",
    ] {
        if let Some(entries) = numbered(&mut flat, prefix)? {
            let mut list = Vec::with_capacity(entries.len());
            for (_, entry) in entries {
                let Value::Object(fields) = entry else {
                    return Err(invalid(format!("{prefix}.N needs its fields.")));
                };
                list.push(Value::Object(members(action, fields)?));
            }
            out.insert("Entries".into(), Value::Array(list));
        }
    }
    for (k, v) in flat {
        if k.contains('.') {
            return Err(invalid(format!(
                "The parameter {k} is not one this action takes."
            )));
        }
        let v = match (&v, NUMBERS.contains(&k.as_str())) {
            (Value::String(s), true) => s.parse::<i64>().map_or(v.clone(), |n| json!(n)),
            _ => v,
        };
        out.insert(k, v);
    }
    Ok(out)
}

/// The entries `PREFIX.1...`, `PREFIX.2...` (each a string, or an object of
/// the fields after the index), in index order; `None` when there are
/// none.
fn numbered(
    flat: &mut Map<String, Value>,
    prefix: &str,
) -> Result<Option<Vec<(usize, Value)>>, SqsError> {
    let dotted = format!("{prefix}.");
    let keys: Vec<String> = flat
        .keys()
        .filter(|k| k.starts_with(&dotted))
        .cloned()
        .collect();
    if keys.is_empty() {
        return Ok(None);
    }
    let mut entries: std::collections::BTreeMap<usize, Value> = std::collections::BTreeMap::new();
    for k in keys {
        let v = flat.remove(&k).unwrap_or(Value::Null);
        let rest = &k[dotted.len()..];
        let (index, field) = rest
            .split_once('.')
            .map_or((rest, None), |(i, f)| (i, Some(f)));
        let n: usize = index
            .parse()
            .ok()
            .filter(|&n| n >= 1 && !index.starts_with('0'))
            .ok_or_else(|| invalid(format!("The index of {k} is not a number from 1.")))?;
        match field {
            None => {
                entries.insert(n, v);
            }
            Some(field) => {
                let slot = entries
                    .entry(n)
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(fields) = slot else {
                    return Err(invalid(format!("{prefix}.{n} is given twice.")));
                };
                fields.insert(field.to_owned(), v);
            }
        }
    }
    // 1, 2, ... without a gap.
    if entries.keys().enumerate().any(|(i, &n)| n != i + 1) {
        return Err(invalid(format!(
            "The list {prefix} skips an index: it is numbered from 1 without gaps."
        )));
    }
    Ok(Some(entries.into_iter().collect()))
}

/// `PREFIX.N.<name>` and `PREFIX.N.<value>` pairs as a JSON map.
fn named_map(
    flat: &mut Map<String, Value>,
    prefix: &str,
    name: &str,
    value: &str,
) -> Result<Option<Value>, SqsError> {
    let Some(entries) = numbered(flat, prefix)? else {
        return Ok(None);
    };
    let mut out = Map::new();
    for (n, entry) in entries {
        let (Some(Value::String(k)), v) = (entry.get(name), entry.get(value)) else {
            return Err(invalid(format!("{prefix}.{n} needs {name}.")));
        };
        out.insert(
            k.clone(),
            v.cloned().unwrap_or(Value::String(String::new())),
        );
    }
    Ok(Some(Value::Object(out)))
}

/// `PREFIX.N.Name` with `PREFIX.N.Value.DataType` and `.StringValue` or
/// `.BinaryValue`, as the JSON protocol's map of typed values.
fn typed_values(flat: &mut Map<String, Value>, prefix: &str) -> Result<Option<Value>, SqsError> {
    let Some(entries) = numbered(flat, prefix)? else {
        return Ok(None);
    };
    let mut out = Map::new();
    for (n, entry) in entries {
        let Some(Value::String(name)) = entry.get("Name") else {
            return Err(invalid(format!("{prefix}.{n} needs Name.")));
        };
        let mut value = Map::new();
        for field in ["DataType", "StringValue", "BinaryValue"] {
            if let Some(v) = entry.get(format!("Value.{field}")) {
                value.insert(field.to_owned(), v.clone());
            }
        }
        out.insert(name.clone(), Value::Object(value));
    }
    Ok(Some(Value::Object(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        form_pairs(text).expect("well-formed")
    }

    fn json_of(text: &str) -> (String, Value) {
        let (action, input) = input(&pairs(text)).unwrap();
        (action, input.to_value())
    }

    #[test]
    fn forms_decode_plus_and_escapes() {
        assert_eq!(
            pairs("a=b+c&d=%41%2B&e&=x"),
            vec![
                ("a".into(), "b c".into()),
                ("d".into(), "A+".into()),
                ("e".into(), String::new()),
                (String::new(), "x".into())
            ]
        );
    }

    #[test]
    fn numbered_lists_become_the_json_members() {
        let (action, v) = json_of(
            "Action=CreateQueue&Version=2012-11-05&QueueName=q\
             &Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=40\
             &Attribute.2.Name=DelaySeconds&Attribute.2.Value=2&Tag.1.Key=team&Tag.1.Value=a",
        );
        assert_eq!(action, "CreateQueue");
        assert_eq!(
            v,
            json!({"QueueName": "q", "Attributes": {"VisibilityTimeout": "40", "DelaySeconds": "2"},
                   "tags": {"team": "a"}})
        );
        let (_, v) = json_of(
            "Action=SendMessage&Version=2012-11-05&QueueUrl=u&MessageBody=hi+there&DelaySeconds=3\
             &MessageAttribute.1.Name=k&MessageAttribute.1.Value.DataType=String\
             &MessageAttribute.1.Value.StringValue=v&MessageAttribute.2.Name=b\
             &MessageAttribute.2.Value.DataType=Binary&MessageAttribute.2.Value.BinaryValue=AAE%3D",
        );
        assert_eq!(
            v,
            json!({"QueueUrl": "u", "MessageBody": "hi there", "DelaySeconds": 3,
                   "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"},
                                         "b": {"DataType": "Binary", "BinaryValue": "AAE="}}})
        );
        let (_, v) = json_of(
            "Action=SendMessageBatch&Version=2012-11-05&QueueUrl=u\
             &SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=x\
             &SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=y\
             &SendMessageBatchRequestEntry.2.DelaySeconds=5\
             &SendMessageBatchRequestEntry.2.MessageAttribute.1.Name=k\
             &SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType=Number\
             &SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue=7",
        );
        assert_eq!(
            v,
            json!({"QueueUrl": "u", "Entries": [
                {"Id": "a", "MessageBody": "x"},
                {"Id": "b", "MessageBody": "y", "DelaySeconds": 5,
                 "MessageAttributes": {"k": {"DataType": "Number", "StringValue": "7"}}}]})
        );
        let (_, v) = json_of(
            "Action=ReceiveMessage&Version=2012-11-05&QueueUrl=u&MaxNumberOfMessages=10\
             &AttributeName.1=All&MessageAttributeName.1=pre.*&MessageAttributeName.2=k",
        );
        assert_eq!(
            v,
            json!({"QueueUrl": "u", "MaxNumberOfMessages": 10, "AttributeNames": ["All"],
                   "MessageAttributeNames": ["pre.*", "k"]})
        );
        // A presigned request's own parameters are left out.
        let (_, v) =
            json_of("Action=ListQueues&Version=2012-11-05&X-Amz-Signature=ab&X-Amz-Date=x");
        assert_eq!(v, json!({}));
    }

    #[test]
    fn bad_queries_get_sqs_errors() {
        let cases = [
            ("Version=2012-11-05", "MissingAction"),
            ("Action=ListQueues", "MissingParameter"),
            ("Action=ListQueues&Version=2010-01-01", "NoSuchVersion"),
            (
                "Action=ListQueues&Version=2012-11-05&Version=2012-11-05",
                "InvalidParameterValue",
            ),
            (
                "Action=GetQueueAttributes&Version=2012-11-05&AttributeName.1=A&AttributeName.3=B",
                "InvalidParameterValue",
            ),
            (
                "Action=GetQueueAttributes&Version=2012-11-05&AttributeName.0=A",
                "InvalidParameterValue",
            ),
            (
                "Action=GetQueueAttributes&Version=2012-11-05&AttributeName.01=A",
                "InvalidParameterValue",
            ),
            (
                "Action=GetQueueAttributes&Version=2012-11-05&AttributeName.x=A",
                "InvalidParameterValue",
            ),
            (
                "Action=CreateQueue&Version=2012-11-05&Attribute.1.Value=3",
                "InvalidParameterValue",
            ),
            (
                "Action=SendMessage&Version=2012-11-05&MessageAttribute.1.Value.StringValue=v",
                "InvalidParameterValue",
            ),
            (
                "Action=ListQueues&Version=2012-11-05&Foo.1.Bar=x",
                "InvalidParameterValue",
            ),
        ];
        for (text, name) in cases {
            let e = input(&pairs(text)).unwrap_err();
            assert_eq!(e.name, name, "{text}: {e:?}");
        }
    }

    #[test]
    fn malformed_form_encoding_is_refused() {
        for text in ["a=%zz", "a=%4", "a=%", "%C3=x", "a=%FF%FE", "a=b&c=%e2%82"] {
            let e = form_pairs(text).unwrap_err();
            assert_eq!(e.name, "MalformedQueryString", "{text}");
        }
        assert_eq!(pairs("a=%e2%82%ac")[0].1, "\u{20AC}");
    }
}
