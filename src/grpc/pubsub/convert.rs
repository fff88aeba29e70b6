//! Pub/Sub messages and subscriptions to and from redq's model, with
//! Pub/Sub's limits: these hold whatever `redq.v1`'s flags say.

use super::names::{Collection, ResourceName};
use super::ps;
use super::ps::streaming_pull_response::SubscriptionProperties;
use crate::broker::Delivery;
use crate::error::{Error, Result};
use crate::grpc::convert::timestamp_ms;
use crate::model::{DEFAULT_MAX_BLOCKED, Due, NewMessage, RetryPolicy, SubscriptionSettings};
use std::time::Duration;

/// Messages in one publish request, at most (Google's limit).
pub const MAX_MESSAGES_PER_PUBLISH: usize = 1000;
/// Bytes of data, attributes and ordering keys in one publish request.
pub const MAX_PUBLISH_BYTES: usize = 10_000_000;
pub const MAX_ATTRIBUTES: usize = 100;
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 256;
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 1024;
pub const MAX_ORDERING_KEY_BYTES: usize = 1024;
/// Largest response redq sends on StreamingPull and Pull: clients pointed
/// at an emulator open plain channels that refuse messages over 4 MiB.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024 - 64 * 1024;
/// Largest message (data, attributes and ordering key): one must fit in a
/// response with its ack id and envelope. Google takes up to 10 MB.
pub const MAX_MESSAGE_BYTES: usize = MAX_RESPONSE_BYTES - 16 * 1024;

pub const DEFAULT_ACK_DEADLINE: Duration = Duration::from_secs(10);
pub const MIN_ACK_DEADLINE_SECONDS: i32 = 10;
pub const MAX_ACK_DEADLINE_SECONDS: i32 = 600;
const DEFAULT_MIN_BACKOFF: Duration = Duration::from_secs(10);
const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(600);
const MAX_BACKOFF: Duration = Duration::from_secs(600);
const DEFAULT_DELIVERY_ATTEMPTS: i32 = 5;
const DELIVERY_ATTEMPTS: std::ops::RangeInclusive<i32> = 5..=100;
const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
const RETENTION: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(600)..=Duration::from_secs(7 * 24 * 3600);
const DEFAULT_EXPIRATION: Duration = Duration::from_secs(31 * 24 * 3600);

/// A publish request's messages, checked against Pub/Sub's limits.
pub fn new_messages(messages: Vec<ps::PubsubMessage>) -> Result<Vec<NewMessage>> {
    if messages.is_empty() {
        return Err(Error::invalid("messages", "must not be empty"));
    }
    if messages.len() > MAX_MESSAGES_PER_PUBLISH {
        return Err(Error::invalid(
            "messages",
            format!("at most {MAX_MESSAGES_PER_PUBLISH} per request"),
        ));
    }
    let mut total = 0;
    let mut converted = Vec::with_capacity(messages.len());
    let mut ordering_key: Option<&str> = None;
    for (i, message) in messages.iter().enumerate() {
        // As Google's service: the clients batch per ordering key.
        let key = message.ordering_key.as_str();
        if !key.is_empty() && *ordering_key.get_or_insert(key) != key {
            return Err(Error::invalid(
                format!("messages[{i}].ordering_key"),
                "the messages of one request have one ordering key",
            ));
        }
    }
    for (i, message) in messages.into_iter().enumerate() {
        let size = message_size(&message);
        check_message(i, &message, size)?;
        total += size;
        if total > MAX_PUBLISH_BYTES {
            return Err(Error::invalid(
                "messages",
                format!("more than {MAX_PUBLISH_BYTES} bytes in one request"),
            ));
        }
        let ps::PubsubMessage {
            data,
            attributes,
            ordering_key,
            message_id: _, // set by the server
            publish_time: _,
        } = message;
        converted.push(NewMessage {
            payload: data,
            attributes,
            ordering_key,
            dedupe_id: String::new(),
            due: Due::Now,
        });
    }
    Ok(converted)
}

