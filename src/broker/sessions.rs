//! Dashboard sessions, kept in Redis so that any replica serves them: a
//! random id in the cookie, and in Redis, under that id's hash, the hash of
//! the token it logged in with (so a token removed from the tokens file
//! ends its sessions at the next reload).

use super::Broker;
use crate::error::Result;
use sha2::{Digest, Sha256};
use std::time::Duration;

impl Broker {
    /// Opens a session for the token whose SHA-256 is `token_hash`, for
    /// `ttl`; returns its id, the cookie's value.
    pub async fn open_session(&self, token_hash: [u8; 32], ttl: Duration) -> Result<String> {
        // Two v4 UUIDs: 244 random bits from the OS generator.
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        self.store
            .open_session(&id_hash(&id), &hex::encode(token_hash), ttl)
            .await?;
        Ok(id)
    }

    /// The token hash of the live session `id`; None when it expired or ended.
    pub async fn session(&self, id: &str) -> Result<Option<[u8; 32]>> {
        let stored = self.store.session(&id_hash(id)).await?;
        Ok(stored
            .and_then(|hash| hex::decode(hash).ok())
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok()))
    }

    /// Ends the session `id` (nothing when there is none).
    pub async fn end_session(&self, id: &str) -> Result<()> {
        self.store.end_session(&id_hash(id)).await?;
        Ok(())
    }
}

/// What Redis knows a session by: reading Redis does not give sessions away.
fn id_hash(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}
