//! `StreamingSubscribe`: Subscribe with acks, nacks, deadline changes and
//! flow-control updates on the same stream, so that a client makes no gRPC
//! call per message. The ids of the requests that arrive while one batch is
//! being applied are applied together next, one script call per kind
//! ([`crate::broker::AckBatch`]).

use super::convert;
use super::targets::Target;
use crate::auth::{Action, Authorizer, Caller};
use crate::broker::{AckBatch, Broker, FlowControl};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::pb;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// Ack ids waiting to be applied past which the server stops reading the stream.
const MAX_WAITING_IDS: usize = 50_000;

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
    let stream = StreamNames {
        topic: options.topic.clone(),
        subscription: options.subscription.clone(),
    };
    let subscription = broker.subscribe(options).await?;
    // Its acks come this way: the stream can tell when a fetch's are all in.
    subscription.control.batches().track();
    // Deliveries end when the stream is stopped; batches not sent by then are
    // given back (see DeliveryBatch).
    let stopped = subscription.control.stopped();
    let (confirmations, confirmed) = mpsc::channel(4);
    let requests = Requests {
        broker,
        limits,
        stream,
        control: subscription.control,
        confirmations,
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

/// The topic and subscription of the stream.
#[derive(Clone)]
struct StreamNames {
    topic: String,
    subscription: String,
}

struct Requests {
    broker: Broker,
    limits: Limits,
    stream: StreamNames,
    control: Arc<FlowControl>,
    confirmations: mpsc::Sender<Result<pb::SubscribeResponse, Status>>,
}

/// A batch of acks being applied, with the confirmation to send, if asked for.
type Applying = BoxFuture<'static, Result<Option<pb::AckConfirmation>>>;

/// Lets a batch being applied finish: it may carry another stream's fetch
/// (see `Carry`), whose deliveries would otherwise wait out their lease.
async fn finish(applying: Option<Applying>) {
    if let Some(applying) = applying {
        let _ = applying.await;
    }
}

impl Requests {
    async fn run(
        self,
        first: pb::StreamingSubscribeRequest,
        mut inbound: Streaming<pb::StreamingSubscribeRequest>,
    ) {
        let mut batch = AckBatch::default();
        let mut applying: Option<Applying> = None;
        let mut open = true;
        if let Err(err) = self.take(first, &mut batch) {
            self.end(err).await;
            return;
        }
        loop {
            if applying.is_none() && !batch.is_empty() {
                let mut next = std::mem::take(&mut batch);
                let batches = self.control.batches();
                batches.resolved(next.leases());
                if !next.acks.is_empty() {
                    next.finished = batches.take_finished(); // else for the next acks
                }
                let (broker, stream) = (self.broker.clone(), self.stream.clone());
                applying = Some(Box::pin(async move {
                    let names = (stream.topic.as_str(), stream.subscription.as_str());
                    let confirmation = broker.apply_ack_batch(names, next).await?;
                    Ok(confirmation.map(convert::ack_confirmation))
                }));
            }
            if !open && applying.is_none() {
                break;
            }
            tokio::select! {
                next = inbound.message(), if open && batch.ids() < MAX_WAITING_IDS => match next {
                    Ok(Some(request)) => {
                        if let Err(err) = self.take(request, &mut batch) {
                            finish(applying).await;
                            self.end(err).await;
                            return;
                        }
                    }
                    // The client is done: no more deliveries (what was fetched
                    // and not sent is given back), apply what it sent, end.
                    Ok(None) | Err(_) => {
                        open = false;
                        self.control.stop();
                    }
                },
                applied = async { applying.as_mut().expect("guarded").await }, if applying.is_some() => {
                    applying = None;
                    match applied {
                        Ok(None) => {}
                        Ok(Some(confirmation)) => {
                            let response = pb::SubscribeResponse {
                                messages: Vec::new(),
                                confirmation: Some(confirmation),
                                dropped: 0,
                            };
                            let _ = self.confirmations.send(Ok(response)).await;
                        }
                        Err(err) => {
                            self.end(err).await;
                            return;
                        }
                    }
                }
                _ = self.confirmations.closed() => {
                    finish(applying).await;
                    break;
                }
            }
        }
        self.control.stop();
    }

    /// Ends the stream with `err`; its unacked messages are redelivered.
    async fn end(&self, err: Error) {
        let _ = self.confirmations.send(Err(err.into())).await;
        self.control.stop();
    }

    /// Adds a request's ids to the batch and applies its flow-control updates.
    fn take(&self, request: pb::StreamingSubscribeRequest, batch: &mut AckBatch) -> Result<()> {
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
        Ok(())
    }
}
