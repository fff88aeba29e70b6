//! `google.pubsub.v1.Publisher`: topics and publishing.

use super::names::{Collection, ResourceName, parse_project};
use super::records::{DELETED_TOPIC, page};
use super::server::publisher_server::Publisher;
use super::{Empty, PubSubApi, convert, ps};
use crate::auth::{Action, Resource};
use crate::error::Error;
use crate::model::{PubSubRecord, PublishBatch, TopicKind, TopicSettings};
use std::time::Instant;
use tonic::{Request, Response, Status};

impl PubSubApi {
    /// Removes the subscriptions of a deleted topic from it: Pub/Sub keeps
    /// them, attached to `_deleted-topic_`, until they are deleted.
    async fn detach_subscriptions_of(&self, topic: &ResourceName) -> Result<(), Error> {
        let path = topic.path(Collection::Topics);
        for mut record in self.subscription_records(&topic.project).await? {
            if record.topic != path {
                continue;
            }
            let name =
                ResourceName::parse("subscription", &record.name, Collection::Subscriptions)?;
            record.topic = DELETED_TOPIC.to_owned();
            self.replace_record(PubSubRecord::Subscription, &name, &record)
                .await?;
        }
        Ok(())
    }
}

/// Applies the fields an UpdateTopic's mask names.
fn update_topic(current: &mut ps::Topic, given: ps::Topic, paths: &[String]) -> Result<(), Error> {
    if paths.is_empty() {
        return Err(Error::invalid(
            "update_mask",
            "must name at least one field",
        ));
    }
    for path in paths {
        match path.as_str() {
            "labels" => current.labels = given.labels.clone(),
            "message_storage_policy" => {
                current.message_storage_policy = given.message_storage_policy.clone()
            }
            "kms_key_name" => current.kms_key_name = given.kms_key_name.clone(),
            "schema_settings" => current.schema_settings = given.schema_settings.clone(),
            "message_retention_duration" => {
                current.message_retention_duration = given.message_retention_duration
            }
            "ingestion_data_source_settings" => {
                current.ingestion_data_source_settings =
                    given.ingestion_data_source_settings.clone()
            }
            "message_transforms" => current.message_transforms = given.message_transforms.clone(),
            other => {
                return Err(Error::invalid(
                    "update_mask",
                    format!("{other:?} is not a field of Topic that can be updated"),
                ));
            }
        }
    }
    Ok(())
}

#[tonic::async_trait]
impl Publisher for PubSubApi {
    async fn create_topic(
        &self,
        request: Request<ps::Topic>,
    ) -> Result<Response<ps::Topic>, Status> {
        let name = ResourceName::parse("name", &request.get_ref().name, Collection::Topics)?;
        let redq = name.redq_name();
        self.authorize(&request, Action::Manage, Resource::topic(&redq))?;
        let mut topic = request.into_inner();
        topic.state = ps::topic::State::Active as i32;
        if !self
            .create_record(PubSubRecord::Topic, &name, &topic)
            .await?
        {
            return Err(Error::AlreadyExists(format!("topic {}", topic.name)).into());
        }
        // The redq topic may exist already: published to through redq.v1.
        match self
            .broker
            .create_topic(&redq, &TopicSettings::default(), TopicKind::Stream)
            .await
        {
            Ok(_) | Err(Error::AlreadyExists(_)) => {}
            Err(err) => {
                let _ = self.delete_record(PubSubRecord::Topic, &name).await;
                return Err(err.into());
            }
        }
        Ok(Response::new(topic))
    }

    async fn update_topic(
        &self,
        request: Request<ps::UpdateTopicRequest>,
    ) -> Result<Response<ps::Topic>, Status> {
        let given = request.get_ref().topic.clone().unwrap_or_default();
        let name = ResourceName::parse("topic.name", &given.name, Collection::Topics)?;
        self.authorize(&request, Action::Manage, Resource::topic(&name.redq_name()))?;
        let paths = request
            .into_inner()
            .update_mask
            .map(|mask| mask.paths)
            .unwrap_or_default();
        let mut topic = self.existing_topic(&name).await?;
        update_topic(&mut topic, given, &paths)?;
        self.replace_record(PubSubRecord::Topic, &name, &topic)
            .await?;
        Ok(Response::new(topic))
    }

