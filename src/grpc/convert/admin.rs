//! AdminService's requests into the model, and the model into its responses.

use super::queue::{message, publish_message};
use super::{
    check_name, delivery_attempts_default, lease_duration, page_size_or_default, timestamp_ms,
};
use crate::broker::{SeekTarget, SubscriptionView, TopicView};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::model::{
    DEFAULT_MAX_BLOCKED, DeadLetter, DeadLetterReason, DeliveryLimits, Filter, GroupStart,
    MAX_CATCH_UP, NewMessage, Recurrence, RetryPolicy, Schedule, ScheduleMessage, ScheduleSpec,
    ScheduleState, SubscriptionSettings, SubscriptionUpdate, TopicKind, TopicSettings, is_entry_id,
};
use crate::pb;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

pub fn dead_letter_page(page_size: u32, page_token: &str) -> Result<(u32, Option<String>)> {
    let page_size = page_size_or_default(page_size)?;
    let after = match page_token {
        "" => None,
        token if is_entry_id(token) => Some(token.to_owned()),
        _ => return Err(Error::invalid("page_token", "is not a token redq issued")),
    };
    Ok((page_size, after))
}

/// A dead letter of `topic` as the API shows it.
pub fn dead_letter(dead_letter: DeadLetter, topic: &str) -> pb::DeadLetter {
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
        message: Some(message(entry, topic)),
        delivery_attempts: attempts,
        reason: reason.into(),
        dead_lettered_at: Some(timestamp_ms(dead_lettered_ms)),
    }
}

/// Dead letter ids of a redrive or purge: entry ids, at most as many as the
/// ack ids of one call.
pub fn dead_letter_ids_valid(ids: &[String], limits: &Limits) -> Result<()> {
    if ids.len() > limits.max_outstanding_limit as usize {
        return Err(Error::invalid(
            "dead_letter_ids",
            format!("at most {} per call", limits.max_outstanding_limit),
        ));
    }
    match ids.iter().position(|id| !is_entry_id(id)) {
        Some(i) => Err(Error::invalid(
            format!("dead_letter_ids[{i}]"),
            "is not a dead letter id",
        )),
        None => Ok(()),
    }
}

fn duration(field: &str, duration: Option<prost_types::Duration>) -> Result<Option<Duration>> {
    duration
        .map(|d| Duration::try_from(d).map_err(|_| Error::invalid(field, "must not be negative")))
        .transpose()
}

/// Longest Redis key a LIST topic may consume.
const MAX_LIST_KEY_BYTES: usize = 512;

/// A topic's settings, and its kind when the request names one.
pub fn topic_settings(
    settings: pb::TopicSettings,
    limits: &Limits,
) -> Result<(TopicSettings, Option<TopicKind>)> {
    let pb::TopicSettings {
        retention_max_age,
        retention_max_length,
        hard_max_length,
        dedupe_window,
        max_payload_bytes,
        kind,
        list_key,
    } = settings;
    if let Some(max) = max_payload_bytes
        && max > limits.max_payload_bytes
    {
        return Err(Error::invalid(
            "settings.max_payload_bytes",
            format!("at most the server's limit of {}", limits.max_payload_bytes),
        ));
    }
    let kind = topic_kind(kind, list_key)?;
    let settings = TopicSettings {
        retention_max_age: duration("settings.retention_max_age", retention_max_age)?,
        retention_max_length,
        hard_max_length,
        dedupe_window: duration("settings.dedupe_window", dedupe_window)?,
        max_payload_bytes,
    };
    Ok((settings, kind))
}

/// The kind a request names (None: UNSPECIFIED, which creates a STREAM
/// topic and leaves an existing topic's kind alone).
fn topic_kind(kind: i32, list_key: String) -> Result<Option<TopicKind>> {
    let kind = match pb::TopicKind::try_from(kind) {
        Ok(pb::TopicKind::Unspecified) => None,
        Ok(pb::TopicKind::Stream) => Some(TopicKind::Stream),
        Ok(pb::TopicKind::Ephemeral) => Some(TopicKind::Ephemeral),
        Ok(pb::TopicKind::List) => {
            check_list_key(&list_key)?;
            return Ok(Some(TopicKind::List { key: list_key }));
        }
        Err(_) => return Err(Error::invalid("settings.kind", "unknown topic kind")),
    };
    if !list_key.is_empty() {
        return Err(Error::invalid(
            "settings.list_key",
            "applies to LIST topics only",
        ));
    }
    Ok(kind)
}

