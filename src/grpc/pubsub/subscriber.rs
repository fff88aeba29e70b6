//! `google.pubsub.v1.Subscriber`: subscriptions, Pull, acks and deadline
//! changes; StreamingPull is in `streaming_pull.rs`.

use super::names::{Collection, ResourceName, parse_project};
use super::records::{Subscribed, page};
use super::server::subscriber_server::Subscriber;
use super::streaming_pull::{self, PullStream};
use super::{Empty, PubSubApi, convert, ps};
use crate::auth::{Action, Resource};
use crate::broker::ack_id::{self, AckId};
use crate::broker::{Carry, SubscribeOptions};
use crate::error::Error;
use crate::model::{Filter, GroupStart, PubSubRecord, SubscriptionUpdate};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_types::{ErrorDetails, StatusExt};

/// How long a Pull waits for messages when its caller sets no deadline.
const DEFAULT_PULL_WAIT: Duration = Duration::from_secs(30);
/// A Pull with a deadline answers this much before it, at least.
const PULL_MARGIN: Duration = Duration::from_millis(500);

impl PubSubApi {
    /// The subscription named in `field` of a request, once the caller may
    /// do `action` on it.
    async fn admit_subscription<T>(
        &self,
        request: &Request<T>,
        field: &str,
        name: &str,
        action: Action,
    ) -> Result<(ResourceName, Arc<Subscribed>), Status> {
        let name = ResourceName::parse(field, name, Collection::Subscriptions)?;
        let subscribed = self.subscribed(&name).await?;
        let redq_name = name.redq_name();
        let (topic, subscription) = match &subscribed.redq {
            Some((topic, subscription)) => (topic.as_str(), subscription.as_str()),
            None => ("", redq_name.as_str()),
        };
        self.authorize(request, action, Resource::subscription(topic, subscription))?;
        Ok((name, subscribed))
    }

    /// Creates the redq subscription of a new Pub/Sub one, at the topic's
    /// end; one left from an earlier subscription of that name is replaced.
    async fn create_redq_subscription(
        &self,
        (topic, subscription): (&str, &str),
        record: &ps::Subscription,
    ) -> Result<(), Error> {
        let settings = convert::subscription_settings(record);
        let create = || {
            self.broker
                .create_subscription(topic, subscription, GroupStart::Latest, &settings)
        };
        match create().await {
            Ok(_) => Ok(()),
            Err(Error::AlreadyExists(_)) => {
                self.broker.delete_subscription(topic, subscription).await?;
                create().await.map(|_| ())
            }
            Err(err) => Err(err),
        }
    }
}

/// Ack ids as redq issued them: a malformed one is INVALID_ARGUMENT, or,
/// with exactly-once delivery, one of the failed ids.
fn parse_ack_ids(ids: &[String], exactly_once: bool) -> Result<(Vec<AckId>, Vec<String>), Error> {
    if ids.is_empty() {
        return Err(Error::invalid("ack_ids", "must not be empty"));
    }
    let (mut parsed, mut malformed) = (Vec::with_capacity(ids.len()), Vec::new());
    for (i, id) in ids.iter().enumerate() {
        match ack_id::parse(id) {
            Some(ack_id) => parsed.push(ack_id),
            None if exactly_once => malformed.push(id.clone()),
            None => {
                return Err(Error::invalid(
                    format!("ack_ids[{i}]"),
                    "not an ack id redq issued",
                ));
            }
        }
    }
    Ok((parsed, malformed))
}

/// The ack ids a lease call found lost; other errors stay errors.
fn lost_ids(result: Result<(), Error>) -> Result<Vec<String>, Error> {
    match result {
        Ok(()) => Ok(Vec::new()),
        Err(Error::LeaseLost(lost)) => Ok(lost),
        Err(err) => Err(err),
    }
}

