//! One open stream on EPHEMERAL topics: which topics it takes, and the
//! messages waiting for its client, bounded by the stream's flow control. A
//! stream that falls behind loses what does not fit and counts it; the
//! replica's Redis connection and the other streams never wait for it.

use crate::broker::delivery::{Delivery, DeliveryBatch, FlowControl, TopicFilter, Unsent};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::model::{Entry, Pattern};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, mpsc};

/// Upper bound on one response, well under gRPC's usual 4 MiB receive limit.
const MAX_RESPONSE_BYTES: u64 = 3 * 1024 * 1024;

/// What a stream takes of the messages its route brings.
pub enum Wants {
    /// All of them: the route is the stream's topic's channel.
    Everything,
    /// Those of topics whose names match, and that `allowed` lets through:
    /// the route of pattern streams brings every EPHEMERAL topic's messages.
    Matching {
        pattern: Pattern,
        allowed: TopicFilter,
    },
}

/// A message as it arrived from Redis, decoded once for every listener.
pub struct Arrival {
    pub topic: Arc<str>,
    pub entry: Entry,
    /// Its size on the wire, for the byte limits.
    pub size: u64,
}

pub struct Listener {
    wants: Wants,
    control: Arc<FlowControl>,
    waiting: Mutex<Waiting>,
    arrived: Notify,
    metrics: Metrics,
}

/// Messages not yet taken by the stream's task, and what it lost.
#[derive(Default)]
struct Waiting {
    deliveries: VecDeque<Delivery>,
    bytes: u64,
    /// Lost since the last batch.
    dropped: u64,
}

impl Listener {
    pub fn new(wants: Wants, control: Arc<FlowControl>, metrics: Metrics) -> Self {
        Self {
            wants,
            control,
            waiting: Mutex::default(),
            arrived: Notify::new(),
            metrics,
        }
    }

    /// Takes a message for the stream, or counts it lost when the stream
    /// holds its `max_outstanding_messages` or `max_outstanding_bytes`
    /// already (one message is always taken when it holds nothing).
    pub fn offer(&self, message: &Arrival) {
        let Arrival { topic, entry, size } = message;
        let size = *size;
        if let Wants::Matching { pattern, allowed } = &self.wants
            && !(pattern.matches(topic) && allowed.allows(topic))
        {
            return;
        }
        let max_messages = self.control.max_outstanding() as usize;
        let max_bytes = self.control.max_outstanding_bytes();
        let mut waiting = self.waiting.lock().expect("listener lock");
        let full = !waiting.deliveries.is_empty()
            && (waiting.deliveries.len() >= max_messages || waiting.bytes + size > max_bytes);
        if full {
            waiting.dropped += 1;
            drop(waiting);
            self.metrics.ephemeral_dropped(topic, 1);
            // The count rides on the next response, an empty one if need be.
            self.arrived.notify_one();
            return;
        }
        waiting.bytes += size;
        waiting.deliveries.push_back(Delivery {
            topic: topic.clone(),
            ack_id: String::new(),
            entry: entry.clone(),
            attempt: 1,
        });
        drop(waiting);
        self.arrived.notify_one();
    }

    /// What waits for the client, up to one response's worth, and how many
    /// messages were lost since the last batch.
    fn take(&self) -> (Vec<Delivery>, u64, u64) {
        let mut waiting = self.waiting.lock().expect("listener lock");
        let mut taken = Vec::new();
        let mut bytes = 0;
        while let Some(next) = waiting.deliveries.front() {
            let size = next.entry.wire_size() as u64;
            if !taken.is_empty() && bytes + size > MAX_RESPONSE_BYTES {
                break;
            }
            bytes += size;
            taken.extend(waiting.deliveries.pop_front());
        }
        waiting.bytes -= bytes;
        let dropped = std::mem::take(&mut waiting.dropped);
        if !waiting.deliveries.is_empty() {
            self.arrived.notify_one(); // the rest makes the next batch
        }
        (taken, bytes, dropped)
    }

    /// The stream's task: sends what arrives, with the count of what was
    /// lost, until the client leaves or the stream is stopped. While the
    /// client does not read, `send` waits and new messages overflow.
    pub async fn run(self: Arc<Self>, sender: mpsc::Sender<Result<DeliveryBatch>>) {
        // Nothing of an EPHEMERAL stream is ever given back.
        let unsent = Unsent::default();
        let stopped = self.control.stopped();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                _ = sender.closed() => return,
                _ = self.arrived.notified() => {}
            }
            let (deliveries, bytes, dropped) = self.take();
            if deliveries.is_empty() && dropped == 0 {
                continue;
            }
            count_delivered(&self.metrics, &deliveries);
            let reserved = self.control.reserve(bytes);
            let batch = DeliveryBatch::new(deliveries, reserved, unsent.clone(), dropped);
            tokio::select! {
                _ = &mut stopped => return,
                sent = sender.send(Ok(batch)) => if sent.is_err() { return },
            }
        }
    }
}

/// Counts a batch's deliveries per topic, one call per run of one topic (a
/// pattern stream's batch may mix topics).
fn count_delivered(metrics: &Metrics, deliveries: &[Delivery]) {
    for run in deliveries.chunk_by(|a, b| a.topic == b.topic) {
        metrics.ephemeral_delivered(&run[0].topic, run.len() as u64);
    }
}
