//! Pub/Sub topics and subscriptions as the API stored them: every field a
//! client set is kept and echoed back, including those redq does not act on
//! (labels, KMS keys…). A subscription's record also says where its
//! messages are: the redq topic and subscription it maps to.

use super::PubSubApi;
use super::names::{Collection, ResourceName};
use super::ps;
use crate::error::{Error, Result};
use crate::model::PubSubRecord;
use prost::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The topic name Pub/Sub gives a subscription whose topic was deleted.
pub const DELETED_TOPIC: &str = "_deleted-topic_";

/// How long a replica trusts what it read of a subscription (for acks,
/// deadline changes and pulls) or that a topic exists (for publishes);
/// changes made through this replica apply at once.
const CACHE_TTL: Duration = Duration::from_secs(2);

/// A subscription with where its messages are.
#[derive(Debug, Clone)]
pub struct Subscribed {
    pub record: ps::Subscription,
    /// The redq topic and subscription; None once its topic was deleted or
    /// it was detached.
    pub redq: Option<(String, String)>,
}

impl Subscribed {
    pub fn new(name: &ResourceName, record: ps::Subscription) -> Self {
        let topic = ResourceName::parse("topic", &record.topic, Collection::Topics).ok();
        let redq = topic
            .filter(|_| !record.detached)
            .map(|topic| (topic.redq_name(), name.redq_name()));
        Self { record, redq }
    }

    /// The redq topic and subscription, or why there are none.
    pub fn location(&self) -> Result<(&str, &str)> {
        self.redq
            .as_ref()
            .map(|(t, s)| (t.as_str(), s.as_str()))
            .ok_or_else(|| Error::FailedPrecondition {
                field: "subscription".into(),
                reason: "the subscription is detached from its topic (deleted or detached)".into(),
            })
    }
}

/// Records recently read, by name, with when they were read.
pub struct RecordCache<T>(Arc<Mutex<HashMap<ResourceName, CacheEntry<T>>>>);

/// A record and when it was read.
type CacheEntry<T> = (Instant, Arc<T>);

impl<T> Clone for RecordCache<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for RecordCache<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T> RecordCache<T> {
    fn get(&self, name: &ResourceName) -> Option<Arc<T>> {
        let cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(name)
            .filter(|(read, _)| read.elapsed() < CACHE_TTL)
            .map(|(_, record)| record.clone())
    }

    fn put(&self, name: &ResourceName, subscribed: Arc<T>) {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() > 10_000 {
            cache.retain(|_, (read, _)| read.elapsed() < CACHE_TTL);
        }
        cache.insert(name.clone(), (Instant::now(), subscribed));
    }

    pub fn forget(&self, name: &ResourceName) {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache.remove(name);
    }
}

fn decode<T: Message + Default>(bytes: &[u8]) -> Result<T> {
    T::decode(bytes).map_err(|err| Error::Corrupt(format!("a Pub/Sub record: {err}")))
}

impl PubSubApi {
    pub(super) async fn topic_record(&self, name: &ResourceName) -> Result<Option<ps::Topic>> {
        let bytes = self
            .broker
            .pubsub_record(&name.project, PubSubRecord::Topic, &name.id)
            .await?;
        bytes.as_deref().map(decode).transpose()
    }

    /// The topic, or NOT_FOUND.
    pub(super) async fn existing_topic(&self, name: &ResourceName) -> Result<ps::Topic> {
        self.topic_record(name)
            .await?
            .ok_or_else(|| Error::NotFound(format!("topic {}", name.path(Collection::Topics))))
    }

    /// NOT_FOUND unless the topic exists, as read at most [`CACHE_TTL`] ago:
    /// asked on every Publish.
    pub(super) async fn check_topic(&self, name: &ResourceName) -> Result<()> {
        if self.topics.get(name).is_none() {
            let topic = self.existing_topic(name).await?;
            self.topics.put(name, Arc::new(topic));
        }
        Ok(())
    }

