//! The domain: publishing (now, scheduled, deduplicated) to topics,
//! delivering to subscriptions, and the lease operations (ack, nack, extend)
//! that any replica can serve.

pub mod ack_batches;
pub mod ack_id;
mod admin;
mod browse;
mod budget;
mod delivery;
mod ephemeral;
mod handoff;
mod kinds;
mod list;
pub use handoff::Carry;
mod open_batches;
pub use open_batches::OpenBatches;
pub mod promoter;
pub mod publish_batches;
mod pubsub_records;
pub mod registry_repair;
pub mod retention;
mod samples;
pub mod scheduler;
mod schedules;
mod sessions;
pub mod wakeups;

pub use ack_batches::AckBatch;
pub use admin::{DEFAULT_REDRIVE_RATE, SeekTarget, SubscriptionView, TopicView};
pub use delivery::{Delivery, DeliveryBatch, FlowControl, SubscribeOptions, TopicFilter};
use kinds::Call;
pub use kinds::{check_settings_for_kind, not_for_kind};
pub use samples::{SAMPLE_INTERVAL, Sample};

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::model::{
    BatchTimer, DEFAULT_MAX_BLOCKED, DeadLetterPage, Due, Filter, Lease, NewMessage, PublishBatch,
    Published, Rescheduled, SubscriptionSettings, TopicKind, TopicSettings, parse_entry_id,
};
use crate::store::leases::{AckRequest, Acked, Ended};
use crate::store::{Store, TopicKeys};
use ack_id::AckId;
use budget::{ByteBudget, StreamBudget};
use delivery::DeliveryLoop;
use promoter::{Promoter, PromotionTimers};
use publish_batches::PublishBatches;
use retention::MemoryGuard;
use scheduler::{RunTimers, Scheduler};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wakeups::Wakeups;

/// Consumers that hold nothing and were idle this long are removed from
/// their group when a stream of the subscription opens.
const PRUNE_IDLE_CONSUMERS: Duration = Duration::from_secs(600);

/// Responses buffered per Subscribe stream before the loop waits for the client.
const STREAM_BUFFER: usize = 4;

/// An open stream of deliveries.
pub struct Subscription {
    /// Batches of deliveries, or the error that ended the stream.
    pub deliveries: mpsc::Receiver<Result<DeliveryBatch>>,
    pub control: Arc<FlowControl>,
}

/// Cheap to clone; every clone shares the same Redis pool and wake-ups.
#[derive(Clone)]
pub struct Broker {
    store: Store,
    wakeups: Wakeups,
    promotions: Arc<PromotionTimers>,
    /// When this replica's scheduler next has recurring schedules to run.
    run_timers: Arc<RunTimers>,
    /// Topics registered lately, so that publishing does not register on every call.
    known_topics: Arc<Mutex<HashMap<String, Instant>>>,
    dedupe_window: Duration,
    /// How long before their due time scheduled messages are promoted (and
    /// then held by the delivery loops until due).
    promote_ahead: Duration,
    /// How long acks of a stream with room wait for a publish to carry them.
    pub(crate) ack_ride_wait: Duration,
    default_ack_deadline: Duration,
    /// The most bytes one message can have, by the server's limits.
    max_message_bytes: u64,
    /// What all Subscribe streams of this replica may hold, fetched but not yet sent.
    subscribe_buffer: Arc<ByteBudget>,
    /// This worker's publish writers, one per topic.
    batches: Arc<PublishBatches>,
    /// Topics' settings and kinds, as read lately (see [`kinds`]).
    topic_settings: Arc<Mutex<HashMap<String, kinds::ReadConfig>>>,
    /// The kinds other than STREAM this replica saw topics have.
    known_kinds: Arc<Mutex<HashMap<String, TopicKind>>>,
    /// This replica's Redis subscriptions for EPHEMERAL topics.
    ephemeral: ephemeral::Hub,
    /// Per LIST topic with local streams, what waits for its list's elements.
    list_waiters: Arc<list::ListWaiters>,
    memory: MemoryGuard,
    shutdown: CancellationToken,
    metrics: Metrics,
}

