//! The topic stream: appending messages (now, scheduled, deduplicated),
//! consumer groups, waiting for new entries, and the compact layout of an entry.
//!
//! An entry holds one field, `m`: the message (payload, attributes, ordering
//! key) encoded once with protobuf, which keeps Redis memory per message low
//! and lets scripts move a message without decoding it. A message with an
//! ordering key also has `k`, the key again, for the scripts of ordered
//! subscriptions. Promoted scheduled messages add `i` (message id) and `d`
//! (due time, ms); dead letters add `e`, `n`, `r` (see lua/lib.lua).

use super::hints::{Hinted, hint_args};
use super::scripts::{APPEND_MESSAGES, PUBLISH_MESSAGES};
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use bytes::Bytes;
use prost::Message as _;
use redis::Value;
use std::collections::HashMap;
use std::time::Duration;

/// A message about to be published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewMessage {
    pub payload: Bytes,
    pub attributes: HashMap<String, String>,
    pub ordering_key: String,
    /// Idempotency key; empty for none.
    pub dedupe_id: String,
    pub due: Due,
}

/// When a message should be delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Due {
    #[default]
    Now,
    /// At this time, in ms since the Unix epoch (by Redis' clock).
    At(u64),
    /// After this long, counted from when Redis runs the publish.
    After(Duration),
}

/// One result per publish request, in request order: a request that breaks
/// a limit (or reuses a dedupe id for another number of messages) fails alone.
pub type RequestResults = Vec<Result<Vec<Published>>>;

/// The outcome of publishing one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub message_id: String,
    /// The dedupe id was already used in the window; `message_id` is the original's.
    pub duplicate: bool,
    /// When the message is (or was) due, in ms since the epoch; for a
    /// duplicate, the original's (None when it cannot be told).
    pub due_ms: Option<u64>,
    /// How long until it is due, when it waits in the schedule rather than in the stream.
    pub scheduled_in: Option<Duration>,
}

/// One publish request's messages, with the request's own idempotency key
/// (empty for none): a retry of it within the dedupe window publishes
/// nothing and answers the first one's ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublishBatch {
    pub dedupe_id: String,
    pub messages: Vec<NewMessage>,
}

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

/// A message read back from a stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    /// Stream entry id; it also carries the time the entry was appended.
    pub id: String,
    /// The id its publisher got: the entry id, or the scheduled message's id.
    pub message_id: String,
    /// Due time of a scheduled message, ms since the epoch.
    pub due_ms: Option<u64>,
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
            + self.message_id.len()
            + self.payload.len()
            + self.ordering_key.len()
            + self
                .attributes
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + 48
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

/// What an entry's `m` field holds.
#[derive(Clone, PartialEq, prost::Message)]
struct StoredMessage {
    #[prost(bytes = "bytes", tag = "1")]
    payload: Bytes,
    #[prost(map = "string, string", tag = "2")]
    attributes: HashMap<String, String>,
    #[prost(string, tag = "3")]
    ordering_key: String,
}

fn encode_message(message: &NewMessage) -> Vec<u8> {
    StoredMessage {
        payload: message.payload.clone(),
        attributes: message.attributes.clone(),
        ordering_key: message.ordering_key.clone(),
    }
    .encode_to_vec()
}

/// Length of the random part of a scheduled message's id, in hex digits.
const SCHEDULED_ID_HEX: usize = 20;

/// A fresh id for a scheduled message: `s` and 80 random bits in hex. The
/// prefix tells scheduled ids from stream entry ids.
fn new_scheduled_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("s{}", &random[..SCHEDULED_ID_HEX])
}

