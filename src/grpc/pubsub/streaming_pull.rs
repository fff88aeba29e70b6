//! `StreamingPull`: deliveries out, acks and deadline changes in, on one
//! bidirectional stream. The acks are applied in batches by
//! [`AckStream`], as on redq's StreamingSubscribe.
//!
//! What the official clients need of it: `subscription_properties` in every
//! response; an answer to a heartbeat (a request with no ids) when the
//! client speaks `protocol_version` 1 or later, or Go's client reopens a
//! stream silent for 15 s; and never an end with `OK`, after which the
//! Python and Node clients stop for good: a stream that ends for any other
//! reason than an error ends with `UNAVAILABLE`, and the client reconnects.

use super::dead_letters::FORWARD_INTERVAL;
use super::names::{Collection, ResourceName};
use super::ps::streaming_pull_response::{
    AcknowledgeConfirmation, ModifyAckDeadlineConfirmation, SubscriptionProperties,
};
use super::records::Subscribed;
use super::{PubSubApi, convert, ps};
use crate::auth::{Action, Resource};
use crate::broker::{AckBatch, SubscribeOptions};
use crate::error::{Error, Result};
use crate::grpc::ack_stream::{AckRequests, AckStream};
use crate::grpc::authorized;
use crate::model::{AckConfirmation, GroupStart};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Status, Streaming};

pub type PullStream = authorized::Guarded<ps::StreamingPullResponse>;

/// Opens the stream with its first request, then serves the rest.
pub async fn serve(
    api: PubSubApi,
    request: Request<Streaming<ps::StreamingPullRequest>>,
) -> Result<PullStream, Status> {
    let caller = api.authorizer.authenticate(&request)?;
    let mut inbound = request.into_inner();
    let first = inbound.message().await?.ok_or_else(|| {
        Error::invalid("subscription", "the stream ended before its first request")
    })?;
    let name = ResourceName::parse(
        "subscription",
        &first.subscription,
        Collection::Subscriptions,
    )?;
    let subscribed = api.subscribed(&name).await?;
    let (topic, subscription) = subscribed.location()?;
    let names = (topic.to_owned(), subscription.to_owned());
    api.authorizer.check(
        &caller,
        Action::Subscribe,
        Resource::subscription(topic, subscription),
    )?;
    let slot = api.authorizer.open_stream(&caller)?;
    let ack_deadline = convert::ack_deadline(
        "stream_ack_deadline_seconds",
        first.stream_ack_deadline_seconds,
    )?;
    let limits = &api.limits;
    let record = &subscribed.record;
    let client = api.client_consumers.take(subscription, &first.client_id);
    let options = SubscribeOptions {
        topic: topic.to_owned(),
        pattern: None,
        allowed_topics: None,
        subscription: subscription.to_owned(),
        consumer: client
            .as_ref()
            .map_or_else(String::new, |c| c.consumer.clone()),
        named_consumer: client.is_some(),
        // Zero or less: no limit of the client's, redq's own then.
        max_outstanding: match first.max_outstanding_messages {
            n if n <= 0 => limits.max_outstanding_limit,
            n => n.min(i64::from(limits.max_outstanding_limit)) as u32,
        },
        max_outstanding_bytes: limits.default_max_outstanding_bytes,
        // Zero or less: no limit.
        max_unacked_bytes: first.max_outstanding_bytes.max(0) as u64,
        ack_deadline: Some(ack_deadline),
        start: GroupStart::Latest,
        retry: convert::subscription_settings(record).retry,
        message_ordering: record.enable_message_ordering,
    };
    let subscription = api.broker.subscribe(options).await?;
    if let Some(client) = client {
        tokio::spawn(client.release_when(subscription.control.stopped()));
    }
    // Its acks come this way: the stream can tell when a fetch's are all in.
    subscription.control.batches().track();
    let stopped = subscription.control.stopped();
    if record.dead_letter_policy.is_some() {
        tokio::spawn(forward_while_open(
            api.clone(),
            name.clone(),
            subscribed.clone(),
            subscription.control.stopped(),
        ));
    }
    let properties = convert::properties(record);
    let with_attempt = record.dead_letter_policy.is_some();
    let (answers, answered) = mpsc::channel(4);
    let requests = AckStream {
        broker: api.broker.clone(),
        names: names.clone(),
        control: subscription.control.clone(),
        responses: answers,
        requests: PullRequests {
            properties,
            exactly_once: record.enable_exactly_once_delivery,
            heartbeats: first.protocol_version >= 1,
            acks_to_confirm: HashSet::new(),
        },
    };
    tokio::spawn(requests.run(first, inbound));
    let deliveries = futures::StreamExt::flat_map(
        futures::StreamExt::take_until(ReceiverStream::new(subscription.deliveries), stopped),
        move |batch| {
            let responses = match batch {
                Ok(batch) => {
                    let messages = batch
                        .into_deliveries()
                        .into_iter()
                        .map(|delivery| convert::received_message(delivery, with_attempt))
                        .collect();
                    convert::responses(messages, properties)
                        .into_iter()
                        .map(Ok)
                        .collect()
                }
                Err(err) => vec![Err(Status::from(err))],
            };
            tokio_stream::iter(responses)
        },
    );
    // The deliveries end when the stream stops (the client closed it, or the
    // server is shutting down): the response stream ends there, with an
    // error even then.
    let deliveries = deliveries.chain(tokio_stream::once(Err(Status::unavailable(
        "the stream ended (the server is shutting down, or the stream was closed); open a new one",
    ))));
    let responses = deliveries.merge(ReceiverStream::new(answered));
    let responses: Pin<Box<dyn futures::Stream<Item = _> + Send>> = Box::pin(responses);
    Ok(authorized::until_revoked(
        responses,
        api.authorizer.clone(),
        caller,
        names,
        slot,
    ))
}