/// How long a replica uses topic settings it read before reading them again.
const TOPIC_SETTINGS_TTL: Duration = Duration::from_secs(5);

/// Settings of the broker that come from the server's configuration.
#[derive(Debug, Clone, Copy)]
pub struct BrokerSettings {
    pub dedupe_window: Duration,
    pub promote_ahead: Duration,
    /// How long acks of a stream with room wait for a publish to carry them
    /// (see [`handoff`]); zero: not at all.
    pub ack_ride_wait: Duration,
    /// Ack deadline of streams whose request and subscription set none.
    pub default_ack_deadline: Duration,
    /// The most bytes one message can have (payload, attributes, ordering key).
    pub max_message_bytes: u64,
    /// Bytes all Subscribe streams of the replica may hold, fetched but not yet sent.
    pub subscribe_buffer_bytes: u64,
}

impl Broker {
    pub fn new(
        store: Store,
        settings: BrokerSettings,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) -> Self {
        let promotions = Arc::new(PromotionTimers::new(settings.promote_ahead));
        let ephemeral = ephemeral::Hub::new(store.clone(), shutdown.clone());
        Self {
            wakeups: Wakeups::new(store.clone(), promotions.clone()),
            promotions,
            run_timers: Arc::default(),
            store,
            known_topics: Arc::default(),
            dedupe_window: settings.dedupe_window,
            promote_ahead: settings.promote_ahead,
            ack_ride_wait: settings.ack_ride_wait,
            default_ack_deadline: settings.default_ack_deadline,
            max_message_bytes: settings.max_message_bytes,
            subscribe_buffer: ByteBudget::new(settings.subscribe_buffer_bytes),
            batches: Arc::default(),
            topic_settings: Arc::default(),
            known_kinds: Arc::default(),
            ephemeral,
            list_waiters: Arc::default(),
            memory: MemoryGuard::default(),
            shutdown,
            metrics,
        }
    }

