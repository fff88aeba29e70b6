//! The delivery loop behind one Subscribe stream: fetch what this consumer
//! may hold, send it, then sleep until something can change that.

use super::Broker;
use super::ack_id::{self, AckId};
use super::budget::{Reservation, StreamBudget};
use super::handoff::Carry;
use super::handoff::{FetchRequest, Offer};
use super::list::WaiterHandle;
use super::open_batches::OpenBatches;
use super::wakeups::{ConsumerWake, RECHECK, TopicWatch};
use crate::error::{Error, Result};
use crate::metrics::SubscriptionMetrics;
use crate::model::{Entry, Filter, GroupStart, Lease, Pattern, RetryPolicy};
use crate::store::TopicKeys;
use crate::store::leases::{ConsumerSpec, Fetched};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most deliveries fetched in one script call.
const FETCH_LIMIT: u32 = 500;
/// Upper bound on a response, well under gRPC's usual 4 MiB receive limit.
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;
/// Longest wait, when a stream ends, for the response stream to let go of
/// the batches it did not send.
const UNSENT_WAIT: Duration = Duration::from_secs(2);
/// Shortest wait for a timer: due timers left over are settled in batches.
const MIN_WAIT: Duration = Duration::from_millis(5);

/// What a Subscribe stream asks for, already validated.
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    /// Empty on a pattern stream.
    pub topic: String,
    /// EPHEMERAL topics whose names match this NATS-style pattern, instead
    /// of `topic`.
    pub pattern: Option<Pattern>,
    /// Of the topics `pattern` matches, those the stream may receive (its
    /// token's grants); None: all of them.
    pub allowed_topics: Option<TopicFilter>,
    pub subscription: String,
    /// The client's name for this consumer; may be empty. A suffix makes it
    /// unique, unless `named_consumer`.
    pub consumer: String,
    /// `consumer` is the consumer's whole name, unique already: a stream
    /// that takes over a closed stream's consumer (Pub/Sub's `client_id`),
    /// its leases and its room.
    pub named_consumer: bool,
    pub max_outstanding: u32,
    /// Bytes of deliveries the server may hold for this stream, fetched but
    /// not yet taken by the client's connection.
    pub max_outstanding_bytes: u64,
    /// The most bytes of messages the stream's client may hold unacked (one
    /// may go past it; Pub/Sub's `max_outstanding_bytes`); 0: no limit.
    pub max_unacked_bytes: u64,
    /// The stream's ack deadline; None: the subscription's, else the server's.
    pub ack_deadline: Option<Duration>,
    /// Where the subscription starts, if this call creates it.
    pub start: GroupStart,
    /// Retry settings of the subscription, if this call creates it.
    pub retry: RetryPolicy,
    /// Create the subscription ordered per ordering key; an existing one must be.
    pub message_ordering: bool,
}

/// Which topics a pattern stream may receive, checked per delivered topic.
#[derive(Clone)]
pub struct TopicFilter(Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl TopicFilter {
    pub fn new(allows: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(allows))
    }

    pub fn allows(&self, topic: &str) -> bool {
        (self.0)(topic)
    }
}

impl Default for TopicFilter {
    /// Every topic.
    fn default() -> Self {
        Self::new(|_| true)
    }
}

impl std::fmt::Debug for TopicFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TopicFilter")
    }
}

/// A stream's flow control, which a StreamingSubscribe client can change
/// while the stream runs; and the way to end the stream from the server.
#[derive(Debug)]
pub struct FlowControl {
    max_outstanding: AtomicU32,
    budget: StreamBudget,
    changed: Notify,
    stop: CancellationToken,
    batches: OpenBatches,
}

impl FlowControl {
    pub(super) fn new(
        max_outstanding: u32,
        budget: StreamBudget,
        stop: CancellationToken,
        consumer: &str,
    ) -> Self {
        Self {
            max_outstanding: AtomicU32::new(max_outstanding),
            budget,
            changed: Notify::new(),
            stop,
            batches: OpenBatches::new(consumer),
        }
    }

    /// The batch timers of the stream's fetches that wait for its client's acks.
    pub fn batches(&self) -> &OpenBatches {
        &self.batches
    }

    /// Delivered-but-unacked messages the stream may hold.
    pub(super) fn max_outstanding(&self) -> u32 {
        self.max_outstanding.load(Ordering::Relaxed)
    }

