//! Administration: topics and subscriptions (settings and stats), dead
//! letters, and seeking. Any replica serves these calls.

use super::Broker;
use super::kinds::{Call, check_settings_for_kind};
use crate::error::{Error, Result};
use crate::model::{
    GroupStart, SubscriptionSettings, SubscriptionStats, SubscriptionUpdate, TopicKind,
    TopicSettings, TopicStats, entry_id_before,
};
use crate::store::TopicKeys;
use futures::{StreamExt, TryStreamExt};
use std::time::Duration;

/// Dead letters redriven per second when the caller does not say.
pub const DEFAULT_REDRIVE_RATE: u32 = 1000;

/// Dead letters redriven per script call.
const REDRIVE_CHUNK: u32 = 100;

/// Topics of a listing whose settings are read at the same time.
const LISTING_CONCURRENCY: usize = 16;

/// A topic as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    pub name: String,
    pub settings: TopicSettings,
    pub kind: TopicKind,
    /// Left out of listings.
    pub stats: Option<TopicStats>,
    pub subscriptions: Vec<String>,
    /// In a listing: the Redis node or shard holding the topic's keys could
    /// not be reached, so only its name (from the registry) is known; its
    /// settings are the defaults and its subscriptions are left out.
    pub unavailable: bool,
}

