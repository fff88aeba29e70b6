//! The domain: publishing to topics, delivering to subscriptions, and the
//! lease operations (ack, nack, extend) that any replica can serve.

pub mod ack_id;
mod delivery;
pub mod wakeups;

pub use delivery::{Delivery, SubscribeOptions};

use crate::error::{Error, Result};
use crate::store::leases::Lease;
use crate::store::stream::NewEntry;
use crate::store::{Store, TopicKeys};
use delivery::DeliveryLoop;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wakeups::Wakeups;

/// Consumers that hold nothing and were idle this long are removed from
/// their group when a stream of the subscription opens.
const PRUNE_IDLE_CONSUMERS: Duration = Duration::from_secs(600);

/// Responses buffered per Subscribe stream before the loop waits for the client.
const STREAM_BUFFER: usize = 4;

/// Cheap to clone; every clone shares the same Redis pool and wake-ups.
#[derive(Clone)]
pub struct Broker {
    store: Store,
    wakeups: Wakeups,
    known_topics: Arc<Mutex<HashSet<String>>>,
    shutdown: CancellationToken,
}

impl Broker {
    pub fn new(store: Store, shutdown: CancellationToken) -> Self {
        Self {
            wakeups: Wakeups::new(store.clone()),
            store,
            known_topics: Arc::default(),
            shutdown,
        }
    }

    pub fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    /// Appends messages to `topic`, creating it on first use; ids in order.
    #[tracing::instrument(skip_all, fields(topic))]
    pub async fn publish(&self, topic: &str, entries: Vec<NewEntry>) -> Result<Vec<String>> {
        self.register_topic(topic).await?;
        self.store.append(&TopicKeys::new(topic), &entries).await
    }

    /// Opens a stream of deliveries for a new consumer of the subscription,
    /// creating the subscription on first use.
    #[tracing::instrument(skip_all, fields(topic = %options.topic, subscription = %options.subscription))]
    pub async fn subscribe(
        &self,
        options: SubscribeOptions,
    ) -> Result<mpsc::Receiver<Result<Vec<Delivery>>>> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        let keys = TopicKeys::new(&options.topic);
        self.register_topic(&options.topic).await?;
        self.store
            .ensure_group(&keys, &options.subscription, options.start)
            .await?;
        if let Err(err) = self
            .store
            .prune_consumers(&keys, &options.subscription, PRUNE_IDLE_CONSUMERS)
            .await
        {
            tracing::debug!(error = ?err, "could not prune idle consumers");
        }
        let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
        let consumer = unique_consumer_name(&options.consumer);
        tokio::spawn(
            DeliveryLoop {
                broker: self.clone(),
                options,
                consumer,
                sender,
            }
            .run(),
        );
        Ok(receiver)
    }

    /// Acknowledges deliveries. Unknown or already acked ones are ignored.
    #[tracing::instrument(skip_all, fields(topic, subscription))]
    pub async fn ack(&self, topic: &str, subscription: &str, leases: &[Lease]) -> Result<()> {
        let ids: Vec<&str> = leases.iter().map(|l| l.entry_id.as_str()).collect();
        self.store
            .ack(&TopicKeys::new(topic), subscription, &ids)
            .await?;
        self.wakeups
            .room_freed(leases.iter().map(|l| l.consumer.as_str()))
            .await
    }

    /// Hands deliveries back for immediate redelivery.
    pub async fn nack(&self, topic: &str, subscription: &str, leases: &[Lease]) -> Result<()> {
        self.modify_ack_deadline(topic, subscription, leases, Duration::ZERO)
            .await
    }

    /// Sets the leases to end `deadline` from now (zero: redeliver now).
    /// Leases the caller no longer holds are reported as [`Error::LeaseLost`];
    /// the others are changed all the same.
    #[tracing::instrument(skip_all, fields(topic, subscription))]
    pub async fn modify_ack_deadline(
        &self,
        topic: &str,
        subscription: &str,
        leases: &[Lease],
        deadline: Duration,
    ) -> Result<()> {
        let held = self
            .store
            .extend(&TopicKeys::new(topic), subscription, leases, deadline)
            .await?;
        if deadline.is_zero() && held.iter().any(|&h| h) {
            self.wakeups.deliveries_returned(topic).await?;
        }
        let lost: Vec<String> = leases
            .iter()
            .zip(&held)
            .filter(|(_, held)| !**held)
            .map(|(lease, _)| ack_id::encode(lease))
            .collect();
        if lost.is_empty() {
            Ok(())
        } else {
            Err(Error::LeaseLost(lost))
        }
    }

    async fn register_topic(&self, topic: &str) -> Result<()> {
        if self
            .known_topics
            .lock()
            .expect("topics lock")
            .contains(topic)
        {
            return Ok(());
        }
        self.store.register_topic(topic).await?;
        self.known_topics
            .lock()
            .expect("topics lock")
            .insert(topic.to_owned());
        Ok(())
    }
}

/// Each stream is its own consumer in the group, so that leases (and the
/// outstanding limit) belong to exactly one stream.
fn unique_consumer_name(requested: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let prefix = if requested.is_empty() {
        "consumer"
    } else {
        requested
    };
    format!("{prefix}-{}", &suffix[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_names_are_unique_and_keep_the_requested_name() {
        let a = unique_consumer_name("worker");
        let b = unique_consumer_name("worker");
        assert_ne!(a, b);
        assert!(a.starts_with("worker-"));
        assert!(unique_consumer_name("").starts_with("consumer-"));
    }
}
