//! Dashboard sessions: one STRING per session, holding the SHA-256 of the
//! token it logged in with and expiring with the session, so that any
//! replica serves it and a removed token ends it.

use super::{Store, keys};
use crate::error::Result;
use std::time::Duration;

impl Store {
    /// Records a session (by the hash of its cookie) for `ttl`.
    pub async fn open_session(&self, id_hash: &str, token_hash: &str, ttl: Duration) -> Result<()> {
        let mut conn = self.connection().await?;
        let () = redis::cmd("SET")
            .arg(keys::dashboard_session(id_hash))
            .arg(token_hash)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// The token hash of a live session; None when it expired or ended.
    pub async fn session(&self, id_hash: &str) -> Result<Option<String>> {
        let mut conn = self.connection().await?;
        Ok(redis::cmd("GET")
            .arg(keys::dashboard_session(id_hash))
            .query_async(&mut conn)
            .await?)
    }

    /// Ends a session; false when there was none.
    pub async fn end_session(&self, id_hash: &str) -> Result<bool> {
        let mut conn = self.connection().await?;
        let deleted: u64 = redis::cmd("DEL")
            .arg(keys::dashboard_session(id_hash))
            .query_async(&mut conn)
            .await?;
        Ok(deleted > 0)
    }
}
