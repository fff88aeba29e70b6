//! The topic stream: appending messages (now, scheduled, deduplicated),
//! consumer groups, waiting for new entries, and the compact layout of an entry.
//!
//! An entry holds one field, `m`: the message (payload, attributes, ordering
//! key) encoded once with protobuf, which keeps Redis memory per message low
//! and lets scripts move a message without decoding it. A message with an
//! ordering key also has `k`, the key again, for the scripts of ordered
//! subscriptions. Promoted scheduled messages add `i` (message id) and `d`
//! (due time, ms); dead letters add `e`, `n`, `r` (see lua/lib.lua).
//!
//! An element of a LIST topic's list becomes an entry with one field, `p`:
//! the element's bytes as they are, the payload (a list element has no
//! attributes and no ordering key).

use super::hints::{Hinted, hint_args};
use super::replies::{as_array, as_bytes, as_int, as_string};
use super::scripts::{APPEND_MESSAGES, PUBLISH_MESSAGES};
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{
    Due, Entry, NewMessage, PublishBatch, Published, entry_time_ms, is_scheduled_id,
    new_scheduled_id, parse_entry_id,
};
use bytes::Bytes;
use prost::Message as _;
use redis::Value;
use std::collections::HashMap;
use std::time::Duration;

/// One result per publish request, in request order: a request that breaks
/// a limit (or reuses a dedupe id for another number of messages) fails alone.
pub type RequestResults = Vec<Result<Vec<Published>>>;

/// One `{id, duplicate, due ms}` of the publish script's reply; `now` is
/// Redis' time when it ran.
fn published_of(item: Value, now: i64) -> Result<Published> {
    let mut parts = as_array(item)?.into_iter();
    let (Some(id), Some(duplicate), Some(due)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(Error::Corrupt("short publish reply".into()));
    };
    let due = as_int(due)?;
    let duplicate = as_int(duplicate)? == 1;
    let id = as_string(id)?;
    Ok(Published {
        duplicate,
        due_ms: u64::try_from(due).ok().filter(|&d| d > 0),
        // A duplicate was scheduled (and its wake-up set) by the original.
        scheduled_in: (due > now && !duplicate && is_scheduled_id(&id))
            .then(|| Duration::from_millis(u64::try_from(due - now).unwrap_or(0))),
        message_id: id,
    })
}

/// A request's answer when its dedupe id was taken: the first request's
/// messages, from its `claim` ("<id>[ <due ms>]" per message, joined by ',';
/// "<ms>-<seq>+<n>" stands for that id and the `n` after it), each a duplicate.
fn duplicates_of(claim: &str, count: usize) -> Result<Vec<Published>> {
    let claimed: usize = claim
        .split(',')
        .map(|token| match token.split_once('+') {
            Some((_, more)) => more.parse::<usize>().map_or(1, |n| n.saturating_add(1)),
            None => 1,
        })
        .fold(0, usize::saturating_add);
    if claimed != count {
        return Err(dedupe_id_reused(claimed, count));
    }
    let mut published = Vec::with_capacity(count);
    for token in claim.split(',') {
        let duplicate = |message_id: String, due_ms| Published {
            message_id,
            duplicate: true,
            due_ms,
            scheduled_in: None,
        };
        if let Some((id, due)) = token.split_once(' ') {
            published.push(duplicate(id.to_owned(), due.parse().ok()));
        } else if let Some((first, more)) = token.split_once('+') {
            let (Some((ms, seq)), Ok(more)) = (parse_entry_id(first), more.parse::<usize>()) else {
                return Err(Error::Corrupt(format!("dedupe claim token {token:?}")));
            };
            for n in 0..=more {
                published.push(duplicate(format!("{ms}-{}", seq + n as u64), Some(ms)));
            }
        } else {
            published.push(duplicate(token.to_owned(), entry_time_ms(token)));
        }
    }
    Ok(published)
}

/// A request whose dedupe id was first used for another number of messages:
/// not a retry of that one, so it is refused.
fn dedupe_id_reused(first_count: usize, count: usize) -> Error {
    Error::invalid(
        "dedupe_id",
        format!("was first used for a request of {first_count} messages, this one has {count}"),
    )
}

/// What an entry's `m` field holds.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct StoredMessage {
    #[prost(bytes = "bytes", tag = "1")]
    pub(super) payload: Bytes,
    #[prost(map = "string, string", tag = "2")]
    pub(super) attributes: HashMap<String, String>,
    #[prost(string, tag = "3")]
    pub(super) ordering_key: String,
}

pub(super) fn encode_message(message: &NewMessage) -> Vec<u8> {
    StoredMessage {
        payload: message.payload.clone(),
        attributes: message.attributes.clone(),
        ordering_key: message.ordering_key.clone(),
    }
    .encode_to_vec()
}

