//! Reading a topic's messages without consuming them: pages of its stream,
//! one entry by id, and the schedule; for the dashboard's message browser.

use super::replies::as_array;
use super::stream::{StoredMessage, decode_entry};
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{Entry, ScheduledEntry, entry_id_before};
use bytes::Bytes;
use prost::Message as _;
use redis::Value;

impl Store {
    /// Up to `count` entries of the topic's stream, newest first, before the
    /// entry `before` (from the newest when None).
    pub async fn newest_entries(
        &self,
        keys: &TopicKeys,
        before: Option<&str>,
        count: u32,
    ) -> Result<Vec<Entry>> {
        let end = match before {
            None => "+".to_owned(),
            Some("0-0") => return Ok(Vec::new()),
            Some(id) => entry_id_before(id),
        };
        let mut conn = self.connection().await?;
        let reply: Value = redis::cmd("XREVRANGE")
            .arg(keys.stream())
            .arg(end)
            .arg("-")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await?;
        decode_entries(reply)
    }

    /// The stream entry `id`, if the stream still holds it.
    pub async fn entry(&self, keys: &TopicKeys, id: &str) -> Result<Option<Entry>> {
        let mut conn = self.connection().await?;
        let reply: Value = redis::cmd("XRANGE")
            .arg(keys.stream())
            .arg(id)
            .arg(id)
            .query_async(&mut conn)
            .await?;
        Ok(decode_entries(reply)?.into_iter().next())
    }

    /// The `count` scheduled messages due first, with their fields.
    pub async fn scheduled_entries(
        &self,
        keys: &TopicKeys,
        count: u32,
    ) -> Result<Vec<ScheduledEntry>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.connection().await?;
        let due: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(keys.scheduled())
            .arg(0)
            .arg(count - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = due.iter().map(|(id, _)| id.as_str()).collect();
        let fields: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(keys.scheduled_messages())
            .arg(&ids)
            .query_async(&mut conn)
            .await?;
        due.into_iter()
            .zip(fields)
            .map(|((message_id, due_ms), fields)| scheduled_entry(message_id, due_ms, fields))
            .collect()
    }

    /// The scheduled message `message_id`, while it waits.
    pub async fn scheduled_entry(
        &self,
        keys: &TopicKeys,
        message_id: &str,
    ) -> Result<Option<ScheduledEntry>> {
        let mut conn = self.connection().await?;
        let (due_ms, fields): (Option<u64>, Option<Vec<u8>>) = redis::pipe()
            .cmd("ZSCORE")
            .arg(keys.scheduled())
            .arg(message_id)
            .cmd("HGET")
            .arg(keys.scheduled_messages())
            .arg(message_id)
            .query_async(&mut conn)
            .await?;
        due_ms
            .map(|due_ms| scheduled_entry(message_id.to_owned(), due_ms, fields))
            .transpose()
    }
}

/// A scheduled message from its due time and its fields (the `m` encoding).
fn scheduled_entry(
    message_id: String,
    due_ms: u64,
    fields: Option<Vec<u8>>,
) -> Result<ScheduledEntry> {
    let entry = fields
        .map(|bytes| {
            let stored = StoredMessage::decode(Bytes::from(bytes))
                .map_err(|_| Error::Corrupt(format!("scheduled message {message_id}")))?;
            Ok::<_, Error>(Entry {
                id: message_id.clone(),
                message_id: message_id.clone(),
                due_ms: Some(due_ms),
                payload: stored.payload,
                attributes: stored.attributes,
                ordering_key: stored.ordering_key,
            })
        })
        .transpose()?;
    Ok(ScheduledEntry {
        message_id,
        due_ms,
        entry,
    })
}

fn decode_entries(reply: Value) -> Result<Vec<Entry>> {
    as_array(reply)?
        .into_iter()
        .map(|item| {
            let mut parts = as_array(item)?.into_iter();
            match (parts.next(), parts.next()) {
                (Some(id), Some(fields)) => decode_entry(id, fields),
                _ => Err(Error::Corrupt("short stream entry".into())),
            }
        })
        .collect()
}