/// A subscription as the admin API shows it.
#[derive(Debug, Clone, PartialEq)]
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
    /// Creates a topic of `kind`. A LIST topic needs a standalone or
    /// Sentinel Redis (its list and redq's keys for it are touched by one
    /// script, and a cluster would put them in different slots), a list
    /// key holding a list or nothing, and no other topic on that key.
    pub async fn create_topic(
        &self,
        topic: &str,
        settings: &TopicSettings,
        kind: TopicKind,
    ) -> Result<TopicView> {
        check_settings_for_kind(settings, &kind)?;
        if let TopicKind::List { key } = &kind {
            self.claim_list(topic, key).await?;
        }
        if !self.store.register_topic(topic).await? {
            if let TopicKind::List { key } = &kind {
                self.store.release_list_key(key, topic).await?;
            }
            return Err(Error::AlreadyExists("topic".into()));
        }
        let keys = TopicKeys::new(topic);
        self.store.set_topic_kind(&keys, &kind).await?;
        self.store.update_topic_settings(&keys, settings).await?;
        self.forget_topic_settings(topic);
        self.remember_kind(topic, &kind);
        self.topic(topic).await
    }

    /// Claims the Redis list `key` for the LIST topic `topic`.
    async fn claim_list(&self, topic: &str, key: &str) -> Result<()> {
        let refuse = |reason: String| Error::FailedPrecondition {
            field: "settings.list_key".into(),
            reason,
        };
        if self.store.is_cluster() {
            return Err(Error::FailedPrecondition {
                field: "settings.kind".into(),
                reason: "LIST topics need a standalone or Sentinel Redis, not a cluster".into(),
            });
        }
        match self.store.key_type(key).await?.as_str() {
            "none" | "list" => {}
            other => return Err(refuse(format!("the key holds a {other}, not a list"))),
        }
        if let Some(owner) = self.store.claim_list_key(key, topic).await? {
            return Err(refuse(format!(
                "the list is the LIST topic {owner:?}'s already"
            )));
        }
        Ok(())
    }

    pub async fn topic(&self, topic: &str) -> Result<TopicView> {
        let keys = self.existing_topic(topic).await?;
        self.forget_topic_settings(topic);
        let (settings, kind) = self.topic_config(topic).await?;
        Ok(TopicView {
            name: topic.to_owned(),
            settings,
            kind,
            stats: Some(self.store.topic_stats(&keys).await?),
            subscriptions: self.store.subscriptions(&keys).await?,
            unavailable: false,
        })
    }

    /// A page of topics after `after`, by name, with their settings. A topic
    /// whose shard cannot be reached is listed by name and marked so: one
    /// shard down must not hide the others' topics. The registry's own shard
    /// down fails the call (UNAVAILABLE).
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
        // Concurrently: a topic on an unreachable shard waits for the
        // connection to fail, and its neighbours need not wait behind it.
        let topics = futures::stream::iter(names)
            .map(|name| self.listed_topic(name))
            .buffered(LISTING_CONCURRENCY)
            .try_collect()
            .await?;
        Ok((topics, next))
    }

    /// One topic of a listing: its settings and subscriptions, or its name
    /// alone when its shard is unreachable.
    async fn listed_topic(&self, name: String) -> Result<TopicView> {
        let keys = TopicKeys::new(&name);
        let details = async {
            let (settings, kind) = self.store.topic_config(&keys).await?;
            let kind = kind.unwrap_or_default();
            Ok::<_, Error>((settings, kind, self.store.subscriptions(&keys).await?))
        };
        let (settings, kind, subscriptions, unavailable) = match details.await {
            Ok((settings, kind, subscriptions)) => (settings, kind, subscriptions, false),
            Err(err) if err.is_unavailable() => {
                tracing::debug!(topic = %name, error = ?err, "topic unreachable in a listing");
                (
                    TopicSettings::default(),
                    TopicKind::default(),
                    Vec::new(),
                    true,
                )
            }
            Err(err) => return Err(err),
        };
        Ok(TopicView {
            name,
            settings,
            kind,
            stats: None,
            subscriptions,
            unavailable,
        })
    }

    /// Changes a topic's settings; its kind and list key stay as created.
    pub async fn update_topic(
        &self,
        topic: &str,
        settings: &TopicSettings,
        kind: Option<TopicKind>,
    ) -> Result<TopicView> {
        let keys = self.existing_topic(topic).await?;
        self.forget_topic_settings(topic);
        let stored = self.topic_kind(topic).await?;
        if let Some(kind) = kind {
            let field = match (&kind, &stored) {
                (TopicKind::List { key }, TopicKind::List { key: stored_key })
                    if key != stored_key =>
                {
                    Some("settings.list_key")
                }
                _ if std::mem::discriminant(&kind) != std::mem::discriminant(&stored) => {
                    Some("settings.kind")
                }
                _ => None,
            };
            if let Some(field) = field {
                return Err(Error::invalid(field, "is fixed when the topic is created"));
            }
        }
        check_settings_for_kind(settings, &stored)?;
        self.store.update_topic_settings(&keys, settings).await?;
        self.forget_topic_settings(topic);
        self.topic(topic).await
    }

    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        let keys = self.existing_topic(topic).await?;
        let kind = self.topic_kind(topic).await?;
        self.delete_kind_state(topic, &kind).await?;
        self.store.delete_topic(&keys, topic).await?;
        if let TopicKind::List { key } = &kind {
            self.store.release_list_key(key, topic).await?;
        }
        self.forget_topic(topic);
        Ok(())
    }

    pub async fn create_subscription(
        &self,
        topic: &str,
        subscription: &str,
        start: GroupStart,
        settings: &SubscriptionSettings,
    ) -> Result<SubscriptionView> {
        let kind = self.kind_for(topic, Call::Subscriptions).await?;
        self.register_topic(topic).await?;
        let keys = TopicKeys::of_kind(topic, &kind);
        let created = match kind {
            TopicKind::List { .. } => {
                self.create_list_subscription(&keys, subscription, settings)
                    .await?
            }
            _ => {
                self.store
                    .ensure_subscription(&keys, subscription, start, settings)
                    .await?
            }
        };
        if !created {
            return Err(Error::AlreadyExists("subscription".into()));
        }
        self.subscription(topic, subscription).await
    }

    pub async fn subscription(&self, topic: &str, subscription: &str) -> Result<SubscriptionView> {
        self.existing_topic(topic).await?;
        let keys = TopicKeys::of_kind(topic, &self.topic_kind(topic).await?);
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
        self.kind_for(topic, Call::Subscriptions).await?;
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
        let kind = self.kind_for(topic, Call::Subscriptions).await?;
        self.existing_topic(topic).await?;
        let keys = TopicKeys::of_kind(topic, &kind);
        let deleted = match kind {
            TopicKind::List { .. } => self.delete_list_subscription(&keys, subscription).await?,
            _ => self.store.delete_subscription(&keys, subscription).await?,
        };
        if !deleted {
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
        let kind = self.kind_for(topic, Call::DeadLetters).await?;
        self.existing_topic(topic).await?;
        let keys = TopicKeys::of_kind(topic, &kind);
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
        self.kind_for(topic, Call::DeadLetters).await?;
        let keys = self.existing_topic(topic).await?;
        self.store
            .purge_dead_letters(&keys, subscription, ids)
            .await
    }

    pub async fn seek(&self, topic: &str, subscription: &str, target: &SeekTarget) -> Result<()> {
        self.seek_keeping(topic, subscription, target, false).await
    }

    /// Google Pub/Sub's seek to a time: messages published before `ms`
    /// count as acked, later ones as unacked, except, unless
    /// `replay_acked` (the subscription's `retain_acked_messages`), those
    /// already acked: redq's own retention must not bring them back.
    pub async fn seek_to_time(
        &self,
        topic: &str,
        subscription: &str,
        ms: u64,
        replay_acked: bool,
    ) -> Result<()> {
        self.seek_keeping(topic, subscription, &SeekTarget::Time(ms), !replay_acked)
            .await
    }

    async fn seek_keeping(
        &self,
        topic: &str,
        subscription: &str,
        target: &SeekTarget,
        keep_acked: bool,
    ) -> Result<()> {
        self.kind_for(topic, Call::Seek).await?;
        let keys = self.existing_topic(topic).await?;
        let last_skipped = match target {
            SeekTarget::Time(ms) => entry_id_before(&format!("{ms}-0")),
            SeekTarget::Message(id) => entry_id_before(id),
        };
        self.store
            .seek(&keys, subscription, &last_skipped, keep_acked)
            .await?;
        // The subscription's streams have entries to read again.
        self.wakeups.deliveries_returned(topic).await
    }

    pub(super) async fn existing_topic(&self, topic: &str) -> Result<TopicKeys> {
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