    /// This broker, sending client calls through `store` (the same Redis,
    /// on a connection of a worker's own).
    pub fn with_store(&self, store: Store) -> Self {
        Self {
            store,
            batches: Arc::default(),
            ..self.clone()
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Cancelled when the server starts shutting down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    /// Whether Redis is too full to publish; updated by [`MemoryGuard::run`].
    pub fn memory_guard(&self) -> MemoryGuard {
        self.memory.clone()
    }

    /// The background loop that promotes this broker's scheduled messages.
    pub fn promoter(&self) -> Promoter {
        Promoter::new(self.store.clone(), self.promotions.clone())
    }

    /// The background loop that runs recurring schedules.
    pub fn scheduler(&self) -> Scheduler {
        Scheduler::new(self.clone())
    }

    /// Publishes messages to `topic`, creating it on first use: appended now,
    /// or scheduled when due later. Results in request order.
    ///
    /// Unary Publish comes this way, not through [`Self::publish_batched`]:
    /// a call its client may cancel must carry no other stream's fetch (see
    /// [`Carry`]). The publish writers serve PublishStream, whose requests
    /// they also batch per topic.
    ///
    /// The spans of calls made per message are at debug level: at info, their
    /// bookkeeping took about 8 % of a unary publish, and nothing inside them
    /// logs at info or above (errors are logged where they become a status).
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic))]
    pub async fn publish(&self, topic: &str, request: PublishBatch) -> Result<Vec<Published>> {
        let (settings, kind, dedupe_window) = self.before_publish(topic).await?;
        check_payloads(&settings, &request.messages)?;
        if kind != TopicKind::Stream {
            return self
                .publish_to_kind(topic, &kind, request, dedupe_window)
                .await;
        }
        let published = self
            .store
            .publish(&TopicKeys::new(topic), &[request], dedupe_window)
            .await?
            .pop()
            .ok_or_else(|| Error::Corrupt("publish reply without a result".into()))??;
        self.after_publish(topic, &published).await?;
        Ok(published)
    }

    /// Queues messages to be published with the other requests of the topic
    /// that arrive meanwhile (see [`publish_batches`]); the reply comes when
    /// they are written. Results in request order.
    pub fn publish_batched(&self, topic: &str, request: PublishBatch) -> publish_batches::Reply {
        self.batches.submit(self, topic, request)
    }

    /// Publishes to an EPHEMERAL or LIST topic.
    async fn publish_to_kind(
        &self,
        topic: &str,
        kind: &TopicKind,
        request: PublishBatch,
        dedupe_window: Duration,
    ) -> Result<Vec<Published>> {
        let published = match kind {
            TopicKind::Stream => unreachable!("stream topics publish to their stream"),
            TopicKind::Ephemeral => {
                self.publish_ephemeral(topic, request, dedupe_window)
                    .await?
            }
            TopicKind::List { key } => self.publish_list(topic, key, request).await?,
        };
        self.after_publish(topic, &published).await?;
        Ok(published)
    }

    /// What every publish checks first: Redis has room, the topic is
    /// registered; returns its settings, kind and dedupe window.
    async fn before_publish(&self, topic: &str) -> Result<(TopicSettings, TopicKind, Duration)> {
        if self.memory.is_full() {
            return Err(Error::ResourceExhausted(
                "redis is close to its memory limit; publishing is paused".into(),
            ));
        }
        self.register_topic(topic).await?;
        let (settings, kind) = self.topic_config(topic).await?;
        let dedupe_window = settings.dedupe_window.unwrap_or(self.dedupe_window);
        Ok((settings, kind, dedupe_window))
    }

    /// Counts what was published, wakes the local streams of the topic and
    /// sets the wake-ups of scheduled messages.
    async fn after_publish(&self, topic: &str, published: &[Published]) -> Result<()> {
        self.metrics.published(topic, published);
        self.wakeups.entries_appended(topic, published);
        if let Some(first_due) = published.iter().filter_map(|p| p.scheduled_in).min() {
            self.wakeups.scheduled(topic, first_due).await?;
        }
        Ok(())
    }

    /// Cancels a scheduled message; false when it was delivered (or is unknown).
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic))]
    pub async fn cancel_scheduled(&self, topic: &str, message_id: &str) -> Result<bool> {
        self.store
            .cancel_scheduled(&TopicKeys::new(topic), message_id)
            .await
    }

    /// Moves a scheduled message to a new due time; None when it was
    /// delivered, cancelled or is unknown.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic))]
    pub async fn reschedule(
        &self,
        topic: &str,
        message_id: &str,
        due: Due,
    ) -> Result<Option<Rescheduled>> {
        let rescheduled = self
            .store
            .reschedule(&TopicKeys::new(topic), message_id, due)
            .await?;
        if let Some(rescheduled) = rescheduled {
            self.wakeups.scheduled(topic, rescheduled.due_in).await?;
        }
        Ok(rescheduled)
    }

    /// A page of a subscription's dead letters, oldest first.
    #[tracing::instrument(skip_all, fields(topic = %topic, subscription = %subscription))]
    pub async fn dead_letters(
        &self,
        topic: &str,
        subscription: &str,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<DeadLetterPage> {
        self.kind_for(topic, Call::DeadLetters).await?;
        self.store
            .dead_letters(&TopicKeys::new(topic), subscription, after, page_size)
            .await
    }

    /// Opens a stream of deliveries for a new consumer of the subscription,
    /// creating the subscription on first use.
    #[tracing::instrument(skip_all, fields(topic = %options.topic, subscription = %options.subscription))]
    pub async fn subscribe(&self, options: SubscribeOptions) -> Result<Subscription> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        if options.pattern.is_some() {
            return self.subscribe_ephemeral(options).await;
        }
        let kind = self.kind_for(&options.topic, Call::Subscribe).await?;
        if kind != TopicKind::Stream && options.message_ordering {
            return Err(not_for_kind(
                "enable_message_ordering",
                "Message ordering",
                &kind,
            ));
        }
        match kind {
            TopicKind::Stream => {
                let keys = TopicKeys::new(&options.topic);
                self.subscribe_stream(options, keys, None).await
            }
            TopicKind::Ephemeral => self.subscribe_ephemeral(options).await,
            TopicKind::List { key } => self.subscribe_list(options, &key).await,
        }
    }

    /// Opens a stream of deliveries from the topic stream of `keys`, creating
    /// the subscription on first use; on a LIST topic, with its hold on the
    /// topic's `list_waiter`.
    async fn subscribe_stream(
        &self,
        options: SubscribeOptions,
        keys: TopicKeys,
        list_waiter: Option<list::WaiterHandle>,
    ) -> Result<Subscription> {
        self.register_topic(&options.topic).await?;
        let defaults = SubscriptionSettings {
            ack_deadline: None,
            retry: options.retry,
            dead_lettering: true,
            message_ordering: options.message_ordering,
            max_blocked: DEFAULT_MAX_BLOCKED,
            filter: String::new(),
            limits: Default::default(),
        };
        self.store
            .ensure_subscription(&keys, &options.subscription, options.start, &defaults)
            .await?;
        let stored = self
            .store
            .subscription_settings(&keys, &options.subscription)
            .await?
            .unwrap_or(defaults);
        if options.message_ordering && !stored.message_ordering {
            return Err(Error::FailedPrecondition {
                field: "enable_message_ordering".into(),
                reason: "the subscription exists without message ordering, which is fixed at its creation".into(),
            });
        }
        // The stream's own deadline, else the subscription's, else the server's.
        let ack_deadline = options
            .ack_deadline
            .or(stored.ack_deadline)
            .unwrap_or(self.default_ack_deadline);
        if let Err(err) = self
            .store
            .prune_consumers(&keys, &options.subscription, PRUNE_IDLE_CONSUMERS)
            .await
        {
            tracing::debug!(error = ?err, "could not prune idle consumers");
        }
        let filter = match stored.filter.as_str() {
            "" => None,
            text => Some(Filter::parse(text).map_err(|reason| {
                Error::Corrupt(format!("the subscription's filter: {reason}"))
            })?),
        };
        let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
        let consumer = if options.named_consumer {
            options.consumer.clone()
        } else {
            unique_consumer_name(&options.consumer)
        };
        let control = self.flow_control(&options, &consumer);
        tokio::spawn(
            DeliveryLoop {
                broker: self.clone(),
                options,
                ordered: stored.message_ordering,
                ack_deadline,
                consumer,
                control: control.clone(),
                sender,
                unsent: Arc::default(),
                keys,
                list_waiter,
                filter,
            }
            .run(),
        );
        Ok(Subscription {
            deliveries: receiver,
            control,
        })
    }

    /// Acknowledges deliveries. Ack ids that are not current (unknown,
    /// already acked, nacked or redelivered since) or were issued for another
    /// subscription are ignored and counted, never applied; on an ordered
    /// subscription they are refused as well ([`Error::LeaseLost`]), and the
    /// others applied. `finished`: see [`AckRequest::finished`].
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic, subscription = %subscription))]
    pub async fn ack(
        &self,
        (topic, subscription): (&str, &str),
        ack_ids: &[AckId],
        finished: Vec<BatchTimer>,
        carry: Carry,
    ) -> Result<()> {
        let kind = self.kind_for(topic, Call::Ack).await?;
        let keys = TopicKeys::of_kind(topic, &kind);
        let (acked, ours) = self
            .apply_acks((&keys, subscription), ack_ids, (false, finished), carry)
            .await?;
        if acked.ordered && acked.count < ack_ids.len() as u64 {
            let applied = applied_acks(ack_ids, &ours, acked.leases);
            return lost_leases(ack_ids, &vec![true; ack_ids.len()], &applied);
        }
        Ok(())
    }

    /// Like [`Self::ack`], telling for each ack id whether it was applied
    /// (and refusing none: the caller reports them).
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic, subscription = %subscription))]
    pub async fn ack_confirmed(
        &self,
        (topic, subscription): (&str, &str),
        ack_ids: &[AckId],
        finished: Vec<BatchTimer>,
        carry: Carry,
    ) -> Result<Vec<bool>> {
        let kind = self.kind_for(topic, Call::Ack).await?;
        let keys = TopicKeys::of_kind(topic, &kind);
        let (acked, ours) = self
            .apply_acks((&keys, subscription), ack_ids, (true, finished), carry)
            .await?;
        Ok(applied_acks(ack_ids, &ours, acked.leases))
    }

    /// Acks the deliveries of `ack_ids` issued for this subscription (with
    /// their entry ids when `listed`), with the fetches of the full streams
    /// whose room that frees right behind if it may `carry` them (see
    /// [`handoff`]); counts the call, and wakes the
    /// other streams whose room it freed and those that may take the entries
    /// it handed ordering keys to. Returns which ack ids were issued here.
    async fn apply_acks(
        &self,
        (keys, subscription): (&TopicKeys, &str),
        ack_ids: &[AckId],
        (listed, finished): (bool, Vec<BatchTimer>),
        carry: Carry,
    ) -> Result<(Acked, Vec<bool>)> {
        let topic = keys.topic();
        let (leases, ours) = issued_for(ack_ids, topic, subscription);
        let consumers: Vec<String> = leases.iter().map(|l| l.consumer.clone()).collect();
        let acks = AckRequest {
            leases,
            listed,
            finished,
        };
        let (acked, carried) = self.ack_carrying((keys, subscription), acks, carry).await?;
        self.metrics.acked(topic, subscription, acked.count);
        self.metrics.ack_ids_ignored(
            topic,
            subscription,
            (ack_ids.len() as u64).saturating_sub(acked.count),
        );
        if acked.keys_handed > 0 {
            self.wakeups.deliveries_returned(topic).await?;
        }
        let freed = consumers
            .iter()
            .map(String::as_str)
            .filter(|consumer| !carried.iter().any(|c| c == consumer));
        self.wakeups.room_freed(freed).await?;
        Ok((acked, ours))
    }

    /// Hands deliveries back: redelivered after `delay`, or after the
    /// subscription's retry backoff when None; dead-lettered when that was
    /// their last attempt. Leases the caller no longer holds (and ack ids of
    /// another subscription) are reported as [`Error::LeaseLost`]; the others
    /// are handed back all the same.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic, subscription = %subscription))]
    pub async fn nack(
        &self,
        topic: &str,
        subscription: &str,
        ack_ids: &[AckId],
        delay: Option<Duration>,
    ) -> Result<()> {
        let kind = self.kind_for(topic, Call::Nack).await?;
        let (leases, ours) = issued_for(ack_ids, topic, subscription);
        let keys = TopicKeys::of_kind(topic, &kind);
        let (ended, _keys_handed) = self
            .store
            .end_leases(&keys, subscription, &leases, delay)
            .await?;
        let count = |what: Ended| ended.iter().filter(|&&e| e == what).count() as u64;
        let dead_lettered = count(Ended::DeadLettered);
        self.metrics.nacked(
            topic,
            subscription,
            count(Ended::Parked) + dead_lettered,
            dead_lettered,
        );
        let held: Vec<bool> = ended.iter().map(|&e| e != Ended::Lost).collect();
        if held.iter().any(|&h| h) {
            // Streams recompute when to look next, here and on other replicas.
            self.wakeups.deliveries_returned(topic).await?;
        }
        lost_leases(ack_ids, &ours, &held)
    }

    /// Sets the leases to end `deadline` from now; zero is a nack without delay.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic, subscription = %subscription))]
    pub async fn modify_ack_deadline(
        &self,
        topic: &str,
        subscription: &str,
        ack_ids: &[AckId],
        deadline: Duration,
    ) -> Result<()> {
        self.kind_for(topic, Call::ModifyAckDeadline).await?;
        if deadline.is_zero() {
            return self
                .nack(topic, subscription, ack_ids, Some(Duration::ZERO))
                .await;
        }
        let (leases, ours) = issued_for(ack_ids, topic, subscription);
        let held = self
            .store
            .extend(&TopicKeys::new(topic), subscription, &leases, deadline)
            .await?;
        lost_leases(ack_ids, &ours, &held)
    }

    /// A new stream's flow control, from what it asked for, within this
    /// replica's subscribe buffer.
    fn flow_control(&self, options: &SubscribeOptions, consumer: &str) -> Arc<FlowControl> {
        let budget =
            StreamBudget::new(options.max_outstanding_bytes, self.subscribe_buffer.clone());
        Arc::new(FlowControl::new(
            options.max_outstanding,
            budget,
            self.shutdown.child_token(),
            consumer,
        ))
    }

    /// Adds the topic to the registry, at most every [`TOPIC_SETTINGS_TTL`]
    /// per replica: a topic deleted meanwhile is registered again soon.
    async fn register_topic(&self, topic: &str) -> Result<()> {
        let fresh = self
            .known_topics
            .lock()
            .expect("topics lock")
            .get(topic)
            .is_some_and(|at| at.elapsed() < TOPIC_SETTINGS_TTL);
        if !fresh {
            self.store.register_topic(topic).await?;
            self.known_topics
                .lock()
                .expect("topics lock")
                .insert(topic.to_owned(), Instant::now());
        }
        Ok(())
    }
}

