//! Wake-ups for delivery loops, so that a Subscribe stream waits without
//! polling and without a Redis connection of its own.
//!
//! - New entries: a publish here gives the turn to one idle local stream of
//!   each subscription of its topic (see [`Turns`]), not to all of them: a
//!   hundred streams of one subscription would otherwise make a hundred
//!   fetches for each message, ninety-nine of them empty. The other
//!   replicas learn of it by a hint that the appending script sends itself,
//!   only when another replica is among the topic's watchers (see
//!   [`crate::store::hints`]): each topic with local streams keeps this
//!   replica's place there. A topic served by one replica costs no Redis
//!   call per message to wake its streams.
//! - Timers (ended leases, retries due): each subscription's earliest timer,
//!   as fetches report it, gives the turn to one idle stream when it falls due.
//! - Room freed by an ack: the consumer's own `Notify` when it lives here,
//!   else a hint to the other replicas.
//! - Deliveries handed back (nack): the topic's channel here, and a hint.
//! - Elements pushed onto a LIST topic's list: the blocking move of the
//!   topic's waiter on each replica (see `super::list`).
//! - Messages scheduled: the promoter's timers here, and a hint with the due
//!   time; the promotion script hints every watcher, this replica's too.
//!
//! A turn for new entries that a fetch already took (see
//! [`super::handoff`]: a publish can carry the fetch of a waiting stream) is
//! not worth a fetch: the publish records the newest entry it appended, the
//! streams the newest entry they fetched, and a stream skips a turn that
//! brings nothing newer.
//!
//! Hints travel on one Redis Pub/Sub channel. They are only hints: a lost one
//! delays a delivery until the loop's next periodic check, never loses it.

use super::handoff::{FetchRequest, Offer, Offers, Taken};
use super::promoter::PromotionTimers;
use crate::error::Result;
use crate::model::{Entry, Published, parse_entry_id};
use crate::store::hints::{Hint, WATCH_RENEWAL};
use crate::store::{Store, TopicKeys};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(super) const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Safety net: each subscription's streams look again at least this often,
/// in case a hint was lost.
pub const RECHECK: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Wakeups {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    promotions: Arc<PromotionTimers>,
    topics: Mutex<HashMap<String, TopicWatcher>>,
    consumers: Mutex<HashMap<String, LocalConsumer>>,
}

/// A consumer (stream) of this replica: its wake-up for freed room, and the
/// offer it leaves while full, for an ack to carry its next fetch.
struct LocalConsumer {
    notify: Arc<Notify>,
    offers: Arc<Offers>,
}

/// A topic with local streams: its subscriptions here, and the task that
/// keeps this replica among the topic's watchers in Redis.
struct TopicWatcher {
    subscriptions: Arc<Mutex<HashMap<String, Subscription>>>,
    subscribers: usize,
    task: JoinHandle<()>,
}

/// The local streams of one subscription: their turns, and the timer task
/// that hands one out when the subscription's earliest timer falls due.
struct Subscription {
    turns: Arc<Turns>,
    offers: Arc<Offers>,
    streams: usize,
    timer: JoinHandle<()>,
}

/// Whose turn it is to fetch for one subscription on this replica. New
/// entries and due timers wake one idle stream (first come, first served); a
/// stream that found more than it could take passes the turn on, so a
/// backlog still spreads over every stream.
#[derive(Default)]
pub struct Turns {
    turn: Notify,
    /// A turn was given for something other than new entries (a timer,
    /// deliveries handed back, a reconnect): the next one must fetch.
    must_fetch: AtomicBool,
    /// The newest entry a publish here announced, and the newest entry a
    /// fetch of the subscription here took, as (ms, seq).
    newest_seen: Mutex<(u64, u64)>,
    fetched_through: Mutex<(u64, u64)>,
    /// The earliest timer a fetch reported, not yet due.
    timer: Mutex<Option<Instant>>,
    timer_moved: Notify,
}

