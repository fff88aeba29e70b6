//! Request validation and proto <-> domain conversions. Every client mistake
//! becomes `Error::InvalidArgument` naming the field.

use crate::broker::ack_id::{self, AckId};
use crate::broker::{Delivery, DeliveryBatch, SeekTarget, SubscribeOptions};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::pb;
use crate::store::dead_letters::{DeadLetter, DeadLetterReason};
use crate::store::leases::RetryPolicy;
use crate::store::scheduled::Rescheduled;
use crate::store::stream::{
    Due, Entry, GroupStart, NewMessage, PublishBatch, Published, is_entry_id,
};
use crate::store::topics::ORDERED_MAX_DELIVERY_ATTEMPTS;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest topic, subscription or consumer name.
const MAX_NAME_LEN: usize = 200;
/// Longest dedupe id, in bytes.
pub const MAX_DEDUPE_ID_BYTES: usize = 256;
/// Dead letters per page when the request does not say, and at most.
const DEFAULT_PAGE_SIZE: u32 = 100;
const MAX_PAGE_SIZE: u32 = 1000;

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

/// A publish request's messages and its own dedupe id, validated.
pub fn publish_batch(
    messages: Vec<pb::PublishMessage>,
    dedupe_id: String,
    limits: &Limits,
) -> Result<PublishBatch> {
    check_dedupe_id("dedupe_id", &dedupe_id)?;
    Ok(PublishBatch {
        messages: publish_messages(messages, limits)?,
        dedupe_id,
    })
}

fn check_dedupe_id(field: &str, dedupe_id: &str) -> Result<()> {
    if dedupe_id.len() > MAX_DEDUPE_ID_BYTES {
        return Err(Error::invalid(
            field,
            format!("at most {MAX_DEDUPE_ID_BYTES} bytes"),
        ));
    }
    Ok(())
}

fn publish_messages(messages: Vec<pb::PublishMessage>, limits: &Limits) -> Result<Vec<NewMessage>> {
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
        .map(|(i, message)| publish_message(&format!("messages[{i}]."), message, limits))
        .collect()
}

/// A ScheduleDelayed request as the one message it publishes.
pub fn scheduled_message(
    message: Option<pb::PublishMessage>,
    deliver_at: Option<prost_types::Timestamp>,
    delay: Option<prost_types::Duration>,
    limits: &Limits,
) -> Result<NewMessage> {
    let message = message.ok_or_else(|| Error::invalid("message", "is required"))?;
    for (field, set) in [
        ("message.deliver_at", message.deliver_at.is_some()),
        ("message.delay", message.delay.is_some()),
    ] {
        if set {
            return Err(Error::invalid(
                field,
                "set deliver_at or delay on the request instead",
            ));
        }
    }
    let due = due("", deliver_at, delay, limits)?;
    if due == Due::Now {
        return Err(Error::invalid("deliver_at", "set deliver_at or delay"));
    }
    Ok(NewMessage {
        due,
        ..publish_message("message.", message, limits)?
    })
}

/// One message to publish; `prefix` locates it in the request (`messages[3].`).
fn publish_message(
    prefix: &str,
    message: pb::PublishMessage,
    limits: &Limits,
) -> Result<NewMessage> {
    let pb::PublishMessage {
        payload,
        attributes,
        ordering_key,
        dedupe_id,
        deliver_at,
        delay,
    } = message;
    if payload.is_empty() {
        return Err(Error::invalid(
            format!("{prefix}payload"),
            "must not be empty",
        ));
    }
    if payload.len() > limits.max_payload_bytes as usize {
        return Err(Error::invalid(
            format!("{prefix}payload"),
            format!(
                "is {} bytes, more than the limit of {}",
                payload.len(),
                limits.max_payload_bytes
            ),
        ));
    }
    if attributes.len() > limits.max_attributes as usize {
        return Err(Error::invalid(
            format!("{prefix}attributes"),
            format!("at most {} attributes", limits.max_attributes),
        ));
    }
    if let Some((key, _)) = attributes
        .iter()
        .find(|(k, v)| k.is_empty() || k.len() + v.len() > limits.max_attribute_bytes as usize)
    {
        return Err(Error::invalid(
            format!("{prefix}attributes[{key:?}]"),
            format!(
                "keys must not be empty and key plus value at most {} bytes",
                limits.max_attribute_bytes
            ),
        ));
    }
    if ordering_key.len() > limits.max_attribute_bytes as usize {
        return Err(Error::invalid(
            format!("{prefix}ordering_key"),
            format!("at most {} bytes", limits.max_attribute_bytes),
        ));
    }
    check_dedupe_id(&format!("{prefix}dedupe_id"), &dedupe_id)?;
    Ok(NewMessage {
        payload,
        attributes,
        ordering_key,
        dedupe_id,
        due: due(prefix, deliver_at, delay, limits)?,
    })
}

