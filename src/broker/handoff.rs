//! Fetches that ride along with a publish or an ack.
//!
//! A stream with room that waits for new entries leaves an offer with its
//! subscription. The writer of the topic's next publish takes one offer of
//! each local subscription and sends those streams' fetches right behind the
//! publish, on the same Redis connection. Redis runs one connection's
//! commands in order, so the fetch finds what the publish appended: the
//! message reaches its stream without waiting for the watcher's wake-up and
//! a fetch of the stream's own, one Redis round trip (and one Redis wake-up)
//! fewer between publish and delivery.
//!
//! A full stream leaves its offer with its consumer instead, and the ack that
//! frees its room carries its fetch the same way: the room is taken at once.
//!
//! An offer is only a shortcut. A stream whose offer nobody took fetches on
//! its turn as before, and one whose fetch was taken waits for that result
//! instead of fetching beside it.
//!
//! Acks ride on fetches the same way, in the fetch's own script call: the
//! ack that frees a full stream's room goes first in that stream's fetch; an
//! ack batch of a stream with room, while publishes carry its
//! subscription's fetches, waits (at most `--ack-ride-wait`, 2 ms) for the
//! next publish and goes first in the fetch it carries. At a steady rate that is
//! one script call per message fewer: each message would otherwise cost a
//! publish, a fetch and an ack call.
//!
//! Only calls that run to completion carry fetches: the publish writers
//! (`PublishStream`) and the ack batches of `StreamingSubscribe`. A unary RPC
//! is dropped when its client cancels it, and a fetch dropped after Redis
//! made it would leave its deliveries unsent until their lease ran out.

use super::Broker;
use crate::error::Result;
use crate::metrics::CarriedBy;
use crate::model::{Due, PublishBatch};
use crate::store::leases::{AckRequest, Acked, ConsumerSpec, Fetched};
use crate::store::stream::RequestResults;
use crate::store::{Store, TopicKeys};
use futures::FutureExt;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Whether a call may carry the fetches of waiting streams: only one that
/// runs to completion, never a unary RPC its client may cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carry {
    Fetches,
    Nothing,
}

impl Broker {
    /// Publishes `requests` to `topic` (see [`Store::publish`]), with the
    /// fetches of one waiting stream of each local subscription right
    /// behind. Called by the publish writers, which run to completion.
    pub(super) async fn publish_carrying(
        &self,
        keys: &TopicKeys,
        topic: &str,
        requests: &[PublishBatch],
        dedupe_window: Duration,
    ) -> Result<RequestResults> {
        let due_now = requests
            .iter()
            .any(|request| request.messages.iter().any(|m| m.due == Due::Now));
        let fetches = if due_now {
            self.wakeups.take_offers(topic)
        } else {
            Vec::new() // nothing for a fetch to find
        };
        self.metrics
            .fetches_carried(CarriedBy::Publish, fetches.len());
        let store = &self.store;
        carrying(store, store.publish(keys, requests, dedupe_window), fetches).await
    }

    /// Applies `acks` of `topic`'s `subscription`. With [`Carry::Fetches`]
    /// the acks ride on a fetch: that of a full local stream that held them
    /// (the fetches of the others go right behind), which takes the room
    /// they free at once; else, while publishes carry the subscription's
    /// fetches, the next one. Returns the consumers whose fetch took the
    /// room the acks freed, which need no other wake-up.
    pub(super) async fn ack_carrying(
        &self,
        (keys, subscription): (&TopicKeys, &str),
        acks: AckRequest,
        carry: Carry,
    ) -> Result<(Acked, Vec<String>)> {
        let topic = keys.topic();
        if carry == Carry::Fetches {
            let taken = self
                .wakeups
                .take_room_offers(acks.leases.iter().map(|lease| lease.consumer.as_str()));
            self.metrics.fetches_carried(CarriedBy::Ack, taken.len());
            let mut taken = taken.into_iter();
            if let Some((consumer, first)) = taken.next() {
                let (carried, others): (Vec<String>, Vec<Taken>) = taken.unzip();
                let ack_and_fetch = first.ack_and_fetch(&self.store, acks.clone());
                if let Some(acked) = carrying(&self.store, ack_and_fetch, others).await {
                    self.metrics.acks_rode();
                    let carried = std::iter::once(consumer).chain(carried).collect();
                    return Ok((acked?, carried));
                }
            } else if !self.ack_ride_wait.is_zero()
                && let Some(offers) = self.wakeups.subscription_offers(topic, subscription)
                && let Some((acked, consumer)) = ride(&offers, &acks, self.ack_ride_wait).await
            {
                self.metrics.acks_rode();
                return Ok((acked?, vec![consumer]));
            }
        }
        let acked = self.store.ack(keys, subscription, &acks).await?;
        Ok((acked, Vec::new()))
    }
}

