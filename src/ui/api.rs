//! The dashboard's JSON API (`/ui/api/…`, docs/dashboard.md): each handler
//! checks the caller's grant first (so a refusal says nothing about whether
//! the topic exists), checks names, calls the broker, converts the answer.

use super::Dashboard;
use super::access::Visitor;
use super::error::ApiError;
use super::views::{self, Grants};
use crate::auth::{Action, Resource};
use crate::broker::{DEFAULT_REDRIVE_RATE, SAMPLE_INTERVAL, SeekTarget, TopicView};
use crate::error::Error;
use crate::grpc::convert::check_name;
use crate::model::{Entry, is_entry_id};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

type Answer = Result<Json<Value>, ApiError>;

/// Topics the topics table lists at most.
const MAX_TOPICS: usize = 1000;
/// Topics whose figures are read at the same time.
const TOPIC_CONCURRENCY: usize = 16;
/// Messages, scheduled messages and dead letters per page, by default and at most.
const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 1000;
/// Dead letters one redrive or purge may name.
const MAX_IDS: usize = 1000;

fn names(topic: &str, subscription: Option<&str>) -> Result<(), ApiError> {
    check_name("topic", topic).map_err(ApiError::from)?;
    if let Some(subscription) = subscription {
        check_name("subscription", subscription).map_err(ApiError::from)?;
    }
    Ok(())
}

fn page_size(asked: Option<u32>) -> Result<u32, ApiError> {
    match asked {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::bad_request(format!(
            "limit: must be 1 to {MAX_PAGE}"
        ))),
    }
}

/// `GET /ui/api/overview`.
pub async fn overview(State(dashboard): State<Arc<Dashboard>>, visitor: Visitor) -> Answer {
    let broker = &dashboard.broker;
    let health = &dashboard.health;
    let memory = broker.redis_memory().await.ok();
    let fullest = memory.and_then(|m| m.fullest);
    let dead_loops = health.dead_loops();
    let replicas = broker.replicas().await.ok();
    Ok(Json(json!({
        "version": format!("redq {}", env!("CARGO_PKG_VERSION")),
        "caller": visitor.name(),
        "read_only": dashboard.read_only(),
        "login": !dashboard.authorizer.is_open(),
        "redis": {
            "reachable": health.redis_reachable(),
            "topology": broker.redis_topology(),
            "used_memory_bytes": memory.map(|m| m.used_bytes),
            "fullest_used_bytes": fullest.map(|f| f.used_bytes),
            "max_memory_bytes": fullest.map(|f| f.max_bytes),
            "memory_fraction": fullest.map(|f| f.fraction()),
            "publish_refusal_fraction": dashboard.memory_limit_ratio,
            "refusing_publishes": broker.refusing_publishes(),
        },
        "background_loops": {
            "healthy": dead_loops.is_empty(),
            "stopped": dead_loops,
        },
        "ready": health.is_ready(),
        "replicas": replicas,
    })))
}

/// `GET /ui/api/topics`: the topics the caller may view, with their figures.
pub async fn topics(State(dashboard): State<Arc<Dashboard>>, visitor: Visitor) -> Answer {
    let broker = &dashboard.broker;
    let mut names = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) = broker.topics(after.as_deref(), MAX_PAGE).await?;
        names.extend(
            page.into_iter()
                .filter(|t| dashboard.may(&visitor, Action::View, Resource::topic(&t.name))),
        );
        match next {
            Some(next) if names.len() < MAX_TOPICS => after = Some(next),
            _ => break,
        }
    }
    names.truncate(MAX_TOPICS);
    let rows: Vec<Option<Value>> = futures::stream::iter(names)
        .map(|listed: TopicView| async move {
            if listed.unavailable {
                return Some(views::topic_row(&listed));
            }
            match broker.topic(&listed.name).await {
                Ok(topic) => Some(views::topic_row(&topic)),
                // Deleted since it was listed.
                Err(Error::NotFound(_)) => None,
                // One topic that cannot be read (its shard down) must not
                // hide the others: listed by name, marked unavailable.
                Err(err) => {
                    tracing::debug!(topic = %listed.name, error = ?err, "dashboard: topic unreadable");
                    Some(views::topic_row(&TopicView {
                        unavailable: true,
                        ..listed
                    }))
                }
            }
        })
        .buffered(TOPIC_CONCURRENCY)
        .collect()
        .await;
    let rows: Vec<Value> = rows.into_iter().flatten().collect();
    Ok(Json(json!({ "topics": rows })))
}

/// `GET /ui/api/topics/{topic}`.
pub async fn topic(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path(name): Path<String>,
) -> Answer {
    dashboard.check(&visitor, Action::View, Resource::topic(&name))?;
    names(&name, None)?;
    let broker = &dashboard.broker;
    let topic = broker.topic(&name).await?;
    let subscriptions = match broker.subscriptions(&name).await {
        Err(Error::FailedPrecondition { .. }) => Vec::new(),
        other => other?,
    };
    let subscriptions: Vec<_> = subscriptions
        .into_iter()
        .filter(|s| {
            dashboard.may(
                &visitor,
                Action::View,
                Resource::subscription(&name, &s.name),
            )
        })
        .collect();
    let grants = Grants {
        browse: dashboard.may(&visitor, Action::Browse, Resource::topic(&name)),
        manage: dashboard.may(&visitor, Action::Manage, Resource::topic(&name)),
    };
    Ok(Json(views::topic(&topic, &subscriptions, grants)))
}

