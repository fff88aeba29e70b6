//! `redq topics`, `stats` and `dlq`: the AdminService from a shell.

use super::format::{self, Table};
use super::{ClientChannel, admin_client, connect, print, status_error};
use crate::config::{DlqTarget, StatsArgs, TopicsArgs};
use crate::error::BoxError;
use crate::pb;
use crate::pb::admin_service_client::AdminServiceClient;
use tonic::Code;

/// Bound on pages followed, so a server that keeps answering with a token
/// cannot keep the CLI going forever.
const MAX_PAGES: usize = 1_000_000;

/// `redq topics`: every topic (all pages) with its subscriptions and settings.
pub async fn topics(args: TopicsArgs) -> Result<(), BoxError> {
    let TopicsArgs { server } = args;
    let mut admin = admin_client(connect(&server.server, &server.tls).await?);
    let mut topics = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = admin
            .list_topics(pb::ListTopicsRequest {
                page_size: 1000,
                page_token,
            })
            .await
            .map_err(status_error)?
            .into_inner();
        topics.extend(page.topics);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    print(&topics_table(&topics))?;
    Ok(())
}

/// One row per topic: name, subscription count and settings; a topic whose
/// Redis shard cannot be reached says so in place of its figures, with a
/// note under the table.
fn topics_table(topics: &[pb::Topic]) -> String {
    let mut table = Table::new(&[
        "TOPIC",
        "KIND",
        "SUBSCRIPTIONS",
        "RETENTION",
        "DEDUPE WINDOW",
        "MAX PAYLOAD",
    ]);
    for topic in topics {
        if topic.unavailable {
            table.row(vec![
                topic.name.clone(),
                "?".into(),
                "unavailable".into(),
                "?".into(),
                "?".into(),
                "?".into(),
            ]);
            continue;
        }
        let settings = topic.settings.clone().unwrap_or_default();
        table.row(vec![
            topic.name.clone(),
            kind(&settings),
            topic.subscriptions.len().to_string(),
            retention(&settings),
            settings
                .dedupe_window
                .as_ref()
                .map_or_else(|| "default".into(), |d| format::duration(Some(d))),
            match settings.max_payload_bytes {
                Some(bytes) if bytes > 0 => format!("{bytes} B"),
                _ => "default".into(),
            },
        ]);
    }
    let mut text = table.render();
    let unavailable = topics.iter().filter(|t| t.unavailable).count();
    if unavailable > 0 {
        text.push_str(&format!(
            "\n{unavailable} topic(s) unavailable: the Redis node or shard holding them cannot be reached (retry later)\n"
        ));
    }
    text
}

/// A topic's kind as the API names it (`LIST jobs`: with its Redis list).
fn kind(settings: &pb::TopicSettings) -> String {
    match settings.kind() {
        pb::TopicKind::List => format!("LIST {}", settings.list_key),
        pb::TopicKind::Ephemeral => "EPHEMERAL".into(),
        pb::TopicKind::Stream | pb::TopicKind::Unspecified => "STREAM".into(),
    }
}

