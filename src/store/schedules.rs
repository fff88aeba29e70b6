//! Recurring schedules: one HASH per schedule, a ZSET of a topic's schedule
//! names (for listing by name), a ZSET of when each runs next (for finding
//! due runs without reading every schedule), and the global registry of
//! topics that have schedules. All of a topic's are in its hash tag, so each
//! change is one script on one Cluster slot.

use super::replies::{as_array, as_int};
use super::scripts::{DELETE_SCHEDULE, DUE_SCHEDULES, PUT_SCHEDULE, READ_SCHEDULE, RUN_SCHEDULE};
use super::stream::encode_message;
use super::{Store, TopicKeys, keys};
use crate::error::{Error, Result};
use crate::model::{NewMessage, Schedule, ScheduleMessage, ScheduleSpec, ScheduleState, TopicKind};
use bytes::Bytes;
use prost::Message as _;
use redis::Value;
use std::collections::HashMap;
use std::time::Duration;

/// What a schedule's `spec` field holds.
#[derive(Clone, PartialEq, prost::Message)]
struct StoredSpec {
    #[prost(string, tag = "1")]
    cron: String,
    #[prost(uint64, optional, tag = "2")]
    every_ms: Option<u64>,
    #[prost(string, tag = "3")]
    time_zone: String,
    #[prost(bytes = "bytes", tag = "4")]
    payload: Bytes,
    #[prost(map = "string, string", tag = "5")]
    attributes: HashMap<String, String>,
    #[prost(string, tag = "6")]
    ordering_key: String,
    #[prost(uint64, optional, tag = "7")]
    start_ms: Option<u64>,
    #[prost(uint64, optional, tag = "8")]
    end_ms: Option<u64>,
    #[prost(bool, tag = "9")]
    paused: bool,
    #[prost(uint32, tag = "10")]
    catch_up: u32,
}

impl From<&ScheduleSpec> for StoredSpec {
    fn from(spec: &ScheduleSpec) -> Self {
        let ScheduleSpec {
            cron,
            every,
            time_zone,
            message,
            start_ms,
            end_ms,
            paused,
            catch_up,
        } = spec;
        Self {
            cron: cron.clone(),
            every_ms: every.map(|e| e.as_millis() as u64),
            time_zone: time_zone.clone(),
            payload: message.payload.clone(),
            attributes: message.attributes.clone(),
            ordering_key: message.ordering_key.clone(),
            start_ms: *start_ms,
            end_ms: *end_ms,
            paused: *paused,
            catch_up: *catch_up,
        }
    }
}

impl From<StoredSpec> for ScheduleSpec {
    fn from(stored: StoredSpec) -> Self {
        Self {
            cron: stored.cron,
            every: stored.every_ms.map(Duration::from_millis),
            time_zone: stored.time_zone,
            message: ScheduleMessage {
                payload: stored.payload,
                attributes: stored.attributes,
                ordering_key: stored.ordering_key,
            },
            start_ms: stored.start_ms,
            end_ms: stored.end_ms,
            paused: stored.paused,
            catch_up: stored.catch_up,
        }
    }
}

/// A schedule as read, with the version a change must find to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedSchedule {
    pub schedule: Schedule,
    pub version: u64,
}

/// One run to record: its message id, nominal time and message.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    pub nominal_ms: u64,
    pub message: NewMessage,
}

/// The due schedules of a topic, by Redis' clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSchedules {
    pub now_ms: u64,
    pub names: Vec<String>,
    /// The earliest next run of any schedule of the topic.
    pub first_ms: Option<u64>,
}

fn optional_ms(value: Value) -> Result<Option<u64>> {
    match value {
        Value::Nil => Ok(None),
        value => Ok(u64::try_from(as_int(value)?).ok()),
    }
}

/// A schedule from `HMGET spec v next last runs`; None when it has no spec.
fn schedule_of(name: &str, fields: Value) -> Result<Option<VersionedSchedule>> {
    let mut fields = as_array(fields)?.into_iter();
    let mut next = || fields.next().unwrap_or(Value::Nil);
    let spec = match next() {
        Value::Nil => return Ok(None),
        Value::BulkString(bytes) => StoredSpec::decode(&bytes[..])
            .map_err(|err| Error::Corrupt(format!("schedule {name}: {err}")))?,
        other => return Err(Error::Corrupt(format!("schedule spec {other:?}"))),
    };
    let version = optional_ms(next())?.unwrap_or(0);
    let state = ScheduleState {
        next_ms: optional_ms(next())?,
        last_ms: optional_ms(next())?,
        runs: optional_ms(next())?.unwrap_or(0),
    };
    Ok(Some(VersionedSchedule {
        schedule: Schedule {
            name: name.to_owned(),
            spec: spec.into(),
            state,
        },
        version,
    }))
}

impl Store {
    /// A schedule and Redis' time, read together from the node holding it.
    pub async fn read_schedule(
        &self,
        keys: &TopicKeys,
        name: &str,
    ) -> Result<(u64, Option<VersionedSchedule>)> {
        let mut conn = self.connection().await?;
        let reply: Value = READ_SCHEDULE
            .key(keys.schedule(name))
            .invoke_async(&mut conn)
            .await?;
        let mut reply = as_array(reply)?.into_iter();
        let now = optional_ms(reply.next().unwrap_or(Value::Nil))?.unwrap_or(0);
        let schedule = schedule_of(name, reply.next().unwrap_or(Value::Nil))?;
        Ok((now, schedule))
    }