    async fn publish(
        &self,
        request: Request<ps::PublishRequest>,
    ) -> Result<Response<ps::PublishResponse>, Status> {
        let started = Instant::now();
        let name = ResourceName::parse("topic", &request.get_ref().topic, Collection::Topics)?;
        let redq = name.redq_name();
        let caller = self.authorize(&request, Action::Publish, Resource::topic(&redq))?;
        let ps::PublishRequest { messages, .. } = request.into_inner();
        self.authorizer.take_publish_rate(&caller, messages.len())?;
        let messages = convert::new_messages(messages)?;
        self.check_topic(&name).await?;
        let batch = PublishBatch {
            dedupe_id: String::new(),
            messages,
        };
        // With the other Publish calls of the topic that arrive meanwhile, in
        // one Redis call (clients keep many in flight: Node 1,000 by default).
        let published = match self.broker.publish_batched(&redq, batch).await {
            Ok(published) => published,
            Err(_dropped) => Err(Error::ShuttingDown),
        };
        self.broker
            .metrics()
            .publish_duration("google.pubsub.v1.Publish", started.elapsed());
        Ok(Response::new(ps::PublishResponse {
            message_ids: published?.into_iter().map(|p| p.message_id).collect(),
        }))
    }

    async fn get_topic(
        &self,
        request: Request<ps::GetTopicRequest>,
    ) -> Result<Response<ps::Topic>, Status> {
        let name = ResourceName::parse("topic", &request.get_ref().topic, Collection::Topics)?;
        self.authorize(&request, Action::View, Resource::topic(&name.redq_name()))?;
        Ok(Response::new(self.existing_topic(&name).await?))
    }

    async fn list_topics(
        &self,
        request: Request<ps::ListTopicsRequest>,
    ) -> Result<Response<ps::ListTopicsResponse>, Status> {
        let caller = self.authorizer.authenticate(&request)?;
        let ps::ListTopicsRequest {
            project,
            page_size,
            page_token,
        } = request.into_inner();
        let project = parse_project("project", &project)?;
        let topics = self.topic_records(&project).await?;
        let visible = topics
            .into_iter()
            .filter(|topic| {
                ResourceName::parse("name", &topic.name, Collection::Topics).is_ok_and(|name| {
                    self.authorizer
                        .may(&caller, Action::View, Resource::topic(&name.redq_name()))
                })
            })
            .collect();
        let (topics, next_page_token) = page(visible, |t| &t.name, page_size, &page_token)?;
        Ok(Response::new(ps::ListTopicsResponse {
            topics,
            next_page_token,
        }))
    }

    async fn list_topic_subscriptions(
        &self,
        request: Request<ps::ListTopicSubscriptionsRequest>,
    ) -> Result<Response<ps::ListTopicSubscriptionsResponse>, Status> {
        let name = ResourceName::parse("topic", &request.get_ref().topic, Collection::Topics)?;
        self.authorize(&request, Action::View, Resource::topic(&name.redq_name()))?;
        let ps::ListTopicSubscriptionsRequest {
            topic,
            page_size,
            page_token,
        } = request.into_inner();
        self.existing_topic(&name).await?;
        // Subscriptions of any project may be attached to the topic; those
        // of its own project are the ones redq can list.
        let names: Vec<String> = self
            .subscription_records(&name.project)
            .await?
            .into_iter()
            .filter(|s| s.topic == topic)
            .map(|s| s.name)
            .collect();
        let (subscriptions, next_page_token) = page(names, |n| n, page_size, &page_token)?;
        Ok(Response::new(ps::ListTopicSubscriptionsResponse {
            subscriptions,
            next_page_token,
        }))
    }

    async fn delete_topic(
        &self,
        request: Request<ps::DeleteTopicRequest>,
    ) -> Result<Response<Empty>, Status> {
        let name = ResourceName::parse("topic", &request.get_ref().topic, Collection::Topics)?;
        let redq = name.redq_name();
        self.authorize(&request, Action::Manage, Resource::topic(&redq))?;
        if !self.delete_record(PubSubRecord::Topic, &name).await? {
            return Err(Error::NotFound(format!("topic {}", name.path(Collection::Topics))).into());
        }
        self.detach_subscriptions_of(&name).await?;
        match self.broker.delete_topic(&redq).await {
            Ok(()) | Err(Error::NotFound(_)) => Ok(Response::new(())),
            Err(err) => Err(err.into()),
        }
    }

    async fn detach_subscription(
        &self,
        request: Request<ps::DetachSubscriptionRequest>,
    ) -> Result<Response<ps::DetachSubscriptionResponse>, Status> {
        let name = ResourceName::parse(
            "subscription",
            &request.get_ref().subscription,
            Collection::Subscriptions,
        )?;
        let subscribed = self.subscribed(&name).await?;
        if let Some((topic, subscription)) = &subscribed.redq {
            self.authorize(
                &request,
                Action::Manage,
                Resource::subscription(topic, subscription),
            )?;
            match self.broker.delete_subscription(topic, subscription).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let mut record = subscribed.record.clone();
        record.detached = true;
        self.replace_record(PubSubRecord::Subscription, &name, &record)
            .await?;
        Ok(Response::new(ps::DetachSubscriptionResponse {}))
    }
}