    /// Bytes the server may hold for the stream.
    pub(super) fn max_outstanding_bytes(&self) -> u64 {
        self.budget.limit()
    }

    /// Counts `bytes` the stream holds against its budget and the replica's.
    pub(super) fn reserve(&self, bytes: u64) -> Reservation {
        self.budget.reserve(bytes)
    }

    /// Delivered-but-unacked messages the stream may hold from now on.
    pub fn set_max_outstanding(&self, max_outstanding: u32) {
        self.max_outstanding
            .store(max_outstanding, Ordering::Relaxed);
        self.changed.notify_one();
    }

    /// Bytes the server may hold for the stream from now on.
    pub fn set_max_outstanding_bytes(&self, bytes: u64) {
        self.budget.set_limit(bytes);
        self.changed.notify_one();
    }

    /// Ends the stream: what it fetched and did not send is given back; what
    /// its client holds stays pending and is redelivered after its deadline.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Resolves once the stream is told to stop (or the server shuts down).
    pub fn stopped(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.stop.clone().cancelled_owned()
    }
}

/// Deliveries fetched for a stream that never reached its client, by
/// (entry id, delivery count): given back when the stream ends.
pub(super) type Unsent = Arc<Mutex<Vec<(String, u32)>>>;

/// Deliveries on their way to the client, with the bytes they hold of the
/// stream's budget (given back when the batch is taken apart). A batch
/// dropped unsent (the client left) records its deliveries as unsent.
#[derive(Debug)]
pub struct DeliveryBatch {
    deliveries: Vec<Delivery>,
    _reserved: Reservation,
    unsent: Unsent,
    /// EPHEMERAL: messages the stream lost since its previous batch.
    dropped: u64,
}

impl DeliveryBatch {
    pub(super) fn new(
        deliveries: Vec<Delivery>,
        reserved: Reservation,
        unsent: Unsent,
        dropped: u64,
    ) -> Self {
        Self {
            deliveries,
            _reserved: reserved,
            unsent,
            dropped,
        }
    }

    /// Messages the stream lost since its previous batch (EPHEMERAL topics).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The deliveries, to send; their bytes go back to the budget.
    pub fn into_deliveries(mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.deliveries)
    }
}

impl Drop for DeliveryBatch {
    fn drop(&mut self) {
        if !self.deliveries.is_empty() {
            let mut unsent = self.unsent.lock().expect("unsent lock");
            unsent.extend(
                self.deliveries
                    .iter()
                    .map(|d| (d.entry.id.clone(), d.attempt)),
            );
        }
    }
}

/// One message handed to a consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The topic it was published to (a pattern stream delivers from many).
    pub topic: Arc<str>,
    pub ack_id: String,
    pub entry: Entry,
    /// 1 on first delivery, one higher on each redelivery.
    pub attempt: u32,
}

pub(super) struct DeliveryLoop {
    pub broker: Broker,
    pub options: SubscribeOptions,
    /// The subscription delivers in order per ordering key.
    pub ordered: bool,
    pub ack_deadline: Duration,
    /// Unique name of this stream in the consumer group.
    pub consumer: String,
    pub control: Arc<FlowControl>,
    pub sender: mpsc::Sender<Result<DeliveryBatch>>,
    pub unsent: Unsent,
    /// The topic's keys (a LIST topic's include its list).
    pub keys: TopicKeys,
    /// On a LIST topic: told when this stream waits for new elements.
    pub list_waiter: Option<WaiterHandle>,
    /// The subscription's filter: what it does not match is acked unsent.
    pub filter: Option<Filter>,
}

/// What one stream keeps from one fetch to the next.
struct StreamState {
    keys: TopicKeys,
    /// The topic's turns and timers, shared with its other local streams.
    topic: TopicWatch,
    /// Wakes this consumer when an ack frees room (see `Wakeups`).
    room: ConsumerWake,
    /// What the fetch script is asked for.
    spec: ConsumerSpec,
    /// Deliveries promoted ahead of their due time, held until then.
    held: Held,
    /// The bytes of the deliveries `held` holds.
    held_reserved: Reservation,
    metrics: SubscriptionMetrics,
    /// Redis' clock as of the last fetch.
    clock: RedisClock,
    /// When this stream's batches' leases end, oldest first: a full stream
    /// waits for its own leases, not for the subscription's turns.
    lease_ends: VecDeque<Instant>,
    /// A fetch a publish or an ack made for this stream (see `handoff`), to
    /// use instead of fetching.
    handed: Option<Result<Fetched>>,
    /// The last turn was for entries that the handed fetch may not have
    /// reached: look again once it is taken in.
    recheck_turn: bool,
}