#[derive(Deserialize)]
pub struct MessagesQuery {
    before: Option<String>,
    limit: Option<u32>,
    id: Option<String>,
    q: Option<String>,
    attribute: Option<String>,
}

/// `GET /ui/api/topics/{topic}/messages`: a page of the newest messages
/// (before `before`), one by `id`, or those of a page that match `q`
/// (payload or attribute text) and `attribute` (`key` or `key=value`).
pub async fn messages(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path(topic): Path<String>,
    Query(query): Query<MessagesQuery>,
) -> Answer {
    dashboard.check(&visitor, Action::Browse, Resource::topic(&topic))?;
    names(&topic, None)?;
    let broker = &dashboard.broker;
    let limit = page_size(query.limit)?;
    if let Some(id) = query.id.as_deref().filter(|id| !id.is_empty()) {
        let found = broker.message(&topic, id.trim()).await?;
        let messages: Vec<Value> = found.iter().map(views::message).collect();
        return Ok(Json(
            json!({ "messages": messages, "next_before": Value::Null }),
        ));
    }
    let before = query.before.as_deref().filter(|b| !b.is_empty());
    if before.is_some_and(|b| !is_entry_id(b)) {
        return Err(ApiError::bad_request("before: not a message id"));
    }
    let page = broker.newest_messages(&topic, before, limit).await?;
    let next_before = (page.len() == limit as usize)
        .then(|| page.last().map(|e| e.id.clone()))
        .flatten();
    let text = query.q.as_deref().filter(|q| !q.is_empty());
    let attribute = query
        .attribute
        .as_deref()
        .filter(|a| !a.is_empty())
        .map(|a| a.split_once('=').unwrap_or((a, "")));
    let messages: Vec<Value> = page
        .iter()
        .filter(|e| text.is_none_or(|q| contains_text(e, q)))
        .filter(|e| attribute.is_none_or(|(k, v)| has_attribute(e, k, v)))
        .map(views::message)
        .collect();
    Ok(Json(
        json!({ "messages": messages, "next_before": next_before }),
    ))
}

fn contains_text(entry: &Entry, text: &str) -> bool {
    String::from_utf8_lossy(&entry.payload).contains(text)
        || entry
            .attributes
            .iter()
            .any(|(k, v)| k.contains(text) || v.contains(text))
}

/// `value` empty: the attribute is there, with any value.
fn has_attribute(entry: &Entry, key: &str, value: &str) -> bool {
    entry
        .attributes
        .get(key)
        .is_some_and(|v| value.is_empty() || v == value)
}

#[derive(Deserialize)]
pub struct LimitQuery {
    limit: Option<u32>,
}

/// `GET /ui/api/topics/{topic}/scheduled`: the messages due first.
pub async fn scheduled(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path(topic): Path<String>,
    Query(query): Query<LimitQuery>,
) -> Answer {
    dashboard.check(&visitor, Action::Browse, Resource::topic(&topic))?;
    names(&topic, None)?;
    let limit = page_size(query.limit)?;
    let scheduled = dashboard.broker.scheduled_messages(&topic, limit).await?;
    let scheduled: Vec<Value> = scheduled
        .iter()
        .map(|s| match &s.entry {
            Some(entry) => views::message(entry),
            None => json!({ "id": s.message_id, "message_id": s.message_id, "due_ms": s.due_ms }),
        })
        .collect();
    Ok(Json(json!({ "scheduled": scheduled })))
}

/// `POST /ui/api/topics/{topic}/scheduled/{message_id}/cancel`.
pub async fn cancel_scheduled(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path((topic, message_id)): Path<(String, String)>,
) -> Answer {
    dashboard.check(&visitor, Action::Manage, Resource::topic(&topic))?;
    names(&topic, None)?;
    let cancelled = dashboard
        .broker
        .cancel_scheduled(&topic, &message_id)
        .await?;
    tracing::info!(action = "cancel", %topic, %message_id, cancelled, token = %visitor.name(), "dashboard: cancel");
    Ok(Json(json!({ "cancelled": cancelled })))
}

/// `GET /ui/api/topics/{topic}/subscriptions/{subscription}`.
pub async fn subscription(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path((topic, name)): Path<(String, String)>,
) -> Answer {
    let resource = Resource::subscription(&topic, &name);
    dashboard.check(&visitor, Action::View, resource)?;
    names(&topic, Some(&name))?;
    let view = dashboard.broker.subscription(&topic, &name).await?;
    let grants = Grants {
        browse: dashboard.may(&visitor, Action::Browse, resource),
        manage: dashboard.may(&visitor, Action::Manage, resource),
    };
    Ok(Json(views::subscription(&view, grants)))
}

