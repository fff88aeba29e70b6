//! Topics as Redis keeps them: the registry of topic names, each topic's
//! settings hash and counters, trimming its stream, and deleting it.

use super::scripts::TRIM_STREAM;
use super::{Store, TopicKeys, keys};
use crate::error::{Error, Result};
use crate::model::{TopicKind, TopicSettings, TopicStats};
use std::time::Duration;

/// A topic's kind as its settings hash stores it (field `kind`).
const KIND_STREAM: &str = "stream";
const KIND_EPHEMERAL: &str = "ephemeral";
const KIND_LIST: &str = "list";

/// The field of a LIST topic's settings hash naming its one subscription.
const LIST_SUBSCRIPTION: &str = "list_subscription";

impl Store {
    /// Adds `topic` to the registry; false when it was there already.
    pub async fn register_topic(&self, topic: &str) -> Result<bool> {
        let mut conn = self.connection().await?;
        let added: i64 = redis::cmd("ZADD")
            .arg(keys::TOPICS)
            .arg("NX")
            .arg(0)
            .arg(topic)
            .query_async(&mut conn)
            .await?;
        Ok(added == 1)
    }

    /// Registers every topic that has messages (a stream or a schedule) on
    /// some master but is missing from the registry, which lives on another
    /// master and can lose a recent write in a failover; returns those added.
    /// A topic deleted meanwhile may come back empty, which is harmless.
    pub async fn repair_topic_registry(&self) -> Result<Vec<String>> {
        let mut conn = self.shared();
        // `s[ct]*`: the stream, the schedule (and the scheduled messages).
        let found = conn.scan_every_master("redq:{*}:s[ct]*").await?;
        let mut topics: Vec<String> = found
            .iter()
            .filter_map(|key| {
                let topic = key.strip_prefix("redq:{")?.split('}').next()?;
                let keys = TopicKeys::new(topic);
                (*key == keys.stream() || *key == keys.scheduled()).then(|| topic.to_owned())
            })
            .collect();
        topics.sort_unstable();
        topics.dedup();
        let mut added = Vec::new();
        for topic in topics {
            if self.register_topic(&topic).await? {
                added.push(topic);
            }
        }
        Ok(added)
    }