/// The outcome of an Acknowledge or ModifyAckDeadline whose `failed` ack
/// ids were malformed or no longer current. Without exactly-once delivery
/// that is not an error (Pub/Sub's at-least-once contract); with it, it is
/// INVALID_ARGUMENT with the `ErrorInfo` the official clients read: each
/// failed ack id mapped to `PERMANENT_FAILURE_INVALID_ACK_ID`.
fn ack_outcome(failed: Vec<String>, exactly_once: bool) -> Result<Response<Empty>, Status> {
    if failed.is_empty() || !exactly_once {
        return Ok(Response::new(()));
    }
    let metadata: HashMap<String, String> = failed
        .into_iter()
        .map(|id| (id, "PERMANENT_FAILURE_INVALID_ACK_ID".to_owned()))
        .collect();
    Err(Status::with_error_details(
        Code::InvalidArgument,
        "some ack ids failed: malformed, expired, acked or redelivered since (exactly-once delivery is on)",
        ErrorDetails::with_error_info(
            "EXACTLY_ONCE_ACKID_FAILURE",
            "pubsub.googleapis.com",
            metadata,
        ),
    ))
}

/// Refuses what redq does not do (push and export subscriptions) and
/// malformed filters.
fn check_supported(record: &ps::Subscription) -> Result<(), Status> {
    if record
        .push_config
        .as_ref()
        .is_some_and(|push| !push.push_endpoint.is_empty())
    {
        return Err(Status::unimplemented(
            "push subscriptions are not supported",
        ));
    }
    if record.bigquery_config.is_some()
        || record.cloud_storage_config.is_some()
        || record.bigtable_config.is_some()
    {
        return Err(Status::unimplemented(
            "BigQuery, Cloud Storage and Bigtable subscriptions are not supported",
        ));
    }
    Filter::parse(&record.filter).map_err(|reason| Error::invalid("filter", reason))?;
    Ok(())
}

/// Applies the fields an UpdateSubscription's mask names.
fn update_subscription(
    current: &mut ps::Subscription,
    given: ps::Subscription,
    paths: &[String],
) -> Result<(), Error> {
    if paths.is_empty() {
        return Err(Error::invalid(
            "update_mask",
            "must name at least one field",
        ));
    }
    for path in paths {
        match path.as_str() {
            "ack_deadline_seconds" => current.ack_deadline_seconds = given.ack_deadline_seconds,
            "retry_policy" => current.retry_policy = given.retry_policy,
            "dead_letter_policy" => current.dead_letter_policy = given.dead_letter_policy.clone(),
            "labels" => current.labels = given.labels.clone(),
            "push_config" => current.push_config = given.push_config.clone(),
            "expiration_policy" => current.expiration_policy = given.expiration_policy,
            "message_retention_duration" => {
                current.message_retention_duration = given.message_retention_duration
            }
            "retain_acked_messages" => current.retain_acked_messages = given.retain_acked_messages,
            "enable_exactly_once_delivery" => {
                current.enable_exactly_once_delivery = given.enable_exactly_once_delivery
            }
            "message_transforms" => current.message_transforms = given.message_transforms.clone(),
            other => {
                return Err(Error::invalid(
                    "update_mask",
                    format!("{other:?} is not a field of Subscription that can be updated"),
                ));
            }
        }
    }
    Ok(())
}

