//! `StreamingSubscribe`: Subscribe with acks, nacks, deadline changes and
//! flow-control updates on the same stream, so that a client makes no gRPC
//! call per message. The ids of the requests that arrive while one batch is
//! being applied are applied together next: one script call per kind.

use super::convert;
use crate::auth::{Action, Authorizer, Caller, Resource};
use crate::broker::ack_id::{self, AckId};
use crate::broker::{Broker, Carry, FlowControl};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::pb;
use crate::store::leases::{self, BatchTimer};
use futures::future::BoxFuture;
use std::collections::BTreeMap;
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
    let names = (subscribe.topic.clone(), subscribe.subscription.clone());
    authorizer.check(
        &caller,
        Action::Subscribe,
        Resource::subscription(&names.0, &names.1),
    )?;
    let slot = authorizer.open_stream(&caller)?;
    let options = convert::subscribe_options(subscribe, &limits)?;
    let stream = Lease {
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
struct Lease {
    topic: String,
    subscription: String,
}

struct Requests {
    broker: Broker,
    limits: Limits,
    stream: Lease,
    control: Arc<FlowControl>,
    confirmations: mpsc::Sender<Result<pb::SubscribeResponse, Status>>,
}

/// Ack ids gathered from requests, to apply together.
#[derive(Default)]
struct Batch {
    acks: Vec<AckId>,
    /// By nack delay (None: the retry backoff).
    nacks: BTreeMap<Option<Duration>, Vec<AckId>>,
    /// By new deadline.
    modifies: BTreeMap<Duration, Vec<AckId>>,
    /// Whether some request of the batch asked for a confirmation.
    confirm: bool,
    confirmation: pb::AckConfirmation,
    /// The stream's batch timers these acks finish (see `OpenBatches`).
    finished: Vec<BatchTimer>,
}

impl Batch {
    fn ids(&self) -> usize {
        self.acks.len()
            + self.nacks.values().map(Vec::len).sum::<usize>()
            + self.modifies.values().map(Vec::len).sum::<usize>()
    }

    /// Every delivery the batch acks, nacks or extends.
    fn leases(&self) -> impl Iterator<Item = &leases::Lease> {
        let nacks = self.nacks.values().flatten();
        let modifies = self.modifies.values().flatten();
        self.acks
            .iter()
            .chain(nacks)
            .chain(modifies)
            .map(|id| &id.lease)
    }

    /// Nothing to apply, and no confirmation asked for (a request with
    /// `confirm` and no ids still gets one: a barrier for the client).
    fn is_empty(&self) -> bool {
        self.ids() == 0 && self.confirmation.invalid_ids.is_empty() && !self.confirm
    }
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
        let mut batch = Batch::default();
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
                applying = Some(Box::pin(apply(
                    self.broker.clone(),
                    self.stream.clone(),
                    next,
                )));
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
    fn take(&self, request: pb::StreamingSubscribeRequest, batch: &mut Batch) -> Result<()> {
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
            let ids = parse(modify_deadline_ack_ids, batch, confirm);
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
        let ids = parse(ack_ids, batch, confirm);
        batch.acks.extend(ids);
        let ids = parse(nack_ids, batch, confirm);
        batch.nacks.entry(delay).or_default().extend(ids);
        batch.confirm |= confirm;
        Ok(())
    }
}

/// The ack ids redq issued; the others are reported as invalid when the
/// request asks for a confirmation, and ignored otherwise.
fn parse(ids: Vec<String>, batch: &mut Batch, confirm: bool) -> Vec<AckId> {
    let mut parsed = Vec::with_capacity(ids.len());
    for id in ids {
        match ack_id::parse(&id) {
            Some(ack_id) => parsed.push(ack_id),
            None if confirm => batch.confirmation.invalid_ids.push(id),
            None => {}
        }
    }
    parsed
}

/// Applies a batch: one ack call, one nack call per delay, one extension per
/// deadline. Returns the confirmation, when one was asked for.
async fn apply(broker: Broker, stream: Lease, batch: Batch) -> Result<Option<pb::AckConfirmation>> {
    let Lease {
        topic,
        subscription,
    } = &stream;
    let Batch {
        acks,
        nacks,
        modifies,
        confirm,
        mut confirmation,
        finished,
    } = batch;
    if !acks.is_empty() {
        let names = (topic.as_str(), subscription.as_str());
        if confirm {
            let applied = broker
                .ack_confirmed(names, &acks, finished, Carry::Fetches)
                .await?;
            sort(
                acks,
                applied,
                &mut confirmation.acked_ids,
                &mut confirmation.lost_ids,
            );
        } else {
            broker.ack(names, &acks, finished, Carry::Fetches).await?;
        }
    }
    for (delay, ids) in nacks {
        if ids.is_empty() {
            continue;
        }
        let lost = lost(broker.nack(topic, subscription, &ids, delay).await)?;
        if confirm {
            let applied = ids.iter().map(|id| !lost.contains(&id.text)).collect();
            sort(
                ids,
                applied,
                &mut confirmation.nacked_ids,
                &mut confirmation.lost_ids,
            );
        }
    }
    for (deadline, ids) in modifies {
        let lost = lost(
            broker
                .modify_ack_deadline(topic, subscription, &ids, deadline)
                .await,
        )?;
        if confirm {
            let applied = ids.iter().map(|id| !lost.contains(&id.text)).collect();
            sort(
                ids,
                applied,
                &mut confirmation.modified_ids,
                &mut confirmation.lost_ids,
            );
        }
    }
    Ok(confirm.then_some(confirmation))
}

/// The ack ids a lease call found lost; other errors end the stream.
fn lost(result: Result<()>) -> Result<std::collections::HashSet<String>> {
    match result {
        Ok(()) => Ok(Default::default()),
        Err(Error::LeaseLost(lost)) => Ok(lost.into_iter().collect()),
        Err(err) => Err(err),
    }
}

fn sort(ids: Vec<AckId>, applied: Vec<bool>, done: &mut Vec<String>, lost: &mut Vec<String>) {
    for (id, applied) in ids.into_iter().zip(applied) {
        if applied {
            done.push(id.text)
        } else {
            lost.push(id.text)
        }
    }
}
