//! Topics and subscriptions as things to administer: the topic registry,
//! their settings, their stats, and deleting them.

use super::leases::RetryPolicy;
use super::scripts::{SEEK, TRIM_STREAM};
use super::stream::{as_array, as_bytes, as_int, as_string, first_pending_age};
use super::{Store, TopicKeys, keys};
use crate::error::{Error, Result};
use redis::Value;
use std::collections::HashMap;
use std::time::Duration;

/// A topic's settings; None leaves the server's default in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicSettings {
    pub retention_max_age: Option<Duration>,
    pub retention_max_length: Option<u64>,
    pub hard_max_length: Option<u64>,
    pub dedupe_window: Option<Duration>,
    pub max_payload_bytes: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicStats {
    pub stream_length: u64,
    pub scheduled: u64,
    pub next_due_ms: Option<u64>,
    pub published: u64,
    pub dropped: u64,
}

/// A subscription's settings as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionSettings {
    /// Ack deadline of streams that ask for none; None: the server default.
    pub ack_deadline: Option<Duration>,
    pub retry: RetryPolicy,
    pub dead_lettering: bool,
    /// Delivers in order per ordering key; fixed at creation.
    pub message_ordering: bool,
    /// Ordered subscriptions: the most entries waiting for their key before
    /// the subscription stops reading new entries.
    pub max_blocked: u64,
}

/// Blocked entries an ordered subscription holds at most, unless it says otherwise.
pub const DEFAULT_MAX_BLOCKED: u64 = 100_000;

/// Deliveries before dead-lettering of an ordered subscription created
/// without a limit while the server's default is unlimited.
pub const ORDERED_MAX_DELIVERY_ATTEMPTS: u32 = 10;

