//! The topic stream: appending messages, consumer groups, waiting for new
//! entries, and the compact layout of an entry.
//!
//! An entry holds at most three fields with one-letter names, to keep Redis
//! memory per message low: `p` payload, `a` attributes (protobuf-encoded
//! once), `k` ordering key. Empty ones are left out.

use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use bytes::Bytes;
use prost::Message as _;
use redis::Value;
use redis::aio::MultiplexedConnection;
use std::collections::HashMap;

/// A message about to be appended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewEntry {
    pub payload: Bytes,
    pub attributes: HashMap<String, String>,
    pub ordering_key: String,
}

/// A message read back from a stream. Its id is the stream entry id, which
/// also carries the publish time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    pub id: String,
    pub payload: Bytes,
    pub attributes: HashMap<String, String>,
    pub ordering_key: String,
}

impl Entry {
    /// Milliseconds since the Unix epoch at which Redis appended the entry.
    pub fn publish_time_ms(&self) -> u64 {
        entry_time_ms(&self.id).unwrap_or(0)
    }

    /// Approximate size on the wire, used to keep responses small enough for clients.
    pub fn wire_size(&self) -> usize {
        self.id.len()
            + self.payload.len()
            + self.ordering_key.len()
            + self
                .attributes
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + 32
    }
}

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupStart {
    /// Every entry still in the stream.
    Earliest,
    /// Only entries appended after the group is created.
    Latest,
}

/// The attributes map, encoded once with protobuf.
#[derive(Clone, PartialEq, prost::Message)]
struct StoredAttributes {
    #[prost(map = "string, string", tag = "1")]
    attributes: HashMap<String, String>,
}

const PAYLOAD: &str = "p";
const ATTRIBUTES: &str = "a";
const ORDERING_KEY: &str = "k";

/// The time part of a stream entry id (`<ms>-<seq>`).
pub fn entry_time_ms(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// Whether `id` has the shape of a stream entry id.
pub fn is_entry_id(id: &str) -> bool {
    matches!(id.split_once('-'), Some((ms, seq))
        if !ms.is_empty() && !seq.is_empty()
            && ms.bytes().all(|b| b.is_ascii_digit())
            && seq.bytes().all(|b| b.is_ascii_digit()))
}

impl Store {
    /// Appends a batch of messages to the topic's stream in one round trip,
    /// returning their ids in order.
    pub async fn append(&self, keys: &TopicKeys, entries: &[NewEntry]) -> Result<Vec<String>> {
        let stream = keys.stream();
        let mut pipe = redis::pipe();
        for entry in entries {
            let cmd = pipe.cmd("XADD").arg(&stream).arg("*");
            cmd.arg(PAYLOAD).arg(entry.payload.as_ref());
            if !entry.attributes.is_empty() {
                let encoded = StoredAttributes {
                    attributes: entry.attributes.clone(),
                }
                .encode_to_vec();
                cmd.arg(ATTRIBUTES).arg(encoded);
            }
            if !entry.ordering_key.is_empty() {
                cmd.arg(ORDERING_KEY).arg(&entry.ordering_key);
            }
        }
        let mut conn = self.connection().await?;
        Ok(pipe.query_async(&mut *conn).await?)
    }

    /// Remembers a topic name, for listing topics.
    pub async fn register_topic(&self, topic: &str) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: i64 = redis::cmd("SADD")
            .arg(super::keys::TOPICS)
            .arg(topic)
            .query_async(&mut *conn)
            .await?;
        Ok(())
    }

    /// Creates the consumer group of a subscription (and the stream) unless it exists.
    pub async fn ensure_group(
        &self,
        keys: &TopicKeys,
        group: &str,
        start: GroupStart,
    ) -> Result<()> {
        let start_id = match start {
            GroupStart::Earliest => "0",
            GroupStart::Latest => "$",
        };
        let mut conn = self.connection().await?;
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(keys.stream())
            .arg(group)
            .arg(start_id)
            .arg("MKSTREAM")
            .query_async(&mut *conn)
            .await;
        match created {
            Err(err) if err.code() == Some("BUSYGROUP") => Ok(()),
            other => Ok(other?),
        }
    }

    /// Id of the newest entry of the stream, `0-0` when there is none.
    pub async fn last_entry_id(
        &self,
        conn: &mut MultiplexedConnection,
        keys: &TopicKeys,
    ) -> Result<String> {
        let reply: Value = redis::cmd("XREVRANGE")
            .arg(keys.stream())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(conn)
            .await?;
        let newest = as_array(reply)?.into_iter().next();
        match newest {
            Some(entry) => {
                let mut parts = as_array(entry)?.into_iter();
                as_string(parts.next().unwrap_or(Value::Nil))
            }
            None => Ok("0-0".to_owned()),
        }
    }

    /// Blocks (at most [`super::BLOCK`]) until the stream has an entry after
    /// `after`; true when one arrived. Runs on a dedicated connection.
    pub async fn wait_for_entry_after(
        &self,
        conn: &mut MultiplexedConnection,
        keys: &TopicKeys,
        after: &str,
    ) -> Result<bool> {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(super::BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(keys.stream())
            .arg(after)
            .query_async(conn)
            .await?;
        Ok(!matches!(reply, Value::Nil))
    }
}

/// Decodes `[id, [field, value, ...]]` as returned by XRANGE, XREADGROUP and XCLAIM.
pub(super) fn decode_entry(id: Value, fields: Value) -> Result<Entry> {
    let mut entry = Entry {
        id: as_string(id)?,
        ..Entry::default()
    };
    let mut fields = as_array(fields)?.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let value = as_bytes(value)?;
        match as_bytes(name)?.as_slice() {
            b"p" => entry.payload = Bytes::from(value),
            b"a" => {
                entry.attributes = StoredAttributes::decode(value.as_slice())
                    .map_err(|e| Error::Corrupt(format!("attributes of {}: {e}", entry.id)))?
                    .attributes
            }
            b"k" => {
                entry.ordering_key = String::from_utf8(value)
                    .map_err(|_| Error::Corrupt(format!("ordering key of {}", entry.id)))?
            }
            _ => {} // fields of later versions are ignored, not fatal
        }
    }
    Ok(entry)
}