#[derive(Deserialize)]
pub struct DeadLettersQuery {
    page_token: Option<String>,
    limit: Option<u32>,
}

/// `GET …/subscriptions/{subscription}/dead-letters`, oldest first.
pub async fn dead_letters(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path((topic, name)): Path<(String, String)>,
    Query(query): Query<DeadLettersQuery>,
) -> Answer {
    dashboard.check(
        &visitor,
        Action::Browse,
        Resource::subscription(&topic, &name),
    )?;
    names(&topic, Some(&name))?;
    let limit = page_size(query.limit)?;
    let after = query.page_token.as_deref().filter(|t| !t.is_empty());
    if after.is_some_and(|t| !is_entry_id(t)) {
        return Err(ApiError::bad_request("page_token: not a dead letter id"));
    }
    let page = dashboard
        .broker
        .dead_letters(&topic, &name, after, limit)
        .await?;
    let dead_letters: Vec<Value> = page.dead_letters.iter().map(views::dead_letter).collect();
    Ok(Json(json!({
        "dead_letters": dead_letters,
        "next_page_token": page.next_after,
    })))
}

#[derive(Deserialize, Default)]
struct DeadLetterIds {
    #[serde(default)]
    dead_letter_ids: Vec<String>,
}

/// The ids of a redrive or purge body; none (or no body): all.
fn dead_letter_ids(body: &Bytes) -> Result<Vec<String>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let DeadLetterIds { dead_letter_ids } =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    if dead_letter_ids.len() > MAX_IDS {
        return Err(ApiError::bad_request(format!(
            "dead_letter_ids: at most {MAX_IDS}"
        )));
    }
    if let Some(bad) = dead_letter_ids.iter().find(|id| !is_entry_id(id)) {
        return Err(ApiError::bad_request(format!(
            "dead_letter_ids: {bad:?} is not a dead letter id"
        )));
    }
    Ok(dead_letter_ids)
}

/// `POST …/dead-letters/redrive`, at most `DEFAULT_REDRIVE_RATE` a second.
pub async fn redrive(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path((topic, name)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    dashboard.check(
        &visitor,
        Action::Manage,
        Resource::subscription(&topic, &name),
    )?;
    names(&topic, Some(&name))?;
    let ids = dead_letter_ids(&body)?;
    let redriven = dashboard
        .broker
        .redrive_dead_letters(&topic, &name, &ids, DEFAULT_REDRIVE_RATE)
        .await?;
    tracing::info!(action = "redrive", %topic, subscription = %name, redriven, token = %visitor.name(), "dashboard: redrive");
    Ok(Json(json!({ "redriven": redriven })))
}

/// `POST …/dead-letters/purge`.
pub async fn purge(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path((topic, name)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    dashboard.check(
        &visitor,
        Action::Manage,
        Resource::subscription(&topic, &name),
    )?;
    names(&topic, Some(&name))?;
    let ids = dead_letter_ids(&body)?;
    let purged = dashboard
        .broker
        .purge_dead_letters(&topic, &name, &ids)
        .await?;
    tracing::info!(action = "purge", %topic, subscription = %name, purged, token = %visitor.name(), "dashboard: purge");
    Ok(Json(json!({ "purged": purged })))
}

#[derive(Deserialize)]
struct SeekBody {
    time: String,
}

/// `POST …/seek` with `{"time": RFC 3339}`.
pub async fn seek(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path((topic, name)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    dashboard.check(
        &visitor,
        Action::Manage,
        Resource::subscription(&topic, &name),
    )?;
    names(&topic, Some(&name))?;
    let SeekBody { time } =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    let at = humantime::parse_rfc3339_weak(time.trim())
        .map_err(|e| ApiError::bad_request(format!("time: {e} (RFC 3339, UTC)")))?;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| ApiError::bad_request("time: before 1970"))?
        .as_millis() as u64;
    dashboard
        .broker
        .seek(&topic, &name, &SeekTarget::Time(ms))
        .await?;
    tracing::info!(action = "seek", %topic, subscription = %name, %time, token = %visitor.name(), "dashboard: seek");
    Ok(Json(json!({})))
}

/// `GET …/subscriptions/{subscription}/history`: the charts' points of the
/// last hour, oldest first, as every replica sees them.
pub async fn history(
    State(dashboard): State<Arc<Dashboard>>,
    visitor: Visitor,
    Path((topic, name)): Path<(String, String)>,
) -> Answer {
    dashboard.check(
        &visitor,
        Action::View,
        Resource::subscription(&topic, &name),
    )?;
    names(&topic, Some(&name))?;
    let samples = dashboard.broker.samples(&topic, &name).await?;
    let points: Vec<Value> = samples
        .iter()
        .map(|s| {
            json!({
                "time_ms": s.time_ms,
                "published": s.published,
                "acked": s.acked,
                "lag": s.lag,
                "pending": s.pending,
                "oldest_unacked_age_ms": s.oldest_unacked_age_ms,
            })
        })
        .collect();
    Ok(Json(json!({
        "interval_ms": SAMPLE_INTERVAL.as_millis() as u64,
        "points": points,
    })))
}
