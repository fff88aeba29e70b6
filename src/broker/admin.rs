//! Administration: topics and subscriptions (settings and stats), dead
//! letters, and seeking. Any replica serves these calls.

use super::Broker;
use crate::error::{Error, Result};
use crate::store::TopicKeys;
use crate::store::stream::{GroupStart, entry_id_before};
use crate::store::topics::{
    SubscriptionSettings, SubscriptionStats, SubscriptionUpdate, TopicSettings, TopicStats,
};
use std::time::Duration;

/// Dead letters redriven per script call.
const REDRIVE_CHUNK: u32 = 100;

/// A topic as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    pub name: String,
    pub settings: TopicSettings,
    /// Left out of listings.
    pub stats: Option<TopicStats>,
    pub subscriptions: Vec<String>,
}

/// A subscription as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionView {
    pub topic: String,
    pub name: String,
    pub settings: SubscriptionSettings,
    pub stats: SubscriptionStats,
}

/// Where Seek moves a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeekTarget {
    /// Messages published at or after this time, ms since the epoch.
    Time(u64),
    /// This message (a stream entry id) and the ones after it.
    Message(String),
}

impl Broker {
    pub async fn create_topic(&self, topic: &str, settings: &TopicSettings) -> Result<TopicView> {
        if !self.store.register_topic(topic).await? {
            return Err(Error::AlreadyExists("topic".into()));
        }
        let keys = TopicKeys::new(topic);
        self.store.update_topic_settings(&keys, settings).await?;
        self.topic(topic).await
    }

    pub async fn topic(&self, topic: &str) -> Result<TopicView> {
        let keys = self.existing_topic(topic).await?;
        Ok(TopicView {
            name: topic.to_owned(),
            settings: self.store.topic_settings(&keys).await?,
            stats: Some(self.store.topic_stats(&keys).await?),
            subscriptions: self.store.subscriptions(&keys).await?,
        })
    }

    /// A page of topics after `after`, by name, with their settings.
    pub async fn topics(
        &self,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<(Vec<TopicView>, Option<String>)> {
        let mut names = self.store.list_topics(after, page_size + 1).await?;
        let next = (names.len() > page_size as usize).then(|| {
            names.truncate(page_size as usize);
            names.last().cloned().unwrap_or_default()
        });
        let mut topics = Vec::with_capacity(names.len());
        for name in names {
            let keys = TopicKeys::new(&name);
            topics.push(TopicView {
                settings: self.store.topic_settings(&keys).await?,
                stats: None,
                subscriptions: self.store.subscriptions(&keys).await?,
                name,
            });
        }
        Ok((topics, next))
    }

    pub async fn update_topic(&self, topic: &str, settings: &TopicSettings) -> Result<TopicView> {
        let keys = self.existing_topic(topic).await?;
        self.store.update_topic_settings(&keys, settings).await?;
        self.forget_topic_settings(topic);
        self.topic(topic).await
    }

    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        let keys = self.existing_topic(topic).await?;
        self.store.delete_topic(&keys, topic).await?;
        self.known_topics.lock().expect("topics lock").remove(topic);
        self.forget_topic_settings(topic);
        Ok(())
    }

    pub async fn create_subscription(
        &self,
        topic: &str,
        subscription: &str,
        start: GroupStart,
        settings: &SubscriptionSettings,
    ) -> Result<SubscriptionView> {
        self.register_topic(topic).await?;
        let keys = TopicKeys::new(topic);
        if !self
            .store
            .ensure_subscription(&keys, subscription, start, settings)
            .await?
        {
            return Err(Error::AlreadyExists("subscription".into()));
        }
        self.subscription(topic, subscription).await
    }

    pub async fn subscription(&self, topic: &str, subscription: &str) -> Result<SubscriptionView> {
        let keys = self.existing_topic(topic).await?;
        let settings = self
            .store
            .subscription_settings(&keys, subscription)
            .await?
            .ok_or_else(|| Error::NotFound("subscription".into()))?;
        Ok(SubscriptionView {
            topic: topic.to_owned(),
            name: subscription.to_owned(),
            settings,
            stats: self.store.subscription_stats(&keys, subscription).await?,
        })
    }