/// Leaves `acks` for the next fetch a publish carries for the subscription
/// of `offers`, when publishes carry its fetches, and waits for it (at most
/// `wait`: an ack applied later only keeps its delivery pending, and its
/// confirmation waiting, that much longer). Returns what they did and whose
/// fetch took them; None when they did not ride (or their fetch failed):
/// the caller applies them.
async fn ride(
    offers: &Offers,
    acks: &AckRequest,
    wait: Duration,
) -> Option<(Result<Acked>, String)> {
    let (id, mut rode) = offers.leave_acks(acks.clone())?;
    match tokio::time::timeout(wait, &mut rode).await {
        Ok(rode) => rode.ok().flatten(),
        Err(_elapsed) if offers.take_back_acks(id) => None,
        // A publish took them just now; its fetch is on its way.
        Err(_elapsed) => rode.await.ok().flatten(),
    }
}

/// Runs `call`, then `fetches` right behind it: `join!` polls the call first,
/// which queues its command on the connection first.
async fn carrying<T>(store: &Store, call: impl Future<Output = T>, fetches: Vec<Taken>) -> T {
    let fetches = fetches.into_iter().map(|taken| taken.fetch(store));
    let (out, ()) = tokio::join!(call, futures::future::join_all(fetches).map(drop));
    out
}

/// The fetch a waiting stream would make.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    pub spec: ConsumerSpec,
    pub limit: u32,
    pub max_bytes: u64,
}

/// The standing offers of one subscription's waiting streams on this
/// replica (or of one full stream), and the acks waiting to ride on the next.
#[derive(Default)]
pub struct Offers {
    queue: Mutex<Queue>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    riding: Option<Riding>,
    /// The last offer taken was taken by a publish (not withdrawn by its
    /// stream to fetch on its own): publishes carry these fetches, and acks
    /// may wait for the next one.
    publishes_carry: bool,
}

struct Waiting {
    id: u64,
    request: FetchRequest,
    reply: oneshot::Sender<Result<Fetched>>,
}

/// What became of riding acks: what they did and the consumer whose fetch
/// took them; None when that fetch failed.
type Rode = Option<(Result<Acked>, String)>;

/// Acks waiting for the subscription's next fetch, to go first in its call.
struct Riding {
    id: u64,
    acks: AckRequest,
    reply: oneshot::Sender<Rode>,
}

/// A stream's standing offer. Dropping it withdraws it.
pub struct Offer {
    id: u64,
    offers: Arc<Offers>,
    reply: oneshot::Receiver<Result<Fetched>>,
}

/// An offer a publisher took: its fetch goes right behind the publish, with
/// the acks that waited to ride on it first.
pub struct Taken {
    request: FetchRequest,
    reply: oneshot::Sender<Result<Fetched>>,
    riding: Option<Riding>,
}

