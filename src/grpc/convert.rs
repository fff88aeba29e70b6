//! Request validation and proto <-> domain conversions. Every client mistake
//! becomes `Error::InvalidArgument` naming the field.

use crate::broker::{Delivery, SubscribeOptions, ack_id};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::pb;
use crate::store::leases::Lease;
use crate::store::stream::{GroupStart, NewEntry};
use std::time::Duration;

/// Longest topic, subscription or consumer name.
const MAX_NAME_LEN: usize = 200;

/// Names match `[A-Za-z0-9][A-Za-z0-9._-]{0,199}` (DESIGN §2).
pub fn check_name(field: &str, name: &str) -> Result<()> {
    let mut bytes = name.bytes();
    let Some(first) = bytes.next() else {
        return Err(Error::invalid(field, "must not be empty"));
    };
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_NAME_LEN} characters"),
        ));
    }
    let valid = first.is_ascii_alphanumeric()
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid {
        return Err(Error::invalid(
            field,
            "must match [A-Za-z0-9][A-Za-z0-9._-]{0,199}",
        ));
    }
    Ok(())
}

pub fn publish_entries(
    messages: Vec<pb::PublishMessage>,
    limits: &Limits,
) -> Result<Vec<NewEntry>> {
    if messages.is_empty() {
        return Err(Error::invalid("messages", "must not be empty"));
    }
    if messages.len() > limits.max_batch_size as usize {
        return Err(Error::invalid(
            "messages",
            format!("at most {} messages per call", limits.max_batch_size),
        ));
    }
    messages
        .into_iter()
        .enumerate()
        .map(|(i, message)| {
            let pb::PublishMessage {
                payload,
                attributes,
                ordering_key,
            } = message;
            if payload.is_empty() {
                return Err(Error::invalid(
                    format!("messages[{i}].payload"),
                    "must not be empty",
                ));
            }
            if payload.len() > limits.max_payload_bytes as usize {
                return Err(Error::invalid(
                    format!("messages[{i}].payload"),
                    format!(
                        "is {} bytes, more than the limit of {}",
                        payload.len(),
                        limits.max_payload_bytes
                    ),
                ));
            }
            if attributes.len() > limits.max_attributes as usize {
                return Err(Error::invalid(
                    format!("messages[{i}].attributes"),
                    format!("at most {} attributes", limits.max_attributes),
                ));
            }
            if let Some((key, _)) = attributes.iter().find(|(k, v)| {
                k.is_empty() || k.len() + v.len() > limits.max_attribute_bytes as usize
            }) {
                return Err(Error::invalid(
                    format!("messages[{i}].attributes[{key:?}]"),
                    format!(
                        "keys must not be empty and key plus value at most {} bytes",
                        limits.max_attribute_bytes
                    ),
                ));
            }
            if ordering_key.len() > limits.max_attribute_bytes as usize {
                return Err(Error::invalid(
                    format!("messages[{i}].ordering_key"),
                    format!("at most {} bytes", limits.max_attribute_bytes),
                ));
            }
            Ok(NewEntry {
                payload,
                attributes,
                ordering_key,
            })
        })
        .collect()
}

pub fn subscribe_options(
    request: pb::SubscribeRequest,
    limits: &Limits,
) -> Result<SubscribeOptions> {
    let pb::SubscribeRequest {
        topic,
        subscription,
        consumer,
        max_outstanding_messages,
        ack_deadline,
        start,
    } = request;
    check_name("topic", &topic)?;
    check_name("subscription", &subscription)?;
    if !consumer.is_empty() {
        check_name("consumer", &consumer)?;
    }
    let max_outstanding = match max_outstanding_messages {
        0 => limits.default_max_outstanding,
        n if n > limits.max_outstanding_limit => {
            return Err(Error::invalid(
                "max_outstanding_messages",
                format!("at most {}", limits.max_outstanding_limit),
            ));
        }
        n => n,
    };
    let ack_deadline = match ack_deadline {
        None => limits.default_ack_deadline,
        Some(deadline) => lease_duration("ack_deadline", deadline, limits, false)?,
    };
    let start = match pb::StartPosition::try_from(start) {
        Ok(pb::StartPosition::Unspecified | pb::StartPosition::Earliest) => GroupStart::Earliest,
        Ok(pb::StartPosition::Latest) => GroupStart::Latest,
        Err(_) => {
            return Err(Error::invalid(
                "start",
                format!("unknown start position {start}"),
            ));
        }
    };
    Ok(SubscribeOptions {
        topic,
        subscription,
        consumer,
        max_outstanding,
        ack_deadline,
        start,
    })
}

/// A lease length: positive (or zero when `zero_allowed`) and at most the limit.
pub fn lease_duration(
    field: &str,
    duration: prost_types::Duration,
    limits: &Limits,
    zero_allowed: bool,
) -> Result<Duration> {
    let duration =
        Duration::try_from(duration).map_err(|_| Error::invalid(field, "must not be negative"))?;
    if duration.is_zero() && !zero_allowed {
        return Err(Error::invalid(field, "must be greater than zero"));
    }
    if duration > limits.max_ack_deadline {
        return Err(Error::invalid(
            field,
            format!(
                "must be at most {}",
                humantime::format_duration(limits.max_ack_deadline)
            ),
        ));
    }
    Ok(duration)
}