    pub async fn topic_exists(&self, topic: &str) -> Result<bool> {
        let mut conn = self.connection().await?;
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys::TOPICS)
            .arg(topic)
            .query_async(&mut conn)
            .await?;
        Ok(score.is_some())
    }

    /// Up to `count` topic names after `after` (from the first when None), by name.
    pub async fn list_topics(&self, after: Option<&str>, count: u32) -> Result<Vec<String>> {
        let start = after.map_or_else(|| "-".to_owned(), |name| format!("({name}"));
        let mut conn = self.connection().await?;
        Ok(redis::cmd("ZRANGEBYLEX")
            .arg(keys::TOPICS)
            .arg(start)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(count)
            .query_async(&mut conn)
            .await?)
    }

    /// Every topic, for the background loops' sweeps.
    pub async fn topics(&self) -> Result<Vec<String>> {
        let mut conn = self.connection().await?;
        Ok(redis::cmd("ZRANGE")
            .arg(keys::TOPICS)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?)
    }

    pub async fn topic_settings(&self, keys: &TopicKeys) -> Result<TopicSettings> {
        Ok(self.topic_config(keys).await?.0)
    }

    /// The topic's settings and its kind; None when no kind is stored (a
    /// topic created by publishing or subscribing, or created before kinds:
    /// a STREAM topic, unless the replica knows better).
    pub async fn topic_config(
        &self,
        keys: &TopicKeys,
    ) -> Result<(TopicSettings, Option<TopicKind>)> {
        let mut conn = self.connection().await?;
        let values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys.settings())
            .arg(&[
                "max_age",
                "max_len",
                "hard_max",
                "dedupe",
                "max_payload",
                "kind",
                "list_key",
            ])
            .query_async(&mut conn)
            .await?;
        let get = |i: usize| {
            values
                .get(i)
                .cloned()
                .flatten()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&v| v > 0)
        };
        let settings = TopicSettings {
            retention_max_age: get(0).map(Duration::from_millis),
            retention_max_length: get(1),
            hard_max_length: get(2),
            dedupe_window: get(3).map(Duration::from_millis),
            max_payload_bytes: get(4).map(|v| v as u32),
        };
        let text = |i: usize| values.get(i).cloned().flatten();
        let kind = match (text(5).as_deref(), text(6)) {
            (None, _) => None,
            (Some(KIND_EPHEMERAL), _) => Some(TopicKind::Ephemeral),
            (Some(KIND_LIST), Some(key)) => Some(TopicKind::List { key }),
            (Some(KIND_STREAM), _) => Some(TopicKind::Stream),
            (Some(other), _) => {
                return Err(Error::Corrupt(format!("topic kind {other:?}")));
            }
        };
        Ok((settings, kind))
    }

    /// Stores the topic's kind (in its settings hash), unless one is stored:
    /// returns the kind stored before, if any.
    pub async fn set_topic_kind(
        &self,
        keys: &TopicKeys,
        kind: &TopicKind,
    ) -> Result<Option<TopicKind>> {
        let name = match kind {
            TopicKind::Stream => KIND_STREAM,
            TopicKind::Ephemeral => KIND_EPHEMERAL,
            TopicKind::List { .. } => KIND_LIST,
        };
        let mut conn = self.connection().await?;
        let set: bool = redis::cmd("HSETNX")
            .arg(keys.settings())
            .arg("kind")
            .arg(name)
            .query_async(&mut conn)
            .await?;
        if set {
            if let TopicKind::List { key } = kind {
                let _: () = redis::cmd("HSET")
                    .arg(keys.settings())
                    .arg("list_key")
                    .arg(key)
                    .query_async(&mut conn)
                    .await?;
            }
            return Ok(None);
        }
        Ok(self.topic_config(keys).await?.1)
    }

    /// Claims the Redis list `key` for `topic`; the topic that holds it
    /// already, if another does.
    pub async fn claim_list_key(&self, key: &str, topic: &str) -> Result<Option<String>> {
        let mut conn = self.connection().await?;
        let (_, owner): (bool, String) = redis::pipe()
            .cmd("HSETNX")
            .arg(keys::LISTS)
            .arg(key)
            .arg(topic)
            .cmd("HGET")
            .arg(keys::LISTS)
            .arg(key)
            .query_async(&mut conn)
            .await?;
        Ok((owner != topic).then_some(owner))
    }

    /// Gives up `topic`'s claim on the Redis list `key`.
    pub async fn release_list_key(&self, key: &str, topic: &str) -> Result<()> {
        let mut conn = self.connection().await?;
        let owner: Option<String> = redis::cmd("HGET")
            .arg(keys::LISTS)
            .arg(key)
            .query_async(&mut conn)
            .await?;
        if owner.as_deref() == Some(topic) {
            let _: () = redis::cmd("HDEL")
                .arg(keys::LISTS)
                .arg(key)
                .query_async(&mut conn)
                .await?;
        }
        Ok(())
    }

    /// Makes `subscription` the LIST topic's one subscription (field
    /// `list_subscription` of its settings hash); the one it has already,
    /// if another.
    pub async fn claim_list_subscription(
        &self,
        keys: &TopicKeys,
        subscription: &str,
    ) -> Result<Option<String>> {
        let mut conn = self.connection().await?;
        let (_, owner): (bool, String) = redis::pipe()
            .cmd("HSETNX")
            .arg(keys.settings())
            .arg(LIST_SUBSCRIPTION)
            .arg(subscription)
            .cmd("HGET")
            .arg(keys.settings())
            .arg(LIST_SUBSCRIPTION)
            .query_async(&mut conn)
            .await?;
        Ok((owner != subscription).then_some(owner))
    }

    /// Frees the LIST topic's subscription name, if `subscription` has it.
    pub async fn release_list_subscription(
        &self,
        keys: &TopicKeys,
        subscription: &str,
    ) -> Result<()> {
        let mut conn = self.connection().await?;
        let owner: Option<String> = redis::cmd("HGET")
            .arg(keys.settings())
            .arg(LIST_SUBSCRIPTION)
            .query_async(&mut conn)
            .await?;
        if owner.as_deref() == Some(subscription) {
            let _: () = redis::cmd("HDEL")
                .arg(keys.settings())
                .arg(LIST_SUBSCRIPTION)
                .query_async(&mut conn)
                .await?;
        }
        Ok(())
    }

    /// The type of the Redis key `key` (`none` when it does not exist).
    pub async fn key_type(&self, key: &str) -> Result<String> {
        let mut conn = self.connection().await?;
        Ok(redis::cmd("TYPE").arg(key).query_async(&mut conn).await?)
    }

    /// Stores the settings that are Some; the others stay as they are.
    pub async fn update_topic_settings(
        &self,
        keys: &TopicKeys,
        update: &TopicSettings,
    ) -> Result<()> {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        self.set_present_fields(
            keys.settings(),
            [
                ("max_age", ms(update.retention_max_age)),
                ("max_len", update.retention_max_length),
                ("hard_max", update.hard_max_length),
                ("dedupe", ms(update.dedupe_window)),
                ("max_payload", update.max_payload_bytes.map(u64::from)),
            ],
        )
        .await
    }

    /// HSET of the fields that have a value, if any.
    pub(super) async fn set_present_fields<const N: usize>(
        &self,
        key: String,
        fields: [(&str, Option<u64>); N],
    ) -> Result<()> {
        let present: Vec<(&str, u64)> = fields
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| (name, v)))
            .collect();
        if present.is_empty() {
            return Ok(());
        }
        let mut conn = self.connection().await?;
        let _: () = redis::cmd("HSET")
            .arg(key)
            .arg(&present)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    pub async fn topic_stats(&self, keys: &TopicKeys) -> Result<TopicStats> {
        let mut conn = self.connection().await?;
        let (stream_length, scheduled, head, counters): TopicStatsReply = redis::pipe()
            .cmd("XLEN")
            .arg(keys.stream())
            .cmd("ZCARD")
            .arg(keys.scheduled())
            .cmd("ZRANGE")
            .arg(keys.scheduled())
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .cmd("HMGET")
            .arg(keys.settings())
            .arg(&["published", "dropped"])
            .query_async(&mut conn)
            .await?;
        Ok(TopicStats {
            stream_length,
            scheduled,
            next_due_ms: head.first().map(|(_, due)| *due as u64),
            published: counters.first().copied().flatten().unwrap_or(0),
            dropped: counters.get(1).copied().flatten().unwrap_or(0),
        })
    }

    /// Applies the topic's retention (see lua/trim_stream.lua); returns the
    /// entries trimmed and the entries dropped by the hard cap.
    pub async fn trim(&self, keys: &TopicKeys, default_max_age: Duration) -> Result<(u64, u64)> {
        let mut conn = self.connection().await?;
        Ok(TRIM_STREAM
            .key(keys.stream())
            .key(keys.settings())
            .arg(default_max_age.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?)
    }

    /// Deletes a topic with its messages, schedule and subscriptions. Dedupe
    /// keys are left to expire.
    pub async fn delete_topic(&self, keys: &TopicKeys, topic: &str) -> Result<bool> {
        for subscription in self.subscriptions(keys).await? {
            self.delete_subscription(keys, &subscription).await?;
        }
        self.delete_schedules(keys).await?;
        let mut conn = self.connection().await?;
        // The topic's keys, then the registry (another slot on a cluster, so
        // another call): a crash between the two leaves a registered topic
        // with nothing in it, which the next delete removes.
        let _: i64 = redis::cmd("DEL")
            .arg(keys.stream())
            .arg(keys.settings())
            .arg(keys.scheduled())
            .arg(keys.scheduled_messages())
            .query_async(&mut conn)
            .await?;
        let removed: i64 = redis::cmd("ZREM")
            .arg(keys::TOPICS)
            .arg(topic)
            .query_async(&mut conn)
            .await?;
        Ok(removed == 1)
    }
}

/// XLEN, ZCARD, the schedule's head with its score, and the counters.
type TopicStatsReply = (u64, u64, Vec<(String, f64)>, Vec<Option<u64>>);