/// The bytes a fetch may take, or why there are none.
enum Budget {
    Available(u64),
    /// Room came, or a held delivery fell due: start over.
    Waited,
    StreamOver,
}

/// What a stream does once it took a fetch in.
enum Next {
    /// More may be waiting, and the stream has room for it.
    FetchAgain,
    /// Sleep until something changes (`DeliveryLoop::wait_for_next`).
    Wait {
        has_room: bool,
        /// When the next lease of this consumer ends or a parked entry is
        /// due, from when the fetch came back (`received`).
        next_expiry: Option<Duration>,
        received: Instant,
    },
}

impl DeliveryLoop {
    #[tracing::instrument(skip_all, fields(topic = %self.options.topic, subscription = %self.options.subscription, consumer = %self.consumer))]
    pub async fn run(self) {
        let mut stream = self.open();
        tracing::debug!("stream opened");
        loop {
            if !self.send_due(&mut stream).await {
                break;
            }
            let max_bytes = match self.wait_for_budget(&stream).await {
                Budget::Available(max_bytes) => max_bytes,
                Budget::Waited => continue,
                Budget::StreamOver => break,
            };
            stream.spec.max_outstanding = self.control.max_outstanding.load(Ordering::Relaxed);
            let limit = stream.spec.max_outstanding.min(FETCH_LIMIT);
            let Some(fetched) = self.fetch(&mut stream, limit, max_bytes).await else {
                break;
            };
            let next = match self.take_in(&mut stream, fetched, limit).await {
                Some(next) => next,
                None => break,
            };
            let Next::Wait {
                has_room,
                next_expiry,
                received,
            } = next
            else {
                continue; // more may be waiting (a full stream waits for room)
            };
            if !self
                .wait_for_next(&mut stream, limit, has_room, next_expiry, received)
                .await
            {
                break;
            }
        }
        self.close(stream).await;
    }

    /// The stream's state before its first fetch: its watch of the topic's
    /// turns, its consumer's wake-ups, and what it asks the fetch script for.
    fn open(&self) -> StreamState {
        let broker = &self.broker;
        let (topic, subscription) = (&self.options.topic, &self.options.subscription);
        let keys = self.keys.clone();
        let spec = ConsumerSpec {
            keys: keys.clone(),
            group: subscription.clone(),
            consumer: self.consumer.clone(),
            max_outstanding: self.options.max_outstanding,
            max_unacked_bytes: self.options.max_unacked_bytes,
            // A message promoted ahead of its due time is held here until
            // then; its lease must not run while it waits.
            lease: self.ack_deadline + broker.promote_ahead,
            max_message_bytes: broker.max_message_bytes,
            ordered: self.ordered,
        };
        StreamState {
            keys,
            topic: broker.wakeups.watch_topic(topic, subscription),
            room: broker.wakeups.register_consumer(&self.consumer),
            spec,
            held: Held::default(),
            held_reserved: self.control.budget.reserve(0),
            metrics: broker.metrics.subscription(topic, subscription),
            clock: RedisClock::default(),
            lease_ends: VecDeque::new(),
            handed: None,
            recheck_turn: false,
        }
    }

    /// Step 1: sends the held deliveries that are due now; false when the
    /// stream is over.
    async fn send_due(&self, stream: &mut StreamState) -> bool {
        let released = stream.held.release(Instant::now());
        let reserved = stream.held_reserved.split(wire_bytes(&released));
        self.send(released, reserved, &stream.metrics, &stream.clock)
            .await
    }

    /// Step 2: the bytes the next fetch may take, or a wait while there are
    /// none (the client is not reading, or the replica's budget is spent).
    async fn wait_for_budget(&self, stream: &StreamState) -> Budget {
        let budget = &self.control.budget;
        let max_bytes = budget.available();
        if max_bytes > 0 || stream.handed.is_some() {
            return Budget::Available(max_bytes);
        }
        tokio::select! {
            _ = self.control.stop.cancelled() => Budget::StreamOver,
            _ = self.sender.closed() => Budget::StreamOver,
            _ = budget.wait_for_room() => Budget::Waited,
            _ = sleep_until_some(stream.held.next_release()) => Budget::Waited,
        }
    }