/// When a message is due: at `deliver_at`, after `delay` (at most one), or now.
pub fn due(
    prefix: &str,
    deliver_at: Option<prost_types::Timestamp>,
    delay: Option<prost_types::Duration>,
    limits: &Limits,
) -> Result<Due> {
    let too_far = || {
        format!(
            "must be at most {} ahead",
            humantime::format_duration(limits.max_delay)
        )
    };
    match (deliver_at, delay) {
        (Some(_), Some(_)) => Err(Error::invalid(
            format!("{prefix}deliver_at"),
            "set deliver_at or delay, not both",
        )),
        (Some(at), None) => {
            let field = format!("{prefix}deliver_at");
            let at = SystemTime::try_from(at)
                .ok()
                .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
                .ok_or_else(|| Error::invalid(&field, "is not a valid time after 1970"))?;
            let horizon = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                + limits.max_delay;
            if at > horizon {
                return Err(Error::invalid(field, too_far()));
            }
            Ok(Due::At(at.as_millis() as u64))
        }
        (None, Some(delay)) => {
            let field = format!("{prefix}delay");
            let delay = Duration::try_from(delay)
                .map_err(|_| Error::invalid(&field, "must not be negative"))?;
            if delay > limits.max_delay {
                return Err(Error::invalid(field, too_far()));
            }
            Ok(Due::After(delay))
        }
        (None, None) => Ok(Due::Now),
    }
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

pub fn publish_response(published: Vec<Published>) -> pb::PublishResponse {
    let mut response = pb::PublishResponse {
        message_ids: Vec::with_capacity(published.len()),
        duplicates: Vec::with_capacity(published.len()),
        deliver_at: Vec::with_capacity(published.len()),
    };
    for p in published {
        response.message_ids.push(p.message_id);
        response.duplicates.push(p.duplicate);
        response
            .deliver_at
            .push(timestamp_ms(p.due_ms.unwrap_or_default()));
    }
    response
}

pub fn schedule_response(published: Published) -> pb::ScheduleDelayedResponse {
    pb::ScheduleDelayedResponse {
        deliver_at: published.due_ms.map(timestamp_ms),
        message_id: published.message_id,
        duplicate: published.duplicate,
    }
}

pub fn reschedule_response(rescheduled: Option<Rescheduled>) -> pb::RescheduleDelayedResponse {
    pb::RescheduleDelayedResponse {
        rescheduled: rescheduled.is_some(),
        deliver_at: rescheduled.map(|r| timestamp_ms(r.due_ms)),
    }
}

/// A message id given to CancelScheduled or RescheduleDelayed.
pub fn message_id(message_id: &str) -> Result<()> {
    if message_id.is_empty() {
        return Err(Error::invalid("message_id", "must not be empty"));
    }
    if message_id.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "message_id",
            "is not a message id redq issued",
        ));
    }
    Ok(())
}

/// The nack delay: None for the subscription's backoff.
pub fn nack_delay(
    delay: Option<prost_types::Duration>,
    limits: &Limits,
) -> Result<Option<Duration>> {
    optional_duration("delay", delay, limits.max_delay)
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
        retry_policy,
        max_delivery_attempts,
        max_outstanding_bytes,
        enable_message_ordering,
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
    let max_outstanding_bytes = match max_outstanding_bytes {
        0 => limits.default_max_outstanding_bytes,
        n if n > limits.subscribe_buffer_bytes => {
            return Err(Error::invalid(
                "max_outstanding_bytes",
                format!("at most {}", limits.subscribe_buffer_bytes),
            ));
        }
        n => n,
    };
    let ack_deadline = ack_deadline
        .map(|deadline| lease_duration("ack_deadline", deadline, limits, false))
        .transpose()?;
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
    let pb::RetryPolicy {
        minimum_backoff,
        maximum_backoff,
    } = retry_policy.unwrap_or_default();
    let retry = RetryPolicy {
        minimum_backoff: optional_duration(
            "retry_policy.minimum_backoff",
            minimum_backoff,
            limits.max_delay,
        )?
        .unwrap_or(limits.retry_min_backoff),
        maximum_backoff: optional_duration(
            "retry_policy.maximum_backoff",
            maximum_backoff,
            limits.max_delay,
        )?
        .unwrap_or(limits.retry_max_backoff),
        max_delivery_attempts: match max_delivery_attempts {
            0 => delivery_attempts_default(limits, enable_message_ordering),
            n => n,
        },
    };
    if retry.minimum_backoff > retry.maximum_backoff {
        return Err(Error::invalid(
            "retry_policy",
            "minimum_backoff must not exceed maximum_backoff",
        ));
    }
    Ok(SubscribeOptions {
        topic,
        subscription,
        consumer,
        max_outstanding,
        max_outstanding_bytes,
        ack_deadline,
        start,
        retry,
        message_ordering: enable_message_ordering,
    })
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

/// Validates the names and ack ids shared by Ack, Nack and ModifyAckDeadline.
pub fn ack_ids(
    topic: &str,
    subscription: &str,
    ack_ids: &[String],
    limits: &Limits,
) -> Result<Vec<AckId>> {
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
            if id.len() > ack_id::MAX_LEN {
                return Err(Error::invalid(
                    format!("ack_ids[{i}]"),
                    format!("longer than {} bytes", ack_id::MAX_LEN),
                ));
            }
            ack_id::parse(id).ok_or_else(|| {
                Error::invalid(format!("ack_ids[{i}]"), "is not an ack id redq issued")
            })
        })
        .collect()
}

