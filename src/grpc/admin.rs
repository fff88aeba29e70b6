//! `redq.v1.AdminService`: validate and convert, call the broker, convert back.

use super::convert;
use crate::broker::Broker;
use crate::pb;
use crate::pb::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

pub struct AdminApi {
    broker: Broker,
}

impl AdminApi {
    pub fn new(broker: Broker) -> Self {
        Self { broker }
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
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

    async fn create_topic(
        &self,
        _request: Request<pb::CreateTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        Err(not_yet("create_topic"))
    }

    async fn get_topic(
        &self,
        _request: Request<pb::GetTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        Err(not_yet("get_topic"))
    }

    async fn list_topics(
        &self,
        _request: Request<pb::ListTopicsRequest>,
    ) -> Result<Response<pb::ListTopicsResponse>, Status> {
        Err(not_yet("list_topics"))
    }

    async fn update_topic(
        &self,
        _request: Request<pb::UpdateTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        Err(not_yet("update_topic"))
    }

    async fn delete_topic(
        &self,
        _request: Request<pb::DeleteTopicRequest>,
    ) -> Result<Response<pb::DeleteTopicResponse>, Status> {
        Err(not_yet("delete_topic"))
    }

    async fn create_subscription(
        &self,
        _request: Request<pb::CreateSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        Err(not_yet("create_subscription"))
    }

    async fn get_subscription(
        &self,
        _request: Request<pb::GetSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        Err(not_yet("get_subscription"))
    }

    async fn list_subscriptions(
        &self,
        _request: Request<pb::ListSubscriptionsRequest>,
    ) -> Result<Response<pb::ListSubscriptionsResponse>, Status> {
        Err(not_yet("list_subscriptions"))
    }

    async fn update_subscription(
        &self,
        _request: Request<pb::UpdateSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        Err(not_yet("update_subscription"))
    }

    async fn delete_subscription(
        &self,
        _request: Request<pb::DeleteSubscriptionRequest>,
    ) -> Result<Response<pb::DeleteSubscriptionResponse>, Status> {
        Err(not_yet("delete_subscription"))
    }

    async fn redrive_dead_letters(
        &self,
        _request: Request<pb::RedriveDeadLettersRequest>,
    ) -> Result<Response<pb::RedriveDeadLettersResponse>, Status> {
        Err(not_yet("redrive_dead_letters"))
    }

    async fn purge_dead_letters(
        &self,
        _request: Request<pb::PurgeDeadLettersRequest>,
    ) -> Result<Response<pb::PurgeDeadLettersResponse>, Status> {
        Err(not_yet("purge_dead_letters"))
    }

    async fn seek(
        &self,
        _request: Request<pb::SeekRequest>,
    ) -> Result<Response<pb::SeekResponse>, Status> {
        Err(not_yet("seek"))
    }
}

/// RPCs of the admin API that this version does not serve yet.
fn not_yet(rpc: &str) -> Status {
    Status::unimplemented(format!("{rpc} is not available yet"))
}