    /// Step 3: the fetch another call made for this stream, or a new one.
    /// None ends the stream (a failed fetch is sent to the client first;
    /// what the stream held stays pending and is redelivered).
    async fn fetch(&self, stream: &mut StreamState, limit: u32, max_bytes: u64) -> Option<Fetched> {
        let fetched = match stream.handed.take() {
            Some(fetched) => fetched,
            None => tokio::select! {
                _ = self.control.stop.cancelled() => return None,
                fetched = self.broker.store.fetch(&stream.spec, limit, max_bytes) => fetched,
            },
        };
        match fetched {
            Ok(fetched) => Some(fetched),
            Err(err) => {
                let _ = self.sender.send(Err(err)).await;
                None
            }
        }
    }

    /// Step 4: takes in a fetch: passes the topic's turn on, opens its batch
    /// timer, sends what is due and holds what was promoted early. Says
    /// whether to fetch again at once or wait; None when the stream is over.
    /// Acks the deliveries whose attributes the subscription's filter does
    /// not match, and keeps the others. An ack that fails leaves them to be
    /// redelivered, and filtered again, when their lease ends.
    async fn skip_unmatched(
        &self,
        filter: &Filter,
        deliveries: Vec<(Entry, u32)>,
        metrics: &SubscriptionMetrics,
    ) -> Vec<(Entry, u32)> {
        let (matched, unmatched): (Vec<_>, Vec<_>) = deliveries
            .into_iter()
            .partition(|(entry, _)| filter.matches(&entry.attributes));
        if unmatched.is_empty() {
            return matched;
        }
        let names = (
            self.options.topic.as_str(),
            self.options.subscription.as_str(),
        );
        let ack_ids: Vec<AckId> = unmatched
            .iter()
            .map(|(entry, attempt)| {
                let lease = Lease {
                    entry_id: entry.id.clone(),
                    consumer: self.consumer.clone(),
                    attempt: *attempt,
                };
                AckId::issued(lease, names.0, names.1)
            })
            .collect();
        match self
            .broker
            .ack(names, &ack_ids, Vec::new(), Carry::Nothing)
            .await
        {
            Ok(()) => metrics.filtered(ack_ids.len() as u64),
            Err(err) => tracing::warn!(error = ?err, "filtered-out messages not acked"),
        }
        matched
    }

    async fn take_in(
        &self,
        stream: &mut StreamState,
        mut fetched: Fetched,
        limit: u32,
    ) -> Option<Next> {
        let count = fetched.deliveries.len() as u32;
        let topic = &stream.topic;
        topic.fetched(&fetched.deliveries);
        if std::mem::take(&mut stream.recheck_turn) && topic.has_unfetched() {
            topic.pass_turn();
        }
        let received = Instant::now();
        if let Some(batch) = fetched.batch.take() {
            let first = fetched.deliveries.len().saturating_sub(batch.covers);
            let covered = fetched.deliveries[first..].iter();
            let entries = covered.map(|(entry, _)| entry.id.clone()).collect();
            self.control
                .batches
                .opened(batch.timer, entries, received + stream.spec.lease);
        }
        stream.metrics.dead_lettered(fetched.dead_lettered);
        stream.clock = RedisClock {
            ms: fetched.now_ms,
            at: received,
        };
        if let Some(filter) = &self.filter {
            let deliveries = std::mem::take(&mut fetched.deliveries);
            fetched.deliveries = self
                .skip_unmatched(filter, deliveries, &stream.metrics)
                .await;
        }
        let fetched_bytes = wire_bytes(&fetched.deliveries);
        let mut reserved = self.control.budget.reserve(fetched_bytes);
        let ready = stream
            .held
            .hold_early(fetched.deliveries, fetched.now_ms, received);
        stream
            .held_reserved
            .merge(reserved.split(fetched_bytes - wire_bytes(&ready)));
        if !self
            .send(ready, reserved, &stream.metrics, &stream.clock)
            .await
        {
            return None;
        }
        if count > 0 {
            stream.lease_ends.push_back(received + stream.spec.lease);
        }
        if fetched.keys_handed > 0 {
            // Entries that took their key may go to any stream, here or elsewhere.
            let _ = self
                .broker
                .wakeups
                .deliveries_returned(&self.options.topic)
                .await;
        }
        // Full batch, or full stream with more to take: let another stream help.
        let more = count >= limit || fetched.more_waiting;
        if more || (count > 0 && !fetched.has_room) {
            stream.topic.pass_turn();
        }
        Some(if more && fetched.has_room {
            Next::FetchAgain
        } else {
            Next::Wait {
                has_room: fetched.has_room,
                next_expiry: fetched.next_expiry,
                received,
            }
        })
    }