/// How long a Pull may wait: until just before the caller's deadline
/// (`grpc-timeout`), else [`DEFAULT_PULL_WAIT`].
fn pull_wait<T>(request: &Request<T>, return_immediately: bool) -> Duration {
    if return_immediately {
        return Duration::from_millis(50);
    }
    let timeout = request
        .metadata()
        .get("grpc-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(parse_grpc_timeout);
    match timeout {
        Some(timeout) => timeout
            .saturating_sub(PULL_MARGIN.max(timeout / 10))
            .min(Duration::from_secs(600)),
        None => DEFAULT_PULL_WAIT,
    }
}

/// gRPC's `grpc-timeout` header: digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl Subscriber for PubSubApi {
    type StreamingPullStream = PullStream;

    async fn create_subscription(
        &self,
        request: Request<ps::Subscription>,
    ) -> Result<Response<ps::Subscription>, Status> {
        let name = ResourceName::parse("name", &request.get_ref().name, Collection::Subscriptions)?;
        let topic = ResourceName::parse("topic", &request.get_ref().topic, Collection::Topics)?;
        let (redq_topic, redq_subscription) = (topic.redq_name(), name.redq_name());
        self.authorize(
            &request,
            Action::Manage,
            Resource::subscription(&redq_topic, &redq_subscription),
        )?;
        let mut record = request.into_inner();
        check_supported(&record)?;
        convert::complete_subscription(&mut record)?;
        let topic_record = self.existing_topic(&topic).await?;
        if let Some(policy) = &record.dead_letter_policy {
            let target = ResourceName::parse(
                "dead_letter_policy.dead_letter_topic",
                &policy.dead_letter_topic,
                Collection::Topics,
            )?;
            self.existing_topic(&target).await?;
        }
        record.topic_message_retention_duration = topic_record.message_retention_duration;
        if !self
            .create_record(PubSubRecord::Subscription, &name, &record)
            .await?
        {
            return Err(Error::AlreadyExists(format!("subscription {}", record.name)).into());
        }
        if let Err(err) = self
            .create_redq_subscription((&redq_topic, &redq_subscription), &record)
            .await
        {
            let _ = self.delete_record(PubSubRecord::Subscription, &name).await;
            return Err(err.into());
        }
        Ok(Response::new(record))
    }

    async fn get_subscription(
        &self,
        request: Request<ps::GetSubscriptionRequest>,
    ) -> Result<Response<ps::Subscription>, Status> {
        let subscription = request.get_ref().subscription.clone();
        let (name, _) = self
            .admit_subscription(&request, "subscription", &subscription, Action::View)
            .await?;
        Ok(Response::new(self.existing_subscription(&name).await?))
    }

    async fn update_subscription(
        &self,
        request: Request<ps::UpdateSubscriptionRequest>,
    ) -> Result<Response<ps::Subscription>, Status> {
        let given = request.get_ref().subscription.clone().unwrap_or_default();
        let (name, _) = self
            .admit_subscription(&request, "subscription.name", &given.name, Action::Manage)
            .await?;
        let paths = request
            .into_inner()
            .update_mask
            .map(|mask| mask.paths)
            .unwrap_or_default();
        let mut record = self.existing_subscription(&name).await?;
        update_subscription(&mut record, given, &paths)?;
        check_supported(&record)?;
        convert::complete_subscription(&mut record)?;
        let subscribed = Subscribed::new(&name, record.clone());
        if let Ok((topic, subscription)) = subscribed.location() {
            let settings = convert::subscription_settings(&record);
            let update = SubscriptionUpdate {
                ack_deadline: settings.ack_deadline,
                minimum_backoff: Some(settings.retry.minimum_backoff),
                maximum_backoff: Some(settings.retry.maximum_backoff),
                max_delivery_attempts: Some(settings.retry.max_delivery_attempts),
                dead_lettering: Some(settings.dead_lettering),
                ..Default::default()
            };
            match self
                .broker
                .update_subscription(topic, subscription, &update)
                .await
            {
                // Gone from Redis (a lost topic): the record still changes.
                Ok(_) | Err(Error::NotFound(_)) => {}
                Err(err) => return Err(err.into()),
            }
        }
        self.replace_record(PubSubRecord::Subscription, &name, &record)
            .await?;
        Ok(Response::new(record))
    }

    async fn list_subscriptions(
        &self,
        request: Request<ps::ListSubscriptionsRequest>,
    ) -> Result<Response<ps::ListSubscriptionsResponse>, Status> {
        let caller = self.authorizer.authenticate(&request)?;
        let ps::ListSubscriptionsRequest {
            project,
            page_size,
            page_token,
        } = request.into_inner();
        let project = parse_project("project", &project)?;
        let records = self.subscription_records(&project).await?;
        let visible = records
            .into_iter()
            .filter(|record| {
                let Ok(name) = ResourceName::parse("name", &record.name, Collection::Subscriptions)
                else {
                    return false;
                };
                let subscribed = Subscribed::new(&name, record.clone());
                let topic = subscribed.redq.as_ref().map_or("", |(t, _)| t.as_str());
                self.authorizer.may(
                    &caller,
                    Action::View,
                    Resource::subscription(topic, &name.redq_name()),
                )
            })
            .collect();
        let (subscriptions, next_page_token) = page(visible, |s| &s.name, page_size, &page_token)?;
        Ok(Response::new(ps::ListSubscriptionsResponse {
            subscriptions,
            next_page_token,
        }))
    }

    async fn delete_subscription(
        &self,
        request: Request<ps::DeleteSubscriptionRequest>,
    ) -> Result<Response<Empty>, Status> {
        let subscription = request.get_ref().subscription.clone();
        let (name, subscribed) = self
            .admit_subscription(&request, "subscription", &subscription, Action::Manage)
            .await?;
        if !self
            .delete_record(PubSubRecord::Subscription, &name)
            .await?
        {
            return Err(Error::NotFound(format!("subscription {subscription}")).into());
        }
        if let Some((topic, subscription)) = &subscribed.redq {
            match self.broker.delete_subscription(topic, subscription).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(Response::new(()))
    }

    async fn modify_ack_deadline(
        &self,
        request: Request<ps::ModifyAckDeadlineRequest>,
    ) -> Result<Response<Empty>, Status> {
        let subscription = request.get_ref().subscription.clone();
        let (name, subscribed) = self
            .admit_subscription(&request, "subscription", &subscription, Action::Subscribe)
            .await?;
        let ps::ModifyAckDeadlineRequest {
            ack_ids,
            ack_deadline_seconds,
            ..
        } = request.into_inner();
        let deadline = convert::modify_deadline("ack_deadline_seconds", ack_deadline_seconds)?;
        let exactly_once = subscribed.record.enable_exactly_once_delivery;
        let (ids, mut failed) = parse_ack_ids(&ack_ids, exactly_once)?;
        let (topic, subscription) = subscribed.location()?;
        let result = if deadline.is_zero() {
            // A nack: redelivered after the retry policy's backoff, if any,
            // or dead-lettered.
            let nacked = self.broker.nack(topic, subscription, &ids, None).await;
            self.forward_dead_letters_soon(&name, subscribed.clone());
            nacked
        } else {
            self.broker
                .modify_ack_deadline(topic, subscription, &ids, deadline)
                .await
        };
        failed.extend(lost_ids(result)?);
        ack_outcome(failed, exactly_once)
    }

    async fn acknowledge(
        &self,
        request: Request<ps::AcknowledgeRequest>,
    ) -> Result<Response<Empty>, Status> {
        let subscription = request.get_ref().subscription.clone();
        let (_, subscribed) = self
            .admit_subscription(&request, "subscription", &subscription, Action::Subscribe)
            .await?;
        let exactly_once = subscribed.record.enable_exactly_once_delivery;
        let (ids, mut failed) = parse_ack_ids(&request.get_ref().ack_ids, exactly_once)?;
        let (topic, subscription) = subscribed.location()?;
        let names = (topic, subscription);
        if exactly_once {
            let applied = self
                .broker
                .ack_confirmed(names, &ids, Vec::new(), Carry::Nothing)
                .await?;
            let lost = ids.into_iter().zip(applied).filter(|(_, applied)| !applied);
            failed.extend(lost.map(|(id, _)| id.text));
        } else {
            let acked = self
                .broker
                .ack(names, &ids, Vec::new(), Carry::Nothing)
                .await;
            lost_ids(acked)?;
        }
        ack_outcome(failed, exactly_once)
    }

    async fn pull(
        &self,
        request: Request<ps::PullRequest>,
    ) -> Result<Response<ps::PullResponse>, Status> {
        let subscription = request.get_ref().subscription.clone();
        let (name, subscribed) = self
            .admit_subscription(&request, "subscription", &subscription, Action::Subscribe)
            .await?;
        // Deprecated, and still sent by older clients.
        #[allow(deprecated)]
        let wait = pull_wait(&request, request.get_ref().return_immediately);
        let max_messages = request.get_ref().max_messages;
        if max_messages <= 0 {
            return Err(Error::invalid("max_messages", "must be positive").into());
        }
        let (topic, subscription) = subscribed.location()?;
        let record = &subscribed.record;
        let options = SubscribeOptions {
            topic: topic.to_owned(),
            pattern: None,
            allowed_topics: None,
            subscription: subscription.to_owned(),
            consumer: String::new(),
            named_consumer: false,
            max_outstanding: (max_messages as u32).min(self.limits.max_outstanding_limit),
            max_outstanding_bytes: convert::MAX_RESPONSE_BYTES as u64,
            max_unacked_bytes: 0,
            ack_deadline: None,
            start: GroupStart::Latest,
            retry: convert::subscription_settings(record).retry,
            message_ordering: record.enable_message_ordering,
        };
        let mut stream = self.broker.subscribe(options).await?;
        let with_attempt = record.dead_letter_policy.is_some();
        let received = tokio::time::timeout(wait, stream.deliveries.recv()).await;
        // What the stream fetched and did not hand over is given back.
        stream.control.stop();
        // Its fetch settled expired leases, which may have dead-lettered some.
        self.forward_dead_letters_soon(&name, subscribed.clone());
        let received_messages = match received {
            Ok(Some(batch)) => batch?
                .into_deliveries()
                .into_iter()
                .map(|delivery| convert::received_message(delivery, with_attempt))
                .collect(),
            Ok(None) | Err(_) => Vec::new(),
        };
        Ok(Response::new(ps::PullResponse { received_messages }))
    }

    async fn streaming_pull(
        &self,
        request: Request<Streaming<ps::StreamingPullRequest>>,
    ) -> Result<Response<PullStream>, Status> {
        streaming_pull::serve(self.clone(), request)
            .await
            .map(Response::new)
    }

    async fn seek(
        &self,
        request: Request<ps::SeekRequest>,
    ) -> Result<Response<ps::SeekResponse>, Status> {
        let subscription = request.get_ref().subscription.clone();
        let (_, subscribed) = self
            .admit_subscription(&request, "subscription", &subscription, Action::Manage)
            .await?;
        let (topic, subscription) = subscribed.location()?;
        let time = match request.into_inner().target {
            Some(ps::seek_request::Target::Time(time)) => time,
            Some(ps::seek_request::Target::Snapshot(_)) => {
                return Err(Status::unimplemented("snapshots are not supported"));
            }
            None => return Err(Error::invalid("target", "give a time").into()),
        };
        if time.seconds < 0 || !(0..1_000_000_000).contains(&time.nanos) {
            return Err(Error::invalid("time", "must be a valid timestamp").into());
        }
        let ms = time.seconds as u64 * 1000 + time.nanos as u64 / 1_000_000;
        let retain_acked = subscribed.record.retain_acked_messages;
        self.broker
            .seek_to_time(topic, subscription, ms, retain_acked)
            .await?;
        Ok(Response::new(ps::SeekResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("10S"), Some(Duration::from_secs(10)));
        assert_eq!(
            parse_grpc_timeout("59999m"),
            Some(Duration::from_millis(59_999))
        );
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
    }
}