    /// Creates or replaces a schedule unless it changed since `version` was
    /// read; false when it did.
    pub async fn put_schedule(
        &self,
        keys: &TopicKeys,
        name: &str,
        version: u64,
        spec: &ScheduleSpec,
        next_ms: Option<u64>,
    ) -> Result<bool> {
        let mut conn = self.connection().await?;
        let done: i64 = PUT_SCHEDULE
            .key(keys.schedule(name))
            .key(keys.schedules())
            .key(keys.schedules_due())
            .arg(name)
            .arg(version)
            .arg(StoredSpec::from(spec).encode_to_vec())
            .arg(next_ms.map(|ms| ms.to_string()).unwrap_or_default())
            .invoke_async(&mut conn)
            .await?;
        Ok(done == 1)
    }

    /// Records `runs` of a schedule and schedules their messages at their
    /// nominal times, unless it changed since `version` was read; false when
    /// it did. A LIST topic's scheduled messages are bare payloads (see
    /// push_elements.lua).
    pub async fn run_schedule(
        &self,
        keys: &TopicKeys,
        kind: &TopicKind,
        name: &str,
        version: u64,
        runs: &[Run],
        next_ms: Option<u64>,
    ) -> Result<bool> {
        let mut invocation = RUN_SCHEDULE.key(keys.schedule(name));
        invocation
            .key(keys.schedules_due())
            .key(keys.scheduled())
            .key(keys.scheduled_messages())
            .key(keys.settings())
            .arg(name)
            .arg(version)
            .arg(next_ms.map(|ms| ms.to_string()).unwrap_or_default());
        for run in runs {
            let (body, key) = match kind {
                TopicKind::List { .. } => (run.message.payload.to_vec(), ""),
                TopicKind::Stream | TopicKind::Ephemeral => (
                    encode_message(&run.message),
                    run.message.ordering_key.as_str(),
                ),
            };
            invocation
                .arg(&run.id)
                .arg(run.nominal_ms)
                .arg(body)
                .arg(key);
        }
        let mut conn = self.shared();
        let done: i64 = invocation.invoke_async(&mut conn).await?;
        self.replicated(&mut conn, &keys.schedule(name)).await?;
        Ok(done == 1)
    }

    /// Deletes a schedule; false when there was none.
    pub async fn delete_schedule(&self, keys: &TopicKeys, name: &str) -> Result<bool> {
        let mut conn = self.connection().await?;
        let deleted: i64 = DELETE_SCHEDULE
            .key(keys.schedule(name))
            .key(keys.schedules())
            .key(keys.schedules_due())
            .arg(name)
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }

    /// Up to `limit` schedules after `after`, by name, and the name to
    /// continue after when there are more.
    pub async fn schedules_page(
        &self,
        keys: &TopicKeys,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<Schedule>, Option<String>)> {
        let mut conn = self.connection().await?;
        let from = after.map_or_else(|| "-".to_owned(), |name| format!("({name}"));
        let mut names: Vec<String> = redis::cmd("ZRANGEBYLEX")
            .arg(keys.schedules())
            .arg(from)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(u64::from(limit) + 1)
            .query_async(&mut conn)
            .await?;
        let more = names.len() > limit as usize;
        names.truncate(limit as usize);
        if names.is_empty() {
            return Ok((Vec::new(), None));
        }
        let mut pipe = redis::pipe();
        for name in &names {
            pipe.cmd("HMGET")
                .arg(keys.schedule(name))
                .arg(&["spec", "v", "next", "last", "runs"]);
        }
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut schedules = Vec::with_capacity(names.len());
        for (name, fields) in names.iter().zip(replies) {
            // A schedule deleted between the two reads is left out.
            if let Some(found) = schedule_of(name, fields)? {
                schedules.push(found.schedule);
            }
        }
        let next = more.then(|| names.last().cloned()).flatten();
        Ok((schedules, next))
    }

    /// The topic's schedules due now (at most `limit`), and when the
    /// earliest of all runs next.
    pub async fn due_schedules(&self, keys: &TopicKeys, limit: u32) -> Result<DueSchedules> {
        let mut conn = self.connection().await?;
        let reply: Value = DUE_SCHEDULES
            .key(keys.schedules_due())
            .arg(limit)
            .invoke_async(&mut conn)
            .await?;
        let mut reply = as_array(reply)?.into_iter();
        let mut next = || reply.next().unwrap_or(Value::Nil);
        let now_ms = optional_ms(next())?.unwrap_or(0);
        let names = as_array(next())?
            .into_iter()
            .map(super::replies::as_string)
            .collect::<Result<_>>()?;
        let first_ms = optional_ms(next())?;
        Ok(DueSchedules {
            now_ms,
            names,
            first_ms,
        })
    }

    /// Adds `topic` to the registry of topics with schedules.
    pub async fn register_scheduled_topic(&self, topic: &str) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: i64 = redis::cmd("ZADD")
            .arg(keys::SCHEDULED_TOPICS)
            .arg("NX")
            .arg(0)
            .arg(topic)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Every topic that has (or had, until it was deleted) schedules.
    pub async fn scheduled_topics(&self) -> Result<Vec<String>> {
        let mut conn = self.connection().await?;
        Ok(redis::cmd("ZRANGE")
            .arg(keys::SCHEDULED_TOPICS)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?)
    }

    /// Deletes every schedule of a topic and its registration; part of
    /// deleting the topic.
    pub(super) async fn delete_schedules(&self, keys: &TopicKeys) -> Result<()> {
        let names: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.schedules())
            .arg(0)
            .arg(-1)
            .query_async(&mut self.connection().await?)
            .await?;
        for name in names {
            self.delete_schedule(keys, &name).await?;
        }
        let mut conn = self.connection().await?;
        let _: i64 = redis::cmd("DEL")
            .arg(keys.schedules())
            .arg(keys.schedules_due())
            .query_async(&mut conn)
            .await?;
        let _: i64 = redis::cmd("ZREM")
            .arg(keys::SCHEDULED_TOPICS)
            .arg(keys.topic())
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}