/// A local stream's view of its topic and subscription; the last one to
/// drop stops watching the topic.
pub struct TopicWatch {
    turns: Arc<Turns>,
    offers: Arc<Offers>,
    topic: String,
    subscription: String,
    wakeups: Wakeups,
}

/// A local consumer's wake-up for freed room; unregisters on drop.
pub struct ConsumerWake {
    notify: Arc<Notify>,
    offers: Arc<Offers>,
    consumer: String,
    wakeups: Wakeups,
}

impl Wakeups {
    pub fn new(store: Store, promotions: Arc<PromotionTimers>) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                promotions,
                topics: Mutex::default(),
                consumers: Mutex::default(),
            }),
        }
    }

    /// Starts (or joins) watching `topic`, for a stream of `subscription`.
    pub fn watch_topic(&self, topic: &str, subscription: &str) -> TopicWatch {
        let mut topics = self.inner.topics.lock().expect("wakeups lock");
        let watcher = topics.entry(topic.to_owned()).or_insert_with(|| {
            let subscriptions = Arc::new(Mutex::new(HashMap::new()));
            let task = tokio::spawn(keep_watching(
                self.inner.store.clone(),
                TopicKeys::new(topic),
                subscriptions.clone(),
            ));
            TopicWatcher {
                subscriptions,
                subscribers: 0,
                task,
            }
        });
        watcher.subscribers += 1;
        let mut subscriptions = watcher.subscriptions.lock().expect("wakeups lock");
        let local = subscriptions
            .entry(subscription.to_owned())
            .or_insert_with(|| {
                let turns = Arc::new(Turns::default());
                Subscription {
                    timer: tokio::spawn(run_timer(turns.clone())),
                    turns,
                    offers: Arc::default(),
                    streams: 0,
                }
            });
        local.streams += 1;
        TopicWatch {
            turns: local.turns.clone(),
            offers: local.offers.clone(),
            topic: topic.to_owned(),
            subscription: subscription.to_owned(),
            wakeups: self.clone(),
        }
    }

    pub fn register_consumer(&self, consumer: &str) -> ConsumerWake {
        let notify = Arc::new(Notify::new());
        let offers = Arc::new(Offers::default());
        let local = LocalConsumer {
            notify: notify.clone(),
            offers: offers.clone(),
        };
        self.inner
            .consumers
            .lock()
            .expect("wakeups lock")
            .insert(consumer.to_owned(), local);
        ConsumerWake {
            notify,
            offers,
            consumer: consumer.to_owned(),
            wakeups: self.clone(),
        }
    }

    /// Tells the consumers that held acked deliveries that they have room again.
    pub async fn room_freed<'a>(&self, consumers: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let mut remote: Vec<&str> = Vec::new();
        {
            let local = self.inner.consumers.lock().expect("wakeups lock");
            for consumer in consumers {
                match local.get(consumer) {
                    Some(local) => local.notify.notify_one(),
                    None if !remote.contains(&consumer) => remote.push(consumer),
                    None => {}
                }
            }
        }
        for consumer in remote {
            self.inner
                .store
                .publish_hint(&Hint::Consumer(consumer))
                .await?;
        }
        Ok(())
    }

    /// Tells every stream of `topic`, here and on other replicas, that
    /// deliveries are ready again.
    pub async fn deliveries_returned(&self, topic: &str) -> Result<()> {
        self.wake_topic(topic);
        self.inner.store.publish_hint(&Hint::Topic(topic)).await
    }

    /// Tells the local streams of the LIST topic `topic` that an element
    /// came (this replica's blocking move put it in the staging list). The
    /// other replicas need no hint: Redis hands their blocking moves
    /// elements of their own.
    pub fn elements_arrived(&self, topic: &str) {
        self.wake_topic(topic);
    }

    /// Tells the promoters, here and on other replicas, that `topic` has a
    /// message due in `due_in`.
    pub async fn scheduled(&self, topic: &str, due_in: Duration) -> Result<()> {
        self.inner.promotions.due_in(topic, due_in);
        let hint = Hint::Scheduled(topic, due_in.as_millis() as u64);
        self.inner.store.publish_hint(&hint).await
    }

    /// Gives the turn for what a publish here appended to `topic` to one
    /// idle stream of each local subscription, unless a fetch took it (the
    /// other replicas get the appending script's hint).
    pub fn entries_appended(&self, topic: &str, published: &[Published]) {
        let newest = published
            .iter()
            .filter(|p| !p.duplicate && p.scheduled_in.is_none())
            .filter_map(|p| parse_entry_id(&p.message_id))
            .max();
        let Some(newest) = newest else { return };
        if let Some(watcher) = self.inner.topics.lock().expect("wakeups lock").get(topic) {
            announce_entries(&watcher.subscriptions, newest);
        }
    }

    /// Takes one waiting stream's offer of each local subscription of
    /// `topic`, for a publish to carry their fetches.
    pub fn take_offers(&self, topic: &str) -> Vec<Taken> {
        let topics = self.inner.topics.lock().expect("wakeups lock");
        let Some(watcher) = topics.get(topic) else {
            return Vec::new();
        };
        let subscriptions = watcher.subscriptions.lock().expect("wakeups lock");
        subscriptions
            .values()
            .filter_map(|local| local.offers.take())
            .collect()
    }

    /// The offers of `topic`'s `subscription`'s waiting streams here, if it
    /// has local streams: where its acks wait to ride on the next.
    pub fn subscription_offers(&self, topic: &str, subscription: &str) -> Option<Arc<Offers>> {
        let topics = self.inner.topics.lock().expect("wakeups lock");
        let subscriptions = topics
            .get(topic)?
            .subscriptions
            .lock()
            .expect("wakeups lock");
        subscriptions
            .get(subscription)
            .map(|local| local.offers.clone())
    }

    /// Takes the offers that full local streams among `consumers` left,
    /// for an ack that frees their room to carry their fetches.
    pub fn take_room_offers<'a>(
        &self,
        consumers: impl IntoIterator<Item = &'a str>,
    ) -> Vec<(String, Taken)> {
        let local = self.inner.consumers.lock().expect("wakeups lock");
        let mut taken: Vec<(String, Taken)> = Vec::new();
        for consumer in consumers {
            if taken.iter().any(|(name, _)| name == consumer) {
                continue;
            }
            if let Some(offer) = local.get(consumer).and_then(|c| c.offers.take()) {
                taken.push((consumer.to_owned(), offer));
            }
        }
        taken
    }

    /// Leaves `keys`' topic's watchers, unless a stream came back for it
    /// meanwhile (were its place lost all the same, the renewal puts it
    /// back and its streams look again).
    async fn unwatch(&self, keys: TopicKeys) {
        if self
            .inner
            .topics
            .lock()
            .expect("wakeups lock")
            .contains_key(keys.topic())
        {
            return;
        }
        if let Err(err) = self.inner.store.unwatch_topic(&keys).await {
            tracing::debug!(error = ?err, "cannot leave the topic's watchers");
        }
    }

    fn wake_topic(&self, topic: &str) {
        if let Some(watcher) = self.inner.topics.lock().expect("wakeups lock").get(topic) {
            give_turns(&watcher.subscriptions);
        }
    }

    fn wake_everything(&self) {
        for watcher in self.inner.topics.lock().expect("wakeups lock").values() {
            give_turns(&watcher.subscriptions);
        }
        for local in self.inner.consumers.lock().expect("wakeups lock").values() {
            local.notify.notify_one();
        }
    }

    /// Background loop: receives other replicas' hints until shutdown.
    pub async fn run_hint_listener(self, shutdown: CancellationToken) {
        let mut retry = RETRY_MIN;
        loop {
            let mut pubsub = tokio::select! {
                _ = shutdown.cancelled() => return,
                connected = self.inner.store.pubsub() => match connected {
                    Ok(pubsub) => pubsub,
                    Err(err) => {
                        tracing::debug!(error = ?err, "hint listener cannot connect");
                        if sleep_or_shutdown(&mut retry, &shutdown).await { return; }
                        continue;
                    }
                },
            };
            if let Err(err) = pubsub.subscribe(crate::store::keys::HINTS_CHANNEL).await {
                tracing::debug!(error = ?err, "hint listener cannot subscribe");
                if sleep_or_shutdown(&mut retry, &shutdown).await {
                    return;
                }
                continue;
            }
            retry = RETRY_MIN;
            // Hints sent while disconnected are lost: look at everything once.
            self.wake_everything();
            let mut messages = pubsub.on_message();
            loop {
                let message = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    message = messages.next() => message,
                };
                let Some(message) = message else { break };
                let payload: Vec<u8> = message.get_payload().unwrap_or_default();
                match std::str::from_utf8(&payload).ok().and_then(Hint::decode) {
                    Some(Hint::Topic(topic)) => self.wake_topic(topic),
                    Some(Hint::Consumer(consumer)) => {
                        if let Some(local) = self
                            .inner
                            .consumers
                            .lock()
                            .expect("wakeups lock")
                            .get(consumer)
                        {
                            local.notify.notify_one();
                        }
                    }
                    Some(Hint::Scheduled(topic, ms)) => self
                        .inner
                        .promotions
                        .due_in(topic, Duration::from_millis(ms)),
                    None => tracing::debug!("ignoring malformed hint"),
                }
            }
            tracing::debug!("hint listener disconnected");
        }
    }
}

