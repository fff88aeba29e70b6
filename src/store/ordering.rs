//! The state of ordered subscriptions, as read for stats and gauges: which
//! ordering keys are held, and which entries wait for theirs (see
//! `lua/lib.lua` for how keys are taken and released).

use super::replies::{as_int, as_string, first_pending_age};
use super::{Store, TopicKeys};
use crate::error::Result;
use crate::model::DEFAULT_MAX_BLOCKED;
use crate::model::OrderingStats;
use redis::Value;

/// The consumer under which blocked entries are pending (`BLOCKED` in lib.lua).
const BLOCKED_CONSUMER: &str = "redq.blocked";

/// Commands that [`read_ordering`] reads back, queued on `pipe`.
pub(super) const ORDERING_READS: usize = 4;

pub(super) fn queue_ordering_reads(pipe: &mut redis::Pipeline, keys: &TopicKeys, group: &str) {
    pipe.cmd("HLEN")
        .arg(keys.key_holders(group))
        .cmd("ZCARD")
        .arg(keys.blocked(group))
        .cmd("XPENDING")
        .arg(keys.stream())
        .arg(group)
        .arg("-")
        .arg("+")
        .arg(1)
        .arg(BLOCKED_CONSUMER)
        .cmd("HGET")
        .arg(keys.subscription(group))
        .arg("mblk");
}

/// Reads the replies of [`queue_ordering_reads`], at Redis' clock `now_ms`.
pub(super) fn read_ordering(
    replies: &mut impl Iterator<Item = Value>,
    now_ms: u64,
) -> Result<OrderingStats> {
    let mut next = || replies.next().unwrap_or(Value::Nil);
    let count = |value: Value| -> Result<u64> {
        Ok(match value {
            Value::Nil => 0,
            value => u64::try_from(as_int(value)?).unwrap_or(0),
        })
    };
    let active_keys = count(next())?;
    let blocked = count(next())?;
    let oldest_blocked_age = first_pending_age(next(), now_ms)?;
    let max_blocked = match next() {
        Value::Nil => DEFAULT_MAX_BLOCKED,
        value => as_string(value)?.parse().unwrap_or(DEFAULT_MAX_BLOCKED),
    };
    Ok(OrderingStats {
        active_keys,
        blocked,
        oldest_blocked_age,
        at_blocked_cap: blocked > 0 && blocked >= max_blocked,
    })
}

impl Store {
    /// The state of `subscription`'s ordering keys (all zero when it is not ordered).
    pub async fn ordering_stats(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        now_ms: u64,
    ) -> Result<OrderingStats> {
        let mut conn = self.connection().await?;
        let mut pipe = redis::pipe();
        queue_ordering_reads(&mut pipe, keys, subscription);
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        read_ordering(&mut replies.into_iter(), now_ms)
    }
}
