//! Decoding Redis replies: the one place that turns `redis::Value`s into
//! strings, numbers, arrays and XINFO maps, and says `Corrupt` when a reply
//! has another shape than the command promises.

use crate::error::{Error, Result};
use crate::model::entry_time_ms;
use redis::Value;
use std::collections::HashMap;
use std::time::Duration;

/// How long ago, by Redis' clock `now_ms`, the first entry of an XPENDING
/// range reply entered the stream; None when the reply is empty.
pub(super) fn first_pending_age(reply: Value, now_ms: u64) -> Result<Option<Duration>> {
    Ok(as_array(reply)?
        .into_iter()
        .next()
        .and_then(|entry| as_array(entry).ok()?.into_iter().next())
        .and_then(|id| as_string(id).ok())
        .and_then(|id| entry_time_ms(&id))
        .map(|published| Duration::from_millis(now_ms.saturating_sub(published))))
}

/// An array (or set) reply; Nil is empty.
pub(super) fn as_array(value: Value) -> Result<Vec<Value>> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        other => Err(Error::Corrupt(format!("expected an array, got {other:?}"))),
    }
}

/// A string reply's bytes (a number as its digits).
pub(super) fn as_bytes(value: Value) -> Result<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Int(n) => Ok(n.to_string().into_bytes()),
        other => Err(Error::Corrupt(format!("expected a string, got {other:?}"))),
    }
}

/// A string reply, as UTF-8.
pub(super) fn as_string(value: Value) -> Result<String> {
    String::from_utf8(as_bytes(value)?).map_err(|_| Error::Corrupt("non-UTF-8 string".into()))
}

/// An integer reply, or a string of one.
pub(super) fn as_int(value: Value) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(n),
        other => as_string(other)?
            .parse()
            .map_err(|_| Error::Corrupt("expected an integer".into())),
    }
}

/// Takes a string field out of an XINFO map.
pub(super) fn take_string(fields: &mut HashMap<String, Value>, name: &str) -> Result<String> {
    as_string(fields.remove(name).unwrap_or(Value::Nil))
}

/// Takes a count (or ms) field out of an XINFO map: 0 when absent or negative.
pub(super) fn take_count(fields: &mut HashMap<String, Value>, name: &str) -> Result<u64> {
    let value = fields.remove(name).map(as_int).transpose()?;
    Ok(value.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

/// What XINFO GROUPS says of one consumer group.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct GroupInfo {
    pub name: String,
    /// Delivered and unacked entries, parked retries included.
    pub pending: u64,
    /// Entries not yet delivered; None when Redis cannot tell (before 7.0,
    /// or after entries were deleted from the middle of the stream).
    pub lag: Option<u64>,
}

/// One entry of an XINFO GROUPS reply.
pub(super) fn group_info(group: Value) -> Result<GroupInfo> {
    let mut fields = field_map(group)?;
    Ok(GroupInfo {
        name: take_string(&mut fields, "name")?,
        pending: take_count(&mut fields, "pending")?,
        lag: fields
            .remove("lag")
            .and_then(|lag| as_int(lag).ok())
            .and_then(|lag| u64::try_from(lag).ok()),
    })
}

/// An XINFO reply (`[name, value, name, value, ...]` or a RESP3 map) as a map.
pub(super) fn field_map(value: Value) -> Result<HashMap<String, Value>> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        other => {
            let mut items = as_array(other)?.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            pairs
        }
    };
    pairs
        .into_iter()
        .map(|(k, v)| Ok((String::from_utf8_lossy(&as_bytes(k)?).into_owned(), v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn group_fields_are_read_by_name() {
        let group = Value::Array(vec![
            bulk("name"),
            bulk("billing"),
            bulk("consumers"),
            Value::Int(2),
            bulk("pending"),
            Value::Int(3),
            bulk("lag"),
            Value::Int(7),
        ]);
        let group = group_info(group).unwrap();
        assert_eq!(group.name, "billing");
        assert_eq!((group.pending, group.lag), (3, Some(7)));
        let unknown_lag = Value::Array(vec![bulk("name"), bulk("b"), bulk("lag"), Value::Nil]);
        assert_eq!(group_info(unknown_lag).unwrap().lag, None);
    }
}
