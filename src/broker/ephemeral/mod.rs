//! EPHEMERAL topics: live fan-out on Redis Pub/Sub. A stream gets what is
//! published while it is open, at most once, with no ack; nothing is kept
//! (scheduled messages wait in the schedule, and are published when due).

mod hub;
mod listener;

pub use hub::Hub;
use hub::Route;
use listener::{Listener, Wants};

use super::{Broker, SubscribeOptions, Subscription, unique_consumer_name};
use crate::error::{Error, Result};
use crate::model::{PublishBatch, Published};
use crate::store::TopicKeys;
use crate::store::keys::EVERY_EPHEMERAL_CHANNEL;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

impl Broker {
    /// Publishes to an EPHEMERAL topic's channel, one round trip for the
    /// request; dedupe ids work as on STREAM topics, within `dedupe_window`.
    pub(super) async fn publish_ephemeral(
        &self,
        topic: &str,
        request: PublishBatch,
        dedupe_window: Duration,
    ) -> Result<Vec<Published>> {
        self.store
            .publish_ephemeral(&TopicKeys::new(topic), &[request], dedupe_window)
            .await?
            .pop()
            .ok_or_else(|| Error::Corrupt("publish reply without a result".into()))?
    }

    /// Opens a stream on an EPHEMERAL topic, or on the EPHEMERAL topics a
    /// pattern matches. Returns once the replica's Redis subscription is in
    /// place, so that the caller's response headers promise every later message.
    pub(super) async fn subscribe_ephemeral(
        &self,
        options: SubscribeOptions,
    ) -> Result<Subscription> {
        let control = self.flow_control(&options, &unique_consumer_name(&options.consumer));
        let (route, wants) = match options.pattern {
            Some(pattern) => {
                let route = if pattern.is_literal() {
                    Route::Channel(TopicKeys::new(&pattern.literal_prefix()).channel())
                } else {
                    Route::Pattern(EVERY_EPHEMERAL_CHANNEL.to_owned())
                };
                let allowed = options.allowed_topics.unwrap_or_default();
                (route, Wants::Matching { pattern, allowed })
            }
            None => (
                Route::Channel(TopicKeys::new(&options.topic).channel()),
                Wants::Everything,
            ),
        };
        let listener = Arc::new(Listener::new(wants, control.clone(), self.metrics.clone()));
        let joined = self.ephemeral.join(route, listener.clone()).await?;
        // One batch in flight: what the client does not take waits in the
        // listener, within the stream's limits.
        let (sender, receiver) = mpsc::channel(1);
        tokio::spawn(async move {
            let _joined = joined;
            listener.run(sender).await;
        });
        Ok(Subscription {
            deliveries: receiver,
            control,
        })
    }
}