pub(super) fn as_array(value: Value) -> Result<Vec<Value>> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        other => Err(Error::Corrupt(format!("expected an array, got {other:?}"))),
    }
}

pub(super) fn as_bytes(value: Value) -> Result<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Int(n) => Ok(n.to_string().into_bytes()),
        other => Err(Error::Corrupt(format!("expected a string, got {other:?}"))),
    }
}

pub(super) fn as_string(value: Value) -> Result<String> {
    String::from_utf8(as_bytes(value)?).map_err(|_| Error::Corrupt("non-UTF-8 string".into()))
}

pub(super) fn as_int(value: Value) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(n),
        other => as_string(other)?
            .parse()
            .map_err(|_| Error::Corrupt("expected an integer".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_carry_their_time() {
        assert_eq!(entry_time_ms("1700000000123-7"), Some(1_700_000_000_123));
        assert!(is_entry_id("1-0"));
        assert!(!is_entry_id("1-"));
        assert!(!is_entry_id("x-1"));
        assert!(!is_entry_id("17"));
    }

    #[test]
    fn entries_decode_from_their_compact_fields() {
        let attributes = StoredAttributes {
            attributes: HashMap::from([("kind".to_owned(), "order".to_owned())]),
        }
        .encode_to_vec();
        let fields = Value::Array(vec![
            Value::BulkString(b"p".to_vec()),
            Value::BulkString(b"hello".to_vec()),
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(attributes),
            Value::BulkString(b"k".to_vec()),
            Value::BulkString(b"customer-7".to_vec()),
        ]);
        let entry = decode_entry(Value::BulkString(b"5-1".to_vec()), fields).unwrap();
        assert_eq!(entry.payload, Bytes::from_static(b"hello"));
        assert_eq!(entry.attributes["kind"], "order");
        assert_eq!(entry.ordering_key, "customer-7");
        assert_eq!(entry.publish_time_ms(), 5);
    }

    #[test]
    fn corrupt_attributes_are_an_error_not_a_panic() {
        let fields = Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(vec![0xff, 0xff]),
        ]);
        assert!(matches!(
            decode_entry(Value::BulkString(b"5-1".to_vec()), fields),
            Err(Error::Corrupt(_))
        ));
    }
}