/// A topic's retention settings in a few words (`-`: kept until acked by all).
fn retention(settings: &pb::TopicSettings) -> String {
    let mut parts = Vec::new();
    if let Some(age) = &settings.retention_max_age {
        parts.push(format!("age {}", format::duration(Some(age))));
    }
    if let Some(n) = settings.retention_max_length.filter(|n| *n > 0) {
        parts.push(format!("length {n}"));
    }
    if let Some(n) = settings.hard_max_length.filter(|n| *n > 0) {
        parts.push(format!("hard cap {n}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// `redq stats TOPIC`: the topic's figures, then one row per subscription and
/// one per consumer.
pub async fn stats(args: StatsArgs) -> Result<(), BoxError> {
    let StatsArgs { topic, server } = args;
    let mut admin = admin_client(connect(&server.server, &server.tls).await?);
    let topic = admin
        .get_topic(pb::GetTopicRequest { name: topic })
        .await
        .map_err(status_error)?
        .into_inner();
    let mut subscriptions = Vec::new();
    for name in &topic.subscriptions {
        let subscription = admin
            .get_subscription(pb::GetSubscriptionRequest {
                topic: topic.name.clone(),
                name: name.clone(),
            })
            .await;
        match subscription {
            Ok(response) => subscriptions.push(response.into_inner()),
            // Deleted since GetTopic listed it.
            Err(status) if status.code() == Code::NotFound => {}
            Err(status) => return Err(status_error(status)),
        }
    }
    print(&stats_text(&topic, &subscriptions))?;
    Ok(())
}

/// The topic's figures, then a row per subscription, then one per consumer.
fn stats_text(topic: &pb::Topic, subscriptions: &[pb::Subscription]) -> String {
    let stats = topic.stats.unwrap_or_default();
    let next_due = match &stats.next_due {
        Some(ts) => format!("{} ({})", format::rfc3339(ts), format::relative(ts)),
        None => "-".into(),
    };
    let mut overview = Table::new(&["TOPIC", &topic.name]);
    overview.row(vec![
        "kind".into(),
        kind(&topic.settings.clone().unwrap_or_default()),
    ]);
    overview.row(vec![
        "stream length".into(),
        stats.stream_length.to_string(),
    ]);
    overview.row(vec!["scheduled".into(), stats.scheduled_count.to_string()]);
    overview.row(vec!["next due".into(), next_due]);
    overview.row(vec!["published".into(), stats.published_count.to_string()]);
    overview.row(vec!["dropped".into(), stats.dropped_count.to_string()]);
    let mut text = overview.render();

    let mut rows = Table::new(&[
        "SUBSCRIPTION",
        "PENDING",
        "LAG",
        "OLDEST UNACKED",
        "DEAD LETTERS",
        "ACKED",
        "CONSUMERS",
    ]);
    let mut consumers = Table::new(&["SUBSCRIPTION", "CONSUMER", "PENDING", "IDLE"]);
    let mut ordered = Table::new(&[
        "ORDERED SUBSCRIPTION",
        "ACTIVE KEYS",
        "BLOCKED",
        "OLDEST BLOCKED",
        "AT BLOCKED CAP",
    ]);
    for subscription in subscriptions {
        let name = &subscription.name;
        let stats = subscription.stats.clone().unwrap_or_default();
        rows.row(vec![
            name.clone(),
            stats.pending.to_string(),
            stats.lag.to_string(),
            format::duration(stats.oldest_unacked_age.as_ref()),
            stats.dead_letters.to_string(),
            stats.acked_count.to_string(),
            stats.consumers.len().to_string(),
        ]);
        let settings = subscription.settings.clone().unwrap_or_default();
        if settings.message_ordering == Some(true) {
            ordered.row(vec![
                name.clone(),
                stats.active_keys.to_string(),
                stats.blocked.to_string(),
                format::duration(stats.oldest_blocked_age.as_ref()),
                if stats.at_blocked_cap { "yes" } else { "no" }.into(),
            ]);
        }
        for consumer in &stats.consumers {
            consumers.row(vec![
                name.clone(),
                consumer.name.clone(),
                consumer.pending.to_string(),
                format::duration(consumer.idle.as_ref()),
            ]);
        }
    }
    text.push('\n');
    if rows.is_empty() {
        text.push_str("no subscriptions\n");
    } else {
        text.push_str(&rows.render());
    }
    for table in [ordered, consumers] {
        if !table.is_empty() {
            text.push('\n');
            text.push_str(&table.render());
        }
    }
    text
}

/// The subscription a `dlq` subcommand handles, and a client of its server.
struct DeadLetters {
    admin: AdminServiceClient<ClientChannel>,
    topic: String,
    subscription: String,
}

impl DeadLetters {
    async fn connect(target: DlqTarget) -> Result<Self, BoxError> {
        let DlqTarget {
            topic,
            subscription,
            server,
        } = target;
        let admin = admin_client(connect(&server.server, &server.tls).await?);
        Ok(Self {
            admin,
            topic,
            subscription,
        })
    }
}

/// `redq dlq list`: every dead letter (all pages), oldest first, as a table
/// or as JSON lines.
pub async fn dlq_list(target: DlqTarget, json: bool) -> Result<(), BoxError> {
    let mut dlq = DeadLetters::connect(target).await?;
    let mut table = Table::new(&[
        "DEAD LETTER ID",
        "MESSAGE ID",
        "ATTEMPTS",
        "REASON",
        "DEAD-LETTERED AT",
        "PAYLOAD",
    ]);
    let mut lines = String::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = dlq
            .admin
            .list_dead_letters(pb::ListDeadLettersRequest {
                topic: dlq.topic.clone(),
                subscription: dlq.subscription.clone(),
                page_size: 1000,
                page_token,
            })
            .await
            .map_err(status_error)?
            .into_inner();
        for dead in &page.dead_letters {
            if json {
                lines.push_str(&dead_letter_json(dead));
            } else {
                table.row(dead_letter_row(dead));
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    print(&if json { lines } else { table.render() })?;
    Ok(())
}

/// Longest payload shown in a `dlq list` table (`--json` shows it whole).
const PAYLOAD_COLUMN_CHARS: usize = 60;

fn dead_letter_row(dead: &pb::DeadLetter) -> Vec<String> {
    let empty = pb::Message::default();
    let message = dead.message.as_ref().unwrap_or(&empty);
    let mut payload = format::payload_inline(&message.payload);
    if payload.chars().count() > PAYLOAD_COLUMN_CHARS {
        payload = payload.chars().take(PAYLOAD_COLUMN_CHARS - 1).collect();
        payload.push('…');
    }
    vec![
        dead.dead_letter_id.clone(),
        message.id.clone(),
        dead.delivery_attempts.to_string(),
        reason(dead.reason).into(),
        format::timestamp(dead.dead_lettered_at.as_ref()),
        payload,
    ]
}

fn dead_letter_json(dead: &pb::DeadLetter) -> String {
    let empty = pb::Message::default();
    let message = dead.message.as_ref().unwrap_or(&empty);
    let mut object = serde_json::Map::new();
    object.insert("dead_letter_id".into(), dead.dead_letter_id.clone().into());
    object.insert("message_id".into(), message.id.clone().into());
    object.insert("attempts".into(), dead.delivery_attempts.into());
    object.insert("reason".into(), reason(dead.reason).into());
    if let Some(ts) = &dead.dead_lettered_at {
        object.insert("dead_lettered_at".into(), format::rfc3339(ts).into());
    }
    format::insert_message(&mut object, message);
    format::json_line(object)
}

fn reason(code: i32) -> &'static str {
    match pb::DeadLetterReason::try_from(code) {
        Ok(pb::DeadLetterReason::Nacked) => "nacked",
        Ok(pb::DeadLetterReason::DeadlineExceeded) => "deadline exceeded",
        Ok(pb::DeadLetterReason::Unspecified) | Err(_) => "unknown",
    }
}

/// `redq dlq redrive`: the named dead letters (none named: all) go back to
/// their subscription; prints how many.
pub async fn dlq_redrive(
    target: DlqTarget,
    ids: Vec<String>,
    max_per_second: u32,
) -> Result<(), BoxError> {
    let mut dlq = DeadLetters::connect(target).await?;
    let redriven = dlq
        .admin
        .redrive_dead_letters(pb::RedriveDeadLettersRequest {
            topic: dlq.topic,
            subscription: dlq.subscription,
            dead_letter_ids: ids,
            max_per_second,
        })
        .await
        .map_err(status_error)?
        .into_inner()
        .redriven;
    print(&format!("redriven: {redriven}\n"))?;
    Ok(())
}

/// `redq dlq purge`: deletes the named dead letters, or all with `--all`;
/// prints how many.
pub async fn dlq_purge(target: DlqTarget, ids: Vec<String>, all: bool) -> Result<(), BoxError> {
    // An empty id list purges everything: only on request. clap enforces
    // this too; the check stays here so no caller can slip past it.
    if ids.is_empty() && !all {
        return Err("name the dead letters to purge, or pass --all".into());
    }
    let mut dlq = DeadLetters::connect(target).await?;
    let purged = dlq
        .admin
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            topic: dlq.topic,
            subscription: dlq.subscription,
            dead_letter_ids: if all { Vec::new() } else { ids },
        })
        .await
        .map_err(status_error)?
        .into_inner()
        .purged;
    print(&format!("purged: {purged}\n"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(seconds: i64) -> prost_types::Duration {
        prost_types::Duration { seconds, nanos: 0 }
    }

    fn millis(ms: u64) -> prost_types::Duration {
        std::time::Duration::from_millis(ms).try_into().unwrap()
    }

    #[test]
    fn topics_show_subscription_counts_and_settings() {
        let topics = [
            pb::Topic {
                name: "orders".into(),
                settings: Some(pb::TopicSettings {
                    retention_max_age: Some(secs(7 * 24 * 3600)),
                    retention_max_length: Some(1000),
                    dedupe_window: Some(secs(600)),
                    max_payload_bytes: Some(4096),
                    ..Default::default()
                }),
                stats: None,
                subscriptions: vec!["billing".into(), "audit".into()],
                unavailable: false,
            },
            pb::Topic {
                name: "a".into(),
                ..Default::default()
            },
            pb::Topic {
                name: "jobs".into(),
                settings: Some(pb::TopicSettings {
                    kind: pb::TopicKind::List.into(),
                    list_key: "queue:jobs".into(),
                    ..Default::default()
                }),
                subscriptions: vec!["workers".into()],
                ..Default::default()
            },
            pb::Topic {
                name: "presence".into(),
                settings: Some(pb::TopicSettings {
                    kind: pb::TopicKind::Ephemeral.into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        assert_eq!(
            topics_table(&topics),
            "TOPIC     KIND             SUBSCRIPTIONS  RETENTION               DEDUPE WINDOW  MAX PAYLOAD\n\
             orders    STREAM           2              age 7days, length 1000  10m            4096 B\n\
             a         STREAM           0              -                       default        default\n\
             jobs      LIST queue:jobs  1              -                       default        default\n\
             presence  EPHEMERAL        0              -                       default        default\n"
        );
    }

    #[test]
    fn topics_of_an_unreachable_shard_are_listed_and_marked() {
        let topics = [
            pb::Topic {
                name: "up".into(),
                ..Default::default()
            },
            pb::Topic {
                name: "down".into(),
                unavailable: true,
                ..Default::default()
            },
        ];
        assert_eq!(
            topics_table(&topics),
            "TOPIC  KIND    SUBSCRIPTIONS  RETENTION  DEDUPE WINDOW  MAX PAYLOAD\n\
             up     STREAM  0              -          default        default\n\
             down   ?       unavailable    ?          ?              ?\n\
             \n\
             1 topic(s) unavailable: the Redis node or shard holding them cannot be reached (retry later)\n"
        );
    }

    #[test]
    fn stats_show_the_topic_then_subscriptions_then_consumers() {
        let topic = pb::Topic {
            name: "orders".into(),
            stats: Some(pb::TopicStats {
                stream_length: 12,
                scheduled_count: 3,
                ..Default::default()
            }),
            subscriptions: vec!["billing".into()],
            ..Default::default()
        };
        let billing = pb::Subscription {
            topic: "orders".into(),
            name: "billing".into(),
            settings: None,
            stats: Some(pb::SubscriptionStats {
                pending: 2,
                lag: 10,
                oldest_unacked_age: Some(millis(4120)),
                consumers: vec![pb::ConsumerStats {
                    name: "c-1".into(),
                    pending: 2,
                    idle: Some(secs(1)),
                }],
                dead_letters: 1,
                acked_count: 5,
                ..Default::default()
            }),
        };
        let text = stats_text(&topic, &[billing]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "TOPIC          orders");
        assert_eq!(lines[1], "kind           STREAM");
        assert_eq!(lines[2], "stream length  12");
        assert_eq!(lines[4], "next due       -");
        assert_eq!(
            lines[8..],
            [
                "SUBSCRIPTION  PENDING  LAG  OLDEST UNACKED  DEAD LETTERS  ACKED  CONSUMERS",
                "billing       2        10   4s 120ms        1             5      1",
                "",
                "SUBSCRIPTION  CONSUMER  PENDING  IDLE",
                "billing       c-1       2        1s",
            ]
        );
        let lonely = stats_text(&pb::Topic::default(), &[]);
        assert!(lonely.ends_with("\nno subscriptions\n"), "{lonely}");
    }
}