/// The leases of the ack ids issued for `subscription` on `topic`, and for
/// each ack id whether it was. The scripts call with an empty list all the
/// same: they answer NOT_FOUND for a subscription that does not exist.
fn issued_for(ack_ids: &[AckId], topic: &str, subscription: &str) -> (Vec<Lease>, Vec<bool>) {
    let ours: Vec<bool> = ack_ids
        .iter()
        .map(|id| id.issued_for(topic, subscription))
        .collect();
    let leases = ack_ids
        .iter()
        .zip(&ours)
        .filter(|(_, ours)| **ours)
        .map(|(id, _)| id.lease.clone())
        .collect();
    (leases, ours)
}

/// For each ack id, whether it was applied: issued for this subscription
/// (`ours`) and among the deliveries `acked`. Two ack ids of one entry (an
/// old delivery's and the current one's) are told apart by their delivery
/// count and consumer; an ack id given twice answers for the first only.
fn applied_acks(ack_ids: &[AckId], ours: &[bool], acked: Vec<Lease>) -> Vec<bool> {
    let mut acked: HashSet<Lease> = acked.into_iter().collect();
    ack_ids
        .iter()
        .zip(ours)
        .map(|(id, ours)| {
            let lease = Lease {
                entry_id: canonical_entry_id(&id.lease.entry_id),
                ..id.lease.clone()
            };
            *ours && acked.remove(&lease)
        })
        .collect()
}

