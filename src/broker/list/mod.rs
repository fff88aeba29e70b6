//! LIST topics: reliable consumers on an existing Redis list that legacy
//! producers `LPUSH` to, without touching them.
//!
//! An element leaves the list only when a consumer takes it: the fetch
//! moves it, in the same script, into the topic's own stream, from where a
//! LIST topic is served as a STREAM topic is (leases, redelivery with a
//! higher `delivery_attempt`, retry backoff, dead letters after the last
//! attempt, any number of streams on any replicas). Its stream holds only
//! what redq took and still holds: an acked or dead-lettered entry is
//! deleted from it. So the list's length stays the lag, two equal elements
//! are two entries acked apart, and an element a dead replica held is
//! redelivered, never lost. [`waiter`] keeps an idle topic from polling.
//!
//! A list has no consumer groups, so a LIST topic has one subscription.

mod waiter;

pub use waiter::{ListWaiters, WaiterHandle};

use super::{Broker, SubscribeOptions, Subscription};
use crate::error::{Error, Result};
use crate::model::{GroupStart, PublishBatch, Published, SubscriptionSettings, TopicKind};
use crate::store::TopicKeys;

impl Broker {
    /// Publishes to a LIST topic: pushes the payloads onto its list in
    /// request order, the first popped first (and schedules those due
    /// later). Returns `l<hex>` ids (`s<hex>` for scheduled messages): a
    /// list element carries no id.
    pub(super) async fn publish_list(
        &self,
        topic: &str,
        list_key: &str,
        request: PublishBatch,
    ) -> Result<Vec<Published>> {
        bytes_only(&request)?;
        let keys = list_topic_keys(topic, list_key);
        self.store.push_elements(&keys, &request.messages).await
    }

    /// Before a topic is deleted: what redq holds of a LIST topic's list
    /// goes back onto the list, which itself is never deleted.
    pub(super) async fn delete_kind_state(&self, topic: &str, kind: &TopicKind) -> Result<()> {
        if let TopicKind::List { .. } = kind {
            let keys = TopicKeys::of_kind(topic, kind);
            let subscriptions = self.store.subscriptions(&keys).await?;
            let (held, dead) = self
                .store
                .return_held_elements(&keys, &subscriptions)
                .await?;
            tracing::info!(topic, held, dead, "gave the list back what redq held");
            // Their consumer groups went with the stream; their other keys now.
            for subscription in &subscriptions {
                self.store.delete_subscription(&keys, subscription).await?;
            }
        }
        Ok(())
    }

    /// Opens a stream on a LIST topic. `start` does not apply: the list's
    /// elements are delivered, whatever the subscription's start.
    pub(super) async fn subscribe_list(
        &self,
        options: SubscribeOptions,
        list_key: &str,
    ) -> Result<Subscription> {
        let keys = list_topic_keys(&options.topic, list_key);
        self.claim_list_subscription(&keys, &options.subscription)
            .await?;
        let options = SubscribeOptions {
            start: GroupStart::Earliest,
            ..options
        };
        let waiter = self.list_waiters.join(&self.store, &self.wakeups, &keys);
        self.subscribe_stream(options, keys, Some(waiter)).await
    }

    /// Makes `subscription` the LIST topic's one subscription, unless it
    /// has another; ordering does not apply. The first name used (by
    /// Subscribe or CreateSubscription) is the topic's.
    pub(super) async fn claim_list_subscription(
        &self,
        keys: &TopicKeys,
        subscription: &str,
    ) -> Result<()> {
        match self
            .store
            .claim_list_subscription(keys, subscription)
            .await?
        {
            None => Ok(()),
            Some(owner) => Err(Error::FailedPrecondition {
                field: "subscription".into(),
                reason: format!(
                    "a LIST topic has one subscription, and this one's is {owner:?} (use a STREAM topic for fan-out)"
                ),
            }),
        }
    }

    /// CreateSubscription on a LIST topic: its one subscription, unordered,
    /// starting at the list (`start` does not apply).
    pub(super) async fn create_list_subscription(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        settings: &SubscriptionSettings,
    ) -> Result<bool> {
        if settings.message_ordering {
            return Err(super::not_for_kind(
                "settings.enable_message_ordering",
                "Message ordering",
                &TopicKind::List { key: String::new() },
            ));
        }
        self.claim_list_subscription(keys, subscription).await?;
        self.store
            .ensure_subscription(keys, subscription, GroupStart::Earliest, settings)
            .await
    }

    /// DeleteSubscription on a LIST topic: what the subscription holds goes
    /// back onto the list first, and the topic may take another name.
    pub(super) async fn delete_list_subscription(
        &self,
        keys: &TopicKeys,
        subscription: &str,
    ) -> Result<bool> {
        if !self
            .store
            .subscriptions(keys)
            .await?
            .iter()
            .any(|name| name == subscription)
        {
            return Ok(false);
        }
        let subscriptions = [subscription.to_owned()];
        self.store
            .return_held_elements(keys, &subscriptions)
            .await?;
        // Its consumer group went with the stream; its other keys now.
        self.store.delete_subscription(keys, subscription).await?;
        self.store
            .release_list_subscription(keys, subscription)
            .await?;
        Ok(true)
    }
}

fn list_topic_keys(topic: &str, list_key: &str) -> TopicKeys {
    let kind = TopicKind::List {
        key: list_key.to_owned(),
    };
    TopicKeys::of_kind(topic, &kind)
}

/// A list element is bytes only: attributes, ordering keys and dedupe ids
/// are refused, naming the field.
fn bytes_only(request: &PublishBatch) -> Result<()> {
    let refuse = |field: String| {
        Error::invalid(
            field,
            "does not apply to LIST topics (a list element is bytes only)",
        )
    };
    if !request.dedupe_id.is_empty() {
        return Err(refuse("dedupe_id".into()));
    }
    for (i, message) in request.messages.iter().enumerate() {
        let given = [
            ("attributes", !message.attributes.is_empty()),
            ("ordering_key", !message.ordering_key.is_empty()),
            ("dedupe_id", !message.dedupe_id.is_empty()),
        ];
        if let Some((field, _)) = given.into_iter().find(|(_, given)| *given) {
            return Err(refuse(format!("messages[{i}].{field}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewMessage;

    #[test]
    fn a_list_element_is_bytes_only_and_the_refusal_names_the_field() {
        let plain = NewMessage {
            payload: bytes::Bytes::from_static(b"x"),
            ..NewMessage::default()
        };
        let keyed = NewMessage {
            ordering_key: "k".into(),
            ..plain.clone()
        };
        let request = |messages: Vec<NewMessage>, dedupe_id: &str| PublishBatch {
            dedupe_id: dedupe_id.into(),
            messages,
        };
        assert!(bytes_only(&request(vec![plain.clone(), plain.clone()], "")).is_ok());
        let field = |result: Result<()>| match result {
            Err(Error::InvalidArgument { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(bytes_only(&request(vec![plain.clone(), keyed], ""))),
            "messages[1].ordering_key"
        );
        assert_eq!(
            field(bytes_only(&request(vec![plain], "once"))),
            "dedupe_id"
        );
    }
}
