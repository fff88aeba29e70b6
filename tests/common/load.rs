//! A publish + consume load for failover tests: what was acknowledged, what
//! was delivered, and how often.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// A publish + consume load on some topics: one publisher per topic (one
/// message every few ms, counting what was acknowledged) and one consumer per
/// topic that acks everything and reconnects when its stream breaks.
pub struct Load {
    published: Arc<Mutex<HashSet<String>>>,
    failed: Arc<Mutex<u64>>,
    /// Longest time between two acknowledged publishes of one publisher.
    longest_gap: Arc<Mutex<Duration>>,
    delivered: Arc<Mutex<HashMap<String, usize>>>,
    /// Message ids seen per payload: more than one is a duplicated stream entry.
    ids_by_payload: Arc<Mutex<HashMap<bytes::Bytes, HashSet<String>>>>,
    running: Arc<std::sync::atomic::AtomicBool>,
    publishers: Vec<tokio::task::JoinHandle<()>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub async fn start(server: &TestServer, topics: &[String]) -> Self {
        let mut load = Load {
            published: Arc::default(),
            failed: Arc::default(),
            longest_gap: Arc::default(),
            delivered: Arc::default(),
            ids_by_payload: Arc::default(),
            running: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            publishers: Vec::new(),
            consumers: Vec::new(),
        };
        for topic in topics {
            let mut client = server.client().await;
            let options = || Sub::deadline(Duration::from_secs(5));
            let mut stream = subscribe(&mut client, topic, "s", options()).await;
            let delivered = load.delivered.clone();
            let ids_by_payload = load.ids_by_payload.clone();
            let topic = topic.clone();
            load.consumers.push(tokio::spawn(async move {
                loop {
                    match stream.message().await {
                        Ok(Some(response)) => {
                            for m in &response.messages {
                                *delivered.lock().unwrap().entry(id_of(m)).or_default() += 1;
                                let payload = m.message.as_ref().unwrap().payload.clone();
                                ids_by_payload
                                    .lock()
                                    .unwrap()
                                    .entry(payload)
                                    .or_default()
                                    .insert(id_of(m));
                            }
                            // A failed ack only means a redelivery, counted as a duplicate.
                            let _ =
                                ack(&mut client, &topic, "s", ack_ids_of(&response.messages)).await;
                        }
                        _ => {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            if let Ok(s) = client.subscribe(options().request(&topic, "s")).await {
                                stream = s.into_inner();
                            }
                        }
                    }
                }
            }));
        }
        for topic in topics {
            let topic = topic.clone();
            let mut client = server.client().await;
            let (published, failed, running, longest_gap) = (
                load.published.clone(),
                load.failed.clone(),
                load.running.clone(),
                load.longest_gap.clone(),
            );
            load.publishers.push(tokio::spawn(async move {
                let mut n = 0u64;
                let mut last_ok = std::time::Instant::now();
                while running.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let messages = vec![message(format!("{topic}-{n}"))];
                    match try_publish_messages(&mut client, &topic, messages).await {
                        Ok(r) => {
                            published.lock().unwrap().extend(r.message_ids);
                            let mut gap = longest_gap.lock().unwrap();
                            *gap = (*gap).max(last_ok.elapsed());
                            last_ok = std::time::Instant::now();
                        }
                        Err(_) => *failed.lock().unwrap() += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            }));
        }
        load
    }

    /// Stops publishing, waits (bounded) for every acknowledged publish to be
    /// delivered, and returns (published, failed publishes, lost, duplicates).
    pub async fn finish(self) -> (usize, u64, usize, usize) {
        self.finish_with_gap().await.0
    }

    /// Whether a message with this id reached a consumer.
    pub fn was_delivered(&self, id: &str) -> bool {
        self.delivered.lock().unwrap().contains_key(id)
    }

    /// Payloads (each published once) that arrived under more than one
    /// message id: stream entries written twice.
    pub fn duplicated_entries(&self) -> usize {
        let ids = self.ids_by_payload.lock().unwrap();
        ids.values().filter(|ids| ids.len() > 1).count()
    }

    /// Like [`Self::finish`], with the longest time a publisher waited
    /// between two acknowledged publishes (how long the outage lasted).
    pub async fn finish_with_gap(self) -> ((usize, u64, usize, usize), Duration) {
        let longest_gap = self.longest_gap.clone();
        self.running
            .store(false, std::sync::atomic::Ordering::Relaxed);
        for p in self.publishers {
            p.await.unwrap();
        }
        let published = self.published.lock().unwrap().clone();
        let deadline = std::time::Instant::now() + EVENTUALLY;
        let lost = loop {
            let missing = {
                let delivered = self.delivered.lock().unwrap();
                published
                    .iter()
                    .filter(|id| !delivered.contains_key(*id))
                    .count()
            };
            if missing == 0 || std::time::Instant::now() > deadline {
                break missing;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        for c in self.consumers {
            c.abort();
        }
        let duplicates = self.delivered.lock().unwrap().values().map(|n| n - 1).sum();
        let failed = *self.failed.lock().unwrap();
        let gap = *longest_gap.lock().unwrap();
        ((published.len(), failed, lost, duplicates), gap)
    }
}
