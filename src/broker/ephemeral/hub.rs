//! The replica's Redis subscriptions for EPHEMERAL topics: one Pub/Sub
//! connection of their own (never the shared multiplexed one), one Redis
//! subscription per channel or channel pattern whatever the number of local
//! streams on it, and the routing of each message to those streams.
//!
//! Redis disconnects a subscriber whose output buffer passes
//! `client-output-buffer-limit pubsub`; the reader here never waits for a
//! stream (see [`Listener::offer`]), so only a replica too slow to decode
//! what arrives could be dropped. When the connection is lost (Redis
//! restarted, failed over), the streams stay open, and the hub connects
//! again and subscribes again to what they need; what was published
//! meanwhile is not replayed.

use super::listener::{Arrival, Listener};
use crate::broker::wakeups::{RETRY_MIN, sleep_or_shutdown};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::ephemeral::decode_channel_message;
use crate::store::keys::topic_of_channel;
use futures::StreamExt;
use redis::aio::PubSubSink;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long a new stream waits for the hub's connection to Redis.
const CONNECT_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for Redis to confirm a SUBSCRIBE or PSUBSCRIBE.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(5);

/// A Redis subscription: to one channel (a topic), or to a channel pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Route {
    Channel(String),
    Pattern(String),
}

#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    shutdown: CancellationToken,
    /// The local streams of each Redis subscription.
    routes: Mutex<HashMap<Route, Vec<Arc<Listener>>>>,
    /// Serializes subscribing and unsubscribing, so that a route is
    /// subscribed in Redis exactly while it has streams.
    changes: tokio::sync::Mutex<()>,
    /// The connection's command side while connected.
    sink: watch::Sender<Option<PubSubSink>>,
    started: std::sync::Once,
}

