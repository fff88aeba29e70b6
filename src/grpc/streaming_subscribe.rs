//! `StreamingSubscribe`: Subscribe with acks, nacks, deadline changes and
//! flow-control updates on the same stream, so that a client makes no gRPC
//! call per message. Its acks are applied in batches by [`AckStream`].

use super::ack_stream::{AckRequests, AckStream};
use super::convert;
use super::targets::Target;
use crate::auth::{Action, Authorizer, Caller};
use crate::broker::{AckBatch, Broker, FlowControl};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::model::AckConfirmation;
use crate::pb;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

pub type Responses =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::SubscribeResponse, Status>> + Send>>;

/// Opens the stream with its first request, then serves the rest.
pub async fn serve(
    broker: Broker,
    limits: Limits,
    (authorizer, caller): (Authorizer, Caller),
    mut inbound: Streaming<pb::StreamingSubscribeRequest>,
) -> Result<Responses, Status> {
    let first = inbound
        .message()
        .await?
        .ok_or_else(|| Error::invalid("subscribe", "the stream ended before its first request"))?;
    let subscribe = first
        .subscribe
        .clone()
        .ok_or_else(|| Error::invalid("subscribe", "the first request must open the stream"))?;
    authorizer.check(&caller, Action::Subscribe, subscribe.target())?;
    subscribe.check_names()?;
    let names = super::authorized::stream_names(&subscribe);
    let slot = authorizer.open_stream(&caller)?;
    let mut options = convert::subscribe_options(subscribe, &limits)?;
    options.allowed_topics = Some(super::authorized::topics_allowed(
        &authorizer,
        &caller,
        &options.subscription,
    ));
    let stream = (options.topic.clone(), options.subscription.clone());
    let subscription = broker.subscribe(options).await?;
    // Its acks come this way: the stream can tell when a fetch's are all in.
    subscription.control.batches().track();
    // Deliveries end when the stream is stopped; batches not sent by then are
    // given back (see DeliveryBatch).
    let stopped = subscription.control.stopped();
    let (confirmations, confirmed) = mpsc::channel(4);
    let requests = AckStream {
        broker,
        names: stream,
        control: subscription.control.clone(),
        responses: confirmations,
        requests: Requests {
            limits,
            control: subscription.control,
        },
    };
    tokio::spawn(requests.run(first, inbound));
    let deliveries =
        futures::StreamExt::take_until(ReceiverStream::new(subscription.deliveries), stopped)
            .map(convert::deliveries);
    let responses = deliveries.merge(ReceiverStream::new(confirmed));
    Ok(super::authorized::until_revoked(
        responses, authorizer, caller, names, slot,
    ))
}

/// What StreamingSubscribe's requests mean.
struct Requests {
    limits: Limits,
    control: Arc<FlowControl>,
}

impl AckRequests for Requests {
    type Request = pb::StreamingSubscribeRequest;
    type Response = pb::SubscribeResponse;

    fn confirmed(&mut self, confirmation: AckConfirmation) -> pb::SubscribeResponse {
        pb::SubscribeResponse {
            messages: Vec::new(),
            confirmation: Some(convert::ack_confirmation(confirmation)),
            dropped: 0,
        }
    }

    /// Adds a request's ids to the batch and applies its flow-control updates.
    fn take(
        &mut self,
        request: pb::StreamingSubscribeRequest,
        batch: &mut AckBatch,
    ) -> Result<Option<pb::SubscribeResponse>> {
        let pb::StreamingSubscribeRequest {
            subscribe: _,
            ack_ids,
            nack_ids,
            nack_delay,
            modify_deadline_ack_ids,
            modify_deadline,
            max_outstanding_messages,
            max_outstanding_bytes,
            confirm,
        } = request;
        let limits = &self.limits;
        let (messages, bytes) =
            convert::flow_control_update(max_outstanding_messages, max_outstanding_bytes, limits)?;
        if let Some(messages) = messages {
            self.control.set_max_outstanding(messages);
        }
        if let Some(bytes) = bytes {
            self.control.set_max_outstanding_bytes(bytes);
        }
        let delay = convert::nack_delay(nack_delay, limits)?;
        if !modify_deadline_ack_ids.is_empty() {
            let deadline = modify_deadline.ok_or_else(|| {
                Error::invalid(
                    "modify_deadline",
                    "is required with modify_deadline_ack_ids",
                )
            })?;
            let deadline = convert::lease_duration("modify_deadline", deadline, limits, true)?;
            let ids = batch.parse(modify_deadline_ack_ids, confirm);
            if deadline.is_zero() {
                batch
                    .nacks
                    .entry(Some(Duration::ZERO))
                    .or_default()
                    .extend(ids);
            } else {
                batch.modifies.entry(deadline).or_default().extend(ids);
            }
        }
        let ids = batch.parse(ack_ids, confirm);
        batch.acks.extend(ids);
        let ids = batch.parse(nack_ids, confirm);
        batch.nacks.entry(delay).or_default().extend(ids);
        batch.confirm |= confirm;
        Ok(None)
    }
}