/// Gives one idle stream of each local subscription a turn that must fetch.
fn give_turns(subscriptions: &Mutex<HashMap<String, Subscription>>) {
    for local in subscriptions.lock().expect("wakeups lock").values() {
        local.turns.give_turn();
    }
}

/// Gives one idle stream of each local subscription the turn for entries up
/// to `newest` (ms, seq), unless a fetch here already took them.
fn announce_entries(subscriptions: &Mutex<HashMap<String, Subscription>>, newest: (u64, u64)) {
    for local in subscriptions.lock().expect("wakeups lock").values() {
        let turns = &local.turns;
        {
            let mut seen = turns.newest_seen.lock().expect("turns lock");
            *seen = newest.max(*seen);
        }
        if turns.unfetched() {
            turns.turn.notify_one();
        }
    }
}

/// Keeps this replica among `keys`' topic's watchers, for as long as the
/// topic has local streams. When its place was new (or lost with Redis'
/// data), hints may have gone to nobody: every local subscription fetches.
async fn keep_watching(
    store: Store,
    keys: TopicKeys,
    subscriptions: Arc<Mutex<HashMap<String, Subscription>>>,
) {
    let mut retry = RETRY_MIN;
    loop {
        match store.watch_topic(&keys).await {
            Ok(added) => {
                if added {
                    give_turns(&subscriptions);
                }
                retry = RETRY_MIN;
                tokio::time::sleep(WATCH_RENEWAL).await;
            }
            Err(err) => {
                tracing::debug!(error = ?err, topic = keys.topic(), "cannot renew the topic's watch");
                back_off(&mut retry).await;
            }
        }
    }
}

