//! `redq.v1.QueueService`: validate and convert, call the broker, convert back.

use super::targets::Target;
use super::{authorized, convert, publish_stream, streaming_subscribe};
use crate::auth::{Action, Authorizer, Caller};
use crate::broker::{Broker, Carry};
use crate::config::Limits;
use crate::error::Error;
use crate::pb;
use crate::pb::queue_service_server::QueueService;
use crate::store::stream::{Due, PublishBatch};
use std::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

pub struct QueueApi {
    broker: Broker,
    limits: Limits,
    authorizer: Authorizer,
}

impl QueueApi {
    pub fn new(broker: Broker, limits: Limits, authorizer: Authorizer) -> Self {
        Self {
            broker,
            limits,
            authorizer,
        }
    }

    /// Whether the caller may publish `messages` to the request's topic:
    /// asked before anything else.
    fn may_publish<T: Target>(&self, request: &Request<T>, messages: usize) -> Result<(), Status> {
        let resource = request.get_ref().target();
        let caller = self
            .authorizer
            .authorize(request, Action::Publish, resource)?;
        self.authorizer.take_publish_rate(&caller, messages)
    }

    /// Whether the caller may subscribe to (and ack on) the request's subscription.
    fn may_subscribe<T: Target>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let resource = request.get_ref().target();
        self.authorizer
            .authorize(request, Action::Subscribe, resource)
    }
}

type SubscribeStream = authorized::Guarded<pb::SubscribeResponse>;

