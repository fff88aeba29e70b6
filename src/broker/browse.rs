//! Looking at a topic without changing it, for the dashboard: its messages
//! (newest first, or one by id), its schedule, and Redis' memory.

use super::Broker;
use crate::error::Result;
use crate::model::{Entry, ScheduledEntry, is_entry_id, is_scheduled_id};
use crate::store::gauges::Memory;

impl Broker {
    /// Up to `count` of the topic's messages, newest first, before the
    /// entry `before` (from the newest when None). Nothing is consumed.
    pub async fn newest_messages(
        &self,
        topic: &str,
        before: Option<&str>,
        count: u32,
    ) -> Result<Vec<Entry>> {
        let keys = self.existing_topic(topic).await?;
        self.store.newest_entries(&keys, before, count).await
    }

    /// The message `id` of the topic: a stream entry, or a scheduled message
    /// still waiting; None when neither holds it (any more).
    pub async fn message(&self, topic: &str, id: &str) -> Result<Option<Entry>> {
        let keys = self.existing_topic(topic).await?;
        if is_entry_id(id) {
            return self.store.entry(&keys, id).await;
        }
        if is_scheduled_id(id) {
            let scheduled = self.store.scheduled_entry(&keys, id).await?;
            return Ok(scheduled.and_then(|s| s.entry));
        }
        Ok(None)
    }

    /// The topic's `count` scheduled messages due first.
    pub async fn scheduled_messages(&self, topic: &str, count: u32) -> Result<Vec<ScheduledEntry>> {
        let keys = self.existing_topic(topic).await?;
        self.store.scheduled_entries(&keys, count).await
    }

    /// Redis' memory now.
    pub async fn redis_memory(&self) -> Result<Memory> {
        self.store.memory().await
    }

    /// `standalone`, `sentinel` or `cluster`.
    pub fn redis_topology(&self) -> &'static str {
        self.store.topology_name()
    }

    /// Whether publishing is refused because Redis is too full.
    pub fn refusing_publishes(&self) -> bool {
        self.memory.is_full()
    }
}