/// A Subscribe response from a batch of deliveries (or the error that ends the stream).
pub fn deliveries(batch: Result<DeliveryBatch>) -> Result<pb::SubscribeResponse, tonic::Status> {
    let messages = batch?
        .into_deliveries()
        .into_iter()
        .map(received_message)
        .collect();
    Ok(pb::SubscribeResponse {
        messages,
        confirmation: None,
    })
}

pub fn received_message(delivery: Delivery) -> pb::ReceivedMessage {
    let Delivery {
        ack_id,
        entry,
        attempt,
    } = delivery;
    pb::ReceivedMessage {
        ack_id,
        message: Some(message(entry)),
        delivery_attempt: attempt,
    }
}

fn message(entry: Entry) -> pb::Message {
    let publish_time = entry.publish_time_ms();
    pb::Message {
        id: entry.message_id,
        payload: entry.payload,
        attributes: entry.attributes,
        ordering_key: entry.ordering_key,
        publish_time: Some(timestamp_ms(publish_time)),
        deliver_at: Some(timestamp_ms(entry.due_ms.unwrap_or(publish_time))),
    }
}

/// Where a Seek moves its subscription: a time or a message id, exactly one.
pub fn seek_target(time: Option<prost_types::Timestamp>, message_id: String) -> Result<SeekTarget> {
    match (time, message_id.is_empty()) {
        (Some(_), false) => Err(Error::invalid("time", "set time or message_id, not both")),
        (None, true) => Err(Error::invalid("time", "set time or message_id")),
        (Some(time), true) => {
            let ms = SystemTime::try_from(time)
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .ok_or_else(|| Error::invalid("time", "is not a valid time after 1970"))?;
            Ok(SeekTarget::Time(ms.as_millis() as u64))
        }
        (None, false) if is_entry_id(&message_id) => Ok(SeekTarget::Message(message_id)),
        (None, false) => Err(Error::invalid(
            "message_id",
            "is not the id of a message in the topic (scheduled ids are not)",
        )),
    }
}

/// A StreamingSubscribe request's flow-control updates: the new bounds on
/// messages and bytes, None where the request leaves one as it is (0).
pub fn flow_control_update(
    max_outstanding_messages: u32,
    max_outstanding_bytes: u64,
    limits: &Limits,
) -> Result<(Option<u32>, Option<u64>)> {
    if max_outstanding_messages > limits.max_outstanding_limit {
        return Err(Error::invalid(
            "max_outstanding_messages",
            format!("at most {}", limits.max_outstanding_limit),
        ));
    }
    if max_outstanding_bytes > limits.subscribe_buffer_bytes {
        return Err(Error::invalid(
            "max_outstanding_bytes",
            format!("at most {}", limits.subscribe_buffer_bytes),
        ));
    }
    Ok((
        Some(max_outstanding_messages).filter(|&n| n > 0),
        Some(max_outstanding_bytes).filter(|&n| n > 0),
    ))
}

/// Page size and position of a ListDeadLetters request.
pub fn dead_letter_page(page_size: u32, page_token: &str) -> Result<(u32, Option<String>)> {
    let page_size = match page_size {
        0 => DEFAULT_PAGE_SIZE,
        n if n > MAX_PAGE_SIZE => {
            return Err(Error::invalid(
                "page_size",
                format!("at most {MAX_PAGE_SIZE}"),
            ));
        }
        n => n,
    };
    let after = match page_token {
        "" => None,
        token if is_entry_id(token) => Some(token.to_owned()),
        _ => return Err(Error::invalid("page_token", "is not a token redq issued")),
    };
    Ok((page_size, after))
}

pub fn dead_letter(dead_letter: DeadLetter) -> pb::DeadLetter {
    let DeadLetter {
        id,
        entry,
        attempts,
        reason,
        dead_lettered_ms,
    } = dead_letter;
    let reason = match reason {
        Some(DeadLetterReason::Nacked) => pb::DeadLetterReason::Nacked,
        Some(DeadLetterReason::DeadlineExceeded) => pb::DeadLetterReason::DeadlineExceeded,
        None => pb::DeadLetterReason::Unspecified,
    };
    pb::DeadLetter {
        dead_letter_id: id,
        message: Some(message(entry)),
        delivery_attempts: attempts,
        reason: reason.into(),
        dead_lettered_at: Some(timestamp_ms(dead_lettered_ms)),
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
        assert_eq!(
            field_of(ack_ids("t", "s", &ids, &limits).unwrap_err()),
            "ack_ids[1]"
        );
        assert_eq!(
            field_of(ack_ids("t", "s", &[], &limits).unwrap_err()),
            "ack_ids"
        );
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
