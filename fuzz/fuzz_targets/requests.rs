//! Every request message of proto/redq/v1/*.proto, decoded from bytes as the
//! server's codec does (`prost::Message::decode`) and, when it decodes, put
//! through the validation the handlers run before they touch Redis, in the
//! same order. Errors are turned into the `tonic::Status` (and its headers)
//! the client would get, since error messages quote the client's input.
//!
//! Input: the first byte picks the message type (`KINDS`, modulo its length;
//! fuzz/seeds/gen_seeds.py writes seeds with the same numbering), the rest
//! is the protobuf encoding.
//!
//! The AdminService validators of src/grpc/convert/admin.rs are called with
//! `--features admin`; without it the admin requests get the validation that
//! is reachable from here (names, page tokens, ack deadlines, entry ids,
//! seek times).

#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use redq::broker::SeekTarget;
use redq::config::Limits;
use redq::error::Error;
use redq::grpc::convert;
use redq::pb;
use redq::grpc::targets::Target;
use redq::model::{Due, is_entry_id};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

static LIMITS: LazyLock<Limits> = LazyLock::new(Limits::default);

/// The message types, in the order of the selector byte.
const KINDS: &[&str] = &[
    // QueueService
    "PublishRequest",
    "ScheduleDelayedRequest",
    "CancelScheduledRequest",
    "RescheduleDelayedRequest",
    "SubscribeRequest",
    "AckRequest",
    "NackRequest",
    "ModifyAckDeadlineRequest",
    "PublishStreamRequest",
    "StreamingSubscribeRequest",
    // AdminService
    "CreateTopicRequest",
    "GetTopicRequest",
    "ListTopicsRequest",
    "UpdateTopicRequest",
    "DeleteTopicRequest",
    "CreateSubscriptionRequest",
    "GetSubscriptionRequest",
    "ListSubscriptionsRequest",
    "UpdateSubscriptionRequest",
    "DeleteSubscriptionRequest",
    "ListDeadLettersRequest",
    "RedriveDeadLettersRequest",
    "PurgeDeadLettersRequest",
    "SeekRequest",
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let kind = usize::from(selector) % KINDS.len();
    if let Err(err) = validate(kind, body) {
        reject(err);
    }
});

/// What the client gets for a rejected request: the status and the headers
/// it is sent in (grpc-message carries the text, which may quote input).
fn reject(err: Error) {
    let invalid = matches!(err, Error::InvalidArgument { .. });
    assert!(invalid, "validation gave a non-client error: {err:?}");
    let status = tonic::Status::from(err);
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // The headers it travels in (grpc-message, percent-encoded) give back
    // the same status.
    let message = status.message().to_owned();
    let response = status.into_http::<()>();
    let back = tonic::Status::from_header_map(response.headers()).expect("a grpc-status header");
    assert_eq!(back.code(), tonic::Code::InvalidArgument);
    assert_eq!(back.message(), message);
}

/// Decodes `body` as `T`; a body that does not decode is answered by the
/// codec, and so is not a validation case.
fn decode<T: Message + Default>(body: &[u8]) -> Option<T> {
    T::decode(body).ok()
}

