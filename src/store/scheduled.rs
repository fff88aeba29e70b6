//! Scheduled messages: a ZSET (id → due ms) plus a HASH (id → fields) per
//! topic, promoted into the stream by one script when due.

use super::hints::{Hinted, hint_args};
use super::replies::{as_array, as_int};
use super::scripts::{CANCEL_SCHEDULED, PROMOTE_DUE, RESCHEDULE};
use super::{Store, TopicKeys};
use crate::error::Result;
use crate::model::Due;
use crate::model::Rescheduled;
use redis::Value;
use std::time::Duration;

/// What one promotion pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promotion {
    pub moved: u64,
    /// Time until the next scheduled message is to be promoted; None when none is left.
    pub next_due_in: Option<Duration>,
}

impl Store {
    /// Moves up to `limit` messages of the topic due within `ahead` into its stream.
    pub async fn promote_due(
        &self,
        keys: &TopicKeys,
        limit: u32,
        ahead: Duration,
    ) -> Result<Promotion> {
        let mut conn = self.connection().await?;
        let (moved, wait): (u64, i64) = PROMOTE_DUE
            .key(keys.scheduled())
            .key(keys.scheduled_messages())
            .key(keys.stream())
            .key(keys.watchers())
            .key(keys.settings())
            .arg(limit)
            .arg(ahead.as_millis() as u64)
            // Its own streams too: the promoter does not wake them itself.
            .arg(&hint_args(self, keys, Hinted::All)[..])
            .arg(keys.channel())
            .invoke_async(&mut conn)
            .await?;
        Ok(Promotion {
            moved,
            next_due_in: u64::try_from(wait).ok().map(Duration::from_millis),
        })
    }

    /// Removes a scheduled message unless it was promoted already.
    pub async fn cancel_scheduled(&self, keys: &TopicKeys, message_id: &str) -> Result<bool> {
        let mut conn = self.connection().await?;
        let cancelled: i64 = CANCEL_SCHEDULED
            .key(keys.scheduled())
            .key(keys.scheduled_messages())
            .arg(message_id)
            .invoke_async(&mut conn)
            .await?;
        Ok(cancelled == 1)
    }

    /// Moves a scheduled message, not yet promoted, to a new due time.
    pub async fn reschedule(
        &self,
        keys: &TopicKeys,
        message_id: &str,
        due: Due,
    ) -> Result<Option<Rescheduled>> {
        let (kind, amount) = match due {
            Due::Now => ("d", 0),
            Due::At(ms) => ("a", ms),
            Due::After(delay) => ("d", delay.as_millis() as u64),
        };
        let mut conn = self.connection().await?;
        let reply: Value = RESCHEDULE
            .key(keys.scheduled())
            .arg(message_id)
            .arg(kind)
            .arg(amount)
            .invoke_async(&mut conn)
            .await?;
        let mut reply = as_array(reply)?.into_iter();
        let due_ms = as_int(reply.next().unwrap_or(Value::Nil))?;
        let now = as_int(reply.next().unwrap_or(Value::Nil))?;
        let due_in = Duration::from_millis(u64::try_from(due_ms - now).unwrap_or(0));
        Ok(u64::try_from(due_ms)
            .ok()
            .map(|due_ms| Rescheduled { due_ms, due_in }))
    }
}
