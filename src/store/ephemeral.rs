//! EPHEMERAL topics in Redis: publishing to their Pub/Sub channels, and
//! what those carry. Nothing of a message is kept once it is published, except
//! while it waits in the schedule.

use super::stream::{RequestResults, StoredMessage};
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{Entry, PublishBatch};
use bytes::Bytes;
use prost::Message;
use std::time::Duration;

impl Store {
    /// Publishes requests to an EPHEMERAL topic: what is due now to its
    /// channel, the rest to the schedule (promote_due.lua publishes it when
    /// due). Dedupe ids work as on STREAM topics.
    pub async fn publish_ephemeral(
        &self,
        keys: &TopicKeys,
        requests: &[PublishBatch],
        dedupe_window: Duration,
    ) -> Result<RequestResults> {
        self.publish_scripted(keys, requests, dedupe_window, &keys.channel())
            .await
    }
}

/// A message as an EPHEMERAL channel carries it: `<id> <publish ms>
/// <encoded message>`. The entry's id is `<publish ms>-0`, so that it tells
/// the publish time as stream entry ids do; `message_id` is the id Publish
/// answered.
pub fn decode_channel_message(payload: &[u8]) -> Result<Entry> {
    let corrupt = || Error::Corrupt("EPHEMERAL channel message".into());
    let mut parts = payload.splitn(3, |&b| b == b' ');
    let (Some(id), Some(ms), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(corrupt());
    };
    let id = std::str::from_utf8(id).map_err(|_| corrupt())?;
    let ms: u64 = std::str::from_utf8(ms)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .ok_or_else(corrupt)?;
    let stored = StoredMessage::decode(Bytes::copy_from_slice(body)).map_err(|_| corrupt())?;
    Ok(Entry {
        id: format!("{ms}-0"),
        message_id: id.to_owned(),
        due_ms: None,
        payload: stored.payload,
        attributes: stored.attributes,
        ordering_key: stored.ordering_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewMessage;
    use crate::store::stream::encode_message;

    #[test]
    fn channel_messages_decode_and_bad_ones_are_an_error() {
        let message = NewMessage {
            payload: Bytes::from_static(b"with spaces inside"),
            attributes: [("k".to_owned(), "v".to_owned())].into(),
            ..NewMessage::default()
        };
        let mut wire = b"s0123 1700000000123 ".to_vec();
        wire.extend(encode_message(&message));
        let entry = decode_channel_message(&wire).unwrap();
        assert_eq!(entry.message_id, "s0123");
        assert_eq!(entry.publish_time_ms(), 1_700_000_000_123);
        assert_eq!(entry.payload, message.payload);
        assert_eq!(entry.attributes, message.attributes);
        for bad in [&b"no-spaces"[..], b"id notanumber x", b"id 12"] {
            assert!(decode_channel_message(bad).is_err(), "{bad:?}");
        }
    }
}
