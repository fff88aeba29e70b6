//! The JSON the dashboard API answers with, built from the broker's types.
//! Counts are plain integers; times are ms since the epoch, ages in ms.

use crate::broker::{SubscriptionView, TopicView};
use crate::model::{DeadLetter, DeadLetterReason, Entry, TopicKind, is_entry_id};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// Bytes of a payload shown as text (or JSON); the rest is left out.
const PAYLOAD_TEXT_BYTES: usize = 4096;
/// Bytes of a binary payload shown in hex.
const PAYLOAD_HEX_BYTES: usize = 1024;

/// What the caller may do here: the pages render change controls only then.
#[derive(Serialize, Clone, Copy)]
pub struct Grants {
    pub browse: bool,
    pub manage: bool,
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A topic's row in the topics table (`stats` None: left out of a listing
/// when its shard cannot be reached).
pub fn topic_row(topic: &TopicView) -> Value {
    let stats = topic.stats.clone().unwrap_or_default();
    json!({
        "name": topic.name,
        "kind": topic.kind.name(),
        "length": stats.stream_length,
        "scheduled": stats.scheduled,
        "next_due_ms": stats.next_due_ms,
        "published": stats.published,
        "dropped": stats.dropped,
        "subscriptions": topic.subscriptions.len(),
        "unavailable": topic.unavailable,
    })
}

/// A topic with its subscriptions (those the caller may view).
pub fn topic(topic: &TopicView, subscriptions: &[SubscriptionView], grants: Grants) -> Value {
    let mut value = topic_row(topic);
    let settings = &topic.settings;
    value["list_key"] = match &topic.kind {
        TopicKind::List { key } => json!(key),
        TopicKind::Stream | TopicKind::Ephemeral => Value::Null,
    };
    value["settings"] = json!({
        "retention_max_age_ms": settings.retention_max_age.map(ms),
        "retention_max_length": settings.retention_max_length,
        "hard_max_length": settings.hard_max_length,
        "dedupe_window_ms": settings.dedupe_window.map(ms),
        "max_payload_bytes": settings.max_payload_bytes,
    });
    value["subscriptions"] = subscriptions.iter().map(subscription_row).collect();
    value["may"] = json!(grants);
    value
}

/// A subscription's row on its topic's page.
pub fn subscription_row(view: &SubscriptionView) -> Value {
    let stats = &view.stats;
    json!({
        "name": view.name,
        "lag": stats.lag,
        "pending": stats.pending,
        "dead_letters": stats.dead_letters,
        "oldest_unacked_age_ms": stats.oldest_unacked_age.map(ms),
        "acked": stats.acked,
        "consumers": stats.consumers.len(),
    })
}

/// A subscription's page.
pub fn subscription(view: &SubscriptionView, grants: Grants) -> Value {
    let stats = &view.stats;
    let settings = &view.settings;
    json!({
        "topic": view.topic,
        "name": view.name,
        "lag": stats.lag,
        "pending": stats.pending,
        "oldest_unacked_age_ms": stats.oldest_unacked_age.map(ms),
        "dead_letters": stats.dead_letters,
        "acked": stats.acked,
        "consumers": stats.consumers.iter().map(|c| json!({
            "name": c.name,
            "pending": c.pending,
            "idle_ms": ms(c.idle),
        })).collect::<Vec<_>>(),
        "ordering": {
            "active_keys": stats.ordering.active_keys,
            "blocked": stats.ordering.blocked,
            "oldest_blocked_age_ms": stats.ordering.oldest_blocked_age.map(ms),
            "at_blocked_cap": stats.ordering.at_blocked_cap,
        },
        "settings": {
            "ack_deadline_ms": settings.ack_deadline.map(ms),
            "max_delivery_attempts": settings.retry.max_delivery_attempts,
            "minimum_backoff_ms": ms(settings.retry.minimum_backoff),
            "maximum_backoff_ms": ms(settings.retry.maximum_backoff),
            "dead_lettering": settings.dead_lettering,
            "message_ordering": settings.message_ordering,
            "filter": settings.filter,
        },
        "may": grants,
    })
}

/// A message as the browser shows it: payload as text, JSON or hex.
pub fn message(entry: &Entry) -> Value {
    let mut value = json!({
        "id": entry.id,
        "message_id": entry.message_id,
        // A scheduled message waiting has no stream entry yet.
        "publish_time_ms": is_entry_id(&entry.id).then(|| entry.publish_time_ms()),
        "due_ms": entry.due_ms,
        "ordering_key": entry.ordering_key,
        "attributes": entry.attributes.iter().collect::<BTreeMap<_, _>>(),
    });
    payload(&mut value, &entry.payload);
    value
}

/// A dead letter: `id` is the dead letter's own (ListDeadLetters' id).
pub fn dead_letter(dead_letter: &DeadLetter) -> Value {
    let mut value = message(&dead_letter.entry);
    value["id"] = json!(dead_letter.id);
    value["message_id"] = json!(dead_letter.entry.message_id);
    value["entry_id"] = json!(dead_letter.entry.id);
    value["attempts"] = json!(dead_letter.attempts);
    value["reason"] = json!(match dead_letter.reason {
        Some(DeadLetterReason::Nacked) => "nacked",
        Some(DeadLetterReason::DeadlineExceeded) => "deadline_exceeded",
        None => "unknown",
    });
    value["dead_lettered_ms"] = json!(dead_letter.dead_lettered_ms);
    value
}

/// Sets `payload` (its start), `payload_format` (`json`, `text` or `hex`),
/// `payload_bytes` and `payload_truncated`.
fn payload(value: &mut Value, payload: &[u8]) {
    let (shown, format) = match std::str::from_utf8(payload) {
        Ok(text) => {
            let format = if serde_json::from_str::<Value>(text).is_ok() {
                "json"
            } else {
                "text"
            };
            (truncate(text, PAYLOAD_TEXT_BYTES).to_owned(), format)
        }
        Err(_) => (
            hex::encode(&payload[..payload.len().min(PAYLOAD_HEX_BYTES)]),
            "hex",
        ),
    };
    let shown_bytes = if format == "hex" {
        shown.len() / 2
    } else {
        shown.len()
    };
    value["payload"] = json!(shown);
    value["payload_format"] = json!(format);
    value["payload_bytes"] = json!(payload.len());
    value["payload_truncated"] = json!(shown_bytes < payload.len());
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_show_as_json_text_or_hex() {
        let mut value = json!({});
        payload(&mut value, br#"{"a":1}"#);
        assert_eq!(value["payload_format"], "json");
        payload(&mut value, b"<img src=x onerror=alert(1)>");
        assert_eq!(value["payload_format"], "text");
        assert_eq!(value["payload"], "<img src=x onerror=alert(1)>");
        payload(&mut value, &[0xff, 0x00]);
        assert_eq!(value["payload"], "ff00");
        assert_eq!(value["payload_truncated"], false);
        let long = "é".repeat(PAYLOAD_TEXT_BYTES);
        payload(&mut value, long.as_bytes());
        assert_eq!(value["payload_truncated"], true);
    }
}
