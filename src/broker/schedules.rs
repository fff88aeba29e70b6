//! Recurring schedules for `AdminService`: put (create or replace), get,
//! list and delete. Running them is [`super::scheduler`]'s.

use super::Broker;
use crate::error::{Error, Result};
use crate::model::{Recurrence, Schedule, ScheduleSpec, ScheduleState};
use crate::store::TopicKeys;
use crate::store::schedules::VersionedSchedule;
use std::time::Duration;

/// Reads and writes of one PutSchedule: each retry follows a run or another
/// put that changed the schedule in between, so a few always suffice.
const PUT_ATTEMPTS: usize = 10;

impl Broker {
    /// Creates or replaces the schedule `name` of `topic`, creating the topic
    /// as a publish would. A replacement continues after the last run's
    /// nominal time and keeps `runs`.
    #[tracing::instrument(skip_all, fields(topic = %topic, schedule = %name))]
    pub async fn put_schedule(
        &self,
        topic: &str,
        name: &str,
        spec: ScheduleSpec,
    ) -> Result<Schedule> {
        let recurrence = Recurrence::new(&spec)
            .map_err(|err| Error::invalid(format!("schedule.{}", err.field), err.reason))?;
        self.before_publish(topic).await?;
        self.store.register_scheduled_topic(topic).await?;
        let keys = TopicKeys::new(topic);
        for _ in 0..PUT_ATTEMPTS {
            let (now_ms, current) = self.store.read_schedule(&keys, name).await?;
            let next_ms = next_on_put(&recurrence, &spec, current.as_ref(), now_ms);
            let version = current.as_ref().map_or(0, |c| c.version);
            if self
                .store
                .put_schedule(&keys, name, version, &spec, next_ms)
                .await?
            {
                if let Some(next_ms) = next_ms {
                    let wait = Duration::from_millis(next_ms.saturating_sub(now_ms));
                    self.run_timers.due_in(topic, wait);
                }
                let state = current.map_or_else(ScheduleState::default, |c| c.schedule.state);
                return Ok(Schedule {
                    name: name.to_owned(),
                    spec,
                    state: ScheduleState { next_ms, ..state },
                });
            }
        }
        Err(Error::ResourceExhausted(
            "the schedule changed on every attempt; retry".into(),
        ))
    }

    /// A schedule with its next and last runs.
    pub async fn schedule(&self, topic: &str, name: &str) -> Result<Schedule> {
        let (_, found) = self
            .store
            .read_schedule(&TopicKeys::new(topic), name)
            .await?;
        found
            .map(|found| found.schedule)
            .ok_or_else(|| Error::NotFound("schedule".into()))
    }

    /// A page of a topic's schedules by name, and the name to continue
    /// after when there are more.
    pub async fn schedules(
        &self,
        topic: &str,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<(Vec<Schedule>, Option<String>)> {
        self.store
            .schedules_page(&TopicKeys::new(topic), after, page_size)
            .await
    }

    /// Deletes a schedule; NOT_FOUND when there is none.
    #[tracing::instrument(skip_all, fields(topic = %topic, schedule = %name))]
    pub async fn delete_schedule(&self, topic: &str, name: &str) -> Result<()> {
        if self
            .store
            .delete_schedule(&TopicKeys::new(topic), name)
            .await?
        {
            Ok(())
        } else {
            Err(Error::NotFound("schedule".into()))
        }
    }
}

/// The next run of a schedule put at `now_ms` over `current`: none while
/// paused; else the first nominal time from now, or from the current next
/// run when that is due and not yet run (a replacement does not drop a run
/// in flight, and a schedule missed while no replica ran keeps its catch-up),
/// always after the last run, so no nominal time runs twice. Resuming a
/// paused schedule starts from now: runs due while paused are skipped.
fn next_on_put(
    recurrence: &Recurrence,
    spec: &ScheduleSpec,
    current: Option<&VersionedSchedule>,
    now_ms: u64,
) -> Option<u64> {
    if spec.paused {
        return None;
    }
    let current = current.map(|c| &c.schedule);
    let from = match current {
        Some(c) if !c.spec.paused => c.state.next_ms.map_or(now_ms, |next| next.min(now_ms)),
        _ => now_ms,
    };
    let next = recurrence.first_from(from)?;
    match current.and_then(|c| c.state.last_ms) {
        Some(last) if next <= last => recurrence.next_after(last),
        _ => Some(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ScheduleMessage;

    fn every_second(paused: bool) -> ScheduleSpec {
        ScheduleSpec {
            cron: String::new(),
            every: Some(Duration::from_secs(1)),
            time_zone: String::new(),
            message: ScheduleMessage::default(),
            start_ms: None,
            end_ms: None,
            paused,
            catch_up: 1,
        }
    }

    fn current(paused: bool, next_ms: Option<u64>, last_ms: Option<u64>) -> VersionedSchedule {
        VersionedSchedule {
            schedule: Schedule {
                name: "s".into(),
                spec: every_second(paused),
                state: ScheduleState {
                    next_ms,
                    last_ms,
                    runs: 3,
                },
            },
            version: 4,
        }
    }

    #[test]
    fn a_put_continues_after_the_last_run_and_skips_what_a_pause_missed() {
        let spec = every_second(false);
        let r = Recurrence::new(&spec).unwrap();
        // New: from now.
        assert_eq!(next_on_put(&r, &spec, None, 10_500), Some(11_000));
        // Replacing a running schedule whose run at 10 s is due: kept.
        let running = current(false, Some(10_000), Some(9_000));
        assert_eq!(next_on_put(&r, &spec, Some(&running), 10_500), Some(10_000));
        // Its last run is never repeated, even if the clock went back.
        let ran = current(false, Some(11_000), Some(10_000));
        assert_eq!(next_on_put(&r, &spec, Some(&ran), 9_500), Some(11_000));
        // Resuming: the runs due while paused are skipped.
        let paused = current(true, None, Some(2_000));
        assert_eq!(next_on_put(&r, &spec, Some(&paused), 10_500), Some(11_000));
        // Pausing: no next run.
        assert_eq!(
            next_on_put(&r, &every_second(true), Some(&ran), 10_500),
            None
        );
    }
}
