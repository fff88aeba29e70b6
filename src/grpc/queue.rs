//! `redq.v1.QueueService`: validate and convert, call the broker, convert back.

use super::targets::Target;
use super::{authorized, convert, publish_stream, streaming_subscribe};
use crate::auth::{Action, Authorizer, Caller};
use crate::broker::{Broker, Carry};
use crate::config::Limits;
use crate::error::Error;
use crate::model::{Due, PublishBatch};
use crate::pb;
use crate::pb::queue_service_server::QueueService;
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

    /// The request, once the caller may publish `messages` to its topic and
    /// its names are valid: asked before anything else.
    fn admit_publisher<T: Target>(
        &self,
        request: Request<T>,
        messages: usize,
    ) -> Result<T, Status> {
        let resource = request.get_ref().target();
        let caller = self
            .authorizer
            .authorize(&request, Action::Publish, resource)?;
        self.authorizer.take_publish_rate(&caller, messages)?;
        let request = request.into_inner();
        request.check_names()?;
        Ok(request)
    }

    /// The request and its caller, once the caller may subscribe to (and
    /// ack on) its subscription and its names are valid.
    fn admit_subscriber<T: Target>(&self, request: Request<T>) -> Result<(Caller, T), Status> {
        let resource = request.get_ref().target();
        let caller = self
            .authorizer
            .authorize(&request, Action::Subscribe, resource)?;
        let request = request.into_inner();
        request.check_names()?;
        Ok((caller, request))
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
        let messages = request.get_ref().messages.len();
        let pb::PublishRequest {
            topic,
            messages,
            dedupe_id,
        } = self.admit_publisher(request, messages)?;
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
        let pb::ScheduleDelayedRequest {
            topic,
            message,
            deliver_at,
            delay,
        } = self.admit_publisher(request, 1)?;
        let started = Instant::now();
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
        let pb::CancelScheduledRequest { topic, message_id } = self.admit_publisher(request, 0)?;
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
        } = self.admit_publisher(request, 0)?;
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
        let (caller, request) = self.admit_subscriber(request)?;
        let names = authorized::stream_names(&request);
        let slot = self.authorizer.open_stream(&caller)?;
        let mut options = convert::subscribe_options(request, &self.limits)?;
        options.allowed_topics = Some(authorized::topics_allowed(
            &self.authorizer,
            &caller,
            &options.subscription,
        ));
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
        let (
            _,
            pb::AckRequest {
                topic,
                subscription,
                ack_ids,
            },
        ) = self.admit_subscriber(request)?;
        let ack_ids = convert::ack_ids(&ack_ids, &self.limits)?;
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
        let (
            _,
            pb::NackRequest {
                topic,
                subscription,
                ack_ids,
                delay,
            },
        ) = self.admit_subscriber(request)?;
        let ack_ids = convert::ack_ids(&ack_ids, &self.limits)?;
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
        let (
            _,
            pb::ModifyAckDeadlineRequest {
                topic,
                subscription,
                ack_ids,
                ack_deadline,
            },
        ) = self.admit_subscriber(request)?;
        let ack_ids = convert::ack_ids(&ack_ids, &self.limits)?;
        let ack_deadline =
            ack_deadline.ok_or_else(|| Error::invalid("ack_deadline", "is required"))?;
        let deadline = convert::lease_duration("ack_deadline", ack_deadline, &self.limits, true)?;
        self.broker
            .modify_ack_deadline(&topic, &subscription, &ack_ids, deadline)
            .await?;
        Ok(Response::new(pb::ModifyAckDeadlineResponse {}))
    }
}