    /// Step 5: sleeps until something can change what the stream may fetch:
    /// a turn for new entries (a stream with room), an ack (a full one), a
    /// timer, a held delivery's due time, or the fetch a publish or an ack
    /// made with this stream's offer. False when the stream is over.
    async fn wait_for_next(
        &self,
        stream: &mut StreamState,
        limit: u32,
        has_room: bool,
        next_expiry: Option<Duration>,
        received: Instant,
    ) -> bool {
        if let Some(expiry) = next_expiry {
            stream.topic.timer_at(received + expiry.max(MIN_WAIT));
        }
        // With room left, the fetch found no new entry: on a LIST topic,
        // none in its list either, which the topic's waiter now watches.
        if has_room && let Some(waiter) = &self.list_waiter {
            waiter.elements_wanted();
        }
        let now = Instant::now();
        while stream.lease_ends.front().is_some_and(|&end| end <= now) {
            stream.lease_ends.pop_front();
        }
        // A full stream waits for room (an ack), for its own leases to end,
        // or, if a hint was lost, for the safety net.
        let room_check = (!has_room).then(|| {
            stream
                .lease_ends
                .front()
                .map_or(now + RECHECK, |&end| end.min(now + RECHECK))
        });
        let wake_at = [stream.held.next_release(), room_check]
            .into_iter()
            .flatten()
            .min();
        // The next fetch may be made by a publish (a stream with room)
        // or by the ack that frees room (a full one).
        let request = FetchRequest {
            spec: stream.spec.clone(),
            limit,
            max_bytes: self.control.budget.available(),
        };
        let offer = (request.max_bytes > 0).then(|| {
            if has_room {
                stream.topic.offer(request)
            } else {
                stream.room.offer(request)
            }
        });
        let waited = Waiting {
            topic: &stream.topic,
            room: &stream.room,
            control: &self.control,
            sender: &self.sender,
            has_room,
            wake_at,
        };
        match waited.wait(offer).await {
            Woken::Fetch { fetched, on_turn } => {
                // The turn was for entries the publish's fetch may not
                // have reached: look again once that fetch is in.
                stream.recheck_turn = on_turn && fetched.is_some();
                stream.handed = fetched;
                true
            }
            Woken::Stop(fetch) => {
                // Deliveries a publish or an ack fetched for this stream as it ended.
                if let Some(Ok(fetched)) = fetch {
                    let mut unsent = self.unsent.lock().expect("unsent lock");
                    unsent.extend(fetched.deliveries.into_iter().map(|(e, a)| (e.id, a)));
                }
                false
            }
        }
    }

    /// Step 6: the stream is over: gives back what it fetched and did not
    /// send, and leaves the consumer group if it holds nothing.
    async fn close(&self, stream: StreamState) {
        let broker = &self.broker;
        if broker.shutdown.is_cancelled() {
            let _ = self.sender.try_send(Err(Error::ShuttingDown));
        }
        // Batches still in the channel record themselves as unsent when the
        // response stream drops them; wait (briefly) for that.
        let _ = tokio::time::timeout(UNSENT_WAIT, self.sender.closed()).await;
        self.return_unsent(&stream.keys, stream.held).await;
        match broker
            .store
            .release_consumer(&stream.keys, &self.options.subscription, &self.consumer)
            .await
        {
            Ok(true) => tracing::debug!("stream closed"),
            Ok(false) => {
                tracing::debug!("stream closed with unacked messages, left for redelivery")
            }
            Err(err) => tracing::debug!(error = ?err, "stream closed, consumer not released"),
        }
    }

