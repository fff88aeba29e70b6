//! `redq.v1.QueueService`: validate and convert, call the broker, convert back.

use super::convert;
use crate::broker::Broker;
use crate::config::Limits;
use crate::pb;
use crate::pb::queue_service_server::QueueService;
use futures::Stream;
use std::pin::Pin;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

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
        let pb::PublishRequest { topic, messages } = request.into_inner();
        convert::check_name("topic", &topic)?;
        let entries = convert::publish_entries(messages, &self.limits)?;
        let message_ids = self.broker.publish(&topic, entries).await?;
        Ok(Response::new(pb::PublishResponse { message_ids }))
    }

    type SubscribeStream = SubscribeStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<SubscribeStream>, Status> {
        let options = convert::subscribe_options(request.into_inner(), &self.limits)?;
        let deliveries = self.broker.subscribe(options).await?;
        let responses = ReceiverStream::new(deliveries).map(|batch| {
            let messages = batch?.into_iter().map(convert::received_message).collect();
            Ok(pb::SubscribeResponse { messages })
        });
        Ok(Response::new(Box::pin(responses)))
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
        let leases = convert::leases(&topic, &subscription, &ack_ids, &self.limits)?;
        self.broker.ack(&topic, &subscription, &leases).await?;
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
        } = request.into_inner();
        let leases = convert::leases(&topic, &subscription, &ack_ids, &self.limits)?;
        self.broker.nack(&topic, &subscription, &leases).await?;
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
        let leases = convert::leases(&topic, &subscription, &ack_ids, &self.limits)?;
        let ack_deadline = ack_deadline
            .ok_or_else(|| crate::error::Error::invalid("ack_deadline", "is required"))?;
        let deadline = convert::lease_duration("ack_deadline", ack_deadline, &self.limits, true)?;
        self.broker
            .modify_ack_deadline(&topic, &subscription, &leases, deadline)
            .await?;
        Ok(Response::new(pb::ModifyAckDeadlineResponse {}))
    }
}
