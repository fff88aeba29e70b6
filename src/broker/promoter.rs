//! The promoter: moves scheduled messages into their topic's stream when they
//! fall due. Every replica runs one; the promotion script is atomic, so they
//! never duplicate or lose a message.
//!
//! It sleeps until the earliest due time it knows of. It learns of due times
//! from schedules made on this replica, from other replicas' hints, and from
//! each promotion pass (which reports the topic's next due time); a periodic
//! sweep of every topic is the safety net for a lost hint or a restart.

use crate::store::{Store, TopicKeys};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most messages moved by one script call, so a large backlog is drained in
/// batches without blocking Redis for long.
const BATCH: u32 = 1000;
/// Safety net: every topic is looked at this often.
const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// Pause before retrying a topic whose promotion failed.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

/// When each topic next has a message to promote, as far as this replica knows.
pub struct PromotionTimers {
    due: Mutex<HashMap<String, Instant>>,
    earlier: Notify,
    /// How long before their due time messages are promoted.
    ahead: Duration,
}

impl PromotionTimers {
    pub fn new(ahead: Duration) -> Self {
        Self {
            due: Mutex::default(),
            earlier: Notify::new(),
            ahead,
        }
    }

    /// Records that `topic` has a message due in `due_in`; wakes the promoter
    /// when that is earlier than what it waits for.
    pub fn due_in(&self, topic: &str, due_in: Duration) {
        let at = Instant::now() + due_in.saturating_sub(self.ahead);
        let mut due = self.due.lock().expect("timers lock");
        let slot = due.entry(topic.to_owned()).or_insert(at);
        if at <= *slot {
            *slot = at;
            self.earlier.notify_one();
        }
    }

    /// Records the next due time a promotion pass reported. Taken topics were
    /// removed by `take_due`; an entry present now came from a schedule made
    /// during the pass, and the earlier of the two wins.
    fn after_pass(&self, topic: &str, next: Option<Instant>) {
        if let Some(at) = next {
            let mut due = self.due.lock().expect("timers lock");
            let slot = due.entry(topic.to_owned()).or_insert(at);
            *slot = (*slot).min(at);
        }
    }

    fn take_due(&self, now: Instant) -> Vec<String> {
        let mut due = self.due.lock().expect("timers lock");
        let topics: Vec<String> = due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(topic, _)| topic.clone())
            .collect();
        for topic in &topics {
            due.remove(topic);
        }
        topics
    }

    fn next(&self) -> Option<Instant> {
        self.due
            .lock()
            .expect("timers lock")
            .values()
            .min()
            .copied()
    }
}

pub struct Promoter {
    store: Store,
    timers: Arc<PromotionTimers>,
}

impl Promoter {
    pub fn new(store: Store, timers: Arc<PromotionTimers>) -> Self {
        Self { store, timers }
    }

    /// Background loop: promotes due messages until shutdown.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut next_sweep = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_sweep {
                next_sweep = now + SWEEP_EVERY;
                match self.store.topics().await {
                    Ok(topics) => {
                        for topic in topics {
                            self.timers.due_in(&topic, Duration::ZERO);
                        }
                    }
                    Err(err) => tracing::debug!(error = ?err, "promoter cannot list topics"),
                }
            }
            for topic in self.timers.take_due(now) {
                let next = self.promote(&topic).await;
                self.timers.after_pass(&topic, next);
            }
            let wake_at = self
                .timers
                .next()
                .map_or(next_sweep, |at| at.min(next_sweep));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.timers.earlier.notified() => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// One promotion pass on `topic`; returns when to look at it again.
    #[tracing::instrument(skip_all, fields(topic = %topic))]
    async fn promote(&self, topic: &str) -> Option<Instant> {
        let keys = TopicKeys::new(topic);
        match self
            .store
            .promote_due(&keys, BATCH, self.timers.ahead)
            .await
        {
            Ok(promotion) if promotion.moved >= u64::from(BATCH) => Some(Instant::now()),
            Ok(promotion) => {
                if promotion.moved > 0 {
                    tracing::trace!(moved = promotion.moved, "promoted");
                }
                promotion.next_due_in.map(|wait| Instant::now() + wait)
            }
            Err(err) => {
                tracing::debug!(error = ?err, "promotion failed, retrying");
                Some(Instant::now() + RETRY_AFTER_ERROR)
            }
        }
    }
}