fn message_size(message: &ps::PubsubMessage) -> usize {
    message.data.len()
        + message.ordering_key.len()
        + message
            .attributes
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

fn check_message(i: usize, message: &ps::PubsubMessage, size: usize) -> Result<()> {
    let field = |name: &str| format!("messages[{i}].{name}");
    if message.data.is_empty() && message.attributes.is_empty() {
        return Err(Error::invalid(
            field("data"),
            "a message needs data or attributes",
        ));
    }
    if size > MAX_MESSAGE_BYTES {
        return Err(Error::invalid(
            field("data"),
            format!(
                "the message is {size} bytes; redq takes at most {MAX_MESSAGE_BYTES} per message"
            ),
        ));
    }
    if message.attributes.len() > MAX_ATTRIBUTES {
        return Err(Error::invalid(
            field("attributes"),
            format!("at most {MAX_ATTRIBUTES} attributes"),
        ));
    }
    for (key, value) in &message.attributes {
        let invalid =
            |reason: String| Error::invalid(field(&format!("attributes[{key:?}]")), reason);
        if key.is_empty() || key.len() > MAX_ATTRIBUTE_KEY_BYTES {
            return Err(invalid(format!(
                "keys are 1 to {MAX_ATTRIBUTE_KEY_BYTES} bytes"
            )));
        }
        if key.starts_with("goog") {
            return Err(invalid("keys starting with \"goog\" are reserved".into()));
        }
        if value.len() > MAX_ATTRIBUTE_VALUE_BYTES {
            return Err(invalid(format!(
                "values are at most {MAX_ATTRIBUTE_VALUE_BYTES} bytes"
            )));
        }
    }
    if message.ordering_key.len() > MAX_ORDERING_KEY_BYTES {
        return Err(Error::invalid(
            field("ordering_key"),
            format!("at most {MAX_ORDERING_KEY_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// A delivery as Pub/Sub shows it; `delivery_attempt` is set only on
/// subscriptions with a dead-letter policy, as in Google's service.
pub fn received_message(delivery: Delivery, with_attempt: bool) -> ps::ReceivedMessage {
    let Delivery {
        ack_id,
        entry,
        attempt,
        topic: _,
    } = delivery;
    let publish_time = entry.publish_time_ms();
    ps::ReceivedMessage {
        ack_id,
        message: Some(ps::PubsubMessage {
            data: entry.payload,
            attributes: entry.attributes,
            message_id: entry.message_id,
            publish_time: Some(timestamp_ms(publish_time)),
            ordering_key: entry.ordering_key,
        }),
        delivery_attempt: if with_attempt { attempt as i32 } else { 0 },
    }
}

/// Bytes a received message takes in a response, about.
pub fn received_size(message: &ps::ReceivedMessage) -> usize {
    let body = message.message.as_ref().map_or(0, |m| {
        message_size(m) + m.message_id.len() + 16 + 4 * m.attributes.len()
    });
    message.ack_id.len() + body + 16
}

/// Splits `messages` into responses under [`MAX_RESPONSE_BYTES`].
pub fn responses(
    messages: Vec<ps::ReceivedMessage>,
    properties: SubscriptionProperties,
) -> Vec<ps::StreamingPullResponse> {
    let mut responses = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for message in messages {
        let size = received_size(&message);
        if !current.is_empty() && bytes + size > MAX_RESPONSE_BYTES {
            responses.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(message);
    }
    if !current.is_empty() {
        responses.push(current);
    }
    responses
        .into_iter()
        .map(|received_messages| ps::StreamingPullResponse {
            received_messages,
            subscription_properties: Some(properties),
            ..Default::default()
        })
        .collect()
}

pub fn properties(record: &ps::Subscription) -> SubscriptionProperties {
    SubscriptionProperties {
        exactly_once_delivery_enabled: record.enable_exactly_once_delivery,
        message_ordering_enabled: record.enable_message_ordering,
    }
}

/// An ack deadline in seconds from `field`: 10 to 600.
pub fn ack_deadline(field: &str, seconds: i32) -> Result<Duration> {
    if !(MIN_ACK_DEADLINE_SECONDS..=MAX_ACK_DEADLINE_SECONDS).contains(&seconds) {
        return Err(Error::invalid(
            field,
            format!(
                "must be {MIN_ACK_DEADLINE_SECONDS} to {MAX_ACK_DEADLINE_SECONDS} seconds, got {seconds}"
            ),
        ));
    }
    Ok(Duration::from_secs(seconds as u64))
}

/// A ModifyAckDeadline's new deadline: 0 (a nack) to 600 seconds.
pub fn modify_deadline(field: &str, seconds: i32) -> Result<Duration> {
    if !(0..=MAX_ACK_DEADLINE_SECONDS).contains(&seconds) {
        return Err(Error::invalid(
            field,
            format!("must be 0 to {MAX_ACK_DEADLINE_SECONDS} seconds, got {seconds}"),
        ));
    }
    Ok(Duration::from_secs(seconds as u64))
}

fn duration(field: &str, value: &prost_types::Duration) -> Result<Duration> {
    if value.seconds < 0 || value.nanos < 0 || value.nanos >= 1_000_000_000 {
        return Err(Error::invalid(field, "must be a non-negative duration"));
    }
    Ok(Duration::new(value.seconds as u64, value.nanos as u32))
}

fn duration_pb(value: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: value.as_secs() as i64,
        nanos: value.subsec_nanos() as i32,
    }
}

/// Checks a new subscription and fills in Pub/Sub's defaults, as Google's
/// service answers them. `name` and `topic` are checked by the caller.
pub fn complete_subscription(record: &mut ps::Subscription) -> Result<()> {
    record.ack_deadline_seconds = match record.ack_deadline_seconds {
        0 => DEFAULT_ACK_DEADLINE.as_secs() as i32,
        n => ack_deadline("ack_deadline_seconds", n)?.as_secs() as i32,
    };
    if let Some(policy) = &mut record.retry_policy {
        let min = match &policy.minimum_backoff {
            Some(d) => duration("retry_policy.minimum_backoff", d)?,
            None => DEFAULT_MIN_BACKOFF,
        };
        let max = match &policy.maximum_backoff {
            Some(d) => duration("retry_policy.maximum_backoff", d)?,
            None => DEFAULT_MAX_BACKOFF,
        };
        if min > MAX_BACKOFF || max > MAX_BACKOFF {
            return Err(Error::invalid(
                "retry_policy",
                "backoffs are at most 600 seconds",
            ));
        }
        if min > max {
            return Err(Error::invalid(
                "retry_policy",
                "minimum_backoff must not exceed maximum_backoff",
            ));
        }
        policy.minimum_backoff = Some(duration_pb(min));
        policy.maximum_backoff = Some(duration_pb(max));
    }
    if let Some(policy) = &mut record.dead_letter_policy {
        ResourceName::parse(
            "dead_letter_policy.dead_letter_topic",
            &policy.dead_letter_topic,
            Collection::Topics,
        )?;
        policy.max_delivery_attempts = match policy.max_delivery_attempts {
            0 => DEFAULT_DELIVERY_ATTEMPTS,
            n if DELIVERY_ATTEMPTS.contains(&n) => n,
            n => {
                return Err(Error::invalid(
                    "dead_letter_policy.max_delivery_attempts",
                    format!("must be 5 to 100, got {n}"),
                ));
            }
        };
    }
    let retention = match &record.message_retention_duration {
        Some(d) => duration("message_retention_duration", d)?,
        None => DEFAULT_RETENTION,
    };
    if !RETENTION.contains(&retention) {
        return Err(Error::invalid(
            "message_retention_duration",
            "must be 10 minutes to 7 days",
        ));
    }
    record.message_retention_duration = Some(duration_pb(retention));
    if record.expiration_policy.is_none() {
        record.expiration_policy = Some(ps::ExpirationPolicy {
            ttl: Some(duration_pb(DEFAULT_EXPIRATION)),
        });
    }
    record.state = ps::subscription::State::Active as i32;
    Ok(())
}

/// The redq settings of a checked, completed subscription: no retry policy
/// redelivers at once; only a dead-letter policy ends redeliveries.
pub fn subscription_settings(record: &ps::Subscription) -> SubscriptionSettings {
    let backoff = |d: &Option<prost_types::Duration>| {
        d.as_ref()
            .and_then(|d| duration("", d).ok())
            .unwrap_or_default()
    };
    let (minimum_backoff, maximum_backoff) = match &record.retry_policy {
        Some(policy) => (
            backoff(&policy.minimum_backoff),
            backoff(&policy.maximum_backoff),
        ),
        None => (Duration::ZERO, Duration::ZERO),
    };
    let max_delivery_attempts = record
        .dead_letter_policy
        .as_ref()
        .map_or(0, |policy| policy.max_delivery_attempts.max(0) as u32);
    SubscriptionSettings {
        ack_deadline: Some(Duration::from_secs(
            record
                .ack_deadline_seconds
                .clamp(MIN_ACK_DEADLINE_SECONDS, MAX_ACK_DEADLINE_SECONDS) as u64,
        )),
        retry: RetryPolicy {
            minimum_backoff,
            maximum_backoff,
            max_delivery_attempts,
        },
        dead_lettering: record.dead_letter_policy.is_some(),
        message_ordering: record.enable_message_ordering,
        max_blocked: DEFAULT_MAX_BLOCKED,
        filter: record.filter.clone(),
        limits: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn message(data: &[u8], attributes: &[(&str, &str)]) -> ps::PubsubMessage {
        ps::PubsubMessage {
            data: data.to_vec().into(),
            attributes: attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
            ..Default::default()
        }
    }

    fn field(result: Result<Vec<NewMessage>>) -> String {
        match result {
            Err(Error::InvalidArgument { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn messages_need_data_or_attributes() {
        assert!(new_messages(vec![message(b"", &[("k", "v")])]).is_ok());
        assert!(new_messages(vec![message(b"x", &[])]).is_ok());
        assert_eq!(
            field(new_messages(vec![message(b"", &[])])),
            "messages[0].data"
        );
        assert_eq!(field(new_messages(vec![])), "messages");
    }

    #[test]
    fn pubsub_limits_are_enforced_naming_the_message() {
        let many: Vec<(String, String)> =
            (0..101).map(|i| (format!("k{i}"), String::new())).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let ok = message(b"x", &[]);
        assert_eq!(
            field(new_messages(vec![ok.clone(), message(b"x", &many)])),
            "messages[1].attributes"
        );
        let long_key = "k".repeat(257);
        assert!(
            field(new_messages(vec![message(b"x", &[(&long_key, "v")])]))
                .starts_with("messages[0].attributes[")
        );
        let long_value = "v".repeat(1025);
        assert!(
            field(new_messages(vec![message(b"x", &[("k", &long_value)])]))
                .starts_with("messages[0].attributes[")
        );
        assert!(
            new_messages(vec![message(
                b"x",
                &[(&"k".repeat(256), &"v".repeat(1024))]
            )])
            .is_ok()
        );
        assert_eq!(field(new_messages(vec![ok.clone(); 1001])), "messages");
        let big = message(&vec![b'x'; MAX_MESSAGE_BYTES + 1], &[]);
        assert_eq!(field(new_messages(vec![big])), "messages[0].data");
        let three_mib = message(&vec![b'x'; 3 * 1024 * 1024], &[]);
        assert!(new_messages(vec![three_mib.clone(); 3]).is_ok());
        assert_eq!(field(new_messages(vec![three_mib; 4])), "messages");
    }

    #[test]
    fn a_request_has_one_ordering_key() {
        let keyed = |key: &str| ps::PubsubMessage {
            ordering_key: key.into(),
            ..message(b"x", &[])
        };
        assert!(new_messages(vec![keyed("a"), keyed(""), keyed("a")]).is_ok());
        assert_eq!(
            field(new_messages(vec![keyed("a"), keyed(""), keyed("b")])),
            "messages[2].ordering_key"
        );
    }

    #[test]
    fn responses_stay_under_the_limit() {
        let big = ps::ReceivedMessage {
            ack_id: "a".into(),
            message: Some(message(&vec![b'x'; MAX_MESSAGE_BYTES], &[])),
            delivery_attempt: 0,
        };
        let small = ps::ReceivedMessage {
            ack_id: "b".into(),
            message: Some(message(b"x", &[])),
            delivery_attempt: 0,
        };
        let responses = responses(
            vec![small.clone(), big.clone(), small, big],
            Default::default(),
        );
        assert_eq!(responses.len(), 2);
        for response in responses {
            assert!(prost::Message::encoded_len(&response) <= 4 * 1024 * 1024);
        }
    }

    #[test]
    fn subscriptions_get_pubsub_defaults() {
        let mut record = ps::Subscription {
            retry_policy: Some(Default::default()),
            ..Default::default()
        };
        complete_subscription(&mut record).unwrap();
        assert_eq!(record.ack_deadline_seconds, 10);
        let settings = subscription_settings(&record);
        assert_eq!(settings.retry.minimum_backoff, Duration::from_secs(10));
        assert_eq!(settings.retry.maximum_backoff, Duration::from_secs(600));
        assert_eq!(settings.retry.max_delivery_attempts, 0);
        assert!(!settings.dead_lettering);

        let mut plain = ps::Subscription::default();
        complete_subscription(&mut plain).unwrap();
        assert_eq!(
            subscription_settings(&plain).retry.maximum_backoff,
            Duration::ZERO
        );

        for (deadline, ok) in [(9, false), (10, true), (600, true), (601, false)] {
            let mut record = ps::Subscription {
                ack_deadline_seconds: deadline,
                ..Default::default()
            };
            assert_eq!(complete_subscription(&mut record).is_ok(), ok, "{deadline}");
        }
        let mut dead = ps::Subscription {
            dead_letter_policy: Some(ps::DeadLetterPolicy {
                dead_letter_topic: "projects/p/topics/dead".into(),
                max_delivery_attempts: 0,
            }),
            ..Default::default()
        };
        complete_subscription(&mut dead).unwrap();
        assert_eq!(subscription_settings(&dead).retry.max_delivery_attempts, 5);
        dead.dead_letter_policy
            .as_mut()
            .unwrap()
            .max_delivery_attempts = 4;
        assert!(complete_subscription(&mut dead).is_err());
    }
}