/// Validates the names and ack ids shared by Ack, Nack and ModifyAckDeadline.
pub fn leases(
    topic: &str,
    subscription: &str,
    ack_ids: &[String],
    limits: &Limits,
) -> Result<Vec<Lease>> {
    check_name("topic", topic)?;
    check_name("subscription", subscription)?;
    if ack_ids.is_empty() {
        return Err(Error::invalid("ack_ids", "must not be empty"));
    }
    if ack_ids.len() > limits.max_outstanding_limit as usize {
        return Err(Error::invalid(
            "ack_ids",
            format!("at most {} per call", limits.max_outstanding_limit),
        ));
    }
    ack_ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            ack_id::parse(id).ok_or_else(|| {
                Error::invalid(format!("ack_ids[{i}]"), "is not an ack id redq issued")
            })
        })
        .collect()
}

pub fn received_message(delivery: Delivery) -> pb::ReceivedMessage {
    let Delivery {
        ack_id,
        entry,
        attempt,
    } = delivery;
    let publish_time = timestamp_ms(entry.publish_time_ms());
    pb::ReceivedMessage {
        ack_id,
        message: Some(pb::Message {
            id: entry.id,
            payload: entry.payload,
            attributes: entry.attributes,
            ordering_key: entry.ordering_key,
            publish_time: Some(publish_time),
            deliver_at: Some(publish_time),
        }),
        delivery_attempt: attempt,
    }
}

fn timestamp_ms(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::collections::HashMap;

    fn message(payload: &'static [u8]) -> pb::PublishMessage {
        pb::PublishMessage {
            payload: Bytes::from_static(payload),
            ..Default::default()
        }
    }

    fn field_of(err: Error) -> String {
        match err {
            Error::InvalidArgument { field, .. } => field,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn names_follow_the_contract() {
        for good in ["a", "orders", "Orders.eu-1_x", &"a".repeat(200)] {
            assert!(check_name("topic", good).is_ok(), "{good}");
        }
        for bad in ["", ".a", "-a", "a b", "a/b", "a:b", "é", &"a".repeat(201)] {
            assert_eq!(
                field_of(check_name("topic", bad).unwrap_err()),
                "topic",
                "{bad}"
            );
        }
    }

    #[test]
    fn publish_errors_name_the_message_and_field() {
        let limits = Limits {
            max_payload_bytes: 4,
            max_batch_size: 2,
            max_attributes: 1,
            max_attribute_bytes: 8,
            ..Limits::default()
        };
        let field = |messages| field_of(publish_entries(messages, &limits).unwrap_err());
        assert_eq!(field(vec![]), "messages");
        assert_eq!(field(vec![message(b"a"); 3]), "messages");
        assert_eq!(
            field(vec![message(b"a"), message(b"")]),
            "messages[1].payload"
        );
        assert_eq!(field(vec![message(b"abcde")]), "messages[0].payload");
        let mut many = message(b"a");
        many.attributes = HashMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]);
        assert_eq!(field(vec![many]), "messages[0].attributes");
        let mut big = message(b"a");
        big.attributes = HashMap::from([("key".into(), "valuevalue".into())]);
        assert_eq!(field(vec![big]), "messages[0].attributes[\"key\"]");
        assert_eq!(
            publish_entries(vec![message(b"abcd")], &limits)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn subscribe_defaults_and_limits() {
        let limits = Limits::default();
        let request = pb::SubscribeRequest {
            topic: "t".into(),
            subscription: "s".into(),
            ..Default::default()
        };
        let options = subscribe_options(request.clone(), &limits).unwrap();
        assert_eq!(options.max_outstanding, 100);
        assert_eq!(options.ack_deadline, Duration::from_secs(30));
        assert_eq!(options.start, GroupStart::Earliest);
        let over = pb::SubscribeRequest {
            max_outstanding_messages: limits.max_outstanding_limit + 1,
            ..request.clone()
        };
        assert_eq!(
            field_of(subscribe_options(over, &limits).unwrap_err()),
            "max_outstanding_messages"
        );
        for seconds in [0, -1, 601] {
            let bad = pb::SubscribeRequest {
                ack_deadline: Some(prost_types::Duration { seconds, nanos: 0 }),
                ..request.clone()
            };
            assert_eq!(
                field_of(subscribe_options(bad, &limits).unwrap_err()),
                "ack_deadline"
            );
        }
    }

    #[test]
    fn malformed_ack_ids_are_named_by_index() {
        let limits = Limits::default();
        let ids = vec!["1-0/1/c".to_owned(), "garbage".to_owned()];
        assert_eq!(
            field_of(leases("t", "s", &ids, &limits).unwrap_err()),
            "ack_ids[1]"
        );
        assert_eq!(
            field_of(leases("t", "s", &[], &limits).unwrap_err()),
            "ack_ids"
        );
    }

    #[test]
    fn timestamps_keep_milliseconds() {
        let ts = timestamp_ms(1_700_000_000_123);
        assert_eq!((ts.seconds, ts.nanos), (1_700_000_000, 123_000_000));
    }
}