/// A change to a subscription's settings; None leaves a setting as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscriptionUpdate {
    pub ack_deadline: Option<Duration>,
    pub minimum_backoff: Option<Duration>,
    pub maximum_backoff: Option<Duration>,
    pub max_delivery_attempts: Option<u32>,
    pub dead_lettering: Option<bool>,
    pub max_blocked: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerStats {
    pub name: String,
    pub pending: u64,
    pub idle: Duration,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionStats {
    pub pending: u64,
    pub lag: u64,
    /// Age of the oldest message still pending, by its publish time.
    pub oldest_unacked_age: Option<Duration>,
    pub consumers: Vec<ConsumerStats>,
    pub dead_letters: u64,
    pub acked: u64,
    /// Ordered subscriptions only (else zero and None).
    pub ordering: super::ordering::OrderingStats,
}

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
        let mut conn = self.connection().await?;
        let values: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(keys.settings())
            .arg(&["max_age", "max_len", "hard_max", "dedupe", "max_payload"])
            .query_async(&mut conn)
            .await?;
        let get = |i: usize| values.get(i).copied().flatten().filter(|&v| v > 0);
        Ok(TopicSettings {
            retention_max_age: get(0).map(Duration::from_millis),
            retention_max_length: get(1),
            hard_max_length: get(2),
            dedupe_window: get(3).map(Duration::from_millis),
            max_payload_bytes: get(4).map(|v| v as u32),
        })
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
    async fn set_present_fields<const N: usize>(
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

    /// Names of the topic's subscriptions.
    pub async fn subscriptions(&self, keys: &TopicKeys) -> Result<Vec<String>> {
        let groups = self.groups(keys).await?;
        Ok(groups.into_iter().map(|group| group.name).collect())
    }

    async fn groups(&self, keys: &TopicKeys) -> Result<Vec<GroupInfo>> {
        let mut conn = self.connection().await?;
        let reply: redis::RedisResult<Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(keys.stream())
            .query_async(&mut conn)
            .await;
        let reply = match reply {
            Err(err) if err.to_string().contains("no such key") => return Ok(Vec::new()),
            other => other?,
        };
        as_array(reply)?
            .into_iter()
            .map(|group| {
                let mut fields = field_map(group)?;
                Ok(GroupInfo {
                    name: take_string(&mut fields, "name")?,
                    pending: take_count(&mut fields, "pending")?,
                    lag: fields
                        .remove("lag")
                        .and_then(|lag| as_int(lag).ok())
                        .unwrap_or(0)
                        .max(0) as u64,
                })
            })
            .collect()
    }

    pub async fn subscription_settings(
        &self,
        keys: &TopicKeys,
        subscription: &str,
    ) -> Result<Option<SubscriptionSettings>> {
        let mut conn = self.connection().await?;
        let values: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(keys.subscription(subscription))
            .arg(&["ack", "bmin", "bmax", "max", "dlq", "ord", "mblk"])
            .query_async(&mut conn)
            .await?;
        let get = |i: usize| values.get(i).copied().flatten();
        let (Some(bmin), Some(bmax)) = (get(1), get(2)) else {
            return Ok(None);
        };
        Ok(Some(SubscriptionSettings {
            ack_deadline: get(0).filter(|&ms| ms > 0).map(Duration::from_millis),
            retry: RetryPolicy {
                minimum_backoff: Duration::from_millis(bmin),
                maximum_backoff: Duration::from_millis(bmax),
                max_delivery_attempts: get(3).unwrap_or(0) as u32,
            },
            dead_lettering: get(4) != Some(0),
            message_ordering: get(5) == Some(1),
            max_blocked: get(6).unwrap_or(DEFAULT_MAX_BLOCKED),
        }))
    }

    pub async fn update_subscription_settings(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        update: &SubscriptionUpdate,
    ) -> Result<()> {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        self.set_present_fields(
            keys.subscription(subscription),
            [
                ("ack", ms(update.ack_deadline)),
                ("bmin", ms(update.minimum_backoff)),
                ("bmax", ms(update.maximum_backoff)),
                ("max", update.max_delivery_attempts.map(u64::from)),
                ("dlq", update.dead_lettering.map(u64::from)),
                ("mblk", update.max_blocked),
            ],
        )
        .await
    }

    pub async fn subscription_stats(
        &self,
        keys: &TopicKeys,
        subscription: &str,
    ) -> Result<SubscriptionStats> {
        let group = self
            .groups(keys)
            .await?
            .into_iter()
            .find(|group| group.name == subscription)
            .ok_or_else(|| Error::NotFound("subscription".into()))?;
        let mut conn = self.connection().await?;
        let (consumers, oldest, dead_letters, acked, time): (
            Value,
            Value,
            u64,
            Option<u64>,
            (u64, u64),
        ) = redis::pipe()
            .cmd("XINFO")
            .arg("CONSUMERS")
            .arg(keys.stream())
            .arg(subscription)
            .cmd("XPENDING")
            .arg(keys.stream())
            .arg(subscription)
            .arg("-")
            .arg("+")
            .arg(1)
            .cmd("XLEN")
            .arg(keys.dead_letters(subscription))
            .cmd("HGET")
            .arg(keys.subscription(subscription))
            .arg("acked")
            .cmd("TIME")
            .query_async(&mut conn)
            .await?;
        let now_ms = time.0 * 1000 + time.1 / 1000;
        let oldest_unacked_age = first_pending_age(oldest, now_ms)?;
        let consumers = as_array(consumers)?
            .into_iter()
            .map(|consumer| {
                let mut fields = field_map(consumer)?;
                Ok(ConsumerStats {
                    name: take_string(&mut fields, "name")?,
                    pending: take_count(&mut fields, "pending")?,
                    idle: Duration::from_millis(take_count(&mut fields, "idle")?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ordering = self.ordering_stats(keys, subscription, now_ms).await?;
        Ok(SubscriptionStats {
            ordering,
            pending: group.pending,
            lag: group.lag,
            oldest_unacked_age,
            consumers,
            dead_letters,
            acked: acked.unwrap_or(0),
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

    /// Redis' memory use as a fraction of `maxmemory`, the fullest master's
    /// on a cluster; None when no limit is set.
    pub async fn memory_use(&self) -> Result<Option<f64>> {
        let mut conn = self.shared();
        let replies = conn
            .on_every_master(redis::cmd("INFO").arg("memory"))
            .await?;
        let mut fullest: Option<f64> = None;
        for reply in replies {
            let info: String = redis::from_redis_value(reply)
                .map_err(|_| Error::Corrupt("INFO memory is not text".into()))?;
            let field = |name: &str| {
                info.lines().find_map(|line| {
                    line.strip_prefix(name)?
                        .strip_prefix(':')?
                        .trim()
                        .parse::<f64>()
                        .ok()
                })
            };
            if let (Some(used), Some(max)) = (field("used_memory"), field("maxmemory"))
                && max > 0.0
            {
                fullest = Some(fullest.map_or(used / max, |f| f.max(used / max)));
            }
        }
        Ok(fullest)
    }

    /// Moves the subscription so that entries after `last_skipped` are
    /// delivered (again) and those up to it count as acked.
    pub async fn seek(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        last_skipped: &str,
    ) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: i64 = SEEK
            .key(&keys.lease_keys(subscription)[..])
            .arg(subscription)
            .arg(last_skipped)
            .invoke_async(&mut conn)
            .await
            .map_err(|err| {
                if err.to_string().contains("NOGROUP") || err.to_string().contains("no such key") {
                    Error::NotFound("subscription".into())
                } else {
                    err.into()
                }
            })?;
        Ok(())
    }

    /// Deletes a subscription: its group, settings, timers and dead letters.
    pub async fn delete_subscription(&self, keys: &TopicKeys, subscription: &str) -> Result<bool> {
        let mut conn = self.connection().await?;
        let (destroyed, _): (i64, i64) = redis::pipe()
            .atomic()
            .cmd("XGROUP")
            .arg("DESTROY")
            .arg(keys.stream())
            .arg(subscription)
            .cmd("DEL")
            .arg(keys.subscription(subscription))
            .arg(keys.timers(subscription))
            .arg(keys.dead_letters(subscription))
            .arg(keys.key_holders(subscription))
            .arg(keys.held_keys(subscription))
            .arg(keys.blocked(subscription))
            .arg(keys.ready(subscription))
            .query_async(&mut conn)
            .await
            .or_else(|err| {
                if err.to_string().contains("no such key") || err.code() == Some("ERR") {
                    Ok((0, 0))
                } else {
                    Err(err)
                }
            })?;
        Ok(destroyed == 1)
    }

    /// Deletes a topic with its messages, schedule and subscriptions. Dedupe
    /// keys are left to expire.
    pub async fn delete_topic(&self, keys: &TopicKeys, topic: &str) -> Result<bool> {
        for subscription in self.subscriptions(keys).await? {
            self.delete_subscription(keys, &subscription).await?;
        }
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

struct GroupInfo {
    name: String,
    pending: u64,
    lag: u64,
}

/// Takes a string field out of an XINFO map.
fn take_string(fields: &mut HashMap<String, Value>, name: &str) -> Result<String> {
    as_string(fields.remove(name).unwrap_or(Value::Nil))
}

/// Takes a count (or ms) field out of an XINFO map: 0 when absent or negative.
fn take_count(fields: &mut HashMap<String, Value>, name: &str) -> Result<u64> {
    let value = fields.remove(name).map(as_int).transpose()?;
    Ok(value.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

/// An XINFO reply (`[name, value, name, value, ...]` or a RESP3 map) as a map.
fn field_map(value: Value) -> Result<HashMap<String, Value>> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        other => {
            let mut items = as_array(other)?.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            pairs
        }
    };
    pairs
        .into_iter()
        .map(|(k, v)| Ok((String::from_utf8_lossy(&as_bytes(k)?).into_owned(), v)))
        .collect()
}