    /// The subscription, or NOT_FOUND.
    pub(super) async fn existing_subscription(
        &self,
        name: &ResourceName,
    ) -> Result<ps::Subscription> {
        let bytes = self
            .broker
            .pubsub_record(&name.project, PubSubRecord::Subscription, &name.id)
            .await?;
        match bytes.as_deref().map(decode).transpose()? {
            Some(record) => Ok(record),
            None => Err(Error::NotFound(format!(
                "subscription {}",
                name.path(Collection::Subscriptions)
            ))),
        }
    }

    /// The subscription with where its messages are, read at most
    /// [`CACHE_TTL`] ago.
    pub(super) async fn subscribed(&self, name: &ResourceName) -> Result<Arc<Subscribed>> {
        if let Some(subscribed) = self.subscriptions.get(name) {
            return Ok(subscribed);
        }
        let record = self.existing_subscription(name).await?;
        let subscribed = Arc::new(Subscribed::new(name, record));
        self.subscriptions.put(name, subscribed.clone());
        Ok(subscribed)
    }

    /// Stores a new record; false when one exists.
    pub(super) async fn create_record<T: Message>(
        &self,
        kind: PubSubRecord,
        name: &ResourceName,
        record: &T,
    ) -> Result<bool> {
        self.broker
            .create_pubsub_record(&name.project, kind, &name.id, &record.encode_to_vec())
            .await
    }

    pub(super) async fn replace_record<T: Message>(
        &self,
        kind: PubSubRecord,
        name: &ResourceName,
        record: &T,
    ) -> Result<()> {
        if kind == PubSubRecord::Subscription {
            self.subscriptions.forget(name);
        }
        self.broker
            .replace_pubsub_record(&name.project, kind, &name.id, &record.encode_to_vec())
            .await
    }

    pub(super) async fn delete_record(
        &self,
        kind: PubSubRecord,
        name: &ResourceName,
    ) -> Result<bool> {
        match kind {
            PubSubRecord::Subscription => self.subscriptions.forget(name),
            PubSubRecord::Topic => self.topics.forget(name),
        }
        self.broker
            .delete_pubsub_record(&name.project, kind, &name.id)
            .await
    }

    pub(super) async fn topic_records(&self, project: &str) -> Result<Vec<ps::Topic>> {
        let records = self
            .broker
            .pubsub_records(project, PubSubRecord::Topic)
            .await?;
        records.iter().map(|(_, bytes)| decode(bytes)).collect()
    }

    pub(super) async fn subscription_records(
        &self,
        project: &str,
    ) -> Result<Vec<ps::Subscription>> {
        let records = self
            .broker
            .pubsub_records(project, PubSubRecord::Subscription)
            .await?;
        records.iter().map(|(_, bytes)| decode(bytes)).collect()
    }
}

/// One page of `items` (sorted by name) after `page_token`, and the token
/// of the next page (empty on the last).
pub fn page<T>(
    items: Vec<T>,
    name: impl Fn(&T) -> &str,
    page_size: i32,
    page_token: &str,
) -> Result<(Vec<T>, String)> {
    const DEFAULT_PAGE: usize = 100;
    const MAX_PAGE: usize = 1000;
    let size = match page_size {
        n if n < 0 => return Err(Error::invalid("page_size", "must not be negative")),
        0 => DEFAULT_PAGE,
        n => (n as usize).min(MAX_PAGE),
    };
    let mut rest: Vec<T> = items
        .into_iter()
        .filter(|item| page_token.is_empty() || name(item) > page_token)
        .collect();
    let next = if rest.len() > size {
        rest.truncate(size);
        rest.last()
            .map(|item| name(item).to_owned())
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok((rest, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_their_token() {
        let names: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
        let (first, next) = page(names.clone(), |n| n, 2, "").unwrap();
        assert_eq!(first, ["n0", "n1"]);
        assert_eq!(next, "n1");
        let (second, next) = page(names.clone(), |n| n, 2, &next).unwrap();
        assert_eq!(second, ["n2", "n3"]);
        let (last, next) = page(names.clone(), |n| n, 2, &next).unwrap();
        assert_eq!(last, ["n4"]);
        assert_eq!(next, "");
        assert!(page(names, |n| n, -1, "").is_err());
    }
}