impl Turns {
    fn give_turn(&self) {
        self.must_fetch.store(true, Ordering::Relaxed);
        self.turn.notify_one();
    }

    /// Whether a publish here announced entries newer than any a fetch here took.
    fn unfetched(&self) -> bool {
        let seen = *self.newest_seen.lock().expect("turns lock");
        seen > *self.fetched_through.lock().expect("turns lock")
    }
}

/// Gives one idle stream the turn when the subscription's earliest timer
/// falls due, and at least every [`RECHECK`].
async fn run_timer(turns: Arc<Turns>) {
    loop {
        let recheck = Instant::now() + RECHECK;
        let at = turns
            .timer
            .lock()
            .expect("timer lock")
            .map_or(recheck, |at| at.min(recheck));
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {
                let mut timer = turns.timer.lock().expect("timer lock");
                if timer.is_some_and(|t| t <= Instant::now()) {
                    *timer = None;
                }
                turns.give_turn();
            }
            _ = turns.timer_moved.notified() => {}
        }
    }
}

/// Sleeps for the current backoff and doubles it; true when shutdown came first.
pub(super) async fn sleep_or_shutdown(retry: &mut Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = back_off(retry) => false,
    }
}

/// Sleeps for the current backoff (from [`RETRY_MIN`]), then doubles it up to 5 s.
pub(super) async fn back_off(retry: &mut Duration) {
    tokio::time::sleep(*retry).await;
    *retry = (*retry * 2).min(RETRY_MAX);
}

