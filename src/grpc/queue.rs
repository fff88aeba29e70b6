//! `redq.v1.QueueService`: validate and convert, call the broker, convert back.

use super::{convert, publish_stream, streaming_subscribe};
use crate::broker::Broker;
use crate::config::Limits;
use crate::error::Error;
use crate::pb;
use crate::pb::queue_service_server::QueueService;
use crate::store::stream::Due;
use futures::Stream;
use std::pin::Pin;
use std::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

pub struct QueueApi {
    broker: Broker,
    limits: Limits,
}

impl QueueApi {
    pub fn new(broker: Broker, limits: Limits) -> Self {
        Self { broker, limits }
    }
}

type SubscribeStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl QueueService for QueueApi {
    async fn publish(
        &self,
        request: Request<pb::PublishRequest>,
    ) -> Result<Response<pb::PublishResponse>, Status> {
        let started = Instant::now();
        let pb::PublishRequest { topic, messages } = request.into_inner();
        convert::check_name("topic", &topic)?;
        let messages = convert::publish_messages(messages, &self.limits)?;
        let published = self.broker.publish(&topic, messages).await;
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
        let pb::ScheduleDelayedRequest {
            topic,
            message,
            deliver_at,
            delay,
        } = request.into_inner();
        let started = Instant::now();
        convert::check_name("topic", &topic)?;
        let message = convert::scheduled_message(message, deliver_at, delay, &self.limits)?;
        let published = self.broker.publish(&topic, vec![message]).await;
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
        let options = convert::subscribe_options(request.into_inner(), &self.limits)?;
        let subscription = self.broker.subscribe(options).await?;
        let responses = ReceiverStream::new(subscription.deliveries).map(convert::deliveries);
        Ok(Response::new(Box::pin(responses)))
    }

    type PublishStreamStream = publish_stream::Responses;

    async fn publish_stream(
        &self,
        request: Request<Streaming<pb::PublishStreamRequest>>,
    ) -> Result<Response<Self::PublishStreamStream>, Status> {
        let inbound = request.into_inner();
        Ok(Response::new(publish_stream::serve(
            self.broker.clone(),
            self.limits.clone(),
            inbound,
        )))
    }

    type StreamingSubscribeStream = streaming_subscribe::Responses;

    async fn streaming_subscribe(
        &self,
        request: Request<Streaming<pb::StreamingSubscribeRequest>>,
    ) -> Result<Response<Self::StreamingSubscribeStream>, Status> {
        let inbound = request.into_inner();
        let responses =
            streaming_subscribe::serve(self.broker.clone(), self.limits.clone(), inbound).await?;
        Ok(Response::new(responses))
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let pb::AckRequest {
            topic,
            subscription,
            ack_ids,
        } = request.into_inner();
        let ack_ids = convert::ack_ids(&topic, &subscription, &ack_ids, &self.limits)?;
        self.broker.ack(&topic, &subscription, &ack_ids).await?;
        Ok(Response::new(pb::AckResponse {}))
    }

    async fn nack(
        &self,
        request: Request<pb::NackRequest>,
    ) -> Result<Response<pb::NackResponse>, Status> {
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