/// How long a closed stream's consumer waits for a stream with the same
/// `client_id`: the longest ack deadline, after which it holds no lease.
const CLIENT_CONSUMER_TTL: Duration = Duration::from_secs(600);

/// The consumers of the streams that named a `client_id`, by subscription
/// and client id: a stream that reconnects with the same id takes over its
/// closed predecessor's consumer, so the leases that stream still holds
/// count against the new stream's `max_outstanding_messages` (its room), as
/// Google's service does. Per replica: a stream that reconnects to another
/// replica, or opens while another stream of the id is open here, gets a
/// consumer of its own.
#[derive(Clone, Default)]
pub struct ClientConsumers(Arc<Mutex<HashMap<(String, String), ClientConsumer>>>);

struct ClientConsumer {
    consumer: String,
    /// A stream uses it now.
    open: bool,
    closed_at: Instant,
}

/// A consumer taken for one stream, given back when it closes.
pub struct TakenConsumer {
    pub consumer: String,
    key: (String, String),
    consumers: ClientConsumers,
}

impl ClientConsumers {
    /// The consumer of a stream of `subscription` that named `client_id`;
    /// None without one, or while another stream of the id is open here.
    fn take(&self, subscription: &str, client_id: &str) -> Option<TakenConsumer> {
        if client_id.is_empty() {
            return None;
        }
        let key = (subscription.to_owned(), client_id.to_owned());
        let mut consumers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        consumers.retain(|_, c| c.open || c.closed_at.elapsed() < CLIENT_CONSUMER_TTL);
        let entry = consumers
            .entry(key.clone())
            .or_insert_with(|| ClientConsumer {
                // Ids are the client's: a digest keeps the name short and safe.
                consumer: format!("client-{}", &hex::encode(Sha256::digest(client_id))[..16]),
                open: false,
                closed_at: Instant::now(),
            });
        if entry.open {
            return None;
        }
        entry.open = true;
        Some(TakenConsumer {
            consumer: entry.consumer.clone(),
            key,
            consumers: self.clone(),
        })
    }
}

impl TakenConsumer {
    async fn release_when(self, closed: impl std::future::Future<Output = ()>) {
        closed.await;
        let mut consumers = self.consumers.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = consumers.get_mut(&self.key) {
            entry.open = false;
            entry.closed_at = Instant::now();
        }
    }
}

