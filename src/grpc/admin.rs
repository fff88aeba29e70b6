//! `redq.v1.AdminService`: validate and convert, call the broker, convert back.

use super::convert;
use super::targets::Target;
use crate::auth::{Action, Authorizer, Resource};
use crate::broker::{Broker, SubscriptionView, TopicView};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::pb;
use crate::pb::admin_service_server::AdminService;
use crate::store::leases::RetryPolicy;
use crate::store::stream::{GroupStart, is_entry_id};
use crate::store::topics::{
    DEFAULT_MAX_BLOCKED, SubscriptionSettings, SubscriptionUpdate, TopicSettings,
};
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Topics per page when the request does not say, and at most.
const DEFAULT_PAGE_SIZE: u32 = 100;
const MAX_PAGE_SIZE: u32 = 1000;
/// Dead letters redriven per second when the request does not say.
const DEFAULT_REDRIVE_RATE: u32 = 1000;

pub struct AdminApi {
    broker: Broker,
    limits: Limits,
    authorizer: Authorizer,
}

impl AdminApi {
    pub fn new(broker: Broker, limits: Limits, authorizer: Authorizer) -> Self {
        Self {
            broker,
            limits,
            authorizer,
        }
    }

    /// Whether the caller may do `action` on what `request` targets: asked
    /// before anything else.
    fn allowed<T: Target>(&self, request: &Request<T>, action: Action) -> Result<(), Status> {
        let resource = request.get_ref().target();
        self.authorizer
            .authorize(request, action, resource)
            .map(|_| ())
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn create_topic(
        &self,
        request: Request<pb::CreateTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::CreateTopicRequest { name, settings } = request.into_inner();
        convert::check_name("name", &name)?;
        let settings = topic_settings(settings.unwrap_or_default(), &self.limits)?;
        let topic = self.broker.create_topic(&name, &settings).await?;
        Ok(Response::new(topic_pb(topic)))
    }

    async fn get_topic(
        &self,
        request: Request<pb::GetTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        self.allowed(&request, Action::View)?;
        let pb::GetTopicRequest { name } = request.into_inner();
        convert::check_name("name", &name)?;
        Ok(Response::new(topic_pb(self.broker.topic(&name).await?)))
    }

    async fn list_topics(
        &self,
        request: Request<pb::ListTopicsRequest>,
    ) -> Result<Response<pb::ListTopicsResponse>, Status> {
        let caller = self.authorizer.authenticate(&request)?;
        let pb::ListTopicsRequest {
            page_size,
            page_token,
        } = request.into_inner();
        let page_size = page_size_or_default(page_size)?;
        if !page_token.is_empty() {
            convert::check_name("page_token", &page_token)?;
        }
        let after = Some(page_token.as_str()).filter(|t| !t.is_empty());
        let (topics, next) = self.broker.topics(after, page_size).await?;
        // Only what the caller may view: a page can come back short, or
        // empty with a next page.
        let topics = topics.into_iter().filter(|t| {
            self.authorizer
                .may(&caller, Action::View, Resource::topic(&t.name))
        });
        Ok(Response::new(pb::ListTopicsResponse {
            topics: topics.map(topic_pb).collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn update_topic(
        &self,
        request: Request<pb::UpdateTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::UpdateTopicRequest { name, settings } = request.into_inner();
        convert::check_name("name", &name)?;
        let settings = topic_settings(settings.unwrap_or_default(), &self.limits)?;
        Ok(Response::new(topic_pb(
            self.broker.update_topic(&name, &settings).await?,
        )))
    }

    async fn delete_topic(
        &self,
        request: Request<pb::DeleteTopicRequest>,
    ) -> Result<Response<pb::DeleteTopicResponse>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::DeleteTopicRequest { name } = request.into_inner();
        convert::check_name("name", &name)?;
        self.broker.delete_topic(&name).await?;
        Ok(Response::new(pb::DeleteTopicResponse {}))
    }

    async fn create_subscription(
        &self,
        request: Request<pb::CreateSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::CreateSubscriptionRequest {
            topic,
            name,
            settings,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("name", &name)?;
        let (start, settings) = new_subscription(settings.unwrap_or_default(), &self.limits)?;
        let view = self
            .broker
            .create_subscription(&topic, &name, start, &settings)
            .await?;
        Ok(Response::new(subscription_pb(view)))
    }

    async fn get_subscription(
        &self,
        request: Request<pb::GetSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        self.allowed(&request, Action::View)?;
        let pb::GetSubscriptionRequest { topic, name } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("name", &name)?;
        Ok(Response::new(subscription_pb(
            self.broker.subscription(&topic, &name).await?,
        )))
    }

    async fn list_subscriptions(
        &self,
        request: Request<pb::ListSubscriptionsRequest>,
    ) -> Result<Response<pb::ListSubscriptionsResponse>, Status> {
        let caller = self.authorizer.authenticate(&request)?;
        let pb::ListSubscriptionsRequest { topic } = request.into_inner();
        convert::check_name("topic", &topic)?;
        let may_view_topic = self
            .authorizer
            .may(&caller, Action::View, Resource::topic(&topic));
        let subscriptions = match self.broker.subscriptions(&topic).await {
            // Whether the topic exists is for those who may view it.
            Err(Error::NotFound(_)) if !may_view_topic => Vec::new(),
            other => other?,
        };
        let subscriptions = subscriptions.into_iter().filter(|s| {
            self.authorizer.may(
                &caller,
                Action::View,
                Resource::subscription(&topic, &s.name),
            )
        });
        Ok(Response::new(pb::ListSubscriptionsResponse {
            subscriptions: subscriptions.map(subscription_pb).collect(),
        }))
    }

    async fn update_subscription(
        &self,
        request: Request<pb::UpdateSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::UpdateSubscriptionRequest {
            topic,
            name,
            settings,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("name", &name)?;
        let update = subscription_update(settings.unwrap_or_default(), &self.limits)?;
        let view = self
            .broker
            .update_subscription(&topic, &name, &update)
            .await?;
        Ok(Response::new(subscription_pb(view)))
    }

    async fn delete_subscription(
        &self,
        request: Request<pb::DeleteSubscriptionRequest>,
    ) -> Result<Response<pb::DeleteSubscriptionResponse>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::DeleteSubscriptionRequest { topic, name } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("name", &name)?;
        self.broker.delete_subscription(&topic, &name).await?;
        Ok(Response::new(pb::DeleteSubscriptionResponse {}))
    }

    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        self.allowed(&request, Action::Browse)?;
        let pb::ListDeadLettersRequest {
            topic,
            subscription,
            page_size,
            page_token,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("subscription", &subscription)?;
        let (page_size, after) = convert::dead_letter_page(page_size, &page_token)?;
        let page = self
            .broker
            .dead_letters(&topic, &subscription, after.as_deref(), page_size)
            .await?;
        Ok(Response::new(pb::ListDeadLettersResponse {
            dead_letters: page
                .dead_letters
                .into_iter()
                .map(convert::dead_letter)
                .collect(),
            next_page_token: page.next_after.unwrap_or_default(),
        }))
    }

    async fn redrive_dead_letters(
        &self,
        request: Request<pb::RedriveDeadLettersRequest>,
    ) -> Result<Response<pb::RedriveDeadLettersResponse>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::RedriveDeadLettersRequest {
            topic,
            subscription,
            dead_letter_ids,
            max_per_second,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("subscription", &subscription)?;
        dead_letter_ids_valid(&dead_letter_ids, &self.limits)?;
        let rate = if max_per_second == 0 {
            DEFAULT_REDRIVE_RATE
        } else {
            max_per_second
        };
        let redriven = self
            .broker
            .redrive_dead_letters(&topic, &subscription, &dead_letter_ids, rate)
            .await?;
        Ok(Response::new(pb::RedriveDeadLettersResponse { redriven }))
    }

    async fn purge_dead_letters(
        &self,
        request: Request<pb::PurgeDeadLettersRequest>,
    ) -> Result<Response<pb::PurgeDeadLettersResponse>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::PurgeDeadLettersRequest {
            topic,
            subscription,
            dead_letter_ids,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("subscription", &subscription)?;
        dead_letter_ids_valid(&dead_letter_ids, &self.limits)?;
        let purged = self
            .broker
            .purge_dead_letters(&topic, &subscription, &dead_letter_ids)
            .await?;
        Ok(Response::new(pb::PurgeDeadLettersResponse { purged }))
    }

    async fn seek(
        &self,
        request: Request<pb::SeekRequest>,
    ) -> Result<Response<pb::SeekResponse>, Status> {
        self.allowed(&request, Action::Manage)?;
        let pb::SeekRequest {
            topic,
            subscription,
            time,
            message_id,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::check_name("subscription", &subscription)?;
        let target = convert::seek_target(time, message_id)?;
        self.broker.seek(&topic, &subscription, &target).await?;
        Ok(Response::new(pb::SeekResponse {}))
    }
}

pub fn page_size_or_default(page_size: u32) -> Result<u32> {
    match page_size {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if n > MAX_PAGE_SIZE => Err(Error::invalid(
            "page_size",
            format!("at most {MAX_PAGE_SIZE}"),
        )),
        n => Ok(n),
    }
}

/// Dead letter ids of a redrive or purge: entry ids, at most as many as the
/// ack ids of one call.
pub fn dead_letter_ids_valid(ids: &[String], limits: &Limits) -> Result<()> {
    if ids.len() > limits.max_outstanding_limit as usize {
        return Err(Error::invalid(
            "dead_letter_ids",
            format!("at most {} per call", limits.max_outstanding_limit),
        ));
    }
    match ids.iter().position(|id| !is_entry_id(id)) {
        Some(i) => Err(Error::invalid(
            format!("dead_letter_ids[{i}]"),
            "is not a dead letter id",
        )),
        None => Ok(()),
    }
}

fn duration(field: &str, duration: Option<prost_types::Duration>) -> Result<Option<Duration>> {
    duration
        .map(|d| Duration::try_from(d).map_err(|_| Error::invalid(field, "must not be negative")))
        .transpose()
}

pub fn topic_settings(settings: pb::TopicSettings, limits: &Limits) -> Result<TopicSettings> {
    let pb::TopicSettings {
        retention_max_age,
        retention_max_length,
        hard_max_length,
        dedupe_window,
        max_payload_bytes,
    } = settings;
    if let Some(max) = max_payload_bytes
        && max > limits.max_payload_bytes
    {
        return Err(Error::invalid(
            "settings.max_payload_bytes",
            format!("at most the server's limit of {}", limits.max_payload_bytes),
        ));
    }
    Ok(TopicSettings {
        retention_max_age: duration("settings.retention_max_age", retention_max_age)?,
        retention_max_length,
        hard_max_length,
        dedupe_window: duration("settings.dedupe_window", dedupe_window)?,
        max_payload_bytes,
    })
}

fn topic_pb(topic: TopicView) -> pb::Topic {
    let TopicView {
        name,
        settings,
        stats,
        subscriptions,
    } = topic;
    pb::Topic {
        name,
        settings: Some(pb::TopicSettings {
            retention_max_age: settings.retention_max_age.map(duration_pb),
            retention_max_length: settings.retention_max_length,
            hard_max_length: settings.hard_max_length,
            dedupe_window: settings.dedupe_window.map(duration_pb),
            max_payload_bytes: settings.max_payload_bytes,
        }),
        stats: stats.map(|stats| pb::TopicStats {
            stream_length: stats.stream_length,
            scheduled_count: stats.scheduled,
            next_due: stats.next_due_ms.map(convert::timestamp_ms),
            published_count: stats.published,
            dropped_count: stats.dropped,
        }),
        subscriptions,
    }
}

/// CreateSubscription: the settings given, the server's defaults for the rest.
pub fn new_subscription(
    settings: pb::SubscriptionSettings,
    limits: &Limits,
) -> Result<(GroupStart, SubscriptionSettings)> {
    let start = match pb::StartPosition::try_from(settings.start) {
        Ok(pb::StartPosition::Latest) => GroupStart::Latest,
        Ok(_) => GroupStart::Earliest,
        Err(_) => return Err(Error::invalid("settings.start", "unknown start position")),
    };
    let message_ordering = settings.message_ordering.unwrap_or(false);
    let update = subscription_settings(settings, limits)?;
    let settings = SubscriptionSettings {
        ack_deadline: update.ack_deadline,
        retry: RetryPolicy {
            minimum_backoff: update.minimum_backoff.unwrap_or(limits.retry_min_backoff),
            maximum_backoff: update.maximum_backoff.unwrap_or(limits.retry_max_backoff),
            max_delivery_attempts: update
                .max_delivery_attempts
                .unwrap_or_else(|| convert::delivery_attempts_default(limits, message_ordering)),
        },
        dead_lettering: update.dead_lettering.unwrap_or(true),
        message_ordering,
        max_blocked: update.max_blocked.unwrap_or(DEFAULT_MAX_BLOCKED),
    };
    if settings.retry.minimum_backoff > settings.retry.maximum_backoff {
        return Err(Error::invalid(
            "settings.retry_policy",
            "minimum_backoff must not exceed maximum_backoff",
        ));
    }
    Ok((start, settings))
}

/// UpdateSubscription: the settings given; those fixed at creation may not change.
pub fn subscription_update(
    settings: pb::SubscriptionSettings,
    limits: &Limits,
) -> Result<SubscriptionUpdate> {
    if settings.message_ordering.is_some() {
        return Err(Error::invalid(
            "settings.message_ordering",
            "fixed at the subscription's creation",
        ));
    }
    subscription_settings(settings, limits)
}

/// The settings of a create or an update, checked.
fn subscription_settings(
    settings: pb::SubscriptionSettings,
    limits: &Limits,
) -> Result<SubscriptionUpdate> {
    let pb::SubscriptionSettings {
        ack_deadline,
        retry_policy,
        max_delivery_attempts,
        dead_lettering,
        start: _,            // only at creation, see new_subscription
        message_ordering: _, // likewise
        max_blocked,
    } = settings;
    if max_blocked == Some(0) {
        return Err(Error::invalid("settings.max_blocked", "must be positive"));
    }
    let pb::RetryPolicy {
        minimum_backoff,
        maximum_backoff,
    } = retry_policy.unwrap_or_default();
    let backoff = |field: &str, d| -> Result<Option<Duration>> {
        let d = duration(field, d)?;
        if d.is_some_and(|d| d > limits.max_delay) {
            return Err(Error::invalid(field, "longer than --max-delay"));
        }
        Ok(d)
    };
    Ok(SubscriptionUpdate {
        ack_deadline: ack_deadline
            .map(|d| convert::lease_duration("settings.ack_deadline", d, limits, false))
            .transpose()?,
        minimum_backoff: backoff("settings.retry_policy.minimum_backoff", minimum_backoff)?,
        maximum_backoff: backoff("settings.retry_policy.maximum_backoff", maximum_backoff)?,
        max_delivery_attempts,
        dead_lettering,
        max_blocked,
    })
}

fn subscription_pb(view: SubscriptionView) -> pb::Subscription {
    let SubscriptionView {
        topic,
        name,
        settings,
        stats,
    } = view;
    pb::Subscription {
        topic,
        name,
        settings: Some(pb::SubscriptionSettings {
            ack_deadline: settings.ack_deadline.map(duration_pb),
            retry_policy: Some(pb::RetryPolicy {
                minimum_backoff: Some(duration_pb(settings.retry.minimum_backoff)),
                maximum_backoff: Some(duration_pb(settings.retry.maximum_backoff)),
            }),
            max_delivery_attempts: Some(settings.retry.max_delivery_attempts),
            dead_lettering: Some(settings.dead_lettering),
            start: pb::StartPosition::Unspecified.into(),
            message_ordering: Some(settings.message_ordering),
            max_blocked: settings.message_ordering.then_some(settings.max_blocked),
        }),
        stats: Some(pb::SubscriptionStats {
            pending: stats.pending,
            lag: stats.lag,
            oldest_unacked_age: stats.oldest_unacked_age.map(duration_pb),
            consumers: stats
                .consumers
                .into_iter()
                .map(|c| pb::ConsumerStats {
                    name: c.name,
                    pending: c.pending,
                    idle: Some(duration_pb(c.idle)),
                })
                .collect(),
            dead_letters: stats.dead_letters,
            acked_count: stats.acked,
            active_keys: stats.ordering.active_keys,
            blocked: stats.ordering.blocked,
            oldest_blocked_age: stats.ordering.oldest_blocked_age.map(duration_pb),
            at_blocked_cap: stats.ordering.at_blocked_cap,
        }),
    }
}

fn duration_pb(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
