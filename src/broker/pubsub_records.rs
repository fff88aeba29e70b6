//! The records a Google Pub/Sub façade keeps beside redq's topics and
//! subscriptions (see `store::pubsub_records`): the façade reads and writes
//! them through the broker, like everything else it stores.

use super::Broker;
use crate::error::Result;
use crate::model::PubSubRecord;

impl Broker {
    pub async fn pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
    ) -> Result<Option<Vec<u8>>> {
        self.store.pubsub_record(project, kind, id).await
    }

    /// Stores a new record; false when `id` has one already.
    pub async fn create_pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
        record: &[u8],
    ) -> Result<bool> {
        self.store
            .create_pubsub_record(project, kind, id, record)
            .await
    }

    pub async fn replace_pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
        record: &[u8],
    ) -> Result<()> {
        self.store
            .replace_pubsub_record(project, kind, id, record)
            .await
    }

    /// False when there was no such record.
    pub async fn delete_pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
    ) -> Result<bool> {
        self.store.delete_pubsub_record(project, kind, id).await
    }

    /// Every record of a kind in the project, by id.
    pub async fn pubsub_records(
        &self,
        project: &str,
        kind: PubSubRecord,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        self.store.pubsub_records(project, kind).await
    }
}
