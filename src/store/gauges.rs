//! Point-in-time sizes of a topic and its subscriptions, read for the
//! Prometheus gauges, Redis' memory use, and the state of the connection pool.

use super::ordering::{ORDERING_READS, queue_ordering_reads, read_ordering};
use super::replies::{GroupInfo, as_array, as_int, as_string, group_info};
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{OrderingStats, entry_time_ms};
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

/// Redis' memory at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Of every master together.
    pub used_bytes: u64,
    /// The master closest to its `maxmemory`; None when none has one.
    pub fullest: Option<MemoryUse>,
}

/// One master's memory against its `maxmemory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    pub used_bytes: u64,
    pub max_bytes: u64,
}

impl MemoryUse {
    pub fn fraction(self) -> f64 {
        self.used_bytes as f64 / self.max_bytes as f64
    }
}

/// Connections of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolState {
    pub connections: u32,
    pub idle_connections: u32,
}

impl Store {
    /// Redis' memory use as a fraction of `maxmemory`, the fullest master's
    /// on a cluster; None when no limit is set.
    pub async fn memory_use(&self) -> Result<Option<f64>> {
        Ok(self.memory().await?.fullest.map(MemoryUse::fraction))
    }

    /// Redis' memory: used bytes of every master, and the fullest master's
    /// use against its `maxmemory` (None when no master has a limit).
    pub async fn memory(&self) -> Result<Memory> {
        let mut conn = self.shared();
        let replies = conn
            .on_every_master(redis::cmd("INFO").arg("memory"))
            .await?;
        let mut memory = Memory::default();
        for reply in replies {
            let info: String = redis::from_redis_value(reply)
                .map_err(|_| Error::Corrupt("INFO memory is not text".into()))?;
            let field = |name: &str| {
                info.lines().find_map(|line| {
                    line.strip_prefix(name)?
                        .strip_prefix(':')?
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
            };
            let used = field("used_memory").unwrap_or(0);
            memory.used_bytes += used;
            if let Some(max) = field("maxmemory").filter(|max| *max > 0) {
                let this = MemoryUse {
                    used_bytes: used,
                    max_bytes: max,
                };
                if memory
                    .fullest
                    .is_none_or(|f| this.fraction() > f.fraction())
                {
                    memory.fullest = Some(this);
                }
            }
        }
        Ok(memory)
    }

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

    /// Reads the sizes of `keys`' topic in at most three round trips (four
    /// on a LIST topic); not atomic, which gauges do not need.
    pub async fn gauges(&self, keys: &TopicKeys) -> Result<TopicGauges> {
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
            let GroupInfo { name, pending, lag } = group_info(group)?;
            gauges.subscriptions.push(SubscriptionGauges {
                name,
                pending,
                lag,
                ..Default::default()
            });
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
            queue_ordering_reads(&mut pipe, keys, &sub.name);
        }
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut replies = replies.into_iter();
        let now_ms = gauges.redis_now_ms.unwrap_or(0);
        // A LIST topic's elements not yet taken wait in its list.
        let waiting = match keys.list_keys() {
            Some(_) => self.list_length(keys).await?,
            None => 0,
        };
        for sub in &mut gauges.subscriptions {
            let (Some(dead_letters), Some(summary)) = (replies.next(), replies.next()) else {
                break;
            };
            sub.dead_letters = u64::try_from(as_int(dead_letters)?).unwrap_or(0);
            if waiting > 0 {
                sub.lag = Some(sub.lag.unwrap_or(0) + waiting);
            }
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