    /// Gives back what was fetched for this stream and never sent: held
    /// deliveries, and batches its client left behind.
    async fn return_unsent(&self, keys: &TopicKeys, mut held: Held) {
        let mut unsent = std::mem::take(&mut *self.unsent.lock().expect("unsent lock"));
        unsent.extend(
            held.waiting
                .drain(..)
                .map(|(_, entry, attempt)| (entry.id, attempt)),
        );
        if unsent.is_empty() {
            return;
        }
        let leases: Vec<Lease> = unsent
            .into_iter()
            .map(|(entry_id, attempt)| Lease {
                entry_id,
                consumer: self.consumer.clone(),
                attempt,
            })
            .collect();
        let store = &self.broker.store;
        match store
            .return_unsent(keys, &self.options.subscription, &leases)
            .await
        {
            Ok(returned) if returned > 0 => {
                tracing::debug!(returned, "gave back deliveries the client never got");
                let _ = self
                    .broker
                    .wakeups
                    .deliveries_returned(&self.options.topic)
                    .await;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(error = ?err, "unsent deliveries left for redelivery after their deadline")
            }
        }
    }

    /// Sends deliveries in responses of bounded size, each with its part of
    /// `reserved` (their bytes); false when the stream is over.
    async fn send(
        &self,
        deliveries: Vec<(Entry, u32)>,
        mut reserved: Reservation,
        metrics: &SubscriptionMetrics,
        clock: &RedisClock,
    ) -> bool {
        if deliveries.is_empty() {
            return true;
        }
        let now_ms = clock.now_ms();
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        let topic: Arc<str> = Arc::from(self.options.topic.as_str());
        let mut deliveries = deliveries.into_iter().peekable();
        while let Some((entry, attempt)) = deliveries.next() {
            batch_bytes += entry.wire_size();
            // Lateness of first deliveries only: a retry is late by design.
            let lateness = entry
                .due_ms
                .filter(|_| attempt == 1)
                .map(|due| Duration::from_millis(now_ms.saturating_sub(due)));
            metrics.delivered(attempt, lateness);
            let lease = Lease {
                entry_id: entry.id.clone(),
                consumer: self.consumer.clone(),
                attempt,
            };
            batch.push(Delivery {
                topic: topic.clone(),
                ack_id: ack_id::encode(&lease, &self.options.topic, &self.options.subscription),
                entry,
                attempt,
            });
            let next_fits = deliveries
                .peek()
                .is_some_and(|(next, _)| batch_bytes + next.wire_size() <= MAX_RESPONSE_BYTES);
            if !next_fits {
                let batch = DeliveryBatch::new(
                    std::mem::take(&mut batch),
                    reserved.split(batch_bytes as u64),
                    self.unsent.clone(),
                    0,
                );
                // A batch that is not sent records itself as unsent on drop.
                let sent = tokio::select! {
                    _ = self.control.stop.cancelled() => false,
                    sent = self.sender.send(Ok(batch)) => sent.is_ok(),
                };
                if !sent {
                    let mut unsent = self.unsent.lock().expect("unsent lock");
                    unsent.extend(deliveries.map(|(entry, attempt)| (entry.id, attempt)));
                    return false;
                }
                batch_bytes = 0;
            }
        }
        true
    }
}

/// What a waiting delivery loop waits on.
struct Waiting<'a> {
    topic: &'a TopicWatch,
    room: &'a ConsumerWake,
    control: &'a FlowControl,
    sender: &'a mpsc::Sender<Result<DeliveryBatch>>,
    has_room: bool,
    wake_at: Option<Instant>,
}

/// Why a delivery loop woke, with the fetch a publish made for it, if any.
enum Woken {
    /// `on_turn`: the stream took a turn for new entries.
    Fetch {
        fetched: Option<Result<Fetched>>,
        on_turn: bool,
    },
    Stop(Option<Result<Fetched>>),
}

impl Waiting<'_> {
    /// Waits until the stream should fetch (or use the fetch a publish made
    /// with its offer) or end. Turns that bring nothing new are skipped.
    async fn wait(&self, mut offer: Option<Offer>) -> Woken {
        let withdraw = |offer: Option<Offer>| async move {
            match offer {
                Some(offer) => offer.withdraw().await,
                None => None,
            }
        };
        loop {
            let mut on_turn = false;
            tokio::select! {
                _ = self.control.stop.cancelled() => return Woken::Stop(withdraw(offer).await),
                _ = self.sender.closed() => return Woken::Stop(withdraw(offer).await),
                _ = self.control.changed.notified() => {}
                _ = self.topic.my_turn(), if self.has_room => {
                    if !self.topic.turn_has_work() {
                        continue; // a fetch here already took those entries
                    }
                    on_turn = true;
                }
                // Acks matter only to a full stream; one with room would
                // fetch again for nothing on each of them.
                _ = self.room.notified(), if !self.has_room => {}
                _ = sleep_until_some(self.wake_at) => {}
                fetched = fulfilled(&mut offer) => {
                    return Woken::Fetch { fetched, on_turn };
                }
            }
            let fetched = withdraw(offer).await;
            return Woken::Fetch { fetched, on_turn };
        }
    }
}