impl Offers {
    pub fn offer(self: &Arc<Self>, request: FetchRequest) -> Offer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, receiver) = oneshot::channel();
        self.lock()
            .waiting
            .push_back(Waiting { id, request, reply });
        Offer {
            id,
            offers: self.clone(),
            reply: receiver,
        }
    }

    /// Takes the offer that has waited longest, if any, with the acks
    /// waiting to ride on it.
    pub fn take(&self) -> Option<Taken> {
        let mut queue = self.lock();
        let waiting = queue.waiting.pop_front()?;
        queue.publishes_carry = true;
        Some(Taken {
            request: waiting.request,
            reply: waiting.reply,
            riding: queue.riding.take(),
        })
    }

    /// Leaves `acks` to ride on the next offer taken, if publishes take
    /// these offers and no other acks wait already. No offer need wait now:
    /// at a steady rate the ack often comes while a publish holds the offer,
    /// its fetch on the way; the stream offers again once that fetch is in,
    /// and the next publish takes it with the acks.
    fn leave_acks(&self, acks: AckRequest) -> Option<(u64, oneshot::Receiver<Rode>)> {
        let mut queue = self.lock();
        if !queue.publishes_carry || queue.riding.is_some() {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, rode) = oneshot::channel();
        queue.riding = Some(Riding { id, acks, reply });
        Some((id, rode))
    }

    /// Takes back acks `id` that no offer took; false when one did.
    fn take_back_acks(&self, id: u64) -> bool {
        let mut queue = self.lock();
        let theirs = queue.riding.as_ref().is_some_and(|riding| riding.id == id);
        if theirs {
            queue.riding = None;
        }
        theirs
    }

    /// Removes offer `id`; false when a publisher took it.
    fn remove(&self, id: u64) -> bool {
        let mut queue = self.lock();
        match queue.waiting.iter().position(|w| w.id == id) {
            Some(at) => {
                queue.waiting.remove(at);
                // Its stream fetches on its own: publishes may not be coming.
                queue.publishes_carry = false;
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().expect("offers lock")
    }
}

impl Offer {
    /// Resolves with the fetch a publisher made for this stream; None when
    /// the publisher dropped it unmade (the stream then fetches itself).
    pub async fn fulfilled(&mut self) -> Option<Result<Fetched>> {
        (&mut self.reply).await.ok()
    }

    /// Withdraws the offer: None if nobody took it, else the fetch made for it.
    pub async fn withdraw(mut self) -> Option<Result<Fetched>> {
        if self.offers.remove(self.id) {
            return None;
        }
        self.fulfilled().await
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.offers.remove(self.id);
    }
}

impl Taken {
    /// Makes the fetch (with the acks riding on it first) and hands its
    /// result to the stream that offered it.
    pub async fn fetch(mut self, store: &Store) {
        let Some(riding) = self.riding.take() else {
            let request = &self.request;
            let fetched = store
                .fetch(&request.spec, request.limit, request.max_bytes)
                .await;
            let _ = self.reply.send(fetched);
            return;
        };
        let consumer = self.request.spec.consumer.clone();
        let acked = self.ack_and_fetch(store, riding.acks).await;
        let _ = riding.reply.send(acked.map(|acked| (acked, consumer)));
    }

    /// Applies `acks`, then makes the fetch, in one script call; hands the
    /// fetch to its stream and returns what the acks did. None when the call
    /// failed: then the acks are the caller's to apply (had Redis applied
    /// them all the same, applying them again finds them acked).
    async fn ack_and_fetch(self, store: &Store, acks: AckRequest) -> Option<Result<Acked>> {
        let request = &self.request;
        let mut fetched = store
            .ack_and_fetch(&acks, &request.spec, request.limit, request.max_bytes)
            .await;
        let acked = fetched.as_mut().ok().and_then(|f| f.acked.take());
        let _ = self.reply.send(fetched);
        acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Lease;

    fn request() -> FetchRequest {
        FetchRequest {
            spec: ConsumerSpec {
                keys: TopicKeys::new("t"),
                group: "s".into(),
                consumer: "c".into(),
                max_outstanding: 10,
                max_unacked_bytes: 0,
                lease: Duration::from_secs(10),
                max_message_bytes: 1024,
                ordered: false,
            },
            limit: 10,
            max_bytes: 1 << 20,
        }
    }

    fn acks(entry_id: &str) -> AckRequest {
        AckRequest {
            leases: vec![Lease {
                entry_id: entry_id.into(),
                consumer: "c".into(),
                attempt: 1,
            }],
            listed: false,
            finished: Vec::new(),
        }
    }

    fn riding_entry(taken: &Taken) -> Option<&str> {
        let riding = taken.riding.as_ref()?;
        Some(riding.acks.leases[0].entry_id.as_str())
    }

    #[test]
    fn acks_wait_for_publishes_only_once_a_publish_took_an_offer() {
        let offers = Arc::new(Offers::default());
        let _offer = offers.offer(request());
        assert!(
            offers.leave_acks(acks("1-0")).is_none(),
            "no publish carried yet"
        );
        assert!(offers.take().is_some());
        // The stream withdraws its next offer to fetch on its own.
        drop(offers.offer(request()));
        assert!(
            offers.leave_acks(acks("1-0")).is_none(),
            "its stream fetches itself"
        );
    }

    #[test]
    fn acks_that_come_while_a_publish_holds_the_offer_ride_on_the_next_one() {
        let offers = Arc::new(Offers::default());
        let _first = offers.offer(request());
        let in_flight = offers.take().expect("the publish takes the offer");
        assert!(in_flight.riding.is_none());
        // The ack comes before the stream offers again.
        let (id, _rode) = offers.leave_acks(acks("1-0")).expect("the acks wait");
        assert!(
            offers.leave_acks(acks("2-0")).is_none(),
            "one batch rides at a time"
        );
        let _second = offers.offer(request());
        let next = offers.take().expect("the next publish takes the new offer");
        assert_eq!(riding_entry(&next), Some("1-0"));
        assert!(!offers.take_back_acks(id), "taken, not to be applied again");
    }

    #[test]
    fn acks_no_offer_took_are_taken_back_whole() {
        let offers = Arc::new(Offers::default());
        let _first = offers.offer(request());
        offers.take().expect("taken");
        let (id, _rode) = offers.leave_acks(acks("1-0")).expect("the acks wait");
        assert!(offers.take_back_acks(id));
        let _second = offers.offer(request());
        assert!(riding_entry(&offers.take().expect("taken")).is_none());
    }
}
