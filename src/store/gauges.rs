//! Point-in-time sizes of a topic and its subscriptions, read for the
//! Prometheus gauges, and the state of the connection pool.

use super::ordering::{ORDERING_READS, OrderingStats, queue_ordering_reads, read_ordering};
use super::stream::{as_array, as_int, as_string, entry_time_ms};
use super::{Store, TopicKeys};
use crate::error::Result;
use redis::Value;

/// Sizes of one topic at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicGauges {
    pub stream_length: u64,
    /// Scheduled messages not yet promoted.
    pub scheduled: u64,
    pub subscriptions: Vec<SubscriptionGauges>,
    /// Redis' clock when they were read, ms since the epoch.
    pub redis_now_ms: Option<u64>,
}

/// Sizes of one subscription at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionGauges {
    pub name: String,
    /// Delivered and unacked entries, parked retries included.
    pub pending: u64,
    /// Entries not yet delivered; None when Redis cannot tell (before 7.0,
    /// or after entries were deleted from the middle of the stream).
    pub lag: Option<u64>,
    pub dead_letters: u64,
    /// When the oldest pending entry entered the stream, ms since the epoch.
    pub oldest_unacked_ms: Option<u64>,
    /// Ordered subscriptions: their keys and blocked entries.
    pub ordering: OrderingStats,
}

/// Connections of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolState {
    pub connections: u32,
    pub idle_connections: u32,
}

impl Store {
    /// The pool's connections; none on a cluster, which has no pool.
    pub fn pool_state(&self) -> PoolState {
        match self.pool_statistics() {
            Some((connections, idle_connections)) => PoolState {
                connections,
                idle_connections,
            },
            None => PoolState {
                connections: 0,
                idle_connections: 0,
            },
        }
    }

    /// Reads the sizes of `topic` in at most three round trips; not atomic,
    /// which gauges do not need.
    pub async fn gauges(&self, topic: &str) -> Result<TopicGauges> {
        let keys = TopicKeys::new(topic);
        let mut conn = self.connection().await?;
        let (exists, stream_length, scheduled, time): (bool, u64, u64, (u64, u64)) = redis::pipe()
            .cmd("EXISTS")
            .arg(keys.stream())
            .cmd("XLEN")
            .arg(keys.stream())
            .cmd("ZCARD")
            .arg(keys.scheduled())
            .cmd("TIME")
            .query_async(&mut conn)
            .await?;
        let mut gauges = TopicGauges {
            stream_length,
            scheduled,
            subscriptions: Vec::new(),
            redis_now_ms: Some(time.0 * 1000 + time.1 / 1000),
        };
        if !exists {
            return Ok(gauges); // XINFO GROUPS fails on a missing stream
        }
        let groups: Value = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(keys.stream())
            .query_async(&mut conn)
            .await?;
        for group in as_array(groups)? {
            gauges.subscriptions.push(group_gauges(group)?);
        }
        if gauges.subscriptions.is_empty() {
            return Ok(gauges);
        }
        let mut pipe = redis::pipe();
        for sub in &gauges.subscriptions {
            pipe.cmd("XLEN")
                .arg(keys.dead_letters(&sub.name))
                .cmd("XPENDING")
                .arg(keys.stream())
                .arg(&sub.name);
            queue_ordering_reads(&mut pipe, &keys, &sub.name);
        }
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut replies = replies.into_iter();
        let now_ms = gauges.redis_now_ms.unwrap_or(0);
        for sub in &mut gauges.subscriptions {
            let (Some(dead_letters), Some(summary)) = (replies.next(), replies.next()) else {
                break;
            };
            sub.dead_letters = u64::try_from(as_int(dead_letters)?).unwrap_or(0);
            // XPENDING summary: [count, smallest id, greatest id, [[consumer, count]…]]
            sub.oldest_unacked_ms = as_array(summary)?
                .into_iter()
                .nth(1)
                .and_then(|id| as_string(id).ok())
                .and_then(|id| entry_time_ms(&id));
            let mut ordering = replies.by_ref().take(ORDERING_READS);
            sub.ordering = read_ordering(&mut ordering, now_ms)?;
        }
        Ok(gauges)
    }
}

/// One entry of XINFO GROUPS: a flat list of field names and values
/// (a map with RESP3).
fn group_gauges(group: Value) -> Result<SubscriptionGauges> {
    let pairs: Vec<(Value, Value)> = match group {
        Value::Map(pairs) => pairs,
        other => {
            let mut flat = as_array(other)?.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (flat.next(), flat.next()) {
                pairs.push((k, v));
            }
            pairs
        }
    };
    let mut sub = SubscriptionGauges::default();
    for (name, value) in pairs {
        match as_string(name)?.as_str() {
            "name" => sub.name = as_string(value)?,
            "pending" => sub.pending = u64::try_from(as_int(value)?).unwrap_or(0),
            "lag" => sub.lag = as_int(value).ok().and_then(|n| u64::try_from(n).ok()),
            _ => {}
        }
    }
    Ok(sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn group_fields_are_read_by_name() {
        let group = Value::Array(vec![
            bulk("name"),
            bulk("billing"),
            bulk("consumers"),
            Value::Int(2),
            bulk("pending"),
            Value::Int(3),
            bulk("lag"),
            Value::Int(7),
        ]);
        let sub = group_gauges(group).unwrap();
        assert_eq!(sub.name, "billing");
        assert_eq!((sub.pending, sub.lag), (3, Some(7)));
        let unknown_lag = Value::Array(vec![bulk("name"), bulk("b"), bulk("lag"), Value::Nil]);
        assert_eq!(group_gauges(unknown_lag).unwrap().lag, None);
    }
}
