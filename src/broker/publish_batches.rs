//! Publish requests that arrive together are written together: one writer
//! task per topic (per worker) takes every request queued while its previous
//! write was in flight and appends them with one Redis call. A request sent
//! when nothing is in flight is written at once, so batching adds no wait.
//!
//! Requests of one topic are written in the order they were queued, and each
//! gets its own result: a request that breaks a topic limit fails alone.

use super::Broker;
use crate::error::{Error, Result};
use crate::model::{PublishBatch, Published, TopicKind};
use crate::store::TopicKeys;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most messages written in one call (several requests together).
const MAX_MESSAGES: usize = 1000;
/// Most payload bytes written in one call.
const MAX_BYTES: usize = 4 * 1024 * 1024;
/// A topic's writer ends after this long without requests.
const IDLE: Duration = Duration::from_secs(30);

/// What a queued request gets back.
pub type Reply = oneshot::Receiver<Result<Vec<Published>>>;

struct Job {
    request: PublishBatch,
    reply: oneshot::Sender<Result<Vec<Published>>>,
}

/// The writers of one worker's topics.
#[derive(Default)]
pub struct PublishBatches {
    writers: Mutex<HashMap<String, mpsc::UnboundedSender<Job>>>,
}

impl PublishBatches {
    /// Queues `request` for `topic`, starting its writer if it has none.
    pub fn submit(self: &Arc<Self>, broker: &Broker, topic: &str, request: PublishBatch) -> Reply {
        let (reply, answer) = oneshot::channel();
        let mut job = Job { request, reply };
        // Sent under the lock, so a writer that is ending (it takes the
        // lock to leave the map) never strands a job.
        let mut writers = self.writers.lock().expect("publish writers lock");
        if let Some(writer) = writers.get(topic) {
            match writer.send(job) {
                Ok(()) => return answer,
                Err(mpsc::error::SendError(returned)) => job = returned,
            }
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        let _ = sender.send(job);
        writers.insert(topic.to_owned(), sender);
        tokio::spawn(write_topic(
            broker.clone(),
            self.clone(),
            topic.to_owned(),
            receiver,
        ));
        answer
    }
}

/// The writer of one topic: waits for a request, takes every other one
/// already queued (within the bounds), writes them with one call.
async fn write_topic(
    broker: Broker,
    batches: Arc<PublishBatches>,
    topic: String,
    mut queue: mpsc::UnboundedReceiver<Job>,
) {
    let keys = TopicKeys::new(&topic);
    let mut next: Option<Job> = None;
    loop {
        let first = match next.take() {
            Some(job) => job,
            None => match tokio::time::timeout(IDLE, queue.recv()).await {
                Ok(Some(job)) => job,
                Ok(None) => return,
                Err(_idle) => {
                    let mut writers = batches.writers.lock().expect("publish writers lock");
                    match queue.try_recv() {
                        Ok(job) => job,
                        Err(_) => {
                            writers.remove(&topic);
                            return;
                        }
                    }
                }
            },
        };
        let mut jobs = vec![first];
        let (mut count, mut bytes) = size(&jobs[0]);
        while let Ok(job) = queue.try_recv() {
            let (n, b) = size(&job);
            if count + n > MAX_MESSAGES || bytes + b > MAX_BYTES {
                next = Some(job);
                break;
            }
            count += n;
            bytes += b;
            jobs.push(job);
        }
        write(&broker, &keys, &topic, jobs).await;
    }
}

fn size(job: &Job) -> (usize, usize) {
    let messages = &job.request.messages;
    let bytes = messages.iter().map(|m| m.payload.len()).sum();
    (messages.len(), bytes)
}

/// Writes the jobs that pass the topic's checks with one call, and answers each.
async fn write(broker: &Broker, keys: &TopicKeys, topic: &str, jobs: Vec<Job>) {
    let (settings, kind, dedupe_window) = match broker.before_publish(topic).await {
        Ok(checked) => checked,
        Err(err) => {
            for job in jobs {
                let _ = job.reply.send(Err(err.clone()));
            }
            return;
        }
    };
    let mut replies = Vec::with_capacity(jobs.len());
    let mut requests = Vec::with_capacity(jobs.len());
    for job in jobs {
        match super::check_payloads(&settings, &job.request.messages) {
            Err(err) => {
                let _ = job.reply.send(Err(err));
            }
            Ok(()) => {
                replies.push(job.reply);
                requests.push(job.request);
            }
        }
    }
    if requests.is_empty() {
        return;
    }
    if kind != TopicKind::Stream {
        // No batching across requests: each is one round trip already.
        for (request, reply) in requests.into_iter().zip(replies) {
            let published = broker
                .publish_to_kind(topic, &kind, request, dedupe_window)
                .await;
            let _ = reply.send(published);
        }
        return;
    }
    let results = broker
        .publish_carrying(keys, topic, &requests, dedupe_window)
        .await;
    let results = results.and_then(|results| {
        if results.len() == requests.len() {
            Ok(results)
        } else {
            Err(Error::Corrupt("publish reply of the wrong length".into()))
        }
    });
    match results {
        Ok(results) => {
            for published in results.iter().filter_map(|result| result.as_ref().ok()) {
                if let Err(err) = broker.after_publish(topic, published).await {
                    tracing::debug!(error = ?err, "could not wake scheduled message watchers");
                }
            }
            for (result, reply) in results.into_iter().zip(replies) {
                let _ = reply.send(result);
            }
        }
        Err(err) => {
            for reply in replies {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }
}