impl Store {
    /// Publishes requests in order, with one script: a short one for plain
    /// messages, another when some are scheduled or deduplicated. Each
    /// request gets its own result: a retry whose request `dedupe_id` was
    /// used for a different number of messages fails alone.
    pub async fn publish(
        &self,
        keys: &TopicKeys,
        requests: &[PublishBatch],
        dedupe_window: Duration,
    ) -> Result<RequestResults> {
        let plain = requests
            .iter()
            .flat_map(|request| &request.messages)
            .all(|m| m.due == Due::Now && m.dedupe_id.is_empty());
        if plain {
            self.append(keys, requests, dedupe_window).await
        } else {
            self.publish_scripted(keys, requests, dedupe_window, "")
                .await
        }
    }

    async fn append(
        &self,
        keys: &TopicKeys,
        requests: &[PublishBatch],
        dedupe_window: Duration,
    ) -> Result<RequestResults> {
        let mut invocation = APPEND_MESSAGES.key(keys.stream());
        invocation
            .key(keys.settings())
            .key(keys.watchers())
            .arg(dedupe_window.as_millis() as u64)
            .arg(&hint_args(self, keys, Hinted::Others)[..]);
        let mut dedupe_keys = 3;
        for request in requests {
            let index = if request.dedupe_id.is_empty() {
                0
            } else {
                invocation.key(keys.request_dedupe(&request.dedupe_id));
                dedupe_keys += 1;
                dedupe_keys
            };
            invocation.arg(request.messages.len()).arg(index);
            for message in &request.messages {
                invocation
                    .arg(&message.ordering_key)
                    .arg(encode_message(message));
            }
        }
        let mut conn = self.shared();
        let replies: Vec<Value> = invocation.invoke_async(&mut conn).await?;
        self.replicated(&mut conn, &keys.stream()).await?;
        if replies.len() != requests.len() {
            return Err(Error::Corrupt("publish reply of the wrong length".into()));
        }
        replies
            .into_iter()
            .zip(requests)
            .map(|(reply, request)| {
                let mut reply = as_array(reply)?.into_iter();
                let duplicate = as_int(reply.next().unwrap_or(Value::Nil))? == 1;
                if duplicate {
                    let claim = as_string(reply.next().unwrap_or(Value::Nil))?;
                    return Ok(duplicates_of(&claim, request.messages.len()));
                }
                let published: Vec<Published> = reply
                    .map(|id| {
                        let id = as_string(id)?;
                        Ok(Published {
                            due_ms: entry_time_ms(&id),
                            message_id: id,
                            duplicate: false,
                            scheduled_in: None,
                        })
                    })
                    .collect::<Result<_>>()?;
                if published.len() != request.messages.len() {
                    return Err(Error::Corrupt("short publish reply".into()));
                }
                Ok(Ok(published))
            })
            .collect()
    }

    /// Publishes with publish_messages.lua: to the stream, or, when
    /// `channel` is not empty (an EPHEMERAL topic), to that channel.
    pub(super) async fn publish_scripted(
        &self,
        keys: &TopicKeys,
        requests: &[PublishBatch],
        dedupe_window: Duration,
        channel: &str,
    ) -> Result<RequestResults> {
        let mut invocation = PUBLISH_MESSAGES.key(keys.stream());
        invocation
            .key(keys.scheduled())
            .key(keys.scheduled_messages())
            .key(keys.settings())
            .key(keys.watchers())
            .arg(dedupe_window.as_millis() as u64)
            .arg(&hint_args(self, keys, Hinted::Others)[..])
            .arg(channel);
        // Dedupe keys follow the five fixed ones; each record names its own.
        let mut dedupe_keys = 5;
        let mut next_dedupe_index = || {
            dedupe_keys += 1;
            dedupe_keys
        };
        for request in requests {
            if !request.dedupe_id.is_empty() {
                invocation.key(keys.request_dedupe(&request.dedupe_id));
                invocation
                    .arg("")
                    .arg("r")
                    .arg(request.messages.len())
                    .arg(next_dedupe_index())
                    .arg("")
                    .arg("");
            }
            for message in &request.messages {
                let (kind, amount) = match message.due {
                    Due::Now => ("n", 0),
                    Due::At(ms) => ("a", ms),
                    Due::After(delay) => ("d", delay.as_millis() as u64),
                };
                let index = if message.dedupe_id.is_empty() {
                    0
                } else {
                    invocation.key(keys.dedupe(&message.dedupe_id));
                    next_dedupe_index()
                };
                invocation
                    .arg(new_scheduled_id())
                    .arg(kind)
                    .arg(amount)
                    .arg(index)
                    .arg(encode_message(message))
                    .arg(&message.ordering_key);
            }
        }
        let mut conn = self.shared();
        let reply: Value = invocation.invoke_async(&mut conn).await?;
        self.replicated(&mut conn, &keys.stream()).await?;
        let mut reply = as_array(reply)?.into_iter();
        let now = as_int(reply.next().unwrap_or(Value::Nil))?;
        let mut published = as_array(reply.next().unwrap_or(Value::Nil))?
            .into_iter()
            .map(|item| published_of(item, now));
        // Per request that reused a dedupe id with another message count: its
        // number among the requests with a dedupe id (from 1) and the first
        // one's count; it has no place in `published`.
        let mut mismatches = as_array(reply.next().unwrap_or(Value::Nil))?
            .into_iter()
            .map(|item| {
                let mut pair = as_array(item)?.into_iter();
                let index = as_int(pair.next().unwrap_or(Value::Nil))?;
                let first_count = as_int(pair.next().unwrap_or(Value::Nil))?;
                Ok((index as usize, first_count))
            })
            .collect::<Result<Vec<(usize, i64)>>>()?
            .into_iter()
            .peekable();
        let mut with_dedupe_id = 0;
        requests
            .iter()
            .map(|request| {
                if !request.dedupe_id.is_empty() {
                    with_dedupe_id += 1;
                }
                let mismatch = mismatches.next_if(|(number, _)| {
                    !request.dedupe_id.is_empty() && *number == with_dedupe_id
                });
                if let Some((_, first_count)) = mismatch {
                    return Ok(Err(dedupe_id_reused(
                        first_count as usize,
                        request.messages.len(),
                    )));
                }
                let mine: Vec<Published> = published
                    .by_ref()
                    .take(request.messages.len())
                    .collect::<Result<_>>()?;
                if mine.len() != request.messages.len() {
                    return Err(Error::Corrupt("short publish reply".into()));
                }
                Ok(Ok(mine))
            })
            .collect()
    }
}

