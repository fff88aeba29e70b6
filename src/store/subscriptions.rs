//! A subscription as Redis keeps it: a consumer group on the topic's stream,
//! a settings hash, and (ordered subscriptions) the keys of its ordering
//! state. Creating, listing, reading, changing, seeking and deleting it.

use super::replies::{
    GroupInfo, as_array, field_map, first_pending_age, group_info, take_count, take_string,
};
use super::scripts::{ENSURE_SUBSCRIPTION, SEEK};
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{
    ConsumerStats, DEFAULT_MAX_BLOCKED, DeliveryLimits, GroupStart, RetryPolicy,
    SubscriptionSettings, SubscriptionStats, SubscriptionUpdate,
};
use redis::Value;
use std::time::Duration;

/// XINFO CONSUMERS, the oldest pending entry, the dead letters' count, the
/// hash's `acked`, `mout` and `rlim`, and Redis' clock.
type StatsReply = (
    Value,
    Value,
    u64,
    (Option<u64>, Option<u64>, Option<u64>),
    (u64, u64),
);

/// The consumer that holds the entries parked for a retry (lib.lua's `PARKED`).
const PARKED_CONSUMER: &str = "redq.parked";

impl Store {
    /// Creates the subscription with `settings` unless it exists (an existing
    /// one keeps its settings); true when created.
    pub async fn ensure_subscription(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        start: GroupStart,
        settings: &SubscriptionSettings,
    ) -> Result<bool> {
        let retry = settings.retry;
        let start_id = match start {
            GroupStart::Earliest => "0",
            GroupStart::Latest => "$",
        };
        let mut conn = self.connection().await?;
        let created: i64 = ENSURE_SUBSCRIPTION
            .key(keys.stream())
            .key(keys.subscription(subscription))
            .key(keys.key_holders(subscription))
            .key(keys.held_keys(subscription))
            .key(keys.blocked(subscription))
            .key(keys.ready(subscription))
            .arg(subscription)
            .arg(start_id)
            .arg(retry.minimum_backoff.as_millis() as u64)
            .arg(retry.maximum_backoff.as_millis() as u64)
            .arg(retry.max_delivery_attempts)
            .arg(settings.ack_deadline.map_or(0, |d| d.as_millis() as u64))
            .arg(u8::from(settings.dead_lettering))
            .arg(u8::from(settings.message_ordering))
            .arg(settings.max_blocked)
            .arg(&settings.filter)
            .arg(settings.limits.max_deliveries_per_second)
            .arg(settings.limits.burst)
            .arg(settings.limits.max_outstanding)
            .invoke_async(&mut conn)
            .await?;
        Ok(created == 1)
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
        as_array(reply)?.into_iter().map(group_info).collect()
    }

    pub async fn subscription_settings(
        &self,
        keys: &TopicKeys,
        subscription: &str,
    ) -> Result<Option<SubscriptionSettings>> {
        let mut conn = self.connection().await?;
        let mut values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys.subscription(subscription))
            .arg(&[
                "ack", "bmin", "bmax", "max", "dlq", "ord", "mblk", "flt", "rate", "burst", "mout",
            ])
            .query_async(&mut conn)
            .await?;
        let rate: f64 = values
            .get(8)
            .and_then(|v| v.as_deref()?.parse().ok())
            .unwrap_or(0.0);
        let filter = values.get_mut(7).and_then(Option::take).unwrap_or_default();
        let get = |i: usize| -> Option<u64> { values.get(i)?.as_deref()?.parse().ok() };
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
            filter,
            limits: DeliveryLimits {
                max_deliveries_per_second: rate,
                burst: get(9).unwrap_or(0) as u32,
                max_outstanding: get(10).unwrap_or(0) as u32,
            },
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
                ("burst", update.burst.map(u64::from)),
                ("mout", update.max_outstanding.map(u64::from)),
            ],
        )
        .await?;
        if let Some(rate) = update.max_deliveries_per_second {
            let mut conn = self.connection().await?;
            let _: () = redis::cmd("HSET")
                .arg(keys.subscription(subscription))
                .arg("rate")
                .arg(rate)
                .query_async(&mut conn)
                .await?;
        }
        Ok(())
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
        let (consumers, oldest, dead_letters, (acked, max_leased, held_back), time): StatsReply =
            redis::pipe()
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
                .cmd("HMGET")
                .arg(keys.subscription(subscription))
                .arg(&["acked", "mout", "rlim"])
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
        // A LIST topic's elements not yet taken wait in its list.
        let waiting = match keys.list_keys() {
            Some(_) => self.list_length(keys).await?,
            None => 0,
        };
        let lag = group.lag.unwrap_or(0) + waiting;
        let parked: u64 = consumers
            .iter()
            .filter(|c| c.name == PARKED_CONSUMER)
            .map(|c| c.pending)
            .sum();
        let leased = group.pending.saturating_sub(parked);
        Ok(SubscriptionStats {
            ordering,
            pending: group.pending,
            lag,
            // A fetch the token bucket held back in the last second, with
            // messages still waiting.
            rate_limited: lag > 0 && held_back.is_some_and(|at| now_ms < at + 1000),
            at_max_outstanding: max_leased.is_some_and(|max| max > 0 && leased >= max),
            oldest_unacked_age,
            consumers,
            dead_letters,
            acked: acked.unwrap_or(0),
        })
    }

    /// Moves the subscription so that entries after `last_skipped` are
    /// delivered (again, unless `keep_acked`) and those up to it count as acked.
    pub async fn seek(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        last_skipped: &str,
        keep_acked: bool,
    ) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: i64 = SEEK
            .key(&keys.lease_keys(subscription)[..])
            .arg(subscription)
            .arg(last_skipped)
            .arg(if keep_acked { "1" } else { "0" })
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
}