fn validate(kind: usize, body: &[u8]) -> Result<(), Error> {
    let limits = &*LIMITS;
    match KINDS[kind] {
        "PublishRequest" => {
            let Some(pb::PublishRequest {
                topic,
                messages,
                dedupe_id,
            }) = decode(body)
            else {
                return Ok(());
            };
            publish(&topic, messages, dedupe_id, limits)
        }
        "ScheduleDelayedRequest" => {
            let Some(pb::ScheduleDelayedRequest {
                topic,
                message,
                deliver_at,
                delay,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            let message = convert::scheduled_message(message, deliver_at, delay, limits)?;
            assert_ne!(message.due, Due::Now);
            check_new_message(&message, limits);
            Ok(())
        }
        "CancelScheduledRequest" => {
            let Some(pb::CancelScheduledRequest { topic, message_id }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::message_id(&message_id)
        }
        "RescheduleDelayedRequest" => {
            let Some(pb::RescheduleDelayedRequest {
                topic,
                message_id,
                deliver_at,
                delay,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::message_id(&message_id)?;
            let due = convert::due("", deliver_at, delay, limits)?;
            check_due(due, limits);
            Ok(())
        }
        "SubscribeRequest" => {
            let Some(request) = decode::<pb::SubscribeRequest>(body) else {
                return Ok(());
            };
            subscribe(request, limits)
        }
        "AckRequest" => {
            let Some(pb::AckRequest {
                topic,
                subscription,
                ack_ids,
            }) = decode(body)
            else {
                return Ok(());
            };
            check_ack_ids(&topic, &subscription, &ack_ids, limits)
        }
        "NackRequest" => {
            let Some(pb::NackRequest {
                topic,
                subscription,
                ack_ids,
                delay,
            }) = decode(body)
            else {
                return Ok(());
            };
            check_ack_ids(&topic, &subscription, &ack_ids, limits)?;
            if let Some(delay) = convert::nack_delay(delay, limits)? {
                assert!(delay <= limits.max_delay);
            }
            Ok(())
        }
        "ModifyAckDeadlineRequest" => {
            let Some(pb::ModifyAckDeadlineRequest {
                topic,
                subscription,
                ack_ids,
                ack_deadline,
            }) = decode(body)
            else {
                return Ok(());
            };
            check_ack_ids(&topic, &subscription, &ack_ids, limits)?;
            let ack_deadline =
                ack_deadline.ok_or_else(|| Error::invalid("ack_deadline", "is required"))?;
            let deadline = convert::lease_duration("ack_deadline", ack_deadline, limits, true)?;
            assert!(deadline <= limits.max_ack_deadline);
            Ok(())
        }
        "PublishStreamRequest" => {
            let Some(pb::PublishStreamRequest {
                request_id: _,
                topic,
                messages,
                dedupe_id,
            }) = decode(body)
            else {
                return Ok(());
            };
            publish(&topic, messages, dedupe_id, limits)
        }
        "StreamingSubscribeRequest" => {
            let Some(request) = decode::<pb::StreamingSubscribeRequest>(body) else {
                return Ok(());
            };
            streaming_subscribe(request, limits)
        }
        "CreateTopicRequest" => {
            let Some(pb::CreateTopicRequest { name, settings }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("name", &name)?;
            topic_settings(settings.unwrap_or_default(), limits)
        }
        "UpdateTopicRequest" => {
            let Some(pb::UpdateTopicRequest { name, settings }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("name", &name)?;
            topic_settings(settings.unwrap_or_default(), limits)
        }
        "GetTopicRequest" => {
            let Some(pb::GetTopicRequest { name }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("name", &name)
        }
        "DeleteTopicRequest" => {
            let Some(pb::DeleteTopicRequest { name }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("name", &name)
        }
        "ListTopicsRequest" => {
            let Some(pb::ListTopicsRequest {
                page_size,
                page_token,
            }) = decode(body)
            else {
                return Ok(());
            };
            page_size_or_default(page_size)?;
            if !page_token.is_empty() {
                convert::check_name("page_token", &page_token)?;
            }
            Ok(())
        }
        "CreateSubscriptionRequest" => {
            let Some(pb::CreateSubscriptionRequest {
                topic,
                name,
                settings,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("name", &name)?;
            new_subscription(settings.unwrap_or_default(), limits)
        }
        "UpdateSubscriptionRequest" => {
            let Some(pb::UpdateSubscriptionRequest {
                topic,
                name,
                settings,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("name", &name)?;
            subscription_update(settings.unwrap_or_default(), limits)
        }
        "GetSubscriptionRequest" => {
            let Some(pb::GetSubscriptionRequest { topic, name }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("name", &name)
        }
        "DeleteSubscriptionRequest" => {
            let Some(pb::DeleteSubscriptionRequest { topic, name }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("name", &name)
        }
        "ListSubscriptionsRequest" => {
            let Some(pb::ListSubscriptionsRequest { topic }) = decode(body) else {
                return Ok(());
            };
            convert::check_name("topic", &topic)
        }
        "ListDeadLettersRequest" => {
            let Some(pb::ListDeadLettersRequest {
                topic,
                subscription,
                page_size,
                page_token,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("subscription", &subscription)?;
            let (size, after) = convert::dead_letter_page(page_size, &page_token)?;
            assert!((1..=1000).contains(&size), "page size {size}");
            if let Some(after) = after {
                assert!(is_entry_id(&after), "{after:?}");
            }
            Ok(())
        }
        "RedriveDeadLettersRequest" => {
            let Some(pb::RedriveDeadLettersRequest {
                topic,
                subscription,
                dead_letter_ids,
                max_per_second: _,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("subscription", &subscription)?;
            dead_letter_ids_valid(&dead_letter_ids, limits)
        }
        "PurgeDeadLettersRequest" => {
            let Some(pb::PurgeDeadLettersRequest {
                topic,
                subscription,
                dead_letter_ids,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("subscription", &subscription)?;
            dead_letter_ids_valid(&dead_letter_ids, limits)
        }
        "SeekRequest" => {
            let Some(pb::SeekRequest {
                topic,
                subscription,
                time,
                message_id,
            }) = decode(body)
            else {
                return Ok(());
            };
            convert::check_name("topic", &topic)?;
            convert::check_name("subscription", &subscription)?;
            match convert::seek_target(time, message_id)? {
                SeekTarget::Message(id) => assert!(is_entry_id(&id)),
                SeekTarget::Time(_) => {}
            }
            Ok(())
        }
        other => unreachable!("{other} has no case"),
    }
}

/// Publish and each PublishStream request.
fn publish(
    topic: &str,
    messages: Vec<pb::PublishMessage>,
    dedupe_id: String,
    limits: &Limits,
) -> Result<(), Error> {
    convert::check_name("topic", topic)?;
    let count = messages.len();
    let batch = convert::publish_batch(messages, dedupe_id, limits)?;
    assert_eq!(batch.messages.len(), count);
    assert!(count <= limits.max_batch_size as usize);
    assert!(batch.dedupe_id.len() <= convert::MAX_DEDUPE_ID_BYTES);
    for message in &batch.messages {
        check_new_message(message, limits);
    }
    Ok(())
}

/// What publish_batch and scheduled_message promise of a message they accept.
fn check_new_message(message: &redq::model::NewMessage, limits: &Limits) {
    assert!(!message.payload.is_empty());
    assert!(message.payload.len() <= limits.max_payload_bytes as usize);
    assert!(message.attributes.len() <= limits.max_attributes as usize);
    for (key, value) in &message.attributes {
        assert!(!key.is_empty());
        assert!(key.len() + value.len() <= limits.max_attribute_bytes as usize);
    }
    assert!(message.ordering_key.len() <= limits.max_attribute_bytes as usize);
    assert!(message.dedupe_id.len() <= convert::MAX_DEDUPE_ID_BYTES);
    check_due(message.due, limits);
}

fn check_due(due: Due, limits: &Limits) {
    match due {
        Due::Now => {}
        Due::After(delay) => assert!(delay <= limits.max_delay, "{delay:?}"),
        Due::At(ms) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let horizon = (now + limits.max_delay + Duration::from_secs(60)).as_millis();
            assert!(u128::from(ms) <= horizon, "due at {ms} ms");
        }
    }
}

fn subscribe(request: pb::SubscribeRequest, limits: &Limits) -> Result<(), Error> {
    request.check_names()?;
    let consumer_given = !request.consumer.is_empty();
    let options = convert::subscribe_options(request, limits)?;
    // A pattern stream names no topic; any other stream names a valid one.
    match &options.pattern {
        Some(_) => assert!(options.topic.is_empty(), "{:?}", options.topic),
        None => convert::check_name("topic", &options.topic).expect("a checked topic name"),
    }
    convert::check_name("subscription", &options.subscription).expect("a checked name");
    if consumer_given {
        assert!(!options.consumer.contains('/'), "{:?}", options.consumer);
    }
    assert!(options.max_outstanding >= 1 && options.max_outstanding <= limits.max_outstanding_limit);
    assert!(options.max_outstanding_bytes <= limits.subscribe_buffer_bytes);
    if let Some(deadline) = options.ack_deadline {
        assert!(!deadline.is_zero() && deadline <= limits.max_ack_deadline);
    }
    assert!(options.retry.minimum_backoff <= options.retry.maximum_backoff);
    Ok(())
}

/// Ack, Nack and ModifyAckDeadline: names and ack ids.
fn check_ack_ids(
    topic: &str,
    subscription: &str,
    ids: &[String],
    limits: &Limits,
) -> Result<(), Error> {
    convert::check_name("topic", topic)?;
    convert::check_name("subscription", subscription)?;
    let parsed = convert::ack_ids(ids, limits)?;
    assert_eq!(parsed.len(), ids.len());
    for (ack_id, text) in parsed.iter().zip(ids) {
        assert_eq!(&ack_id.text, text);
        assert!(ack_id.lease.attempt >= 1);
        assert!(is_entry_id(&ack_id.lease.entry_id));
    }
    Ok(())
}

/// The first request of a StreamingSubscribe stream: the Subscribe fields,
/// then what `Requests::take` checks of every request (ack ids that do not
/// parse are reported to the client, not an error).
fn streaming_subscribe(request: pb::StreamingSubscribeRequest, limits: &Limits) -> Result<(), Error> {
    let pb::StreamingSubscribeRequest {
        subscribe: first,
        ack_ids,
        nack_ids,
        nack_delay,
        modify_deadline_ack_ids,
        modify_deadline,
        max_outstanding_messages,
        max_outstanding_bytes,
        confirm: _,
    } = request;
    let first = first
        .ok_or_else(|| Error::invalid("subscribe", "the first request must open the stream"))?;
    subscribe(first, limits)?;
    let (messages, bytes) =
        convert::flow_control_update(max_outstanding_messages, max_outstanding_bytes, limits)?;
    assert!(messages.is_none_or(|n| (1..=limits.max_outstanding_limit).contains(&n)));
    assert!(bytes.is_none_or(|n| (1..=limits.subscribe_buffer_bytes).contains(&n)));
    convert::nack_delay(nack_delay, limits)?;
    if !modify_deadline_ack_ids.is_empty() {
        let deadline = modify_deadline.ok_or_else(|| {
            Error::invalid("modify_deadline", "is required with modify_deadline_ack_ids")
        })?;
        let deadline = convert::lease_duration("modify_deadline", deadline, limits, true)?;
        assert!(deadline <= limits.max_ack_deadline);
    }
    for id in ack_ids.iter().chain(&nack_ids).chain(&modify_deadline_ack_ids) {
        if let Some(ack_id) = redq::broker::ack_id::parse(id) {
            assert_eq!(&ack_id.text, id);
        }
    }
    Ok(())
}

// The AdminService validators (src/grpc/convert/admin.rs).

#[cfg(feature = "admin")]
use redq::grpc::convert as admin;

#[cfg(feature = "admin")]
fn page_size_or_default(page_size: u32) -> Result<(), Error> {
    let size = convert::page_size_or_default(page_size)?;
    assert!((1..=1000).contains(&size), "page size {size}");
    Ok(())
}

#[cfg(feature = "admin")]
fn dead_letter_ids_valid(ids: &[String], limits: &Limits) -> Result<(), Error> {
    admin::dead_letter_ids_valid(ids, limits)?;
    assert!(ids.iter().all(|id| is_entry_id(id)));
    Ok(())
}

#[cfg(feature = "admin")]
fn topic_settings(settings: pb::TopicSettings, limits: &Limits) -> Result<(), Error> {
    let (settings, kind) = admin::topic_settings(settings, limits)?;
    if let Some(max) = settings.max_payload_bytes {
        assert!(max <= limits.max_payload_bytes);
    }
    if let Some(redq::model::TopicKind::List { key }) = kind {
        assert!(!key.is_empty() && key.len() <= 512 && !key.starts_with("redq:"));
    }
    Ok(())
}

#[cfg(feature = "admin")]
fn new_subscription(settings: pb::SubscriptionSettings, limits: &Limits) -> Result<(), Error> {
    let (_start, settings) = admin::new_subscription(settings, limits)?;
    assert!(settings.retry.minimum_backoff <= settings.retry.maximum_backoff);
    // An accepted filter is one the delivery loop can parse again.
    assert!(redq::model::Filter::parse(&settings.filter).is_ok(), "{:?}", settings.filter);
    if let Some(deadline) = settings.ack_deadline {
        assert!(!deadline.is_zero() && deadline <= limits.max_ack_deadline);
    }
    Ok(())
}

#[cfg(feature = "admin")]
fn subscription_update(settings: pb::SubscriptionSettings, limits: &Limits) -> Result<(), Error> {
    let update = admin::subscription_update(settings, limits)?;
    for backoff in [update.minimum_backoff, update.maximum_backoff].into_iter().flatten() {
        assert!(backoff <= limits.max_delay);
    }
    if let Some(deadline) = update.ack_deadline {
        assert!(!deadline.is_zero() && deadline <= limits.max_ack_deadline);
    }
    Ok(())
}

// Without `--features admin`: what of those validators is reachable.

#[cfg(not(feature = "admin"))]
fn page_size_or_default(page_size: u32) -> Result<(), Error> {
    convert::page_size_or_default(page_size).map(|_| ())
}

#[cfg(not(feature = "admin"))]
fn dead_letter_ids_valid(ids: &[String], _limits: &Limits) -> Result<(), Error> {
    for id in ids {
        if redq::model::parse_entry_id(id).is_none() {
            return Err(Error::invalid("dead_letter_ids", "is not a dead letter id"));
        }
    }
    Ok(())
}

#[cfg(not(feature = "admin"))]
fn topic_settings(settings: pb::TopicSettings, _limits: &Limits) -> Result<(), Error> {
    for duration in [settings.retention_max_age, settings.dedupe_window].into_iter().flatten() {
        let _ = Duration::try_from(duration);
    }
    Ok(())
}

#[cfg(not(feature = "admin"))]
fn new_subscription(settings: pb::SubscriptionSettings, limits: &Limits) -> Result<(), Error> {
    pb::StartPosition::try_from(settings.start)
        .map_err(|_| Error::invalid("settings.start", "unknown start position"))?;
    subscription_update(settings, limits)
}

#[cfg(not(feature = "admin"))]
fn subscription_update(settings: pb::SubscriptionSettings, limits: &Limits) -> Result<(), Error> {
    if let Some(deadline) = settings.ack_deadline {
        convert::lease_duration("settings.ack_deadline", deadline, limits, false)?;
    }
    let retry = settings.retry_policy.unwrap_or_default();
    for backoff in [retry.minimum_backoff, retry.maximum_backoff].into_iter().flatten() {
        let _ = Duration::try_from(backoff);
    }
    Ok(())
}
