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
//! Only calls that run to completion carry fetches: the publish writers
//! (`PublishStream`) and the ack batches of `StreamingSubscribe`. A unary RPC
//! is dropped when its client cancels it, and a fetch dropped after Redis
//! made it would leave its deliveries unsent until their lease ran out.

use super::Broker;
use crate::error::Result;
use crate::metrics::CarriedBy;
use crate::store::leases::{Acked, ConsumerSpec, Fetched, Lease};
use crate::store::stream::{Due, PublishBatch, RequestResults};
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

/// Publishes `requests` to `topic` (see [`Store::publish`]), with the fetches
/// of one waiting stream of each local subscription right behind. Called by
/// the publish writers, which run to completion.
pub async fn publish(
    broker: &Broker,
    keys: &TopicKeys,
    topic: &str,
    requests: &[PublishBatch],
    dedupe_window: Duration,
) -> Result<RequestResults> {
    let due_now = requests
        .iter()
        .any(|request| request.messages.iter().any(|m| m.due == Due::Now));
    let fetches = if due_now {
        broker.wakeups.take_offers(topic)
    } else {
        Vec::new() // nothing for a fetch to find
    };
    broker
        .metrics
        .fetches_carried(CarriedBy::Publish, fetches.len());
    let store = &broker.store;
    carrying(store, store.publish(keys, requests, dedupe_window), fetches).await
}

/// Acks `leases` (with their entry ids when `listed`); with
/// [`Carry::Fetches`], the fetches of the full local streams that held them
/// go right behind, and the room it frees is taken at once. Returns the
/// consumers whose fetch it carried, which need no other wake-up.
pub async fn ack(
    broker: &Broker,
    keys: &TopicKeys,
    subscription: &str,
    leases: &[Lease],
    listed: bool,
    carry: Carry,
) -> Result<(Acked, Vec<String>)> {
    let taken = match carry {
        Carry::Fetches => broker
            .wakeups
            .take_room_offers(leases.iter().map(|lease| lease.consumer.as_str())),
        Carry::Nothing => Vec::new(),
    };
    let (carried, fetches): (Vec<String>, Vec<Taken>) = taken.into_iter().unzip();
    broker
        .metrics
        .fetches_carried(CarriedBy::Ack, fetches.len());
    let store = &broker.store;
    let ack = async {
        if listed {
            store.ack_listed(keys, subscription, leases).await
        } else {
            store.ack(keys, subscription, leases).await
        }
    };
    Ok((carrying(store, ack, fetches).await?, carried))
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

/// The standing offers of one subscription's waiting streams on this replica.
#[derive(Default)]
pub struct Offers {
    waiting: Mutex<VecDeque<Waiting>>,
    next_id: AtomicU64,
}

struct Waiting {
    id: u64,
    request: FetchRequest,
    reply: oneshot::Sender<Result<Fetched>>,
}

/// A stream's standing offer. Dropping it withdraws it.
pub struct Offer {
    id: u64,
    offers: Arc<Offers>,
    reply: oneshot::Receiver<Result<Fetched>>,
}

/// An offer a publisher took: its fetch goes right behind the publish.
pub struct Taken {
    request: FetchRequest,
    reply: oneshot::Sender<Result<Fetched>>,
}

impl Offers {
    pub fn offer(self: &Arc<Self>, request: FetchRequest) -> Offer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, receiver) = oneshot::channel();
        self.lock().push_back(Waiting { id, request, reply });
        Offer {
            id,
            offers: self.clone(),
            reply: receiver,
        }
    }

    /// Takes the offer that has waited longest, if any.
    pub fn take(&self) -> Option<Taken> {
        self.lock().pop_front().map(|waiting| Taken {
            request: waiting.request,
            reply: waiting.reply,
        })
    }

    /// Removes offer `id`; false when a publisher took it.
    fn remove(&self, id: u64) -> bool {
        let mut waiting = self.lock();
        match waiting.iter().position(|w| w.id == id) {
            Some(at) => {
                waiting.remove(at);
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting>> {
        self.waiting.lock().expect("offers lock")
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
    /// Makes the fetch and hands its result to the stream that offered it.
    pub async fn fetch(self, store: &Store) {
        let request = &self.request;
        let fetched = store
            .fetch(&request.spec, request.limit, request.max_bytes)
            .await;
        let _ = self.reply.send(fetched);
    }
}
