//! The dashboard's charts, from samples kept in Redis so that every replica
//! draws the same: each interval one replica (the first to claim it) reads
//! every subscription's figures and appends a point to a capped list in the
//! topic's slot. Every replica also notes in Redis that it runs.

use super::Broker;
use crate::error::{Error, Result};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// How often the charts get a point.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(10);
/// An hour of points.
const SAMPLES_KEPT: u32 = 360;
/// Samples of a topic or subscription no longer sampled (deleted) go.
const SAMPLES_TTL: Duration = Duration::from_secs(2 * 3600);
/// A replica silent this long is no longer listed.
const REPLICA_FORGOTTEN: Duration = Duration::from_secs(60);

/// One point of a subscription's charts: its counters and sizes then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub time_ms: u64,
    /// The topic's published counter.
    pub published: u64,
    pub acked: u64,
    pub lag: u64,
    pub pending: u64,
    pub oldest_unacked_age_ms: u64,
}

impl Sample {
    fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.time_ms,
            self.published,
            self.acked,
            self.lag,
            self.pending,
            self.oldest_unacked_age_ms
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let mut numbers = line.split(' ').map(|n| n.parse::<u64>().ok());
        let mut next = || numbers.next().flatten();
        Some(Self {
            time_ms: next()?,
            published: next()?,
            acked: next()?,
            lag: next()?,
            pending: next()?,
            oldest_unacked_age_ms: next()?,
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// This machine's name, for the list of replicas (the pod's, on Kubernetes).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "redq".into())
}

impl Broker {
    /// Background loop: every [`SAMPLE_INTERVAL`], notes that this replica
    /// runs and, when it claims the interval, samples every subscription.
    pub async fn run_sampler(self, shutdown: CancellationToken) {
        let host = host_name();
        loop {
            if let Err(err) = self
                .store
                .replicas_seen(&host, now_ms(), REPLICA_FORGOTTEN)
                .await
            {
                tracing::debug!(error = ?err, "dashboard: could not note this replica");
            }
            match self.store.claim_sampling(SAMPLE_INTERVAL).await {
                Ok(true) => {
                    if let Err(err) = self.sample_subscriptions().await {
                        tracing::debug!(error = ?err, "dashboard: sampling failed");
                    }
                }
                Ok(false) => {}
                Err(err) => tracing::debug!(error = ?err, "dashboard: could not claim sampling"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(SAMPLE_INTERVAL) => {}
            }
        }
    }

    async fn sample_subscriptions(&self) -> Result<()> {
        for topic in self.store.topics().await? {
            let sampled = async {
                // The store's stats, not `Broker::topic`, which also drops
                // the topic's cached settings that publishing uses.
                let keys = self.existing_topic(&topic).await?;
                let published = self.store.topic_stats(&keys).await?.published;
                let time_ms = now_ms();
                let lines: Vec<(String, String)> = self
                    .subscriptions(&topic)
                    .await?
                    .into_iter()
                    .map(|view| {
                        let stats = view.stats;
                        let sample = Sample {
                            time_ms,
                            published,
                            acked: stats.acked,
                            lag: stats.lag,
                            pending: stats.pending,
                            oldest_unacked_age_ms: stats
                                .oldest_unacked_age
                                .map_or(0, |age| age.as_millis() as u64),
                        };
                        (view.name, sample.line())
                    })
                    .collect();
                self.store
                    .push_samples(&keys, &lines, SAMPLES_KEPT, SAMPLES_TTL)
                    .await
            };
            match sampled.await {
                // EPHEMERAL topics have no subscriptions of their own; a
                // topic deleted meanwhile has nothing to sample.
                Ok(()) | Err(Error::FailedPrecondition { .. } | Error::NotFound(_)) => {}
                Err(err) => tracing::debug!(%topic, error = ?err, "dashboard: could not sample"),
            }
        }
        Ok(())
    }

    /// The points of a subscription's charts, oldest first (the last hour).
    pub async fn samples(&self, topic: &str, subscription: &str) -> Result<Vec<Sample>> {
        let keys = self.existing_topic(topic).await?;
        let lines = self.store.samples(&keys, subscription).await?;
        Ok(lines
            .iter()
            .rev()
            .filter_map(|l| Sample::parse(l))
            .collect())
    }

    /// The replicas that ran within the last minute.
    pub async fn replicas(&self) -> Result<Vec<String>> {
        self.store.replicas(now_ms(), REPLICA_FORGOTTEN).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_read_back_as_written() {
        let sample = Sample {
            time_ms: 1,
            published: 2,
            acked: 3,
            lag: 4,
            pending: 5,
            oldest_unacked_age_ms: 6,
        };
        assert_eq!(Sample::parse(&sample.line()), Some(sample));
        assert_eq!(Sample::parse("1 2 3"), None);
    }
}
