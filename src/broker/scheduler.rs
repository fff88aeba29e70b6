//! The scheduler: runs recurring schedules when their nominal times come.
//! Every replica runs one, and all of them may race for the same run: the
//! run script applies only at the schedule's version that was read, so one
//! replica publishes each nominal time and the others find it done.
//!
//! A run is published by putting its message into the topic's scheduled
//! messages, due at its nominal time, in the same script that records the
//! run; the promoter (woken at once) then publishes it as it publishes any
//! scheduled message, to a stream, a Pub/Sub channel or a list. So a run is
//! never recorded without its message, and the one path that already
//! publishes exactly once to every kind of topic is the one runs take.
//!
//! It learns of due times from schedules put on this replica, from each pass
//! over a topic (which reports the topic's earliest next run), and from a
//! sweep of the topics that have schedules every second: the safety net for
//! schedules put on other replicas, and what keeps runs within a second of
//! their nominal time when the replica that would have run them is gone.

use super::Broker;
use crate::error::{Error, Result};
use crate::model::{Due, TopicKind};
use crate::model::{
    NewMessage, Recurrence, SCHEDULE_ATTRIBUTE, SCHEDULED_TIME_ATTRIBUTE, Schedule,
    new_scheduled_id, rfc3339_utc,
};
use crate::store::TopicKeys;
use crate::store::schedules::Run;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most schedules of one topic run by one pass.
const BATCH: u32 = 100;
/// Every topic with schedules is looked at this often.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Pause before retrying a topic whose pass failed.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);
/// Reads of one schedule in one pass: another replica's run or a
/// replacement between the read and the run script makes it read again.
const RUN_ATTEMPTS: usize = 3;

/// When each topic next has a schedule to run, as far as this replica knows.
#[derive(Default)]
pub struct RunTimers {
    due: Mutex<HashMap<String, Instant>>,
    earlier: Notify,
}

impl RunTimers {
    /// Records that `topic` has a run due in `due_in`; wakes the scheduler
    /// when that is earlier than what it waits for.
    pub fn due_in(&self, topic: &str, due_in: Duration) {
        let at = Instant::now() + due_in;
        let mut due = self.due.lock().expect("run timers lock");
        let slot = due.entry(topic.to_owned()).or_insert(at);
        if at <= *slot {
            *slot = at;
            self.earlier.notify_one();
        }
    }

    fn after_pass(&self, topic: &str, next: Option<Instant>) {
        if let Some(at) = next {
            let mut due = self.due.lock().expect("run timers lock");
            let slot = due.entry(topic.to_owned()).or_insert(at);
            *slot = (*slot).min(at);
        }
    }

    fn take_due(&self, now: Instant) -> Vec<String> {
        let mut due = self.due.lock().expect("run timers lock");
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
        let due = self.due.lock().expect("run timers lock");
        due.values().min().copied()
    }
}

pub struct Scheduler {
    broker: Broker,
}

impl Scheduler {
    pub fn new(broker: Broker) -> Self {
        Self { broker }
    }

    fn timers(&self) -> &RunTimers {
        &self.broker.run_timers
    }

    /// Background loop: runs due schedules until shutdown.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut next_sweep = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_sweep {
                next_sweep = now + SWEEP_EVERY;
                match self.broker.store.scheduled_topics().await {
                    Ok(topics) => {
                        for topic in topics {
                            self.timers().due_in(&topic, Duration::ZERO);
                        }
                    }
                    Err(err) => tracing::debug!(error = ?err, "scheduler cannot list topics"),
                }
            }
            for topic in self.timers().take_due(now) {
                let next = self.pass(&topic).await;
                self.timers().after_pass(&topic, next);
            }
            let wake_at = self
                .timers()
                .next()
                .map_or(next_sweep, |at| at.min(next_sweep));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.timers().earlier.notified() => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// Runs the topic's due schedules; returns when to look at it again.
    #[tracing::instrument(skip_all, fields(topic = %topic))]
    async fn pass(&self, topic: &str) -> Option<Instant> {
        let keys = TopicKeys::new(topic);
        let due = match self.broker.store.due_schedules(&keys, BATCH).await {
            Ok(due) => due,
            Err(err) => {
                tracing::debug!(error = ?err, "cannot read due schedules, retrying");
                return Some(Instant::now() + RETRY_AFTER_ERROR);
            }
        };
        if due.names.is_empty() {
            let wait = due.first_ms?.saturating_sub(due.now_ms);
            return Some(Instant::now() + Duration::from_millis(wait));
        }
        let kind = match self.broker.topic_config(topic).await {
            Ok((_, kind)) => kind,
            Err(err) => {
                tracing::debug!(error = ?err, "cannot read the topic's kind, retrying");
                return Some(Instant::now() + RETRY_AFTER_ERROR);
            }
        };
        for name in &due.names {
            if let Err(err) = self.run_schedule(topic, &keys, &kind, name).await {
                tracing::debug!(error = ?err, schedule = %name, "run failed, retrying");
                return Some(Instant::now() + RETRY_AFTER_ERROR);
            }
        }
        // Read again: the runs moved the topic's earliest next run.
        Some(Instant::now())
    }

    /// Publishes a schedule's due runs, unless another replica did.
    async fn run_schedule(
        &self,
        topic: &str,
        keys: &TopicKeys,
        kind: &TopicKind,
        name: &str,
    ) -> Result<()> {
        let store = &self.broker.store;
        for _ in 0..RUN_ATTEMPTS {
            let (now_ms, Some(read)) = store.read_schedule(keys, name).await? else {
                return Ok(());
            };
            let schedule = &read.schedule;
            let Some(next_ms) = schedule.state.next_ms.filter(|&next| next <= now_ms) else {
                return Ok(());
            };
            let recurrence = match Recurrence::new(&schedule.spec) {
                Ok(recurrence) => recurrence,
                Err(err) => {
                    // Validated when put: only a foreign write gets here.
                    return Err(Error::Corrupt(format!(
                        "schedule {name}: {}: {}",
                        err.field, err.reason
                    )));
                }
            };
            let due = recurrence.due_runs(next_ms, now_ms, schedule.spec.catch_up);
            let runs: Vec<Run> = due
                .publish
                .iter()
                .map(|&nominal_ms| Run {
                    id: new_scheduled_id(),
                    nominal_ms,
                    message: run_message(schedule, nominal_ms),
                })
                .collect();
            if store
                .run_schedule(keys, kind, name, read.version, &runs, due.next_ms)
                .await?
            {
                self.broker.metrics.schedule_ran(
                    topic,
                    runs.len() as u64,
                    due.catch_up,
                    due.skipped,
                );
                if !runs.is_empty() {
                    self.broker.wakeups.scheduled(topic, Duration::ZERO).await?;
                }
                return Ok(());
            }
        }
        Ok(())
    }
}

/// The message one run publishes: the template, its attributes plus the
/// schedule's name and the run's nominal time.
fn run_message(schedule: &Schedule, nominal_ms: u64) -> NewMessage {
    let template = &schedule.spec.message;
    let mut attributes = template.attributes.clone();
    attributes.insert(SCHEDULE_ATTRIBUTE.to_owned(), schedule.name.clone());
    attributes.insert(SCHEDULED_TIME_ATTRIBUTE.to_owned(), rfc3339_utc(nominal_ms));
    NewMessage {
        payload: template.payload.clone(),
        attributes,
        ordering_key: template.ordering_key.clone(),
        dedupe_id: String::new(),
        due: Due::At(nominal_ms),
    }
}