/// The Redis list a LIST topic consumes: any key but redq's own.
fn check_list_key(key: &str) -> Result<()> {
    let field = "settings.list_key";
    if key.is_empty() {
        return Err(Error::invalid(field, "is required for a LIST topic"));
    }
    if key.len() > MAX_LIST_KEY_BYTES {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_LIST_KEY_BYTES} bytes"),
        ));
    }
    if key.starts_with("redq:") {
        return Err(Error::invalid(
            field,
            "must not be one of redq's own keys (redq:…)",
        ));
    }
    Ok(())
}

pub fn topic_pb(topic: TopicView) -> pb::Topic {
    let TopicView {
        name,
        settings,
        kind,
        stats,
        subscriptions,
        unavailable,
    } = topic;
    let (kind, list_key) = match kind {
        TopicKind::Stream => (pb::TopicKind::Stream, String::new()),
        TopicKind::Ephemeral => (pb::TopicKind::Ephemeral, String::new()),
        TopicKind::List { key } => (pb::TopicKind::List, key),
    };
    pb::Topic {
        name,
        settings: (!unavailable).then(|| pb::TopicSettings {
            retention_max_age: settings.retention_max_age.map(duration_pb),
            retention_max_length: settings.retention_max_length,
            hard_max_length: settings.hard_max_length,
            dedupe_window: settings.dedupe_window.map(duration_pb),
            max_payload_bytes: settings.max_payload_bytes,
            kind: kind.into(),
            list_key,
        }),
        stats: stats.map(|stats| pb::TopicStats {
            stream_length: stats.stream_length,
            scheduled_count: stats.scheduled,
            next_due: stats.next_due_ms.map(timestamp_ms),
            published_count: stats.published,
            dropped_count: stats.dropped,
        }),
        subscriptions,
        unavailable,
    }
}

/// CreateSubscription: the settings given, the server's defaults for the rest.
pub fn new_subscription(
    settings: pb::SubscriptionSettings,
    limits: &Limits,
) -> Result<(GroupStart, SubscriptionSettings)> {
    let start = match pb::StartPosition::try_from(settings.start) {
        Ok(pb::StartPosition::Latest) => GroupStart::Latest,
        Ok(_) => GroupStart::Earliest,
        Err(_) => return Err(Error::invalid("settings.start", "unknown start position")),
    };
    let message_ordering = settings.message_ordering.unwrap_or(false);
    let filter = settings.filter.clone();
    Filter::parse(&filter).map_err(|reason| Error::invalid("settings.filter", reason))?;
    let update = subscription_settings(settings, limits)?;
    let settings = SubscriptionSettings {
        ack_deadline: update.ack_deadline,
        retry: RetryPolicy {
            minimum_backoff: update.minimum_backoff.unwrap_or(limits.retry_min_backoff),
            maximum_backoff: update.maximum_backoff.unwrap_or(limits.retry_max_backoff),
            max_delivery_attempts: update
                .max_delivery_attempts
                .unwrap_or_else(|| delivery_attempts_default(limits, message_ordering)),
        },
        dead_lettering: update.dead_lettering.unwrap_or(true),
        message_ordering,
        max_blocked: update.max_blocked.unwrap_or(DEFAULT_MAX_BLOCKED),
        filter,
        limits: DeliveryLimits {
            max_deliveries_per_second: update.max_deliveries_per_second.unwrap_or(0.0),
            burst: update.burst.unwrap_or(0),
            max_outstanding: update.max_outstanding.unwrap_or(0),
        },
    };
    if settings.retry.minimum_backoff > settings.retry.maximum_backoff {
        return Err(Error::invalid(
            "settings.retry_policy",
            "minimum_backoff must not exceed maximum_backoff",
        ));
    }
    Ok((start, settings))
}

/// UpdateSubscription: the settings given; those fixed at creation may not change.
pub fn subscription_update(
    settings: pb::SubscriptionSettings,
    limits: &Limits,
) -> Result<SubscriptionUpdate> {
    if settings.message_ordering.is_some() {
        return Err(Error::invalid(
            "settings.message_ordering",
            "fixed at the subscription's creation",
        ));
    }
    if !settings.filter.is_empty() {
        return Err(Error::invalid(
            "settings.filter",
            "fixed at the subscription's creation",
        ));
    }
    subscription_settings(settings, limits)
}