impl TopicWatch {
    /// Resolves when it is this stream's turn to fetch: new entries, a timer
    /// fell due, or another stream passed the turn on.
    pub async fn my_turn(&self) {
        self.turns.turn.notified().await
    }

    /// Whether the turn just taken is worth a fetch: it was given for a
    /// timer or returned deliveries, or for entries no fetch here has taken.
    pub fn turn_has_work(&self) -> bool {
        self.turns.must_fetch.swap(false, Ordering::Relaxed) || self.turns.unfetched()
    }

    /// Lets one more idle stream of the subscription fetch: this one found
    /// more than it could take.
    pub fn pass_turn(&self) {
        self.turns.give_turn();
    }

    /// Whether a publish here announced entries newer than any a fetch here took.
    pub fn has_unfetched(&self) -> bool {
        self.turns.unfetched()
    }

    /// Records the newest entry a fetch of this subscription took.
    pub fn fetched(&self, deliveries: &[(Entry, u32)]) {
        let newest = deliveries
            .iter()
            .filter_map(|(entry, _)| parse_entry_id(&entry.id))
            .max();
        if let Some(newest) = newest {
            let mut through = self.turns.fetched_through.lock().expect("turns lock");
            *through = newest.max(*through);
        }
    }

    /// Leaves this stream's fetch for the topic's next publish to carry.
    pub fn offer(&self, request: FetchRequest) -> Offer {
        self.offers.offer(request)
    }

    /// Records that the subscription has a timer due at `at` (an ended lease
    /// or a retry), so that a stream gets the turn then.
    pub fn timer_at(&self, at: Instant) {
        let mut timer = self.turns.timer.lock().expect("timer lock");
        if timer.is_none_or(|t| at < t) {
            *timer = Some(at);
            self.turns.timer_moved.notify_one();
        }
    }
}

impl Drop for TopicWatch {
    fn drop(&mut self) {
        let mut topics = self.wakeups.inner.topics.lock().expect("wakeups lock");
        let Some(watcher) = topics.get_mut(&self.topic) else {
            return;
        };
        {
            let mut subscriptions = watcher.subscriptions.lock().expect("wakeups lock");
            if let Some(local) = subscriptions.get_mut(&self.subscription) {
                local.streams -= 1;
                if local.streams == 0 {
                    local.timer.abort();
                    subscriptions.remove(&self.subscription);
                }
            }
        }
        watcher.subscribers -= 1;
        if watcher.subscribers == 0 {
            watcher.task.abort();
            topics.remove(&self.topic);
            // Else publishes hint this replica until its place runs out.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let wakeups = self.wakeups.clone();
                let keys = TopicKeys::new(&self.topic);
                runtime.spawn(async move { wakeups.unwatch(keys).await });
            }
        }
    }
}

impl ConsumerWake {
    pub async fn notified(&self) {
        self.notify.notified().await
    }

    /// Leaves this full stream's next fetch for an ack that frees its room to carry.
    pub fn offer(&self, request: FetchRequest) -> Offer {
        self.offers.offer(request)
    }
}

impl Drop for ConsumerWake {
    fn drop(&mut self) {
        let mut consumers = self.wakeups.inner.consumers.lock().expect("wakeups lock");
        // A stream that took over this consumer's name (a Pub/Sub client
        // reconnecting with its client_id) may have registered it again.
        let ours = consumers
            .get(&self.consumer)
            .is_some_and(|local| Arc::ptr_eq(&local.notify, &self.notify));
        if ours {
            consumers.remove(&self.consumer);
        }
    }
}
