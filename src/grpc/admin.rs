//! `redq.v1.AdminService`: validate and convert, call the broker, convert back.

use super::convert;
use super::targets::Target;
use crate::auth::{Action, Authorizer, Resource};
use crate::broker::{Broker, DEFAULT_REDRIVE_RATE};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::pb;
use crate::pb::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

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

    /// The request, once the caller may do `action` on what it targets and
    /// its names are valid: asked before anything else.
    fn admit<T: Target>(&self, request: Request<T>, action: Action) -> Result<T, Status> {
        let resource = request.get_ref().target();
        self.authorizer.authorize(&request, action, resource)?;
        let request = request.into_inner();
        request.check_names()?;
        Ok(request)
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn create_topic(
        &self,
        request: Request<pb::CreateTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        let pb::CreateTopicRequest { name, settings } = self.admit(request, Action::Manage)?;
        let (settings, kind) = convert::topic_settings(settings.unwrap_or_default(), &self.limits)?;
        let topic = self
            .broker
            .create_topic(&name, &settings, kind.unwrap_or_default())
            .await?;
        Ok(Response::new(convert::topic_pb(topic)))
    }

    async fn get_topic(
        &self,
        request: Request<pb::GetTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        let pb::GetTopicRequest { name } = self.admit(request, Action::View)?;
        Ok(Response::new(convert::topic_pb(
            self.broker.topic(&name).await?,
        )))
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
        let page_size = convert::page_size_or_default(page_size)?;
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
            topics: topics.map(convert::topic_pb).collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn update_topic(
        &self,
        request: Request<pb::UpdateTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        let pb::UpdateTopicRequest { name, settings } = self.admit(request, Action::Manage)?;
        let (settings, kind) = convert::topic_settings(settings.unwrap_or_default(), &self.limits)?;
        Ok(Response::new(convert::topic_pb(
            self.broker.update_topic(&name, &settings, kind).await?,
        )))
    }

    async fn delete_topic(
        &self,
        request: Request<pb::DeleteTopicRequest>,
    ) -> Result<Response<pb::DeleteTopicResponse>, Status> {
        let pb::DeleteTopicRequest { name } = self.admit(request, Action::Manage)?;
        self.broker.delete_topic(&name).await?;
        Ok(Response::new(pb::DeleteTopicResponse {}))
    }

    async fn create_subscription(
        &self,
        request: Request<pb::CreateSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        let pb::CreateSubscriptionRequest {
            topic,
            name,
            settings,
        } = self.admit(request, Action::Manage)?;
        let (start, settings) =
            convert::new_subscription(settings.unwrap_or_default(), &self.limits)?;
        let view = self
            .broker
            .create_subscription(&topic, &name, start, &settings)
            .await?;
        Ok(Response::new(convert::subscription_pb(view)))
    }

    async fn get_subscription(
        &self,
        request: Request<pb::GetSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        let pb::GetSubscriptionRequest { topic, name } = self.admit(request, Action::View)?;
        Ok(Response::new(convert::subscription_pb(
            self.broker.subscription(&topic, &name).await?,
        )))
    }

    async fn list_subscriptions(
        &self,
        request: Request<pb::ListSubscriptionsRequest>,
    ) -> Result<Response<pb::ListSubscriptionsResponse>, Status> {
        let caller = self.authorizer.authenticate(&request)?;
        let request = request.into_inner();
        request.check_names()?;
        let pb::ListSubscriptionsRequest { topic } = request;
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
            subscriptions: subscriptions.map(convert::subscription_pb).collect(),
        }))
    }

    async fn update_subscription(
        &self,
        request: Request<pb::UpdateSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        let pb::UpdateSubscriptionRequest {
            topic,
            name,
            settings,
        } = self.admit(request, Action::Manage)?;
        let update = convert::subscription_update(settings.unwrap_or_default(), &self.limits)?;
        let view = self
            .broker
            .update_subscription(&topic, &name, &update)
            .await?;
        Ok(Response::new(convert::subscription_pb(view)))
    }

    async fn delete_subscription(
        &self,
        request: Request<pb::DeleteSubscriptionRequest>,
    ) -> Result<Response<pb::DeleteSubscriptionResponse>, Status> {
        let pb::DeleteSubscriptionRequest { topic, name } = self.admit(request, Action::Manage)?;
        self.broker.delete_subscription(&topic, &name).await?;
        Ok(Response::new(pb::DeleteSubscriptionResponse {}))
    }

    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        let pb::ListDeadLettersRequest {
            topic,
            subscription,
            page_size,
            page_token,
        } = self.admit(request, Action::Browse)?;
        let (page_size, after) = convert::dead_letter_page(page_size, &page_token)?;
        let page = self
            .broker
            .dead_letters(&topic, &subscription, after.as_deref(), page_size)
            .await?;
        Ok(Response::new(pb::ListDeadLettersResponse {
            dead_letters: page
                .dead_letters
                .into_iter()
                .map(|dead_letter| convert::dead_letter(dead_letter, &topic))
                .collect(),
            next_page_token: page.next_after.unwrap_or_default(),
        }))
    }

    async fn redrive_dead_letters(
        &self,
        request: Request<pb::RedriveDeadLettersRequest>,
    ) -> Result<Response<pb::RedriveDeadLettersResponse>, Status> {
        let pb::RedriveDeadLettersRequest {
            topic,
            subscription,
            dead_letter_ids,
            max_per_second,
        } = self.admit(request, Action::Manage)?;
        convert::dead_letter_ids_valid(&dead_letter_ids, &self.limits)?;
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
        let pb::PurgeDeadLettersRequest {
            topic,
            subscription,
            dead_letter_ids,
        } = self.admit(request, Action::Manage)?;
        convert::dead_letter_ids_valid(&dead_letter_ids, &self.limits)?;
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
        let pb::SeekRequest {
            topic,
            subscription,
            time,
            message_id,
        } = self.admit(request, Action::Manage)?;
        let target = convert::seek_target(time, message_id)?;
        self.broker.seek(&topic, &subscription, &target).await?;
        Ok(Response::new(pb::SeekResponse {}))
    }

    async fn put_schedule(
        &self,
        request: Request<pb::PutScheduleRequest>,
    ) -> Result<Response<pb::Schedule>, Status> {
        let pb::PutScheduleRequest { schedule } = self.admit(request, Action::Manage)?;
        let (topic, name, spec) = convert::schedule_spec(schedule, &self.limits)?;
        let schedule = self.broker.put_schedule(&topic, &name, spec).await?;
        Ok(Response::new(convert::schedule_pb(&topic, schedule)))
    }

    async fn get_schedule(
        &self,
        request: Request<pb::GetScheduleRequest>,
    ) -> Result<Response<pb::Schedule>, Status> {
        // Manage, not View: a schedule holds the message it publishes.
        let pb::GetScheduleRequest { topic, name } = self.admit(request, Action::Manage)?;
        let schedule = self.broker.schedule(&topic, &name).await?;
        Ok(Response::new(convert::schedule_pb(&topic, schedule)))
    }

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        let pb::ListSchedulesRequest {
            topic,
            page_size,
            page_token,
        } = self.admit(request, Action::Manage)?;
        let (page_size, after) = convert::schedule_page(page_size, &page_token)?;
        let (schedules, next) = self
            .broker
            .schedules(&topic, after.as_deref(), page_size)
            .await?;
        Ok(Response::new(pb::ListSchedulesResponse {
            schedules: schedules
                .into_iter()
                .map(|schedule| convert::schedule_pb(&topic, schedule))
                .collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn delete_schedule(
        &self,
        request: Request<pb::DeleteScheduleRequest>,
    ) -> Result<Response<pb::DeleteScheduleResponse>, Status> {
        let pb::DeleteScheduleRequest { topic, name } = self.admit(request, Action::Manage)?;
        self.broker.delete_schedule(&topic, &name).await?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }
}
