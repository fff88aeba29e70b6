//! No polling while a LIST topic is idle: per LIST topic with local streams,
//! one task of this replica waits on the topic's list with a blocking move
//! (`BLMOVE` into the staging list) on a connection of its own, whenever a
//! local stream with room found the list empty; when an element comes, it
//! wakes the topic's local streams, and the next fetch takes it. Redis hands
//! each new element to one of the replicas blocked on the list, and a
//! backlog to all of them, so no hint between replicas is needed.
//!
//! The task blocks only while a stream waits: a stream that fetches a
//! backlog takes it from the list itself, and a blocking move then would
//! only shift elements into the staging list one round trip at a time.

use crate::broker::wakeups::{RETRY_MIN, Wakeups, back_off};
use crate::store::{Store, TopicKeys};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How long one blocking move waits before it is sent again (never 0:
/// a dead connection must show up).
const BLOCK: Duration = Duration::from_secs(10);

/// This replica's waiters, one per LIST topic with local streams.
#[derive(Default)]
pub struct ListWaiters {
    topics: Mutex<HashMap<String, Waiter>>,
}

struct Waiter {
    streams: usize,
    wanted: Arc<Notify>,
    task: JoinHandle<()>,
    store: Store,
    keys: TopicKeys,
}

/// A local stream's hold on its LIST topic's waiter; the last one dropped
/// ends the waiter (and closes its connection, which ends its block).
pub struct WaiterHandle {
    topic: String,
    wanted: Arc<Notify>,
    waiters: Arc<ListWaiters>,
}

impl ListWaiters {
    /// Joins (or starts) the waiter of `keys`' LIST topic.
    pub fn join(
        self: &Arc<Self>,
        store: &Store,
        wakeups: &Wakeups,
        keys: &TopicKeys,
    ) -> WaiterHandle {
        let topic = keys.topic().to_owned();
        let mut topics = self.topics.lock().expect("waiters lock");
        let waiter = topics.entry(topic.clone()).or_insert_with(|| {
            let wanted = Arc::new(Notify::new());
            let task = tokio::spawn(wait_for_elements(
                store.clone(),
                wakeups.clone(),
                keys.clone(),
                wanted.clone(),
            ));
            Waiter {
                streams: 0,
                wanted,
                task,
                store: store.clone(),
                keys: keys.clone(),
            }
        });
        waiter.streams += 1;
        WaiterHandle {
            topic,
            wanted: waiter.wanted.clone(),
            waiters: self.clone(),
        }
    }
}

impl WaiterHandle {
    /// The stream has room and found the list empty: the waiter blocks on
    /// the list until an element comes (at once, if one came meanwhile).
    pub fn elements_wanted(&self) {
        self.wanted.notify_one();
    }
}

impl Drop for WaiterHandle {
    fn drop(&mut self) {
        let mut topics = self.waiters.topics.lock().expect("waiters lock");
        if let Some(waiter) = topics.get_mut(&self.topic) {
            waiter.streams -= 1;
            if waiter.streams == 0 {
                waiter.task.abort();
                // An element its last move took after the topic's streams
                // stopped fetching (they ended, or the topic was deleted
                // under them) goes back onto the list.
                if let (Some(waiter), Ok(runtime)) = (
                    topics.remove(&self.topic),
                    tokio::runtime::Handle::try_current(),
                ) {
                    runtime.spawn(async move {
                        if let Err(err) = waiter.store.unstage(&waiter.keys).await {
                            tracing::debug!(error = ?err, "staged elements left for the next fetch");
                        }
                    });
                }
            }
        }
    }
}

/// The waiter's task: each time a stream wants elements, blocks on the list
/// until one is moved to the staging list, then wakes the local streams.
async fn wait_for_elements(store: Store, wakeups: Wakeups, keys: TopicKeys, wanted: Arc<Notify>) {
    let mut connection = None;
    let mut retry = RETRY_MIN;
    loop {
        wanted.notified().await;
        loop {
            let conn = match &mut connection {
                Some(conn) => conn,
                None => match store.blocking_connection(BLOCK).await {
                    Ok(conn) => connection.insert(conn),
                    Err(err) => {
                        tracing::debug!(error = ?err, topic = keys.topic(), "list waiter cannot connect");
                        back_off(&mut retry).await;
                        continue;
                    }
                },
            };
            match store.move_to_staging(conn, &keys, BLOCK).await {
                Ok(true) => {
                    retry = RETRY_MIN;
                    wakeups.elements_arrived(keys.topic());
                    break;
                }
                Ok(false) => retry = RETRY_MIN, // nothing came: block again
                Err(err) => {
                    tracing::debug!(error = ?err, topic = keys.topic(), "list waiter's blocking move failed");
                    connection = None;
                    back_off(&mut retry).await;
                }
            }
        }
    }
}
