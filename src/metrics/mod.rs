//! Prometheus metrics: the registry and every metric family, the label
//! budget that bounds their cardinality, and the `/metrics` route.
//!
//! Counters and histograms are updated by the broker as things happen;
//! gauges (stream length, pending, lag…) are read from Redis at scrape time,
//! within a time bound, for the topics this replica has labels for.

mod ordering;
mod security;

use crate::model::{Published, TopicKind};
use crate::store::gauges::TopicGauges;
use crate::store::{Store, TopicKeys};
use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
pub use security::{Limit, SecurityMetrics};
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Label value standing for every topic beyond the label budget. Topic
/// names start with a letter or digit, so it cannot clash with one.
pub const OTHER: &str = "_other";

/// Default of `--metrics-max-topics`.
pub const DEFAULT_MAX_TOPICS: u32 = 1000;

/// Longest time a scrape waits for Redis; the gauges of topics not reached
/// by then are left out of that scrape (Prometheus' default timeout is 10 s).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);

const CONTENT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CarriedLabels {
    by: &'static str,
}

/// What sent a waiting stream's fetch right behind its own Redis call.
#[derive(Debug, Clone, Copy)]
pub enum CarriedBy {
    Publish,
    Ack,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabels {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicKindLabels {
    topic: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubscriptionLabels {
    topic: String,
    subscription: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc: &'static str,
}

/// Cheap to clone; every clone updates the same registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    max_topics: usize,
    /// Topics that get their own label, at most `max_topics`, first come first served.
    labelled: Mutex<HashSet<String>>,
    /// Serializes scrapes, which reset and refill the gauges.
    scrape: tokio::sync::Mutex<()>,
    published: Family<TopicLabels, Counter>,
    scheduled: Family<TopicLabels, Counter>,
    duplicates: Family<TopicLabels, Counter>,
    schedule_runs: Family<TopicLabels, Counter>,
    schedule_catch_up_runs: Family<TopicLabels, Counter>,
    schedule_skipped_runs: Family<TopicLabels, Counter>,
    ephemeral_delivered: Family<TopicLabels, Counter>,
    ephemeral_dropped: Family<TopicLabels, Counter>,
    delivered: Family<SubscriptionLabels, Counter>,
    redelivered: Family<SubscriptionLabels, Counter>,
    acked: Family<SubscriptionLabels, Counter>,
    ack_ids_ignored: Family<SubscriptionLabels, Counter>,
    nacked: Family<SubscriptionLabels, Counter>,
    dead_lettered: Family<SubscriptionLabels, Counter>,
    filtered: Family<SubscriptionLabels, Counter>,
    fetches_carried: Family<CarriedLabels, Counter>,
    acks_rode: Counter,
    publish_duration: Family<RpcLabels, Histogram>,
    lateness: Histogram,
    stream_length: Family<TopicLabels, Gauge>,
    kind: Family<TopicKindLabels, Gauge>,
    scheduled_now: Family<TopicLabels, Gauge>,
    pending: Family<SubscriptionLabels, Gauge>,
    lag: Family<SubscriptionLabels, Gauge>,
    dead_letters: Family<SubscriptionLabels, Gauge>,
    oldest_unacked: Family<SubscriptionLabels, Gauge<f64, AtomicU64>>,
    pool_connections: Gauge,
    pool_idle: Gauge,
    resident_memory: Gauge,
    scrape_failures: Counter,
    ordering: ordering::OrderingGauges,
    security: SecurityMetrics,
}

impl Metrics {
    /// Metrics with their own labels for at most `max_topics` topics.
    pub fn new(max_topics: u32) -> Self {
        let publish_duration = Family::<RpcLabels, Histogram>::new_with_constructor(|| {
            // 0.25 ms … 4 s
            Histogram::new(exponential_buckets(0.000_25, 2.0, 15))
        });
        // 1 ms … 32 s
        let lateness = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let mut inner = Inner {
            registry: Registry::default(),
            max_topics: max_topics as usize,
            labelled: Mutex::default(),
            scrape: tokio::sync::Mutex::new(()),
            published: Family::default(),
            ephemeral_delivered: Family::default(),
            ephemeral_dropped: Family::default(),
            scheduled: Family::default(),
            duplicates: Family::default(),
            schedule_runs: Family::default(),
            schedule_catch_up_runs: Family::default(),
            schedule_skipped_runs: Family::default(),
            delivered: Family::default(),
            redelivered: Family::default(),
            acked: Family::default(),
            ack_ids_ignored: Family::default(),
            nacked: Family::default(),
            dead_lettered: Family::default(),
            filtered: Family::default(),
            fetches_carried: Family::default(),
            acks_rode: Counter::default(),
            publish_duration,
            lateness,
            stream_length: Family::default(),
            kind: Family::default(),
            scheduled_now: Family::default(),
            pending: Family::default(),
            lag: Family::default(),
            dead_letters: Family::default(),
            oldest_unacked: Family::default(),
            pool_connections: Gauge::default(),
            pool_idle: Gauge::default(),
            resident_memory: Gauge::default(),
            scrape_failures: Counter::default(),
            ordering: ordering::OrderingGauges::default(),
            security: SecurityMetrics::default(),
        };
        let r = &mut inner.registry;
        inner.security.register(r);
        inner.ordering.register(r);
        r.register(
            "redq_build",
            "Version of this redq binary",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        r.register(
            "redq_messages_published",
            "Messages accepted by Publish and ScheduleDelayed (duplicates excluded)",
            inner.published.clone(),
        );
        r.register(
            "redq_ephemeral_delivered",
            "Messages of EPHEMERAL topics sent to this replica's streams",
            inner.ephemeral_delivered.clone(),
        );
        r.register(
            "redq_ephemeral_dropped",
            "Messages of EPHEMERAL topics this replica's streams lost because they fell behind",
            inner.ephemeral_dropped.clone(),
        );
        r.register(
            "redq_messages_scheduled",
            "Published messages that went to the schedule, due later",
            inner.scheduled.clone(),
        );
        r.register(
            "redq_messages_duplicate",
            "Published messages dropped as duplicates of a dedupe_id",
            inner.duplicates.clone(),
        );
        r.register(
            "redq_schedule_runs",
            "Runs of recurring schedules this replica published, catch-up runs included",
            inner.schedule_runs.clone(),
        );
        r.register(
            "redq_schedule_catch_up_runs",
            "Of those, runs published for nominal times missed while no replica ran",
            inner.schedule_catch_up_runs.clone(),
        );
        r.register(
            "redq_schedule_skipped_runs",
            "Missed runs of recurring schedules not published: more than the schedule's catch_up",
            inner.schedule_skipped_runs.clone(),
        );
        r.register(
            "redq_messages_delivered",
            "Deliveries handed to Subscribe streams, redeliveries included",
            inner.delivered.clone(),
        );
        r.register(
            "redq_messages_redelivered",
            "Deliveries with delivery_attempt > 1",
            inner.redelivered.clone(),
        );
        r.register(
            "redq_messages_acked",
            "Deliveries acknowledged (acks of unknown or already acked ids excluded)",
            inner.acked.clone(),
        );
        r.register(
            "redq_ack_ids_ignored",
            "Ack ids in Ack calls that were not applied: issued for another subscription, or their delivery is no longer current (acked, nacked or redelivered since)",
            inner.ack_ids_ignored.clone(),
        );
        r.register(
            "redq_messages_nacked",
            "Deliveries handed back by Nack or a zero ModifyAckDeadline",
            inner.nacked.clone(),
        );
        r.register(
            "redq_messages_dead_lettered",
            "Messages moved to the dead letters after their last attempt (nacked or deadline exceeded)",
            inner.dead_lettered.clone(),
        );
        r.register(
            "redq_messages_filtered",
            "Messages a subscription's filter did not match: acked without being delivered",
            inner.filtered.clone(),
        );
        r.register(
            "redq_fetches_carried",
            "Fetches of waiting Subscribe streams sent right behind a publish (by=publish) or the ack that freed their room (by=ack), one Redis round trip fewer to delivery",
            inner.fetches_carried.clone(),
        );
        r.register(
            "redq_ack_batches_riding",
            "Ack batches of StreamingSubscribe streams applied in the script call of a fetch of their subscription (one a publish carried, or one the ack carried) instead of a call of their own",
            inner.acks_rode.clone(),
        );
        r.register(
            "redq_publish_duration_seconds",
            "Time to serve a publishing RPC, by RPC",
            inner.publish_duration.clone(),
        );
        r.register(
            "redq_delivery_lateness_seconds",
            "First delivery time of a scheduled message minus its due time (Redis' clock)",
            inner.lateness.clone(),
        );
        r.register(
            "redq_topic_kind",
            "1 for the topic's kind (STREAM, EPHEMERAL or LIST), read at scrape time",
            inner.kind.clone(),
        );
        r.register(
            "redq_topic_stream_length",
            "Entries in the topic's stream (XLEN), read at scrape time",
            inner.stream_length.clone(),
        );
        r.register(
            "redq_topic_scheduled",
            "Scheduled messages not yet due, read at scrape time",
            inner.scheduled_now.clone(),
        );
        r.register(
            "redq_subscription_pending",
            "Delivered and unacked messages, parked retries included, read at scrape time",
            inner.pending.clone(),
        );
        r.register(
            "redq_subscription_lag",
            "Entries of the stream not yet delivered to the subscription (Redis >= 7.0), read at scrape time",
            inner.lag.clone(),
        );
        r.register(
            "redq_subscription_dead_letters",
            "Messages in the subscription's dead letters, read at scrape time",
            inner.dead_letters.clone(),
        );
        r.register(
            "redq_subscription_oldest_unacked_age_seconds",
            "Age of the oldest unacked message (since it entered the stream), read at scrape time",
            inner.oldest_unacked.clone(),
        );
        r.register(
            "redq_redis_pool_connections",
            "Connections of the Redis pool",
            inner.pool_connections.clone(),
        );
        r.register(
            "redq_redis_pool_idle_connections",
            "Idle connections of the Redis pool",
            inner.pool_idle.clone(),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of this process, read at scrape time (Linux)",
            inner.resident_memory.clone(),
        );
        r.register(
            "redq_metrics_scrape_failures",
            "Scrapes whose Redis gauges were incomplete (timeout or Redis error)",
            inner.scrape_failures.clone(),
        );
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The label for `topic`: itself while the budget lasts, else [`OTHER`].
    fn topic_label(&self, topic: &str) -> String {
        let mut labelled = self.inner.labelled.lock().expect("metrics lock");
        if labelled.contains(topic) {
            topic.to_owned()
        } else if labelled.len() < self.inner.max_topics {
            labelled.insert(topic.to_owned());
            topic.to_owned()
        } else {
            OTHER.to_owned()
        }
    }

    fn topic_labels(&self, topic: &str) -> TopicLabels {
        TopicLabels {
            topic: self.topic_label(topic),
        }
    }

    /// Subscriptions of an unlabelled topic are aggregated too.
    fn subscription_labels(&self, topic: &str, subscription: &str) -> SubscriptionLabels {
        let topic = self.topic_label(topic);
        let subscription = if topic == OTHER {
            OTHER.to_owned()
        } else {
            subscription.to_owned()
        };
        SubscriptionLabels {
            topic,
            subscription,
        }
    }

    /// Counts messages of an EPHEMERAL topic sent to a stream.
    pub fn ephemeral_delivered(&self, topic: &str, count: u64) {
        let labels = self.topic_labels(topic);
        self.inner
            .ephemeral_delivered
            .get_or_create(&labels)
            .inc_by(count);
    }

    /// Counts messages of an EPHEMERAL topic a stream lost (it fell behind).
    pub fn ephemeral_dropped(&self, topic: &str, count: u64) {
        let labels = self.topic_labels(topic);
        self.inner
            .ephemeral_dropped
            .get_or_create(&labels)
            .inc_by(count);
    }

    /// Counts what one publish did.
    pub fn published(&self, topic: &str, published: &[Published]) {
        let labels = self.topic_labels(topic);
        let (mut new, mut scheduled, mut duplicates) = (0, 0, 0);
        for p in published {
            if p.duplicate {
                duplicates += 1;
            } else {
                new += 1;
                if p.scheduled_in.is_some() {
                    scheduled += 1;
                }
            }
        }
        let inner = &self.inner;
        inner.published.get_or_create(&labels).inc_by(new);
        if scheduled > 0 {
            inner.scheduled.get_or_create(&labels).inc_by(scheduled);
        }
        if duplicates > 0 {
            inner.duplicates.get_or_create(&labels).inc_by(duplicates);
        }
    }

    /// Counts one pass of a recurring schedule on `topic`: runs published
    /// (`catch_up` of them for missed nominal times) and missed runs skipped.
    pub fn schedule_ran(&self, topic: &str, runs: u64, catch_up: u64, skipped: u64) {
        let labels = self.topic_labels(topic);
        let inner = &self.inner;
        for (family, count) in [
            (&inner.schedule_runs, runs),
            (&inner.schedule_catch_up_runs, catch_up),
            (&inner.schedule_skipped_runs, skipped),
        ] {
            if count > 0 {
                family.get_or_create(&labels).inc_by(count);
            }
        }
    }

    /// Time to serve one publishing RPC (`rpc` is its gRPC method name).
    pub fn publish_duration(&self, rpc: &'static str, elapsed: Duration) {
        self.inner
            .publish_duration
            .get_or_create(&RpcLabels { rpc })
            .observe(elapsed.as_secs_f64());
    }

    pub fn acked(&self, topic: &str, subscription: &str, count: u64) {
        if count > 0 {
            let labels = self.subscription_labels(topic, subscription);
            self.inner.acked.get_or_create(&labels).inc_by(count);
        }
    }

    pub fn acks_rode(&self) {
        self.inner.acks_rode.inc();
    }

    pub fn fetches_carried(&self, by: CarriedBy, count: usize) {
        if count > 0 {
            let by = match by {
                CarriedBy::Publish => "publish",
                CarriedBy::Ack => "ack",
            };
            let labels = CarriedLabels { by };
            self.inner
                .fetches_carried
                .get_or_create(&labels)
                .inc_by(count as u64);
        }
    }

    pub fn ack_ids_ignored(&self, topic: &str, subscription: &str, count: u64) {
        if count > 0 {
            let labels = self.subscription_labels(topic, subscription);
            self.inner
                .ack_ids_ignored
                .get_or_create(&labels)
                .inc_by(count);
        }
    }

    pub fn nacked(&self, topic: &str, subscription: &str, nacked: u64, dead_lettered: u64) {
        if nacked > 0 {
            let labels = self.subscription_labels(topic, subscription);
            self.inner.nacked.get_or_create(&labels).inc_by(nacked);
            if dead_lettered > 0 {
                self.inner
                    .dead_lettered
                    .get_or_create(&labels)
                    .inc_by(dead_lettered);
            }
        }
    }

    /// The counters a delivery loop updates, resolved once per stream.
    pub fn subscription(&self, topic: &str, subscription: &str) -> SubscriptionMetrics {
        let labels = self.subscription_labels(topic, subscription);
        let inner = &self.inner;
        SubscriptionMetrics {
            delivered: inner.delivered.get_or_create_owned(&labels),
            redelivered: inner.redelivered.get_or_create_owned(&labels),
            dead_lettered: inner.dead_lettered.get_or_create_owned(&labels),
            filtered: inner.filtered.get_or_create_owned(&labels),
            lateness: inner.lateness.clone(),
        }
    }

    /// The metrics of TLS, authentication and abuse limits.
    pub fn security(&self) -> &SecurityMetrics {
        &self.inner.security
    }

    /// `GET /metrics`.
    pub fn routes(&self, store: Store) -> Router {
        Router::new()
            .route("/metrics", get(scrape))
            .with_state((self.clone(), store))
    }

    /// Reads the gauges from Redis and encodes every metric.
    pub async fn render(&self, store: &Store) -> String {
        let inner = &self.inner;
        let _one_at_a_time = inner.scrape.lock().await;
        let pool = store.pool_state();
        inner.pool_connections.set(i64::from(pool.connections));
        inner.pool_idle.set(i64::from(pool.idle_connections));
        if let Some(bytes) = resident_memory_bytes() {
            inner.resident_memory.set(bytes);
        }

        let mut topics: Vec<String> = inner
            .labelled
            .lock()
            .expect("metrics lock")
            .iter()
            .cloned()
            .collect();
        topics.sort();
        let mut read = Vec::with_capacity(topics.len());
        let complete = tokio::time::timeout(SCRAPE_TIMEOUT, async {
            for topic in &topics {
                let gauges = async {
                    let (_, kind) = store.topic_config(&TopicKeys::new(topic)).await?;
                    let kind = kind.unwrap_or_default();
                    let gauges = store.gauges(&TopicKeys::of_kind(topic, &kind)).await?;
                    Ok::<_, crate::error::Error>((gauges, kind))
                };
                match gauges.await {
                    Ok((gauges, kind)) => read.push((topic, gauges, kind)),
                    Err(err) => {
                        tracing::warn!(%topic, error = ?err, "metrics: could not read gauges");
                        return false;
                    }
                }
            }
            true
        })
        .await
        .unwrap_or_else(|_| {
            tracing::warn!(
                timeout = ?SCRAPE_TIMEOUT,
                "metrics: Redis too slow, gauges left out of this scrape"
            );
            false
        });
        if !complete {
            inner.scrape_failures.inc();
        }
        self.set_gauges(read);

        let mut text = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &inner.registry) {
            tracing::error!(error = ?err, "metrics: could not encode");
        }
        text
    }

    fn set_gauges(&self, read: Vec<(&String, TopicGauges, TopicKind)>) {
        let inner = &self.inner;
        inner.kind.clear();
        inner.stream_length.clear();
        inner.scheduled_now.clear();
        inner.pending.clear();
        inner.lag.clear();
        inner.dead_letters.clear();
        inner.oldest_unacked.clear();
        inner.ordering.clear();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for (topic, gauges, kind) in read {
            let kind_labels = TopicKindLabels {
                topic: topic.clone(),
                kind: kind.name().into(),
            };
            inner.kind.get_or_create(&kind_labels).set(1);
            let labels = TopicLabels {
                topic: topic.clone(),
            };
            set_count(&inner.stream_length, &labels, gauges.stream_length);
            set_count(&inner.scheduled_now, &labels, gauges.scheduled);
            for sub in gauges.subscriptions {
                let labels = SubscriptionLabels {
                    topic: topic.clone(),
                    subscription: sub.name,
                };
                set_count(&inner.pending, &labels, sub.pending);
                set_count(&inner.dead_letters, &labels, sub.dead_letters);
                if let Some(lag) = sub.lag {
                    set_count(&inner.lag, &labels, lag);
                }
                let age = sub.oldest_unacked_ms.map_or(0.0, |oldest| {
                    let now = gauges.redis_now_ms.unwrap_or(now_ms);
                    now.saturating_sub(oldest) as f64 / 1000.0
                });
                inner.oldest_unacked.get_or_create(&labels).set(age);
                inner.ordering.set(&labels, &sub.ordering);
            }
        }
    }
}

/// Sets the gauge of `labels` to a count read from Redis, which is unsigned
/// where a Prometheus gauge is signed: beyond `i64::MAX` it stays there.
fn set_count<L>(family: &Family<L, Gauge>, labels: &L, count: u64)
where
    L: Clone + std::hash::Hash + Eq,
{
    family
        .get_or_create(labels)
        .set(i64::try_from(count).unwrap_or(i64::MAX));
}

async fn scrape(State((metrics, store)): State<(Metrics, Store)>) -> impl IntoResponse {
    ([(CONTENT_TYPE, CONTENT)], metrics.render(&store).await)
}

/// The counters of one subscription that its delivery loops update.
#[derive(Clone)]
pub struct SubscriptionMetrics {
    delivered: Counter,
    redelivered: Counter,
    dead_lettered: Counter,
    filtered: Counter,
    lateness: Histogram,
}

impl SubscriptionMetrics {
    /// One delivery sent; `lateness` for the first delivery of a scheduled message.
    pub fn delivered(&self, attempt: u32, lateness: Option<Duration>) {
        self.delivered.inc();
        if attempt > 1 {
            self.redelivered.inc();
        }
        if let Some(lateness) = lateness {
            self.lateness.observe(lateness.as_secs_f64());
        }
    }

    /// Messages a fetch dead-lettered because their last lease ran out.
    pub fn dead_lettered(&self, count: u64) {
        if count > 0 {
            self.dead_lettered.inc_by(count);
        }
    }

    /// Messages the subscription's filter did not match, acked unsent.
    pub fn filtered(&self, count: u64) {
        self.filtered.inc_by(count);
    }
}

/// This process' resident set size, from `/proc/self/statm` (in pages).
fn resident_memory_bytes() -> Option<i64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: i64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it only reads a system setting.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    (page_size > 0).then(|| pages * page_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_beyond_the_budget_share_one_label() {
        let metrics = Metrics::new(2);
        assert_eq!(metrics.topic_label("a"), "a");
        assert_eq!(metrics.topic_label("b"), "b");
        assert_eq!(metrics.topic_label("a"), "a");
        assert_eq!(metrics.topic_label("c"), OTHER);
        let labels = metrics.subscription_labels("d", "billing");
        assert_eq!(
            (labels.topic.as_str(), labels.subscription.as_str()),
            (OTHER, OTHER)
        );
        let labels = metrics.subscription_labels("b", "billing");
        assert_eq!(labels.subscription, "billing");
    }

    #[test]
    fn counters_use_the_openmetrics_names() {
        let metrics = Metrics::new(10);
        let published = |duplicate, scheduled_in| Published {
            message_id: "1-0".into(),
            duplicate,
            due_ms: None,
            scheduled_in,
        };
        metrics.published(
            "orders",
            &[
                published(false, None),
                published(false, Some(Duration::from_secs(1))),
                published(true, None),
            ],
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.inner.registry).unwrap();
        assert!(
            text.contains("redq_messages_published_total{topic=\"orders\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("redq_messages_scheduled_total{topic=\"orders\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("redq_messages_duplicate_total{topic=\"orders\"} 1\n"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "redq_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
    }
}
