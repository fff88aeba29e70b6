//! Dead-letter topics. redq moves a message that used up its delivery
//! attempts to the subscription's dead letters (in Redis, with the same
//! script that ends its last lease); for a Pub/Sub subscription with a
//! dead-letter policy, they are then published to its dead-letter topic with
//! the attributes Google's service adds, and removed. A replica forwards
//! after the calls that can dead-letter (nacks, pulls) and while a
//! StreamingPull is open (expired leases are settled by its fetches).
//!
//! At least once, as in Google's service ("the same message might be dead
//! lettered multiple times"): a crash between the publish and the removal,
//! or two replicas forwarding at the same moment, publishes a copy again.

use super::PubSubApi;
use super::names::{Collection, ResourceName};
use super::records::Subscribed;
use crate::error::Result;
use crate::model::{DeadLetter, NewMessage, PublishBatch};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

/// Dead letters forwarded per call.
const FORWARD_PAGE: u32 = 100;
/// How often an open StreamingPull forwards its subscription's dead letters.
pub const FORWARD_INTERVAL: Duration = Duration::from_secs(1);

/// Subscriptions this replica is forwarding now: one forwarder each.
#[derive(Clone, Default)]
pub struct Forwarding(Arc<Mutex<HashSet<ResourceName>>>);

impl Forwarding {
    fn start(&self, name: &ResourceName) -> bool {
        let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
        names.insert(name.clone())
    }

    fn finish(&self, name: &ResourceName) {
        let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
        names.remove(name);
    }
}

impl PubSubApi {
    /// Forwards the subscription's dead letters in the background, unless
    /// it has no dead-letter policy or this replica is at it already.
    pub(super) fn forward_dead_letters_soon(
        &self,
        name: &ResourceName,
        subscribed: Arc<Subscribed>,
    ) {
        if subscribed.record.dead_letter_policy.is_none() || !self.forwarding.start(name) {
            return;
        }
        let (api, name) = (self.clone(), name.clone());
        tokio::spawn(async move {
            if let Err(err) = api.forward_dead_letters(&name, &subscribed).await {
                tracing::warn!(error = ?err, subscription = %name.id, "dead letters not forwarded");
            }
            api.forwarding.finish(&name);
        });
    }

    async fn forward_dead_letters(
        &self,
        name: &ResourceName,
        subscribed: &Subscribed,
    ) -> Result<()> {
        let (Some(policy), Ok((topic, subscription))) =
            (&subscribed.record.dead_letter_policy, subscribed.location())
        else {
            return Ok(());
        };
        let target = ResourceName::parse(
            "dead_letter_policy.dead_letter_topic",
            &policy.dead_letter_topic,
            Collection::Topics,
        )?;
        loop {
            let page = self
                .broker
                .dead_letters(topic, subscription, None, FORWARD_PAGE)
                .await?;
            if page.dead_letters.is_empty() {
                return Ok(());
            }
            // A dead-letter topic deleted meanwhile: they stay where redq's
            // admin API shows them.
            if self.topic_record(&target).await?.is_none() {
                return Ok(());
            }
            let ids: Vec<String> = page.dead_letters.iter().map(|d| d.id.clone()).collect();
            let messages = page
                .dead_letters
                .into_iter()
                .map(|dead| forwarded(dead, name))
                .collect();
            let batch = PublishBatch {
                dedupe_id: String::new(),
                messages,
            };
            self.broker.publish(&target.redq_name(), batch).await?;
            self.broker
                .purge_dead_letters(topic, subscription, &ids)
                .await?;
            if (ids.len() as u32) < FORWARD_PAGE {
                return Ok(());
            }
        }
    }
}

/// A dead letter as Google's service republishes it: the message with the
/// attributes that say where it came from.
fn forwarded(dead: DeadLetter, source: &ResourceName) -> NewMessage {
    let publish_time = UNIX_EPOCH + Duration::from_millis(dead.entry.publish_time_ms());
    let mut attributes = dead.entry.attributes;
    attributes.insert(
        "CloudPubSubDeadLetterSourceDeliveryCount".into(),
        dead.attempts.to_string(),
    );
    attributes.insert(
        "CloudPubSubDeadLetterSourceSubscription".into(),
        source.id.clone(),
    );
    attributes.insert(
        "CloudPubSubDeadLetterSourceSubscriptionProject".into(),
        source.project.clone(),
    );
    attributes.insert(
        "CloudPubSubDeadLetterSourceTopicPublishTime".into(),
        humantime::format_rfc3339_millis(publish_time).to_string(),
    );
    NewMessage {
        payload: dead.entry.payload,
        attributes,
        ordering_key: dead.entry.ordering_key,
        ..Default::default()
    }
}
