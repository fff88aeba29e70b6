//! The dashboard's chart samples: a capped LIST per subscription, in its
//! topic's slot, written by one replica per interval (a `SET NX PX` claim),
//! so every replica draws the same charts; and the replicas seen lately.

use super::{Store, TopicKeys, keys};
use crate::error::Result;
use std::time::Duration;

impl Store {
    /// Whether this replica takes the sampling of the interval now starting:
    /// the first of the replicas to ask in each `interval` does.
    pub async fn claim_sampling(&self, interval: Duration) -> Result<bool> {
        let mut conn = self.connection().await?;
        let claimed: Option<String> = redis::cmd("SET")
            .arg(keys::DASHBOARD_SAMPLER)
            .arg(self.replica())
            .arg("NX")
            .arg("PX")
            // A little less than the interval: the claim is free again when
            // the next interval's first replica asks.
            .arg((interval.as_millis() as u64 * 9 / 10).max(1))
            .query_async(&mut conn)
            .await?;
        Ok(claimed.is_some())
    }

    /// Adds one line per subscription of `keys`' topic, keeping the newest
    /// `keep`; the lists expire `ttl` after the last sample (a deleted topic
    /// or subscription leaves nothing behind).
    pub async fn push_samples(
        &self,
        keys: &TopicKeys,
        lines: &[(String, String)],
        keep: u32,
        ttl: Duration,
    ) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (subscription, line) in lines {
            let key = keys.samples(subscription);
            pipe.cmd("LPUSH").arg(&key).arg(line).ignore();
            pipe.cmd("LTRIM").arg(&key).arg(0).arg(keep - 1).ignore();
            pipe.cmd("PEXPIRE")
                .arg(&key)
                .arg(ttl.as_millis() as u64)
                .ignore();
        }
        let mut conn = self.connection().await?;
        let () = pipe.query_async(&mut conn).await?;
        Ok(())
    }

    /// A subscription's sample lines, newest first.
    pub async fn samples(&self, keys: &TopicKeys, subscription: &str) -> Result<Vec<String>> {
        let mut conn = self.connection().await?;
        Ok(redis::cmd("LRANGE")
            .arg(keys.samples(subscription))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?)
    }

    /// Records that this replica (named `name` for people) runs now, forgets
    /// replicas silent for `forget`, and returns those seen since.
    pub async fn replicas_seen(
        &self,
        name: &str,
        now_ms: u64,
        forget: Duration,
    ) -> Result<Vec<String>> {
        let member = format!("{name} ({})", &self.replica()[..8]);
        let since = now_ms.saturating_sub(forget.as_millis() as u64);
        let mut conn = self.connection().await?;
        let (seen,): (Vec<String>,) = redis::pipe()
            .cmd("ZADD")
            .arg(keys::REPLICAS)
            .arg(now_ms)
            .arg(member)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(keys::REPLICAS)
            .arg("-inf")
            .arg(format!("({since}"))
            .ignore()
            .cmd("ZRANGE")
            .arg(keys::REPLICAS)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        Ok(seen)
    }

    /// The replicas seen within `window` before `now_ms`.
    pub async fn replicas(&self, now_ms: u64, window: Duration) -> Result<Vec<String>> {
        let since = now_ms.saturating_sub(window.as_millis() as u64);
        let mut conn = self.connection().await?;
        Ok(redis::cmd("ZRANGEBYSCORE")
            .arg(keys::REPLICAS)
            .arg(since)
            .arg("+inf")
            .query_async(&mut conn)
            .await?)
    }
}