/// The settings of a create or an update, checked.
fn subscription_settings(
    settings: pb::SubscriptionSettings,
    limits: &Limits,
) -> Result<SubscriptionUpdate> {
    let pb::SubscriptionSettings {
        ack_deadline,
        retry_policy,
        max_delivery_attempts,
        dead_lettering,
        start: _,            // only at creation, see new_subscription
        message_ordering: _, // likewise
        filter: _,           // likewise
        max_blocked,
        max_deliveries_per_second,
        burst,
        max_outstanding,
    } = settings;
    if max_blocked == Some(0) {
        return Err(Error::invalid("settings.max_blocked", "must be positive"));
    }
    if let Some(rate) = max_deliveries_per_second
        && !(rate.is_finite() && rate >= 0.0)
    {
        return Err(Error::invalid(
            "settings.max_deliveries_per_second",
            "must be a finite number, 0 or more",
        ));
    }
    let pb::RetryPolicy {
        minimum_backoff,
        maximum_backoff,
    } = retry_policy.unwrap_or_default();
    let backoff = |field: &str, d| -> Result<Option<Duration>> {
        let d = duration(field, d)?;
        if d.is_some_and(|d| d > limits.max_delay) {
            return Err(Error::invalid(field, "longer than --max-delay"));
        }
        Ok(d)
    };
    Ok(SubscriptionUpdate {
        ack_deadline: ack_deadline
            .map(|d| lease_duration("settings.ack_deadline", d, limits, false))
            .transpose()?,
        minimum_backoff: backoff("settings.retry_policy.minimum_backoff", minimum_backoff)?,
        maximum_backoff: backoff("settings.retry_policy.maximum_backoff", maximum_backoff)?,
        max_delivery_attempts,
        dead_lettering,
        max_blocked,
        max_deliveries_per_second,
        burst,
        max_outstanding,
    })
}

pub fn subscription_pb(view: SubscriptionView) -> pb::Subscription {
    let SubscriptionView {
        topic,
        name,
        settings,
        stats,
    } = view;
    pb::Subscription {
        topic,
        name,
        settings: Some(pb::SubscriptionSettings {
            ack_deadline: settings.ack_deadline.map(duration_pb),
            retry_policy: Some(pb::RetryPolicy {
                minimum_backoff: Some(duration_pb(settings.retry.minimum_backoff)),
                maximum_backoff: Some(duration_pb(settings.retry.maximum_backoff)),
            }),
            max_delivery_attempts: Some(settings.retry.max_delivery_attempts),
            dead_lettering: Some(settings.dead_lettering),
            start: pb::StartPosition::Unspecified.into(),
            message_ordering: Some(settings.message_ordering),
            max_blocked: settings.message_ordering.then_some(settings.max_blocked),
            filter: settings.filter,
            max_deliveries_per_second: Some(settings.limits.max_deliveries_per_second),
            burst: Some(settings.limits.burst),
            max_outstanding: Some(settings.limits.max_outstanding),
        }),
        stats: Some(pb::SubscriptionStats {
            pending: stats.pending,
            lag: stats.lag,
            oldest_unacked_age: stats.oldest_unacked_age.map(duration_pb),
            consumers: stats
                .consumers
                .into_iter()
                .map(|c| pb::ConsumerStats {
                    name: c.name,
                    pending: c.pending,
                    idle: Some(duration_pb(c.idle)),
                })
                .collect(),
            dead_letters: stats.dead_letters,
            acked_count: stats.acked,
            active_keys: stats.ordering.active_keys,
            blocked: stats.ordering.blocked,
            oldest_blocked_age: stats.ordering.oldest_blocked_age.map(duration_pb),
            at_blocked_cap: stats.ordering.at_blocked_cap,
            rate_limited: stats.rate_limited,
            at_max_outstanding: stats.at_max_outstanding,
        }),
    }
}

fn duration_pb(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A time of a schedule, in ms since the Unix epoch.
fn schedule_time(field: &str, time: Option<prost_types::Timestamp>) -> Result<Option<u64>> {
    time.map(|time| {
        SystemTime::try_from(time)
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64)
            .ok_or_else(|| Error::invalid(field, "is not a valid time after 1970"))
    })
    .transpose()
}