impl Hub {
    pub fn new(store: Store, shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                shutdown,
                routes: Mutex::default(),
                changes: tokio::sync::Mutex::new(()),
                sink: watch::Sender::new(None),
                started: std::sync::Once::new(),
            }),
        }
    }

    /// Adds a stream to `route`, subscribing in Redis when it is the route's
    /// first; returns once Redis confirmed the subscription, so that the
    /// stream gets every message published from then on. The stream leaves
    /// when the returned guard drops.
    pub async fn join(&self, route: Route, listener: Arc<Listener>) -> Result<Joined> {
        self.start();
        let mut sink = self.connected().await?;
        let _change = self.inner.changes.lock().await;
        let first = {
            let mut routes = self.inner.routes.lock().expect("routes lock");
            let streams = routes.entry(route.clone()).or_default();
            streams.push(listener.clone());
            streams.len() == 1
        };
        let joined = Joined {
            hub: self.clone(),
            route: route.clone(),
            listener,
        };
        if first {
            // A reconnection may have replaced the sink meanwhile.
            if let Some(current) = self.inner.sink.borrow().clone() {
                sink = current;
            }
            let subscribed = match &route {
                Route::Channel(channel) => {
                    tokio::time::timeout(SUBSCRIBE_WAIT, sink.subscribe(channel)).await
                }
                Route::Pattern(pattern) => {
                    tokio::time::timeout(SUBSCRIBE_WAIT, sink.psubscribe(pattern)).await
                }
            };
            match subscribed {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(Error::Unavailable(err)),
                Err(_) => return Err(not_connected("Redis did not confirm the subscription")),
            }
        }
        Ok(joined)
    }

    /// Starts the connection task on first use: a replica without EPHEMERAL
    /// streams holds no connection for them.
    fn start(&self) {
        self.inner.started.call_once(|| {
            tokio::spawn(self.clone().run());
        });
    }

    /// The connection's sink, waiting a little for it.
    async fn connected(&self) -> Result<PubSubSink> {
        let mut sink = self.inner.sink.subscribe();
        let ready = sink.wait_for(Option::is_some);
        match tokio::time::timeout(CONNECT_WAIT, ready).await {
            Ok(Ok(sink)) => Ok(sink.clone().expect("waited for a sink")),
            _ => Err(not_connected(
                "no Redis connection for EPHEMERAL subscriptions",
            )),
        }
    }

    /// Connects, subscribes to every route that has streams, and routes
    /// messages until the connection breaks; again until shutdown.
    async fn run(self) {
        let shutdown = self.inner.shutdown.clone();
        let mut retry = RETRY_MIN;
        loop {
            let pubsub = tokio::select! {
                _ = shutdown.cancelled() => return,
                connected = self.inner.store.pubsub() => connected,
            };
            let pubsub = match pubsub {
                Ok(pubsub) => pubsub,
                Err(err) => {
                    tracing::warn!(error = %err, "EPHEMERAL subscriptions cannot connect to Redis");
                    if sleep_or_shutdown(&mut retry, &shutdown).await {
                        return;
                    }
                    continue;
                }
            };
            let (mut sink, mut messages) = pubsub.split();
            {
                let _change = self.inner.changes.lock().await;
                if let Err(err) = self.subscribe_all(&mut sink).await {
                    tracing::warn!(error = %err, "EPHEMERAL subscriptions cannot subscribe again");
                    if sleep_or_shutdown(&mut retry, &shutdown).await {
                        return;
                    }
                    continue;
                }
                self.inner.sink.send_replace(Some(sink));
            }
            retry = RETRY_MIN;
            loop {
                let message = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    message = messages.next() => message,
                };
                let Some(message) = message else { break };
                self.route(&message);
            }
            self.inner.sink.send_replace(None);
            tracing::warn!(
                "EPHEMERAL subscriptions lost their Redis connection; what is published until they are back is not delivered"
            );
        }
    }

    /// Subscribes a new connection to every route that has streams.
    async fn subscribe_all(&self, sink: &mut PubSubSink) -> Result<()> {
        let routes: Vec<Route> = self
            .inner
            .routes
            .lock()
            .expect("routes lock")
            .keys()
            .cloned()
            .collect();
        for route in routes {
            let subscribed = match &route {
                Route::Channel(channel) => sink.subscribe(channel).await,
                Route::Pattern(pattern) => sink.psubscribe(pattern).await,
            };
            subscribed.map_err(Error::Unavailable)?;
        }
        Ok(())
    }

    /// Hands a message to the streams of the route it came by.
    fn route(&self, message: &redis::Msg) {
        let channel = message.get_channel_name();
        let route = match message.get_pattern::<Option<String>>() {
            Ok(Some(pattern)) => Route::Pattern(pattern),
            _ => Route::Channel(channel.to_owned()),
        };
        let Some(topic) = topic_of_channel(channel) else {
            return;
        };
        let entry = match decode_channel_message(message.get_payload_bytes()) {
            Ok(entry) => entry,
            Err(err) => {
                tracing::warn!(error = %err, channel, "ignoring a message that redq did not publish");
                return;
            }
        };
        let arrival = Arrival {
            topic: Arc::from(topic),
            size: entry.wire_size() as u64,
            entry,
        };
        let routes = self.inner.routes.lock().expect("routes lock");
        for listener in routes.get(&route).into_iter().flatten() {
            listener.offer(&arrival);
        }
    }

    /// Takes a stream off its route; unsubscribes in Redis when it was the
    /// route's last.
    async fn leave(&self, route: Route, listener: Arc<Listener>) {
        let _change = self.inner.changes.lock().await;
        let last = {
            let mut routes = self.inner.routes.lock().expect("routes lock");
            let Some(streams) = routes.get_mut(&route) else {
                return;
            };
            streams.retain(|l| !Arc::ptr_eq(l, &listener));
            let last = streams.is_empty();
            if last {
                routes.remove(&route);
            }
            last
        };
        let sink = self.inner.sink.borrow().clone();
        if let (true, Some(mut sink)) = (last, sink) {
            let unsubscribed = match &route {
                Route::Channel(channel) => sink.unsubscribe(channel).await,
                Route::Pattern(pattern) => sink.punsubscribe(pattern).await,
            };
            if let Err(err) = unsubscribed {
                // The connection broke: the next one subscribes only to what has streams.
                tracing::debug!(error = %err, "could not unsubscribe");
            }
        }
    }
}

/// A stream's place on its route, until it drops.
pub struct Joined {
    hub: Hub,
    route: Route,
    listener: Arc<Listener>,
}

impl Drop for Joined {
    fn drop(&mut self) {
        let hub = self.hub.clone();
        let route = self.route.clone();
        let listener = self.listener.clone();
        tokio::spawn(async move { hub.leave(route, listener).await });
    }
}

fn not_connected(reason: &'static str) -> Error {
    Error::Unavailable(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        reason,
    )))
}