#[tonic::async_trait]
impl QueueService for QueueApi {
    async fn publish(
        &self,
        request: Request<pb::PublishRequest>,
    ) -> Result<Response<pb::PublishResponse>, Status> {
        let started = Instant::now();
        let publish = request.get_ref();
        self.may_publish(&request, publish.messages.len())?;
        let pb::PublishRequest {
            topic,
            messages,
            dedupe_id,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        let batch = convert::publish_batch(messages, dedupe_id, &self.limits)?;
        let published = self.broker.publish(&topic, batch).await;
        self.broker
            .metrics()
            .publish_duration("Publish", started.elapsed());
        let published = published?;
        Ok(Response::new(convert::publish_response(published)))
    }

    async fn schedule_delayed(
        &self,
        request: Request<pb::ScheduleDelayedRequest>,
    ) -> Result<Response<pb::ScheduleDelayedResponse>, Status> {
        self.may_publish(&request, 1)?;
        let pb::ScheduleDelayedRequest {
            topic,
            message,
            deliver_at,
            delay,
        } = request.into_inner();
        let started = Instant::now();
        convert::check_name("topic", &topic)?;
        let message = convert::scheduled_message(message, deliver_at, delay, &self.limits)?;
        let batch = PublishBatch {
            messages: vec![message],
            dedupe_id: String::new(),
        };
        let published = self.broker.publish(&topic, batch).await;
        self.broker
            .metrics()
            .publish_duration("ScheduleDelayed", started.elapsed());
        let published = published?;
        let published = published
            .into_iter()
            .next()
            .ok_or_else(|| Status::internal("internal error"))?;
        Ok(Response::new(convert::schedule_response(published)))
    }

    async fn cancel_scheduled(
        &self,
        request: Request<pb::CancelScheduledRequest>,
    ) -> Result<Response<pb::CancelScheduledResponse>, Status> {
        self.may_publish(&request, 0)?;
        let pb::CancelScheduledRequest { topic, message_id } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::message_id(&message_id)?;
        let cancelled = self.broker.cancel_scheduled(&topic, &message_id).await?;
        Ok(Response::new(pb::CancelScheduledResponse { cancelled }))
    }

    async fn reschedule_delayed(
        &self,
        request: Request<pb::RescheduleDelayedRequest>,
    ) -> Result<Response<pb::RescheduleDelayedResponse>, Status> {
        self.may_publish(&request, 0)?;
        let pb::RescheduleDelayedRequest {
            topic,
            message_id,
            deliver_at,
            delay,
        } = request.into_inner();
        convert::check_name("topic", &topic)?;
        convert::message_id(&message_id)?;
        let due = convert::due("", deliver_at, delay, &self.limits)?;
        if due == Due::Now {
            return Err(Error::invalid("deliver_at", "set deliver_at or delay").into());
        }
        let rescheduled = self.broker.reschedule(&topic, &message_id, due).await?;
        Ok(Response::new(convert::reschedule_response(rescheduled)))
    }

    type SubscribeStream = SubscribeStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<SubscribeStream>, Status> {
        let caller = self.may_subscribe(&request)?;
        let names = (
            request.get_ref().topic.clone(),
            request.get_ref().subscription.clone(),
        );
        let slot = self.authorizer.open_stream(&caller)?;
        let options = convert::subscribe_options(request.into_inner(), &self.limits)?;
        let subscription = self.broker.subscribe(options).await?;
        let responses = ReceiverStream::new(subscription.deliveries).map(convert::deliveries);
        Ok(Response::new(authorized::until_revoked(
            responses,
            self.authorizer.clone(),
            caller,
            names,
            slot,
        )))
    }

    type PublishStreamStream = publish_stream::Responses;

    async fn publish_stream(
        &self,
        request: Request<Streaming<pb::PublishStreamRequest>>,
    ) -> Result<Response<Self::PublishStreamStream>, Status> {
        let caller = self.authorizer.authenticate(&request)?;
        let inbound = request.into_inner();
        Ok(Response::new(publish_stream::serve(
            self.broker.clone(),
            self.limits.clone(),
            (self.authorizer.clone(), caller),
            inbound,
        )))
    }

    type StreamingSubscribeStream = streaming_subscribe::Responses;

    async fn streaming_subscribe(
        &self,
        request: Request<Streaming<pb::StreamingSubscribeRequest>>,
    ) -> Result<Response<Self::StreamingSubscribeStream>, Status> {
        let caller = self.authorizer.authenticate(&request)?;
        let inbound = request.into_inner();
        let responses = streaming_subscribe::serve(
            self.broker.clone(),
            self.limits.clone(),
            (self.authorizer.clone(), caller),
            inbound,
        )
        .await?;
        Ok(Response::new(responses))
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        self.may_subscribe(&request)?;
        let pb::AckRequest {
            topic,
            subscription,
            ack_ids,
        } = request.into_inner();
        let ack_ids = convert::ack_ids(&topic, &subscription, &ack_ids, &self.limits)?;
        // A unary call may be cancelled: it carries no fetches (see `Carry`).
        self.broker
            .ack(
                (&topic, &subscription),
                &ack_ids,
                Vec::new(),
                Carry::Nothing,
            )
            .await?;
        Ok(Response::new(pb::AckResponse {}))
    }

    async fn nack(
        &self,
        request: Request<pb::NackRequest>,
    ) -> Result<Response<pb::NackResponse>, Status> {
        self.may_subscribe(&request)?;
        let pb::NackRequest {
            topic,
            subscription,
            ack_ids,
            delay,
        } = request.into_inner();
        let ack_ids = convert::ack_ids(&topic, &subscription, &ack_ids, &self.limits)?;
        let delay = convert::nack_delay(delay, &self.limits)?;
        self.broker
            .nack(&topic, &subscription, &ack_ids, delay)
            .await?;
        Ok(Response::new(pb::NackResponse {}))
    }

    async fn modify_ack_deadline(
        &self,
        request: Request<pb::ModifyAckDeadlineRequest>,
    ) -> Result<Response<pb::ModifyAckDeadlineResponse>, Status> {
        self.may_subscribe(&request)?;
        let pb::ModifyAckDeadlineRequest {
            topic,
            subscription,
            ack_ids,
            ack_deadline,
        } = request.into_inner();
        let ack_ids = convert::ack_ids(&topic, &subscription, &ack_ids, &self.limits)?;
        let ack_deadline =
            ack_deadline.ok_or_else(|| Error::invalid("ack_deadline", "is required"))?;
        let deadline = convert::lease_duration("ack_deadline", ack_deadline, &self.limits, true)?;
        self.broker
            .modify_ack_deadline(&topic, &subscription, &ack_ids, deadline)
            .await?;
        Ok(Response::new(pb::ModifyAckDeadlineResponse {}))
    }
}