/// Decodes `[id, [field, value, ...]]` as returned by XRANGE, XREADGROUP and
/// XCLAIM; fields outside the message layout go to `other`.
pub(super) fn decode_entry_with(
    id: Value,
    fields: Value,
    mut other: impl FnMut(&[u8], Vec<u8>),
) -> Result<Entry> {
    let id = as_string(id)?;
    let mut entry = Entry {
        message_id: id.clone(),
        id,
        ..Entry::default()
    };
    let corrupt = |what: &str, id: &str| Error::Corrupt(format!("{what} of entry {id}"));
    let mut fields = as_array(fields)?.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let name = as_bytes(name)?;
        let value = as_bytes(value)?;
        match name.as_slice() {
            b"m" => {
                let stored = StoredMessage::decode(Bytes::from(value))
                    .map_err(|_| corrupt("message", &entry.id))?;
                entry.payload = stored.payload;
                entry.attributes = stored.attributes;
                entry.ordering_key = stored.ordering_key;
            }
            b"p" => entry.payload = Bytes::from(value),
            b"i" => {
                entry.message_id =
                    String::from_utf8(value).map_err(|_| corrupt("message id", &entry.id))?
            }
            b"d" => {
                let due = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|d| d.parse().ok());
                entry.due_ms = Some(due.ok_or_else(|| corrupt("due time", &entry.id))?);
            }
            b"k" => {} // the ordering key, also in `m`
            _ => other(&name, value),
        }
    }
    Ok(entry)
}

pub(super) fn decode_entry(id: Value, fields: Value) -> Result<Entry> {
    decode_entry_with(id, fields, |_, _| {}) // fields of later versions are ignored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_decode_from_their_compact_fields() {
        let message = NewMessage {
            payload: Bytes::from_static(b"hello"),
            attributes: HashMap::from([("kind".to_owned(), "order".to_owned())]),
            ordering_key: "customer-7".into(),
            ..NewMessage::default()
        };
        let fields = Value::Array(vec![
            Value::BulkString(b"m".to_vec()),
            Value::BulkString(encode_message(&message)),
            Value::BulkString(b"i".to_vec()),
            Value::BulkString(b"s0123456789abcdef0123".to_vec()),
            Value::BulkString(b"d".to_vec()),
            Value::BulkString(b"4".to_vec()),
        ]);
        let entry = decode_entry(Value::BulkString(b"5-1".to_vec()), fields).unwrap();
        assert_eq!(entry.message_id, "s0123456789abcdef0123");
        assert_eq!(entry.due_ms, Some(4));
        assert_eq!(entry.payload, Bytes::from_static(b"hello"));
        assert_eq!(entry.attributes["kind"], "order");
        assert_eq!(entry.ordering_key, "customer-7");
        assert_eq!(entry.publish_time_ms(), 5);
    }

    #[test]
    fn a_list_element_is_the_payload_as_it_is() {
        let fields = Value::Array(vec![
            Value::BulkString(b"p".to_vec()),
            Value::BulkString(vec![0xff, 0x00, b'x']),
        ]);
        let entry = decode_entry(Value::BulkString(b"5-1".to_vec()), fields).unwrap();
        assert_eq!(entry.payload, Bytes::from_static(&[0xff, 0x00, b'x']));
        assert_eq!(entry.message_id, "5-1");
        assert!(entry.attributes.is_empty() && entry.ordering_key.is_empty());
    }

    #[test]
    fn corrupt_messages_are_an_error_not_a_panic() {
        let fields = Value::Array(vec![
            Value::BulkString(b"m".to_vec()),
            Value::BulkString(vec![0xff, 0xff]),
        ]);
        assert!(matches!(
            decode_entry(Value::BulkString(b"5-1".to_vec()), fields),
            Err(Error::Corrupt(_))
        ));
    }
}
