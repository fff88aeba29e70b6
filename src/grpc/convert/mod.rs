//! Request validation and proto <-> model conversions, one file per
//! service, with what both share here. Every client mistake becomes
//! `Error::InvalidArgument` naming the field.

mod admin;
mod queue;

pub use admin::{
    dead_letter, dead_letter_ids_valid, dead_letter_page, new_subscription, schedule_page,
    schedule_pb, schedule_spec, seek_target, subscription_pb, subscription_update, topic_pb,
    topic_settings,
};
pub use queue::{
    ack_confirmation, ack_ids, deliveries, due, flow_control_update, message_id, nack_delay,
    publish_batch, publish_response, received_message, reschedule_response, schedule_response,
    scheduled_message, subscribe_options,
};

use crate::config::Limits;
use crate::error::{Error, Result};
use crate::model::ORDERED_MAX_DELIVERY_ATTEMPTS;
use std::time::Duration;

/// Longest topic, subscription or consumer name.
pub(super) const MAX_NAME_LEN: usize = 200;
/// Longest dedupe id, in bytes.
pub const MAX_DEDUPE_ID_BYTES: usize = 256;
/// Dead letters per page when the request does not say, and at most.
const DEFAULT_PAGE_SIZE: u32 = 100;
const MAX_PAGE_SIZE: u32 = 1000;

/// Names of topics, subscriptions and consumers match
/// `[A-Za-z0-9][A-Za-z0-9._-]{0,199}`: no `/`, the separator of ack ids,
/// and no braces, which would break the hash tag of a topic's keys.
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

/// An optional non-negative duration, at most `max`.
fn optional_duration(
    field: &str,
    duration: Option<prost_types::Duration>,
    max: Duration,
) -> Result<Option<Duration>> {
    let Some(duration) = duration else {
        return Ok(None);
    };
    let duration =
        Duration::try_from(duration).map_err(|_| Error::invalid(field, "must not be negative"))?;
    if duration > max {
        return Err(Error::invalid(
            field,
            format!("must be at most {}", humantime::format_duration(max)),
        ));
    }
    Ok(Some(duration))
}

/// Deliveries before dead-lettering when a new subscription names none: the
/// server's default, except that an ordered subscription gets a finite one
/// (a poison message blocks its key until it is dead-lettered).
pub fn delivery_attempts_default(limits: &Limits, ordered: bool) -> u32 {
    match limits.max_delivery_attempts {
        0 if ordered => ORDERED_MAX_DELIVERY_ATTEMPTS,
        n => n,
    }
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

/// Page size and position of a ListDeadLetters request.
/// A page size of a listing (topics, dead letters): the default for 0, at
/// most the most a page holds.
pub fn page_size_or_default(page_size: u32) -> Result<u32> {
    match page_size {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if n > MAX_PAGE_SIZE => Err(Error::invalid(
            "page_size",
            format!("at most {MAX_PAGE_SIZE}"),
        )),
        n => Ok(n),
    }
}

pub fn timestamp_ms(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::queue::publish_messages;
    use super::*;
    use crate::model::{Due, GroupStart};
    use crate::pb;
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
        let field = |messages| field_of(publish_messages(messages, &limits).unwrap_err());
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
            publish_messages(vec![message(b"abcd")], &limits)
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
        assert_eq!(options.ack_deadline, None);
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
        assert_eq!(field_of(ack_ids(&ids, &limits).unwrap_err()), "ack_ids[1]");
        assert_eq!(field_of(ack_ids(&[], &limits).unwrap_err()), "ack_ids");
    }

    #[test]
    fn due_times_take_one_of_deliver_at_and_delay() {
        let limits = Limits::default();
        let at = prost_types::Timestamp {
            seconds: 1,
            nanos: 2_000_000,
        };
        let delay = prost_types::Duration {
            seconds: 3,
            nanos: 0,
        };
        assert_eq!(due("", None, None, &limits).unwrap(), Due::Now);
        assert_eq!(due("", Some(at), None, &limits).unwrap(), Due::At(1002));
        assert_eq!(
            due("", None, Some(delay), &limits).unwrap(),
            Due::After(Duration::from_secs(3))
        );
        let both = due("messages[2].", Some(at), Some(delay), &limits).unwrap_err();
        assert_eq!(field_of(both), "messages[2].deliver_at");
        let negative = prost_types::Duration {
            seconds: -1,
            nanos: 0,
        };
        assert_eq!(
            field_of(due("", None, Some(negative), &limits).unwrap_err()),
            "delay"
        );
        let years = prost_types::Duration {
            seconds: 11 * 365 * 86_400,
            nanos: 0,
        };
        assert_eq!(
            field_of(due("", None, Some(years), &limits).unwrap_err()),
            "delay"
        );
        let year = prost_types::Duration {
            seconds: 366 * 86_400,
            nanos: 0,
        };
        assert!(due("", None, Some(year), &limits).is_ok());
    }

    #[test]
    fn schedule_requests_need_a_time_on_the_request_only() {
        let limits = Limits::default();
        let delay = Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        });
        assert_eq!(
            field_of(scheduled_message(None, None, delay, &limits).unwrap_err()),
            "message"
        );
        assert_eq!(
            field_of(scheduled_message(Some(message(b"a")), None, None, &limits).unwrap_err()),
            "deliver_at"
        );
        let inner = pb::PublishMessage {
            delay,
            ..message(b"a")
        };
        assert_eq!(
            field_of(scheduled_message(Some(inner), None, delay, &limits).unwrap_err()),
            "message.delay"
        );
        let scheduled = scheduled_message(Some(message(b"a")), None, delay, &limits).unwrap();
        assert_eq!(scheduled.due, Due::After(Duration::from_secs(1)));
    }

    #[test]
    fn retry_policy_defaults_and_order() {
        let limits = Limits::default();
        let request = pb::SubscribeRequest {
            topic: "t".into(),
            subscription: "s".into(),
            ..Default::default()
        };
        let retry = subscribe_options(request.clone(), &limits).unwrap().retry;
        assert_eq!(retry.minimum_backoff, limits.retry_min_backoff);
        assert_eq!(retry.max_delivery_attempts, 0);
        let inverted = pb::SubscribeRequest {
            retry_policy: Some(pb::RetryPolicy {
                minimum_backoff: Some(prost_types::Duration {
                    seconds: 5,
                    nanos: 0,
                }),
                maximum_backoff: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
            }),
            ..request
        };
        assert_eq!(
            field_of(subscribe_options(inverted, &limits).unwrap_err()),
            "retry_policy"
        );
    }

    #[test]
    fn dead_letter_pages_are_bounded() {
        assert_eq!(dead_letter_page(0, "").unwrap(), (DEFAULT_PAGE_SIZE, None));
        assert_eq!(
            field_of(dead_letter_page(MAX_PAGE_SIZE + 1, "").unwrap_err()),
            "page_size"
        );
        assert_eq!(
            field_of(dead_letter_page(10, "nope").unwrap_err()),
            "page_token"
        );
        assert_eq!(
            dead_letter_page(10, "5-0").unwrap(),
            (10, Some("5-0".into()))
        );
    }

    #[test]
    fn timestamps_keep_milliseconds() {
        let ts = timestamp_ms(1_700_000_000_123);
        assert_eq!((ts.seconds, ts.nanos), (1_700_000_000, 123_000_000));
    }
}