/// An entry id as Redis writes it (`007-0` is `7-0`).
fn canonical_entry_id(id: &str) -> String {
    match parse_entry_id(id) {
        Some((ms, seq)) => format!("{ms}-{seq}"),
        None => id.to_owned(),
    }
}

/// Payloads within the topic's own limit (the server's was checked on the way in).
fn check_payloads(settings: &TopicSettings, messages: &[NewMessage]) -> Result<()> {
    if let Some(limit) = settings.max_payload_bytes
        && let Some(i) = messages
            .iter()
            .position(|m| m.payload.len() > limit as usize)
    {
        return Err(Error::invalid(
            format!("messages[{i}].payload"),
            format!("more than the topic's limit of {limit} bytes"),
        ));
    }
    Ok(())
}

/// `Err(LeaseLost)` naming the ack ids that were foreign (`ours` false) or
/// whose lease was not `held` (one entry per ack id of ours, in order).
fn lost_leases(ack_ids: &[AckId], ours: &[bool], held: &[bool]) -> Result<()> {
    let mut held = held.iter();
    let lost: Vec<String> = ack_ids
        .iter()
        .zip(ours)
        .filter(|(_, ours)| !**ours || !held.next().copied().unwrap_or(false))
        .map(|(id, _)| id.text.clone())
        .collect();
    if lost.is_empty() {
        Ok(())
    } else {
        Err(Error::LeaseLost(lost))
    }
}

/// Each stream is its own consumer in the group, so that leases (and the
/// outstanding limit) belong to exactly one stream.
pub(super) fn unique_consumer_name(requested: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let prefix = if requested.is_empty() {
        "consumer"
    } else {
        requested
    };
    format!("{prefix}-{}", &suffix[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_names_are_unique_and_keep_the_requested_name() {
        let a = unique_consumer_name("worker");
        let b = unique_consumer_name("worker");
        assert_ne!(a, b);
        assert!(a.starts_with("worker-"));
        assert!(unique_consumer_name("").starts_with("consumer-"));
    }
}
