//! QueueService's requests into the model, and the model into its responses.

use super::{
    MAX_DEDUPE_ID_BYTES, MAX_NAME_LEN, check_name, delivery_attempts_default, lease_duration,
    optional_duration, timestamp_ms,
};
use crate::broker::ack_id::{self, AckId};
use crate::broker::{Delivery, DeliveryBatch, SubscribeOptions};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::model::Pattern;
use crate::model::{
    AckConfirmation, Due, Entry, GroupStart, NewMessage, PublishBatch, Published, Rescheduled,
    RetryPolicy,
};
use crate::pb;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

pub(super) fn publish_messages(
    messages: Vec<pb::PublishMessage>,
    limits: &Limits,
) -> Result<Vec<NewMessage>> {
    non_empty_within(
        "messages",
        messages.len(),
        limits.max_batch_size,
        "messages ",
    )?;
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
pub(super) fn publish_message(
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
        pattern,
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
    if !consumer.is_empty() {
        check_name("consumer", &consumer)?;
    }
    let max_outstanding = default_or_within(
        "max_outstanding_messages",
        max_outstanding_messages,
        limits.default_max_outstanding,
        limits.max_outstanding_limit,
    )?;
    let max_outstanding_bytes = default_or_within(
        "max_outstanding_bytes",
        max_outstanding_bytes,
        limits.default_max_outstanding_bytes,
        limits.subscribe_buffer_bytes,
    )?;
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
    let pattern = subscribe_pattern(&topic, pattern)?;
    Ok(SubscribeOptions {
        topic,
        pattern,
        allowed_topics: None, // the caller's grants, set by the handler
        subscription,
        consumer,
        named_consumer: false,
        max_outstanding,
        max_outstanding_bytes,
        max_unacked_bytes: 0,
        ack_deadline,
        start,
        retry,
        message_ordering: enable_message_ordering,
    })
}

/// A Subscribe request's pattern of EPHEMERAL topics: NATS-style
/// (`sensors.*.temp`, `sensors.>`), given instead of a topic.
pub fn subscribe_pattern(topic: &str, pattern: String) -> Result<Option<Pattern>> {
    if pattern.is_empty() {
        return Ok(None);
    }
    if !topic.is_empty() {
        return Err(Error::invalid(
            "pattern",
            "give a topic or a pattern, not both",
        ));
    }
    let parsed = Pattern::parse(&pattern).map_err(|reason| Error::invalid("pattern", reason))?;
    // Segments are topic-name characters or a wildcard: the pattern's
    // prefix becomes part of a Redis channel pattern, where `?`, `[` and `\`
    // would mean something.
    let name_like = pattern
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'*' | b'>'));
    if !name_like {
        return Err(Error::invalid(
            "pattern",
            "segments are names ([A-Za-z0-9._-]), `*` or a last `>`",
        ));
    }
    Ok(Some(parsed))
}

/// A flow-control `field`: 0 means `default`, more than `max` is refused.
fn default_or_within<T: PartialOrd + Default + std::fmt::Display>(
    field: &str,
    value: T,
    default: T,
    max: T,
) -> Result<T> {
    if value == T::default() {
        Ok(default)
    } else if value > max {
        Err(Error::invalid(field, format!("at most {max}")))
    } else {
        Ok(value)
    }
}

/// A repeated `field` holds at least one and at most `max` items (`what`
/// names them in the message: "at most 100 messages per call").
fn non_empty_within(field: &str, len: usize, max: u32, what: &str) -> Result<()> {
    if len == 0 {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if len > max as usize {
        return Err(Error::invalid(
            field,
            format!("at most {max} {what}per call"),
        ));
    }
    Ok(())
}

/// Validates the ack ids of Ack, Nack and ModifyAckDeadline (their names
/// are checked with the request's target).
pub fn ack_ids(ack_ids: &[String], limits: &Limits) -> Result<Vec<AckId>> {
    non_empty_within("ack_ids", ack_ids.len(), limits.max_outstanding_limit, "")?;
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
    let batch = batch?;
    let dropped = batch.dropped();
    let messages = batch
        .into_deliveries()
        .into_iter()
        .map(received_message)
        .collect();
    Ok(pb::SubscribeResponse {
        messages,
        confirmation: None,
        dropped,
    })
}

pub fn received_message(delivery: Delivery) -> pb::ReceivedMessage {
    let Delivery {
        topic,
        ack_id,
        entry,
        attempt,
    } = delivery;
    pb::ReceivedMessage {
        ack_id,
        message: Some(message(entry, &topic)),
        delivery_attempt: attempt,
    }
}

/// `entry` of `topic` as the API shows a message.
pub(super) fn message(entry: Entry, topic: &str) -> pb::Message {
    let publish_time = entry.publish_time_ms();
    pb::Message {
        topic: topic.to_owned(),
        id: entry.message_id,
        payload: entry.payload,
        attributes: entry.attributes,
        ordering_key: entry.ordering_key,
        publish_time: Some(timestamp_ms(publish_time)),
        deliver_at: Some(timestamp_ms(entry.due_ms.unwrap_or(publish_time))),
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

pub fn ack_confirmation(confirmation: AckConfirmation) -> pb::AckConfirmation {
    let AckConfirmation {
        acked_ids,
        nacked_ids,
        modified_ids,
        lost_ids,
        invalid_ids,
    } = confirmation;
    pb::AckConfirmation {
        acked_ids,
        nacked_ids,
        modified_ids,
        lost_ids,
        invalid_ids,
    }
}