/// The fetch made with `offer`; pending forever without one.
async fn fulfilled(offer: &mut Option<Offer>) -> Option<Result<Fetched>> {
    match offer {
        Some(offer) => offer.fulfilled().await,
        None => std::future::pending().await,
    }
}

/// What `deliveries` count against a byte budget.
fn wire_bytes(deliveries: &[(Entry, u32)]) -> u64 {
    deliveries.iter().map(|(e, _)| e.wire_size() as u64).sum()
}

/// Sleeps until `at`, or forever when None.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Redis' clock as of the last fetch, to tell the time by it in between.
struct RedisClock {
    ms: u64,
    at: Instant,
}

impl Default for RedisClock {
    fn default() -> Self {
        Self {
            ms: 0,
            at: Instant::now(),
        }
    }
}

impl RedisClock {
    /// Redis' time now, ms since the epoch (estimated from the last fetch).
    fn now_ms(&self) -> u64 {
        self.ms + self.at.elapsed().as_millis() as u64
    }
}

/// Deliveries fetched before their due time (promoted ahead, see
/// `--promote-ahead`), held until then. Due times are on Redis' clock: a
/// message due `d` fetched when Redis said `now` is released `d - now` after
/// the reply arrived, which is never before `d`.
#[derive(Default)]
struct Held {
    /// Sorted by release time.
    waiting: Vec<(Instant, Entry, u32)>,
}

impl Held {
    /// Keeps the deliveries not yet due; returns the others.
    fn hold_early(
        &mut self,
        deliveries: Vec<(Entry, u32)>,
        now_ms: u64,
        received: Instant,
    ) -> Vec<(Entry, u32)> {
        let mut ready = Vec::with_capacity(deliveries.len());
        let held_before = self.waiting.len();
        for (entry, attempt) in deliveries {
            match entry.due_ms.filter(|&due| due > now_ms) {
                Some(due) => {
                    let at = received + Duration::from_millis(due - now_ms);
                    self.waiting.push((at, entry, attempt));
                }
                None => ready.push((entry, attempt)),
            }
        }
        if self.waiting.len() > held_before {
            // One sort of two sorted runs, not an insert (a memmove of all
            // that is held) per delivery: thousands may be held at once.
            self.waiting.sort_by_key(|(at, _, _)| *at);
        }
        ready
    }

    /// Takes the deliveries whose time has come.
    fn release(&mut self, now: Instant) -> Vec<(Entry, u32)> {
        let due = self.waiting.partition_point(|(t, _, _)| *t <= now);
        self.waiting
            .drain(..due)
            .map(|(_, entry, attempt)| (entry, attempt))
            .collect()
    }

    fn next_release(&self) -> Option<Instant> {
        self.waiting.first().map(|(at, _, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due_at(id: &str, due_ms: Option<u64>) -> (Entry, u32) {
        let entry = Entry {
            id: id.into(),
            due_ms,
            ..Entry::default()
        };
        (entry, 1)
    }

    #[test]
    fn deliveries_are_held_until_due_by_redis_clock() {
        let mut held = Held::default();
        let received = Instant::now();
        let ready = held.hold_early(
            vec![
                due_at("1-0", None),
                due_at("2-0", Some(1_000)),
                due_at("3-0", Some(1_300)),
                due_at("4-0", Some(1_100)),
            ],
            1_000,
            received,
        );
        let ids = |v: &[(Entry, u32)]| v.iter().map(|(e, _)| e.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&ready), ["1-0", "2-0"]);
        assert_eq!(
            held.next_release(),
            Some(received + Duration::from_millis(100))
        );
        assert!(
            held.release(received + Duration::from_millis(99))
                .is_empty()
        );
        assert_eq!(
            ids(&held.release(received + Duration::from_millis(100))),
            ["4-0"]
        );
        assert_eq!(
            ids(&held.release(received + Duration::from_secs(1))),
            ["3-0"]
        );
        assert_eq!(held.next_release(), None);
    }
}
