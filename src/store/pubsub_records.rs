//! Records of the Google Pub/Sub API: each project's topics and
//! subscriptions as opaque bytes by id, in one HASH per kind (see
//! `keys::pubsub_records`). Their messages and leases are a redq topic's.

use super::{Store, keys};
use crate::error::Result;
use crate::model::PubSubRecord;

impl Store {
    pub async fn pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
    ) -> Result<Option<Vec<u8>>> {
        // On every Publish and ack call: the shared connection, no pool checkout.
        let mut conn = self.shared();
        Ok(redis::cmd("HGET")
            .arg(keys::pubsub_records(project, kind))
            .arg(id)
            .query_async(&mut conn)
            .await?)
    }

    /// Stores a new record; false when `id` has one already.
    pub async fn create_pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
        record: &[u8],
    ) -> Result<bool> {
        let mut conn = self.connection().await?;
        Ok(redis::cmd("HSETNX")
            .arg(keys::pubsub_records(project, kind))
            .arg(id)
            .arg(record)
            .query_async(&mut conn)
            .await?)
    }

    pub async fn replace_pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
        record: &[u8],
    ) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: () = redis::cmd("HSET")
            .arg(keys::pubsub_records(project, kind))
            .arg(id)
            .arg(record)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// False when there was no such record.
    pub async fn delete_pubsub_record(
        &self,
        project: &str,
        kind: PubSubRecord,
        id: &str,
    ) -> Result<bool> {
        let mut conn = self.connection().await?;
        Ok(redis::cmd("HDEL")
            .arg(keys::pubsub_records(project, kind))
            .arg(id)
            .query_async(&mut conn)
            .await?)
    }

    /// Every record of a kind in the project, by id.
    pub async fn pubsub_records(
        &self,
        project: &str,
        kind: PubSubRecord,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        let mut conn = self.connection().await?;
        let mut records: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(keys::pubsub_records(project, kind))
            .query_async(&mut conn)
            .await?;
        records.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(records)
    }
}