/// Forwards the subscription's dead letters every [`FORWARD_INTERVAL`]
/// until the stream stops: its fetches settle expired leases, and its nacks
/// come on the stream.
async fn forward_while_open(
    api: PubSubApi,
    name: ResourceName,
    subscribed: Arc<Subscribed>,
    stopped: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stopped);
    let mut ticks = tokio::time::interval(FORWARD_INTERVAL);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = ticks.tick() => api.forward_dead_letters_soon(&name, subscribed.clone()),
        }
    }
}

/// What StreamingPull's requests mean.
struct PullRequests {
    properties: SubscriptionProperties,
    /// Acks and deadline changes are confirmed, each ack id as applied or not.
    exactly_once: bool,
    /// The client expects an answer to its heartbeats.
    heartbeats: bool,
    /// Exactly-once: ack ids sent to be acked, not yet confirmed; the rest
    /// of a confirmation's ids were deadline changes.
    acks_to_confirm: HashSet<String>,
}

impl AckRequests for PullRequests {
    type Request = ps::StreamingPullRequest;
    type Response = ps::StreamingPullResponse;

    fn take(
        &mut self,
        request: ps::StreamingPullRequest,
        batch: &mut AckBatch,
    ) -> Result<Option<ps::StreamingPullResponse>> {
        let ps::StreamingPullRequest {
            ack_ids,
            modify_deadline_seconds,
            modify_deadline_ack_ids,
            stream_ack_deadline_seconds,
            ..
        } = request;
        if modify_deadline_seconds.len() != modify_deadline_ack_ids.len() {
            return Err(Error::invalid(
                "modify_deadline_seconds",
                "must have one entry per modify_deadline_ack_ids",
            ));
        }
        if stream_ack_deadline_seconds != 0 {
            // Checked, not applied: the client extends its leases itself.
            convert::ack_deadline("stream_ack_deadline_seconds", stream_ack_deadline_seconds)?;
        }
        let heartbeat = ack_ids.is_empty() && modify_deadline_ack_ids.is_empty();
        let confirm = self.exactly_once;
        for (seconds, id) in modify_deadline_seconds
            .into_iter()
            .zip(modify_deadline_ack_ids)
        {
            let deadline = convert::modify_deadline("modify_deadline_seconds", seconds)?;
            let ids = batch.parse(vec![id], confirm);
            if deadline.is_zero() {
                // A nack: redelivered after the retry policy's backoff, if any.
                batch.nacks.entry(None).or_default().extend(ids);
            } else {
                batch.modifies.entry(deadline).or_default().extend(ids);
            }
        }
        if confirm {
            self.acks_to_confirm.extend(ack_ids.iter().cloned());
        }
        let ids = batch.parse(ack_ids, confirm);
        batch.acks.extend(ids);
        batch.confirm |= confirm && !heartbeat;
        Ok(
            (heartbeat && self.heartbeats).then(|| ps::StreamingPullResponse {
                subscription_properties: Some(self.properties),
                ..Default::default()
            }),
        )
    }

    fn confirmed(&mut self, confirmation: AckConfirmation) -> ps::StreamingPullResponse {
        let AckConfirmation {
            acked_ids,
            nacked_ids,
            modified_ids,
            lost_ids,
            invalid_ids,
        } = confirmation;
        let mut acks = AcknowledgeConfirmation::default();
        let mut modifies = ModifyAckDeadlineConfirmation::default();
        for id in acked_ids {
            self.acks_to_confirm.remove(&id);
            acks.ack_ids.push(id);
        }
        modifies.ack_ids.extend(nacked_ids);
        modifies.ack_ids.extend(modified_ids);
        for id in lost_ids.into_iter().chain(invalid_ids) {
            if self.acks_to_confirm.remove(&id) {
                acks.invalid_ack_ids.push(id);
            } else {
                modifies.invalid_ack_ids.push(id);
            }
        }
        ps::StreamingPullResponse {
            acknowledge_confirmation: Some(acks),
            modify_ack_deadline_confirmation: Some(modifies),
            subscription_properties: Some(self.properties),
            ..Default::default()
        }
    }
}