/// A PutSchedule's schedule: its topic, name and spec, validated (output
/// only fields are ignored).
pub fn schedule_spec(
    schedule: Option<pb::Schedule>,
    limits: &Limits,
) -> Result<(String, String, ScheduleSpec)> {
    let pb::Schedule {
        topic,
        name,
        cron,
        every,
        time_zone,
        message,
        start_time,
        end_time,
        paused,
        catch_up,
        next_run: _,
        last_run: _,
        runs: _,
    } = schedule.ok_or_else(|| Error::invalid("schedule", "is required"))?;
    let message = schedule_message(message, limits)?;
    let every = every
        .map(|every| {
            Duration::try_from(every)
                .map_err(|_| Error::invalid("schedule.every", "must be at least 1s"))
        })
        .transpose()?;
    let start_ms = schedule_time("schedule.start_time", start_time)?;
    let end_ms = schedule_time("schedule.end_time", end_time)?;
    if let (Some(start), Some(end)) = (start_ms, end_ms)
        && end < start
    {
        return Err(Error::invalid(
            "schedule.end_time",
            "before schedule.start_time",
        ));
    }
    if catch_up > MAX_CATCH_UP {
        return Err(Error::invalid(
            "schedule.catch_up",
            format!("at most {MAX_CATCH_UP}"),
        ));
    }
    let spec = ScheduleSpec {
        cron,
        every,
        time_zone,
        message,
        start_ms,
        end_ms,
        paused,
        catch_up,
    };
    Recurrence::new(&spec).map_err(|err| {
        let field = err
            .field
            .split(", ")
            .map(|field| format!("schedule.{field}"))
            .collect::<Vec<_>>()
            .join(", ");
        Error::invalid(field, err.reason)
    })?;
    Ok((topic, name, spec))
}

/// What each run of a schedule publishes: a message to publish now, with no
/// dedupe id and no attribute in redq's `redq-` namespace.
fn schedule_message(
    message: Option<pb::PublishMessage>,
    limits: &Limits,
) -> Result<ScheduleMessage> {
    let message = message.ok_or_else(|| Error::invalid("schedule.message", "is required"))?;
    for (field, set) in [
        ("schedule.message.deliver_at", message.deliver_at.is_some()),
        ("schedule.message.delay", message.delay.is_some()),
        ("schedule.message.dedupe_id", !message.dedupe_id.is_empty()),
    ] {
        if set {
            return Err(Error::invalid(
                field,
                "must not be set: each run publishes at its nominal time",
            ));
        }
    }
    if let Some(key) = message.attributes.keys().find(|k| k.starts_with("redq-")) {
        return Err(Error::invalid(
            format!("schedule.message.attributes[{key:?}]"),
            "attributes starting with redq- are set by redq",
        ));
    }
    let NewMessage {
        payload,
        attributes,
        ordering_key,
        dedupe_id: _,
        due: _,
    } = publish_message("schedule.message.", message, limits)?;
    Ok(ScheduleMessage {
        payload,
        attributes,
        ordering_key,
    })
}

/// A schedule as the API shows it.
pub fn schedule_pb(topic: &str, schedule: Schedule) -> pb::Schedule {
    let Schedule { name, spec, state } = schedule;
    let ScheduleSpec {
        cron,
        every,
        time_zone,
        message,
        start_ms,
        end_ms,
        paused,
        catch_up,
    } = spec;
    let ScheduleState {
        next_ms,
        last_ms,
        runs,
    } = state;
    pb::Schedule {
        topic: topic.to_owned(),
        name,
        cron,
        every: every.and_then(|every| prost_types::Duration::try_from(every).ok()),
        time_zone,
        message: Some(pb::PublishMessage {
            payload: message.payload,
            attributes: message.attributes,
            ordering_key: message.ordering_key,
            ..Default::default()
        }),
        start_time: start_ms.map(timestamp_ms),
        end_time: end_ms.map(timestamp_ms),
        paused,
        catch_up,
        next_run: next_ms.map(timestamp_ms),
        last_run: last_ms.map(timestamp_ms),
        runs,
    }
}

/// Page size and position of a ListSchedules request: the token is the
/// last name of the previous page.
pub fn schedule_page(page_size: u32, page_token: &str) -> Result<(u32, Option<String>)> {
    let page_size = page_size_or_default(page_size)?;
    if page_token.is_empty() {
        return Ok((page_size, None));
    }
    check_name("page_token", page_token)
        .map_err(|_| Error::invalid("page_token", "is not a token redq issued"))?;
    Ok((page_size, Some(page_token.to_owned())))
}