/// Whether `id` has the shape of a scheduled message id.
pub fn is_scheduled_id(id: &str) -> bool {
    id.len() == SCHEDULED_ID_HEX + 1
        && id.starts_with('s')
        && id[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The time part of a stream entry id (`<ms>-<seq>`).
pub fn entry_time_ms(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// The greatest possible entry id before `id` (`0-0` for the first): the
/// last one to skip so that `id` is read next.
pub fn entry_id_before(id: &str) -> String {
    let (ms, seq) = id
        .split_once('-')
        .and_then(|(ms, seq)| Some((ms.parse::<u64>().ok()?, seq.parse::<u64>().ok()?)))
        .unwrap_or((0, 0));
    match (ms, seq) {
        (0, 0) => "0-0".to_owned(),
        (ms, 0) => format!("{}-{}", ms - 1, u64::MAX),
        (ms, seq) => format!("{ms}-{}", seq - 1),
    }
}

/// The least possible entry id after `id`: the first to read so that `id` is
/// skipped; None after the greatest (Redis refuses `(` before it).
pub fn entry_id_after(id: &str) -> Option<String> {
    let (ms, seq) = parse_entry_id(id)?;
    match seq.checked_add(1) {
        Some(seq) => Some(format!("{ms}-{seq}")),
        None => Some(format!("{}-0", ms.checked_add(1)?)),
    }
}

/// The two numbers of a stream entry id Redis accepts, `<ms>-<seq>`.
/// Digits alone are not enough: Redis rejects `18446744073709551616-0`.
pub fn parse_entry_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(ms) || !digits(seq) {
        return None;
    }
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Whether `id` is a stream entry id Redis accepts.
pub fn is_entry_id(id: &str) -> bool {
    parse_entry_id(id).is_some()
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
            self.publish_scripted(keys, requests, dedupe_window).await
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

    async fn publish_scripted(
        &self,
        keys: &TopicKeys,
        requests: &[PublishBatch],
        dedupe_window: Duration,
    ) -> Result<RequestResults> {
        let mut invocation = PUBLISH_MESSAGES.key(keys.stream());
        invocation
            .key(keys.scheduled())
            .key(keys.scheduled_messages())
            .key(keys.settings())
            .key(keys.watchers())
            .arg(dedupe_window.as_millis() as u64)
            .arg(&hint_args(self, keys, Hinted::Others)[..]);
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

pub(super) fn decode_entry(id: Value, fields: Value) -> Result<Entry> {
    decode_entry_with(id, fields, |_, _| {}) // fields of later versions are ignored
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
    fn scheduled_ids_are_told_from_entry_ids() {
        let id = new_scheduled_id();
        assert!(is_scheduled_id(&id), "{id}");
        assert!(!is_entry_id(&id));
        assert!(!is_scheduled_id("1700000000000-0"));
        assert_ne!(new_scheduled_id(), id);
    }

    #[test]
    fn the_id_before_an_entry_is_the_last_one_to_skip() {
        assert_eq!(entry_id_before("5-3"), "5-2");
        assert_eq!(entry_id_before("5-0"), format!("4-{}", u64::MAX));
        assert_eq!(entry_id_before("0-0"), "0-0");
        assert_eq!(entry_id_after("5-3").as_deref(), Some("5-4"));
        assert_eq!(
            entry_id_after(&format!("5-{}", u64::MAX)).as_deref(),
            Some("6-0")
        );
        assert_eq!(entry_id_after(&format!("{0}-{0}", u64::MAX)), None);
    }

    #[test]
    fn entry_ids_carry_their_time() {
        assert_eq!(entry_time_ms("1700000000123-7"), Some(1_700_000_000_123));
        assert!(is_entry_id("1-0"));
        assert!(!is_entry_id("1-"));
        assert!(!is_entry_id("x-1"));
        assert!(!is_entry_id("17"));
        assert!(is_entry_id("18446744073709551615-18446744073709551615"));
        for out_of_range in [
            "18446744073709551616-0",
            "99999999999999999999-0",
            "0-18446744073709551616",
            "+1-0",
        ] {
            assert!(!is_entry_id(out_of_range), "{out_of_range}");
        }
    }

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