    pub async fn subscriptions(&self, topic: &str) -> Result<Vec<SubscriptionView>> {
        let keys = self.existing_topic(topic).await?;
        let mut views = Vec::new();
        for name in self.store.subscriptions(&keys).await? {
            views.push(self.subscription(topic, &name).await?);
        }
        Ok(views)
    }

    pub async fn update_subscription(
        &self,
        topic: &str,
        subscription: &str,
        update: &SubscriptionUpdate,
    ) -> Result<SubscriptionView> {
        let current = self.subscription(topic, subscription).await?;
        let retry = current.settings.retry;
        let minimum = update.minimum_backoff.unwrap_or(retry.minimum_backoff);
        let maximum = update.maximum_backoff.unwrap_or(retry.maximum_backoff);
        if minimum > maximum {
            return Err(Error::invalid(
                "settings.retry_policy",
                "minimum_backoff must not exceed maximum_backoff",
            ));
        }
        let keys = TopicKeys::new(topic);
        self.store
            .update_subscription_settings(&keys, subscription, update)
            .await?;
        self.subscription(topic, subscription).await
    }

    pub async fn delete_subscription(&self, topic: &str, subscription: &str) -> Result<()> {
        let keys = self.existing_topic(topic).await?;
        if !self.store.delete_subscription(&keys, subscription).await? {
            return Err(Error::NotFound("subscription".into()));
        }
        Ok(())
    }

    /// Redrives dead letters (those in `ids`, or all), at most `per_second`.
    pub async fn redrive_dead_letters(
        &self,
        topic: &str,
        subscription: &str,
        ids: &[String],
        per_second: u32,
    ) -> Result<u64> {
        let keys = self.existing_topic(topic).await?;
        let chunk = REDRIVE_CHUNK.min(per_second).max(1);
        let mut redriven = 0;
        let mut chunks: Vec<&[String]> = ids.chunks(chunk as usize).collect();
        let all = ids.is_empty();
        loop {
            let started = tokio::time::Instant::now();
            let these = if all {
                &[][..]
            } else {
                chunks.pop().unwrap_or(&[])
            };
            if !all && these.is_empty() {
                break;
            }
            let moved = self
                .store
                .redrive_dead_letters(&keys, subscription, these, chunk)
                .await?;
            redriven += moved;
            if all && moved < u64::from(chunk) {
                break;
            }
            tokio::time::sleep_until(started + redrive_pause(moved, per_second)).await;
        }
        Ok(redriven)
    }

    pub async fn purge_dead_letters(
        &self,
        topic: &str,
        subscription: &str,
        ids: &[String],
    ) -> Result<u64> {
        let keys = self.existing_topic(topic).await?;
        self.store
            .purge_dead_letters(&keys, subscription, ids)
            .await
    }

    pub async fn seek(&self, topic: &str, subscription: &str, target: &SeekTarget) -> Result<()> {
        let keys = self.existing_topic(topic).await?;
        let last_skipped = match target {
            SeekTarget::Time(ms) => entry_id_before(&format!("{ms}-0")),
            SeekTarget::Message(id) => entry_id_before(id),
        };
        self.store.seek(&keys, subscription, &last_skipped).await?;
        // The subscription's streams have entries to read again.
        self.wakeups.deliveries_returned(topic).await
    }

    async fn existing_topic(&self, topic: &str) -> Result<TopicKeys> {
        if self.store.topic_exists(topic).await? {
            Ok(TopicKeys::new(topic))
        } else {
            Err(Error::NotFound("topic".into()))
        }
    }
}

/// How long redriving `moved` dead letters takes at `per_second`: the rate
/// counts what was redriven, so unknown ids cost no wait.
fn redrive_pause(moved: u64, per_second: u32) -> Duration {
    Duration::from_secs_f64(moved as f64 / f64::from(per_second.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_waits_for_what_it_moved_only() {
        assert_eq!(redrive_pause(0, 1000), Duration::ZERO);
        assert_eq!(redrive_pause(100, 1000), Duration::from_millis(100));
        assert_eq!(redrive_pause(5, 0), Duration::from_secs(5));
    }
}
